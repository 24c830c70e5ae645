//! The status page: one self-contained HTML page (no scripts, no external
//! assets) showing the shard grid by cell and zone, the live blast radius,
//! the worst tenants, the most-limited ones and, when there are any, the
//! tenants poison containment has made suspect. It refreshes itself every
//! few seconds.

use std::fmt::Write;

use report::escape;
use tokio::time::Instant;

use crate::health::Availability;
use crate::ops::views::{limited, live_blast, worst};
use crate::state::Gateway;

/// Seconds between refreshes.
const REFRESH_SECONDS: u32 = 3;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1d232a;background:#fafbfc}\
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:1.6rem}h3{font-size:1rem;margin:.8rem 0 .3rem}\
.zone{display:flex;flex-wrap:wrap;align-items:center;margin:.3rem 0}\
.zone b{width:6rem;font-size:.85rem;color:#555;font-weight:600}\
.shard{min-width:6.5rem;margin:.2rem;padding:.35rem .5rem;border-radius:.4rem;font-size:.85rem;border:1px solid #0002}\
.shard strong{font-size:.95rem}\
.up{background:#d6f5dd}.failed,.unhealthy,.ejected{background:#f9d0d0;border-color:#b0002055}.drained,.stale{background:#fbeec5}\
table{border-collapse:collapse;font-size:.9rem}td,th{padding:.25rem .6rem;border-bottom:1px solid #0001;text-align:left}\
th.num,.num{text-align:right;font-variant-numeric:tabular-nums}.note{color:#555;font-size:.85rem}\
.bad{color:#b00020;font-weight:600}";

/// `count` and `noun`, with an `s` unless the count is one.
fn counted(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("{count} {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// Renders the page.
pub fn render(gateway: &Gateway) -> String {
    let snapshot = gateway.snapshot();
    let now = Instant::now();
    let window = gateway.shard_windows.length().as_secs_f64();
    let mut html = String::new();
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>shuffle-shard gateway</title><style>{STYLE}</style></head><body>\
         <h1>shuffle-shard gateway</h1>\
         <p class=\"note\">{}, {}. Refreshes every {REFRESH_SECONDS} s; rates and availability cover the last {} s.</p>",
        counted(snapshot.tenants.len(), "tenant"),
        counted(snapshot.config.cells.len(), "cell"),
        window as u64
    );

    html.push_str("<h2>Shards</h2>");
    for (cell_index, cell) in snapshot.config.cells.iter().enumerate() {
        let _ = write!(
            html,
            "<section class=\"cell\" id=\"cell-{0}\"><h3>cell {0}</h3>",
            escape(&cell.name)
        );
        let mut zones: Vec<Option<&str>> = Vec::new();
        for shard in &cell.shards {
            if !zones.contains(&shard.zone.as_deref()) {
                zones.push(shard.zone.as_deref());
            }
        }
        for zone in zones {
            let _ = write!(
                html,
                "<div class=\"zone\"><b>{}</b>",
                zone.map_or_else(|| "no zone".to_owned(), |z| format!("zone {}", escape(z)))
            );
            for shard in snapshot.shards[cell_index]
                .iter()
                .filter(|s| s.zone.as_deref() == zone)
            {
                let availability = shard.availability(&snapshot.config);
                let rate =
                    gateway.shard_windows.tally(shard.window_key(), now).total as f64 / window;
                let _ = write!(
                    html,
                    "<span class=\"shard {class}\" data-shard=\"{id}\" data-health=\"{class}\"><strong>{id}</strong><br>{class} · {in_flight} in flight · {rate:.1}/s</span>",
                    class = availability.name(),
                    id = escape(&shard.id),
                    in_flight = shard.in_flight(),
                );
            }
            html.push_str("</div>");
        }
        html.push_str("</section>");
    }

    html.push_str("<h2>Live blast radius</h2><table id=\"blast\"><tr><th>cell</th><th>shards out</th><th class=\"num\">tenants</th><th class=\"num\">fully down</th><th class=\"num\">degraded</th><th>fully-down tenants</th></tr>");
    for cell in 0..snapshot.config.cells.len() {
        let live = live_blast(&snapshot, cell);
        let down: Vec<String> = live
            .fully_down_tenants
            .iter()
            .take(20)
            .map(|t| escape(t))
            .collect();
        let more = live.fully_down_tenants.len().saturating_sub(20);
        let _ = write!(
            html,
            "<tr data-cell=\"{cell}\"><td>{cell}</td><td>{out}</td><td class=\"num\">{tenants}</td><td class=\"num fully-down{alarm}\">{fully}</td><td class=\"num degraded\">{degraded}</td><td>{down}{more}</td></tr>",
            cell = escape(&live.cell),
            out = if live.unavailable.is_empty() {
                "none".to_owned()
            } else {
                escape(&live.unavailable.join(", "))
            },
            tenants = live.tenants,
            fully = live.fully_down,
            alarm = if live.fully_down > 0 { " bad" } else { "" },
            degraded = live.degraded,
            down = down.join(", "),
            more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            },
        );
    }
    html.push_str("</table>");

    html.push_str("<h2>Worst tenants</h2><table id=\"worst\"><tr><th>tenant</th><th class=\"num\">availability</th><th class=\"num\">requests</th></tr>");
    let worst = worst(gateway, 10);
    if worst.is_empty() {
        html.push_str(
            "<tr><td colspan=\"3\" class=\"note\">no traffic in the window yet</td></tr>",
        );
    }
    for row in worst {
        let ratio = row.availability.unwrap_or(1.0);
        let _ = write!(
            html,
            "<tr><td>{}</td><td class=\"num{}\">{:.3}%</td><td class=\"num\">{}</td></tr>",
            escape(&row.tenant),
            if ratio < 0.99 { " bad" } else { "" },
            ratio * 100.0,
            row.total
        );
    }
    html.push_str("</table>");

    html.push_str("<h2>Most-limited tenants</h2><table id=\"limited\"><tr><th>tenant</th><th class=\"num\">refused</th><th class=\"num\">over rate</th><th class=\"num\">over in-flight</th><th>limits</th></tr>");
    let limited = limited(&snapshot, 10);
    if limited.is_empty() {
        html.push_str(
            "<tr><td colspan=\"5\" class=\"note\">no tenant has been refused by its limits since start</td></tr>",
        );
    }
    for row in limited {
        let mut limits = Vec::new();
        if let (Some(rate), Some(burst)) = (row.requests_per_second, row.burst) {
            limits.push(format!("{rate}/s, burst {burst}"));
        }
        if let Some(max) = row.max_in_flight {
            limits.push(format!("{max} in flight"));
        }
        let _ = write!(
            html,
            "<tr data-tenant=\"{tenant}\"><td>{tenant}</td><td class=\"num bad\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            row.limited,
            row.rate_limited,
            row.in_flight_limited,
            limits.join(", "),
            tenant = escape(&row.tenant),
        );
    }
    html.push_str("</table>");
    suspects(gateway, now, &mut html);
    let up = snapshot
        .all_shards()
        .filter(|s| s.availability(&snapshot.config) == Availability::Up)
        .count();
    let _ = write!(
        html,
        "<p class=\"note\" id=\"summary\">{up} of {} shards up.</p></body></html>",
        snapshot.all_shards().count()
    );
    html
}

/// The suspect tenants, when there are any (see `routing.poison_after`):
/// who, in which cell, the members each struck, and how long its
/// quarantine has left.
fn suspects(gateway: &Gateway, now: Instant, html: &mut String) {
    let suspects = gateway.suspects.list(now);
    if suspects.is_empty() {
        return;
    }
    html.push_str("<h2>Suspect tenants</h2><p class=\"note\">Their requests crashed shards (poison containment): each is served only by the shards it struck until its quarantine ends or an operator clears it.</p><table id=\"suspects\"><tr><th>tenant</th><th>cell</th><th>struck shards</th><th class=\"num\">stops</th><th class=\"num\">quarantine left</th></tr>");
    for (tenant, suspect) in suspects {
        let _ = write!(
            html,
            "<tr data-tenant=\"{tenant}\"><td class=\"bad\">{tenant}</td><td>{cell}</td><td>{shards}</td><td class=\"num\">{stops}</td><td class=\"num\">{left} s</td></tr>",
            tenant = escape(&tenant),
            cell = escape(&suspect.cell),
            shards = escape(&suspect.shards.join(", ")),
            stops = suspect.stops,
            left = suspect.until.saturating_duration_since(now).as_secs(),
        );
    }
    html.push_str("</table>");
}
