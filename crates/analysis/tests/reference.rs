//! Slow, obviously correct versions of every figure: Recipe 12.2's loops
//! over tenants and over pairs of tenants.

use std::collections::BTreeSet;

/// Tenants whose whole subset is inside `failed`.
pub fn fully_down(subsets: &[Vec<u32>], failed: &BTreeSet<u32>) -> u64 {
    subsets
        .iter()
        .filter(|subset| subset.iter().all(|shard| failed.contains(shard)))
        .count() as u64
}

/// Tenants with at least one member in `failed`.
pub fn degraded(subsets: &[Vec<u32>], failed: &BTreeSet<u32>) -> u64 {
    subsets
        .iter()
        .filter(|subset| subset.iter().any(|shard| failed.contains(shard)))
        .count() as u64
}

/// Mean share of members lost per degraded tenant.
pub fn capacity_lost(subsets: &[Vec<u32>], failed: &BTreeSet<u32>) -> f64 {
    let hit: Vec<f64> = subsets
        .iter()
        .map(|subset| {
            subset.iter().filter(|s| failed.contains(s)).count() as f64 / subset.len() as f64
        })
        .filter(|&share| share > 0.0)
        .collect();
    if hit.is_empty() {
        0.0
    } else {
        hit.iter().sum::<f64>() / hit.len() as f64
    }
}

/// Number of pairs sharing exactly j shards, j = 0..=max_k.
pub fn pair_counts(subsets: &[Vec<u32>], max_k: usize) -> Vec<u128> {
    let mut counts = vec![0u128; max_k + 1];
    for i in 0..subsets.len() {
        for j in i + 1..subsets.len() {
            let shared = subsets[i].iter().filter(|s| subsets[j].contains(s)).count();
            counts[shared] += 1;
        }
    }
    counts
}

/// Every `size`-subset of `0..n`, lexicographically.
pub fn all_sets(n: u32, size: usize) -> Vec<BTreeSet<u32>> {
    fn go(start: u32, n: u32, size: usize, current: &mut Vec<u32>, out: &mut Vec<BTreeSet<u32>>) {
        if current.len() == size {
            out.push(current.iter().copied().collect());
            return;
        }
        for next in start..n {
            current.push(next);
            go(next + 1, n, size, current, out);
            current.pop();
        }
    }
    let mut out = Vec::new();
    go(0, n, size, &mut Vec::new(), &mut out);
    out
}

/// Per-shard load: each tenant's weight split evenly over its members.
pub fn per_shard_load(n: usize, subsets: &[Vec<u32>], weights: &[f64]) -> Vec<f64> {
    let mut load = vec![0.0; n];
    for (subset, weight) in subsets.iter().zip(weights) {
        for &shard in subset {
            load[shard as usize] += weight / subset.len() as f64;
        }
    }
    load
}

/// Load on every shard after `failed` fails and its tenants spread over
/// their surviving members (tenants left with no member carry nothing).
pub fn load_after_failure(
    n: usize,
    subsets: &[Vec<u32>],
    weights: &[f64],
    failed: u32,
) -> Vec<f64> {
    let mut load = vec![0.0; n];
    for (subset, weight) in subsets.iter().zip(weights) {
        let survivors: Vec<u32> = subset.iter().copied().filter(|&s| s != failed).collect();
        for &shard in &survivors {
            load[shard as usize] += weight / survivors.len() as f64;
        }
    }
    load[failed as usize] = f64::NEG_INFINITY;
    load
}

/// Tenants with every member in the wave, and with any member in it.
pub fn wave_exposure(subsets: &[Vec<u32>], wave_of: &[usize], wave: usize) -> (u64, u64) {
    let fully = subsets
        .iter()
        .filter(|s| s.iter().all(|&m| wave_of[m as usize] == wave))
        .count() as u64;
    let touched = subsets
        .iter()
        .filter(|s| s.iter().any(|&m| wave_of[m as usize] == wave))
        .count() as u64;
    (fully, touched)
}

/// A poison tenant with subset `poison` crashing `crashes` of its members
/// (all when `None`): the worst (fully down, degraded-not-down) over every
/// choice, by fully down then degraded.
pub fn poison(subsets: &[Vec<u32>], poison: &[u32], crashes: Option<usize>) -> (u64, u64) {
    let size = crashes
        .filter(|&a| a > 0)
        .unwrap_or(poison.len())
        .min(poison.len());
    let mut worst = (0, 0);
    let mut first = true;
    for choice in all_sets(poison.len() as u32, size) {
        let crashed: BTreeSet<u32> = choice.iter().map(|&i| poison[i as usize]).collect();
        let down = fully_down(subsets, &crashed);
        let figure = (down, degraded(subsets, &crashed) - down);
        if first || figure > worst {
            worst = figure;
            first = false;
        }
    }
    worst
}
