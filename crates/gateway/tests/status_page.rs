//! The status page in headless Chromium: after an operator fails two
//! shards (one tenant's whole subset) and some traffic, the page the
//! browser parsed shows every shard with its health, the failed ones
//! marked failed, the live blast radius the analyser computes, and the
//! worst tenant first; and a screenshot paints a real page.
//!
//! Chromium comes from `$CHROMIUM` or `chromium` / `chromium-browser` on the
//! `PATH`. Without one the test skips with a message on stderr, unless
//! `SHUFFLE_SHARD_REQUIRE_BROWSER=1` (set by `.ci/run`) makes that a failure.
//! `SHUFFLE_SHARD_KEEP_STATUS_PAGE=DIR` keeps the DOM and the screenshot
//! there, for looking at them.
//!
//! The Chromium helpers are a trimmed copy of those in
//! `crates/report/tests/browser.rs` (integration tests of two crates cannot
//! share a module without a crate of their own), with a URL instead of a
//! file and no dependency on the report crate.

use std::env;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use http::StatusCode;

use crate::admin::{TOKEN, analyser, options};
use crate::util::{Fixture, Options};

/// How long one Chromium run may take before the test gives up on it.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

/// How often to ask whether Chromium has exited while waiting for it.
const POLL: Duration = Duration::from_millis(25);

/// The browser to use, if any.
fn find_chromium() -> Option<PathBuf> {
    if let Some(path) = env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs Chromium headless on `url` with `extra` arguments, its output into
/// files, in a fresh profile; waits (polling against a deadline) for it to
/// exit. Blocking: call it from `spawn_blocking`.
fn run_chromium(
    browser: &Path,
    profile: &Path,
    url: &str,
    extra: &[String],
    stdout: &Path,
    stderr: &Path,
) -> ExitStatus {
    fs::create_dir_all(profile).unwrap();
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
        .arg(url)
        .stdin(Stdio::null())
        .stdout(File::create(stdout).unwrap())
        .stderr(File::create(stderr).unwrap())
        .spawn()
        .unwrap_or_else(|error| panic!("could not start {}: {error}", browser.display()));
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not finish within {BROWSER_TIMEOUT:?}; its stderr:\n{}",
                browser.display(),
                fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        thread::sleep(POLL);
    }
}

/// Runs Chromium on a blocking thread, so the gateway under test keeps
/// serving the page on the runtime's threads.
async fn chromium(
    browser: &Path,
    dir: &Path,
    name: &str,
    url: &str,
    extra: Vec<String>,
) -> (ExitStatus, PathBuf, PathBuf) {
    let (browser, profile, url) = (
        browser.to_owned(),
        dir.join(format!("profile-{name}")),
        url.to_owned(),
    );
    let (stdout, stderr) = (
        dir.join(format!("{name}.stdout")),
        dir.join(format!("{name}.stderr")),
    );
    let (out, err) = (stdout.clone(), stderr.clone());
    let status = tokio::task::spawn_blocking(move || {
        run_chromium(&browser, &profile, &url, &extra, &out, &err)
    })
    .await
    .unwrap();
    (status, stdout, stderr)
}

/// The serialised element that starts with `start`, up to `end`.
fn element<'a>(dom: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = dom.find(start)?;
    let to = dom[from..].find(end)?;
    Some(&dom[from..from + to + end.len()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shows_the_shard_grid_the_blast_radius_and_the_worst_tenants() {
    let Some(browser) = find_chromium() else {
        if env::var("SHUFFLE_SHARD_REQUIRE_BROWSER").as_deref() == Ok("1") {
            panic!(
                "SHUFFLE_SHARD_REQUIRE_BROWSER=1 but no Chromium was found: install Debian's \
                 `chromium`, put `chromium` or `chromium-browser` on PATH, or set CHROMIUM"
            );
        }
        // Straight to the process's stderr: the test harness captures
        // `eprintln!` from passing tests, and a skip must be seen.
        let _ = writeln!(
            io::stderr(),
            "SKIPPED: chromium not found; set SHUFFLE_SHARD_REQUIRE_BROWSER=1 to make this fatal"
        );
        return;
    };

    let fixture = Fixture::start(Options {
        shards: 12,
        tenants: 200,
        admin: "status_page_without_token = true\n".into(),
        ..options()
    })
    .await;
    // Fail one tenant's whole subset: it is fully down, others degraded.
    let victim = "tenant-0";
    let failed = fixture.subset_ids(victim);
    for shard in &failed {
        fixture
            .admin_json("POST", &format!("/admin/shards/{shard}/fail"))
            .await;
    }
    let failed_refs: Vec<&str> = failed.iter().map(String::as_str).collect();
    let (fully_down, degraded, down_list) = analyser(&fixture, &failed_refs);
    assert!(down_list.contains(&victim.to_owned()));
    // Traffic: everyone once, the victim (all 503s) a few times.
    for (tenant, _) in fixture.tenants.iter().take(60) {
        let (status, _) = fixture.get(tenant, "/").await;
        assert!(
            status == StatusCode::OK || down_list.contains(tenant),
            "{tenant}: {status}"
        );
    }
    for _ in 0..3 {
        assert_eq!(
            fixture.get(victim, "/").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    // The page needs no token (configured so), the rest of the API does.
    let (status, _, _) = fixture.admin("GET", "/", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = fixture.admin("GET", "/admin/shards", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}/", fixture.running.admin_addr);
    let (status, dom_path, err_path) = chromium(
        &browser,
        dir.path(),
        "dom",
        &url,
        vec!["--dump-dom".to_owned()],
    )
    .await;
    let dom = fs::read_to_string(&dom_path).unwrap();
    assert!(
        status.success() && !dom.is_empty(),
        "chromium --dump-dom failed ({status}); stderr:\n{}",
        fs::read_to_string(&err_path).unwrap_or_default()
    );

    assert!(dom.contains("<h1>shuffle-shard gateway</h1>"), "{dom}");
    assert!(
        dom.contains("http-equiv=\"refresh\""),
        "the page refreshes itself"
    );
    // The shard grid: every shard once, with its health; the failed ones
    // failed.
    for backend in &fixture.backends {
        let id = backend.id();
        let health = if failed.contains(&id.to_owned()) {
            "failed"
        } else {
            "up"
        };
        let marker = format!("data-shard=\"{id}\" data-health=\"{health}\"");
        assert_eq!(dom.matches(&marker).count(), 1, "{marker}\n{dom}");
    }
    assert_eq!(dom.matches("data-shard=").count(), fixture.backends.len());
    // Zones group the grid.
    assert!(
        dom.contains("<b>zone a</b>") && dom.contains("<b>zone b</b>"),
        "{dom}"
    );

    // The live blast radius: the analyser's counts and the victim.
    let blast = element(&dom, "<tr data-cell=\"default\">", "</tr>")
        .unwrap_or_else(|| panic!("no blast row for the cell\n{dom}"));
    assert!(
        blast.contains(&format!("<td class=\"num degraded\">{degraded}</td>")),
        "degraded should be {degraded}: {blast}"
    );
    assert!(
        blast.contains(&format!(
            "<td class=\"num fully-down bad\">{fully_down}</td>"
        )),
        "fully down should be {fully_down}: {blast}"
    );
    assert!(blast.contains(victim), "{blast}");
    for shard in &failed {
        assert!(blast.contains(shard.as_str()), "{blast}");
    }

    // The worst tenants: the victim first, at 0 %.
    let worst = element(&dom, "<table id=\"worst\">", "</table>")
        .unwrap_or_else(|| panic!("no worst-tenants table\n{dom}"));
    let first_row = worst
        .split("<tr>")
        .nth(2)
        .unwrap_or_else(|| panic!("no rows: {worst}"));
    assert!(
        first_row.contains(&format!("<td>{victim}</td>"))
            && first_row.contains("<td class=\"num bad\">0.000%</td>"),
        "{first_row}"
    );
    assert!(dom.contains(&format!(
        "{} of {} shards up.",
        fixture.backends.len() - failed.len(),
        fixture.backends.len()
    )));
    // No secret on the page.
    for (_, key) in &fixture.tenants {
        assert!(!dom.contains(key.as_str()));
    }
    assert!(!dom.contains(TOKEN));

    // A screenshot: the page lays out and paints.
    let png = dir.path().join("status.png");
    let (status, _, err_path) = chromium(
        &browser,
        dir.path(),
        "shot",
        &url,
        vec![
            format!("--screenshot={}", png.display()),
            "--window-size=1200,900".to_owned(),
            "--hide-scrollbars".to_owned(),
        ],
    )
    .await;
    assert!(
        status.success(),
        "chromium --screenshot failed ({status}); stderr:\n{}",
        fs::read_to_string(&err_path).unwrap_or_default()
    );
    let image = fs::read(&png).unwrap_or_else(|error| panic!("no screenshot at {png:?}: {error}"));
    assert_eq!(
        &image[..8],
        b"\x89PNG\r\n\x1a\n",
        "the screenshot is not a PNG"
    );
    let width = u32::from_be_bytes(image[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(image[20..24].try_into().unwrap());
    assert_eq!((width, height), (1200, 900));
    // A blank page this size compresses to a few kilobytes; a grid of
    // coloured tiles, tables and text takes far more.
    assert!(
        image.len() > 30_000,
        "the screenshot is only {} bytes: the page looks blank",
        image.len()
    );
    if let Some(keep) = env::var_os("SHUFFLE_SHARD_KEEP_STATUS_PAGE") {
        let keep = PathBuf::from(keep);
        fs::create_dir_all(&keep).unwrap();
        fs::write(keep.join("status.html"), &dom).unwrap();
        fs::copy(&png, keep.join("status.png")).unwrap();
    }
}
