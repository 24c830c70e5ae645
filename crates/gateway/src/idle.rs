//! A timer for a stream that must keep moving: a response body that waits
//! on its backend, a response that waits on its client.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A timer for a stream that must keep moving: it runs only while the
/// stream waits, and starts afresh after every bit of progress. Nothing is
/// allocated or armed until the stream first has to wait, so a body that
/// came whole with its head costs no timer at all.
#[derive(Debug)]
pub struct IdleTimer {
    limit: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    /// The sleep's deadline belongs to the current wait.
    armed: bool,
}

impl IdleTimer {
    /// A timer that fires after `limit` of waiting without progress.
    pub fn new(limit: Duration) -> Self {
        Self {
            limit,
            sleep: None,
            armed: false,
        }
    }

    /// The stream moved: the next wait starts a new period.
    pub fn progressed(&mut self) {
        self.armed = false;
    }

    /// The stream has to wait: ready once it has waited `limit` since its
    /// last progress.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let limit = self.limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if !self.armed {
            sleep.as_mut().reset(Instant::now() + limit);
            self.armed = true;
        }
        sleep.as_mut().poll(cx)
    }
}
