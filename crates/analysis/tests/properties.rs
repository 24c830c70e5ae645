//! Property tests: on random small populations every figure of the fast
//! analyser equals the naive reference.

use std::collections::BTreeSet;

use analysis::{BlastModel, Placements, Population, Strategy as Answer, TrafficModel, overlap};
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
    fn every_strategy_matches_reference((n, subsets) in population(), failed in proptest::collection::btree_set(0u32..12, 1..=12)) {
        // Failure sets of every size, the whole fleet included, answered by
        // lookups over the failed set, lookups over the survivors, and a
        // scan: each must equal the naive loop, whichever is chosen.
        let failed: BTreeSet<u32> = failed.into_iter().filter(|&s| s < n).collect();
        prop_assume!(!failed.is_empty());
        let model = BlastModel::new(&Placements::from_subsets(n as usize, &subsets)).unwrap();
        let failed_list: Vec<u32> = failed.iter().copied().collect();
        for strategy in [Answer::Lookup, Answer::Complement, Answer::Scan] {
            let impact = model.impact_with(&failed_list, strategy).unwrap();
            prop_assert_eq!(impact.fully_down, reference::fully_down(&subsets, &failed), "{:?}", strategy);
            prop_assert_eq!(impact.degraded, reference::degraded(&subsets, &failed), "{:?}", strategy);
        }
    }

    #[test]
    fn sweeps_of_large_sets_match_reference((n, subsets) in population(), missing in 0usize..4) {
        // A sweep of n - missing failures: the sizes where lookups over the
        // failed set are dearest and the complement or a scan is chosen.
        prop_assume!(missing < n as usize);
        let size = n as usize - missing;
        let model = BlastModel::new(&Placements::from_subsets(n as usize, &subsets)).unwrap();
        let sweep = model.sweep(size, u64::MAX, 0, &|_, _| {}).unwrap();
        let sets = reference::all_sets(n, size);
        prop_assert_eq!(sweep.sets, sets.len() as u64);
        let down: Vec<u64> = sets.iter().map(|f| reference::fully_down(&subsets, f)).collect();
        let hit: Vec<u64> = sets.iter().map(|f| reference::degraded(&subsets, f)).collect();
        prop_assert_eq!(sweep.fully_down.worst, *down.iter().max().unwrap());
        prop_assert_eq!(sweep.degraded.worst, *hit.iter().max().unwrap());
        let mean = down.iter().sum::<u64>() as f64 / down.len() as f64;
        prop_assert!((sweep.fully_down.mean - mean).abs() < 1e-9);
        let (worst, _) = model.worst_fully_down(size, u128::MAX, &|_, _| {}).unwrap().unwrap();
        prop_assert_eq!(worst, *down.iter().max().unwrap());
    }

    #[test]
    fn traffic_figures_match_a_weighted_reference((n, subsets) in population(), size in 1usize..6, seed in 0u64..1000) {
        // Weights from 0.5 to 50: the worst set by traffic need not be the
        // worst by count, so each is searched on its own.
        prop_assume!(size as u32 <= n);
        let weights: Vec<f64> = (0..subsets.len() as u64)
            .map(|t| 0.5 + ((t * 7919 + seed * 104_729) % 100) as f64 / 2.0)
            .collect();
        let population = Population::listed((0..subsets.len()).map(|t| format!("t{t}")).collect(), Some(weights.clone()));
        let placements = Placements::from_subsets(n as usize, &subsets);
        let model = BlastModel::new(&placements).unwrap();
        let traffic = TrafficModel::new(&model, &placements, &population);
        let total: f64 = weights.iter().sum();
        let down = |failed: &BTreeSet<u32>| -> f64 {
            subsets.iter().zip(&weights).filter(|(s, _)| s.iter().all(|m| failed.contains(m))).map(|(_, w)| w).sum::<f64>() / total
        };
        let sets = reference::all_sets(n, size);
        let expected = sets.iter().map(down).fold(0.0, f64::max);
        let (worst, set) = traffic.worst_fully_down(size, u128::MAX, &|_, _| {}).unwrap().unwrap();
        prop_assert!((worst - expected).abs() < 1e-9, "{} vs {}", worst, expected);
        let set: BTreeSet<u32> = set.into_iter().collect();
        prop_assert!((down(&set) - worst).abs() < 1e-9);
        for failed in &sets {
            let list: Vec<u32> = failed.iter().copied().collect();
            prop_assert!((traffic.fully_down_share(&list) - down(failed)).abs() < 1e-9);
        }
        let widest = (0..n).map(|s| {
            subsets.iter().zip(&weights).filter(|(sub, _)| sub.contains(&s)).map(|(_, w)| w).sum::<f64>() / total
        }).fold(0.0, f64::max);
        prop_assert!((traffic.widest_degraded_one_failure() - widest).abs() < 1e-9);
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
        let (worst, set) = model.worst_fully_down(size, u128::MAX, &|_, _| {}).unwrap().unwrap();
        let expected = reference::all_sets(n, size).iter().map(|f| reference::fully_down(&subsets, f)).max().unwrap();
        prop_assert_eq!(worst, expected);
        prop_assert_eq!(set.len(), size);
        let set: BTreeSet<u32> = set.into_iter().collect();
        prop_assert_eq!(reference::fully_down(&subsets, &set), worst);
    }
}

/// A real placer: either algorithm, with or without zones, random key.
fn placer() -> impl Strategy<Value = placement::Placer> {
    (
        proptest::collection::vec(any::<u8>(), 0..32),
        prop_oneof![
            Just(placement::Algorithm::HmacModulo),
            Just(placement::Algorithm::Rendezvous)
        ],
        any::<bool>(),
        2u32..14,
        1u32..5,
    )
        .prop_map(|(key, algorithm, zoned, n, k)| {
            let fleet = if zoned {
                let a = n / 2 + 1;
                placement::Fleet::from_zone_spec(&format!("a:{a},b:{}", n.max(a + 1) - a)).unwrap()
            } else {
                placement::Fleet::uniform(n).unwrap()
            };
            let k = k.min(fleet.len() as u32);
            let config = placement::PlacementConfig {
                algorithm,
                k,
                zone_aware: zoned,
            };
            placement::Placer::new(fleet, &placement::PlacementKey::from_bytes(key), config)
                .unwrap()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn real_placements_match_reference(placer in placer(), tenants in 2usize..80, weights in proptest::collection::vec(0.01f64..100.0, 80)) {
        let weights = &weights[..tenants];
        let ids: Vec<String> = (0..tenants).map(|t| format!("t{t}")).collect();
        let population = Population::listed(ids.clone(), Some(weights.to_vec()));
        let placements = Placements::compute(&placer, &population);
        let subsets: Vec<Vec<u32>> = ids.iter().map(|id| placer.subset(id)).collect();
        let n = placer.fleet().len();
        for (t, subset) in subsets.iter().enumerate() {
            let mut sorted = subset.clone();
            sorted.sort_unstable();
            prop_assert_eq!(placements.subset(t), &sorted[..]);
        }

        // Every single failure and the exact overlap.
        let model = BlastModel::new(&placements).unwrap();
        for shard in 0..n as u32 {
            let failed: BTreeSet<u32> = [shard].into();
            let impact = model.impact(&[shard]).unwrap();
            prop_assert_eq!(impact.degraded, reference::degraded(&subsets, &failed));
            prop_assert_eq!(impact.fully_down, reference::fully_down(&subsets, &failed));
        }
        let max_k = subsets.iter().map(Vec::len).max().unwrap();
        prop_assert_eq!(overlap::exact(&model).pair_counts, reference::pair_counts(&subsets, max_k));

        // Weighted load and the hottest survivor of each failure.
        let report = analysis::load::load(&placements, &population, None, 3);
        let expected = reference::per_shard_load(n, &subsets, weights);
        for (got, want) in report.per_shard.iter().zip(&expected) {
            prop_assert!((got - want).abs() < 1e-9 * want.max(1.0));
        }
        for failover in &report.failover {
            let after = reference::load_after_failure(n, &subsets, weights, failover.failed);
            let best = after.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!((failover.load - best).abs() < 1e-9 * best.max(1.0), "{} vs {}", failover.load, best);
        }

        // Deployment waves: a planned split, checked wave by wave.
        if n >= 2 {
            let waves = analysis::waves::plan_waves(&placements, 2).unwrap();
            let wave_of: Vec<usize> = (0..n as u32).map(|s| waves.wave_of(s)).collect();
            for (wave, exposure) in analysis::waves::exposure(&placements, &waves).iter().enumerate() {
                prop_assert_eq!((exposure.fully_exposed, exposure.touched), reference::wave_exposure(&subsets, &wave_of, wave));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn migration_matches_reference(before in placer(), after in placer(), tenants in 1usize..60) {
        let population = Population::synthetic(tenants);
        let report = analysis::migrate::migrate(&before, &after, &population, usize::MAX);
        let mut changed = 0;
        let mut gained = 0;
        let mut dropped = 0;
        for t in 0..tenants {
            let id = format!("tenant-{t}");
            let old: BTreeSet<String> = before.subset_ids(&id).into_iter().map(String::from).collect();
            let new: BTreeSet<String> = after.subset_ids(&id).into_iter().map(String::from).collect();
            if old != new {
                changed += 1;
                gained += new.difference(&old).count() as u64;
                dropped += old.difference(&new).count() as u64;
            }
        }
        prop_assert_eq!(report.changed, changed);
        prop_assert_eq!(report.members_moved, gained);
        prop_assert_eq!(report.members_dropped, dropped);
        prop_assert_eq!(report.moved_per_tenant.iter().sum::<u64>(), tenants as u64);
    }
}

/// The measured overlap of a large keyed population sits near the closed
/// form; the key and tenants are fixed, so this is deterministic.
#[test]
fn measured_overlap_is_near_the_closed_form() {
    use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer};
    for (spec, zoned) in [("a:16", false), ("a:8,b:8", true)] {
        let fleet = if zoned {
            Fleet::from_zone_spec(spec).unwrap()
        } else {
            Fleet::uniform(16).unwrap()
        };
        let sizes: Vec<usize> = if zoned {
            fleet.zones().iter().map(|z| z.members.len()).collect()
        } else {
            vec![16]
        };
        let config = PlacementConfig {
            algorithm: Algorithm::Rendezvous,
            k: 3,
            zone_aware: zoned,
        };
        let placer = Placer::new(
            fleet,
            &PlacementKey::from_bytes(b"overlap".to_vec()),
            config,
        )
        .unwrap();
        let model =
            BlastModel::new(&Placements::compute(&placer, &Population::synthetic(2000))).unwrap();
        let measured = overlap::exact(&model).shared_counts;
        let expected = overlap::expected_shared_counts(&sizes, 3).unwrap();
        for (m, e) in measured.iter().zip(&expected) {
            assert!(
                (m - e).abs() < 0.01,
                "{spec}: measured {measured:?} expected {expected:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// `blast --poison` and `--poison-sweep`, with and without containment,
    /// against the reference's loops over tenants and over every choice of
    /// crashed members, on populations with per-tenant k.
    #[test]
    fn poison_matches_reference((n, subsets) in population(), crashes in proptest::option::of(0usize..5), top in 1usize..8) {
        let placements = Placements::from_subsets(n as usize, &subsets);
        let model = BlastModel::new(&placements).unwrap();
        let mut expected: Vec<(u64, u64, usize)> = Vec::new();
        for (t, subset) in subsets.iter().enumerate() {
            let figure = model.poison(subset, crashes).unwrap();
            let want = reference::poison(&subsets, subset, crashes);
            prop_assert!(figure.exact);
            prop_assert_eq!((figure.fully_down, figure.degraded), want, "tenant {}", t);
            // The crashed set is a choice of the tenant's own members that
            // does what the figure says.
            let crashed: BTreeSet<u32> = figure.crashed.iter().copied().collect();
            prop_assert!(crashed.iter().all(|s| subset.contains(s)));
            let allowed = crashes.filter(|&a| a > 0).unwrap_or(subset.len()).min(subset.len());
            prop_assert_eq!(crashed.len(), allowed);
            prop_assert_eq!(reference::fully_down(&subsets, &crashed), figure.fully_down);
            expected.push((want.0, want.1, t));
        }
        expected.sort_by_key(|&(down, degraded, t)| (std::cmp::Reverse(down), std::cmp::Reverse(degraded), t));
        let sweep = analysis::poison::sweep(&model, &placements, crashes, top);
        let got: Vec<(u64, u64, usize)> = sweep.worst.iter().map(|r| (r.figure.fully_down, r.figure.degraded, r.tenant)).collect();
        prop_assert_eq!(&got[..], &expected[..top.min(expected.len())]);
        for ranked in &sweep.worst {
            let inside = u64::from(ranked.figure.crashed.len() == ranked.subset.len());
            prop_assert_eq!(ranked.others_fully_down, ranked.figure.fully_down - inside);
        }
        let downing = subsets.iter().filter(|subset| {
            let figure = model.poison(subset, crashes).unwrap();
            figure.fully_down > u64::from(figure.crashed.len() == subset.len())
        }).count() as u64;
        prop_assert_eq!(sweep.downing_others, downing);
    }
}
