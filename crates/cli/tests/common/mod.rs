//! Helpers shared by the analyser commands' integration tests: running the
//! binary, temporary input files, and reading JSON output.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::Write as _;

use assert_cmd::Command;
use serde_json::Value;

const BIN: &str = "shuffle-shard";

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

pub fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect()
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
