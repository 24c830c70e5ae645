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
    fn splitmix64_matches_the_reference_stream() {
        // The first outputs of Vigna's reference `splitmix64.c` for seed
        // 1234567: the generator is SplitMix64 by definition, not merely
        // something seeded and stable.
        let mut random = SplitMix64::new(1_234_567);
        let stream: Vec<u64> = (0..5).map(|_| random.next_u64()).collect();
        assert_eq!(
            stream,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }

    #[test]
    fn sampled_sets_for_seed_zero_are_frozen() {
        // Known answers: the first sets a sampled sweep of 3 failures over
        // 100 shards draws with the default seed, in the order Floyd's
        // algorithm emits them. A change to the generator, to `below` or to
        // `sample_set` changes every sampled report, so it must fail here
        // first and be made on purpose.
        let mut random = SplitMix64::new(0);
        let sets: Vec<Vec<ShardIndex>> = (0..5)
            .map(|_| {
                let mut set = Vec::new();
                random.sample_set(100, 3, &mut set);
                set
            })
            .collect();
        assert_eq!(
            sets,
            [
                [86, 42, 2],
                [95, 10, 32],
                [17, 76, 24],
                [93, 39, 76],
                [51, 54, 70]
            ]
        );
        let mut random = SplitMix64::new(7);
        let draws: Vec<u64> = (0..8).map(|_| random.below(10)).collect();
        assert_eq!(draws, [3, 0, 9, 5, 4, 2, 4, 3]);
    }

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
