//! Sweeps: every failure set of one size, or a seeded sample of distinct
//! sets, answered in parallel batches by the cheapest strategy for the size.

use std::collections::HashSet;

use placement::ShardIndex;
use rayon::prelude::*;
use serde::Serialize;

use super::model::{BlastModel, Scratch};
use crate::combinatorics::binomial;
use crate::error::{AnalysisError, check_failures};
use crate::percentile::nearest_rank;
use crate::sample::SplitMix64;

/// The most failure sets evaluated per parallel batch in a sweep.
const SWEEP_BATCH: usize = 16_384;

/// Work (lookups or subsets scanned) per sweep batch, so that a batch of
/// dear sets still reports progress every fraction of a second.
const BATCH_WORK: u128 = 1 << 25;

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

impl BlastModel {
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
    pub(super) fn for_each_set(
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
    pub(super) fn evaluate_sets<R: Send>(
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
pub(super) struct SetSource {
    n: usize,
    size: usize,
    next: Option<Vec<ShardIndex>>,
    random: Option<SplitMix64>,
    /// The sets drawn so far, as bitmasks of `n` bits.
    seen: HashSet<Box<[u64]>>,
}

impl SetSource {
    pub(super) fn new(n: usize, size: usize, sampled: bool, seed: u64) -> Self {
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
    use crate::placements::Placements;

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
    fn set_source_enumerates_all_sets() {
        let sets = first_sets(SetSource::new(5, 3, false, 0), 10);
        assert_eq!(sets.first().unwrap(), &[0, 1, 2]);
        assert_eq!(sets.last().unwrap(), &[2, 3, 4]);
        let mut unique = sets.clone();
        unique.dedup();
        assert_eq!(unique.len(), 10);
    }
}
