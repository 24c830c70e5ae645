//! Blast radius under failure sets: who is fully down, who is degraded, and
//! how much capacity the degraded lose, for declared sets and exhaustive (or
//! sampled) sweeps.
//!
//! A tenant is *fully down* when its whole subset is inside the failed set
//! and *degraded* when at least one of its members is. Both are answered
//! from [`SubsetTables`] rather than by looping over tenants: fully down is a
//! sum of exact-subset counts over the subsets of `F`, degraded an
//! inclusion–exclusion over containment counts. A large failure set is
//! answered the same way from its complement, the survivors (a tenant is
//! fully down when its subset avoids every survivor, degraded when its
//! subset is not inside the survivors), and a set for which both are dear
//! by one scan over the distinct subsets. Which of the three ([`Strategy`])
//! is cheapest depends only on the set's size, so a sweep decides once and
//! its cost per set is bounded by the population's distinct subsets, never
//! by C(|F|, k).

use std::collections::HashSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use placement::ShardIndex;
use rayon::prelude::*;
use serde::Serialize;

use crate::combinatorics::{binomial, for_each_combination};
use crate::error::{AnalysisError, check_failures};
use crate::percentile::nearest_rank;
use crate::placements::Placements;
use crate::population::Population;
use crate::sample::SplitMix64;
use crate::tables::{SubsetTables, Table};

/// The most failure sets evaluated per parallel batch in a sweep.
const SWEEP_BATCH: usize = 16_384;

/// Work (lookups or subsets scanned) per sweep batch, so that a batch of
/// dear sets still reports progress every fraction of a second.
const BATCH_WORK: u128 = 1 << 25;

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
struct Scratch {
    survivors: Vec<ShardIndex>,
    is_failed: Vec<bool>,
    members: Vec<ShardIndex>,
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

    /// The worst fully-down count over every failure set of `failures`
    /// shards, with the first set (in the order searched) that causes it.
    ///
    /// Only sets that contain some tenant's whole subset can down anyone, so
    /// the search extends each distinct subset to a set of the right size
    /// instead of visiting all C(n, failures) sets, whichever is fewer. The
    /// answer is exact; `budget` bounds the work (sets visited times the
    /// lookups or subsets each costs), and `None` is returned when both
    /// searches exceed it.
    /// `progress` is called with the sets (or subsets extended) done so far
    /// and the total.
    pub fn worst_fully_down(
        &self,
        failures: usize,
        budget: u128,
        progress: &(dyn Fn(u64, u64) + Sync),
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
        let strategy = self.strategy(failures);
        let per_set = self.set_cost(strategy, failures);
        if all_sets.min(by_extension).saturating_mul(per_set) > budget {
            return Ok(None);
        }
        if all_sets <= by_extension {
            let mut best: (u64, Vec<ShardIndex>) = (0, Vec::new());
            let source = SetSource::new(self.n, failures, false, 0);
            self.for_each_set(
                failures,
                all_sets as u64,
                source,
                progress,
                |set, (down, _)| {
                    if down > best.0 || best.1.is_empty() {
                        best = (down, set.to_vec());
                    }
                },
            );
            return Ok(Some(best));
        }
        self.prepare(strategy, failures);
        let packer = self.tables.packer;
        let mut best: (u64, Vec<ShardIndex>) = (0, (0..failures as ShardIndex).collect());
        let rows_total: u64 = (1..=failures.min(self.max_k))
            .map(|size| self.tables.exact[size].rows().len() as u64)
            .sum();
        let extended = AtomicU64::new(0);
        progress(0, rows_total);
        for size in 1..=failures.min(self.max_k) {
            let candidate = self.tables.exact[size]
                .rows()
                .par_iter()
                .map_init(
                    || (Vec::new(), Scratch::default()),
                    |(members, scratch), row| {
                        packer.unpack(row.key(), size, members);
                        let rest: Vec<ShardIndex> = (0..self.n as ShardIndex)
                            .filter(|index| !members.contains(index))
                            .collect();
                        let mut best: (u64, Vec<ShardIndex>) = (0, Vec::new());
                        for_each_combination(&rest, failures - size, |extra| {
                            let mut set: Vec<ShardIndex> =
                                members.iter().chain(extra).copied().collect();
                            set.sort_unstable();
                            let down = match strategy {
                                Strategy::Lookup => self.fully_down_by_lookup(&set),
                                _ => self.counts_with(strategy, &set, scratch).0,
                            };
                            if down > best.0 {
                                best = (down, set);
                            }
                        });
                        let done = extended.fetch_add(1, Ordering::Relaxed) + 1;
                        progress(done, rows_total);
                        best
                    },
                )
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

    /// Fully down alone by lookups: no containment tables needed.
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
    fn set_cost(&self, strategy: Strategy, failures: usize) -> u128 {
        match strategy {
            Strategy::Lookup => self.lookup_cost(failures),
            Strategy::Complement => self.lookup_cost(self.n - failures),
            Strategy::Scan => self.distinct_subsets() as u128,
        }
        .max(1)
    }

    /// Builds, in parallel and before any set is answered, the containment
    /// tables `strategy` needs for sets of `failures` shards.
    fn prepare(&self, strategy: Strategy, failures: usize) {
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
    fn counts_with(
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

    /// Every failure set of `failures` shards, or a seeded random sample of
    /// `max_sets` distinct ones when there are more (then the worst is only a
    /// lower bound on the true worst). `progress` is called with the number
    /// of sets finished so far and the number to do.
    pub fn sweep(
        &self,
        failures: usize,
        max_sets: u64,
        seed: u64,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<Sweep, AnalysisError> {
        check_failures(failures, self.n)?;
        let total = binomial(self.n as u64, failures as u64);
        let sampled = total > u128::from(max_sets.max(1));
        let sets = if sampled {
            max_sets.max(1)
        } else {
            total as u64
        };
        let source = SetSource::new(self.n, failures, sampled, seed);
        let mut fully_down = Vec::with_capacity(sets as usize);
        let mut degraded = Vec::with_capacity(sets as usize);
        let mut worst_down: (u64, Vec<ShardIndex>) = (0, Vec::new());
        let mut worst_degraded: (u64, Vec<ShardIndex>) = (0, Vec::new());
        self.for_each_set(failures, sets, source, progress, |set, (down, hit)| {
            if down > worst_down.0 || worst_down.1.is_empty() {
                worst_down = (down, set.to_vec());
            }
            if hit > worst_degraded.0 || worst_degraded.1.is_empty() {
                worst_degraded = (hit, set.to_vec());
            }
            fully_down.push(down);
            degraded.push(hit);
        });
        Ok(Sweep {
            failures,
            sets,
            sampled,
            fully_down: figure(fully_down, worst_down.1),
            degraded: figure(degraded, worst_degraded.1),
        })
    }

    /// Answers `sets` failure sets from `source` in parallel batches, by the
    /// cheapest strategy for their size, and hands each set and its (fully
    /// down, degraded) to `visit` in the order the source yields them.
    fn for_each_set(
        &self,
        failures: usize,
        sets: u64,
        source: SetSource,
        progress: &(dyn Fn(u64, u64) + Sync),
        visit: impl FnMut(&[ShardIndex], (u64, u64)),
    ) {
        let strategy = self.strategy(failures);
        self.prepare(strategy, failures);
        let per_set = self.set_cost(strategy, failures);
        self.evaluate_sets(
            failures,
            sets,
            source,
            per_set,
            progress,
            |set, scratch| self.counts_with(strategy, set, scratch),
            visit,
        );
    }

    /// The batching engine under every sweep: `eval` answers one set (in
    /// parallel, with a per-thread scratch), `visit` sees the answers in
    /// the order the source yields the sets.
    #[allow(clippy::too_many_arguments)]
    fn evaluate_sets<R: Send>(
        &self,
        failures: usize,
        sets: u64,
        mut source: SetSource,
        per_set: u128,
        progress: &(dyn Fn(u64, u64) + Sync),
        eval: impl Fn(&[ShardIndex], &mut Scratch) -> R + Sync,
        mut visit: impl FnMut(&[ShardIndex], R),
    ) {
        let batch_sets = (BATCH_WORK / per_set).clamp(64, SWEEP_BATCH as u128) as usize;
        let mut done = 0u64;
        progress(0, sets);
        let mut batch: Vec<ShardIndex> = Vec::with_capacity(batch_sets * failures);
        while done < sets {
            batch.clear();
            let in_batch = (sets - done).min(batch_sets as u64) as usize;
            for _ in 0..in_batch {
                source.next_into(&mut batch);
            }
            let results: Vec<R> = batch
                .par_chunks_exact(failures)
                .map_init(Scratch::default, |scratch, set| eval(set, scratch))
                .collect();
            for (set, result) in batch.chunks_exact(failures).zip(results) {
                visit(set, result);
            }
            done += in_batch as u64;
            progress(done, sets);
        }
    }
}

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
/// uniform random ones without repeats (a set drawn again is drawn anew, so
/// a sample of `m` sets is `m` distinct sets, each equally likely).
struct SetSource {
    n: usize,
    size: usize,
    next: Option<Vec<ShardIndex>>,
    random: Option<SplitMix64>,
    /// The sets drawn so far, as bitmasks of `n` bits.
    seen: HashSet<Box<[u64]>>,
}

impl SetSource {
    fn new(n: usize, size: usize, sampled: bool, seed: u64) -> Self {
        Self {
            n,
            size,
            next: Some((0..size as ShardIndex).collect()),
            random: sampled.then(|| SplitMix64::new(seed)),
            seen: HashSet::new(),
        }
    }

    fn next_into(&mut self, out: &mut Vec<ShardIndex>) {
        if let Some(random) = &mut self.random {
            let start = out.len();
            loop {
                random.sample_set(self.n, self.size, out);
                let mut mask = vec![0u64; self.n.div_ceil(64)].into_boxed_slice();
                for &index in &out[start..] {
                    mask[index as usize / 64] |= 1 << (index % 64);
                }
                if self.seen.insert(mask) {
                    out[start..].sort_unstable();
                    return;
                }
                out.truncate(start);
            }
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
                .worst_fully_down(failures, u128::MAX, &|_, _| {})
                .unwrap()
                .unwrap();
            let sweep = model.sweep(failures, u64::MAX, 0, &|_, _| {}).unwrap();
            assert_eq!(worst, sweep.fully_down.worst, "failures = {failures}");
            assert_eq!(model.impact(&set).unwrap().fully_down, worst);
        }
        assert!(model.worst_fully_down(3, 10, &|_, _| {}).unwrap().is_none());
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
    fn a_sample_never_repeats_a_set() {
        // 19 of the 20 sets of 3 out of 6: drawn with replacement, a repeat
        // is all but certain (the birthday bound); without, none can occur.
        let sets = first_sets(SetSource::new(6, 3, true, 0), 19);
        let mut unique = sets.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 19);
        let subsets: Vec<Vec<ShardIndex>> = (0..6u32).map(|t| vec![t, (t + 1) % 6]).collect();
        let model = BlastModel::new(&Placements::from_subsets(6, &subsets)).unwrap();
        let sweep = model.sweep(3, 19, 0, &|_, _| {}).unwrap();
        assert!(sweep.sampled);
        assert_eq!(sweep.sets, 19);
    }

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
