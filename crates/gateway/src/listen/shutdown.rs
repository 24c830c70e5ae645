//! The signal that tells client connections the gateway is shutting down.
//!
//! A connection waits on it every time it goes idle between requests, so
//! waiting must be cheap: an atomic load and a lock-free waker registration
//! per wait (a `tokio::sync::watch` wait queues and dequeues itself under
//! a lock each time, which cost more than the rest of reading a request
//! head). Connections register once, when they open.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;
use slab::Slab;

#[derive(Default)]
struct Shared {
    stopping: AtomicBool,
    /// Each open connection's waker.
    connections: Mutex<Slab<Arc<AtomicWaker>>>,
}

/// The gateway's side: says when to stop.
#[derive(Clone, Default)]
pub struct Shutdown {
    shared: Arc<Shared>,
}

/// One connection's side: learns when to stop.
pub struct ShutdownWatch {
    shared: Arc<Shared>,
    waker: Arc<AtomicWaker>,
    key: usize,
}

impl Shutdown {
    /// A signal not yet given.
    pub fn new() -> Self {
        Self::default()
    }

    /// A watch for one connection.
    pub fn watch(&self) -> ShutdownWatch {
        let waker = Arc::new(AtomicWaker::new());
        let key = self
            .shared
            .connections
            .lock()
            .expect("shutdown registry")
            .insert(Arc::clone(&waker));
        ShutdownWatch {
            shared: Arc::clone(&self.shared),
            waker,
            key,
        }
    }

    /// Gives the signal: every watch now reports stopping, and every
    /// connection waiting on one is woken.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        for (_, waker) in self
            .shared
            .connections
            .lock()
            .expect("shutdown registry")
            .iter()
        {
            waker.wake();
        }
    }
}

impl ShutdownWatch {
    /// Whether the gateway is shutting down.
    pub fn is_stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::SeqCst)
    }

    /// Completes once the gateway is shutting down.
    pub async fn stopping(&self) {
        poll_fn(|cx| self.poll_stopping(cx)).await;
    }

    fn poll_stopping(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_stopping() {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        // The signal may have been given between the check and the
        // registration, and then its wake went to the previous waker.
        if self.is_stopping() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for ShutdownWatch {
    fn drop(&mut self) {
        if let Ok(mut connections) = self.shared.connections.lock() {
            connections.remove(self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_watches_wake_at_the_signal_and_later_ones_see_it_at_once() {
        let shutdown = Shutdown::new();
        let watch = shutdown.watch();
        assert!(!watch.is_stopping());
        let waiting = tokio::spawn(async move { watch.stopping().await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        shutdown.stop();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the waiting watch was woken")
            .unwrap();
        let late = shutdown.watch();
        assert!(late.is_stopping());
        late.stopping().await;
    }

    #[test]
    fn closed_connections_leave_the_registry() {
        let shutdown = Shutdown::new();
        let watches: Vec<_> = (0..3).map(|_| shutdown.watch()).collect();
        assert_eq!(shutdown.shared.connections.lock().unwrap().len(), 3);
        drop(watches);
        assert!(shutdown.shared.connections.lock().unwrap().is_empty());
    }
}
