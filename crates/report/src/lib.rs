//! A self-contained HTML blast-radius report.
//!
//! The design chapter asks for the blast radius as a standing report, not a
//! formula. [`render`] turns the analyser's results — the plan over `k`, the
//! pairwise overlap, the per-shard load and a failure sweep — into one HTML
//! document with its charts inline as SVG (drawn by `plotters`) and its
//! styles inline, so the file can be mailed, archived or opened offline and
//! never fetches anything.
//!
//! # Example
//! ```
//! use analysis::overlap::Overlap;
//! use analysis::plan::{Budget, Plan, PlanRow};
//! use report::{ReportInput, render};
//!
//! let budget = Budget { max_degraded: 0.2, max_fully_down: 0.001, concurrent_failures: 2 };
//! let plan = Plan {
//!     budget,
//!     rows: vec![PlanRow {
//!         k: 1,
//!         worst_fully_down: Some(0.125),
//!         worst_failed: vec![0, 1],
//!         degraded_one_failure: 0.0625,
//!         capacity_lost: 1.0,
//!         overlap: 0.0625,
//!         meets_budget: false,
//!         traffic: None,
//!     }],
//!     recommended: None,
//!     verdict: "No k up to 1 meets the fully-down budget.".into(),
//!     recommended_by_traffic: None,
//!     traffic_verdict: None,
//! };
//! let overlap = Overlap {
//!     pairs: 10,
//!     fraction: 0.1,
//!     shared_counts: vec![0.9, 0.1],
//!     pair_counts: vec![9, 1],
//! };
//! let html = render(&ReportInput {
//!     title: "fleet A",
//!     shards: 16,
//!     tenants: 5,
//!     algorithm: "rendezvous",
//!     k: 1,
//!     plan: &plan,
//!     overlap: &overlap,
//!     expected_shared_counts: None,
//!     load: None,
//!     sweep: None,
//!     capacity: None,
//!     zones: &[],
//!     generated: "2026-12-04 14:00 UTC",
//!     key: "the public recipe key",
//!     whales: &[],
//!     zone_outages: &[],
//! })?;
//! assert!(html.starts_with("<!DOCTYPE html>"));
//! # Ok::<(), report::ReportError>(())
//! ```

mod charts;
mod html;

pub use html::escape;

use std::fmt::Write as _;

use analysis::load::LoadReport;
use analysis::plan::Plan;
use analysis::{Impact, Sweep};
use thiserror::Error;

use crate::html::{count, load as fmt_load, percent, shard_set};

/// Everything the report shows.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// The report's title (plain text; it is escaped).
    pub title: &'a str,
    /// Number of shards in the fleet.
    pub shards: usize,
    /// Number of tenants analysed.
    pub tenants: u64,
    /// The placement algorithm's name.
    pub algorithm: &'a str,
    /// The `k` the overlap, load and sweep were measured at.
    pub k: u32,
    /// The plan over candidate `k`s.
    pub plan: &'a Plan,
    /// The exact pairwise overlap at `k`.
    pub overlap: &'a analysis::overlap::Overlap,
    /// The closed-form expectation of `overlap.shared_counts`, when known.
    pub expected_shared_counts: Option<&'a [f64]>,
    /// Per-shard load, when the population was weighted.
    pub load: Option<&'a LoadReport>,
    /// A failure sweep at `k`, when one was run.
    pub sweep: Option<&'a Sweep>,
    /// The load one shard can carry, in weight units, when one was given.
    pub capacity: Option<f64>,
    /// The fleet's zones: name and number of shards; empty when unzoned.
    pub zones: &'a [(String, usize)],
    /// When the report was generated (plain text, e.g. UTC).
    pub generated: &'a str,
    /// Which placement key (and version) the tenants were placed with; never
    /// the key itself.
    pub key: &'a str,
    /// Tenants dominating a shard, with what to do about each.
    pub whales: &'a [WhaleRow],
    /// Each zone failed in turn, when asked for.
    pub zone_outages: &'a [ZoneOutage],
}

/// One whale, as the page names it.
#[derive(Debug, Clone, PartialEq)]
pub struct WhaleRow {
    /// The tenant id.
    pub tenant: String,
    /// The figures and suggestion.
    pub whale: analysis::load::Whale,
}

/// What failing one whole zone does.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneOutage {
    /// The zone's name.
    pub zone: String,
    /// The outcome.
    pub impact: Impact,
}

/// Why a report could not be rendered.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The plan had no rows, so there is nothing to chart or recommend.
    #[error("the plan has no rows: plan at least one k before rendering a report")]
    EmptyPlan,
    /// A figure was NaN or infinite; a chart cannot place it.
    #[error(
        "{field} is not a finite number; the analysis that produced it is broken or the input was hand-built wrongly"
    )]
    NotFinite {
        /// Which figure.
        field: &'static str,
    },
    /// The charting library failed to draw.
    #[error("could not draw the chart {chart:?}: {message}")]
    Chart {
        /// Which chart.
        chart: &'static str,
        /// What the charting library said.
        message: String,
    },
}

/// Inline styles: the document must not fetch a stylesheet.
const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:980px;padding:24px;color:#1b1b1b;line-height:1.45}
h1{font-size:1.7rem;margin-bottom:.2rem}
h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.15rem 1.2rem;margin:1rem 0}
dl.facts dt{color:#555}dl.facts dd{margin:0;font-variant-numeric:tabular-nums}
p.verdict{font-size:1.1rem;background:#eef6fb;border-left:4px solid #0072b2;padding:.7rem 1rem}
figure{margin:1.2rem 0}figure svg{width:100%;height:auto;display:block}
figcaption{color:#444;font-size:.95rem;margin-top:.4rem}
table{border-collapse:collapse;margin:.8rem 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e2e2e2;padding:.3rem .7rem;text-align:right}
th{background:#f5f5f5}td.text,th.text{text-align:left}
tr.recommended td{background:#e7f6ef;font-weight:600}
.yes{color:#00734f}.no{color:#a33b00}
p.note{color:#444}
";

/// Renders the report as one complete HTML document.
pub fn render(input: &ReportInput<'_>) -> Result<String, ReportError> {
    validate(input)?;
    // Each part of the page is written into it by a step of its own, in
    // the page's order. `write!` into a String cannot fail; the steps
    // ignore its results for that reason alone.
    let mut page = String::with_capacity(64 * 1024);
    header(&mut page, input);
    recommendation(&mut page, input.plan);
    charts_against_k(&mut page, input.plan)?;
    overlap_section(&mut page, input)?;
    load_section(&mut page, input)?;
    page.push_str(&worst_case_table(input.plan));
    if let Some(sweep) = input.sweep {
        page.push_str(&sweep_summary(sweep, input.tenants, input.k));
    }
    if !input.zone_outages.is_empty() {
        page.push_str(&zone_outage_table(input.zone_outages, input.tenants));
    }
    page.push_str("</body>\n</html>\n");
    Ok(page)
}

/// The document's head (title, inline style, content security policy) and
/// the page's header: what was analysed, with which key, when, against
/// which budget.
fn header(page: &mut String, input: &ReportInput<'_>) {
    let budget = input.plan.budget;
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <title>{title}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n\
         <header>\n<h1>{title}</h1>\n<dl class=\"facts\">\n\
         <dt>Shards</dt><dd>{shards}</dd>\n<dt>Tenants</dt><dd>{tenants}</dd>\n\
         <dt>Algorithm</dt><dd>{algorithm}</dd>\n<dt>k for overlap, load and sweep</dt><dd>{k}</dd>\n\
         <dt>Zones</dt><dd id=\"zones\">{zones}</dd>\n\
         <dt>Placement key</dt><dd id=\"key\">{key}</dd>\n\
         <dt>Generated</dt><dd id=\"generated\">{generated}</dd>\n\
         <dt>Capacity per shard</dt><dd id=\"capacity\">{capacity}</dd>\n\
         <dt>Budget</dt><dd>one failure degrades at most {max_degraded} of tenants; \
         {failures} concurrent failures fully down at most {max_fully_down}</dd>\n\
         </dl>\n</header>\n",
        title = escape(input.title),
        shards = count(input.shards as u64),
        tenants = count(input.tenants),
        algorithm = escape(input.algorithm),
        k = input.k,
        max_degraded = percent(budget.max_degraded),
        failures = budget.concurrent_failures,
        max_fully_down = percent(budget.max_fully_down),
        zones = if input.zones.is_empty() {
            "none (placement ignores zones)".to_owned()
        } else {
            input
                .zones
                .iter()
                .map(|(name, shards)| format!("{} ({shards} shards)", escape(name)))
                .collect::<Vec<_>>()
                .join(", ")
        },
        key = escape(input.key),
        generated = escape(input.generated),
        capacity = match input.capacity {
            Some(capacity) => fmt_load(capacity),
            None => "not given (nothing is checked against a capacity)".to_owned(),
        },
    );
}

/// The recommendation: the plan's verdict, by tenant count and, with
/// weights, by share of traffic.
fn recommendation(page: &mut String, plan: &Plan) {
    let by_traffic = match &plan.traffic_verdict {
        Some(verdict) => format!(
            "<p class=\"verdict\" id=\"verdict-traffic\">By share of traffic (tenant weights): {}</p>\n",
            escape(verdict)
        ),
        None => String::new(),
    };
    let _ = write!(
        page,
        "<section id=\"recommendation\">\n<h2>Recommendation</h2>\n<p class=\"verdict\">{}{}</p>\n{by_traffic}</section>\n",
        if plan.traffic_verdict.is_some() {
            "By tenant count: "
        } else {
            ""
        },
        escape(&plan.verdict)
    );
}

/// The charts of fully down and degraded against k: by tenant count, and
/// by share of traffic when the tenants have weights.
fn charts_against_k(page: &mut String, plan: &Plan) -> Result<(), ReportError> {
    let budget = plan.budget;
    let chart = charts::fully_down_and_degraded(
        &plan.rows,
        budget.max_degraded,
        budget.max_fully_down,
        budget.concurrent_failures,
        plan.recommended,
        "tenants",
    )?;
    let _ = write!(
        page,
        "<section>\n<h2>Fully down and degraded against k</h2>\n\
         <figure id=\"chart-k\">\n{chart}<figcaption>Worst share of tenants fully down when any \
         {failures} shards fail together, and the widest share degraded when one shard fails, \
         for each k; dashed lines are the budgets. The scale is logarithmic so that small \
         budgets show, and a logarithmic scale has no zero: points on the bottom line, \
         labelled \u{201c}0 (none)\u{201d}, are exactly zero. Larger k makes a full outage \
         rarer and a one-shard blip wider.</figcaption>\n</figure>\n</section>\n",
        failures = budget.concurrent_failures,
    );

    if let Some(rows) = analysis::plan::traffic_rows(&plan.rows) {
        let chart = charts::fully_down_and_degraded(
            &rows,
            budget.max_degraded,
            budget.max_fully_down,
            budget.concurrent_failures,
            plan.recommended_by_traffic,
            "traffic",
        )?;
        let _ = write!(
            page,
            "<section>\n<h2>Fully down and degraded against k, by share of traffic</h2>\n\
             <figure id=\"chart-k-traffic\">\n{chart}<figcaption>The same, each tenant weighed by \
             its traffic: the worst share of traffic fully down when any {failures} shards fail \
             together (searched over every set on its own, so its worst set may differ from the \
             count's), and the widest share of traffic degraded when one shard fails. Points on \
             the bottom line, labelled \u{201c}0 (none)\u{201d}, are exactly zero.</figcaption>\n\
             </figure>\n</section>\n",
            failures = budget.concurrent_failures,
        );
    }
    Ok(())
}

/// The pairs sharing j shards at k, measured and expected: chart and table.
fn overlap_section(page: &mut String, input: &ReportInput<'_>) -> Result<(), ReportError> {
    let chart = charts::shared_counts(&input.overlap.shared_counts, input.expected_shared_counts)?;
    let _ = write!(
        page,
        "<section>\n<h2>Pairs sharing j shards: measured vs expected</h2>\n\
         <figure id=\"chart-overlap\">\n{chart}<figcaption>Share of all {pairs} tenant pairs at \
         k = {k} whose subsets share exactly j shards{against}. {overlap} of pairs share at \
         least one shard.</figcaption>\n</figure>\n",
        pairs = count(u64::try_from(input.overlap.pairs).unwrap_or(u64::MAX)),
        k = input.k,
        against = if input.expected_shared_counts.is_some() {
            ", next to what independent uniform placement would give"
        } else {
            ""
        },
        overlap = percent(input.overlap.fraction),
    );
    page.push_str(&shared_counts_table(
        &input.overlap.shared_counts,
        input.expected_shared_counts,
    ));
    page.push_str("</section>\n");
    Ok(())
}

/// The per-shard load at k, its notes and the whales, or why there is none.
fn load_section(page: &mut String, input: &ReportInput<'_>) -> Result<(), ReportError> {
    page.push_str("<section>\n<h2>Per-shard load</h2>\n");
    match input.load {
        Some(load) => {
            let chart = charts::per_shard_load(load)?;
            let _ = write!(
                page,
                "<figure id=\"chart-load\">\n{chart}<figcaption>Steady load per shard at k = {k}, \
                 each tenant's weight split evenly over its members. Coefficient of variation \
                 {cv:.3}; the hottest shard, {hottest}, carries {ratio:.2}× the mean.</figcaption>\n\
                 </figure>\n",
                k = input.k,
                cv = load.cv,
                hottest = load.hottest,
                ratio = load.max_over_mean,
            );
            page.push_str(&load_notes(load, input.capacity));
            page.push_str(&whale_table(input.whales, input.k));
        }
        None => page.push_str(
            "<p class=\"note\" id=\"no-weights\">The population had no weights, so there is no \
             per-shard load to show: give tenants weights (a tab and a number after each id in \
             the tenants file) to chart it.</p>\n",
        ),
    }
    page.push_str("</section>\n");
    Ok(())
}

/// Rejects figures a chart cannot place, before drawing anything.
fn validate(input: &ReportInput<'_>) -> Result<(), ReportError> {
    let plan = input.plan;
    if plan.rows.is_empty() {
        return Err(ReportError::EmptyPlan);
    }
    fn finite(
        field: &'static str,
        values: impl IntoIterator<Item = f64>,
    ) -> Result<(), ReportError> {
        if values.into_iter().all(f64::is_finite) {
            Ok(())
        } else {
            Err(ReportError::NotFinite { field })
        }
    }
    finite(
        "the budget",
        [plan.budget.max_degraded, plan.budget.max_fully_down],
    )?;
    finite(
        "a plan row",
        plan.rows.iter().flat_map(|row| {
            [
                row.worst_fully_down.unwrap_or(0.0),
                row.degraded_one_failure,
                row.capacity_lost,
                row.overlap,
            ]
        }),
    )?;
    finite(
        "the overlap",
        std::iter::once(input.overlap.fraction).chain(input.overlap.shared_counts.iter().copied()),
    )?;
    finite(
        "the expected shared counts",
        input.expected_shared_counts.unwrap_or(&[]).iter().copied(),
    )?;
    if let Some(load) = input.load {
        finite(
            "the per-shard load",
            load.per_shard
                .iter()
                .copied()
                .chain([load.mean, load.cv, load.max_over_mean]),
        )?;
    }
    if let Some(sweep) = input.sweep {
        finite("the sweep", [sweep.fully_down.mean, sweep.degraded.mean])?;
    }
    Ok(())
}

/// The numbers behind the overlap chart, since small bars are hard to read.
fn shared_counts_table(measured: &[f64], expected: Option<&[f64]>) -> String {
    let rows = measured.len().max(expected.map_or(0, <[f64]>::len));
    let mut table =
        String::from("<table id=\"shared-counts\">\n<thead><tr><th>j shared</th><th>measured</th>");
    if expected.is_some() {
        table.push_str("<th>expected</th>");
    }
    table.push_str("</tr></thead>\n<tbody>\n");
    for j in 0..rows {
        let cell = |values: &[f64]| values.get(j).map_or("—".to_owned(), |&v| percent(v));
        let _ = write!(table, "<tr><td>{j}</td><td>{}</td>", cell(measured));
        if let Some(expected) = expected {
            let _ = write!(table, "<td>{}</td>", cell(expected));
        }
        table.push_str("</tr>\n");
    }
    table.push_str("</tbody>\n</table>\n");
    table
}

/// Load figures the chart does not show: capacity and failover.
fn load_notes(load: &LoadReport, capacity: Option<f64>) -> String {
    let mut notes = String::from("<ul id=\"load-notes\">\n");
    let _ = writeln!(
        notes,
        "<li>Mean load per shard {}; hottest shard {} at {}.</li>",
        fmt_load(load.mean),
        load.hottest,
        fmt_load(
            load.per_shard
                .get(load.hottest as usize)
                .copied()
                .unwrap_or(0.0)
        ),
    );
    // Without a capacity nothing was compared, so nothing may be claimed.
    match capacity {
        None => notes.push_str(
            "<li id=\"capacity-note\">No capacity was given (--capacity), so no shard was \
             checked against one.</li>\n",
        ),
        Some(capacity) if load.over_capacity.is_empty() => {
            let _ = writeln!(
                notes,
                "<li id=\"capacity-note\">No shard is over the capacity of {} in steady state.</li>",
                fmt_load(capacity)
            );
        }
        Some(capacity) => {
            let _ = writeln!(
                notes,
                "<li id=\"capacity-note\">Over the capacity of {} in steady state: {}.</li>",
                fmt_load(capacity),
                shard_set(&load.over_capacity)
            );
        }
    }
    if let Some(worst) = load
        .failover
        .iter()
        .max_by(|a, b| a.load.total_cmp(&b.load).then(b.failed.cmp(&a.failed)))
    {
        let _ = writeln!(
            notes,
            "<li>Worst single failure for load: when shard {} fails, shard {} rises to {}{}.</li>",
            worst.failed,
            worst.hottest,
            fmt_load(worst.load),
            if worst.over_capacity {
                ", over capacity"
            } else {
                ""
            },
        );
    }
    notes.push_str("</ul>\n");
    notes
}

/// The whales, named, with a suggested `--tenant-k` or dedicated shards.
fn whale_table(whales: &[WhaleRow], k: u32) -> String {
    if whales.is_empty() {
        return format!(
            "<p class=\"note\" id=\"whales\">No tenant carries more than {} of any of its \
             shards' load at k = {k}.</p>\n",
            percent(analysis::load::WHALE_SHARE)
        );
    }
    let mut table = format!(
        "<h3>Whales</h3>\n<p class=\"note\">Tenants carrying more than {} of one of their \
         shards' load at k = {k}, heaviest first, with what would bring each down to that share \
         of a mean shard.</p>\n<table id=\"whales\">\n<thead><tr><th class=\"text\">tenant</th>\
         <th>k</th><th>share of all traffic</th><th>share of shard</th>\
         <th class=\"text\">suggestion</th></tr></thead>\n<tbody>\n",
        percent(analysis::load::WHALE_SHARE)
    );
    for row in whales {
        let whale = &row.whale;
        let suggestion = match (whale.suggested_k, whale.dedicated_shards) {
            (Some(k), _) => format!("--tenant-k {}={k}", row.tenant),
            (None, Some(shards)) => format!(
                "dedicated shards: its traffic fills {shards} mean shards, more than half the \
                 fleet could spread"
            ),
            (None, None) => "—".to_owned(),
        };
        let _ = writeln!(
            table,
            "<tr><td class=\"text\">{}</td><td>{}</td><td>{}</td><td>{} of shard {}</td>\
             <td class=\"text\"><code>{}</code></td></tr>",
            escape(&row.tenant),
            whale.k,
            percent(whale.traffic_share),
            percent(whale.shard_share),
            whale.shard,
            escape(&suggestion),
        );
    }
    table.push_str("</tbody>\n</table>\n");
    table
}

/// Each zone failed in turn.
fn zone_outage_table(outages: &[ZoneOutage], tenants: u64) -> String {
    let share = |count: u64| percent(count as f64 / tenants.max(1) as f64);
    let mut table = String::from(
        "<section id=\"zone-outage\">\n<h2>Zone outages</h2>\n<table>\n<thead><tr>\
         <th class=\"text\">zone down</th><th>shards</th><th>fully down</th><th>degraded</th>\
         <th>capacity lost per degraded tenant</th></tr></thead>\n<tbody>\n",
    );
    for outage in outages {
        let impact = &outage.impact;
        let _ = writeln!(
            table,
            "<tr><td class=\"text\">{}</td><td>{}</td><td>{} ({})</td><td>{} ({})</td><td>{}</td></tr>",
            escape(&outage.zone),
            impact.failed.len(),
            count(impact.fully_down),
            share(impact.fully_down),
            count(impact.degraded),
            share(impact.degraded),
            percent(impact.capacity_lost),
        );
    }
    table.push_str("</tbody>\n</table>\n</section>\n");
    table
}

/// The plan as a table, the recommended row marked.
fn worst_case_table(plan: &Plan) -> String {
    let mut table = String::from(
        "<section>\n<h2>Worst cases by k</h2>\n<table id=\"worst-case\">\n<thead><tr>\
         <th>k</th><th>worst fully down</th><th class=\"text\">failure set</th>\
         <th>degraded on one failure</th><th>capacity lost</th><th>overlap</th>\
         <th class=\"text\">meets budget</th></tr></thead>\n<tbody>\n",
    );
    for row in &plan.rows {
        let recommended = plan.recommended == Some(row.k);
        let _ = writeln!(
            table,
            "<tr{class}><td>{k}</td><td>{down}</td><td class=\"text\">{set}</td><td>{degraded}</td>\
             <td>{lost}</td><td>{overlap}</td><td class=\"text {meets_class}\">{meets}</td></tr>",
            class = if recommended {
                " class=\"recommended\""
            } else {
                ""
            },
            k = row.k,
            down = row
                .worst_fully_down
                .map_or("too many sets to search".to_owned(), percent),
            // When nobody can be fully down no set is "worst"; naming the
            // first one searched would suggest it is special.
            set = match row.worst_fully_down {
                Some(fraction) if fraction > 0.0 => shard_set(&row.worst_failed),
                _ => "—".to_owned(),
            },
            degraded = percent(row.degraded_one_failure),
            lost = percent(row.capacity_lost),
            overlap = percent(row.overlap),
            meets_class = if row.meets_budget { "yes" } else { "no" },
            meets = match (row.meets_budget, recommended) {
                (true, true) => "yes (recommended)",
                (true, false) => "yes",
                (false, _) => "no",
            },
        );
    }
    let _ = write!(
        table,
        "</tbody>\n</table>\n<p class=\"note\">Worst fully down is over every set of {} \
         concurrent failures, searched exactly; capacity lost is the mean share of its shards a \
         degraded tenant loses on one failure.</p>\n</section>\n",
        plan.budget.concurrent_failures
    );
    table
}

/// The failure sweep: worst, mean and percentiles of both figures.
fn sweep_summary(sweep: &Sweep, tenants: u64, k: u32) -> String {
    let share = |count: f64| percent(count / tenants.max(1) as f64);
    let mut section = String::new();
    let _ = write!(
        section,
        "<section id=\"sweep\">\n<h2>Failure sweep</h2>\n<p>At k = {k}, {how} {sets} sets of \
         {failures} failed shards.{bound}</p>\n<table>\n<thead><tr><th class=\"text\">figure</th>\
         <th>{worst}</th><th class=\"text\">worst set</th><th>mean</th><th>p50</th><th>p99</th>\
         </tr></thead>\n<tbody>\n",
        how = if sweep.sampled {
            "a seeded random sample (distinct sets) of"
        } else {
            "every one of the"
        },
        sets = count(sweep.sets),
        failures = sweep.failures,
        bound = if sweep.sampled {
            " The worst of a sample is a lower bound: the worst of all sets may be higher."
        } else {
            ""
        },
        worst = if sweep.sampled {
            "worst seen (lower bound)"
        } else {
            "worst"
        },
    );
    for (name, figure) in [
        ("fully down", &sweep.fully_down),
        ("degraded", &sweep.degraded),
    ] {
        let _ = writeln!(
            section,
            "<tr><td class=\"text\">{name}</td><td>{} ({})</td><td class=\"text\">{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            count(figure.worst),
            share(figure.worst as f64),
            if figure.worst > 0 {
                shard_set(&figure.worst_failed)
            } else {
                "—".to_owned()
            },
            share(figure.mean),
            share(figure.p50 as f64),
            share(figure.p99 as f64),
        );
    }
    section.push_str("</tbody>\n</table>\n</section>\n");
    section
}

#[cfg(test)]
mod tests;
