//! The blast radius by share of traffic rather than by tenant count.

use placement::ShardIndex;

use super::model::{BlastModel, Scratch};
use super::sweep::SetSource;
use crate::combinatorics::{binomial, for_each_combination};
use crate::error::{AnalysisError, check_failures};
use crate::placements::Placements;
use crate::population::Population;

/// The blast radius by traffic share rather than tenant count: the same
/// tables, each distinct subset carrying the summed weight of its tenants.
/// Fully down is a sum over the subsets of the failed set (or a scan);
/// degraded by one failure is a pass over the shards.
#[derive(Debug)]
pub struct TrafficModel<'a> {
    model: &'a BlastModel,
    /// `weights[s][i]`: the weight of the tenants whose subset is row `i`
    /// of the exact table of size `s`.
    weights: Vec<Vec<f64>>,
    /// Each shard's traffic: the weight of the tenants it serves.
    per_shard: Vec<f64>,
    total: f64,
}

impl<'a> TrafficModel<'a> {
    /// Weighs `model`'s distinct subsets by `population`'s weights (1 each
    /// when unweighted); `placements` must be the ones `model` was built
    /// from.
    pub fn new(model: &'a BlastModel, placements: &Placements, population: &Population) -> Self {
        let tables = &model.tables;
        let mut weights: Vec<Vec<f64>> = tables
            .exact
            .iter()
            .map(|table| vec![0.0; table.rows().len()])
            .collect();
        let mut per_shard = vec![0.0; model.n];
        let mut total = 0.0;
        for (t, subset) in placements.iter().enumerate() {
            let weight = population.weight(t);
            total += weight;
            if let Some(at) = tables.exact[subset.len()].position(tables.packer.pack(subset)) {
                weights[subset.len()][at] += weight;
            }
            for &shard in subset {
                per_shard[shard as usize] += weight;
            }
        }
        Self {
            model,
            weights,
            per_shard,
            total,
        }
    }

    /// The widest share of traffic one shard failure degrades.
    pub fn widest_degraded_one_failure(&self) -> f64 {
        let widest = self.per_shard.iter().copied().fold(0.0, f64::max);
        if self.total > 0.0 {
            widest / self.total
        } else {
            0.0
        }
    }

    /// The share of traffic whose tenants are fully down when `failed`
    /// (validated, sorted) fails.
    pub fn fully_down_share(&self, failed: &[ShardIndex]) -> f64 {
        let lookup = self.model.lookup_cost(failed.len());
        let down = if lookup <= self.model.distinct_subsets() as u128 {
            self.by_lookup(failed)
        } else {
            self.by_scan(failed, &mut Scratch::default())
        };
        if self.total > 0.0 {
            down / self.total
        } else {
            0.0
        }
    }

    fn by_lookup(&self, failed: &[ShardIndex]) -> f64 {
        let tables = &self.model.tables;
        let mut down = 0.0;
        for m in 1..=failed.len().min(self.model.max_k) {
            for_each_combination(failed, m, |set| {
                if let Some(at) = tables.exact[m].position(tables.packer.pack(set)) {
                    down += self.weights[m][at];
                }
            });
        }
        down
    }

    fn by_scan(&self, failed: &[ShardIndex], scratch: &mut Scratch) -> f64 {
        let Scratch {
            is_failed, members, ..
        } = scratch;
        is_failed.clear();
        is_failed.resize(self.model.n, false);
        for &index in failed {
            is_failed[index as usize] = true;
        }
        let tables = &self.model.tables;
        let mut down = 0.0;
        for (size, table) in tables.exact.iter().enumerate().skip(1) {
            for (row, weight) in table.rows().iter().zip(&self.weights[size]) {
                tables.packer.unpack(row.key(), size, members);
                if members.iter().all(|&m| is_failed[m as usize]) {
                    down += weight;
                }
            }
        }
        down
    }

    /// The worst share of traffic fully down over every set of `failures`
    /// shards, with the first set that causes it; `None` when visiting
    /// every set would cost more than `budget` (lookups or subsets).
    pub fn worst_fully_down(
        &self,
        failures: usize,
        budget: u128,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<Option<(f64, Vec<ShardIndex>)>, AnalysisError> {
        let model = self.model;
        check_failures(failures, model.n)?;
        let all_sets = binomial(model.n as u64, failures as u64);
        let lookup = model.lookup_cost(failures);
        let scan = model.distinct_subsets() as u128;
        let per_set = lookup.min(scan).max(1);
        if all_sets.saturating_mul(per_set) > budget {
            return Ok(None);
        }
        let by_lookup = lookup <= scan;
        let mut best: (f64, Vec<ShardIndex>) = (-1.0, Vec::new());
        model.evaluate_sets(
            failures,
            all_sets as u64,
            SetSource::new(model.n, failures, false, 0),
            per_set,
            progress,
            |set, scratch| {
                if by_lookup {
                    self.by_lookup(set)
                } else {
                    self.by_scan(set, scratch)
                }
            },
            |set, down| {
                if down > best.0 {
                    best = (down, set.to_vec());
                }
            },
        );
        let share = if self.total > 0.0 {
            best.0.max(0.0) / self.total
        } else {
            0.0
        };
        Ok(Some((share, best.1)))
    }
}
