//! Every tenant's subset, computed once (in parallel) and stored compactly.
//!
//! Analysis only ever needs subsets as *sets*, so each tenant's members are
//! stored sorted. With no per-tenant overrides every subset has the same
//! size and no offsets are stored at all.

use std::sync::atomic::{AtomicU64, Ordering};

use placement::{Placer, ShardIndex};

use rayon::prelude::*;

use crate::population::Population;

/// Tenants per parallel work item: large enough to amortise scheduling,
/// small enough to balance two cores.
const CHUNK: usize = 4096;

#[derive(Debug, Clone)]
enum Layout {
    /// Every subset has this many members.
    Uniform(usize),
    /// Tenant `t`'s members are `members[offsets[t]..offsets[t + 1]]`.
    Ragged(Vec<usize>),
}

/// Sorted subsets of a whole population.
#[derive(Debug, Clone)]
pub struct Placements {
    n: usize,
    members: Vec<ShardIndex>,
    layout: Layout,
}

impl Placements {
    /// Places every tenant of `population` with `placer`.
    pub fn compute(placer: &Placer, population: &Population) -> Self {
        Self::compute_with_progress(placer, population, &|_, _| {})
    }

    /// [`compute`](Self::compute), calling `progress` with the tenants
    /// placed so far and the total as chunks finish.
    pub fn compute_with_progress(
        placer: &Placer,
        population: &Population,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Self {
        let tenants = population.len();
        let any_override = (0..tenants)
            .into_par_iter()
            .any(|t| placer.has_override(&population.id(t)));
        let uniform = (!any_override).then_some(placer.config().k as usize);
        Self::from_fn(
            placer.fleet().len(),
            tenants,
            uniform,
            &|t, out| placer.subset_into(&population.id(t), out),
            progress,
        )
    }

    /// Places `tenants` tenants with `place` (tenant `t`'s subset into the
    /// buffer, in any order), in parallel. With `uniform = Some(k)` every
    /// subset must have `k` members, and they are kept without offsets.
    pub fn from_fn(
        n: usize,
        tenants: usize,
        uniform: Option<usize>,
        place: &(dyn Fn(usize, &mut Vec<ShardIndex>) + Sync),
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Self {
        let placed = AtomicU64::new(0);
        let chunk_done = |count: usize| {
            let done = placed.fetch_add(count as u64, Ordering::Relaxed) + count as u64;
            progress(done, tenants as u64);
        };
        progress(0, tenants as u64);
        if let Some(k) = uniform {
            let mut members = vec![0; tenants * k];
            members
                .par_chunks_mut((CHUNK * k).max(1))
                .enumerate()
                .for_each(|(chunk, out)| {
                    let mut subset = Vec::with_capacity(k);
                    for (offset, slot) in out.chunks_exact_mut(k).enumerate() {
                        place(chunk * CHUNK + offset, &mut subset);
                        subset.sort_unstable();
                        slot.copy_from_slice(&subset);
                    }
                    chunk_done(out.len() / k.max(1));
                });
            return Self {
                n,
                members,
                layout: Layout::Uniform(k),
            };
        }
        let chunks: Vec<(Vec<ShardIndex>, Vec<usize>)> = (0..tenants.div_ceil(CHUNK))
            .into_par_iter()
            .map(|chunk| {
                let mut members = Vec::new();
                let mut sizes = Vec::new();
                let mut subset = Vec::new();
                for t in chunk * CHUNK..((chunk + 1) * CHUNK).min(tenants) {
                    place(t, &mut subset);
                    subset.sort_unstable();
                    members.extend_from_slice(&subset);
                    sizes.push(subset.len());
                }
                chunk_done(sizes.len());
                (members, sizes)
            })
            .collect();
        let mut members = Vec::new();
        let mut offsets = Vec::with_capacity(tenants + 1);
        offsets.push(0);
        for (chunk_members, sizes) in chunks {
            members.extend_from_slice(&chunk_members);
            for size in sizes {
                offsets.push(offsets.last().copied().unwrap_or(0) + size);
            }
        }
        Self {
            n,
            members,
            layout: Layout::Ragged(offsets),
        }
    }

    /// Builds placements from explicit subsets (used by tests and by callers
    /// that place tenants themselves). Each subset is sorted here.
    pub fn from_subsets(n: usize, subsets: &[Vec<ShardIndex>]) -> Self {
        let mut members = Vec::new();
        let mut offsets = vec![0];
        for subset in subsets {
            let mut sorted = subset.clone();
            sorted.sort_unstable();
            members.extend_from_slice(&sorted);
            offsets.push(members.len());
        }
        Self {
            n,
            members,
            layout: Layout::Ragged(offsets),
        }
    }

    /// Number of shards in the fleet.
    pub fn shards(&self) -> usize {
        self.n
    }

    /// Number of tenants.
    pub fn len(&self) -> usize {
        match &self.layout {
            Layout::Uniform(0) => 0,
            Layout::Uniform(k) => self.members.len() / k,
            Layout::Ragged(offsets) => offsets.len() - 1,
        }
    }

    /// Whether there are no tenants.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tenant `t`'s members, sorted.
    pub fn subset(&self, t: usize) -> &[ShardIndex] {
        match &self.layout {
            Layout::Uniform(k) => &self.members[t * k..(t + 1) * k],
            Layout::Ragged(offsets) => &self.members[offsets[t]..offsets[t + 1]],
        }
    }

    /// Every tenant's members, in tenant order.
    pub fn iter(&self) -> impl Iterator<Item = &[ShardIndex]> + '_ {
        (0..self.len()).map(|t| self.subset(t))
    }

    /// The largest subset size.
    pub fn max_k(&self) -> usize {
        match &self.layout {
            Layout::Uniform(k) => *k,
            Layout::Ragged(offsets) => offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey};

    use super::*;

    #[test]
    fn placing_reports_progress_as_chunks_finish() {
        // A progress bar that jumps from nothing to done is a silent gap:
        // placing must report as it goes and end at the total.
        let config = PlacementConfig {
            algorithm: Algorithm::HmacModulo,
            k: 3,
            zone_aware: false,
        };
        let placer = Placer::new(
            Fleet::uniform(16).unwrap(),
            &PlacementKey::recipe_default(),
            config,
        )
        .unwrap();
        let population = Population::synthetic(CHUNK * 5 + 7);
        let seen = Mutex::new(Vec::new());
        let placements = Placements::compute_with_progress(&placer, &population, &|done, total| {
            seen.lock().unwrap().push((done, total));
        });
        assert_eq!(placements.len(), population.len());
        let seen = seen.into_inner().unwrap();
        let total = population.len() as u64;
        assert!(seen.len() >= 7, "{seen:?}");
        assert!(seen.iter().all(|&(done, t)| t == total && done <= total));
        assert_eq!(seen.iter().map(|&(done, _)| done).max(), Some(total));
    }
}
