//! A timer for a stream that must keep moving: a response body that waits
//! on its backend, a response that waits on its client.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A timer for a stream that must keep moving: it runs only while the
/// stream waits, and starts afresh after every bit of progress. It can also
/// hold a budget for all the stream's waits together, which progress does
/// not renew: a stream that trickles a byte at a time keeps moving, and
/// still runs out. Time the stream is not waiting (its reader is busy, or
/// slow) never counts, so a slow reader cannot use up a fast writer's
/// budget. Nothing is allocated or armed until the stream first has to
/// wait, so a body that came whole with its head costs no timer at all,
/// and without a budget progress reads no clock.
#[derive(Debug)]
pub struct IdleTimer {
    /// The idle limit, in milliseconds.
    limit_ms: u32,
    /// What is left of the waits' budget, in milliseconds; [`NO_BUDGET`]
    /// for none.
    budget_ms: u32,
    /// How long the current wait was armed for, in milliseconds; 0 while
    /// not waiting. (The wait began that long before the sleep's deadline,
    /// so no clock reading needs keeping.)
    armed_for_ms: u32,
    sleep: Option<Pin<Box<Sleep>>>,
}

/// `budget_ms` when there is no budget.
const NO_BUDGET: u32 = u32::MAX;

/// A duration in whole milliseconds, at least 1 (a zero wait would fire at
/// once), at most what fits: configured limits are at most a day.
fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis())
        .unwrap_or(u32::MAX - 1)
        .clamp(1, u32::MAX - 1)
}

/// Why an [`IdleTimer`] fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Nothing moved for the limit.
    Idle,
    /// The waits together used up the budget.
    Budget,
}

impl IdleTimer {
    /// A timer that fires after `limit` of waiting without progress.
    pub fn new(limit: Duration) -> Self {
        Self::with_budget(limit, None)
    }

    /// The same, and once all waits together reach `budget` (if any).
    pub fn with_budget(limit: Duration, budget: Option<Duration>) -> Self {
        Self {
            limit_ms: millis(limit),
            budget_ms: budget.map_or(NO_BUDGET, millis),
            armed_for_ms: 0,
            sleep: None,
        }
    }

    /// The stream moved: the wait (if there was one) is over, and the next
    /// one starts a new period.
    pub fn progressed(&mut self) {
        if self.armed_for_ms == 0 {
            return;
        }
        if self.budget_ms != NO_BUDGET
            && let Some(sleep) = &self.sleep
        {
            let armed_for = Duration::from_millis(u64::from(self.armed_for_ms));
            let since = sleep.deadline() - armed_for;
            // Whole milliseconds, rounded down: a wait too short to
            // measure is a stream that is moving.
            let waited = u32::try_from(since.elapsed().as_millis())
                .unwrap_or(u32::MAX)
                .min(self.armed_for_ms);
            self.budget_ms = self.budget_ms.saturating_sub(waited);
        }
        self.armed_for_ms = 0;
    }

    /// The stream has to wait: ready once it has waited `limit` since its
    /// last progress, or its waits have used up the budget.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Expired> {
        if self.armed_for_ms == 0 {
            let wait_ms = self.limit_ms.min(self.budget_ms).max(1);
            let deadline = Instant::now() + Duration::from_millis(u64::from(wait_ms));
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed_for_ms = wait_ms;
        }
        let sleep = self.sleep.as_mut().expect("armed above");
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(if self.budget_ms <= self.limit_ms {
            Expired::Budget
        } else {
            Expired::Idle
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    /// Polls the timer once, as a stream that has to wait would.
    async fn expired(timer: &mut IdleTimer) -> Option<Expired> {
        poll_fn(|cx| {
            Poll::Ready(match timer.poll_expired(cx) {
                Poll::Ready(why) => Some(why),
                Poll::Pending => None,
            })
        })
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn fires_only_after_a_whole_limit_without_progress() {
        let mut timer = IdleTimer::new(Duration::from_millis(100));
        assert_eq!(expired(&mut timer).await, None);
        tokio::time::advance(Duration::from_millis(99)).await;
        assert_eq!(expired(&mut timer).await, None);
        // Progress starts the period afresh.
        timer.progressed();
        assert_eq!(expired(&mut timer).await, None);
        tokio::time::advance(Duration::from_millis(99)).await;
        assert_eq!(expired(&mut timer).await, None);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(expired(&mut timer).await, Some(Expired::Idle));
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_keeps_it_from_idling_but_uses_up_its_budget() {
        let mut timer =
            IdleTimer::with_budget(Duration::from_millis(100), Some(Duration::from_millis(250)));
        for _ in 0..4 {
            assert_eq!(expired(&mut timer).await, None);
            tokio::time::advance(Duration::from_millis(60)).await;
            timer.progressed();
        }
        // 240 ms of waiting so far: the next wait is cut after 10 ms.
        assert_eq!(expired(&mut timer).await, None);
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(expired(&mut timer).await, Some(Expired::Budget));
    }

    #[tokio::test(start_paused = true)]
    async fn time_not_spent_waiting_never_counts() {
        let mut timer =
            IdleTimer::with_budget(Duration::from_millis(100), Some(Duration::from_millis(250)));
        for _ in 0..10 {
            // A short wait on the stream...
            assert_eq!(expired(&mut timer).await, None);
            tokio::time::advance(Duration::from_millis(5)).await;
            timer.progressed();
            // ...then a long time the stream is not waiting (a slow reader).
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        // 50 ms of waiting in ten seconds: 200 ms of budget left.
        assert_eq!(expired(&mut timer).await, None);
        tokio::time::advance(Duration::from_millis(99)).await;
        assert_eq!(expired(&mut timer).await, None);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(expired(&mut timer).await, Some(Expired::Idle));
    }
}
