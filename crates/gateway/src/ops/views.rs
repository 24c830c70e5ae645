//! Typed views of the gateway's state that both operations faces show:
//! the admin API serialises them, the status page renders them. One type
//! for both, so a field renamed for one cannot render wrong in the other.

use serde::Serialize;
use tokio::time::Instant;

use crate::health::Availability;
use crate::ops::live_blast::LiveBlast;
use crate::state::{Gateway, Snapshot};

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
}

/// The `count` tenants with the lowest success ratio over the window
/// (more requests first among equals, then by name).
pub fn worst(gateway: &Gateway, count: usize) -> Vec<TenantAvailability> {
    let mut tallies = gateway.tenant_windows.all(Instant::now());
    tallies.sort_by(|a, b| {
        let ratio = |t: &crate::ops::window::Tally| t.ratio().unwrap_or(1.0);
        ratio(&a.1)
            .total_cmp(&ratio(&b.1))
            .then(b.1.total.cmp(&a.1.total))
            .then(a.0.cmp(&b.0))
    });
    tallies
        .into_iter()
        .take(count)
        .map(|(tenant, tally)| TenantAvailability {
            tenant,
            ok: tally.ok,
            total: tally.total,
            availability: tally.ratio(),
        })
        .collect()
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
    snapshot.blast[cell].evaluate(&snapshot.config.cells[cell].name, &indices, &ids)
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
        .filter_map(|(position, limit)| {
            let (rate_limited, in_flight_limited) = limit.state.limited();
            let tenant = snapshot.tenants.at(position)?;
            (rate_limited + in_flight_limited > 0).then(|| LimitedTenant {
                tenant: tenant.id.clone(),
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
