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
