//! Deployment waves in the `blast` and `plan-waves` answers: what a bad
//! deploy to each wave exposes.

use placement::ShardIndex;
use serde::Serialize;

use super::count::Count;
use crate::waves::WaveExposure;

/// What a bad deploy to one wave exposes.
#[derive(Debug, Serialize)]
pub struct WaveJson {
    /// The wave's name, as in the waves file.
    pub wave: String,
    /// Its shards, ascending.
    pub shards: Vec<ShardIndex>,
    /// Tenants with every shard in this wave: a bad deploy here takes them
    /// fully down.
    pub fully_exposed: Count,
    /// Tenants with at least one shard in this wave.
    pub touched: Count,
}

impl From<WaveExposure> for WaveJson {
    fn from(exposure: WaveExposure) -> Self {
        Self {
            wave: exposure.wave,
            shards: exposure.shards,
            fully_exposed: Count {
                count: exposure.fully_exposed,
                fraction: exposure.fully_exposed_fraction,
            },
            touched: Count {
                count: exposure.touched,
                fraction: exposure.touched_fraction,
            },
        }
    }
}

/// Tenants fully exposed to some wave. A tenant inside one wave is inside
/// no other, so the per-wave counts add up without double counting.
pub fn total_fully_exposed(waves: &[WaveJson], tenants: u64) -> Count {
    let count = waves.iter().map(|wave| wave.fully_exposed.count).sum();
    Count {
        count,
        fraction: count as f64 / tenants.max(1) as f64,
    }
}
