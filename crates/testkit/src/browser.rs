//! Headless Chromium for browser tests.
//!
//! Chromium comes from `$CHROMIUM` or `chromium` / `chromium-browser` on the
//! `PATH`. Without one a test skips as [`crate::skip`] says (CI fails
//! instead).
//! Chromium runs with the flags this workplace's closed network needs, in a
//! fresh profile, its output in files (nothing has to drain pipes while we
//! wait), and is waited for by polling against a deadline.
//!
//! [`dump_dom`] and [`screenshot`] are the two runs every page test makes,
//! with the checks that the run worked; [`keep`] saves what a test saw for
//! a person to look at.

use std::env;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long one Chromium run may take. A cold start on a busy CI machine
/// takes seconds, not minutes.
const TIMEOUT: Duration = Duration::from_secs(120);

/// How often to ask whether Chromium has exited.
const POLL: Duration = Duration::from_millis(25);

/// The browser to use. `None` means the caller should return: the skip has
/// been reported. Panics when a browser is required and missing.
pub fn find_or_skip() -> Option<PathBuf> {
    if let Some(path) = env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let found = env::var_os("PATH").and_then(|path| {
        env::split_paths(&path)
            .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        crate::skip::missing(
            "chromium",
            "apt-get install chromium, or set CHROMIUM to a Chromium binary",
        );
    }
    found
}

/// One finished Chromium run.
#[derive(Debug)]
pub struct Run {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it printed (the DOM, with `--dump-dom`).
    pub stdout: String,
    /// Its diagnostics, for failure messages.
    pub stderr: String,
}

/// Runs Chromium headless on `target` (a URL) with `extra` arguments, in a
/// fresh profile under `dir` named after `name`. Blocking: from async code,
/// call it on `spawn_blocking` so the server under test keeps serving.
pub fn run(browser: &Path, dir: &Path, name: &str, target: &str, extra: &[String]) -> Run {
    let profile = dir.join(format!("profile-{name}"));
    let (stdout, stderr) = (
        dir.join(format!("{name}.stdout")),
        dir.join(format!("{name}.stderr")),
    );
    fs::create_dir_all(&profile).unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(target)
        .stdin(Stdio::null())
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .unwrap_or_else(|error| panic!("could not start {}: {error}", browser.display()));
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not finish within {TIMEOUT:?}; its stderr:\n{}",
                browser.display(),
                fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        thread::sleep(POLL);
    };
    Run {
        status,
        stdout: fs::read_to_string(&stdout).unwrap_or_default(),
        stderr: fs::read_to_string(&stderr).unwrap_or_default(),
    }
}

/// The DOM Chromium parsed from `target` (`--dump-dom`). Panics, with
/// Chromium's stderr, unless it ran and printed one.
pub fn dump_dom(browser: &Path, dir: &Path, target: &str) -> String {
    let run = run(browser, dir, "dom", target, &["--dump-dom".to_owned()]);
    assert!(
        run.status.success() && !run.stdout.is_empty(),
        "chromium --dump-dom failed ({}); stderr:\n{}",
        run.status,
        run.stderr
    );
    run.stdout
}

/// A screenshot of `target` in a window of `width` × `height` pixels, as
/// PNG bytes. Panics unless Chromium ran and wrote a PNG of that size: the
/// page laid out and painted. Whether it painted more than a blank page is
/// the caller's to judge (by the image's size).
pub fn screenshot(
    browser: &Path,
    dir: &Path,
    target: &str,
    (width, height): (u32, u32),
) -> Vec<u8> {
    let png = dir.join("screenshot.png");
    let run = run(
        browser,
        dir,
        "shot",
        target,
        &[
            format!("--screenshot={}", png.display()),
            format!("--window-size={width},{height}"),
            "--hide-scrollbars".to_owned(),
        ],
    );
    assert!(
        run.status.success(),
        "chromium --screenshot failed ({}); stderr:\n{}",
        run.status,
        run.stderr
    );
    let image = fs::read(&png).unwrap_or_else(|error| panic!("no screenshot at {png:?}: {error}"));
    assert_eq!(
        &image[..8],
        b"\x89PNG\r\n\x1a\n",
        "the screenshot is not a PNG"
    );
    // The PNG's IHDR chunk: width and height, big-endian, after the
    // signature and the chunk's length and type.
    let size = |at: usize| u32::from_be_bytes(image[at..at + 4].try_into().unwrap());
    assert_eq!((size(16), size(20)), (width, height));
    image
}

/// Writes `files` (name, contents) into the directory the environment
/// variable `var` names, when it is set, so a person can look at what a
/// test saw.
pub fn keep(var: &str, files: &[(&str, &[u8])]) {
    let Some(dir) = env::var_os(var) else {
        return;
    };
    let dir = PathBuf::from(dir);
    fs::create_dir_all(&dir).unwrap();
    for (name, contents) in files {
        fs::write(dir.join(name), contents).unwrap();
    }
}
