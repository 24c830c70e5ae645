//! Zone-aware placement at its edges (uneven zones, `k` at and beyond the
//! fleet, empty and missing zones, independence between zones) for both the
//! rendezvous and the hmac-modulo variant, and the `Placer`'s per-tenant
//! overrides.
//!
//! The contract under test, from the crate's zone documentation: a tenant's
//! `k` members are spread over the zones as evenly as the zones allow (a zone
//! too small for its share gives all it has and the rest spills over), the
//! zones that take an extra member vary from tenant to tenant, each zone
//! chooses its members from its own shards only, and members are listed
//! round-robin over the tenant's zone order.

use std::collections::BTreeSet;

use placement::{
    Algorithm, Fleet, HmacModulo, PlacementConfig, PlacementError, PlacementKey, Placer,
    Rendezvous, Shard, ShardIndex, TenantOverride, ZoneAware,
};

use crate::reference;
use crate::util::{self, zone_positions, zone_sizes};

/// Both zone-aware variants over one fleet, named for assertion messages.
fn variants(key: &PlacementKey, fleet: &Fleet) -> [(&'static str, ZoneAware); 2] {
    [
        ("rendezvous", ZoneAware::rendezvous(key, fleet).unwrap()),
        ("hmac-modulo", ZoneAware::hmac_modulo(key, fleet).unwrap()),
    ]
}

/// How many members of `subset` each zone holds, in `fleet.zones()` order.
fn zone_counts(fleet: &Fleet, subset: &[ShardIndex]) -> Vec<usize> {
    let zone_of = zone_positions(fleet);
    let mut counts = vec![0; fleet.zones().len()];
    for &shard in subset {
        counts[zone_of[shard as usize]] += 1;
    }
    counts
}

/// The zone positions of a subset's members, in the subset's order.
fn member_zones(fleet: &Fleet, subset: &[ShardIndex]) -> Vec<usize> {
    let zone_of = zone_positions(fleet);
    subset
        .iter()
        .map(|&shard| zone_of[shard as usize])
        .collect()
}

/// The members a subset takes from one zone, as ids, in the subset's order.
fn ids_in_zone(fleet: &Fleet, subset: &[ShardIndex], zone: &str) -> Vec<String> {
    subset
        .iter()
        .filter(|&&shard| fleet.shard(shard).zone.as_deref() == Some(zone))
        .map(|&shard| fleet.shard(shard).id.clone())
        .collect()
}

/// Checks the spread every zone-aware subset must have: `k` distinct members;
/// no zone gives more shards than it has; two zones differ by at most one
/// member unless the smaller one has given everything it has; and the first
/// `min(k, zones)` members are all in different zones.
fn check_spread(fleet: &Fleet, subset: &[ShardIndex], k: usize, context: &str) {
    assert_eq!(subset.len(), k, "{context}: {subset:?}");
    let distinct: BTreeSet<_> = subset.iter().collect();
    assert_eq!(distinct.len(), k, "{context}: duplicates in {subset:?}");

    let sizes = zone_sizes(fleet);
    let counts = zone_counts(fleet, subset);
    for (zone, (&count, &size)) in counts.iter().zip(&sizes).enumerate() {
        assert!(
            count <= size,
            "{context}: zone {zone} gives {count} of {size}"
        );
        for &other in &counts {
            assert!(
                count + 1 >= other || count == size,
                "{context}: zone {zone} gives {count} while another gives {other} ({counts:?})"
            );
        }
    }

    let leading = k.min(sizes.len());
    let leading_zones: BTreeSet<_> = member_zones(fleet, &subset[..leading])
        .into_iter()
        .collect();
    assert_eq!(
        leading_zones.len(),
        leading,
        "{context}: the first {leading} members share a zone ({subset:?})"
    );
}

#[test]
fn equal_zones_give_m_or_m_plus_one_members_each() {
    let key = util::key("equal zones");
    for spec in ["a:4,b:4,c:4", "a:3,b:3,c:3,d:3,e:3", "a:2,b:2"] {
        let fleet = Fleet::from_zone_spec(spec).unwrap();
        let zones = fleet.zones().len();
        for (variant, zoned) in variants(&key, &fleet) {
            for k in 1..=fleet.len() {
                // k = zones * m + r: every zone gives m, and r zones give one
                // more.
                let (m, r) = (k / zones, k % zones);
                for tenant in util::tenants(100) {
                    let subset = zoned.place(&tenant, k as u32).unwrap();
                    let context = format!("{variant} {spec} k = {k} {tenant}");
                    check_spread(&fleet, &subset, k, &context);
                    let counts = zone_counts(&fleet, &subset);
                    assert!(
                        counts.iter().all(|&count| count == m || count == m + 1),
                        "{context}: {counts:?}"
                    );
                    assert_eq!(
                        counts.iter().filter(|&&count| count == m + 1).count(),
                        r,
                        "{context}: {counts:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_zone_smaller_than_its_share_gives_all_it_has() {
    // Zone a holds one shard. From k = 3 on it gives that shard, and the
    // rest of the subset is split between b and c as evenly as possible.
    let key = util::key("small zone");
    let fleet = Fleet::from_zone_spec("a:1,b:6,c:6").unwrap();
    for (variant, zoned) in variants(&key, &fleet) {
        let mut b_took_the_extra = 0;
        let mut c_took_the_extra = 0;
        for tenant in util::tenants(300) {
            let counts = |k: u32| zone_counts(&fleet, &zoned.place(&tenant, k).unwrap());
            assert_eq!(counts(5), [1, 2, 2], "{variant} {tenant} k = 5");
            match counts(6)[..] {
                [1, 3, 2] => b_took_the_extra += 1,
                [1, 2, 3] => c_took_the_extra += 1,
                ref other => panic!("{variant} {tenant} k = 6: {other:?}"),
            }
            assert_eq!(counts(13), [1, 6, 6], "{variant} {tenant} k = 13");
        }
        // Neither big zone is always the one that takes the odd member.
        assert!(
            b_took_the_extra > 100 && c_took_the_extra > 100,
            "{variant}: b took the extra {b_took_the_extra} times, c {c_took_the_extra} times"
        );
    }

    // The general rule, over every k and a less regular fleet.
    for spec in ["a:1,b:6,c:6", "a:2,b:7,c:3,d:1"] {
        let fleet = Fleet::from_zone_spec(spec).unwrap();
        for (variant, zoned) in variants(&key, &fleet) {
            for k in 1..=fleet.len() {
                for tenant in util::tenants(100) {
                    let subset = zoned.place(&tenant, k as u32).unwrap();
                    check_spread(&fleet, &subset, k, &format!("{variant} {spec} k = {k}"));
                }
            }
        }
    }
}

#[test]
fn k_equal_to_n_places_every_shard_once() {
    let key = util::key("k = n");
    for spec in ["a:1", "a:4,b:4,c:4", "a:1,b:6,c:6", "a:2,b:7,c:3,d:1"] {
        let fleet = Fleet::from_zone_spec(spec).unwrap();
        let n = fleet.len() as u32;
        let everyone: Vec<ShardIndex> = (0..n).collect();
        for (variant, zoned) in variants(&key, &fleet) {
            for tenant in util::tenants(50) {
                let mut subset = zoned.place(&tenant, n).unwrap();
                subset.sort_unstable();
                assert_eq!(subset, everyone, "{variant} {spec} {tenant}");
            }
        }
        for algorithm in Algorithm::ALL {
            let config = PlacementConfig {
                algorithm,
                k: n,
                zone_aware: true,
            };
            let placer = Placer::new(fleet.clone(), &key, config).unwrap();
            let mut subset = placer.subset("tenant-0");
            subset.sort_unstable();
            assert_eq!(subset, everyone, "Placer {algorithm} {spec}");
        }
    }
}

#[test]
fn k_outside_one_to_n_is_an_error() {
    let key = util::key("k out of range");
    let fleet = Fleet::from_zone_spec("a:2,b:3").unwrap();
    for (variant, zoned) in variants(&key, &fleet) {
        for k in [0, 6, 100, u32::MAX] {
            assert_eq!(
                zoned.place("tenant", k),
                Err(PlacementError::KOutOfRange {
                    k: u64::from(k),
                    n: 5
                }),
                "{variant} k = {k}"
            );
        }
    }
    for algorithm in Algorithm::ALL {
        for zone_aware in [false, true] {
            for k in [0, 6] {
                let config = PlacementConfig {
                    algorithm,
                    k,
                    zone_aware,
                };
                assert_eq!(
                    Placer::new(fleet.clone(), &key, config).unwrap_err(),
                    PlacementError::KOutOfRange {
                        k: u64::from(k),
                        n: 5
                    },
                    "{algorithm} zone_aware = {zone_aware} k = {k}"
                );
            }
        }
    }
}

#[test]
fn a_zone_without_shards_is_rejected() {
    assert_eq!(
        Fleet::from_zone_spec("a:3,b:0").unwrap_err(),
        PlacementError::EmptyZone { zone: "b".into() }
    );
}

#[test]
fn zone_aware_placement_needs_a_zone_on_every_shard() {
    let key = util::key("missing zone");
    // Some shards zoned, one not: the unzoned shard is named in the error.
    let mixed = Fleet::new(vec![
        Shard::new("a-0").in_zone("a"),
        Shard::new("loose"),
        Shard::new("b-0").in_zone("b"),
    ])
    .unwrap();
    let missing = PlacementError::MissingZone { id: "loose".into() };
    assert_eq!(ZoneAware::rendezvous(&key, &mixed).unwrap_err(), missing);
    assert_eq!(ZoneAware::hmac_modulo(&key, &mixed).unwrap_err(), missing);

    // No zones at all, but zone-aware placement asked for.
    for algorithm in Algorithm::ALL {
        let config = PlacementConfig {
            algorithm,
            k: 2,
            zone_aware: true,
        };
        assert_eq!(
            Placer::new(Fleet::uniform(4).unwrap(), &key, config).unwrap_err(),
            PlacementError::MissingZone { id: "0".into() },
            "{algorithm}"
        );
        assert_eq!(
            Placer::new(mixed.clone(), &key, config).unwrap_err(),
            missing,
            "{algorithm}"
        );
    }
}

/// Three zones of four shards with explicit ids (`a-0` … `c-3`), optionally
/// with one more shard `b-new` in zone b, put at the front of the list so
/// that every other shard's index shifts.
fn three_zones(with_new_b: bool) -> Fleet {
    let mut shards: Vec<Shard> = ["a", "b", "c"]
        .iter()
        .flat_map(|zone| (0..4).map(move |i| Shard::new(format!("{zone}-{i}")).in_zone(*zone)))
        .collect();
    if with_new_b {
        shards.insert(0, Shard::new("b-new").in_zone("b"));
    }
    Fleet::new(shards).unwrap()
}

#[test]
fn growing_one_zone_leaves_the_other_zones_alone() {
    // With 3 zones and k = 3 (or 6) every zone gives 1 (or 2) members whether
    // zone b has four shards or five, so the allocation is unchanged and
    // zones a and c must keep exactly the same members, in the same order.
    // Rendezvous scores ids inside the zone; zone-aware hmac-modulo keys each
    // zone's recipe by the zone's name and size; neither looks at zone b.
    let key = util::key("independence");
    let before = three_zones(false);
    let after = three_zones(true);
    let before_variants = variants(&key, &before);
    let after_variants = variants(&key, &after);
    for ((variant, old), (_, new)) in before_variants.iter().zip(&after_variants) {
        let mut b_moved = 0;
        for k in [3, 6] {
            for tenant in util::tenants(1000) {
                let old_subset = old.place(&tenant, k).unwrap();
                let new_subset = new.place(&tenant, k).unwrap();
                for zone in ["a", "c"] {
                    assert_eq!(
                        ids_in_zone(&after, &new_subset, zone),
                        ids_in_zone(&before, &old_subset, zone),
                        "{variant} k = {k} {tenant}: zone {zone} changed when zone b grew"
                    );
                }
                let old_b = ids_in_zone(&before, &old_subset, "b");
                let new_b = ids_in_zone(&after, &new_subset, "b");
                if old_b != new_b {
                    b_moved += 1;
                }
                if *variant == "rendezvous" {
                    // Inside zone b, rendezvous moves at most one member,
                    // and only onto the new shard.
                    let gained: Vec<_> = new_b.iter().filter(|id| !old_b.contains(id)).collect();
                    assert!(
                        gained.is_empty() || gained == ["b-new"],
                        "{variant} k = {k} {tenant}: zone b {old_b:?} -> {new_b:?}"
                    );
                }
            }
        }
        // The test must not pass merely because nothing moved at all.
        assert!(b_moved > 0, "{variant}: zone b never changed");
    }
}

#[test]
fn the_zone_that_takes_the_extra_member_varies_between_tenants() {
    // Three zones, k = 4: one zone gives two members. If one zone always
    // took the extra, its shards would carry a third more load than the
    // others'. Each zone should take it for about a third of tenants; the
    // bounds are about nine standard deviations wide.
    const TENANTS: usize = 3000;
    let key = util::key("extra member");
    let fleet = Fleet::from_zone_spec("a:4,b:4,c:4").unwrap();
    for (variant, zoned) in variants(&key, &fleet) {
        let mut extra = [0usize; 3];
        for tenant in util::tenants(TENANTS) {
            let counts = zone_counts(&fleet, &zoned.place(&tenant, 4).unwrap());
            let heavy = counts.iter().position(|&count| count == 2).unwrap();
            extra[heavy] += 1;
        }
        for (zone, &times) in extra.iter().enumerate() {
            let share = times as f64 / TENANTS as f64;
            assert!(
                (0.25..=0.42).contains(&share),
                "{variant}: zone {zone} took the extra member for {share:.3} of tenants ({extra:?})"
            );
        }
    }
}

#[test]
fn zone_aware_rendezvous_matches_the_reference() {
    // Zone-aware rendezvous is documented to rank each zone's shards by the
    // same keyed score plain rendezvous uses. So plain rendezvous's full
    // ranking of the fleet, restricted to one zone, is that zone's ranking,
    // and the reference rebuilds the whole zone-aware subset from it: the
    // one-at-a-time allocation, the top of each zone, and round-robin order.
    // Only the tenant's zone order is keyed internally; it is read off the
    // members of a k = n placement (the first of each zone) and must then
    // explain every smaller k as well.
    let key = util::key("zone reference");
    let interleaved_weighted = Fleet::new(
        (0..12)
            .map(|i| {
                Shard::new(format!("shard-{i}"))
                    .in_zone(["east", "west", "north"][i % 3])
                    .with_weight([1.0, 2.0, 0.5, 1.0][i % 4])
            })
            .collect(),
    )
    .unwrap();
    let fleets = [
        Fleet::from_zone_spec("a:4,b:4,c:4").unwrap(),
        Fleet::from_zone_spec("a:1,b:6,c:6").unwrap(),
        Fleet::from_zone_spec("a:2,b:7,c:3,d:1").unwrap(),
        interleaved_weighted,
    ];
    for fleet in &fleets {
        let n = fleet.len();
        let zone_of = zone_positions(fleet);
        let sizes = zone_sizes(fleet);
        let plain = Rendezvous::new(&key, fleet);
        let zoned = ZoneAware::rendezvous(&key, fleet).unwrap();
        for tenant in util::tenants(100) {
            let ranking = plain.place(&tenant, n as u32).unwrap();
            let everything = zoned.place(&tenant, n as u32).unwrap();
            let order = member_zones(fleet, &everything[..sizes.len()]);
            for k in 1..=n {
                let expected =
                    reference::zone_aware_from_ranking(&ranking, &zone_of, &sizes, &order, k);
                assert_eq!(
                    zoned.place(&tenant, k as u32).unwrap(),
                    expected,
                    "zones {sizes:?} {tenant} k = {k}"
                );
            }
        }
    }
}

#[test]
fn growing_k_adds_one_member_and_keeps_the_rest() {
    // Raising a tenant's k by one (a per-tenant override, say) must not
    // reshuffle its zones: every zone keeps what it gave, one zone gives one
    // more, and nothing is taken away.
    let key = util::key("growing k");
    for spec in ["a:4,b:4,c:4", "a:1,b:6,c:6", "a:2,b:7,c:3,d:1"] {
        let fleet = Fleet::from_zone_spec(spec).unwrap();
        for (variant, zoned) in variants(&key, &fleet) {
            for tenant in util::tenants(100) {
                for k in 1..fleet.len() as u32 {
                    let smaller = zoned.place(&tenant, k).unwrap();
                    let larger = zoned.place(&tenant, k + 1).unwrap();
                    for zone in fleet.zones() {
                        let before = ids_in_zone(&fleet, &smaller, &zone.name);
                        let after = ids_in_zone(&fleet, &larger, &zone.name);
                        assert!(
                            after.starts_with(&before),
                            "{variant} {spec} {tenant} k = {k}: zone {} {before:?} -> {after:?}",
                            zone.name
                        );
                    }
                    let added = larger.iter().filter(|shard| !smaller.contains(shard));
                    assert_eq!(added.count(), 1, "{variant} {spec} {tenant} k = {k}");
                }
            }
        }
    }
}

/// A placer over 16 shards with ids `s-0` … `s-15` listed in reverse, so
/// that shard `s-i` sits at index 15 - i and ids cannot pass for indices.
fn reversed_placer(algorithm: Algorithm, k: u32) -> Placer {
    let mut shards = util::shards("s-", 16);
    shards.reverse();
    let config = PlacementConfig {
        algorithm,
        k,
        zone_aware: false,
    };
    Placer::new(Fleet::new(shards).unwrap(), &util::key("overrides"), config).unwrap()
}

#[test]
fn a_k_override_gives_that_tenant_its_own_k() {
    let key = util::key("overrides");
    for algorithm in Algorithm::ALL {
        let mut placer = reversed_placer(algorithm, 2);
        placer.set_override("whale", TenantOverride::K(6)).unwrap();
        assert_eq!(placer.k_for("whale"), 6);
        assert!(placer.has_override("whale"));
        assert!(!placer.has_override("minnow"));
        assert_eq!(placer.subset("minnow").len(), 2);

        // The whale gets what the algorithm itself gives for k = 6.
        let whale = placer.subset("whale");
        let direct = match algorithm {
            Algorithm::HmacModulo => HmacModulo::new(&key, 16)
                .unwrap()
                .place("whale", 6)
                .unwrap(),
            Algorithm::Rendezvous => Rendezvous::new(&key, placer.fleet())
                .place("whale", 6)
                .unwrap(),
        };
        assert_eq!(whale, direct, "{algorithm}");
    }

    // With zones, the larger k is spread over the zones like any other.
    let config = PlacementConfig {
        algorithm: Algorithm::Rendezvous,
        k: 3,
        zone_aware: true,
    };
    let fleet = Fleet::from_zone_spec("a:4,b:4,c:4").unwrap();
    let mut placer = Placer::new(fleet.clone(), &key, config).unwrap();
    placer.set_override("whale", TenantOverride::K(6)).unwrap();
    assert_eq!(zone_counts(&fleet, &placer.subset("whale")), [2, 2, 2]);
}

#[test]
fn a_dedicated_override_returns_exactly_those_shards_in_order() {
    for algorithm in Algorithm::ALL {
        let mut placer = reversed_placer(algorithm, 3);
        let pinned = TenantOverride::Dedicated(vec!["s-0".into(), "s-12".into(), "s-5".into()]);
        placer.set_override("vip", pinned).unwrap();
        assert_eq!(placer.subset("vip"), [15, 3, 10], "{algorithm}");
        assert_eq!(placer.subset_ids("vip"), ["s-0", "s-12", "s-5"]);
        assert_eq!(placer.k_for("vip"), 3);

        // A later override replaces the earlier one.
        placer.set_override("vip", TenantOverride::K(4)).unwrap();
        assert_eq!(placer.subset("vip").len(), 4);
    }
}

#[test]
fn invalid_overrides_are_rejected_and_change_nothing() {
    let mut placer = reversed_placer(Algorithm::Rendezvous, 3);
    placer.set_override("vip", TenantOverride::K(5)).unwrap();
    let before = placer.subset("vip");
    let dedicated =
        |ids: &[&str]| TenantOverride::Dedicated(ids.iter().map(|id| id.to_string()).collect());

    assert_eq!(
        placer.set_override("vip", dedicated(&["s-1", "nope"])),
        Err(PlacementError::UnknownShard {
            tenant: "vip".into(),
            id: "nope".into()
        })
    );
    assert!(matches!(
        placer.set_override("vip", dedicated(&[])),
        Err(PlacementError::InvalidOverride { tenant, .. }) if tenant == "vip"
    ));
    assert!(matches!(
        placer.set_override("vip", dedicated(&["s-1", "s-2", "s-1"])),
        Err(PlacementError::InvalidOverride { tenant, .. }) if tenant == "vip"
    ));
    assert_eq!(
        placer.set_override("vip", TenantOverride::K(0)),
        Err(PlacementError::KOutOfRange { k: 0, n: 16 })
    );
    assert_eq!(
        placer.set_override("vip", TenantOverride::K(17)),
        Err(PlacementError::KOutOfRange { k: 17, n: 16 })
    );

    // Every rejection left the earlier override in force, and gave no
    // override to a tenant that had none.
    assert_eq!(placer.subset("vip"), before);
    assert_eq!(placer.k_for("vip"), 5);
    assert_eq!(
        placer.set_override("new", TenantOverride::K(0)),
        Err(PlacementError::KOutOfRange { k: 0, n: 16 })
    );
    assert!(!placer.has_override("new"));
}

#[test]
fn weights_need_rendezvous() {
    let key = util::key("weights");
    let weighted = Fleet::new(vec![
        Shard::new("a-0").in_zone("a").with_weight(2.0),
        Shard::new("a-1").in_zone("a"),
        Shard::new("b-0").in_zone("b"),
        Shard::new("b-1").in_zone("b").with_weight(0.5),
    ])
    .unwrap();
    for zone_aware in [false, true] {
        let config = |algorithm| PlacementConfig {
            algorithm,
            k: 2,
            zone_aware,
        };
        assert_eq!(
            Placer::new(weighted.clone(), &key, config(Algorithm::HmacModulo)).unwrap_err(),
            PlacementError::WeightsNeedRendezvous,
            "zone_aware = {zone_aware}"
        );
        assert!(
            Placer::new(weighted.clone(), &key, config(Algorithm::Rendezvous)).is_ok(),
            "zone_aware = {zone_aware}"
        );
    }
}
