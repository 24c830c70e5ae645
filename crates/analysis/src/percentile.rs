//! The nearest-rank percentile, the one definition every figure uses: the
//! analyser's sweep percentiles and the drills' latency percentiles.
//!
//! Nearest rank returns a value that was observed (never an interpolation),
//! so a p99 of fully-down tenants is a count some failure set really caused.

/// The nearest-rank `q` quantile (`0 < q ≤ 1`) of values sorted ascending:
/// the smallest value with at least a share `q` of the values at or below
/// it. `None` for no values.
///
/// ```
/// let latencies = [12, 15, 15, 20, 90];
/// assert_eq!(analysis::nearest_rank(&latencies, 0.5), Some(15));
/// assert_eq!(analysis::nearest_rank(&latencies, 0.99), Some(90));
/// assert_eq!(analysis::nearest_rank::<u64>(&[], 0.5), None);
/// ```
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&values, 0.5), Some(50));
        assert_eq!(nearest_rank(&values, 0.99), Some(99));
        assert_eq!(nearest_rank(&values, 1.0), Some(100));
        assert_eq!(nearest_rank(&values, 0.0), Some(1));
        assert_eq!(nearest_rank(&[7], 0.99), Some(7));
        assert_eq!(nearest_rank::<u64>(&[], 0.5), None);
    }
}
