//! Slow, obviously correct reference implementations, written from the design
//! chapter and the crate's documented contracts rather than from its code, so
//! that every fast path has something independent to be checked against.
//!
//! Nothing here calls the crate. Where a reference needs something only the
//! crate can compute (rendezvous scores are keyed by a subkey the crate keeps
//! to itself), it takes that as an input obtained through the public API, and
//! the reference adds the part that can be checked independently.

use std::collections::BTreeSet;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The design chapter's Recipe 12.1, transcribed statement by statement from
/// its Python `shuffle_shards(tenant_id, n, k, key=key)`.
///
/// Everything the fast version optimises is done the plain way here: a fresh
/// HMAC keyed on every digest, the payload built as one byte vector, the
/// acceptance bound computed in 128-bit arithmetic exactly as Python's
/// unbounded integers do, and an ordered set for the indices already seen.
pub fn recipe_12_1(tenant: &str, n: u32, k: u32, key: &[u8]) -> Vec<u32> {
    assert!(
        1 <= k && k <= n,
        "the recipe raises ValueError unless 1 <= k <= n"
    );
    let n = u128::from(n);
    let k = k as usize;
    // Largest multiple of n below 2^64, so modulo is unbiased.
    let accept_below = ((1u128 << 64) / n) * n;

    let mut chosen: Vec<u32> = Vec::new();
    let mut seen: BTreeSet<u128> = BTreeSet::new();
    let mut counter: u64 = 0;
    while chosen.len() < k {
        // payload = tenant_id.encode() + b"\0" + counter.to_bytes(8, "big")
        let mut payload = tenant.as_bytes().to_vec();
        payload.push(0);
        payload.extend_from_slice(&counter.to_be_bytes());
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
            .expect("HMAC accepts keys of any length");
        mac.update(&payload);
        let digest = mac.finalize().into_bytes();
        counter += 1;
        for offset in (0..32).step_by(8) {
            let bytes: [u8; 8] = digest[offset..offset + 8].try_into().expect("8 bytes");
            let word = u128::from(u64::from_be_bytes(bytes));
            if word >= accept_below {
                continue;
            }
            let idx = word % n;
            if seen.contains(&idx) {
                continue;
            }
            seen.insert(idx);
            chosen.push(u32::try_from(idx).expect("idx < n <= u32::MAX"));
            if chosen.len() >= k {
                break;
            }
        }
    }
    chosen
}

/// How many members each zone gives, the slow way: members are handed out
/// one at a time, each to the zone that has given the fewest so far among
/// the zones with shards left, ties going to the zone the tenant ranks first.
///
/// This is the plainest reading of "spread over zones as evenly as the zones
/// allow, extra members to the tenant's highest-ranked zones". `order` lists
/// zone positions best first; `sizes` gives each zone's shard count.
pub fn allocate_one_at_a_time(k: usize, order: &[usize], sizes: &[usize]) -> Vec<usize> {
    assert!(k <= sizes.iter().sum(), "k fits in the fleet");
    let mut counts = vec![0; sizes.len()];
    for _ in 0..k {
        let mut best: Option<usize> = None;
        for &zone in order {
            if counts[zone] == sizes[zone] {
                continue;
            }
            // Strictly fewer wins, so among equals the earlier-ranked zone
            // (seen first) keeps the member.
            if best.is_none_or(|best| counts[zone] < counts[best]) {
                best = Some(zone);
            }
        }
        counts[best.expect("some zone has a shard left")] += 1;
    }
    counts
}

/// Zone-aware rendezvous assembled from its documented parts.
///
/// - `ranking` is the tenant's full plain-rendezvous ranking of the whole
///   fleet (best first), which zone-aware rendezvous is documented to use
///   inside every zone;
/// - `zone_of` maps a shard index to its zone position, `sizes` gives each
///   zone's shard count;
/// - `order` is the tenant's zone order, best first.
///
/// Each zone gives its allocated number of members, taken from the top of
/// the ranking restricted to that zone; the result lists them round-robin
/// over the zones in the tenant's zone order.
pub fn zone_aware_from_ranking(
    ranking: &[u32],
    zone_of: &[usize],
    sizes: &[usize],
    order: &[usize],
    k: usize,
) -> Vec<u32> {
    let counts = allocate_one_at_a_time(k, order, sizes);
    let per_zone: Vec<Vec<u32>> = (0..sizes.len())
        .map(|zone| {
            ranking
                .iter()
                .copied()
                .filter(|&shard| zone_of[shard as usize] == zone)
                .take(counts[zone])
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    for round in 0..k {
        for &zone in order {
            if let Some(&shard) = per_zone[zone].get(round) {
                out.push(shard);
            }
        }
    }
    assert_eq!(out.len(), k, "the zones give k members between them");
    out
}
