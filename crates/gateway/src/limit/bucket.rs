//! The token bucket, as arithmetic: a bucket of `burst` tokens refilled at
//! one token per `per_request`, kept as one number (GCRA's theoretical
//! arrival time), so that a bucket is one atomic word and taking a token
//! is one compare-and-swap.
//!
//! A bucket that holds `tokens` at `now` is the same as a theoretical
//! arrival time `tat` with `tokens × per_request = tolerance − (tat − now)⁺`,
//! where `tolerance = burst × per_request`: full when `tat ≤ now`, empty
//! when `tat − now = tolerance`. Taking a token moves `tat` on by
//! `per_request`; the tests check every decision against a bucket that
//! counts its tokens the obvious way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// A rate: one token per `per_request`, at most `burst` at once, in
/// nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    per_request: u64,
    tolerance: u64,
}

impl Rate {
    /// One token every `per_request` (at least a nanosecond), `burst` (at
    /// least one) at once.
    pub fn new(per_request: Duration, burst: u32) -> Self {
        let per_request = u64::try_from(per_request.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            per_request,
            tolerance: per_request.saturating_mul(u64::from(burst.max(1))),
        }
    }

    /// The time one token takes to come back, in nanoseconds.
    pub fn per_request_nanos(self) -> u64 {
        self.per_request
    }

    /// The bucket's size in time (`burst × per_request`), in nanoseconds.
    pub fn tolerance_nanos(self) -> u64 {
        self.tolerance
    }
}

/// The decision for a bucket at `tat` asked for a token at `now` (both in
/// nanoseconds from the same origin): the new `tat` when a token is taken,
/// or how long until one will be there.
pub fn decide(rate: Rate, tat: u64, now: u64) -> Result<u64, u64> {
    let next = tat.max(now).saturating_add(rate.per_request);
    let ahead = next - now;
    if ahead > rate.tolerance {
        Err(ahead - rate.tolerance)
    } else {
        Ok(next)
    }
}

/// A token bucket shared by every request of one tenant on this replica:
/// one atomic word, no lock.
#[derive(Debug)]
pub struct Bucket {
    /// Times are nanoseconds since this instant.
    origin: Instant,
    /// The theoretical arrival time of the next request.
    tat: AtomicU64,
}

impl Bucket {
    /// A full bucket.
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            tat: AtomicU64::new(0),
        }
    }

    /// Takes a token at `now` if there is one; else how long until there
    /// will be.
    pub fn take(&self, rate: Rate, now: Instant) -> Result<(), Duration> {
        let now = u64::try_from(now.saturating_duration_since(self.origin).as_nanos())
            .unwrap_or(u64::MAX);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let next = decide(rate, tat, now).map_err(Duration::from_nanos)?;
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => tat = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The obvious bucket: it counts its tokens (in nanoseconds of refill,
    /// so that the arithmetic is exact), refills them as time passes, and
    /// spends one per request.
    struct Reference {
        capacity: u64,
        cost: u64,
        tokens: u64,
        last: u64,
    }

    impl Reference {
        fn new(per_request: u64, burst: u32) -> Self {
            let capacity = per_request * u64::from(burst);
            Self {
                capacity,
                cost: per_request,
                tokens: capacity,
                last: 0,
            }
        }

        fn take(&mut self, now: u64) -> Result<(), u64> {
            self.tokens = (self.tokens + (now - self.last)).min(self.capacity);
            self.last = now;
            if self.tokens >= self.cost {
                self.tokens -= self.cost;
                Ok(())
            } else {
                Err(self.cost - self.tokens)
            }
        }
    }

    proptest! {
        #[test]
        fn decisions_and_waits_match_a_bucket_that_counts_its_tokens(
            per_request in 1_u64..5_000_000_000,
            burst in 1_u32..50,
            gaps in proptest::collection::vec(
                prop_oneof![Just(0_u64), 0_u64..1_000, 0_u64..10_000_000_000],
                1..200,
            ),
        ) {
            let rate = Rate::new(Duration::from_nanos(per_request), burst);
            let mut reference = Reference::new(per_request, burst);
            let mut tat = 0;
            let mut now = 0;
            for gap in gaps {
                now += gap;
                let ours = decide(rate, tat, now);
                if let Ok(next) = ours {
                    tat = next;
                }
                prop_assert_eq!(ours.map(|_| ()), reference.take(now), "at {}", now);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_refills_as_paused_time_passes() {
        let bucket = Bucket::new(Instant::now());
        // Ten a second, five at once.
        let rate = Rate::new(Duration::from_millis(100), 5);
        for _ in 0..5 {
            assert_eq!(bucket.take(rate, Instant::now()), Ok(()));
        }
        assert_eq!(
            bucket.take(rate, Instant::now()),
            Err(Duration::from_millis(100))
        );
        tokio::time::advance(Duration::from_millis(60)).await;
        assert_eq!(
            bucket.take(rate, Instant::now()),
            Err(Duration::from_millis(40))
        );
        tokio::time::advance(Duration::from_millis(40)).await;
        assert_eq!(bucket.take(rate, Instant::now()), Ok(()));
        assert!(bucket.take(rate, Instant::now()).is_err());
        // A long quiet spell refills no more than the burst.
        tokio::time::advance(Duration::from_secs(60)).await;
        let taken = (0..20)
            .filter(|_| bucket.take(rate, Instant::now()).is_ok())
            .count();
        assert_eq!(taken, 5);
    }

    #[test]
    fn a_refused_request_takes_nothing() {
        let rate = Rate::new(Duration::from_secs(1), 1);
        let tat = decide(rate, 0, 0).unwrap();
        assert_eq!(decide(rate, tat, 0), Err(1_000_000_000));
        // Asking again and again does not push the next token further away.
        assert_eq!(decide(rate, tat, 500_000_000), Err(500_000_000));
        assert_eq!(decide(rate, tat, 1_000_000_000), Ok(2_000_000_000));
    }
}
