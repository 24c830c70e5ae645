//! Where a weighted population's load lands, its tenants named, for the
//! `blast` answer.

use placement::ShardIndex;
use serde::Serialize;

use crate::load::{FailoverLoad, LoadReport};
use crate::population::Population;

/// Where a weighted population's load lands.
#[derive(Debug, Serialize)]
pub struct LoadJson {
    /// The `--capacity` given, if any.
    pub capacity: Option<f64>,
    /// Load per shard, by index: each tenant's weight split evenly over its
    /// shards.
    pub per_shard: Vec<f64>,
    /// The mean per-shard load.
    pub mean: f64,
    /// Coefficient of variation of the per-shard load.
    pub cv: f64,
    /// The hottest shard's load over the mean.
    pub max_over_mean: f64,
    /// The hottest shard (index).
    pub hottest: ShardIndex,
    /// Shards (indices) over the capacity.
    pub over_capacity: Vec<ShardIndex>,
    /// For each single-shard failure, the hottest surviving shard once the
    /// failed shard's tenants spread over their other shards.
    pub failover: Vec<FailoverLoad>,
    /// The tenants carrying most of the hottest shard's load, heaviest
    /// first.
    pub dominant: Vec<DominantJson>,
}

/// A tenant carrying part of the hottest shard's load.
#[derive(Debug, Serialize)]
pub struct DominantJson {
    /// The tenant.
    pub tenant: String,
    /// The tenant's load on the hottest shard.
    pub load: f64,
    /// Its share of that shard's load.
    pub share: f64,
}

impl LoadJson {
    /// Names the dominant tenants.
    pub fn new(report: LoadReport, capacity: Option<f64>, population: &Population) -> Self {
        Self {
            capacity,
            dominant: report
                .dominant
                .iter()
                .map(|contributor| DominantJson {
                    tenant: population.id(contributor.tenant).into_owned(),
                    load: contributor.load,
                    share: contributor.share,
                })
                .collect(),
            per_shard: report.per_shard,
            mean: report.mean,
            cv: report.cv,
            max_over_mean: report.max_over_mean,
            hottest: report.hottest,
            over_capacity: report.over_capacity,
            failover: report.failover,
        }
    }
}
