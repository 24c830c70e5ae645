//! Property tests and population statistics: the fast paths against the
//! references, and the invariants that make each algorithm fit to serve
//! (stable subsets, minimal movement when the fleet changes, honoured
//! weights, even load, and the migration cost each kind of change implies).

use std::collections::BTreeSet;

use placement::{
    Algorithm, Fleet, HmacModulo, KeyRing, PlacementConfig, PlacementKey, Placer,
    RECIPE_DEFAULT_KEY, Rendezvous, Shard, ShardIndex, TenantOverride, migration,
};
use proptest::prelude::*;

use crate::reference;
use crate::util::{self, ids};

/// Raw key bytes, including the empty key the recipe accepts. Mostly keys
/// shorter than SHA-256's 64-byte block, which HMAC zero-pads, and sometimes
/// longer ones, which HMAC hashes first.
fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..64),
        1 => prop::collection::vec(any::<u8>(), 64..=200),
    ]
}

/// Tenant ids come from customers, so anything a `String` can hold: the
/// empty id, NUL and other control characters, text outside ASCII, and the
/// ordinary shape.
fn tenant() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter),
        "tenant-[0-9]{1,6}",
    ]
}

/// A fleet size and a subset size that fits it. Most sizes are realistic;
/// one case in ten is a few million, to exercise indices and rejection
/// thresholds far from the small fleets the other tests use. (Rejection
/// itself is too rare to observe at any `n` below 2^32: it hits fewer than
/// one word in 2^32. The vectors' n = 1,000,003 lines pin the threshold.)
fn n_and_k(max_k: u32) -> impl Strategy<Value = (u32, u32)> {
    prop_oneof![
        9 => 1u32..2000,
        1 => 1_000_000u32..=4_000_000,
    ]
    .prop_flat_map(move |n| (Just(n), 1..=n.min(max_k)))
}

/// The relative weights tests draw from: equal, lighter, heavier.
const WEIGHTS: [f64; 4] = [1.0, 0.5, 2.0, 3.0];

/// `n` shards `s-0` … `s-{n-1}`. With `weights`, shard i gets
/// `weights[i % len]`; the weight belongs to the id, so it travels with the
/// shard when the list is reordered.
fn named_fleet(n: usize, weights: &[f64]) -> Vec<Shard> {
    util::shards("s-", n)
        .into_iter()
        .enumerate()
        .map(|(i, shard)| match weights {
            [] => shard,
            _ => shard.with_weight(weights[i % weights.len()]),
        })
        .collect()
}

/// Weights for a fleet: none (unweighted) or a rotation of `WEIGHTS`.
fn weights() -> impl Strategy<Value = Vec<f64>> {
    prop_oneof![
        Just(Vec::new()),
        prop::collection::vec(prop::sample::select(WEIGHTS.to_vec()), 1..5),
    ]
}

/// Exactly `k` members, all distinct, all inside the fleet.
fn check_shape(subset: &[ShardIndex], n: u32, k: u32) -> Result<(), TestCaseError> {
    prop_assert_eq!(subset.len(), k as usize);
    prop_assert!(
        subset.iter().all(|&index| index < n),
        "{subset:?} within {n}"
    );
    let distinct: BTreeSet<_> = subset.iter().collect();
    prop_assert_eq!(distinct.len(), subset.len(), "{:?} has duplicates", subset);
    Ok(())
}

proptest! {
    // Enough cases to find a broken invariant, few enough that the whole
    // suite stays at a few seconds in a debug build.
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hmac_modulo_matches_the_reference(
        key in key_bytes(),
        tenant in tenant(),
        (n, k) in n_and_k(40),
    ) {
        let fast = HmacModulo::new(&PlacementKey::from_bytes(key.clone()), n)
            .unwrap()
            .place(&tenant, k)
            .unwrap();
        check_shape(&fast, n, k)?;
        prop_assert_eq!(fast, reference::recipe_12_1(&tenant, n, k, &key));
    }

    #[test]
    fn subsets_are_well_formed_and_stable(
        key in key_bytes(),
        tenant in tenant(),
        other_tenant in tenant(),
        n in 1u32..300,
        k_seed in any::<u32>(),
    ) {
        let k = 1 + k_seed % n.min(40);
        let key_again = PlacementKey::from_bytes(key.clone());
        let key = PlacementKey::from_bytes(key);
        let fleet = Fleet::uniform(n).unwrap();

        let recipe = HmacModulo::new(&key, n).unwrap();
        let hrw = Rendezvous::new(&key, &fleet);
        let first = [recipe.place(&tenant, k).unwrap(), hrw.place(&tenant, k).unwrap()];
        // A second call, a fresh instance from equal key bytes, and a buffer
        // still holding another tenant's members must all agree.
        let again = [recipe.place(&tenant, k).unwrap(), hrw.place(&tenant, k).unwrap()];
        let fresh = [
            HmacModulo::new(&key_again, n).unwrap().place(&tenant, k).unwrap(),
            Rendezvous::new(&key_again, &Fleet::uniform(n).unwrap()).place(&tenant, k).unwrap(),
        ];
        let mut reused = [
            recipe.place(&other_tenant, k).unwrap(),
            hrw.place(&other_tenant, k).unwrap(),
        ];
        recipe.place_into(&tenant, k, &mut reused[0]).unwrap();
        hrw.place_into(&tenant, k, &mut reused[1]).unwrap();

        for (algorithm, subset) in Algorithm::ALL.iter().zip(&first) {
            check_shape(subset, n, k).map_err(|error| {
                TestCaseError::fail(format!("{algorithm}: {error}"))
            })?;
        }
        prop_assert_eq!(&first, &again);
        prop_assert_eq!(&first, &fresh);
        prop_assert_eq!(&first, &reused);

        // The Placer gives exactly what its engine gives.
        for (algorithm, subset) in Algorithm::ALL.iter().zip(&first) {
            let config = PlacementConfig { algorithm: *algorithm, k, zone_aware: false };
            let placer = Placer::new(fleet.clone(), &key, config).unwrap();
            prop_assert_eq!(&placer.subset(&tenant), subset, "{}", algorithm);
        }
    }

    #[test]
    fn rendezvous_top_k_is_the_prefix_of_the_full_ranking(
        key in key_bytes(),
        tenant in tenant(),
        n in 1usize..=64,
        weights in weights(),
    ) {
        // The reference for rendezvous is "sort all n shards by score and
        // take the first k". The scores are keyed by a subkey the crate keeps
        // to itself, so the full sort is obtained as place(t, n), checked to
        // be a ranking, and every smaller k must be its prefix. This pits the
        // insertion path (k <= 16) and the selection path (k > 16) against a
        // full sort, and it is also the "sizes nest" property.
        let key = PlacementKey::from_bytes(key);
        let fleet = Fleet::new(named_fleet(n, &weights)).unwrap();
        let hrw = Rendezvous::new(&key, &fleet);
        let n = n as u32;
        let ranking = hrw.place(&tenant, n).unwrap();
        let mut sorted = ranking.clone();
        sorted.sort_unstable();
        prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "k = n is a permutation");
        for k in 1..=n {
            prop_assert_eq!(
                &hrw.place(&tenant, k).unwrap()[..],
                &ranking[..k as usize],
                "k = {}", k
            );
        }
    }

    #[test]
    fn adding_a_shard_moves_at_most_one_member_and_only_onto_it(
        key in key_bytes(),
        tenant in tenant(),
        n in 1usize..200,
        k_seed in any::<u32>(),
        position_seed in any::<usize>(),
        weights in weights(),
        new_weight in prop::sample::select(WEIGHTS.to_vec()),
    ) {
        let k = 1 + k_seed % n.min(40) as u32;
        let key = PlacementKey::from_bytes(key);
        let before_shards = named_fleet(n, &weights);
        let mut after_shards = before_shards.clone();
        // Anywhere in the list: rendezvous scores ids, so position must not
        // matter.
        after_shards.insert(position_seed % (n + 1), Shard::new("s-new").with_weight(new_weight));
        let before_fleet = Fleet::new(before_shards).unwrap();
        let after_fleet = Fleet::new(after_shards).unwrap();

        let before = ids(&before_fleet, &Rendezvous::new(&key, &before_fleet).place(&tenant, k).unwrap());
        let after = ids(&after_fleet, &Rendezvous::new(&key, &after_fleet).place(&tenant, k).unwrap());

        if after.iter().any(|id| id == "s-new") {
            // The new shard displaced exactly the lowest-ranked member; the
            // others keep their relative order.
            let kept: Vec<&String> = after.iter().filter(|id| *id != "s-new").collect();
            let expected: Vec<&String> = before[..k as usize - 1].iter().collect();
            prop_assert_eq!(kept, expected);
        } else {
            prop_assert_eq!(after, before);
        }
    }

    #[test]
    fn removing_a_shard_only_moves_the_tenants_that_held_it(
        key in key_bytes(),
        tenant in tenant(),
        n in 2usize..200,
        k_seed in any::<u32>(),
        victim_seed in any::<usize>(),
        weights in weights(),
    ) {
        let k = 1 + k_seed % (n as u32 - 1).min(40);
        let key = PlacementKey::from_bytes(key);
        let before_shards = named_fleet(n, &weights);
        let mut after_shards = before_shards.clone();
        let victim = after_shards.remove(victim_seed % n).id;
        let before_fleet = Fleet::new(before_shards).unwrap();
        let after_fleet = Fleet::new(after_shards).unwrap();

        let before_hrw = Rendezvous::new(&key, &before_fleet);
        let before = ids(&before_fleet, &before_hrw.place(&tenant, k).unwrap());
        let after = ids(&after_fleet, &Rendezvous::new(&key, &after_fleet).place(&tenant, k).unwrap());

        if !before.contains(&victim) {
            // A shard outside the subset leaves it untouched, order and all.
            prop_assert_eq!(&after, &before);
        }
        // In every case the new subset is the old top k + 1 without the
        // removed shard: a removed member is replaced by the next in line.
        let next_in_line: Vec<String> =
            ids(&before_fleet, &before_hrw.place(&tenant, k + 1).unwrap())
                .into_iter()
                .filter(|id| *id != victim)
                .take(k as usize)
                .collect();
        prop_assert_eq!(after, next_in_line);
    }

    #[test]
    fn reordering_the_fleet_does_not_move_rendezvous_tenants(
        key in key_bytes(),
        tenant in tenant(),
        (n, order) in (1usize..100).prop_flat_map(|n| {
            (Just(n), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
        }),
        k_seed in any::<u32>(),
        weights in weights(),
    ) {
        let k = 1 + k_seed % n.min(40) as u32;
        let key = PlacementKey::from_bytes(key);
        let shards = named_fleet(n, &weights);
        let shuffled: Vec<Shard> = order.iter().map(|&i| shards[i].clone()).collect();
        let fleet = Fleet::new(shards).unwrap();
        let shuffled_fleet = Fleet::new(shuffled).unwrap();
        prop_assert_eq!(
            ids(&fleet, &Rendezvous::new(&key, &fleet).place(&tenant, k).unwrap()),
            ids(&shuffled_fleet, &Rendezvous::new(&key, &shuffled_fleet).place(&tenant, k).unwrap())
        );
    }
}

#[test]
fn hmac_modulo_matches_the_reference_on_both_sides_of_the_one_block_limit() {
    // `HmacModulo` hashes messages that fit one SHA-256 block (a tenant of up
    // to 46 bytes, plus the NUL and the 8-byte counter) with its own
    // two-compression HMAC, and longer ones with the `hmac` crate. Every
    // tenant length around that limit, in bytes and in multi-byte characters,
    // under keys shorter than, equal to and longer than a block, must agree
    // with the reference. k = 40 of 41 forces many counter values per tenant.
    for key_len in [0usize, 1, 32, 63, 64, 65, 200] {
        let key: Vec<u8> = (0..key_len).map(|i| (i * 37 + 11) as u8).collect();
        let recipe = HmacModulo::new(&PlacementKey::from_bytes(key.clone()), 41).unwrap();
        let tenants = (0..=100)
            .map(|len| "t".repeat(len))
            .chain((0..=30).map(|len| "é".repeat(len)));
        for tenant in tenants {
            for k in [1, 40] {
                assert_eq!(
                    recipe.place(&tenant, k).unwrap(),
                    reference::recipe_12_1(&tenant, 41, k, &key),
                    "key of {key_len} bytes, tenant of {} bytes, k = {k}",
                    tenant.len()
                );
            }
        }
    }
}

#[test]
fn without_the_key_the_subset_cannot_be_computed() {
    // The key is what keeps an attacker from aiming at a victim's shards.
    // Under another key (even one differing in a single bit) subsets must
    // look unrelated: two independent 3-of-64 subsets coincide with
    // probability 1 / C(64, 3) = 1 / 41,664, so among 200 tenants we expect
    // no coincidence at all and allow a handful.
    let tenants = util::tenants(200);
    let base = b"a placement key under test".to_vec();
    let mut one_bit_off = base.clone();
    *one_bit_off.last_mut().unwrap() ^= 1;
    let other_keys = [
        b"a different placement key".to_vec(),
        one_bit_off,
        b"a placement key under tesT".to_vec(),
    ];
    let fleet = Fleet::uniform(64).unwrap();
    let placer = |key: &[u8], algorithm| {
        let config = PlacementConfig {
            algorithm,
            k: 3,
            zone_aware: false,
        };
        Placer::new(fleet.clone(), &PlacementKey::from_bytes(key), config).unwrap()
    };
    for algorithm in Algorithm::ALL {
        let before = placer(&base, algorithm);
        for other in &other_keys {
            let after = placer(other, algorithm);
            let diff = migration::diff(&before, &after, tenants.iter().map(String::as_str));
            assert!(
                diff.changed >= 195,
                "{algorithm}: only {} of 200 tenants differ under another key",
                diff.changed
            );
        }
    }
}

/// Whether two keys give the same placements, under both algorithms, for a
/// sample of tenants.
fn place_alike(a: &PlacementKey, b: &PlacementKey) -> bool {
    let fleet = Fleet::uniform(64).unwrap();
    let (recipe_a, recipe_b) = (
        HmacModulo::new(a, 64).unwrap(),
        HmacModulo::new(b, 64).unwrap(),
    );
    let (hrw_a, hrw_b) = (Rendezvous::new(a, &fleet), Rendezvous::new(b, &fleet));
    util::tenants(100).iter().all(|tenant| {
        recipe_a.place(tenant, 3) == recipe_b.place(tenant, 3)
            && hrw_a.place(tenant, 3) == hrw_b.place(tenant, 3)
    })
}

// The two tests below pin `PlacementKey`'s guards (src/key.rs,
// `is_recipe_default` and `is_all_zero`) to what HMAC does. A gateway refuses
// keys for which either holds, because with them placement is a public
// function of the tenant id. HMAC zero-pads keys shorter than its 64-byte
// block, so a key and the same key followed by zero bytes are one and the
// same HMAC key; guards comparing raw bytes would miss that.

#[test]
fn a_zero_padded_default_key_is_flagged_as_the_recipe_default() {
    // The public default key stored in a zero-filled 32-byte key slot.
    let padded = PlacementKey::from_bytes([RECIPE_DEFAULT_KEY, &[0; 16]].concat());
    assert!(
        place_alike(&padded, &PlacementKey::recipe_default()),
        "HMAC treats the zero-padded default key as the default key"
    );
    assert!(
        padded.is_recipe_default(),
        "the default key followed by zero bytes places exactly like the public default \
         key, yet is_recipe_default() is false, so a gateway would serve with it"
    );
}

#[test]
fn an_all_zero_key_is_flagged_like_the_empty_key() {
    // `head -c 32 /dev/zero` where `/dev/urandom` was meant, or `00` in a
    // hex variable.
    let empty = PlacementKey::from_bytes(Vec::new());
    for len in [1, 32] {
        let zeros = PlacementKey::from_bytes(vec![0; len]);
        assert!(
            place_alike(&zeros, &empty),
            "HMAC treats {len} zero byte(s) as the empty key"
        );
        assert!(
            zeros.is_all_zero(),
            "a key of {len} zero byte(s) places exactly like the empty key, yet \
             is_all_zero() does not flag it, so a gateway would serve with it"
        );
    }
}

#[test]
fn weighted_rendezvous_gives_shards_tenants_in_proportion_to_weight() {
    // For k = 1 a shard of weight w should win a fraction w / W of tenants.
    // The population and key are fixed, so the counts are deterministic; the
    // tolerance of five binomial standard deviations is what a correct
    // implementation passes for all but a vanishing share of keys, and what
    // an implementation ignoring weights (off by about 40 deviations for the
    // heavy shard here) cannot.
    const TENANTS: usize = 20_000;
    let tenants = util::tenants(TENANTS);
    let fleets = [
        // One shard twice as heavy as nine others.
        [2.0].into_iter().chain([1.0; 9]).collect::<Vec<f64>>(),
        // A spread of weights, with the heavy shard not first.
        vec![1.0, 0.5, 4.0, 1.0, 2.0, 1.0],
    ];
    for weights in fleets {
        let fleet = Fleet::new(named_fleet(weights.len(), &weights)).unwrap();
        let hrw = Rendezvous::new(&util::key("weights"), &fleet);
        let mut wins = vec![0usize; weights.len()];
        for tenant in &tenants {
            wins[hrw.place(tenant, 1).unwrap()[0] as usize] += 1;
        }
        let total: f64 = weights.iter().sum();
        for (shard, (&weight, &won)) in weights.iter().zip(&wins).enumerate() {
            let p = weight / total;
            let expected = TENANTS as f64 * p;
            let deviation = (TENANTS as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (won as f64 - expected).abs() <= 5.0 * deviation,
                "weights {weights:?}: shard {shard} (weight {weight}) won {won} tenants, \
                 expected {expected:.0} ± {:.0}",
                5.0 * deviation
            );
        }
    }
}

#[test]
fn both_algorithms_spread_load_evenly() {
    // Chi-square of per-shard occupancy over a fixed population. With 63
    // degrees of freedom a bound of 110 is exceeded by chance with
    // probability about 0.0002; since key and tenants are fixed the test is
    // deterministic, so exceeding it means the placement is biased.
    const N: u32 = 64;
    const K: u32 = 3;
    const TENANTS: usize = 30_000;
    let tenants = util::tenants(TENANTS);
    for algorithm in Algorithm::ALL {
        let config = PlacementConfig {
            algorithm,
            k: K,
            zone_aware: false,
        };
        let placer =
            Placer::new(Fleet::uniform(N).unwrap(), &util::key("uniformity"), config).unwrap();
        let mut occupancy = vec![0u64; N as usize];
        let mut subset = Vec::new();
        for tenant in &tenants {
            placer.subset_into(tenant, &mut subset);
            for &shard in &subset {
                occupancy[shard as usize] += 1;
            }
        }
        let expected = (TENANTS as u64 * u64::from(K)) as f64 / f64::from(N);
        let chi_square: f64 = occupancy
            .iter()
            .map(|&observed| (observed as f64 - expected).powi(2) / expected)
            .sum();
        assert!(
            chi_square < 110.0,
            "{algorithm}: chi-square {chi_square:.1} over 63 degrees of freedom; occupancy {occupancy:?}"
        );
    }
}

/// A non-zoned placer over `Fleet::uniform(n)`.
fn placer(algorithm: Algorithm, n: u32, k: u32, key: &PlacementKey) -> Placer {
    let config = PlacementConfig {
        algorithm,
        k,
        zone_aware: false,
    };
    Placer::new(Fleet::uniform(n).unwrap(), key, config).unwrap()
}

/// The population the migration tests price.
const MIGRATION_TENANTS: usize = 6_000;

/// The diff's totals must be the sums over its moves, or a migration's
/// price is misreported even when every tenant's move is right.
fn check_totals(diff: &migration::MigrationDiff) {
    let added: usize = diff.moves.iter().map(|change| change.added.len()).sum();
    let removed: usize = diff.moves.iter().map(|change| change.removed.len()).sum();
    assert_eq!(diff.changed, diff.moves.len() as u64, "changed");
    assert_eq!(diff.members_moved, added as u64, "members_moved");
    assert_eq!(diff.members_removed, removed as u64, "members_removed");
}

#[test]
fn growing_the_fleet_moves_few_rendezvous_tenants_onto_the_new_shard() {
    // Going from 20 to 21 shards, a tenant moves exactly when the new shard
    // ranks in its top 3, which happens with probability 3 / 21; each such
    // tenant moves one member, onto the new shard, off its lowest-ranked one.
    let key = util::key("migration");
    let tenants = util::tenants(MIGRATION_TENANTS);
    let before = placer(Algorithm::Rendezvous, 20, 3, &key);
    let after = placer(Algorithm::Rendezvous, 21, 3, &key);
    let diff = migration::diff(&before, &after, tenants.iter().map(String::as_str));

    check_totals(&diff);
    assert_eq!(diff.tenants, MIGRATION_TENANTS as u64);
    assert_eq!(diff.members_moved, diff.changed);
    assert_eq!(diff.members_removed, diff.changed);
    assert_eq!(diff.moves.len() as u64, diff.changed);
    for change in &diff.moves {
        assert_eq!(change.added, ["20"], "{change:?}");
        assert_eq!(change.removed.len(), 1, "{change:?}");
        let old = before.subset_ids(&change.tenant);
        assert_eq!(change.removed[0], old[2], "the lowest-ranked member leaves");
    }
    let fraction = diff.changed as f64 / MIGRATION_TENANTS as f64;
    let p = 3.0 / 21.0;
    let tolerance = 5.0 * (p * (1.0 - p) / MIGRATION_TENANTS as f64).sqrt();
    assert!(
        (fraction - p).abs() <= tolerance,
        "{fraction:.4} of tenants moved, expected {p:.4} ± {tolerance:.4}"
    );
}

#[test]
fn growing_the_fleet_moves_most_hmac_modulo_tenants() {
    // This is why rendezvous exists: the recipe takes words modulo n, so one
    // more shard reshuffles nearly everyone (a tenant keeps its set only by
    // coincidence). The brief's floor is a majority; in practice it is all
    // but a few tenants, and a bound of 90% still leaves a wide margin.
    let key = util::key("migration");
    let tenants = util::tenants(MIGRATION_TENANTS);
    let before = placer(Algorithm::HmacModulo, 20, 3, &key);
    let after = placer(Algorithm::HmacModulo, 21, 3, &key);
    let diff = migration::diff(&before, &after, tenants.iter().map(String::as_str));
    check_totals(&diff);
    let fraction = diff.changed as f64 / MIGRATION_TENANTS as f64;
    assert!(fraction > 0.9, "only {fraction:.3} of tenants moved");
}

#[test]
fn shrinking_the_fleet_moves_only_the_removed_shards_rendezvous_tenants() {
    // The reverse of growing: from 21 shards to 20, exactly the tenants that
    // held shard "20" move, each off it and onto its next-ranked shard.
    let key = util::key("migration");
    let tenants = util::tenants(MIGRATION_TENANTS);
    let before = placer(Algorithm::Rendezvous, 21, 3, &key);
    let after = placer(Algorithm::Rendezvous, 20, 3, &key);
    let diff = migration::diff(&before, &after, tenants.iter().map(String::as_str));
    check_totals(&diff);
    let holders = tenants
        .iter()
        .filter(|tenant| before.subset_ids(tenant).contains(&"20"))
        .count();
    assert_eq!(diff.changed, holders as u64);
    for change in &diff.moves {
        assert_eq!(change.removed, ["20"], "{change:?}");
        assert_eq!(change.added.len(), 1, "{change:?}");
    }
}

#[test]
fn rotating_the_key_moves_nearly_everyone() {
    // A new key version is a new secret function: a tenant keeps its 3 of 20
    // only by the 1-in-1,140 chance of drawing the same set.
    let mut ring = KeyRing::new("v1", util::key("rotation v1")).unwrap();
    ring.insert("v2", util::key("rotation v2")).unwrap();
    let tenants = util::tenants(MIGRATION_TENANTS);
    for algorithm in Algorithm::ALL {
        let before = placer(algorithm, 20, 3, ring.get("v1").unwrap());
        let after = placer(algorithm, 20, 3, ring.get("v2").unwrap());
        let diff = migration::diff(&before, &after, tenants.iter().map(String::as_str));
        check_totals(&diff);
        let fraction = diff.changed as f64 / MIGRATION_TENANTS as f64;
        assert!(
            fraction > 0.98,
            "{algorithm}: only {fraction:.3} of tenants moved"
        );
    }
}

#[test]
fn changing_k_with_rendezvous_adds_or_removes_one_member_and_nothing_else() {
    // Sizes nest, so k = 3 -> 4 changes every tenant's set by exactly one
    // added member, its fourth-ranked shard, and takes nothing away: for a
    // stateful service only the copy-in is paid, never a hand-off.
    let key = util::key("migration");
    let tenants = util::tenants(MIGRATION_TENANTS);
    let before = placer(Algorithm::Rendezvous, 20, 3, &key);
    let after = placer(Algorithm::Rendezvous, 20, 4, &key);
    let diff = migration::diff(&before, &after, tenants.iter().map(String::as_str));
    check_totals(&diff);
    assert_eq!(diff.changed, MIGRATION_TENANTS as u64);
    assert_eq!(diff.members_moved, MIGRATION_TENANTS as u64);
    assert_eq!(diff.members_removed, 0);
    for change in &diff.moves {
        assert!(change.removed.is_empty(), "{change:?}");
        assert_eq!(
            change.added,
            [after.subset_ids(&change.tenant)[3]],
            "{change:?}"
        );
    }

    // And back: k = 4 -> 3 takes away the fourth-ranked member only.
    let diff = migration::diff(&after, &before, tenants.iter().map(String::as_str));
    check_totals(&diff);
    assert_eq!(diff.changed, MIGRATION_TENANTS as u64);
    assert_eq!(diff.members_moved, 0);
    assert_eq!(diff.members_removed, MIGRATION_TENANTS as u64);
    for change in &diff.moves {
        assert!(change.added.is_empty(), "{change:?}");
        assert_eq!(
            change.removed,
            [after.subset_ids(&change.tenant)[3]],
            "{change:?}"
        );
    }
}

#[test]
fn a_change_of_order_alone_is_not_a_move() {
    // Migration compares sets of ids: serving the same shards in another
    // order moves no state.
    let fleet = Fleet::uniform(8).unwrap();
    let key = util::key("order");
    let config = PlacementConfig {
        algorithm: Algorithm::Rendezvous,
        k: 2,
        zone_aware: false,
    };
    let mut before = Placer::new(fleet.clone(), &key, config).unwrap();
    let mut after = Placer::new(fleet, &key, config).unwrap();
    let dedicated = |ids: [&str; 2]| TenantOverride::Dedicated(ids.map(String::from).to_vec());
    before.set_override("vip", dedicated(["1", "5"])).unwrap();
    after.set_override("vip", dedicated(["5", "1"])).unwrap();
    assert_eq!(migration::tenant_move(&before, &after, "vip"), None);
    let diff = migration::diff(&before, &after, ["vip", "tenant-1"]);
    assert_eq!((diff.tenants, diff.changed), (2, 0));
}
