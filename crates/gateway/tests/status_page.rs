//! The status page in headless Chromium: after an operator fails two
//! shards (one tenant's whole subset) and some traffic, the page the
//! browser parsed says so in its banner first, shows every shard with its
//! health and sparkline, the failed ones marked failed since when and by
//! whom and without the traffic they no longer get, the live blast radius
//! the analyser computes, the availability distribution, and only the
//! tenants below 100 %, the worst first; and a screenshot paints a real
//! page. After the shards are restored, the tenant that was down is marked
//! recovered and the banner says every shard is up.
//!
//! Chromium comes from `$CHROMIUM` or `chromium` / `chromium-browser` on the
//! `PATH`. Without one the test skips as `testkit::skip` says (with
//! `SHUFFLE_SHARD_REQUIRE_ALL=1`, set by `.ci/run`, it fails instead).
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

/// Rows of the tenants-below-100 % table, padded or not: the same on
/// every refresh, so the page below it never moves.
const WORST_ROWS: usize = 10;

/// The table's rows, data and padding, without its header.
fn worst_rows(worst: &str) -> usize {
    worst.matches("<tr data-tenant=").count() + worst.matches("<tr class=\"pad\">").count()
}

/// The serialised element that starts with `start`, up to `end`.
fn element<'a>(dom: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = dom.find(start)?;
    let to = dom[from..].find(end)?;
    Some(&dom[from..from + to + end.len()])
}

/// A gateway of `shards` shards and `tenants` tenants whose status page
/// needs no token (and `admin` lines more), with every member of
/// `victim`'s subset failed by the operator; and those members.
async fn fail_subset_of(
    victim: &str,
    shards: usize,
    tenants: usize,
    admin: &str,
) -> (Fixture, Vec<String>) {
    let fixture = Fixture::start(Options {
        shards,
        tenants,
        admin: format!("status_page_without_token = true\n{admin}"),
        ..options()
    })
    .await;
    let subset = fixture.subset_ids(victim);
    for shard in &subset {
        fixture
            .admin_json("POST", &format!("/admin/shards/{shard}/fail"))
            .await;
    }
    (fixture, subset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shows_the_shard_grid_the_blast_radius_and_the_worst_tenants() {
    let Some(browser) = browser::find_or_skip() else {
        return;
    };

    // Fail one tenant's whole subset: it is fully down, others degraded.
    let victim = "tenant-0";
    let (fixture, failed) = fail_subset_of(victim, 12, 200, "").await;
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
    // The banner: the state in one line, before anything else.
    let banner =
        element(&dom, "<p id=\"banner\"", "</p>").unwrap_or_else(|| panic!("no banner\n{dom}"));
    assert!(
        dom.find("<p id=\"banner\"") < dom.find("<h2>Shards</h2>"),
        "the banner comes first"
    );
    assert!(banner.contains("class=\"bad\""), "{banner}");
    assert!(
        banner.contains(&format!("2 of {} shards out (", fixture.backends.len())),
        "{banner}"
    );
    for shard in &failed {
        // `s3 since 13:02:05 by admin`
        let named = element(banner, &format!("{shard} since "), " by admin")
            .unwrap_or_else(|| panic!("{shard} not named with its time and cause: {banner}"));
        assert_eq!(
            named.len(),
            format!("{shard} since 13:02:05 by admin").len(),
            "{named}"
        );
    }
    let tenants = |count: u64| {
        if count == 1 {
            "1 tenant".to_owned()
        } else {
            format!("{count} tenants")
        }
    };
    assert!(
        banner.contains(&format!(
            "; {} fully down, {degraded} degraded",
            tenants(fully_down)
        )),
        "{banner}"
    );
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
        let tile = element(&dom, &marker, "</span></div>")
            .unwrap_or_else(|| panic!("no tile for {id}\n{dom}"));
        // A sparkline per shard.
        assert_eq!(
            tile.matches(&format!("<svg class=\"spark\" data-spark=\"{id}\""))
                .count(),
            1,
            "{tile}"
        );
        if health == "failed" {
            // Out since when and why, and none of the traffic it no longer
            // gets.
            assert!(
                tile.contains("out since ") && tile.contains(" by admin"),
                "{tile}"
            );
            assert!(
                tile.contains("0.0/s now") && tile.contains("no requests"),
                "{tile}"
            );
            assert!(!tile.contains("class=\"req\""), "{tile}");
        } else {
            assert!(!tile.contains("out since"), "{tile}");
        }
    }
    assert_eq!(dom.matches("data-shard=").count(), fixture.backends.len());
    assert_eq!(dom.matches("data-spark=").count(), fixture.backends.len());
    // The up shards served the traffic: bars, a rate, errors and latency.
    assert!(dom.contains("class=\"req\""), "{dom}");
    assert!(
        dom.contains("0.0 % errors") && dom.contains("p50 "),
        "{dom}"
    );
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

    // The tenants below 100 %: the victim first, at 0 %, still failing;
    // nobody at 100 % (every other tenant was served).
    let worst = element(&dom, "<table id=\"worst\">", "</table>")
        .unwrap_or_else(|| panic!("no worst-tenants table\n{dom}"));
    let first_row =
        element(worst, "<tr data-tenant=", "</tr>").unwrap_or_else(|| panic!("no rows: {worst}"));
    assert!(
        first_row.contains(&format!("<td>{victim}</td>"))
            && first_row.contains("<td class=\"num bad\">0.000%</td>")
            && first_row.contains("failing"),
        "{first_row}"
    );
    let ranked = worst.matches("<tr data-tenant=").count();
    assert!(ranked >= 1 && ranked <= down_list.len(), "{worst}");
    assert!(!worst.contains("100.000%"), "{worst}");
    assert_eq!(worst_rows(worst), WORST_ROWS, "{worst}");
    // Every sparkline has the same fixed size, traffic or not.
    assert_eq!(
        dom.matches("<svg class=\"spark\"").count(),
        dom.matches("width=\"180\" height=\"28\" viewBox=\"0 0 180 28\"")
            .count(),
        "{dom}"
    );
    // The distribution: the victim among the fully down, the rest at 100 %.
    let class = |index: usize| {
        let start = format!("data-class=\"{index}\" data-count=\"");
        let at = dom
            .find(&start)
            .unwrap_or_else(|| panic!("no class {index}\n{dom}"));
        let rest = &dom[at + start.len()..];
        rest[..rest.find('"').unwrap()].parse::<usize>().unwrap()
    };
    assert_eq!(class(0), ranked, "{dom}");
    assert_eq!(class(6), 60 - ranked, "{dom}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_marks_a_recovered_tenant_and_ranks_nobody_at_100_percent() {
    let Some(browser) = browser::find_or_skip() else {
        return;
    };
    // A short window: the tenant's buckets are 2.5 s long.
    let victim = "tenant-0";
    let (fixture, subset) =
        fail_subset_of(victim, 8, 40, "availability_window_seconds = 30\n").await;
    for _ in 0..3 {
        assert_eq!(
            fixture.get(victim, "/").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    for shard in &subset {
        fixture
            .admin_json("POST", &format!("/admin/shards/{shard}/restore"))
            .await;
    }
    // Others at 100 %.
    for (tenant, _) in fixture.tenants.iter().skip(1).take(10) {
        assert_eq!(fixture.get(tenant, "/").await.0, StatusCode::OK);
    }
    // The victim is served again; once a bucket after its failures has
    // only successes, it has recovered.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let row = loop {
        assert_eq!(fixture.get(victim, "/").await.0, StatusCode::OK);
        let worst = fixture.admin_json("GET", "/admin/tenants?worst=1").await;
        let row = worst["tenants"][0].clone();
        assert_eq!(row["tenant"], victim, "{worst}");
        if !row["recovered_seconds_ago"].is_null() {
            break row;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{victim} never counted as recovered: {worst}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(row["availability"].as_f64().unwrap() < 1.0, "{row}");

    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}/", fixture.running.admin_addr);
    let path = dir.path().to_owned();
    let dom = blocking(move || browser::dump_dom(&browser, &path, &url)).await;
    let banner =
        element(&dom, "<p id=\"banner\"", "</p>").unwrap_or_else(|| panic!("no banner\n{dom}"));
    assert!(
        banner.contains("class=\"warn\"")
            && banner.contains("All 8 shards up; 1 tenant below 100 % over the last 30 s"),
        "{banner}"
    );
    let worst = element(&dom, "<table id=\"worst\">", "</table>")
        .unwrap_or_else(|| panic!("no worst-tenants table\n{dom}"));
    // One row: the victim, marked recovered; the ten at 100 % unranked.
    assert_eq!(worst.matches("<tr data-tenant=").count(), 1, "{worst}");
    assert_eq!(worst_rows(worst), WORST_ROWS, "{worst}");
    let victim_row = element(worst, &format!("<tr data-tenant=\"{victim}\">"), "</tr>")
        .unwrap_or_else(|| panic!("{victim} not ranked: {worst}"));
    assert!(
        victim_row.contains("<td class=\"recovered\">recovered ")
            && victim_row.contains(" s ago</td>"),
        "{victim_row}"
    );
    for (tenant, _) in fixture.tenants.iter().skip(1).take(10) {
        assert!(!worst.contains(&format!("<td>{tenant}</td>")), "{worst}");
    }
    // No shard is out, so none says since when.
    assert!(!dom.contains("out since"), "{dom}");
}
