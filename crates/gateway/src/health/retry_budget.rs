//! The retry budget: retries may be at most a fraction of recent requests
//! plus a small floor per second, so a fleet-wide failure cannot turn into a
//! retry storm that finishes the fleet off.
//!
//! The semantics follow tower's `TpsBudget`: over a sliding window (one
//! bucket per second) each request deposits `ratio` tokens, each retry
//! withdraws one, and `min_per_second × window` retries are always allowed.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::RetryBudgetSettings;

#[derive(Debug)]
struct Window {
    /// Requests and retries per one-second bucket, oldest first.
    buckets: Vec<(u64, u64)>,
    /// The start of the newest bucket.
    newest_start: Instant,
}

/// A shared retry budget.
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    floor: f64,
    window: Mutex<Window>,
}

impl RetryBudget {
    /// A budget with the given settings, starting empty at `now`.
    pub fn new(settings: &RetryBudgetSettings, now: Instant) -> Self {
        let seconds = settings.window.as_secs().max(1) as usize;
        Self {
            ratio: settings.ratio,
            floor: f64::from(settings.min_per_second) * seconds as f64,
            window: Mutex::new(Window {
                buckets: vec![(0, 0); seconds],
                newest_start: now,
            }),
        }
    }

    /// Counts a request.
    pub fn record_request(&self, now: Instant) {
        let mut window = self.window.lock().expect("retry budget lock");
        advance(&mut window, now);
        window.buckets.last_mut().expect("at least one bucket").0 += 1;
    }

    /// Takes one retry from the budget; false when the budget is spent.
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let mut window = self.window.lock().expect("retry budget lock");
        advance(&mut window, now);
        let (requests, retries) = window
            .buckets
            .iter()
            .fold((0, 0), |(q, r), &(bq, br)| (q + bq, r + br));
        let allowed = self.floor + self.ratio * requests as f64;
        if (retries as f64) + 1.0 > allowed {
            return false;
        }
        window.buckets.last_mut().expect("at least one bucket").1 += 1;
        true
    }
}

/// Rotates out buckets older than the window.
fn advance(window: &mut Window, now: Instant) {
    let elapsed = now.saturating_duration_since(window.newest_start).as_secs() as usize;
    if elapsed == 0 {
        return;
    }
    let len = window.buckets.len();
    let shift = elapsed.min(len);
    window.buckets.rotate_left(shift);
    for bucket in &mut window.buckets[len - shift..] {
        *bucket = (0, 0);
    }
    window.newest_start += Duration::from_secs(elapsed as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(ratio: f64, min_per_second: u32) -> RetryBudget {
        let settings = RetryBudgetSettings {
            ratio,
            min_per_second,
            window: Duration::from_secs(10),
        };
        RetryBudget::new(&settings, Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn floor_then_ratio() {
        let budget = budget(0.2, 1);
        // The floor: 1 per second over 10 s.
        for _ in 0..10 {
            assert!(budget.try_withdraw(Instant::now()));
        }
        assert!(!budget.try_withdraw(Instant::now()));
        // 100 requests earn 20 more retries.
        for _ in 0..100 {
            budget.record_request(Instant::now());
        }
        for _ in 0..20 {
            assert!(budget.try_withdraw(Instant::now()));
        }
        assert!(!budget.try_withdraw(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_slides() {
        let budget = budget(0.0, 1);
        for _ in 0..10 {
            assert!(budget.try_withdraw(Instant::now()));
        }
        assert!(!budget.try_withdraw(Instant::now()));
        // After the whole window has passed, the old retries are forgotten.
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(budget.try_withdraw(Instant::now()));
        tokio::time::advance(Duration::from_secs(30)).await;
        for _ in 0..10 {
            assert!(budget.try_withdraw(Instant::now()));
        }
        assert!(!budget.try_withdraw(Instant::now()));
    }
}
