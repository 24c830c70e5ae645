//! Opens a report built from a real analysis in headless Chromium and checks
//! that the browser sees the charts: the parsed DOM holds the figures
//! with plotted SVG, and a screenshot of the page is a real image.
//!
//! Chromium comes from `$CHROMIUM` or `chromium` / `chromium-browser` on the
//! `PATH`. Without one the test skips as `testkit::skip` says (with
//! `SHUFFLE_SHARD_REQUIRE_ALL=1`, set by `.ci/run`, it fails instead).
//! `SHUFFLE_SHARD_KEEP_REPORT=DIR` keeps the page and the screenshot there,
//! for looking at them.

use std::fs;

use analysis::plan::{self, Budget};
use analysis::{BlastModel, Placements, Population, load, overlap};
use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer};
use report::{ReportInput, render};
use testkit::browser;

const SHARDS: u32 = 16;
const TENANTS: usize = 2000;

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
        capacity: Some(400.0),
        zones: &[],
        generated: "2026-12-04 14:00:00 UTC",
        key: "the public recipe key",
        whales: &[],
        zone_outages: &[],
    })
    .unwrap()
}

/// The serialised `<figure id="{id}">` element, if the DOM has one.
fn figure<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let start = dom.find(&format!("<figure id=\"{id}\">"))?;
    let end = dom[start..].find("</figure>")?;
    Some(&dom[start..start + end])
}

#[test]
fn chromium_renders_the_report_charts() {
    let Some(browser) = browser::find_or_skip() else {
        return;
    };

    let dir = tempfile::tempdir().unwrap();
    let html = realistic_report();
    let page = dir.path().join("report.html");
    fs::write(&page, &html).unwrap();

    // The DOM as the browser parsed it: proves the inline SVG became SVG
    // elements inside the figures, not text.
    let target = format!("file://{}", page.display());
    let dom = browser::dump_dom(&browser, dir.path(), &target);
    assert!(dom.contains("<h1>Blast radius: 16 shards, 2,000 tenants</h1>"));
    assert!(dom.contains("class=\"verdict\""));
    assert!(dom.contains("<table id=\"worst-case\">"));
    assert!(dom.contains("class=\"recommended\""));
    for (id, mark, at_least) in [
        ("chart-k", "<polyline", 2),
        ("chart-k-traffic", "<polyline", 2),
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
    let image = browser::screenshot(&browser, dir.path(), &target, (1200, 2000));
    // A blank page of this size compresses to a few kilobytes; charts,
    // tables and text take far more.
    assert!(
        image.len() > 60_000,
        "the screenshot is only {} bytes: the page looks blank",
        image.len()
    );
    browser::keep(
        "SHUFFLE_SHARD_KEEP_REPORT",
        &[("report.html", html.as_bytes()), ("report.png", &image)],
    );
}
