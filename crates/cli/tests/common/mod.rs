//! Helpers shared by the CLI's integration tests: running the binary,
//! temporary input files, reading JSON output, the one-line error contract,
//! and stopping a long-running command.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

pub const BIN: &str = "shuffle-shard";

/// The top-level fields of `blast --json`, exactly: one list for every test
/// that checks them.
pub const BLAST_FIELDS: [&str; 11] = [
    "shards",
    "k",
    "tenants",
    "algorithm",
    "pairwise_overlap",
    "scenarios",
    "sweep",
    "waves",
    "load",
    "poison",
    "poison_sweep",
];

/// The note printed when no key is given; checked by a stable fragment.
pub const NOTE: &str = "public recipe key \"shuffle-shard-v1\"";

pub fn shuffle_shard() -> Command {
    Command::cargo_bin(BIN).unwrap()
}

pub fn temp_file(contents: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(contents).unwrap();
    file.flush().unwrap();
    file
}

/// Runs a command that must succeed and returns (stdout, stderr).
pub fn run_ok(command: &mut Command) -> (String, String) {
    let output = command.output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        output.status.success(),
        "status {:?}: {stderr}",
        output.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    (stdout, stderr)
}

/// Runs a command that must succeed with `--json` and parses its stdout.
pub fn run_json(command: &mut Command) -> Value {
    let (stdout, _) = run_ok(command.arg("--json"));
    serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{error}: {stdout}"))
}

pub fn set(names: &[&'static str]) -> BTreeSet<&'static str> {
    names.iter().copied().collect()
}

pub fn shards(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|shard| shard.as_u64().unwrap())
        .collect()
}

pub fn f64_of(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

/// Runs a command expected to fail on bad input and checks the contract:
/// status 2, nothing on stdout, exactly one `error:` line on stderr.
/// Returns stderr.
pub fn assert_one_line_error(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "stdout: {:?}", output.stdout);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

/// Every tenant's shards as `place` computes them, for naive counting.
pub fn placed(args: &[&str], tenants: usize) -> Vec<Vec<u64>> {
    let input: String = (0..tenants).map(|t| format!("tenant-{t}\n")).collect();
    let (stdout, _) = run_ok(shuffle_shard().arg("place").args(args).write_stdin(input));
    stdout
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).unwrap();
            shards(&value["shards"])
        })
        .collect()
}

/// A port nothing listens on (the moment this returns).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends SIGTERM to `child` (the command `name`) and asserts that it exits
/// 0 within ten seconds.
pub fn terminate(mut child: Child, name: &str) {
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}
