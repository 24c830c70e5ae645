//! End-to-end tests of `shuffle-shard place`, each run through the real
//! binary: output format, keys, stdin streaming, zones, errors and exit
//! statuses, and quiet exit on a closed pipe.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{self, Stdio};

use assert_cmd::Command;
use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

use common::{BIN, NOTE, assert_one_line_error, shards, shuffle_shard, temp_file};

/// Lines of `/work/shared/vectors/recipe-12-1.jsonl` with random keys and
/// n ≤ 1000, copied so the tests do not depend on files outside the crate:
/// (key as hex, tenant, n, k, shards). The third key ends in byte 0x0a, a
/// newline, which the key file must keep.
const VECTORS: [(&str, &str, u32, u32, &[u32]); 3] = [
    (
        "a5477206588883ba216aa58ac8f35dcd2924f7ac9ebc51c81781926e3823e64db7974682680116f439d18edde1d76daef67f41bd1a36d6b1607a47e6715a9cb338",
        "tenant-11030",
        1000,
        6,
        &[936, 487, 687, 398, 817, 789],
    ),
    (
        "524244c096dbe0476227e00a10abf959",
        "-æƯƲȽʤÊʇə\u{90}ěʴǩ",
        10,
        4,
        &[3, 9, 4, 6],
    ),
    (
        "a4c5b9d0969b0a36cba44dded682ac0a",
        "Œ~êǏ{˒ŵãÙƴɿǃ8ĸkƙÇŰiɥìǅ}ĨĆǛw@˴ʤȁʖXî\u{8d}ˑÃȻǯ\u{8c}",
        1000,
        5,
        &[972, 944, 164, 562, 447],
    ),
];

fn hex_decode(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn stdout_lines(output: &process::Output) -> Vec<Value> {
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Runs a command that clap itself rejects: status 2, no panic, no output.
fn assert_usage_error(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(output.stdout.is_empty());
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn default_key_reproduces_the_recipe_and_says_so_once() {
    let output = shuffle_shard()
        .args(["place", "--shards", "10", "--k", "4", "a"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout, b"{\"tenant\":\"a\",\"shards\":[0,9,2,1]}\n");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.matches(NOTE).count(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    // Many tenants still get the note only once.
    let output = shuffle_shard()
        .args(["place", "--shards", "10", "--k", "4", "a", "b", "c"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.matches(NOTE).count(), 1, "{stderr}");
}

#[test]
fn recipe_key_file_matches_the_default_without_a_note() {
    let file = temp_file(b"shuffle-shard-v1");
    let output = shuffle_shard()
        .args(["place", "--shards", "10", "--k", "4", "--key-file"])
        .arg(file.path())
        .arg("a")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout, b"{\"tenant\":\"a\",\"shards\":[0,9,2,1]}\n");
    assert!(
        output.stderr.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn key_files_reproduce_recipe_vectors() {
    for (key_hex, tenant, n, k, expected) in VECTORS {
        let file = temp_file(&hex_decode(key_hex));
        let output = shuffle_shard()
            .args(["place", "--shards", &n.to_string(), "--k", &k.to_string()])
            .arg("--key-file")
            .arg(file.path())
            // One tenant starts with '-', so end the options explicitly.
            .args(["--", tenant])
            .output()
            .unwrap();
        assert!(output.status.success(), "{tenant}: {output:?}");
        assert!(output.stderr.is_empty(), "{tenant}: {output:?}");
        let lines = stdout_lines(&output);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["tenant"], tenant);
        let expected: Vec<u64> = expected.iter().map(|&shard| u64::from(shard)).collect();
        assert_eq!(shards(&lines[0]["shards"]), expected, "{tenant}");
        assert!(lines[0].get("ids").is_none());
    }
}

#[test]
fn key_env_reads_hex() {
    let (key_hex, tenant, n, k, expected) = VECTORS[1];
    let output = shuffle_shard()
        .env("SHUFFLE_SHARD_CLI_TEST_KEY", key_hex.to_uppercase())
        .args(["place", "--shards", &n.to_string(), "--k", &k.to_string()])
        .args(["--key-env", "SHUFFLE_SHARD_CLI_TEST_KEY", "--", tenant])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(output.stderr.is_empty());
    let expected: Vec<u64> = expected.iter().map(|&shard| u64::from(shard)).collect();
    assert_eq!(shards(&stdout_lines(&output)[0]["shards"]), expected);
}

#[test]
fn bad_key_env_is_one_line_and_not_echoed() {
    let stderr = assert_one_line_error(
        shuffle_shard()
            .env("SHUFFLE_SHARD_CLI_TEST_BAD", "TOPSECRETKEY")
            .args(["place", "--shards", "4", "--k", "2"])
            .args(["--key-env", "SHUFFLE_SHARD_CLI_TEST_BAD", "a"]),
    );
    assert!(stderr.contains("SHUFFLE_SHARD_CLI_TEST_BAD"), "{stderr}");
    assert!(!stderr.contains("TOPSECRET"), "{stderr}");

    let stderr = assert_one_line_error(
        shuffle_shard()
            .env_remove("SHUFFLE_SHARD_CLI_TEST_UNSET")
            .args(["place", "--shards", "4", "--k", "2"])
            .args(["--key-env", "SHUFFLE_SHARD_CLI_TEST_UNSET", "a"]),
    );
    assert!(stderr.contains("not set"), "{stderr}");
}

/// The lines `place --shards 10 --k 4` prints for tenants read from
/// `stdin`, which must succeed.
fn place_stdin(stdin: &str) -> Vec<Value> {
    let output = shuffle_shard()
        .args(["place", "--shards", "10", "--k", "4"])
        .write_stdin(stdin)
        .output()
        .unwrap();
    assert!(output.status.success());
    stdout_lines(&output)
}

/// The `tenant` field of each line.
fn tenants_of(lines: &[Value]) -> Vec<Value> {
    lines.iter().map(|line| line["tenant"].clone()).collect()
}

#[test]
fn stdin_tenants_come_out_in_order() {
    let lines = place_stdin("a\nb\nc\n");
    assert_eq!(tenants_of(&lines), ["a", "b", "c"]);
    assert_eq!(
        lines[0],
        serde_json::json!({"tenant": "a", "shards": [0, 9, 2, 1]})
    );
}

#[test]
fn stdin_handles_crlf_empty_lines_and_a_missing_final_newline() {
    let lines = place_stdin("a\r\n\n\r\nb\nc");
    assert_eq!(tenants_of(&lines), ["a", "b", "c"]);
}

#[test]
fn empty_tenant_argument_is_placed() {
    // The recipe's vectors include the empty tenant; stdin skips empty lines,
    // so an empty argument is the way to ask for it.
    let output = shuffle_shard()
        .args(["place", "--shards", "10", "--k", "4", ""])
        .output()
        .unwrap();
    assert!(output.status.success());
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["tenant"], "");
}

#[test]
fn rendezvous_prints_ids_matching_indices() {
    let output = shuffle_shard()
        .args([
            "place",
            "--shards",
            "32",
            "--k",
            "5",
            "--algorithm",
            "rendezvous",
        ])
        .args(["t1", "t2", "t3"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 3);
    for line in &lines {
        let shards = shards(&line["shards"]);
        assert_eq!(shards.len(), 5);
        let ids: Vec<String> = line["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect();
        let expected: Vec<String> = shards.iter().map(u64::to_string).collect();
        assert_eq!(ids, expected);
    }
}

#[test]
fn zones_spread_shards_across_zones() {
    let tenants: String = (0..50).map(|i| format!("tenant-{i}\n")).collect();
    for extra in [&[][..], &["--shards", "4"][..]] {
        let output = shuffle_shard()
            .args([
                "place",
                "--zones",
                "a:2,b:2",
                "--k",
                "2",
                "--algorithm",
                "rendezvous",
            ])
            .args(extra)
            .write_stdin(tenants.clone())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let lines = stdout_lines(&output);
        assert_eq!(lines.len(), 50);
        for line in &lines {
            let shards = shards(&line["shards"]);
            assert_eq!(shards.len(), 2);
            // Shards 0-1 are zone a, 2-3 zone b.
            let zones: Vec<bool> = shards.iter().map(|&shard| shard < 2).collect();
            assert_ne!(zones[0], zones[1], "{line}");
        }
    }
}

#[test]
fn bad_input_fails_with_one_line_and_status_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--shards", "10", "--k", "0", "a"], "k = 0"),
        (&["--shards", "10", "--k", "11", "a"], "k = 11"),
        (&["--shards", "0", "--k", "1", "a"], "--shards 0"),
        (
            &[
                "--shards",
                "10",
                "--k",
                "2",
                "--key-file",
                "/nonexistent/shuffle-shard/key",
                "a",
            ],
            "/nonexistent/shuffle-shard/key",
        ),
        (
            &["--zones", "a:2,b:x", "--k", "1", "a"],
            "invalid zone spec",
        ),
        (
            &["--zones", "a:2,,b:2", "--k", "1", "a"],
            "invalid zone spec",
        ),
        (
            &["--zones", "a:2,b:2", "--shards", "5", "--k", "1", "a"],
            "--shards 5",
        ),
        (&["--zones", "a:4000000000", "--k", "1", "a"], "4000000000"),
        (
            &["--shards", "10", "--k", "2", "--algorithm", "modulo", "a"],
            "unknown algorithm",
        ),
    ];
    for (args, fragment) in cases {
        let stderr = assert_one_line_error(shuffle_shard().arg("place").args(*args));
        assert!(stderr.contains(fragment), "{args:?}: {stderr}");
    }
}

#[test]
fn invalid_utf8_on_stdin_names_the_line() {
    let stderr = assert_one_line_error(
        shuffle_shard()
            .args(["place", "--shards", "10", "--k", "2"])
            .write_stdin(vec![0xff, 0xfe, b'\n']),
    );
    assert!(
        stderr.contains("stdin line 1 is not valid UTF-8"),
        "{stderr}"
    );

    // Lines before the bad one are still printed.
    let file = temp_file(b"k");
    let output = shuffle_shard()
        .args(["place", "--shards", "10", "--k", "2", "--key-file"])
        .arg(file.path())
        .write_stdin(b"a\n\nb\n\xff\n".to_vec())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout_lines(&output).len(), 2);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr,
        "error: stdin line 4 is not valid UTF-8; tenant ids must be UTF-8\n"
    );
}

#[test]
fn empty_key_file_is_refused() {
    let file = temp_file(b"");
    let stderr = assert_one_line_error(
        shuffle_shard()
            .args(["place", "--shards", "10", "--k", "2", "--key-file"])
            .arg(file.path())
            .arg("a"),
    );
    assert!(stderr.contains("is empty"), "{stderr}");
}

#[cfg(unix)]
#[test]
fn invalid_utf8_argument_is_refused() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    let stderr = assert_one_line_error(
        shuffle_shard()
            .args(["place", "--shards", "10", "--k", "2", "ok"])
            .arg(OsStr::from_bytes(b"bad\xff")),
    );
    assert!(stderr.contains("tenant argument 2"), "{stderr}");
}

#[test]
fn usage_errors_exit_2_without_panicking() {
    let cases: &[&[&str]] = &[
        &["--k", "2", "a"],
        &["--shards", "10", "a"],
        &["--shards", "-1", "--k", "2", "a"],
        &["--shards", "10", "--k", "99999999999", "a"],
        &["--shards", "10", "--k", "2", "--no-such-flag", "a"],
        &[
            "--shards",
            "10",
            "--k",
            "2",
            "--key-file",
            "x",
            "--key-env",
            "Y",
            "a",
        ],
    ];
    for args in cases {
        assert_usage_error(shuffle_shard().arg("place").args(*args));
    }
    assert_usage_error(&mut shuffle_shard());
}

#[test]
fn key_file_contents_never_reach_stderr() {
    let file = temp_file(b"TOPSECRETKEY");
    // Each case also names the key file, and is refused for another reason.
    let cases: &[&[&str]] = &[
        &["--shards", "10", "--k", "0", "a"],
        &["--zones", "a:2", "--shards", "3", "--k", "1", "a"],
        &["--shards", "10", "--k", "2", "--algorithm", "x", "a"],
        &["--shards", "10", "--k", "2", "--key-env", "PATH", "a"],
    ];
    for args in cases {
        let output = shuffle_shard()
            .args(["place", "--key-file"])
            .arg(file.path())
            .args(*args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        for stream in [&output.stderr, &output.stdout] {
            let text = String::from_utf8_lossy(stream);
            assert!(!text.contains("TOPSECRET"), "{args:?}: {text}");
        }
    }
}

#[test]
fn help_documents_flags_and_examples() {
    let output = shuffle_shard().args(["place", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for fragment in [
        "--shards",
        "--k",
        "--algorithm",
        "hmac-modulo",
        "rendezvous",
        "--key-file",
        "--key-env",
        "--zones",
        "empty lines are skipped",
        "Examples:",
    ] {
        assert!(help.contains(fragment), "missing {fragment:?} in:\n{help}");
    }
}

#[test]
fn closed_stdout_ends_quietly_with_success() {
    let mut child = process::Command::cargo_bin(BIN)
        .unwrap()
        .args(["place", "--shards", "64", "--k", "6"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Feed stdin from a thread: the child stops reading once its stdout is
    // gone, after which these writes fail, which is expected.
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let mut batch = String::new();
        for i in 0..200_000 {
            batch.push_str(&format!("tenant-{i}\n"));
            if batch.len() > 64 * 1024 {
                if stdin.write_all(batch.as_bytes()).is_err() {
                    return;
                }
                batch.clear();
            }
        }
        let _ = stdin.write_all(batch.as_bytes());
    });

    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.starts_with("{\"tenant\":\"tenant-0\""), "{first}");
    drop(stdout);

    let output = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
}
