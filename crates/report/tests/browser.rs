//! Opens a report built from a real analysis in headless Chromium and checks
//! that the browser sees the charts: the parsed DOM holds the three figures
//! with plotted SVG, and a screenshot of the page is a real image.
//!
//! Chromium comes from `$CHROMIUM` or `chromium` / `chromium-browser` on the
//! `PATH`. Without one the test skips with a message on stderr, unless
//! `SHUFFLE_SHARD_REQUIRE_BROWSER=1` (set by `.ci/run`) makes that a failure.
//! `SHUFFLE_SHARD_KEEP_REPORT=DIR` keeps the page and the screenshot there,
//! for looking at them.

use std::env;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use analysis::plan::{self, Budget};
use analysis::{BlastModel, Placements, Population, load, overlap};
use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer};
use report::{ReportInput, render};

/// How long one Chromium run may take before the test gives up on it. A
/// cold start on a busy CI machine takes seconds, not minutes.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

/// How often to ask whether Chromium has exited while waiting for it.
const POLL: Duration = Duration::from_millis(25);

const SHARDS: u32 = 16;
const TENANTS: usize = 2000;

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

/// A realistic report: 2,000 tenants on 16 shards, one of them a whale, so
/// the load chart has something to show.
fn realistic_report() -> String {
    let ids: Vec<String> = (0..TENANTS).map(|i| format!("tenant-{i}")).collect();
    let weights: Vec<f64> = (0..TENANTS)
        .map(|i| {
            if i == 0 {
                80.0
            } else {
                1.0 + (i % 7) as f64 * 0.25
            }
        })
        .collect();
    let population = Population::listed(ids, Some(weights));
    let fleet = Fleet::uniform(SHARDS).unwrap();
    let key = PlacementKey::recipe_default();
    let algorithm = Algorithm::Rendezvous;
    let budget = Budget {
        // Loose enough that 16 shards can meet it, so the page shows a
        // recommendation and its marker.
        max_degraded: 0.25,
        max_fully_down: 0.001,
        concurrent_failures: 2,
    };
    let plan = plan::plan(
        &fleet,
        &key,
        algorithm,
        false,
        &population,
        budget,
        &|_, _| {},
    )
    .unwrap();
    let k = plan.recommended.expect("16 shards meet this budget");

    let config = PlacementConfig {
        algorithm,
        k,
        zone_aware: false,
    };
    let placer = Placer::new(fleet, &key, config).unwrap();
    let placements = Placements::compute(&placer, &population);
    let model = BlastModel::new(&placements).unwrap();
    let overlap = overlap::exact(&model);
    let expected = overlap::expected_shared_counts(&[SHARDS as usize], k as usize).unwrap();
    let load = load::load(&placements, &population, Some(400.0), 5);
    let sweep = model.sweep(2, 1_000_000, 0, &|_, _| {}).unwrap();

    render(&ReportInput {
        title: "Blast radius: 16 shards, 2,000 tenants",
        shards: SHARDS as usize,
        tenants: TENANTS as u64,
        algorithm: algorithm.name(),
        k,
        plan: &plan,
        overlap: &overlap,
        expected_shared_counts: Some(&expected),
        load: Some(&load),
        sweep: Some(&sweep),
    })
    .unwrap()
}

/// Runs Chromium headless on `page` with `extra` arguments, its stdout into
/// `stdout` and stderr into `stderr`, in a fresh profile. Files rather than
/// pipes: nothing has to drain them while we wait, and a helper process
/// that outlives the browser cannot hold the test up.
fn run_chromium(
    browser: &Path,
    profile: &Path,
    page: &Path,
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
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(File::create(stdout).unwrap())
        .stderr(File::create(stderr).unwrap())
        .spawn()
        .unwrap_or_else(|error| panic!("could not start {}: {error}", browser.display()));
    // Poll for exit against a deadline: std has no wait-with-timeout, and the
    // exit itself is what we wait for, so nothing is assumed about timing.
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

/// The serialised `<figure id="{id}">` element, if the DOM has one.
fn figure<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let start = dom.find(&format!("<figure id=\"{id}\">"))?;
    let end = dom[start..].find("</figure>")?;
    Some(&dom[start..start + end])
}

#[test]
fn chromium_renders_the_report_charts() {
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

    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    fs::write(&page, realistic_report()).unwrap();

    // The DOM as the browser parsed it: proves the inline SVG became SVG
    // elements inside the figures, not text.
    let dom_path = dir.path().join("dom.html");
    let err_path = dir.path().join("dom.stderr");
    let status = run_chromium(
        &browser,
        &dir.path().join("profile-dom"),
        &page,
        &["--dump-dom".to_owned()],
        &dom_path,
        &err_path,
    );
    let dom = fs::read_to_string(&dom_path).unwrap();
    assert!(
        status.success() && !dom.is_empty(),
        "chromium --dump-dom failed ({status}); stderr:\n{}",
        fs::read_to_string(&err_path).unwrap_or_default()
    );
    assert!(dom.contains("<h1>Blast radius: 16 shards, 2,000 tenants</h1>"));
    assert!(dom.contains("class=\"verdict\""));
    assert!(dom.contains("<table id=\"worst-case\">"));
    assert!(dom.contains("class=\"recommended\""));
    for (id, mark, at_least) in [
        ("chart-k", "<polyline", 2),
        ("chart-overlap", "<rect", 8),
        ("chart-load", "<rect", SHARDS as usize),
    ] {
        let figure = figure(&dom, id).unwrap_or_else(|| panic!("the DOM has no figure {id}"));
        assert_eq!(figure.matches("<svg").count(), 1, "{id} has no svg");
        assert!(
            figure.matches(mark).count() >= at_least,
            "{id} has fewer than {at_least} {mark} elements"
        );
        assert!(figure.contains("<text"), "{id} has no axis labels");
        assert!(figure.contains("<figcaption>"), "{id} has no caption");
    }
    assert!(figure(&dom, "chart-k").is_some_and(|f| f.contains("recommended k = ")));

    // A screenshot: the page lays out and paints to a full-size image.
    let png = dir.path().join("report.png");
    let err_path = dir.path().join("screenshot.stderr");
    let status = run_chromium(
        &browser,
        &dir.path().join("profile-shot"),
        &page,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1200,2000".to_owned(),
            "--hide-scrollbars".to_owned(),
        ],
        &dir.path().join("screenshot.stdout"),
        &err_path,
    );
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
    assert_eq!((width, height), (1200, 2000));
    // A blank page of this size compresses to a few kilobytes; charts,
    // tables and text take far more.
    assert!(
        image.len() > 60_000,
        "the screenshot is only {} bytes: the page looks blank",
        image.len()
    );
    if let Some(keep) = env::var_os("SHUFFLE_SHARD_KEEP_REPORT") {
        let keep = PathBuf::from(keep);
        fs::create_dir_all(&keep).unwrap();
        fs::copy(&page, keep.join("report.html")).unwrap();
        fs::copy(&png, keep.join("report.png")).unwrap();
    }
}
