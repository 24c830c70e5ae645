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
    limit: Duration,
    /// What is left of the waits' budget, if there is one.
    budget: Option<Duration>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// When the current wait began, while it lasts.
    waiting_since: Option<Instant>,
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
            limit,
            budget,
            sleep: None,
            waiting_since: None,
        }
    }

    /// The stream moved: the wait (if there was one) is over, and the next
    /// one starts a new period.
    pub fn progressed(&mut self) {
        if let Some(since) = self.waiting_since.take()
            && let Some(budget) = &mut self.budget
        {
            *budget = budget.saturating_sub(since.elapsed());
        }
    }

    /// The stream has to wait: ready once it has waited `limit` since its
    /// last progress, or its waits have used up the budget.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Expired> {
        if self.waiting_since.is_none() {
            let now = Instant::now();
            self.waiting_since = Some(now);
            let wait = self
                .budget
                .map_or(self.limit, |budget| budget.min(self.limit));
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(now + wait),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(now + wait))),
            }
        }
        let sleep = self.sleep.as_mut().expect("armed above");
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(match self.budget {
            Some(budget) if budget <= self.limit => Expired::Budget,
            _ => Expired::Idle,
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
