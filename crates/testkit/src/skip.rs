//! "Skip unless required": what a test does when a system tool it drives
//! (Chromium, redis-server, promtool) is not installed.
//!
//! On a developer's machine the test skips, and says so: a line naming the
//! test and the missing tool goes to the process's stderr and is appended
//! to `skipped-tests.txt` in the target directory, which `.ci/run` prints
//! at the end (the test harness shows a passing test's stderr to nobody).
//! With `SHUFFLE_SHARD_REQUIRE_ALL=1` (set by `.ci/run`) the test fails
//! instead, so CI cannot pass without the tools.

use std::env;
use std::fs::OpenOptions;
use std::io::{self, Write as _};
use std::path::PathBuf;

/// The one environment variable: `1` makes a missing tool fail the test;
/// unset, empty or `0` makes it skip.
pub const REQUIRE_ALL: &str = "SHUFFLE_SHARD_REQUIRE_ALL";

/// The file under the target directory that collects skip lines.
pub const SKIPPED_FILE: &str = "skipped-tests.txt";

/// Reports that `tool` is missing for the running test: panics when
/// [`REQUIRE_ALL`] is `1`, otherwise prints and records the skip, and the
/// caller returns. `install` says how to get the tool, e.g. `apt-get
/// install chromium`.
pub fn missing(tool: &str, install: &str) {
    let test = test_name();
    if required() {
        panic!("{test}: {tool} not found and {REQUIRE_ALL}=1 requires it; {install}");
    }
    let line = skip_line(&test, tool, install);
    // Straight to the process's stderr: the harness captures `eprintln!`.
    let _ = writeln!(io::stderr(), "{line}");
    let file = skipped_file()
        .and_then(|path| OpenOptions::new().create(true).append(true).open(path).ok());
    if let Some(mut file) = file {
        // One write per line, so lines from parallel tests do not mix.
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

/// Whether a missing tool fails the test. Panics on a value that is
/// neither `1` nor `0`, rather than guess what it meant.
fn required() -> bool {
    match env::var(REQUIRE_ALL) {
        Err(env::VarError::NotPresent) => false,
        Ok(value) if value.is_empty() || value == "0" => false,
        Ok(value) if value == "1" => true,
        Ok(value) => panic!(
            "{REQUIRE_ALL}={value:?}: set it to 1 (a missing tool fails the test) or 0 (it skips)"
        ),
        Err(env::VarError::NotUnicode(_)) => {
            panic!("{REQUIRE_ALL} is not UTF-8: set it to 1 or 0")
        }
    }
}

/// The skip line for `test` missing `tool`.
pub fn skip_line(test: &str, tool: &str, install: &str) -> String {
    format!("SKIPPED {test}: {tool} not found ({install}); set {REQUIRE_ALL}=1 to fail instead")
}

/// The running test's name: the harness names each test's thread after it.
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => "a test".to_owned(),
    }
}

/// `skipped-tests.txt` in the target directory, found from the test
/// binary's path (`<target>/<profile>/deps/<test>`).
fn skipped_file() -> Option<PathBuf> {
    let exe = env::current_exe().ok()?;
    let deps = exe.parent()?;
    if deps.file_name()? != "deps" {
        return None;
    }
    Some(deps.parent()?.parent()?.join(SKIPPED_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skip_line_names_the_test_the_tool_and_the_fix() {
        assert_eq!(
            skip_line(
                "browser_status_page",
                "chromium",
                "apt-get install chromium"
            ),
            "SKIPPED browser_status_page: chromium not found (apt-get install chromium); \
             set SHUFFLE_SHARD_REQUIRE_ALL=1 to fail instead"
        );
    }

    #[test]
    fn the_test_name_is_the_harness_thread_name() {
        assert_eq!(
            test_name(),
            "skip::tests::the_test_name_is_the_harness_thread_name"
        );
    }
}
