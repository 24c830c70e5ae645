//! Property tests: on random small populations every figure of the fast
//! analyser equals the naive reference.

use std::collections::BTreeSet;

use analysis::{BlastModel, Placements, overlap};
use proptest::prelude::*;

use crate::reference;

/// Random populations: n shards, subsets of varying size (as per-tenant k
/// and dedicated shards produce), at least two tenants.
fn population() -> impl Strategy<Value = (u32, Vec<Vec<u32>>)> {
    (2u32..12).prop_flat_map(|n| {
        let subset =
            proptest::sample::subsequence((0..n).collect::<Vec<_>>(), 1..=(n as usize).min(5))
                .prop_shuffle();
        (Just(n), proptest::collection::vec(subset, 2..60))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn impact_matches_reference((n, subsets) in population(), failed in proptest::collection::btree_set(0u32..12, 1..6)) {
        let failed: BTreeSet<u32> = failed.into_iter().filter(|&s| s < n).collect();
        prop_assume!(!failed.is_empty());
        let placements = Placements::from_subsets(n as usize, &subsets);
        let model = BlastModel::new(&placements).unwrap();
        let failed_list: Vec<u32> = failed.iter().copied().collect();
        let impact = model.impact(&failed_list).unwrap();
        prop_assert_eq!(impact.fully_down, reference::fully_down(&subsets, &failed));
        prop_assert_eq!(impact.degraded, reference::degraded(&subsets, &failed));
        prop_assert!((impact.capacity_lost - reference::capacity_lost(&subsets, &failed)).abs() < 1e-9);
    }

    #[test]
    fn overlap_matches_reference((n, subsets) in population()) {
        let placements = Placements::from_subsets(n as usize, &subsets);
        let model = BlastModel::new(&placements).unwrap();
        let max_k = subsets.iter().map(Vec::len).max().unwrap();
        let exact = overlap::exact(&model);
        prop_assert_eq!(exact.pair_counts, reference::pair_counts(&subsets, max_k));
    }

    #[test]
    fn sweep_matches_reference((n, subsets) in population(), size in 1usize..4) {
        prop_assume!(size as u32 <= n);
        let placements = Placements::from_subsets(n as usize, &subsets);
        let model = BlastModel::new(&placements).unwrap();
        let sweep = model.sweep(size, u64::MAX, 0, &|_, _| {}).unwrap();
        let sets = reference::all_sets(n, size);
        prop_assert!(!sweep.sampled);
        prop_assert_eq!(sweep.sets, sets.len() as u64);
        let down: Vec<u64> = sets.iter().map(|f| reference::fully_down(&subsets, f)).collect();
        let hit: Vec<u64> = sets.iter().map(|f| reference::degraded(&subsets, f)).collect();
        prop_assert_eq!(sweep.fully_down.worst, *down.iter().max().unwrap());
        prop_assert_eq!(sweep.degraded.worst, *hit.iter().max().unwrap());
        let worst_set: BTreeSet<u32> = sweep.degraded.worst_failed.iter().copied().collect();
        prop_assert_eq!(reference::degraded(&subsets, &worst_set), sweep.degraded.worst);
        let mean = hit.iter().sum::<u64>() as f64 / hit.len() as f64;
        prop_assert!((sweep.degraded.mean - mean).abs() < 1e-9);
    }

    #[test]
    fn worst_fully_down_matches_reference((n, subsets) in population(), size in 1usize..5) {
        prop_assume!(size as u32 <= n);
        let placements = Placements::from_subsets(n as usize, &subsets);
        let model = BlastModel::new(&placements).unwrap();
        let (worst, set) = model.worst_fully_down(size, u128::MAX).unwrap().unwrap();
        let expected = reference::all_sets(n, size).iter().map(|f| reference::fully_down(&subsets, f)).max().unwrap();
        prop_assert_eq!(worst, expected);
        prop_assert_eq!(set.len(), size);
        let set: BTreeSet<u32> = set.into_iter().collect();
        prop_assert_eq!(reference::fully_down(&subsets, &set), worst);
    }
}
