//! How zone-aware placement splits `k` members over zones, as a probability
//! distribution over splits, for the closed-form overlap expectation.
//!
//! Zone-aware placement ranks zones per tenant uniformly at random (a keyed
//! hash) and water-fills `k` members over them. Enumerating every ranking
//! through placement's own [`placement::water_fill`] gives the exact
//! distribution, and a change to that rule changes this expectation with it.

use std::collections::BTreeMap;

/// Enumerating rankings costs `zones!`; beyond this many zones the
/// expectation is not computed.
const MAX_ZONES: usize = 8;

/// Each distinct split of `k` members over the zones, with its probability.
/// `None` when there are too many zones to enumerate.
pub(crate) fn allocations(zone_sizes: &[usize], k: usize) -> Option<Vec<(Vec<usize>, f64)>> {
    if zone_sizes.len() > MAX_ZONES || k > zone_sizes.iter().sum::<usize>() {
        return None;
    }
    let mut counts: BTreeMap<Vec<usize>, u64> = BTreeMap::new();
    let mut order: Vec<usize> = (0..zone_sizes.len()).collect();
    let mut total = 0u64;
    permute(&mut order, 0, &mut |ranking| {
        *counts
            .entry(placement::water_fill(k, ranking, |zone| zone_sizes[zone]))
            .or_default() += 1;
        total += 1;
    });
    Some(
        counts
            .into_iter()
            .map(|(split, count)| (split, count as f64 / total as f64))
            .collect(),
    )
}

fn permute(items: &mut Vec<usize>, from: usize, visit: &mut impl FnMut(&[usize])) {
    if from == items.len() {
        visit(items);
        return;
    }
    for i in from..items.len() {
        items.swap(from, i);
        permute(items, from + 1, visit);
        items.swap(from, i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_of_three_over_two_zones() {
        let splits = allocations(&[8, 8], 3).unwrap();
        assert_eq!(splits, vec![(vec![1, 2], 0.5), (vec![2, 1], 0.5)]);
    }

    #[test]
    fn small_zone_spills() {
        let splits = allocations(&[1, 8], 3).unwrap();
        assert_eq!(splits, vec![(vec![1, 2], 1.0)]);
    }
}
