//! The README's gateway tour, the quick starts of `docs/gateway.md` (TLS,
//! gRPC, WebSockets, check then reload) and the drill and the rollout of
//! `docs/drills.md` on one machine, run as written: each
//! ```` ```sh ```` block goes to bash unchanged but for three things a test
//! must change: the binary under test is `$ss` (instead of a release
//! build), a temporary directory stands in for `/tmp/ss`, `/tmp/drill` and
//! `/tmp/rollout`,
//! and every fixed
//! port is swapped for a free one, so parallel tests never collide.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The first ```` ```sh ```` block after the line `heading` in `file` (a
/// path from the repository's root).
fn block(file: &str, heading: &str) -> String {
    let path = format!("{}/../../{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let (_, after) = text
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{file} has no heading {heading:?}"));
    let (_, code) = after
        .split_once("```sh\n")
        .unwrap_or_else(|| panic!("{file}: no ```sh block after {heading:?}"));
    code.split_once("\n```")
        .unwrap_or_else(|| panic!("{file}: the block after {heading:?} never ends"))
        .0
        .to_owned()
}

/// The README's tour of the gateway, which every quick start continues.
fn tour() -> String {
    block("README.md", "### Serve: a gateway in front of two shards")
}

/// A quick start of `docs/gateway.md`.
fn quick_start(heading: &str) -> String {
    block("docs/gateway.md", heading)
}

/// Every port written as `127.0.0.1:PORT` or `localhost:PORT`, replaced by
/// a free one (the same free one wherever the same port is written).
/// A port free now, below the kernel's ephemeral range (32768 and up on
/// Linux) and not in `taken`: a port the kernel hands out for `bind(0)` is
/// one it may also hand to any outgoing connection (a health check, curl)
/// before the script's process binds it, and a second `bind(0)` may give
/// the same one again.
///
/// Never one handed to another script of this process either: the quick
/// starts run at once, and a port free when one script picks it may be
/// bound by another's process before its own binds (a backend that then
/// fails to bind goes unnoticed while the other script's answers in its
/// place, until the script's last `kill` finds it gone).
fn unclaimed_port(taken: &[String]) -> u16 {
    use std::hash::{BuildHasher, RandomState};
    static HANDED_OUT: std::sync::Mutex<BTreeSet<u16>> = std::sync::Mutex::new(BTreeSet::new());
    let seed = RandomState::new();
    for attempt in 0_u64..10_000 {
        let port = 20_000 + (seed.hash_one(attempt) % 12_000) as u16;
        if taken.contains(&port.to_string()) {
            continue;
        }
        let mut handed_out = HANDED_OUT.lock().unwrap();
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free port from 20000 to 31999");
}

fn free_ports(script: &str) -> String {
    let mut ports: BTreeMap<String, String> = BTreeMap::new();
    let mut out = String::with_capacity(script.len());
    let mut rest = script;
    while let Some(at) = ["127.0.0.1:", "localhost:"]
        .iter()
        .filter_map(|host| rest.find(host).map(|at| at + host.len()))
        .min()
    {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            let port = &rest[..digits];
            let taken: Vec<String> = ports.values().cloned().collect();
            let free = ports
                .entry(port.to_owned())
                .or_insert_with(|| unclaimed_port(&taken).to_string());
            out.push_str(free);
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// Runs `blocks` as one bash script (`set -euo pipefail`) in a temporary
/// directory and returns its stdout; fails with its output when it fails.
/// Whatever it left running is killed when it ends, by the shell's own job
/// list (a job already gone is no failure). `timeout` bounds a hang, not the run's speed.
fn run(blocks: &[String]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let binary = assert_cmd::cargo::cargo_bin("shuffle-shard");
    // `|| true`: under `set -e` a trap's failing command sets the script's
    // exit status, and `kill` fails for a job that already ended (the
    // script's own last line kills what it started): that made a passing
    // script end with status 1, now and then, as processes died in time.
    let mut script =
        String::from("trap 'kill $(jobs -p) 2>/dev/null || true; wait || true' EXIT\n");
    for line in blocks.join("\n").lines() {
        if line.trim() == "cargo build --release" {
            continue; // the test's binary is built already
        }
        if line.starts_with("ss=$PWD/target/release/shuffle-shard") {
            script.push_str(&format!("ss='{}'\n", binary.display()));
            continue;
        }
        let here = dir.path().display().to_string();
        script.push_str(
            &line
                .replace("/tmp/ss", &here)
                .replace("/tmp/drill", &here)
                .replace("/tmp/rollout", &here),
        );
        script.push('\n');
    }
    let script = free_ports(&script);
    let output = Command::new("timeout")
        .args(["300", "bash", "-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the script ended with {}:\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    stdout
}

/// The JSON lines of `stdout`.
fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn the_readme_gateway_tour_runs_as_written() {
    let tour = tour();
    assert!(tour.contains("cargo build --release"), "{tour}");
    assert!(
        tour.contains("kill -HUP \"$gateway\"") && !tour.contains("pkill"),
        "the tour reloads by PID: {tour}"
    );
    let stdout = run(&[tour]);
    assert!(
        stdout.contains("configuration OK: gateway.toml: 1 cell, 2 shards, 1 tenant"),
        "{stdout}"
    );
    let lines = json_lines(&stdout);
    // The shard's answer, then `place`'s line for acme.
    assert_eq!(lines[0]["tenant"], "acme", "{stdout}");
    assert!(["s0", "s1"].contains(&lines[0]["shard"].as_str().unwrap()));
    assert_eq!(lines[1]["tenant"], "acme", "{stdout}");
    // Only the reload opened the status page to a request without a token.
    assert!(stdout.contains("<p id=\"banner\""), "{stdout}");
    assert!(stdout.contains("All 2 shards up"), "{stdout}");
}

#[test]
fn the_tls_quick_start_runs_as_written_and_its_log_names_every_listener() {
    let stdout = run(&[tour(), quick_start("### TLS in five minutes")]);
    // What `grep -o 'listener=.*' gateway.log` printed.
    for listener in ["plaintext", "tls", "admin"] {
        assert!(
            stdout.contains(&format!("listener=\"{listener}\" addr=127.0.0.1:")),
            "{listener}: {stdout}"
        );
    }
    assert!(
        stdout.contains("certificates=localhost, 127.0.0.1"),
        "{stdout}"
    );
    // The tour's answer over plaintext, then the one over TLS.
    let answers: Vec<_> = json_lines(&stdout)
        .into_iter()
        .filter(|line| line.get("shard").is_some())
        .collect();
    assert_eq!(answers.len(), 2, "{stdout}");
    assert_eq!(answers[1]["tenant"], "acme", "{stdout}");
}

#[test]
fn the_grpc_quick_start_runs_as_written() {
    let stdout = run(&[tour(), quick_start("### gRPC in five minutes")]);
    let answers: Vec<_> = json_lines(&stdout)
        .into_iter()
        .filter(|line| line.get("text").is_some())
        .collect();
    // `--text hello` once, then `--count 3`.
    assert_eq!(answers.len(), 4, "{stdout}");
    assert_eq!(answers[0]["text"], "hello");
    for answer in &answers {
        assert_eq!(answer["tenant"], "acme", "{answer}");
        assert!(["g0", "g1"].contains(&answer["shard"].as_str().unwrap()));
    }
}

#[test]
fn the_websocket_quick_start_echoes_through_the_gateway_as_written() {
    let stdout = run(&[tour(), quick_start("### WebSockets in five minutes")]);
    let echoes: Vec<_> = json_lines(&stdout)
        .into_iter()
        .filter(|line| line.get("index").is_some())
        .collect();
    assert_eq!(echoes.len(), 3, "{stdout}");
    for (index, echo) in echoes.iter().enumerate() {
        assert_eq!(echo["text"], "hello", "{stdout}");
        assert_eq!(echo["index"], index, "{stdout}");
    }
    // The wrong key was refused before any echo.
    assert!(stdout.contains("refused, as it should be"), "{stdout}");
}

#[test]
fn the_check_then_reload_quick_start_runs_as_written() {
    let stdout = run(&[tour(), quick_start("### Check, then reload")]);
    assert_eq!(
        stdout.matches("configuration OK").count(),
        2,
        "the tour's check and this one: {stdout}"
    );
}

#[test]
fn the_drill_on_one_machine_runs_as_written_and_passes() {
    let stdout = run(&[block("docs/drills.md", "## Try it on one machine")]);
    assert!(stdout.contains("Drill: 300 tenants"), "{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");
}

#[test]
fn the_rollout_on_one_machine_runs_as_written_passing_a_good_build_and_stopping_a_bad_one() {
    let stdout = run(&[block("docs/drills.md", "### A rollout on one machine")]);
    let (good, bad) = stdout
        .split_once("Every wave passed its gates.")
        .unwrap_or_else(|| panic!("the good build did not pass: {stdout}"));
    assert!(good.contains("Rollout: 3 waves, 200 tenants"), "{stdout}");
    assert_eq!(good.matches("  done  ").count(), 3, "{stdout}");
    assert!(bad.contains("Stopped at wave wave-1:"), "{stdout}");
    // Its own shards give it away: failing attempts once ready, or (when
    // its checks fail too often) never ready.
    assert!(
        bad.contains("  gate wave-shards: ") || bad.contains("  gate ready: "),
        "{stdout}"
    );
    assert_eq!(bad.matches("not started").count(), 2, "{stdout}");
    assert!(bad.contains("rollout exited 1"), "{stdout}");
}
