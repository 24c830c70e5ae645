//! A timer for a stream that must keep moving: a response body that waits
//! on its backend, a response that waits on its client.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A timer for a stream that must keep moving: it runs only while the
/// stream waits, and starts afresh after every bit of progress; it can also
/// hold a deadline for the whole stream, which no progress moves (a stream
/// that trickles a byte at a time keeps moving, and still has to end).
/// Nothing is allocated or armed until the stream first has to wait, so a
/// body that came whole with its head costs no timer at all.
#[derive(Debug)]
pub struct IdleTimer {
    limit: Duration,
    deadline: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// The sleep's deadline belongs to the current wait.
    armed: bool,
}

/// Why an [`IdleTimer`] fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Nothing moved for the limit.
    Idle,
    /// The whole stream's deadline passed.
    Deadline,
}

impl IdleTimer {
    /// A timer that fires after `limit` of waiting without progress.
    pub fn new(limit: Duration) -> Self {
        Self::with_deadline(limit, None)
    }

    /// The same, and at `deadline` (if any) whatever the progress.
    pub fn with_deadline(limit: Duration, deadline: Option<Instant>) -> Self {
        Self {
            limit,
            deadline,
            sleep: None,
            armed: false,
        }
    }

    /// The stream moved: the next wait starts a new period.
    pub fn progressed(&mut self) {
        self.armed = false;
    }

    /// The stream has to wait: ready once it has waited `limit` since its
    /// last progress, or at the deadline.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Expired> {
        let limit = self.limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if !self.armed {
            let idle_at = Instant::now() + limit;
            sleep.as_mut().reset(
                self.deadline
                    .map_or(idle_at, |deadline| deadline.min(idle_at)),
            );
            self.armed = true;
        }
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(if Some(sleep.deadline()) == self.deadline {
            Expired::Deadline
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
    async fn a_trickle_keeps_it_from_idling_but_not_from_the_deadline() {
        let deadline = Instant::now() + Duration::from_millis(250);
        let mut timer = IdleTimer::with_deadline(Duration::from_millis(100), Some(deadline));
        for _ in 0..4 {
            assert_eq!(expired(&mut timer).await, None);
            tokio::time::advance(Duration::from_millis(60)).await;
            timer.progressed();
        }
        // 240 ms in: the next wait is cut at 250 ms, not 340.
        assert_eq!(expired(&mut timer).await, None);
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(expired(&mut timer).await, Some(Expired::Deadline));
    }
}
