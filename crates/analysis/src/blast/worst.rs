//! The worst fully-down count over every failure set of a size, found by
//! extending each distinct subset rather than visiting every set when that
//! is cheaper.

use std::sync::atomic::{AtomicU64, Ordering};

use placement::ShardIndex;
use rayon::prelude::*;

use super::model::{BlastModel, Scratch, Strategy};
use super::sweep::SetSource;
use crate::combinatorics::{binomial, for_each_combination};
use crate::error::{AnalysisError, check_failures};

impl BlastModel {
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
        let all_sets = binomial(self.n as u64, failures as u64);
        let by_extension = self.extension_sets(failures);
        let strategy = self.strategy(failures);
        let per_set = self.set_cost(strategy, failures);
        if all_sets.min(by_extension).saturating_mul(per_set) > budget {
            return Ok(None);
        }
        Ok(Some(if all_sets <= by_extension {
            self.worst_of_every_set(failures, all_sets as u64, progress)
        } else {
            self.worst_by_extension(failures, strategy, progress)
        }))
    }

    /// How many sets of `failures` shards extending a distinct subset there
    /// are (saturating): the extension search's count of sets to visit.
    fn extension_sets(&self, failures: usize) -> u128 {
        let n = self.n as u64;
        (1..=failures.min(self.max_k))
            .map(|size| {
                let rows = self.tables.exact[size].rows().len() as u128;
                rows.saturating_mul(binomial(n - size as u64, (failures - size) as u64))
            })
            .fold(0u128, u128::saturating_add)
    }

    /// The worst set found by visiting all `sets` sets in order.
    fn worst_of_every_set(
        &self,
        failures: usize,
        sets: u64,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> (u64, Vec<ShardIndex>) {
        let mut best: (u64, Vec<ShardIndex>) = (0, Vec::new());
        let source = SetSource::new(self.n, failures, false, 0);
        self.for_each_set(failures, sets, source, progress, |set, (down, _)| {
            if down > best.0 || best.1.is_empty() {
                best = (down, set.to_vec());
            }
        });
        best
    }

    /// The worst set found by extending every distinct subset of each size
    /// with every choice of other shards, in parallel; ties go to the
    /// smallest set, so the answer does not depend on the threads.
    fn worst_by_extension(
        &self,
        failures: usize,
        strategy: Strategy,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> (u64, Vec<ShardIndex>) {
        self.prepare(strategy, failures);
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
                        self.tables.packer.unpack(row.key(), size, members);
                        let best = self.worst_extension_of(members, failures, strategy, scratch);
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
        best
    }

    /// The worst set of `failures` shards containing `members`, the first
    /// found in the order the extra shards are combined.
    fn worst_extension_of(
        &self,
        members: &[ShardIndex],
        failures: usize,
        strategy: Strategy,
        scratch: &mut Scratch,
    ) -> (u64, Vec<ShardIndex>) {
        let rest: Vec<ShardIndex> = (0..self.n as ShardIndex)
            .filter(|index| !members.contains(index))
            .collect();
        let mut best: (u64, Vec<ShardIndex>) = (0, Vec::new());
        for_each_combination(&rest, failures - members.len(), |extra| {
            let mut set: Vec<ShardIndex> = members.iter().chain(extra).copied().collect();
            set.sort_unstable();
            let down = match strategy {
                Strategy::Lookup => self.fully_down_by_lookup(&set),
                _ => self.counts_with(strategy, &set, scratch).0,
            };
            if down > best.0 {
                best = (down, set);
            }
        });
        best
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placements::Placements;

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
}
