//! Keyed 128-bit hashes of labels and a fast scoring mix, shared by the
//! rendezvous and zone-aware algorithms.
//!
//! Everything secret flows through one HMAC-SHA256 per tenant; the per-shard
//! work is a 64-bit mix of that HMAC output with a per-shard seed (itself an
//! HMAC of the shard id, computed once). Without the key neither input of the
//! mix can be computed, so neither can a subset.

use std::fmt;

use hmac::Hmac;
use sha2::Sha256;

use crate::key::PlacementKey;
use crate::short_hmac::{self, MAX_SHORT_MESSAGE, PaddedKey};

/// An HMAC-SHA256 keyed for one purpose, cloned per message.
#[derive(Clone)]
pub(crate) struct KeyedHasher {
    padded: PaddedKey,
    mac: Hmac<Sha256>,
}

impl KeyedHasher {
    /// A hasher under a subkey derived from `key` for `purpose`.
    pub(crate) fn new(key: &PlacementKey, purpose: &[u8]) -> Self {
        let subkey = key.derive(purpose);
        Self {
            padded: subkey.padded(),
            mac: subkey.mac(),
        }
    }

    /// The first 128 bits of `HMAC(subkey, domain ‖ 0x00 ‖ label)` as two
    /// big-endian words. The domain byte string keeps tenants, shards and
    /// zones from ever hashing to the same message.
    pub(crate) fn hash(&self, domain: &[u8], label: &[u8]) -> TenantHash {
        let len = domain.len() + 1 + label.len();
        let digest = if len <= MAX_SHORT_MESSAGE {
            let mut block = [0u8; 64];
            block[..domain.len()].copy_from_slice(domain);
            block[domain.len() + 1..len].copy_from_slice(label);
            self.padded.mac_block(&mut block, len)
        } else {
            short_hmac::mac_any(&self.mac, &[domain, &[0], label])
        };
        let word =
            |i: usize| u64::from_be_bytes(digest[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        TenantHash([word(0), word(1)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_labels_hash_like_plain_hmac() {
        let key = PlacementKey::from_bytes(b"k".to_vec());
        let hasher = KeyedHasher::new(&key, b"test");
        for len in [0, 10, 48, 49, 200] {
            let label = vec![b'x'; len];
            let full = short_hmac::mac_any(&key.derive(b"test").mac(), &[b"tenant", &[0], &label]);
            let expected = [
                u64::from_be_bytes(full[..8].try_into().unwrap()),
                u64::from_be_bytes(full[8..16].try_into().unwrap()),
            ];
            assert_eq!(
                hasher.hash(b"tenant", &label).0,
                expected,
                "label of {len} bytes"
            );
        }
    }
}

impl fmt::Debug for KeyedHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyedHasher(<redacted>)")
    }
}

/// A keyed hash of a tenant (or of a shard or zone label).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct TenantHash(pub(crate) [u64; 2]);

/// The score of one candidate (shard or zone) for one tenant: MurmurHash3's
/// 64-bit finalizer over the tenant's hash xor the candidate's seed. The
/// finalizer is a bijection with full avalanche, so for a uniformly random
/// tenant hash every candidate's score is uniform and the ranking of
/// candidates is a uniformly random permutation.
#[inline]
pub(crate) fn score(tenant: TenantHash, seed: u64) -> u64 {
    let mut x = tenant.0[0] ^ seed;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// The weighted rendezvous score `w / −ln(u)`, with `u ∈ (0, 1)` taken from
/// the top 53 bits of an unweighted score. A shard of weight `w` then wins a
/// tenant with probability proportional to `w`. The result is positive and
/// finite, so its IEEE bits order like the number and can be compared as u64.
#[inline]
pub(crate) fn weighted_score(raw: u64, weight: f64) -> u64 {
    let unit = ((raw >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    (weight / -unit.ln()).to_bits()
}
