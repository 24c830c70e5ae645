//! The status page: one self-contained HTML page (no scripts, no external
//! assets) that says the state in one line at the top, then shows the
//! shard grid by cell and zone (each shard with a sparkline of its requests
//! and errors over the window, its error rate and latency, and since when
//! and why it is out), the live blast radius, the distribution of tenants'
//! availability, the tenants below 100 % (those that recovered marked), the
//! most-limited ones and, when there are any, the tenants poison
//! containment has made suspect. It refreshes itself every few seconds;
//! every box has a fixed size, so a refresh repaints in place instead of
//! reflowing.

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use report::escape;
use tokio::time::Instant;

use crate::health::Availability;
use crate::ops::views::{TenantAvailability, limited, live_blast, worst};
use crate::state::{Gateway, ShardRuntime, Snapshot};
use crate::telemetry::window::{Bucket, SHARD_BUCKETS, Timed};

/// Seconds between refreshes.
const REFRESH_SECONDS: u32 = 3;

/// Rows of the tenants-below-100 % table (padded, so its height is fixed).
const WORST_ROWS: usize = 10;

/// Shards named in the banner before "and N more".
const BANNER_SHARDS: usize = 4;

/// Complete buckets the "now" request rate averages, with the current one.
const RECENT_BUCKETS: usize = 3;

/// The sparkline's size in pixels: one bar per bucket.
const SPARK_BAR: usize = 6;
const SPARK_HEIGHT: usize = 28;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1d232a;background:#fafbfc}\
h1{font-size:1.4rem;margin:0 0 .5rem}h2{font-size:1.15rem;margin-top:1.6rem}h3{font-size:1rem;margin:.8rem 0 .3rem}\
#banner{font-size:1.05rem;font-weight:600;padding:.6rem .9rem;border-radius:.4rem;margin:0 0 .6rem;height:1.5rem;line-height:1.5rem;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}\
#banner.ok{background:#d6f5dd}#banner.warn{background:#fbeec5}#banner.bad{background:#f9d0d0;color:#7a0015}\
.zone{display:flex;align-items:flex-start;margin:.3rem 0}.tiles{display:flex;flex-wrap:wrap;flex:1}\
.zone b{flex:0 0 6rem;font-size:.85rem;color:#555;font-weight:600;padding-top:.4rem}\
.shard{box-sizing:border-box;width:13.5rem;height:8.2rem;overflow:hidden;margin:.2rem;padding:.35rem .5rem;border-radius:.4rem;font-size:.78rem;line-height:1.25;border:1px solid #0002}\
.shard strong{font-size:.95rem}.shard svg{display:block;margin:.15rem 0}.since{color:#7a0015}\
.up{background:#d6f5dd}.failed,.unhealthy,.ejected,.missing{background:#f9d0d0;border-color:#b0002055}.drained,.stale{background:#fbeec5}\
table{border-collapse:collapse;font-size:.9rem}td,th{padding:.25rem .6rem;border-bottom:1px solid #0001;text-align:left;height:1.2rem}\
th.num,.num{text-align:right;font-variant-numeric:tabular-nums}.note{color:#555;font-size:.85rem}\
.bad{color:#b00020;font-weight:600}.recovered{color:#1f6f2e}.pad td{border:0}";

/// `count` and `noun`, with an `s` unless the count is one.
fn counted(count: impl Into<u64>, noun: &str) -> String {
    let count = count.into();
    if count == 1 {
        format!("{count} {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// A time of day in UTC, `HH:MM:SS`.
fn clock(at: SystemTime) -> String {
    let seconds = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// A short length of time: `45 s`, `3 min 5 s`, `2 h 10 min`.
fn ago(length: Duration) -> String {
    let seconds = length.as_secs();
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{} h {} min", seconds / 3600, seconds / 60 % 60),
    }
}

/// A shard out of rotation, as the banner names it.
#[derive(Debug, Clone)]
pub(crate) struct OutShard {
    /// Its id (with its cell, when there are several).
    pub(crate) name: String,
    /// Who took it out ([`Availability::cause`]).
    pub(crate) cause: &'static str,
    /// Since when, if known.
    pub(crate) since: Option<SystemTime>,
}

/// How bad the banner's news is: its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Ok,
    Warn,
    Bad,
}

impl Level {
    fn class(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Bad => "bad",
        }
    }
}

/// What the banner summarises.
#[derive(Debug, Clone)]
pub(crate) struct State {
    /// Every shard of every cell.
    pub(crate) shards: usize,
    /// Those out of rotation.
    pub(crate) out: Vec<OutShard>,
    /// Modeled tenants with every member out, all cells.
    pub(crate) fully_down: u64,
    /// Modeled tenants with a member out, all cells.
    pub(crate) degraded: u64,
    /// Tenants with requests in the window.
    pub(crate) with_traffic: usize,
    /// Of those, the ones below 100 %.
    pub(crate) below: usize,
    /// The window's length in seconds.
    pub(crate) window_seconds: u64,
    /// Since when the fleet's store has not answered (`[fleet]`).
    pub(crate) fleet_down: Option<SystemTime>,
    /// With the tenant store down: when the registry served was last
    /// brought up to date with it (`None`: never, it is the snapshot file's).
    pub(crate) tenants_stale: Option<Option<SystemTime>>,
}

/// The state in one line, and how bad it is; with `[fleet]` and its store
/// unreachable, it says so (containment is this replica's own meanwhile).
pub(crate) fn banner(state: &State) -> (Level, String) {
    let (level, line) = fleet_banner(state);
    let Some(synced) = state.tenants_stale else {
        return (level, line);
    };
    let level = if level == Level::Ok {
        Level::Warn
    } else {
        level
    };
    let news = match synced {
        Some(at) => format!("tenants as of {}: tenant store unreachable", clock(at)),
        None => "tenants from the snapshot file: tenant store unreachable".to_owned(),
    };
    (level, format!("{line}; {news}"))
}

/// The banner with the fleet store's news.
fn fleet_banner(state: &State) -> (Level, String) {
    let (level, line) = shards_banner(state);
    match state.fleet_down {
        None => (level, line),
        Some(since) => (
            if level == Level::Ok {
                Level::Warn
            } else {
                level
            },
            format!(
                "{line}; containment per replica: fleet store unreachable since {}",
                clock(since)
            ),
        ),
    }
}

/// The banner's news of shards and tenants.
fn shards_banner(state: &State) -> (Level, String) {
    if state.out.is_empty() {
        let all = format!("All {} up", counted(state.shards as u64, "shard"));
        return if state.below > 0 {
            (
                Level::Warn,
                format!(
                    "{all}; {} below 100 % over the last {} s",
                    counted(state.below as u64, "tenant"),
                    state.window_seconds
                ),
            )
        } else if state.with_traffic == 0 {
            (
                Level::Ok,
                format!(
                    "{all}; no tenant traffic in the last {} s",
                    state.window_seconds
                ),
            )
        } else {
            (Level::Ok, format!("{all}; every tenant at 100 %"))
        };
    }
    let mut named: Vec<String> = state
        .out
        .iter()
        .take(BANNER_SHARDS)
        .map(|shard| match shard.since {
            Some(since) => format!("{} since {} by {}", shard.name, clock(since), shard.cause),
            None => format!("{} by {}", shard.name, shard.cause),
        })
        .collect();
    if state.out.len() > BANNER_SHARDS {
        named.push(format!("and {} more", state.out.len() - BANNER_SHARDS));
    }
    let fully_down = if state.fully_down == 0 {
        "no tenant fully down".to_owned()
    } else {
        format!("{} fully down", counted(state.fully_down, "tenant"))
    };
    (
        if state.fully_down > 0 {
            Level::Bad
        } else {
            Level::Warn
        },
        format!(
            "{} of {} out ({}); {fully_down}, {} degraded",
            state.out.len(),
            counted(state.shards as u64, "shard"),
            named.join(", "),
            state.degraded
        ),
    )
}

/// One shard as the page shows it.
struct ShardLine<'a> {
    runtime: &'a ShardRuntime,
    availability: Availability,
    since: Option<SystemTime>,
    history: [Timed; SHARD_BUCKETS],
}

/// Renders the page.
pub fn render(gateway: &Gateway) -> String {
    let snapshot = gateway.snapshot();
    let now = Instant::now();
    let wall = SystemTime::now();
    let windows = &gateway.shard_windows;
    let window_seconds = windows.length().as_secs();
    let several_cells = snapshot.config.cells.len() > 1;

    let cells: Vec<Vec<ShardLine>> = snapshot
        .shards
        .iter()
        .map(|cell| {
            cell.iter()
                .map(|runtime| {
                    let health = runtime.health.lock().expect("health lock").clone();
                    let availability = health.availability(now, &snapshot.config.health);
                    let since = health
                        .out_since(now, &snapshot.config.health)
                        .map(|at| wall - now.saturating_duration_since(at));
                    ShardLine {
                        runtime,
                        availability,
                        since,
                        history: windows.history(runtime.window_key(), now),
                    }
                })
                .collect()
        })
        .collect();
    let blasts: Vec<_> = (0..snapshot.config.cells.len())
        .map(|cell| live_blast(&snapshot, cell))
        .collect();
    // Every tenant with requests in the window, worst first.
    let tenants = worst(gateway, usize::MAX);
    let ratios: Vec<f64> = tenants.iter().filter_map(|row| row.availability).collect();
    let state = State {
        shards: cells.iter().map(Vec::len).sum(),
        out: cells
            .iter()
            .flatten()
            .filter_map(|line| {
                Some(OutShard {
                    name: if several_cells {
                        format!("{}/{}", line.runtime.cell, line.runtime.id)
                    } else {
                        line.runtime.id.clone()
                    },
                    cause: line.availability.cause()?,
                    since: line.since,
                })
            })
            .collect(),
        fully_down: blasts.iter().map(|b| b.fully_down).sum(),
        degraded: blasts.iter().map(|b| b.degraded).sum(),
        with_traffic: ratios.len(),
        below: ratios.iter().filter(|&&r| r < 1.0).count(),
        window_seconds,
        fleet_down: crate::fleet::down_since(gateway),
        tenants_stale: gateway
            .tenant_store
            .get()
            .filter(|link| !link.is_up())
            .map(|link| {
                link.last_sync_unix()
                    .map(|at| UNIX_EPOCH + Duration::from_secs_f64(at))
            }),
    };
    let (level, line) = banner(&state);

    let mut html = String::new();
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>shuffle-shard gateway</title><style>{STYLE}</style></head><body>\
         <h1>shuffle-shard gateway</h1>\
         <p id=\"banner\" class=\"{level}\" title=\"{line}\">{line}</p>\
         <p class=\"note\">{}, {}. Refreshes every {REFRESH_SECONDS} s; sparklines, errors and latency cover the last {window_seconds} s, in {} s steps; times are UTC.</p>",
        counted(snapshot.tenants.len() as u64, "tenant"),
        counted(snapshot.config.cells.len() as u64, "cell"),
        windows.bucket_length().as_secs_f64(),
        level = level.class(),
        line = escape(&line),
    );

    if let Some(line) = super::views::lookback_window(&snapshot, now).map(|w| w.line()) {
        let _ = write!(html, "<p class=\"note lookback\">{}</p>", escape(&line));
    }
    shard_grid(&snapshot, &cells, gateway, now, wall, &mut html);
    blast_table(&blasts, &mut html);
    distribution(&ratios, window_seconds, &mut html);
    below_full(&tenants, &mut html);
    limited_table(&snapshot, &mut html);
    suspects(gateway, now, &mut html);
    html.push_str("</body></html>");
    html
}

/// The shards by cell and zone, each with its sparkline and figures.
fn shard_grid(
    snapshot: &Snapshot,
    cells: &[Vec<ShardLine>],
    gateway: &Gateway,
    now: Instant,
    wall: SystemTime,
    html: &mut String,
) {
    let windows = &gateway.shard_windows;
    let bucket = windows.bucket_length().as_secs_f64();
    // One scale for every sparkline, so tiles compare.
    let peak = cells
        .iter()
        .flatten()
        .flat_map(|line| line.history.iter().map(|b| b.tally().total))
        .max()
        .unwrap_or(0);
    html.push_str("<h2>Shards</h2>");
    for (cell, lines) in snapshot.config.cells.iter().zip(cells) {
        let _ = write!(
            html,
            "<section class=\"cell\" id=\"cell-{0}\"><h3>cell {0}</h3>",
            escape(&cell.name)
        );
        if let Some(membership) = snapshot.memberships.get(&cell.name) {
            discovery_line(gateway, &cell.name, membership, wall, html);
        }
        let mut zones: Vec<Option<&str>> = Vec::new();
        for shard in &cell.shards {
            if !zones.contains(&shard.zone.as_deref()) {
                zones.push(shard.zone.as_deref());
            }
        }
        for zone in zones {
            let _ = write!(
                html,
                "<div class=\"zone\"><b>{}</b><div class=\"tiles\">",
                zone.map_or_else(|| "no zone".to_owned(), |z| format!("zone {}", escape(z)))
            );
            for line in lines
                .iter()
                .filter(|line| line.runtime.zone.as_deref() == zone)
            {
                let member = snapshot
                    .memberships
                    .get(&cell.name)
                    .and_then(|membership| membership.member(&line.runtime.id));
                shard_tile(
                    line,
                    member,
                    peak,
                    bucket,
                    windows.into_bucket(now),
                    wall,
                    html,
                );
            }
            html.push_str("</div></div>");
        }
        html.push_str("</section>");
    }
}

/// One shard's tile.
fn shard_tile(
    line: &ShardLine,
    member: Option<&crate::discovery::Member>,
    peak: u64,
    bucket: f64,
    into_bucket: Duration,
    wall: SystemTime,
    html: &mut String,
) {
    let mut sum = Timed::default();
    for b in &line.history {
        sum.merge(b);
    }
    let tally = sum.tally();
    // "Now": the last few complete buckets and the current one, so a shard
    // that went out shows the traffic it gets now, not the window's.
    let recent: u64 = line.history[SHARD_BUCKETS - 1 - RECENT_BUCKETS..]
        .iter()
        .map(|b| b.tally().total)
        .sum();
    let rate = recent as f64 / (bucket * RECENT_BUCKETS as f64 + into_bucket.as_secs_f64());
    let errors = match tally.ratio() {
        Some(ratio) => format!("{:.1} % errors", (1.0 - ratio) * 100.0),
        None => "no requests".to_owned(),
    };
    let latency = match (sum.latency_quantile(0.5), sum.latency_quantile(0.99)) {
        (Some(p50), Some(p99)) => format!("p50 {} · p99 {}", millis(p50), millis(p99)),
        _ => "p50 – · p99 –".to_owned(),
    };
    // An operator's mark names who set it (with `[fleet]`, any replica).
    let marked = matches!(
        line.availability,
        Availability::Failed | Availability::Drained
    )
    .then(|| {
        let health = line.runtime.health.lock().expect("health lock");
        health.mark_origin.clone()
    })
    .flatten()
    .map(|origin| {
        let at = UNIX_EPOCH + Duration::from_millis(origin.at_ms);
        format!(" on {} at {}", escape(&origin.by), clock(at))
    })
    .unwrap_or_default();
    // A discovered shard says why its source lost it, and when it was
    // first found.
    let marked = match member.and_then(|member| member.missing) {
        Some(missing) if line.availability == Availability::Missing => {
            format!("{marked} ({})", missing.why)
        }
        _ => marked,
    };
    let found = member.map_or_else(String::new, |member| {
        format!(
            "<div class=\"found\">found {}</div>",
            clock(member.known_since)
        )
    });
    let since = match (line.availability.cause(), line.since) {
        (None, _) => String::new(),
        (Some(cause), Some(since)) => format!(
            "<div class=\"since\">out since {} ({}) by {cause}{marked}</div>",
            clock(since),
            ago(wall.duration_since(since).unwrap_or_default())
        ),
        (Some(cause), None) => format!("<div class=\"since\">out by {cause}{marked}</div>"),
    };
    let _ = write!(
        html,
        "<div class=\"shard {class}\" data-shard=\"{id}\" data-health=\"{class}\"><strong>{id}</strong> {class} · {in_flight} in flight{since}{found}{spark}\
         <span class=\"rate\">{rate:.1}/s now</span> · <span class=\"errors\">{errors}</span><br><span class=\"latency\">{latency}</span></div>",
        class = line.availability.name(),
        id = escape(&line.runtime.id),
        in_flight = line.runtime.in_flight(),
        spark = sparkline(&line.runtime.id, &line.history, peak, bucket),
    );
}

/// Where a discovered cell's shards come from, and what its source last
/// said.
fn discovery_line(
    gateway: &Gateway,
    cell: &str,
    membership: &crate::discovery::Membership,
    wall: SystemTime,
    html: &mut String,
) {
    let look = gateway
        .discovery_looks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(cell)
        .cloned()
        .unwrap_or_default();
    let missing = membership
        .members
        .iter()
        .filter(|member| member.missing.is_some())
        .count();
    let mut line = format!(
        "shards from {} · {} found{}",
        escape(&membership.source.to_string()),
        membership.members.len(),
        if missing > 0 {
            format!(", {missing} missing")
        } else {
            String::new()
        }
    );
    if let Some(at) = look.last_answer {
        let _ = write!(
            line,
            " · last answer {} ago",
            ago(wall.duration_since(at).unwrap_or_default())
        );
    }
    if let Some((at, why)) = &look.last_problem {
        let _ = write!(
            line,
            " · <b>no answer since {}</b>: {} (the last good membership serves)",
            clock(*at),
            escape(why)
        );
    }
    if let Some((at, why)) = &look.last_refusal {
        let _ = write!(
            line,
            " · <b>change refused at {}</b>: {}",
            clock(*at),
            escape(why)
        );
    }
    let _ = write!(
        html,
        "<p class=\"note discovery\" data-discovery=\"{}\">{line}</p>",
        escape(cell)
    );
}

/// A latency for people: `0.4 ms`, `12 ms`, `1.3 s`.
fn millis(length: Duration) -> String {
    let ms = length.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// An inline SVG of one bar per bucket: requests in grey-blue, the failed
/// part of them in red on top, all on the page's common scale `peak`.
fn sparkline(id: &str, history: &[Timed], peak: u64, bucket: f64) -> String {
    let width = SPARK_BAR * history.len();
    let mut svg = format!(
        "<svg class=\"spark\" data-spark=\"{id}\" width=\"{width}\" height=\"{SPARK_HEIGHT}\" viewBox=\"0 0 {width} {SPARK_HEIGHT}\" role=\"img\" aria-label=\"requests and errors per {bucket} s over the window\">\
         <rect width=\"{width}\" height=\"{SPARK_HEIGHT}\" fill=\"#ffffff80\"/>",
        id = escape(id),
    );
    let scale = |count: u64| {
        if peak == 0 || count == 0 {
            0
        } else {
            // At least a pixel, so one request shows.
            ((count as f64 / peak as f64 * SPARK_HEIGHT as f64).round() as usize).max(1)
        }
    };
    for (index, b) in history.iter().enumerate() {
        let tally = b.tally();
        let (all, failed) = (scale(tally.total), scale(tally.total - tally.ok));
        let x = index * SPARK_BAR;
        if all > 0 {
            let _ = write!(
                svg,
                "<rect class=\"req\" x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{all}\" fill=\"#4a6fa5\"/>",
                SPARK_HEIGHT - all,
                SPARK_BAR - 1
            );
        }
        if failed > 0 {
            let _ = write!(
                svg,
                "<rect class=\"err\" x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{failed}\" fill=\"#c62828\"/>",
                SPARK_HEIGHT - all,
                SPARK_BAR - 1
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The live blast radius, one row per cell.
fn blast_table(blasts: &[crate::cell::live_blast::LiveBlast], html: &mut String) {
    html.push_str("<h2>Live blast radius</h2><table id=\"blast\"><tr><th>cell</th><th>shards out</th><th class=\"num\">tenants</th><th class=\"num\">fully down</th><th class=\"num\">degraded</th><th>fully-down tenants</th></tr>");
    for live in blasts {
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
}

/// The classes of the availability distribution: a label and whether a
/// ratio falls in it.
const CLASSES: [(&str, f64, f64); 7] = [
    ("0 % (down)", 0.0, 0.0),
    ("under 50 %", f64::MIN_POSITIVE, 0.5),
    ("50–90 %", 0.5, 0.9),
    ("90–99 %", 0.9, 0.99),
    ("99–99.9 %", 0.99, 0.999),
    ("99.9–100 %", 0.999, 1.0),
    ("100 %", 1.0, 1.0),
];

/// Which class of [`CLASSES`] a ratio falls in: the exact ends are their
/// own classes, the others take `[low, high)`.
fn class_of(ratio: f64) -> usize {
    if ratio <= 0.0 {
        0
    } else if ratio >= 1.0 {
        CLASSES.len() - 1
    } else {
        CLASSES[1..CLASSES.len() - 1]
            .iter()
            .position(|&(_, low, high)| ratio >= low && ratio < high)
            .map_or(1, |i| i + 1)
    }
}

/// A bar chart of how many tenants with traffic sit in each class.
fn distribution(ratios: &[f64], window_seconds: u64, html: &mut String) {
    let mut counts = [0usize; CLASSES.len()];
    for &ratio in ratios {
        counts[class_of(ratio)] += 1;
    }
    let most = counts.iter().copied().max().unwrap_or(0).max(1);
    let (label, bar, row) = (110, 300, 20);
    let (width, height) = (label + bar + 60, row * CLASSES.len());
    let _ = write!(
        html,
        "<h2>Tenant availability</h2><p class=\"note\">Tenants with requests in the last {window_seconds} s ({}), by their success ratio.</p>\
         <svg id=\"distribution\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"tenants by availability\" font-family=\"system-ui,sans-serif\" font-size=\"12\">",
        ratios.len()
    );
    for (index, ((name, _, _), count)) in CLASSES.iter().zip(counts).enumerate() {
        let y = index * row;
        let length = if count == 0 {
            0
        } else {
            (count * bar / most).max(1)
        };
        let colour = match index {
            0 | 1 => "#c62828",
            2..=4 => "#e0a030",
            5 => "#8bc34a",
            _ => "#2e7d32",
        };
        let _ = write!(
            html,
            "<g class=\"class\" data-class=\"{index}\" data-count=\"{count}\"><text x=\"{tx}\" y=\"{ty}\" text-anchor=\"end\">{name}</text>\
             <rect x=\"{label}\" y=\"{ry}\" width=\"{length}\" height=\"{rh}\" fill=\"{colour}\"/>\
             <text x=\"{cx}\" y=\"{ty}\">{count}</text></g>",
            tx = label - 6,
            ty = y + 14,
            ry = y + 3,
            rh = row - 6,
            cx = label + length + 6,
        );
    }
    html.push_str("</svg>");
}

/// The tenants below 100 % over the window, worst first, those still
/// failing before those that recovered (marked so); a fixed number of rows.
fn below_full(rows: &[TenantAvailability], html: &mut String) {
    let mut below: Vec<&TenantAvailability> = rows
        .iter()
        .filter(|row| row.availability.is_some_and(|r| r < 1.0))
        .collect();
    let count = below.len();
    // Stable: each group keeps the worst-first order.
    below.sort_by_key(|row| row.recovered_seconds_ago.is_some());
    let _ = write!(
        html,
        "<h2>Tenants below 100 %</h2><p class=\"note\">{} over the window; the first {WORST_ROWS}, still failing before recovered.</p>\
         <table id=\"worst\"><tr><th>tenant</th><th class=\"num\">availability</th><th class=\"num\">requests</th><th>now</th></tr>",
        if count == 0 {
            "none".to_owned()
        } else {
            counted(count as u64, "tenant")
        }
    );
    for row in below.iter().take(WORST_ROWS) {
        let ratio = row.availability.unwrap_or(1.0);
        let now = match row.recovered_seconds_ago {
            Some(seconds) => format!(
                "<td class=\"recovered\">recovered {} ago</td>",
                ago(Duration::from_secs(seconds))
            ),
            None => "<td class=\"bad\">failing</td>".to_owned(),
        };
        let _ = write!(
            html,
            "<tr data-tenant=\"{tenant}\"><td>{tenant}</td><td class=\"num{}\">{:.3}%</td><td class=\"num\">{}</td>{now}</tr>",
            if ratio < 0.99 { " bad" } else { "" },
            ratio * 100.0,
            row.total,
            tenant = escape(&row.tenant),
        );
    }
    for _ in count.min(WORST_ROWS)..WORST_ROWS {
        html.push_str("<tr class=\"pad\"><td colspan=\"4\"></td></tr>");
    }
    html.push_str("</table>");
}

/// The tenants most often refused by their limits.
fn limited_table(snapshot: &Snapshot, html: &mut String) {
    html.push_str("<h2>Most-limited tenants</h2><table id=\"limited\"><tr><th>tenant</th><th class=\"num\">refused</th><th class=\"num\">over rate</th><th class=\"num\">over in-flight</th><th>limits</th></tr>");
    let limited = limited(snapshot, 10);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(clock: &str) -> SystemTime {
        let parts: Vec<u64> = clock.split(':').map(|p| p.parse().unwrap()).collect();
        // A day far from the epoch, to show only the time of day counts.
        UNIX_EPOCH
            + Duration::from_secs(20_000 * 86_400 + parts[0] * 3600 + parts[1] * 60 + parts[2])
    }

    fn state() -> State {
        State {
            shards: 16,
            out: Vec::new(),
            fully_down: 0,
            degraded: 0,
            with_traffic: 500,
            below: 0,
            window_seconds: 60,
            fleet_down: None,
            tenants_stale: None,
        }
    }

    fn out(name: &str, cause: &'static str, since: Option<&str>) -> OutShard {
        OutShard {
            name: name.into(),
            cause,
            since: since.map(at),
        }
    }

    #[test]
    fn the_banner_says_each_state_in_one_line() {
        let cases = [
            (
                state(),
                Level::Ok,
                "All 16 shards up; every tenant at 100 %",
            ),
            (
                State {
                    with_traffic: 0,
                    ..state()
                },
                Level::Ok,
                "All 16 shards up; no tenant traffic in the last 60 s",
            ),
            (
                State {
                    below: 3,
                    ..state()
                },
                Level::Warn,
                "All 16 shards up; 3 tenants below 100 % over the last 60 s",
            ),
            (
                State {
                    out: vec![
                        out("s3", "health check", Some("13:02:05")),
                        out("s11", "admin", Some("13:04:00")),
                    ],
                    fully_down: 32,
                    degraded: 442,
                    below: 40,
                    ..state()
                },
                Level::Bad,
                "2 of 16 shards out (s3 since 13:02:05 by health check, s11 since 13:04:00 by admin); 32 tenants fully down, 442 degraded",
            ),
            (
                State {
                    out: vec![out("s7", "ejection", None)],
                    fully_down: 0,
                    degraded: 61,
                    ..state()
                },
                Level::Warn,
                "1 of 16 shards out (s7 by ejection); no tenant fully down, 61 degraded",
            ),
            (
                State {
                    shards: 20,
                    out: (0..6)
                        .map(|i| out(&format!("c/s{i}"), "stale health check", Some("00:00:09")))
                        .collect(),
                    fully_down: 1,
                    degraded: 7,
                    ..state()
                },
                Level::Bad,
                "6 of 20 shards out (c/s0 since 00:00:09 by stale health check, c/s1 since 00:00:09 by stale health check, \
                 c/s2 since 00:00:09 by stale health check, c/s3 since 00:00:09 by stale health check, and 2 more); \
                 1 tenant fully down, 7 degraded",
            ),
            (
                State {
                    fleet_down: Some(at("14:02:07")),
                    ..state()
                },
                Level::Warn,
                "All 16 shards up; every tenant at 100 %; containment per replica: fleet store unreachable since 14:02:07",
            ),
            (
                State {
                    tenants_stale: Some(Some(at("14:03:00"))),
                    ..state()
                },
                Level::Warn,
                "All 16 shards up; every tenant at 100 %; tenants as of 14:03:00: tenant store unreachable",
            ),
            (
                State {
                    tenants_stale: Some(None),
                    ..state()
                },
                Level::Warn,
                "All 16 shards up; every tenant at 100 %; tenants from the snapshot file: tenant store unreachable",
            ),
        ];
        for (state, level, text) in cases {
            assert_eq!(banner(&state), (level, text.to_owned()));
        }
    }

    #[test]
    fn availability_classes_split_at_their_bounds() {
        let cases = [
            (0.0, "0 % (down)"),
            (1e-9, "under 50 %"),
            (0.4999, "under 50 %"),
            (0.5, "50–90 %"),
            (0.95, "90–99 %"),
            (0.99, "99–99.9 %"),
            (0.9995, "99.9–100 %"),
            (0.999_999, "99.9–100 %"),
            (1.0, "100 %"),
        ];
        for (ratio, name) in cases {
            assert_eq!(CLASSES[class_of(ratio)].0, name, "{ratio}");
        }
    }

    #[test]
    fn lengths_read_as_people_say_them() {
        assert_eq!(ago(Duration::from_secs(40)), "40 s");
        assert_eq!(ago(Duration::from_secs(125)), "2 min 5 s");
        assert_eq!(ago(Duration::from_secs(7800)), "2 h 10 min");
        assert_eq!(millis(Duration::from_micros(420)), "0.4 ms");
        assert_eq!(millis(Duration::from_millis(12)), "12 ms");
        assert_eq!(millis(Duration::from_millis(1300)), "1.3 s");
        assert_eq!(clock(at("13:02:05")), "13:02:05");
    }

    #[test]
    fn a_sparkline_has_a_bar_per_busy_bucket_and_red_for_failures() {
        let mut history = [Timed::default(); SHARD_BUCKETS];
        history[0].add((true, Duration::from_millis(1)));
        history[5].add((true, Duration::from_millis(1)));
        history[5].add((false, Duration::from_millis(1)));
        let svg = sparkline("s<1>", &history, 2, 2.0);
        assert!(
            svg.starts_with("<svg class=\"spark\" data-spark=\"s&lt;1&gt;\""),
            "{svg}"
        );
        assert_eq!(svg.matches("class=\"req\"").count(), 2, "{svg}");
        assert_eq!(svg.matches("class=\"err\"").count(), 1, "{svg}");
        // The busiest bucket fills the height; the failed half is red.
        assert!(
            svg.contains("<rect class=\"req\" x=\"30\" y=\"0\" width=\"5\" height=\"28\""),
            "{svg}"
        );
        assert!(
            svg.contains("<rect class=\"err\" x=\"30\" y=\"0\" width=\"5\" height=\"14\""),
            "{svg}"
        );
        // Nothing at all: no bars, same size.
        let empty = sparkline("s1", &[Timed::default(); SHARD_BUCKETS], 0, 2.0);
        assert!(!empty.contains("class=\"req\""));
        assert!(empty.contains("width=\"180\" height=\"28\""));
    }
}
