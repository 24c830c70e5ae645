//! Counting and enumerating sets of shards: binomial coefficients and
//! `m`-subsets of a set.
//!
//! These sit below the tables, the blast model and the overlap, which all
//! count over subsets; keeping them here lets those modules import in one
//! direction (tables → combinatorics, blast → tables, overlap → blast).

use placement::ShardIndex;

/// C(n, r), saturating at `u128::MAX`.
pub fn binomial(n: u64, r: u64) -> u128 {
    if r > n {
        return 0;
    }
    let r = r.min(n - r);
    let mut result: u128 = 1;
    for i in 0..r {
        // result · (n − i) / (i + 1) is exact at every step.
        match result.checked_mul(u128::from(n - i)) {
            Some(product) => result = product / u128::from(i + 1),
            None => return u128::MAX,
        }
    }
    result
}

/// Calls `visit` with every `m`-element subset of `items` (in lexicographic
/// order of positions), reusing one buffer.
pub(crate) fn for_each_combination(
    items: &[ShardIndex],
    m: usize,
    mut visit: impl FnMut(&[ShardIndex]),
) {
    let len = items.len();
    if m > len {
        return;
    }
    let mut positions: Vec<usize> = (0..m).collect();
    let mut chosen: Vec<ShardIndex> = positions.iter().map(|&p| items[p]).collect();
    loop {
        visit(&chosen);
        // Advance the rightmost position that can still move.
        let Some(i) = (0..m).rev().find(|&i| positions[i] < len - m + i) else {
            return;
        };
        positions[i] += 1;
        for j in i + 1..m {
            positions[j] = positions[j - 1] + 1;
        }
        for j in i..m {
            chosen[j] = items[positions[j]];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomials() {
        assert_eq!(binomial(16, 2), 120);
        assert_eq!(binomial(40, 3), 9880);
        assert_eq!(binomial(3, 5), 0);
        assert_eq!(binomial(64, 0), 1);
        assert_eq!(binomial(1000, 500), u128::MAX);
    }

    #[test]
    fn combinations_are_all_visited_in_order() {
        let mut seen = Vec::new();
        for_each_combination(&[1, 4, 7, 9], 2, |c| seen.push(c.to_vec()));
        assert_eq!(
            seen,
            vec![
                vec![1, 4],
                vec![1, 7],
                vec![1, 9],
                vec![4, 7],
                vec![4, 9],
                vec![7, 9]
            ]
        );
        let mut count = 0;
        for_each_combination(&[1, 2, 3], 0, |c| {
            assert!(c.is_empty());
            count += 1;
        });
        assert_eq!(count, 1);
        for_each_combination(&[1], 2, |_| panic!("no 2-subsets of one item"));
    }
}
