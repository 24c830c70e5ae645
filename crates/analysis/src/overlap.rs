//! Exact pairwise overlap over all tenant pairs, and its closed form.
//!
//! Recipe 12.2 compares every pair, O(T²). Instead, let `N_m` be the sum over
//! every `m`-set of shards of C(c, 2), where `c` is the number of tenants
//! whose subset contains the set. A pair sharing exactly `j` shards is
//! counted C(j, m) times in `N_m`, so `N_m = Σ_j C(j, m)·P_j`, and the exact
//! pair counts `P_j` follow by inverting that triangle from the top. The cost
//! is the size of the containment tables: O(T·2^k).

use serde::Serialize;

use crate::blast::BlastModel;
use crate::combinatorics::binomial;
use crate::zones::{Split, split};

/// How tenant pairs share shards.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overlap {
    /// Number of tenant pairs.
    pub pairs: u128,
    /// Fraction of pairs sharing at least one shard.
    pub fraction: f64,
    /// `shared_counts[j]`: fraction of pairs sharing exactly `j` shards.
    pub shared_counts: Vec<f64>,
    /// `pair_counts[j]`: number of pairs sharing exactly `j` shards.
    pub pair_counts: Vec<u128>,
}

/// The exact pairwise overlap of a population.
pub fn exact(model: &BlastModel) -> Overlap {
    let tenants = model.tenants();
    let max_k = model.max_k();
    let pairs = binomial(tenants, 2);
    // n_m[m] = Σ over m-sets of C(c, 2).
    let mut n_m = vec![0u128; max_k + 1];
    n_m[0] = pairs;
    for (m, slot) in n_m.iter_mut().enumerate().skip(1) {
        *slot = model.with_containment(m, |table| {
            table
                .rows()
                .iter()
                .map(|row| binomial(row.tenants, 2))
                .sum()
        });
    }
    let mut exact_pairs = vec![0u128; max_k + 1];
    for j in (0..=max_k).rev() {
        let above: u128 = (j + 1..=max_k)
            .map(|m| binomial(m as u64, j as u64) * exact_pairs[m])
            .sum();
        exact_pairs[j] = n_m[j] - above;
    }
    let denominator = pairs.max(1) as f64;
    Overlap {
        pairs,
        fraction: if pairs == 0 {
            0.0
        } else {
            1.0 - exact_pairs[0] as f64 / denominator
        },
        shared_counts: exact_pairs
            .iter()
            .map(|&p| p as f64 / denominator)
            .collect(),
        pair_counts: exact_pairs,
    }
}

/// The hypergeometric probability that a `b`-subset of `n` shares exactly
/// `j` members with a fixed `a`-subset.
fn hypergeometric(n: usize, a: usize, b: usize, j: usize) -> f64 {
    if j > a || j > b || b - j > n - a {
        return 0.0;
    }
    (ln_binomial(a, j) + ln_binomial(n - a, b - j) - ln_binomial(n, b)).exp()
}

fn ln_binomial(n: usize, r: usize) -> f64 {
    (0..r)
        .map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln())
        .sum()
}

/// The expected fraction of pairs sharing exactly `j` shards (j = 0..=k) for
/// two tenants of subset size `k` placed independently and uniformly:
/// hypergeometric for an unzoned fleet, and for zone-aware placement the
/// convolution over zones of per-zone hypergeometrics, averaged over the
/// ways a tenant's members can be split across zones. `zone_sizes` is `[n]`
/// for an unzoned fleet. Returns `None` only when `k` exceeds the fleet.
pub fn expected_shared_counts(zone_sizes: &[usize], k: usize) -> Option<Vec<f64>> {
    expected_shared_counts_mixed(zone_sizes, &[(k, 2)])
}

/// [`expected_shared_counts`] for a population with several subset sizes
/// (per-tenant `k`): `sizes` holds each subset size with its number of
/// tenants, and the expectation is over all pairs of tenants, so a pair of
/// two sizes weighs by how many such pairs there are. Any number of zones.
/// The result has `max k + 1` entries; `None` when a size exceeds the fleet
/// or there are no sizes.
pub fn expected_shared_counts_mixed(
    zone_sizes: &[usize],
    sizes: &[(usize, u64)],
) -> Option<Vec<f64>> {
    let max_k = sizes.iter().map(|&(k, _)| k).max()?;
    let splits: Vec<(Split, u64)> = sizes
        .iter()
        .map(|&(k, tenants)| Some((split(zone_sizes, k)?, tenants)))
        .collect::<Option<_>>()?;
    let mut expected = vec![0.0; max_k + 1];
    let mut total_pairs = 0.0;
    for (i, (a, count_a)) in splits.iter().enumerate() {
        for (b, count_b) in &splits[i..] {
            let same = std::ptr::eq(a, b);
            let pairs = if same {
                binomial(*count_a, 2) as f64
            } else {
                *count_a as f64 * *count_b as f64
            };
            if pairs == 0.0 {
                continue;
            }
            total_pairs += pairs;
            for (j, p) in shared_distribution(zone_sizes, a, b)
                .into_iter()
                .enumerate()
            {
                expected[j] += pairs * p;
            }
        }
    }
    if total_pairs == 0.0 {
        // Fewer than two tenants: the expectation for the largest size.
        let (a, _) = splits
            .iter()
            .find(|(s, _)| s.base.iter().sum::<usize>() + s.extra == max_k)?;
        let only = shared_distribution(zone_sizes, a, a);
        expected[..only.len()].copy_from_slice(&only);
        return Some(expected);
    }
    expected.iter_mut().for_each(|e| *e /= total_pairs);
    Some(expected)
}

/// The distribution of the shared count of two independently placed
/// tenants with splits `a` and `b`: zone by zone, over which open zones
/// each gives its extra members to (a dynamic programme over how many
/// extras each has placed so far, so no split is enumerated).
fn shared_distribution(zone_sizes: &[usize], a: &Split, b: &Split) -> Vec<f64> {
    // dp[x][y][j]: ways (weighted by probability) to have placed x of a's
    // extras and y of b's over the zones so far, sharing j members.
    let k_a = a.base.iter().sum::<usize>() + a.extra;
    let k_b = b.base.iter().sum::<usize>() + b.extra;
    let width = k_a.min(k_b) + 1;
    let mut dp = vec![vec![vec![0.0; width]; b.extra + 1]; a.extra + 1];
    dp[0][0][0] = 1.0;
    for (zone, &size) in zone_sizes.iter().enumerate() {
        let mut next = vec![vec![vec![0.0; width]; b.extra + 1]; a.extra + 1];
        let extra_a: &[usize] = if a.open[zone] { &[0, 1] } else { &[0] };
        let extra_b: &[usize] = if b.open[zone] { &[0, 1] } else { &[0] };
        for x in 0..=a.extra {
            for y in 0..=b.extra {
                for j in 0..width {
                    let weight = dp[x][y][j];
                    if weight == 0.0 {
                        continue;
                    }
                    for &dx in extra_a.iter().filter(|&&dx| x + dx <= a.extra) {
                        for &dy in extra_b.iter().filter(|&&dy| y + dy <= b.extra) {
                            let (in_a, in_b) = (a.base[zone] + dx, b.base[zone] + dy);
                            for shared in 0..=in_a.min(in_b) {
                                if j + shared < width {
                                    next[x + dx][y + dy][j + shared] +=
                                        weight * hypergeometric(size, in_a, in_b, shared);
                                }
                            }
                        }
                    }
                }
            }
        }
        dp = next;
    }
    let open = |s: &Split| s.open.iter().filter(|&&o| o).count() as u64;
    let ways = binomial(open(a), a.extra as u64) as f64 * binomial(open(b), b.extra as u64) as f64;
    dp[a.extra][b.extra].iter().map(|w| w / ways).collect()
}

/// The zone sizes the closed-form expectation takes: one per zone when
/// placement is zone-aware, else the whole fleet as one.
pub fn zone_sizes(fleet: &placement::Fleet, zone_aware: bool) -> Vec<usize> {
    if zone_aware {
        fleet
            .zones()
            .iter()
            .map(|zone| zone.members.len())
            .collect()
    } else {
        vec![fleet.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unzoned_expectation_is_hypergeometric() {
        let expected = expected_shared_counts(&[16], 3).unwrap();
        // P(no overlap) = C(13, 3) / C(16, 3) = 286 / 560.
        assert!((expected[0] - 286.0 / 560.0).abs() < 1e-12);
        assert!((expected.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // P(identical) = 1 / C(16, 3).
        assert!((expected[3] - 1.0 / 560.0).abs() < 1e-12);
    }

    #[test]
    fn mixed_sizes_weigh_pairs_by_how_many_there_are() {
        // 3 tenants of k = 1 and 1 of k = 2 on 4 shards: 3 pairs of k = 1
        // share with probability 1/4, 3 mixed pairs with probability 1/2.
        let expected = expected_shared_counts_mixed(&[4], &[(1, 3), (2, 1)]).unwrap();
        assert_eq!(expected.len(), 3);
        let share_one = (3.0 * 0.25 + 3.0 * 0.5) / 6.0;
        assert!((expected[1] - share_one).abs() < 1e-12, "{expected:?}");
        assert_eq!(expected[2], 0.0);
    }

    #[test]
    fn twelve_zones_have_an_expectation() {
        // One member in each of 2 of 12 zones of 4: each zone is shared
        // when both tenants picked it, P = (2/12)·(2/12)·... summed exactly;
        // the distribution must be a distribution and P(share 0) must match
        // the direct count: pick B's zones, A's avoid them or miss the shard.
        let expected = expected_shared_counts(&[4; 12], 2).unwrap();
        assert!((expected.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Same as unzoned-within-zone reasoning: a given member of B is
        // shared with A when A has a member in that zone (2/12) on the same
        // shard (1/4): 1/24 per member, and members are in distinct zones.
        let p_member = 1.0 / 24.0;
        let p_zero = {
            // P(no match) over B's two zones, A's zones drawn without
            // replacement: enumerate how many of A's 2 zones hit B's 2.
            let hit = |h: usize| match h {
                0 => 45.0 / 66.0,
                1 => 20.0 / 66.0,
                _ => 1.0 / 66.0,
            };
            (0..=2)
                .map(|h| hit(h) * 0.75f64.powi(h as i32))
                .sum::<f64>()
        };
        assert!((expected[0] - p_zero).abs() < 1e-12, "{expected:?}");
        assert!((expected[1] + 2.0 * expected[2] - 2.0 * p_member).abs() < 1e-12);
    }

    #[test]
    fn zoned_expectation_is_a_per_zone_product() {
        // Two zones of 8, k = 2: one member per zone, so P(share 0) = (7/8)².
        let expected = expected_shared_counts(&[8, 8], 2).unwrap();
        assert!((expected[0] - (7.0f64 / 8.0).powi(2)).abs() < 1e-12);
        assert!((expected[2] - (1.0f64 / 8.0).powi(2)).abs() < 1e-12);
    }
}
