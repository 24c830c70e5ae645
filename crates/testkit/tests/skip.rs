//! "Skip unless required", run as a developer and as CI run it: this test
//! binary runs a copy of itself, with no Chromium to be found, on a probe
//! test that looks for one, and checks what the probe printed, recorded and
//! returned with `SHUFFLE_SHARD_REQUIRE_ALL` unset, `1`, and misspelt.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

/// Held while a copy is written and while a child is started: a child
/// forked while another test's copy is open for writing holds that file
/// open until it execs, and exec'ing the copy then fails ("text file busy").
static FORK: Mutex<()> = Mutex::new(());

/// The probe: looks for Chromium as every browser test does, and passes
/// only when the look-up says "skip".
#[test]
#[ignore = "run by the tests below, in a copy of this binary without Chromium"]
fn chromium_probe() {
    assert!(testkit::browser::find_or_skip().is_none());
}

/// A copy of this test binary at `<dir>/debug/deps/`, so that the skip
/// file it writes lands in `<dir>`, not in the real target directory.
fn copy_of_this_binary(name: &str) -> (PathBuf, PathBuf) {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("skip-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let deps = dir.join("debug").join("deps");
    fs::create_dir_all(&deps).unwrap();
    let exe = std::env::current_exe().unwrap();
    let copy = deps.join(exe.file_name().unwrap());
    let _fork = FORK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    fs::copy(&exe, &copy).unwrap();
    (dir, copy)
}

/// Runs the probe in `copy` with an empty PATH, no `CHROMIUM`, and
/// `SHUFFLE_SHARD_REQUIRE_ALL` set to `require` (or unset).
fn probe(copy: &Path, require: Option<&str>) -> Output {
    let mut command = Command::new(copy);
    command
        .args(["--ignored", "--exact", "chromium_probe", "--nocapture"])
        .env("PATH", "")
        .env_remove("CHROMIUM")
        .env_remove("SHUFFLE_SHARD_REQUIRE_ALL");
    if let Some(value) = require {
        command.env("SHUFFLE_SHARD_REQUIRE_ALL", value);
    }
    let child = {
        let _fork = FORK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    child.wait_with_output().unwrap()
}

const SKIP_LINE: &str = "SKIPPED chromium_probe: chromium not found (apt-get install chromium, \
     or set CHROMIUM to a Chromium binary); set SHUFFLE_SHARD_REQUIRE_ALL=1 to fail instead";

#[test]
fn a_missing_tool_skips_naming_the_test_and_the_tool_and_is_recorded() {
    let (dir, copy) = copy_of_this_binary("skips");
    for run in 1..=2 {
        let output = probe(&copy, None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "run {run}: {stderr}");
        assert!(stderr.contains(SKIP_LINE), "run {run}: {stderr}");
    }
    // One line per skip, appended, for `.ci/run` to print at the end.
    let recorded = fs::read_to_string(dir.join("skipped-tests.txt")).unwrap();
    assert_eq!(recorded, format!("{SKIP_LINE}\n{SKIP_LINE}\n"));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn required_tools_fail_the_test_and_the_variable_is_read_one_way() {
    let (dir, copy) = copy_of_this_binary("required");
    let output = probe(&copy, Some("1"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "chromium_probe: chromium not found and SHUFFLE_SHARD_REQUIRE_ALL=1 requires it"
        ),
        "{stderr}"
    );
    // "0" and "" skip like unset; anything else is refused, not guessed at.
    for value in ["0", ""] {
        let output = probe(&copy, Some(value));
        assert!(output.status.success(), "{value:?}");
    }
    let output = probe(&copy, Some("yes"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("SHUFFLE_SHARD_REQUIRE_ALL=\"yes\": set it to 1"),
        "{stderr}"
    );
    // Only the two runs that skipped recorded a line.
    let recorded = fs::read_to_string(dir.join("skipped-tests.txt")).unwrap();
    assert_eq!(recorded, format!("{SKIP_LINE}\n{SKIP_LINE}\n"));
    let _ = fs::remove_dir_all(&dir);
}
