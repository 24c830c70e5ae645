//! How zone-aware placement splits `k` members over zones, as a probability
//! distribution over splits, for the closed-form overlap expectation.
//!
//! Zone-aware placement ranks zones per tenant uniformly at random (a keyed
//! hash) and water-fills `k` members over them ([`placement::water_fill`]):
//! every round gives each zone with room the same share, whatever the
//! ranking, until fewer members remain than zones with room; those last
//! members go one each to the first zones with room in the ranking. So a
//! split is a fixed base plus one member in each of a uniformly random
//! `extra`-subset of the zones still open, for any number of zones, with no
//! ranking enumerated. The tests check this against every ranking through
//! `water_fill` itself, so a change to that rule fails here.

/// The distribution of one tenant's split over zones.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Split {
    /// Members every ranking gives each zone.
    pub(crate) base: Vec<usize>,
    /// Zones that may get one more.
    pub(crate) open: Vec<bool>,
    /// How many of the open zones get one more (a uniformly random subset).
    pub(crate) extra: usize,
}

/// The split of `k` members over zones of these sizes; `None` when `k`
/// exceeds the zones' total.
pub(crate) fn split(zone_sizes: &[usize], k: usize) -> Option<Split> {
    if k > zone_sizes.iter().sum::<usize>() {
        return None;
    }
    let mut base = vec![0; zone_sizes.len()];
    let mut remaining = k;
    loop {
        let open: Vec<bool> = base
            .iter()
            .zip(zone_sizes)
            .map(|(count, size)| count < size)
            .collect();
        let open_count = open.iter().filter(|&&o| o).count();
        let share = remaining.checked_div(open_count).unwrap_or(0);
        if share == 0 {
            return Some(Split {
                base,
                open,
                extra: remaining,
            });
        }
        for (zone, count) in base.iter_mut().enumerate() {
            let give = share.min(zone_sizes[zone] - *count);
            *count += give;
            remaining -= give;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::combinatorics::{binomial, for_each_combination};

    /// Every ranking through placement's own `water_fill`: the reference.
    fn by_rankings(zone_sizes: &[usize], k: usize) -> BTreeMap<Vec<usize>, f64> {
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
        let mut counts: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
        let mut order: Vec<usize> = (0..zone_sizes.len()).collect();
        let mut total = 0.0;
        permute(&mut order, 0, &mut |ranking| {
            *counts
                .entry(placement::water_fill(k, ranking, |zone| zone_sizes[zone]))
                .or_default() += 1.0;
            total += 1.0;
        });
        counts.values_mut().for_each(|count| *count /= total);
        counts
    }

    /// The same distribution from a [`Split`].
    fn by_split(split: &Split) -> BTreeMap<Vec<usize>, f64> {
        let open: Vec<u32> = (0..split.open.len() as u32)
            .filter(|&zone| split.open[zone as usize])
            .collect();
        let ways = binomial(open.len() as u64, split.extra as u64) as f64;
        let mut out: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
        for_each_combination(&open, split.extra, |chosen| {
            let mut counts = split.base.clone();
            for &zone in chosen {
                counts[zone as usize] += 1;
            }
            *out.entry(counts).or_default() += 1.0 / ways;
        });
        out
    }

    #[test]
    fn splits_match_every_ranking_through_water_fill() {
        for sizes in [
            vec![8, 8],
            vec![1, 8],
            vec![3, 5, 2],
            vec![1, 1, 4, 2, 6],
            vec![2, 2, 2, 2, 2, 2],
            vec![1, 3, 1, 3, 1, 2, 5],
        ] {
            for k in 1..=sizes.iter().sum::<usize>() {
                let expected = by_rankings(&sizes, k);
                let got = by_split(&split(&sizes, k).unwrap());
                assert_eq!(
                    got.keys().collect::<Vec<_>>(),
                    expected.keys().collect::<Vec<_>>(),
                    "{sizes:?} k = {k}"
                );
                for (split, p) in &expected {
                    assert!((got[split] - p).abs() < 1e-12, "{sizes:?} k = {k}");
                }
            }
        }
        assert_eq!(split(&[1, 2], 4), None);
    }
}
