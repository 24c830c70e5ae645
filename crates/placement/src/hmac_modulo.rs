//! Recipe 12.1, bit for bit: HMAC-SHA256 expansion with rejection sampling.
//!
//! For each counter value 0, 1, 2, … the tenant is expanded to
//! `HMAC-SHA256(key, UTF-8(tenant) ‖ 0x00 ‖ counter as u64 big-endian)`. The
//! 32-byte digest is read as four big-endian u64 words; a word at or above the
//! largest multiple of `n` below 2^64 is rejected (so `word mod n` is exactly
//! uniform), the rest become `word mod n`, duplicates are skipped and the
//! order of first selection is kept.
//!
//! This is the recipe's algorithm and so shares its weakness: changing `n`
//! remaps almost every tenant. Use [`Rendezvous`](crate::Rendezvous) when the
//! fleet is expected to change.

use std::collections::HashSet;
use std::fmt;

use hmac::Hmac;
use sha2::Sha256;

use crate::entry::{Filled, entry_points};
use crate::error::PlacementError;
use crate::fleet::ShardIndex;
use crate::key::PlacementKey;
use crate::short_hmac::{self, MAX_SHORT_MESSAGE, PaddedKey};

/// Up to this many members, duplicates are found by scanning the output,
/// which beats hashing for the small `k` that shuffle sharding uses.
const LINEAR_SCAN_MAX_K: usize = 32;

/// Recipe 12.1 bound to one key and one fleet size.
///
/// The keyed HMAC state (the inner and outer pads, one SHA-256 block each) is
/// computed once here, so a placement of a tenant id of up to 46 bytes costs
/// two SHA-256 compressions per digest; longer ids go through the `hmac`
/// crate with the same precomputed key.
///
/// ```
/// use placement::{HmacModulo, PlacementKey};
///
/// let recipe = HmacModulo::new(&PlacementKey::recipe_default(), 10).unwrap();
/// assert_eq!(recipe.place("a", 4).unwrap(), vec![0, 9, 2, 1]);
/// ```
#[derive(Clone)]
pub struct HmacModulo {
    padded: PaddedKey,
    mac: Hmac<Sha256>,
    n: u32,
    /// The largest word accepted: `⌊2^64 / n⌋ · n − 1`.
    max_accepted: u64,
}

impl HmacModulo {
    /// Binds the recipe to a key and `n ≥ 1` shards.
    pub fn new(key: &PlacementKey, n: u32) -> Result<Self, PlacementError> {
        if n == 0 {
            return Err(PlacementError::EmptyFleet);
        }
        // 2^64 mod n, computed without overflowing u64.
        let excess = ((u64::MAX % u64::from(n)) + 1) % u64::from(n);
        Ok(Self {
            padded: key.padded(),
            mac: key.mac(),
            n,
            max_accepted: u64::MAX - excess,
        })
    }

    /// The number of shards chosen from.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The tenant's `k` shard indices in selection order, into `out`
    /// (empty, `k` checked).
    fn fill(&self, tenant: &str, k: usize, out: &mut Vec<ShardIndex>) -> Filled {
        let n = u64::from(self.n);
        // Large k (rare in practice, but allowed up to n) would make the
        // linear duplicate scan quadratic.
        let mut seen: Option<HashSet<ShardIndex>> =
            (k > LINEAR_SCAN_MAX_K).then(|| HashSet::with_capacity(k));
        // The message is `tenant ‖ 0x00 ‖ counter`; for short tenants it is
        // laid out once in a block and only the counter bytes change.
        let message_len = tenant.len() + 9;
        let mut block = [0u8; 64];
        let short = message_len <= MAX_SHORT_MESSAGE;
        if short {
            block[..tenant.len()].copy_from_slice(tenant.as_bytes());
        }
        let mut counter: u64 = 0;
        while out.len() < k {
            let digest = if short {
                block[tenant.len()] = 0;
                block[tenant.len() + 1..message_len].copy_from_slice(&counter.to_be_bytes());
                self.padded.mac_block(&mut block, message_len)
            } else {
                short_hmac::mac_any(
                    &self.mac,
                    &[tenant.as_bytes(), &[0], &counter.to_be_bytes()],
                )
            };
            counter += 1;
            for word in digest.chunks_exact(8) {
                let word = u64::from_be_bytes(word.try_into().expect("8-byte chunk"));
                if word > self.max_accepted {
                    continue;
                }
                let index = (word % n) as ShardIndex;
                let fresh = match seen.as_mut() {
                    Some(seen) => seen.insert(index),
                    None => !out.contains(&index),
                };
                if fresh {
                    out.push(index);
                    if out.len() == k {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

entry_points!(HmacModulo, "in selection order");

impl fmt::Debug for HmacModulo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The HMAC state is derived from the key and must not be printed.
        f.debug_struct("HmacModulo")
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_fleet_is_an_error() {
        assert!(HmacModulo::new(&PlacementKey::recipe_default(), 0).is_err());
    }

    #[test]
    fn rejection_threshold_matches_definition() {
        for n in [1u32, 2, 3, 7, 64, 1000, 1_000_003, u32::MAX] {
            let recipe = HmacModulo::new(&PlacementKey::recipe_default(), n).unwrap();
            let accept_below = ((1u128 << 64) / u128::from(n)) * u128::from(n);
            assert_eq!(u128::from(recipe.max_accepted) + 1, accept_below, "n = {n}");
        }
    }

    #[test]
    fn k_equals_n_is_a_permutation() {
        let recipe = HmacModulo::new(&PlacementKey::recipe_default(), 40).unwrap();
        let mut all = recipe.place("tenant", 40).unwrap();
        all.sort_unstable();
        assert_eq!(all, (0..40).collect::<Vec<_>>());
    }

    #[test]
    fn debug_hides_key_state() {
        let recipe = HmacModulo::new(&PlacementKey::from_bytes(b"secret".to_vec()), 5).unwrap();
        assert_eq!(format!("{recipe:?}"), "HmacModulo { n: 5, .. }");
    }
}
