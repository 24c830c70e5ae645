//! Small helpers shared by the test modules: fixed keys, synthetic tenant
//! populations, fleets with readable ids, and index-to-id conversions.

use placement::{Fleet, PlacementKey, Shard, ShardIndex};

/// A fixed key for one test. Each test names its own key so that no two
/// tests accidentally depend on each other's key, and none uses the recipe's
/// public default by accident.
pub fn key(label: &str) -> PlacementKey {
    PlacementKey::from_bytes(format!("placement integration tests: {label}").into_bytes())
}

/// `count` synthetic tenants named `tenant-0`, `tenant-1`, and so on. The
/// population is fixed, so statistics computed over it are deterministic.
pub fn tenants(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("tenant-{i}")).collect()
}

/// `n` unzoned shards with ids `{prefix}0`, `{prefix}1`, and so on. The
/// prefix keeps these ids visibly different from a fleet's positions, so a
/// test that confuses ids with indices fails loudly.
pub fn shards(prefix: &str, n: usize) -> Vec<Shard> {
    (0..n).map(|i| Shard::new(format!("{prefix}{i}"))).collect()
}

/// The ids of the shards at `indices`, in the same order.
pub fn ids(fleet: &Fleet, indices: &[ShardIndex]) -> Vec<String> {
    fleet.ids(indices).map(str::to_owned).collect()
}

/// For every shard index, the position of its zone in `fleet.zones()`.
pub fn zone_positions(fleet: &Fleet) -> Vec<usize> {
    let mut positions = vec![usize::MAX; fleet.len()];
    for (position, zone) in fleet.zones().iter().enumerate() {
        for &member in &zone.members {
            positions[member as usize] = position;
        }
    }
    assert!(
        positions.iter().all(|&position| position != usize::MAX),
        "every shard of a zoned test fleet has a zone"
    );
    positions
}

/// The number of shards in each zone, in `fleet.zones()` order.
pub fn zone_sizes(fleet: &Fleet) -> Vec<usize> {
    fleet
        .zones()
        .iter()
        .map(|zone| zone.members.len())
        .collect()
}
