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

use http::StatusCode;
use testkit::browser;

use crate::admin::{TOKEN, analyser, options};
use crate::util::{Fixture, Options};

/// Runs `chromium` (a Chromium run of `testkit::browser`) on a blocking
/// thread, so the gateway under test keeps serving the page on the
/// runtime's threads.
async fn blocking<T: Send + 'static>(chromium: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(chromium).await.unwrap()
}

/// The serialised element that starts with `start`, up to `end`.
fn element<'a>(dom: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = dom.find(start)?;
    let to = dom[from..].find(end)?;
    Some(&dom[from..from + to + end.len()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shows_the_shard_grid_the_blast_radius_and_the_worst_tenants() {
    let Some(browser) = browser::find_or_skip() else {
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
    let (chromium, path, target) = (browser.clone(), dir.path().to_owned(), url.clone());
    let dom = blocking(move || browser::dump_dom(&chromium, &path, &target)).await;

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
    let path = dir.path().to_owned();
    let image = blocking(move || browser::screenshot(&browser, &path, &url, (1200, 900))).await;
    // A blank page this size compresses to a few kilobytes; a grid of
    // coloured tiles, tables and text takes far more.
    assert!(
        image.len() > 30_000,
        "the screenshot is only {} bytes: the page looks blank",
        image.len()
    );
    browser::keep(
        "SHUFFLE_SHARD_KEEP_STATUS_PAGE",
        &[("status.html", dom.as_bytes()), ("status.png", &image)],
    );
}
