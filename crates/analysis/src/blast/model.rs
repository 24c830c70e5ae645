//! The blast-radius model of one placed population and the three ways
//! ([`Strategy`]) it answers a single failure set.

use std::sync::OnceLock;

use placement::ShardIndex;
use serde::Serialize;

use crate::combinatorics::{binomial, for_each_combination};
use crate::error::AnalysisError;
use crate::placements::Placements;
use crate::tables::{SubsetTables, Table};

/// How one failure set is answered. All three give the same counts; they
/// differ only in cost, which depends on the set's size alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Table lookups over the subsets of the failed set: C(|F|, 1) + … +
    /// C(|F|, k) of them.
    Lookup,
    /// The same lookups over the subsets of the survivors: fully down is
    /// everyone minus those degraded by the survivors failing, degraded is
    /// everyone minus those the survivors would fully down.
    Complement,
    /// One pass over the distinct subsets: fully down when the subset is
    /// inside the failed set, degraded when it meets it.
    Scan,
}

/// Buffers one thread reuses across failure sets.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    survivors: Vec<ShardIndex>,
    pub(super) is_failed: Vec<bool>,
    pub(super) members: Vec<ShardIndex>,
}

/// What one failure set does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Impact {
    /// The failed shards (indices, sorted).
    pub failed: Vec<ShardIndex>,
    /// Tenants whose whole subset failed.
    pub fully_down: u64,
    /// Tenants with at least one failed member (the fully down included).
    pub degraded: u64,
    /// The mean share of its members a degraded tenant lost (0 when nobody
    /// is degraded). With failover inside the subset this is the share of
    /// capacity lost.
    pub capacity_lost: f64,
}
/// The blast-radius model of one placed population.
#[derive(Debug)]
pub struct BlastModel {
    pub(super) n: usize,
    tenants: u64,
    pub(super) max_k: usize,
    pub(super) tables: SubsetTables,
    /// `containment[m]`, built on first use.
    containment: Vec<OnceLock<Table>>,
    /// For each shard, the sum over its tenants of `1 / k_t`: the capacity
    /// its failure takes away, in tenant-units.
    lost_share: Vec<f64>,
    /// For each shard, how many tenants it serves.
    per_shard: Vec<u64>,
}

impl BlastModel {
    /// Builds the model for a placed population.
    pub fn new(placements: &Placements) -> Result<Self, AnalysisError> {
        let tables = SubsetTables::build(placements)?;
        let n = placements.shards();
        let mut lost_share = vec![0.0; n];
        let mut per_shard = vec![0u64; n];
        for subset in placements.iter() {
            let share = 1.0 / subset.len() as f64;
            for &index in subset {
                lost_share[index as usize] += share;
                per_shard[index as usize] += 1;
            }
        }
        let max_k = placements.max_k();
        Ok(Self {
            n,
            tenants: placements.len() as u64,
            max_k,
            tables,
            containment: (0..=max_k).map(|_| OnceLock::new()).collect(),
            lost_share,
            per_shard,
        })
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.n
    }

    /// Number of tenants.
    pub fn tenants(&self) -> u64 {
        self.tenants
    }

    /// The largest subset size.
    pub fn max_k(&self) -> usize {
        self.max_k
    }

    /// Tenants served by each shard.
    pub fn tenants_per_shard(&self) -> &[u64] {
        &self.per_shard
    }

    /// Each subset size in the population with its number of tenants,
    /// smallest first: what the overlap expectation of a population with
    /// per-tenant `k` is weighed by.
    pub fn subset_sizes(&self) -> Vec<(usize, u64)> {
        self.tables
            .exact
            .iter()
            .enumerate()
            .map(|(size, table)| (size, table.rows().iter().map(|row| row.tenants).sum()))
            .filter(|&(_, tenants)| tenants > 0)
            .collect()
    }

    /// Number of distinct subsets in the population.
    pub fn distinct_subsets(&self) -> usize {
        self.tables
            .exact
            .iter()
            .map(|table| table.rows().len())
            .sum()
    }

    /// The mean, over single-shard failures that degrade anyone, of the share
    /// of capacity a degraded tenant loses.
    pub fn mean_single_failure_capacity_lost(&self) -> f64 {
        let hit: Vec<f64> = (0..self.n)
            .filter(|&s| self.per_shard[s] > 0)
            .map(|s| self.lost_share[s] / self.per_shard[s] as f64)
            .collect();
        if hit.is_empty() {
            0.0
        } else {
            hit.iter().sum::<f64>() / hit.len() as f64
        }
    }

    /// Runs `f` over the containment table for `m`, using the cached table
    /// when a sweep has built it and otherwise building one that is dropped
    /// afterwards: the overlap needs every size once, and keeping all of them
    /// would multiply peak memory at millions of tenants.
    pub(crate) fn with_containment<R>(&self, m: usize, f: impl FnOnce(&Table) -> R) -> R {
        match self.containment[m].get() {
            Some(table) => f(table),
            None => f(&self.tables.containment(m)),
        }
    }

    /// The containment table for sets of size `m` (1 ≤ m ≤ max k).
    pub(crate) fn containment(&self, m: usize) -> &Table {
        self.containment[m].get_or_init(|| self.tables.containment(m))
    }

    /// Validates and normalises a failure set: indices in range, sorted,
    /// duplicates removed.
    pub fn failure_set(&self, failed: &[ShardIndex]) -> Result<Vec<ShardIndex>, AnalysisError> {
        if failed.is_empty() {
            return Err(AnalysisError::EmptyFailureSet);
        }
        if let Some(&bad) = failed.iter().find(|&&index| index as usize >= self.n) {
            return Err(AnalysisError::UnknownShard {
                shard: bad.to_string(),
                n: self.n,
            });
        }
        let mut sorted = failed.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        Ok(sorted)
    }

    /// What failing these shards does.
    pub fn impact(&self, failed: &[ShardIndex]) -> Result<Impact, AnalysisError> {
        let failed = self.failure_set(failed)?;
        let (fully_down, degraded) = self.counts(&failed);
        Ok(Impact {
            capacity_lost: self.capacity_lost(&failed, degraded),
            failed,
            fully_down,
            degraded,
        })
    }

    fn capacity_lost(&self, failed: &[ShardIndex], degraded: u64) -> f64 {
        if degraded == 0 {
            return 0.0;
        }
        let lost: f64 = failed
            .iter()
            .map(|&index| self.lost_share[index as usize])
            .sum();
        lost / degraded as f64
    }

    /// Fully down and degraded (the fully down included) for a validated,
    /// sorted failure set, by the cheapest [`Strategy`].
    pub(crate) fn counts(&self, failed: &[ShardIndex]) -> (u64, u64) {
        self.counts_with(self.strategy(failed.len()), failed, &mut Scratch::default())
    }

    /// The cheapest way to answer a failure set of `failures` shards:
    /// lookups cost C(f, 1) + … + C(f, k), lookups over the survivors the
    /// same with `n - f`, a scan the number of distinct subsets.
    pub fn strategy(&self, failures: usize) -> Strategy {
        let lookup = self.lookup_cost(failures);
        let complement = self.lookup_cost(self.n.saturating_sub(failures));
        let scan = self.distinct_subsets() as u128;
        if lookup <= complement && lookup <= scan {
            Strategy::Lookup
        } else if complement <= scan {
            Strategy::Complement
        } else {
            Strategy::Scan
        }
    }

    /// What one set of `failures` shards costs by `strategy` (at least 1).
    pub(super) fn set_cost(&self, strategy: Strategy, failures: usize) -> u128 {
        match strategy {
            Strategy::Lookup => self.lookup_cost(failures),
            Strategy::Complement => self.lookup_cost(self.n - failures),
            Strategy::Scan => self.distinct_subsets() as u128,
        }
        .max(1)
    }

    /// Builds, in parallel and before any set is answered, the containment
    /// tables `strategy` needs for sets of `failures` shards.
    pub(super) fn prepare(&self, strategy: Strategy, failures: usize) {
        let largest = match strategy {
            Strategy::Lookup => failures,
            Strategy::Complement => self.n - failures,
            Strategy::Scan => 0,
        };
        for m in 1..=largest.min(self.max_k) {
            self.containment(m);
        }
    }

    /// [`impact`](Self::impact) answered by a given strategy rather than the
    /// cheapest: every strategy must give the same figures, and the property
    /// tests check each against the naive reference.
    pub fn impact_with(
        &self,
        failed: &[ShardIndex],
        strategy: Strategy,
    ) -> Result<Impact, AnalysisError> {
        let failed = self.failure_set(failed)?;
        let (fully_down, degraded) = self.counts_with(strategy, &failed, &mut Scratch::default());
        Ok(Impact {
            capacity_lost: self.capacity_lost(&failed, degraded),
            failed,
            fully_down,
            degraded,
        })
    }

    /// Fully down and degraded for a validated, sorted failure set.
    pub(super) fn counts_with(
        &self,
        strategy: Strategy,
        failed: &[ShardIndex],
        scratch: &mut Scratch,
    ) -> (u64, u64) {
        match strategy {
            Strategy::Lookup => self.counts_by_lookup(failed),
            Strategy::Complement => {
                let survivors = &mut scratch.survivors;
                survivors.clear();
                let mut failed = failed.iter().peekable();
                for index in 0..self.n as ShardIndex {
                    if failed.next_if_eq(&&index).is_none() {
                        survivors.push(index);
                    }
                }
                let (inside_survivors, meeting_survivors) = self.counts_by_lookup(survivors);
                (
                    self.tenants - meeting_survivors,
                    self.tenants - inside_survivors,
                )
            }
            Strategy::Scan => self.counts_by_scan(failed, scratch),
        }
    }

    /// The distinct subsets and their counts, for the poison model.
    pub(crate) fn tables(&self) -> &SubsetTables {
        &self.tables
    }

    /// Lookups needed to answer a failure set of size `f` from the tables.
    pub(super) fn lookup_cost(&self, f: usize) -> u128 {
        (1..=f.min(self.max_k))
            .map(|m| binomial(f as u64, m as u64))
            .sum()
    }

    /// Fully down and degraded by table lookups over the subsets of `failed`.
    fn counts_by_lookup(&self, failed: &[ShardIndex]) -> (u64, u64) {
        let packer = self.tables.packer;
        let mut fully_down = 0;
        let mut degraded: i128 = 0;
        for m in 1..=failed.len().min(self.max_k) {
            let exact = &self.tables.exact[m];
            let containment = self.containment(m);
            let sign = if m % 2 == 1 { 1 } else { -1 };
            for_each_combination(failed, m, |set| {
                let key = packer.pack(set);
                if let Some(row) = exact.get(key) {
                    fully_down += row.tenants;
                }
                if let Some(row) = containment.get(key) {
                    degraded += sign * i128::from(row.tenants);
                }
            });
        }
        (fully_down, degraded as u64)
    }

    /// Fully down and degraded by one pass over the distinct subsets.
    fn counts_by_scan(&self, failed: &[ShardIndex], scratch: &mut Scratch) -> (u64, u64) {
        let Scratch {
            is_failed, members, ..
        } = scratch;
        is_failed.clear();
        is_failed.resize(self.n, false);
        for &index in failed {
            is_failed[index as usize] = true;
        }
        let packer = self.tables.packer;
        let mut fully_down = 0;
        let mut degraded = 0;
        for (size, table) in self.tables.exact.iter().enumerate().skip(1) {
            for row in table.rows() {
                packer.unpack(row.key(), size, members);
                let failed_members = members.iter().filter(|&&m| is_failed[m as usize]).count();
                if failed_members == size {
                    fully_down += row.tenants;
                }
                if failed_members > 0 {
                    degraded += row.tenants;
                }
            }
        }
        (fully_down, degraded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cheapest_strategy_follows_the_set_size() {
        // 46 shards, 40 distinct pairs: two failed shards are 3 lookups,
        // 43 failed are 6 lookups over the 3 survivors, and 20 failed would
        // be C(20, 1) + C(20, 2) lookups either way, more than a scan.
        let subsets: Vec<Vec<ShardIndex>> = (0..40u32).map(|t| vec![t, t + 1]).collect();
        let model = BlastModel::new(&Placements::from_subsets(46, &subsets)).unwrap();
        assert_eq!(model.strategy(2), Strategy::Lookup);
        assert_eq!(model.strategy(43), Strategy::Complement);
        assert_eq!(model.strategy(46), Strategy::Complement);
        assert_eq!(model.strategy(20), Strategy::Scan);
    }
}
