//! Blast radius under failure sets: who is fully down, who is degraded, and
//! how much capacity the degraded lose, for declared sets and exhaustive (or
//! sampled) sweeps.
//!
//! A tenant is *fully down* when its whole subset is inside the failed set
//! and *degraded* when at least one of its members is. Both are answered
//! from [`SubsetTables`] rather than by looping over tenants: fully down is a
//! sum of exact-subset counts over the subsets of `F`, degraded an
//! inclusion–exclusion over containment counts. A failure set too large for
//! that (a zone outage) is answered by one scan over the distinct subsets.

use std::sync::OnceLock;

use placement::ShardIndex;
use rayon::prelude::*;
use serde::Serialize;

use crate::combinatorics::{binomial, for_each_combination};
use crate::error::{AnalysisError, check_failures};
use crate::percentile::nearest_rank;
use crate::placements::Placements;
use crate::sample::SplitMix64;
use crate::tables::{SubsetTables, Table};

/// Failure sets evaluated per parallel batch in a sweep.
const SWEEP_BATCH: usize = 16_384;

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

/// One figure across every failure set of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepFigure {
    /// The largest count seen.
    pub worst: u64,
    /// The first failure set (in enumeration order) that caused it.
    pub worst_failed: Vec<ShardIndex>,
    /// The mean count over all sets.
    pub mean: f64,
    /// The median count (nearest rank).
    pub p50: u64,
    /// The 99th percentile count (nearest rank).
    pub p99: u64,
}

/// Fully-down and degraded counts across all failure sets of one size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    /// The size of every failure set.
    pub failures: usize,
    /// How many sets were evaluated.
    pub sets: u64,
    /// Whether the sets were a random sample (because there were more than
    /// the limit) rather than all of them.
    pub sampled: bool,
    /// Fully-down tenants.
    pub fully_down: SweepFigure,
    /// Degraded tenants.
    pub degraded: SweepFigure,
}

/// The blast-radius model of one placed population.
#[derive(Debug)]
pub struct BlastModel {
    n: usize,
    tenants: u64,
    max_k: usize,
    tables: SubsetTables,
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

    /// Number of distinct subsets in the population.
    pub fn distinct_subsets(&self) -> usize {
        self.tables
            .exact
            .iter()
            .map(|table| table.rows().len())
            .sum()
    }

    /// The worst fully-down count over every failure set of `failures`
    /// shards, with the first set (in the order searched) that causes it.
    ///
    /// Only sets that contain some tenant's whole subset can down anyone, so
    /// the search extends each distinct subset to a set of the right size
    /// instead of visiting all C(n, failures) sets, whichever is fewer. The
    /// answer is exact; `budget` bounds the sets visited, and `None` is
    /// returned when both searches exceed it.
    pub fn worst_fully_down(
        &self,
        failures: usize,
        budget: u128,
    ) -> Result<Option<(u64, Vec<ShardIndex>)>, AnalysisError> {
        check_failures(failures, self.n)?;
        let n = self.n as u64;
        let all_sets = binomial(n, failures as u64);
        let by_extension: u128 = (1..=failures.min(self.max_k))
            .map(|size| {
                let rows = self.tables.exact[size].rows().len() as u128;
                rows.saturating_mul(binomial(n - size as u64, (failures - size) as u64))
            })
            .fold(0u128, u128::saturating_add);
        if all_sets.min(by_extension) > budget {
            return Ok(None);
        }
        let first_sets: Vec<ShardIndex> = (0..failures as ShardIndex).collect();
        if all_sets <= by_extension {
            let sweep = self.sweep(failures, u64::MAX, 0, &|_, _| {})?;
            return Ok(Some((
                sweep.fully_down.worst,
                sweep.fully_down.worst_failed,
            )));
        }
        let packer = self.tables.packer;
        let mut best: (u64, Vec<ShardIndex>) = (0, first_sets);
        for size in 1..=failures.min(self.max_k) {
            let candidate = self.tables.exact[size]
                .rows()
                .par_iter()
                .map_init(Vec::new, |members, row| {
                    packer.unpack(row.key(), size, members);
                    let rest: Vec<ShardIndex> = (0..self.n as ShardIndex)
                        .filter(|index| !members.contains(index))
                        .collect();
                    let mut best: (u64, Vec<ShardIndex>) = (0, Vec::new());
                    for_each_combination(&rest, failures - size, |extra| {
                        let mut set: Vec<ShardIndex> =
                            members.iter().chain(extra).copied().collect();
                        set.sort_unstable();
                        let down = self.fully_down_by_lookup(&set);
                        if down > best.0 {
                            best = (down, set);
                        }
                    });
                    best
                })
                .reduce(
                    || (0, Vec::new()),
                    |a, b| {
                        if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) {
                            b
                        } else {
                            a
                        }
                    },
                );
            if candidate.0 > best.0 {
                best = candidate;
            }
        }
        Ok(Some(best))
    }

    fn fully_down_by_lookup(&self, failed: &[ShardIndex]) -> u64 {
        let packer = self.tables.packer;
        let mut fully_down = 0;
        for m in 1..=failed.len().min(self.max_k) {
            let exact = &self.tables.exact[m];
            if exact.rows().is_empty() {
                continue;
            }
            for_each_combination(failed, m, |set| {
                if let Some(row) = exact.get(packer.pack(set)) {
                    fully_down += row.tenants;
                }
            });
        }
        fully_down
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
    /// sorted failure set, by lookups or by one scan, whichever is cheaper.
    pub(crate) fn counts(&self, failed: &[ShardIndex]) -> (u64, u64) {
        if self.lookup_cost(failed.len()) <= self.distinct_subsets() as u128 {
            self.counts_by_lookup(failed)
        } else {
            self.counts_by_scan(failed)
        }
    }

    /// The distinct subsets and their counts, for the poison model.
    pub(crate) fn tables(&self) -> &SubsetTables {
        &self.tables
    }

    /// Lookups needed to answer a failure set of size `f` from the tables.
    fn lookup_cost(&self, f: usize) -> u128 {
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
    fn counts_by_scan(&self, failed: &[ShardIndex]) -> (u64, u64) {
        let mut is_failed = vec![false; self.n];
        for &index in failed {
            is_failed[index as usize] = true;
        }
        let packer = self.tables.packer;
        let mut fully_down = 0;
        let mut degraded = 0;
        for (size, table) in self.tables.exact.iter().enumerate().skip(1) {
            let (down, hit) = table
                .rows()
                .par_iter()
                .map_init(Vec::new, |members, row| {
                    packer.unpack(row.key(), size, members);
                    let failed_members = members.iter().filter(|&&m| is_failed[m as usize]).count();
                    let down = if failed_members == size {
                        row.tenants
                    } else {
                        0
                    };
                    let hit = if failed_members > 0 { row.tenants } else { 0 };
                    (down, hit)
                })
                .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            fully_down += down;
            degraded += hit;
        }
        (fully_down, degraded)
    }

    /// Every failure set of `failures` shards, or a seeded random sample of
    /// `max_sets` of them when there are more. `progress` is called with the
    /// number of sets finished so far.
    pub fn sweep(
        &self,
        failures: usize,
        max_sets: u64,
        seed: u64,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<Sweep, AnalysisError> {
        check_failures(failures, self.n)?;
        // Build the tables up front, in parallel, not inside the first batch.
        for m in 1..=failures.min(self.max_k) {
            self.containment(m);
        }
        let total = binomial(self.n as u64, failures as u64);
        let sampled = total > u128::from(max_sets.max(1));
        let sets = if sampled {
            max_sets.max(1)
        } else {
            total as u64
        };

        let mut source = SetSource::new(self.n, failures, sampled, seed);
        let mut fully_down = Vec::with_capacity(sets as usize);
        let mut degraded = Vec::with_capacity(sets as usize);
        let mut worst_down: (u64, Vec<ShardIndex>) = (0, Vec::new());
        let mut worst_degraded: (u64, Vec<ShardIndex>) = (0, Vec::new());
        let mut done = 0u64;
        let mut batch: Vec<ShardIndex> = Vec::with_capacity(SWEEP_BATCH * failures);
        while done < sets {
            batch.clear();
            let in_batch = (sets - done).min(SWEEP_BATCH as u64) as usize;
            for _ in 0..in_batch {
                source.next_into(&mut batch);
            }
            let results: Vec<(u64, u64)> = batch
                .par_chunks_exact(failures)
                .map(|set| self.counts_by_lookup(set))
                .collect();
            for (set, &(down, hit)) in batch.chunks_exact(failures).zip(&results) {
                if down > worst_down.0 || worst_down.1.is_empty() {
                    worst_down = (down, set.to_vec());
                }
                if hit > worst_degraded.0 || worst_degraded.1.is_empty() {
                    worst_degraded = (hit, set.to_vec());
                }
                fully_down.push(down);
                degraded.push(hit);
            }
            done += in_batch as u64;
            progress(done, sets);
        }
        Ok(Sweep {
            failures,
            sets,
            sampled,
            fully_down: figure(fully_down, worst_down.1),
            degraded: figure(degraded, worst_degraded.1),
        })
    }
}

/// Summarises the counts of a sweep.
fn figure(mut counts: Vec<u64>, worst_failed: Vec<ShardIndex>) -> SweepFigure {
    let mean = counts.iter().map(|&c| c as f64).sum::<f64>() / counts.len().max(1) as f64;
    counts.par_sort_unstable();
    SweepFigure {
        worst: counts.last().copied().unwrap_or(0),
        worst_failed,
        mean,
        p50: nearest_rank(&counts, 0.50).unwrap_or(0),
        p99: nearest_rank(&counts, 0.99).unwrap_or(0),
    }
}

/// Yields failure sets: all of them in lexicographic order, or seeded
/// uniform random ones.
struct SetSource {
    n: usize,
    size: usize,
    next: Option<Vec<ShardIndex>>,
    random: Option<SplitMix64>,
}

impl SetSource {
    fn new(n: usize, size: usize, sampled: bool, seed: u64) -> Self {
        Self {
            n,
            size,
            next: Some((0..size as ShardIndex).collect()),
            random: sampled.then(|| SplitMix64::new(seed)),
        }
    }

    fn next_into(&mut self, out: &mut Vec<ShardIndex>) {
        if let Some(random) = &mut self.random {
            let start = out.len();
            random.sample_set(self.n, self.size, out);
            out[start..].sort_unstable();
            return;
        }
        let current = self
            .next
            .take()
            .expect("the caller asks for at most C(n, size) sets");
        out.extend_from_slice(&current);
        let mut positions = current;
        let (n, m) = (self.n as ShardIndex, self.size);
        if let Some(i) = (0..m)
            .rev()
            .find(|&i| positions[i] < n - m as ShardIndex + i as ShardIndex)
        {
            positions[i] += 1;
            for j in i + 1..m {
                positions[j] = positions[j - 1] + 1;
            }
            self.next = Some(positions);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_fully_down_by_extension_equals_the_full_sweep() {
        // 40 shards and 30 tenants: extending 30 subsets is far cheaper than
        // visiting all C(40, 3) sets, so the extension search runs; the
        // sweep over every set is the check.
        let subsets: Vec<Vec<ShardIndex>> = (0..30u32)
            .map(|t| {
                let size = 1 + (t % 3);
                (0..size).map(|i| (t * 7 + i * 13) % 40).collect()
            })
            .collect();
        let model = BlastModel::new(&Placements::from_subsets(40, &subsets)).unwrap();
        for failures in 1..=4 {
            let (worst, set) = model
                .worst_fully_down(failures, u128::MAX)
                .unwrap()
                .unwrap();
            let sweep = model.sweep(failures, u64::MAX, 0, &|_, _| {}).unwrap();
            assert_eq!(worst, sweep.fully_down.worst, "failures = {failures}");
            assert_eq!(model.impact(&set).unwrap().fully_down, worst);
        }
        assert!(model.worst_fully_down(3, 10).unwrap().is_none());
    }

    /// The first `count` sets `source` hands out, one vector each.
    fn first_sets(mut source: SetSource, count: usize) -> Vec<Vec<ShardIndex>> {
        let mut out = Vec::new();
        for _ in 0..count {
            source.next_into(&mut out);
        }
        out.chunks_exact(source.size).map(<[_]>::to_vec).collect()
    }

    #[test]
    fn sampled_failure_sets_are_frozen() {
        // What a sampled sweep (`blast --sweep 3 --seed 0` over 100 shards)
        // evaluates first, sorted as the sweep sees them. Frozen so that a
        // change to the sample stream cannot pass unnoticed: reports made
        // with a seed must keep meaning the same sets.
        let sets = first_sets(SetSource::new(100, 3, true, 0), 5);
        assert_eq!(
            sets,
            [
                [2, 42, 86],
                [10, 32, 95],
                [17, 24, 76],
                [39, 76, 93],
                [51, 54, 70]
            ]
        );
    }

    #[test]
    fn set_source_enumerates_all_sets() {
        let sets = first_sets(SetSource::new(5, 3, false, 0), 10);
        assert_eq!(sets.first().unwrap(), &[0, 1, 2]);
        assert_eq!(sets.last().unwrap(), &[2, 3, 4]);
        let mut unique = sets.clone();
        unique.dedup();
        assert_eq!(unique.len(), 10);
    }
}
