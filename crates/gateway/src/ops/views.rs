//! Typed views of the gateway's state that both operations faces show:
//! the admin API serialises them, the status page renders them. One type
//! for both, so a field renamed for one cannot render wrong in the other.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::cell::live_blast::LiveBlast;
use crate::health::Availability;
use crate::state::{Gateway, Snapshot};
use crate::telemetry::window::Windows;

/// One tenant's success over the availability window.
#[derive(Debug, Clone, Serialize)]
pub struct TenantAvailability {
    /// The tenant.
    pub tenant: String,
    /// Requests that were served.
    pub ok: u64,
    /// All its requests.
    pub total: u64,
    /// `ok / total`; `None` without requests.
    pub availability: Option<f64>,
    /// When its failures have stopped: about how many seconds ago its last
    /// failed request was, if requests after it all succeeded. `None` while
    /// it is still failing (or never failed), and then left out of JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered_seconds_ago: Option<u64>,
}

/// The `count` tenants with the lowest success ratio over the window
/// (more requests first among equals, then by name).
pub fn worst(gateway: &Gateway, count: usize) -> Vec<TenantAvailability> {
    let now = Instant::now();
    let mut tallies = gateway.tenant_windows.all(now);
    tallies.sort_by(|a, b| {
        let ratio = |t: &crate::telemetry::window::Tally| t.ratio().unwrap_or(1.0);
        ratio(&a.1)
            .total_cmp(&ratio(&b.1))
            .then(b.1.total.cmp(&a.1.total))
            .then(a.0.cmp(&b.0))
    });
    tallies
        .into_iter()
        .take(count)
        .map(|(tenant, tally)| TenantAvailability {
            // Only a tenant with failures can have recovered from them.
            recovered_seconds_ago: (tally.ok < tally.total)
                .then(|| recovered(&gateway.tenant_windows, &tenant, now))
                .flatten()
                .map(|ago| ago.as_secs()),
            tenant,
            ok: tally.ok,
            total: tally.total,
            availability: tally.ratio(),
        })
        .collect()
}

/// How long ago `tenant`'s last failure was (to the end of its bucket),
/// when it failed in the window and a later bucket had requests and no
/// failures; `None` otherwise. A tenant failing in the current bucket is
/// not recovered, however many of its requests succeed around it.
fn recovered(windows: &Windows, tenant: &str, now: Instant) -> Option<Duration> {
    let history = windows.history(tenant, now);
    let last_failure = history.iter().rposition(|b| b.ok < b.total)?;
    let last_request = history.iter().rposition(|b| b.total > 0)?;
    if last_request <= last_failure {
        return None;
    }
    // The bucket after the failure began `into_bucket` plus the buckets
    // between it and the current one ago.
    let between = (history.len() - 2 - last_failure) as u32;
    Some(windows.into_bucket(now) + windows.bucket_length() * between)
}

/// The live blast radius of one cell: who is fully down or degraded by the
/// shards out of rotation now.
pub fn live_blast(snapshot: &Snapshot, cell: usize) -> LiveBlast {
    let shards = &snapshot.shards[cell];
    let (indices, ids): (Vec<placement::ShardIndex>, Vec<String>) = shards
        .iter()
        .enumerate()
        .filter(|(_, shard)| shard.availability(&snapshot.config) != Availability::Up)
        .map(|(index, shard)| (index as placement::ShardIndex, shard.id.clone()))
        .unzip();
    snapshot.blast()[cell].evaluate(&snapshot.config.cells[cell].name, &indices, &ids)
}

/// One tenant's refusals by its limits since the gateway started.
#[derive(Debug, Clone, Serialize)]
pub struct LimitedTenant {
    /// The tenant.
    pub tenant: String,
    /// Requests refused, all limits together.
    pub limited: u64,
    /// Refused for its request rate.
    pub rate_limited: u64,
    /// Refused for its in-flight limit.
    pub in_flight_limited: u64,
    /// Its requests in flight now (0 when that is not limited).
    pub in_flight: u64,
    /// Its limits: `requests_per_second` and `burst` when its rate is
    /// limited, `max_in_flight` when its concurrency is.
    pub requests_per_second: Option<f64>,
    /// See `requests_per_second`.
    pub burst: Option<u32>,
    /// See `requests_per_second`.
    pub max_in_flight: Option<u32>,
}

/// The `count` tenants most often refused by their limits (ties by name);
/// only tenants refused at least once.
pub fn limited(snapshot: &Snapshot, count: usize) -> Vec<LimitedTenant> {
    let mut rows: Vec<LimitedTenant> = snapshot
        .limits
        .iter()
        .filter_map(|(slot, limit)| {
            let (rate_limited, in_flight_limited) = limit.state.limited();
            let tenant = snapshot.tenants.at(slot)?;
            (rate_limited + in_flight_limited > 0).then(|| LimitedTenant {
                tenant: tenant.id().to_owned(),
                limited: rate_limited + in_flight_limited,
                rate_limited,
                in_flight_limited,
                in_flight: limit.state.in_flight(),
                requests_per_second: limit.rate.map(|rate| rate.requests_per_second),
                burst: limit.rate.map(|rate| rate.burst),
                max_in_flight: limit.max_in_flight,
            })
        })
        .collect();
    rows.sort_by(|a, b| b.limited.cmp(&a.limited).then(a.tenant.cmp(&b.tenant)));
    rows.truncate(count);
    rows
}

/// An open lookback window (`reload.lookback_seconds`): when its migration
/// was applied, until when, and the attempts at previous members so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LookbackWindow {
    /// When the migration was applied, in Unix seconds.
    pub applied_unix: u64,
    /// When the window closes, in Unix seconds.
    pub until_unix: u64,
    /// How long it stays open.
    pub seconds_left: f64,
    /// Attempts at lookback members in this window.
    pub attempts: u64,
}

impl LookbackWindow {
    /// The status page's line: "Lookback: tenants moved by the migration
    /// at HH:MM:SS (UTC) may be served by their previous members for
    /// another N s (M lookback attempts)."
    pub fn line(&self) -> String {
        let day = self.applied_unix % 86_400;
        format!(
            "Lookback: tenants moved by the migration at {:02}:{:02}:{:02} may be served by their previous members for another {} s ({} lookback attempt{}).",
            day / 3600,
            day / 60 % 60,
            day % 60,
            self.seconds_left.ceil().max(1.0),
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
        )
    }
}

/// The snapshot's lookback window, when one is open at `now`.
pub fn lookback_window(snapshot: &Snapshot, now: Instant) -> Option<LookbackWindow> {
    let lookback = snapshot.lookback.as_ref().filter(|l| l.is_open(now))?;
    Some(LookbackWindow {
        applied_unix: lookback.at_unix,
        until_unix: lookback.until_unix(),
        seconds_left: lookback.left(now).as_secs_f64(),
        attempts: lookback.attempts(),
    })
}

/// A registered tenant's lookback members, by shard id, while a window is
/// open at `now` (as its requests see them: its route's); else none.
pub fn lookback_members(snapshot: &Snapshot, tenant: &str, now: Instant) -> Vec<String> {
    let open = snapshot.lookback.as_ref().is_some_and(|l| l.is_open(now));
    let route = snapshot
        .tenants
        .get(tenant)
        .and_then(|t| snapshot.tenant_route(t));
    match route {
        Some(route) if open => route
            .lookback
            .iter()
            .map(|&i| snapshot.shards[route.cell][i as usize].id.clone())
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookback_line_says_when_how_long_and_how_many() {
        let window = |applied_unix, seconds_left, attempts| LookbackWindow {
            applied_unix,
            until_unix: 0,
            seconds_left,
            attempts,
        };
        // A day far from the epoch: only the time of day shows.
        let at = 20_000 * 86_400 + 12 * 3600 + 30 * 60 + 5;
        assert_eq!(
            window(at, 124.2, 1).line(),
            "Lookback: tenants moved by the migration at 12:30:05 may be served by their previous members for another 125 s (1 lookback attempt)."
        );
        // Under a second left still reads as time left.
        assert!(
            window(0, 0.3, 7)
                .line()
                .ends_with("another 1 s (7 lookback attempts).")
        );
    }
}
