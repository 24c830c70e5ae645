//! The timers hyper's HTTP/2 server does not keep: the header-read
//! deadline from accept to a connection's first complete request, the idle
//! timeout of a connection with no open stream, and each stream's write
//! timeout while the client's flow-control window keeps its response from
//! moving.
//!
//! hyper runs every stream as a task it hands to the connection's executor
//! and reads nothing of the connection's state out; so the executor here
//! is where streams are counted (the connection's watcher closes it when
//! none has been open for long enough), and where each stream's task is
//! wrapped in its write timer. A response waiting for window is not polled
//! by hyper at all (it waits on the stream's send capacity), so no timer
//! inside the body could fire: the wrapper around the whole stream sees
//! the body's last frame still undelivered and ends the stream, which
//! makes `h2` reset it (`CANCEL`) and drops the response with its backend
//! connection and in-flight places.
//!
//! A request body's timer (`limits.client_body_timeout_ms`) is not here:
//! it is the body's own ([`crate::upstream::body::ClientBody::timed`]),
//! since a body may be read in a task other than its stream's (an HTTP/2
//! shard's connection) and only its reader knows when it waits.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::route::response::{BoxError, ResponseBody};
use crate::upstream::idle::IdleTimer;

/// A connection's streams as its watcher sees them. Counted with atomics
/// and signalled only when the count leaves or reaches zero, so a busy
/// connection's streams never wake the watcher: a channel that notified
/// it on every stream cost about a tenth of HTTP/2 requests/s.
#[derive(Debug, Default)]
struct Open {
    /// Streams whose request hyper has handed over and whose response has
    /// not ended.
    streams: AtomicUsize,
    /// Streams ever opened: a stream that opened and closed while the
    /// watcher slept still counts as activity.
    opened: AtomicU64,
    /// Signalled when `streams` goes from 0 to 1 or from 1 to 0 (a permit
    /// is kept when the watcher is not waiting, so none is lost).
    changed: Notify,
}

/// The executor of one HTTP/2 connection: spawns each stream's task as
/// tokio would, counted and under the client write timeout.
#[derive(Clone)]
pub(crate) struct Executor {
    open: Arc<Open>,
    /// `limits.client_write_timeout_ms`, as the connection was accepted.
    write_timeout: Duration,
    /// `shuffle_stream_timeouts_total{side="client"}`.
    expired: Counter,
}

/// What closes an HTTP/2 connection that no stream is using.
pub(crate) struct Watcher {
    open: Arc<Open>,
    /// No request's HEADERS complete by then: the connection is closed
    /// (`limits.header_read_timeout_ms` from accept, preface, SETTINGS and
    /// a TLS handshake included).
    header_deadline: Instant,
    /// `limits.http2_idle_timeout_ms`.
    idle: Duration,
}

/// Why a [`Watcher`] gave up on its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quiet {
    /// No request arrived within the header-read timeout.
    NoRequest,
    /// No stream was open for the idle timeout.
    Idle,
}

/// A connection's executor and its watcher.
pub(crate) fn timers(
    header_deadline: Instant,
    idle: Duration,
    write_timeout: Duration,
    expired: Counter,
) -> (Executor, Watcher) {
    let open = Arc::new(Open::default());
    (
        Executor {
            open: Arc::clone(&open),
            write_timeout,
            expired,
        },
        Watcher {
            open,
            header_deadline,
            idle,
        },
    )
}

impl Watcher {
    /// Completes once the connection should close: no request by the
    /// header deadline, or no stream open for the idle timeout. PINGs,
    /// SETTINGS and WINDOW_UPDATEs move neither. (A permit left from an
    /// earlier change only makes it look again.)
    pub(crate) async fn quiet(&mut self) -> Quiet {
        let open = &*self.open;
        while open.opened.load(Ordering::Acquire) == 0 {
            tokio::select! {
                () = open.changed.notified() => {}
                () = tokio::time::sleep_until(self.header_deadline) => {
                    if open.opened.load(Ordering::Acquire) == 0 {
                        return Quiet::NoRequest;
                    }
                }
            }
        }
        loop {
            while open.streams.load(Ordering::Acquire) != 0 {
                open.changed.notified().await;
            }
            let opened = open.opened.load(Ordering::Acquire);
            tokio::select! {
                () = tokio::time::sleep(self.idle) => {
                    if open.streams.load(Ordering::Acquire) == 0
                        && open.opened.load(Ordering::Acquire) == opened
                    {
                        return Quiet::Idle;
                    }
                }
                () = open.changed.notified() => {}
            }
        }
    }
}

/// A stream's place in its connection's count, given back when its task
/// ends however it ends.
struct Counted(Arc<Open>);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.changed.notify_one();
        }
    }
}

/// Where a stream's response body tells the task around the stream how
/// far it got: written and read in the same task, so relaxed.
#[derive(Debug, Default)]
struct Sending {
    /// The body's last frame went to hyper and the body has not been
    /// polled since: hyper is waiting to send it (window or buffer full).
    handed: AtomicBool,
    /// Data frames handed so far.
    frames: AtomicU64,
}

tokio::task_local! {
    /// The stream whose task is running: how the service finds its
    /// stream's [`Sending`].
    static STREAM: Arc<Sending>;
}

impl<F> hyper::rt::Executor<F> for Executor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        self.open.opened.fetch_add(1, Ordering::AcqRel);
        if self.open.streams.fetch_add(1, Ordering::AcqRel) == 0 {
            self.open.changed.notify_one();
        }
        let counted = Counted(Arc::clone(&self.open));
        let sending = Arc::new(Sending::default());
        let watched = Arc::clone(&sending);
        let mut timer = IdleTimer::new(self.write_timeout);
        let expired = self.expired.clone();
        tokio::spawn(STREAM.scope(sending, async move {
            let _counted = counted;
            tokio::pin!(stream);
            let mut seen = 0;
            poll_fn(|cx| {
                if stream.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
                let handed = watched.handed.load(Ordering::Relaxed);
                let frames = watched.frames.load(Ordering::Relaxed);
                if !handed || frames != seen {
                    // The response moved, or waits on its backend (whose
                    // own timer is in the body): not on the client.
                    seen = frames;
                    timer.progressed();
                }
                if !handed {
                    return Poll::Pending;
                }
                if timer.poll_expired(cx).is_pending() {
                    return Poll::Pending;
                }
                expired.inc();
                tracing::debug!(
                    "an HTTP/2 stream could not send for limits.client_write_timeout_ms; resetting it"
                );
                // Dropping the stream's task resets the stream and drops
                // the response, with its backend connection and places.
                Poll::Ready(())
            })
            .await;
        }));
    }
}

/// A response body on an HTTP/2 stream, telling the stream's task when it
/// waits on the client.
pub(crate) struct WatchedBody {
    body: ResponseBody,
    sending: Option<Arc<Sending>>,
}

impl WatchedBody {
    /// `body`, watched by the stream whose task this runs in (outside one,
    /// as a plain body).
    pub(crate) fn new(body: ResponseBody) -> Self {
        Self {
            body,
            sending: STREAM.try_with(Arc::clone).ok(),
        }
    }
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(sending) = &this.sending {
            sending.handed.store(false, Ordering::Relaxed);
        }
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        if let (Some(sending), Poll::Ready(Some(Ok(frame)))) = (&this.sending, &polled)
            && frame.data_ref().is_some_and(|data| !data.is_empty())
        {
            sending.frames.fetch_add(1, Ordering::Relaxed);
            sending.handed.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
