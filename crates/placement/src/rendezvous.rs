//! Rendezvous (highest-random-weight) placement: the top `k` shards by a
//! keyed score of (tenant, shard id).
//!
//! A shard's score for a tenant depends only on the tenant, the key and that
//! shard's id, never on the rest of the fleet. So adding a shard can only
//! displace one member (the lowest-ranked one) in favour of the new shard,
//! removing a shard outside a subset changes nothing, and the top `k + 1`
//! always contains the top `k`. These are the properties that make a fleet
//! change cost the fewest possible moves.

use std::fmt;

use crate::entry::{Filled, entry_points};
use crate::fleet::{Fleet, ShardIndex};
use crate::key::PlacementKey;
use crate::keyed_hash::{self, KeyedHasher, TenantHash};

/// Up to this `k`, the running top-k is kept in a small sorted buffer;
/// above it, all scores are collected and partially sorted.
const INSERTION_MAX_K: usize = 16;

/// Domain labels for the keyed hashes, fixed forever: changing one remaps
/// every tenant (the golden-file test will say so).
const PURPOSE: &[u8] = b"rendezvous/v1";
const TENANT_DOMAIN: &[u8] = b"tenant";
const SHARD_DOMAIN: &[u8] = b"shard";

/// Rendezvous placement bound to a key and a fleet.
///
/// ```
/// use placement::{Fleet, PlacementKey, Rendezvous};
///
/// let key = PlacementKey::from_bytes(b"example key".to_vec());
/// let fleet = Fleet::uniform(64).unwrap();
/// let hrw = Rendezvous::new(&key, &fleet);
/// let three = hrw.place("tenant-1", 3).unwrap();
/// let four = hrw.place("tenant-1", 4).unwrap();
/// assert_eq!(&four[..3], &three[..]); // sizes nest
/// ```
#[derive(Clone)]
pub struct Rendezvous {
    hasher: KeyedHasher,
    /// Per-shard seed: a keyed hash of the shard id.
    seeds: Vec<u64>,
    /// Per-shard weights, or `None` when all shards weigh the same (then the
    /// cheaper unweighted score gives the same ranking).
    weights: Option<Vec<f64>>,
}

impl Rendezvous {
    /// Binds rendezvous placement to a key and a fleet.
    pub fn new(key: &PlacementKey, fleet: &Fleet) -> Self {
        let hasher = KeyedHasher::new(key, PURPOSE);
        let seeds = fleet
            .shards()
            .iter()
            .map(|shard| hasher.hash(SHARD_DOMAIN, shard.id.as_bytes()).0[0])
            .collect();
        let weights = fleet
            .is_weighted()
            .then(|| fleet.shards().iter().map(|shard| shard.weight).collect());
        Self {
            hasher,
            seeds,
            weights,
        }
    }

    /// The number of shards chosen from.
    pub fn n(&self) -> u32 {
        self.seeds.len() as u32
    }

    /// The tenant's `k` shard indices, highest score first, into `out`
    /// (empty, `k` checked).
    fn fill(&self, tenant: &str, k: usize, out: &mut Vec<ShardIndex>) -> Filled {
        let hash = self.tenant_hash(tenant);
        self.top_k_into(hash, 0..self.n(), k, out);
        Ok(())
    }

    /// The keyed hash all of a tenant's shard scores derive from.
    pub(crate) fn tenant_hash(&self, tenant: &str) -> TenantHash {
        self.hasher.hash(TENANT_DOMAIN, tenant.as_bytes())
    }

    /// The hasher, so zone-aware placement can rank zones under the same
    /// subkey without another key derivation.
    pub(crate) fn hasher(&self) -> &KeyedHasher {
        &self.hasher
    }

    /// The ranking key of one shard: its score in the high half, its seed in
    /// the low half as a tie-break that does not depend on fleet order.
    #[inline]
    fn rank(&self, hash: TenantHash, index: ShardIndex) -> u128 {
        let seed = self.seeds[index as usize];
        let raw = keyed_hash::score(hash, seed);
        let score = match &self.weights {
            None => raw,
            Some(weights) => keyed_hash::weighted_score(raw, weights[index as usize]),
        };
        (u128::from(score) << 64) | u128::from(seed)
    }

    /// Appends the best `k` of `candidates` to `out`, best first. The caller
    /// guarantees `k ≤ candidates.len()`.
    pub(crate) fn top_k_into(
        &self,
        hash: TenantHash,
        candidates: impl Iterator<Item = ShardIndex>,
        k: usize,
        out: &mut Vec<ShardIndex>,
    ) {
        if k == 0 {
            return;
        }
        if k <= INSERTION_MAX_K {
            // Sorted best-first; only a candidate that beats the current
            // k-th best pays for an insertion.
            let mut best: Vec<(u128, ShardIndex)> = Vec::with_capacity(k + 1);
            for index in candidates {
                let rank = self.rank(hash, index);
                if best.len() == k && rank <= best[k - 1].0 {
                    continue;
                }
                let at = best.partition_point(|&(other, _)| other > rank);
                best.insert(at, (rank, index));
                best.truncate(k);
            }
            out.extend(best.iter().map(|&(_, index)| index));
        } else {
            let mut all: Vec<(u128, ShardIndex)> = candidates
                .map(|index| (self.rank(hash, index), index))
                .collect();
            let by_rank_descending = |a: &(u128, ShardIndex), b: &(u128, ShardIndex)| b.0.cmp(&a.0);
            if k < all.len() {
                all.select_nth_unstable_by(k - 1, by_rank_descending);
                all.truncate(k);
            }
            all.sort_unstable_by(by_rank_descending);
            out.extend(all.iter().map(|&(_, index)| index));
        }
    }
}

entry_points!(Rendezvous, "highest score first");

impl fmt::Debug for Rendezvous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rendezvous")
            .field("n", &self.n())
            .field("weighted", &self.weights.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Shard;

    fn key() -> PlacementKey {
        PlacementKey::from_bytes(b"unit-test key".to_vec())
    }

    #[test]
    fn insertion_and_selection_paths_agree() {
        let fleet = Fleet::uniform(200).unwrap();
        let hrw = Rendezvous::new(&key(), &fleet);
        for tenant in ["a", "b", "tenant-99"] {
            let big = hrw.place(tenant, 40).unwrap();
            let small = hrw.place(tenant, INSERTION_MAX_K as u32).unwrap();
            assert_eq!(&big[..INSERTION_MAX_K], &small[..]);
        }
    }

    #[test]
    fn heavier_shard_wins_more_tenants() {
        let fleet = Fleet::new(vec![
            Shard::new("light"),
            Shard::new("heavy").with_weight(3.0),
        ])
        .unwrap();
        let hrw = Rendezvous::new(&key(), &fleet);
        let heavy_wins = (0..20_000)
            .filter(|i| hrw.place(&format!("t{i}"), 1).unwrap()[0] == 1)
            .count();
        // Expected 15,000 (3 / 4); the binomial standard deviation is ~61.
        assert!((14_600..=15_400).contains(&heavy_wins), "{heavy_wins}");
    }
}
