//! Unit tests of the rendered document, on hand-built analysis results.

use analysis::load::{FailoverLoad, LoadReport};
use analysis::overlap::Overlap;
use analysis::plan::{Budget, Plan, PlanRow};
use analysis::{Sweep, SweepFigure};

use super::*;

fn plan() -> Plan {
    let row = |k: u32, down: Option<f64>, degraded: f64, meets: bool| PlanRow {
        k,
        worst_fully_down: down,
        worst_failed: vec![0, k],
        degraded_one_failure: degraded,
        capacity_lost: 1.0 / f64::from(k),
        overlap: degraded * 2.0,
        meets_budget: meets,
        traffic: None,
    };
    Plan {
        budget: Budget {
            max_degraded: 0.2,
            max_fully_down: 0.001,
            concurrent_failures: 2,
        },
        rows: vec![
            row(1, Some(0.125), 0.0625, false),
            row(2, Some(0.008), 0.125, false),
            row(3, Some(0.0), 0.1875, true),
            row(4, None, 0.25, false),
        ],
        recommended: Some(3),
        verdict: "k = 3 is the smallest k that keeps <everything> in budget.".into(),
        recommended_by_traffic: None,
        traffic_verdict: None,
    }
}

fn overlap() -> Overlap {
    Overlap {
        pairs: 1_999_000,
        fraction: 0.49,
        shared_counts: vec![0.51, 0.40, 0.085, 0.005],
        pair_counts: vec![1_019_490, 799_600, 169_915, 9_995],
    }
}

fn load() -> LoadReport {
    LoadReport {
        capacity: None,
        per_shard: vec![1.0, 1.2, 0.9, 4.5, 1.1, 1.0],
        mean: 1.616_666,
        cv: 0.8,
        max_over_mean: 2.78,
        hottest: 3,
        over_capacity: vec![3],
        failover: vec![FailoverLoad {
            failed: 3,
            hottest: 1,
            load: 2.5,
            over_capacity: false,
        }],
        dominant: Vec::new(),
    }
}

fn sweep() -> Sweep {
    let figure = |worst: u64| SweepFigure {
        worst,
        worst_failed: vec![4, 9],
        mean: worst as f64 / 2.0,
        p50: worst / 2,
        p99: worst,
    };
    Sweep {
        failures: 2,
        sets: 120,
        sampled: false,
        fully_down: figure(3),
        degraded: figure(700),
    }
}

const EXPECTED: [f64; 4] = [0.509, 0.409, 0.080, 0.002];

/// The setup every test reports on (16 shards, 2,000 tenants, rendezvous,
/// k = 3) with no expectation, load or sweep; tests add what they need.
fn fleet_input<'a>(plan: &'a Plan, overlap: &'a Overlap) -> ReportInput<'a> {
    ReportInput {
        title: "fleet",
        shards: 16,
        tenants: 2000,
        algorithm: "rendezvous",
        k: 3,
        plan,
        overlap,
        expected_shared_counts: None,
        load: None,
        sweep: None,
        capacity: None,
        zones: &[],
        generated: "2026-12-04 14:00:00 UTC",
        key: "--key-file fleet.key, version v3",
        whales: &[],
        zone_outages: &[],
    }
}

fn render_with(title: &str, weighted: bool, with_sweep: bool) -> Result<String, ReportError> {
    let (plan, overlap, load, sweep) = (plan(), overlap(), load(), sweep());
    render(&ReportInput {
        title,
        expected_shared_counts: Some(&EXPECTED),
        load: weighted.then_some(&load),
        sweep: with_sweep.then_some(&sweep),
        ..fleet_input(&plan, &overlap)
    })
}

/// The text of the `<figure id="{id}">` element, if there is one.
fn figure<'a>(html: &'a str, id: &str) -> Option<&'a str> {
    let start = html.find(&format!("<figure id=\"{id}\">"))?;
    let end = html[start..].find("</figure>")?;
    Some(&html[start..start + end])
}

#[test]
fn a_weighted_report_has_three_charts_each_an_inline_svg_with_a_caption() {
    let html = render_with("fleet", true, true).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    assert_eq!(html.matches("<figure").count(), 3);
    for id in ["chart-k", "chart-overlap", "chart-load"] {
        let figure = figure(&html, id).unwrap_or_else(|| panic!("no figure {id}"));
        assert_eq!(figure.matches("<svg").count(), 1, "{id}");
        assert!(figure.contains("</svg>"), "{id}");
        assert!(figure.contains("<figcaption>"), "{id}");
    }
    assert!(!html.contains("id=\"no-weights\""));
}

#[test]
fn the_charts_plot_the_data() {
    let html = render_with("fleet", true, false).unwrap();
    let k = figure(&html, "chart-k").unwrap();
    // Two data lines plus the recommended-k marker and two budgets, which
    // plotters draws as dashes (polylines too).
    assert!(k.matches("<polyline").count() >= 2);
    assert!(k.contains("degraded by one failure"));
    assert!(k.contains("fully down by 2 failures"));
    assert!(k.contains("recommended k = 3"));
    // Four groups of two bars, plus legend swatches and the background.
    let overlap = figure(&html, "chart-overlap").unwrap();
    assert!(overlap.matches("<rect").count() >= 8);
    assert!(overlap.contains("measured") && overlap.contains("expected"));
    // One bar per shard.
    let load = figure(&html, "chart-load").unwrap();
    assert!(load.matches("<rect").count() >= 6);
    assert!(load.contains("hottest or over capacity"));
}

#[test]
fn an_unweighted_report_says_why_there_is_no_load_chart() {
    let html = render_with("fleet", false, false).unwrap();
    assert_eq!(html.matches("<figure").count(), 2);
    assert!(figure(&html, "chart-load").is_none());
    assert!(html.contains("id=\"no-weights\""));
    assert!(html.contains("The population had no weights"));
}

#[test]
fn nothing_is_fetched_from_anywhere() {
    let html = render_with("fleet", true, true).unwrap();
    for fetching in [
        "src=", "href=", "url(", "@import", "<link", "<script", "<img",
    ] {
        assert!(!html.contains(fetching), "the report contains {fetching}");
    }
    // The only "http" left is the SVG namespace (a name, not a fetch) and
    // the CSP meta tag, which forbids fetching altogether.
    let rest = html
        .replace("xmlns=\"http://www.w3.org/2000/svg\"", "")
        .replace("http-equiv=\"Content-Security-Policy\"", "");
    assert!(!rest.contains("http"), "unexpected http reference");
    assert!(html.contains("default-src 'none'"));
}

#[test]
fn text_from_outside_is_escaped() {
    let html = render_with("<script>alert(1)</script> & co", true, true).unwrap();
    assert!(!html.contains("<script"));
    assert!(html.contains("<title>&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</title>"));
    assert!(html.contains("<h1>&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</h1>"));
    assert!(html.contains("keeps &lt;everything&gt; in budget"));
}

#[test]
fn the_header_states_the_setup_and_the_budget() {
    let html = render_with("fleet", true, false).unwrap();
    for fact in [
        "<dt>Shards</dt><dd>16</dd>",
        "<dt>Tenants</dt><dd>2,000</dd>",
        "<dt>Algorithm</dt><dd>rendezvous</dd>",
        "<dt>k for overlap, load and sweep</dt><dd>3</dd>",
        "at most 20.0% of tenants",
        "2 concurrent failures fully down at most 0.100%",
    ] {
        assert!(html.contains(fact), "missing {fact}");
    }
}

#[test]
fn the_worst_case_table_has_a_row_per_k_and_marks_the_recommendation() {
    let html = render_with("fleet", true, false).unwrap();
    let start = html.find("<table id=\"worst-case\">").unwrap();
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    assert_eq!(table.matches("<tr").count(), 1 + 4);
    assert_eq!(table.matches("class=\"recommended\"").count(), 1);
    assert!(table.contains("<td>12.5%</td><td class=\"text\">shards 0, 1</td>"));
    assert!(table.contains("yes (recommended)"));
    assert!(table.contains("too many sets to search"));
    // k = 3 downs nobody, so no failure set is named for it.
    assert!(table.contains("<td>0%</td><td class=\"text\">—</td>"));
}

#[test]
fn the_sweep_appears_only_when_given() {
    let with = render_with("fleet", true, true).unwrap();
    assert!(with.contains("<section id=\"sweep\">"));
    assert!(with.contains("every one of the 120 sets of 2 failed shards"));
    assert!(with.contains("<td>700 (35.0%)</td><td class=\"text\">shards 4, 9</td>"));
    let (mut sweep, plan, overlap) = (sweep(), plan(), overlap());
    sweep.fully_down.worst = 0;
    let nobody_down = render(&ReportInput {
        sweep: Some(&sweep),
        ..fleet_input(&plan, &overlap)
    })
    .unwrap();
    assert!(nobody_down.contains("<td>0 (0%)</td><td class=\"text\">—</td>"));
    let without = render_with("fleet", true, false).unwrap();
    assert!(!without.contains("id=\"sweep\""));
}

#[test]
fn figures_that_are_not_numbers_are_refused() {
    let (mut plan, overlap) = (plan(), overlap());
    plan.rows[1].degraded_one_failure = f64::NAN;
    let input = fleet_input(&plan, &overlap);
    assert_eq!(
        render(&input),
        Err(ReportError::NotFinite {
            field: "a plan row"
        })
    );
    let mut load = load();
    load.per_shard[2] = f64::INFINITY;
    let mut fixed = plan.clone();
    fixed.rows[1].degraded_one_failure = 0.1;
    assert_eq!(
        render(&ReportInput {
            load: Some(&load),
            plan: &fixed,
            ..input
        }),
        Err(ReportError::NotFinite {
            field: "the per-shard load"
        })
    );
}

#[test]
fn an_empty_plan_is_refused_and_degenerate_data_still_renders() {
    let (mut plan, overlap, mut load) = (plan(), overlap(), load());
    let empty = Plan {
        rows: Vec::new(),
        ..plan.clone()
    };
    let input = ReportInput {
        shards: 1,
        tenants: 0,
        k: 1,
        ..fleet_input(&empty, &overlap)
    };
    assert_eq!(render(&input), Err(ReportError::EmptyPlan));

    // All zeros, no pairs, no shards: axes still get a range and nothing
    // divides by zero.
    plan.rows.truncate(1);
    plan.rows[0].worst_fully_down = Some(0.0);
    plan.rows[0].degraded_one_failure = 0.0;
    let overlap = Overlap {
        pairs: 0,
        fraction: 0.0,
        shared_counts: Vec::new(),
        pair_counts: Vec::new(),
    };
    load.per_shard.clear();
    load.failover.clear();
    let html = render(&ReportInput {
        plan: &plan,
        overlap: &overlap,
        load: Some(&load),
        sweep: Some(&sweep()),
        ..input
    })
    .unwrap();
    assert_eq!(html.matches("<figure").count(), 3);
}

#[test]
fn the_capacity_line_says_only_what_was_checked() {
    // Issue 21: "No shard is over capacity" was printed with no capacity.
    let html = render_with("fleet", true, false).unwrap();
    assert!(!html.contains("No shard is over"), "no capacity was given");
    assert!(html.contains("No capacity was given (--capacity)"));
    assert!(html.contains("<dd id=\"capacity\">not given"));
    let (plan, overlap) = (plan(), overlap());
    // The load's over-capacity shards come from the analysis with the same
    // capacity: none under a large one, shard 3 under a small one.
    let mut under = load();
    under.over_capacity.clear();
    let over = load();
    for (capacity, load, says) in [
        (1e9, &under, "No shard is over the capacity of"),
        (4.0, &over, "Over the capacity of 4"),
    ] {
        let html = render(&ReportInput {
            load: Some(load),
            capacity: Some(capacity),
            ..fleet_input(&plan, &overlap)
        })
        .unwrap();
        assert!(html.contains(says), "{capacity}: {says}");
    }
}

#[test]
fn the_header_names_zones_key_and_time_and_zero_is_labelled() {
    let (plan, overlap) = (plan(), overlap());
    let zones = [("eu-1".to_owned(), 8), ("eu-2".to_owned(), 8)];
    let outage = ZoneOutage {
        zone: "eu-1".to_owned(),
        impact: Impact {
            failed: (0..8).collect(),
            fully_down: 0,
            degraded: 1500,
            capacity_lost: 0.5,
        },
    };
    let html = render(&ReportInput {
        zones: &zones,
        zone_outages: std::slice::from_ref(&outage),
        ..fleet_input(&plan, &overlap)
    })
    .unwrap();
    assert!(html.contains("<dd id=\"zones\">eu-1 (8 shards), eu-2 (8 shards)</dd>"));
    assert!(html.contains("<dd id=\"key\">--key-file fleet.key, version v3</dd>"));
    assert!(html.contains("<dd id=\"generated\">2026-12-04 14:00:00 UTC</dd>"));
    assert!(html.contains("<section id=\"zone-outage\">"));
    assert!(html.contains("<td>1,500 (75.0%)</td>"));
    // k = 3 and 4 down nobody: the log axis's bottom line stands for zero
    // and is labelled so, not "0" (which reads as the floor's value).
    let k = figure(&html, "chart-k").unwrap();
    assert!(k.contains("0 (none)"));
    assert!(html.contains("labelled \u{201c}0 (none)\u{201d}, are exactly zero"));
}

#[test]
fn whales_are_named_with_what_to_do() {
    let (plan, overlap, load) = (plan(), overlap(), load());
    let whale = |tenant: &str, suggested_k, dedicated_shards| WhaleRow {
        tenant: tenant.to_owned(),
        whale: analysis::load::Whale {
            tenant: 0,
            k: 3,
            traffic_share: 0.2,
            shard_share: 0.61,
            shard: 4,
            suggested_k,
            dedicated_shards,
        },
    };
    let whales = [whale("acme", Some(6), None), whale("giant", None, Some(5))];
    let html = render(&ReportInput {
        load: Some(&load),
        whales: &whales,
        ..fleet_input(&plan, &overlap)
    })
    .unwrap();
    assert!(html.contains("<table id=\"whales\">"));
    assert!(html.contains("<code>--tenant-k acme=6</code>"));
    assert!(html.contains("dedicated shards: its traffic fills 5 mean shards"));
    assert!(html.contains("61.0% of shard 4"));
}

#[test]
fn a_sampled_sweep_calls_its_worst_a_lower_bound() {
    let (mut sweep, plan, overlap) = (sweep(), plan(), overlap());
    sweep.sampled = true;
    let html = render(&ReportInput {
        sweep: Some(&sweep),
        ..fleet_input(&plan, &overlap)
    })
    .unwrap();
    assert!(html.contains("worst seen (lower bound)"));
    let exact = render_with("fleet", true, true).unwrap();
    assert!(!exact.contains("lower bound"));
}

#[test]
fn with_weights_the_recommendation_and_chart_are_by_traffic_too() {
    let mut plan = plan();
    for row in &mut plan.rows {
        row.traffic = Some(analysis::plan::TrafficRow {
            worst_fully_down: Some(row.worst_fully_down.unwrap_or(0.0) * 3.0),
            worst_failed: vec![2, 5],
            degraded_one_failure: row.degraded_one_failure * 1.5,
            meets_budget: row.k == 4,
        });
    }
    plan.recommended_by_traffic = Some(4);
    plan.traffic_verdict = Some("k = 4 is the smallest k by traffic.".into());
    let overlap = overlap();
    let html = render(&fleet_input(&plan, &overlap)).unwrap();
    assert!(html.contains("By tenant count: k = 3 is the smallest k"));
    assert!(html.contains(
        "<p class=\"verdict\" id=\"verdict-traffic\">By share of traffic (tenant weights): k = 4 is the smallest k by traffic.</p>"
    ));
    let chart = figure(&html, "chart-k-traffic").unwrap();
    assert!(chart.contains("% of traffic (log scale)"));
    assert!(chart.contains("recommended k = 4"));
    // Unweighted: neither appears.
    let plain = render_with("fleet", false, false).unwrap();
    assert!(!plain.contains("chart-k-traffic") && !plain.contains("By tenant count"));
}
