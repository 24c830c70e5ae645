//! A seeded, version-stable random source for sampled sweeps.
//!
//! A sampled sweep must give the same answer for the same seed forever, so
//! that a standing report does not drift between releases; general-purpose
//! generators do not promise a stable stream across versions. SplitMix64 is
//! tiny, fast, and fixed by its definition.

use placement::ShardIndex;

/// Steele, Lea and Flood's SplitMix64.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..bound` (Lemire's multiply-shift with
    /// rejection, so it is exactly uniform).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        loop {
            let product = u128::from(self.next_u64()) * u128::from(bound);
            let low = product as u64;
            if low >= bound.wrapping_neg() % bound {
                return (product >> 64) as u64;
            }
        }
    }

    /// Appends a uniformly random `size`-subset of `0..n` (Floyd's algorithm).
    pub(crate) fn sample_set(&mut self, n: usize, size: usize, out: &mut Vec<ShardIndex>) {
        let start = out.len();
        for j in n - size..n {
            let candidate = self.below(j as u64 + 1) as ShardIndex;
            let value = if out[start..].contains(&candidate) {
                j as ShardIndex
            } else {
                candidate
            };
            out.push(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_distinct_in_range_and_reproducible() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..1000 {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            a.sample_set(10, 4, &mut x);
            b.sample_set(10, 4, &mut y);
            assert_eq!(x, y);
            let mut sorted = x.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 4);
            assert!(x.iter().all(|&i| i < 10));
        }
    }
}
