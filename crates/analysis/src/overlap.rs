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
use crate::zones::allocations;

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
/// two tenants placed independently and uniformly: hypergeometric for an
/// unzoned fleet, and for zone-aware placement the convolution over zones of
/// per-zone hypergeometrics, averaged over the ways a tenant's members can be
/// split across zones. `zone_sizes` is `[n]` for an unzoned fleet. Returns
/// `None` when there are too many zones to enumerate the splits exactly.
pub fn expected_shared_counts(zone_sizes: &[usize], k: usize) -> Option<Vec<f64>> {
    let splits = allocations(zone_sizes, k)?;
    let mut expected = vec![0.0; k + 1];
    for (split_a, p_a) in &splits {
        for (split_b, p_b) in &splits {
            // Distribution of the total shared count: convolve the zones.
            let mut total = vec![1.0];
            for (zone, &size) in zone_sizes.iter().enumerate() {
                let (a, b) = (split_a[zone], split_b[zone]);
                let zone_dist: Vec<f64> = (0..=a.min(b))
                    .map(|j| hypergeometric(size, a, b, j))
                    .collect();
                let mut next = vec![0.0; total.len() + zone_dist.len() - 1];
                for (i, &p) in total.iter().enumerate() {
                    for (j, &q) in zone_dist.iter().enumerate() {
                        next[i + j] += p * q;
                    }
                }
                total = next;
            }
            for (j, p) in total.into_iter().enumerate() {
                expected[j] += p_a * p_b * p;
            }
        }
    }
    Some(expected)
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
    fn zoned_expectation_is_a_per_zone_product() {
        // Two zones of 8, k = 2: one member per zone, so P(share 0) = (7/8)².
        let expected = expected_shared_counts(&[8, 8], 2).unwrap();
        assert!((expected[0] - (7.0f64 / 8.0).powi(2)).abs() < 1e-12);
        assert!((expected[2] - (1.0f64 / 8.0).powi(2)).abs() < 1e-12);
    }
}
