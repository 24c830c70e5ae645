//! Connections to one shard: a pool of HTTP/1.1 keep-alive connections,
//! each driven by hyper's client connection, that an attempt borrows for
//! one exchange and gives back when the response has been read to its end.
//!
//! Each shard owns its pool, so a lookup is a pop from a short list: no
//! shared map keyed by scheme and authority, and no task per request to
//! watch a connection become reusable. A connection goes back only after its
//! response ended (one abandoned mid-body cannot carry another exchange and
//! is closed), idle connections older than [`IDLE_TIMEOUT`] are closed
//! instead of reused, and at most [`MAX_IDLE`] are kept per shard.
//!
//! Each connection runs as a task of its own, which hyper's dispatcher
//! wakes only when it has work. Driving it from the request's task instead
//! (no hand-off between tasks) was tried and measured: it polled the
//! dispatcher about twice as often and cost 12 % more instructions per
//! request under callgrind, so it was not kept.
//!
//! A request a connection never took (it closed between the pool and the
//! send) comes back whole, so it can go out on another connection whatever
//! its method; what happens after a request may have been sent is for the
//! attempt to judge.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::body::AttemptBody;

/// How long an idle connection may wait to be reused before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle connections kept per shard; more are closed as they come back.
pub const MAX_IDLE: usize = 512;

/// Why a request could not be exchanged.
#[derive(Debug)]
pub enum SendError {
    /// No connection could be made (refused, unreachable, timed out, or the
    /// shard's URL names no address): nothing was sent.
    Connect,
    /// The connection closed before it took the request: nothing was sent,
    /// and here is the request back.
    NotSent(Box<Request<AttemptBody>>),
    /// The exchange failed after the request may have been sent.
    Exchange(hyper::Error),
}

/// An idle connection and since when.
struct Idle {
    sender: SendRequest<AttemptBody>,
    since: Instant,
}

/// One shard's connections.
pub struct Upstream {
    /// `host:port` to connect to; `None` when the URL has no host.
    address: Option<String>,
    idle: Mutex<Vec<Idle>>,
    idle_timeout: Duration,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("address", &self.address)
            .field("idle", &self.idle_count())
            .finish()
    }
}

impl Upstream {
    /// The connections to the shard at `url` (`http://host[:port]/...`).
    pub fn new(url: &Uri) -> Self {
        Self::with_idle_timeout(url, IDLE_TIMEOUT)
    }

    /// The same, with idle connections closed after `idle_timeout`.
    pub fn with_idle_timeout(url: &Uri, idle_timeout: Duration) -> Self {
        let address = url.host().map(|host| {
            let port = url.port_u16().unwrap_or(80);
            format!("{host}:{port}")
        });
        Self {
            address,
            idle: Mutex::new(Vec::new()),
            idle_timeout,
        }
    }

    /// Idle connections kept now.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().expect("idle connections").len()
    }

    /// Sends `request` (origin-form URI, `Host` set) on an idle connection,
    /// or a new one made within `connect_timeout`. The response body gives
    /// the connection back when it has been read to its end.
    pub async fn send(
        self: &Arc<Self>,
        mut request: Request<AttemptBody>,
        connect_timeout: Duration,
    ) -> Result<Response<UpstreamBody>, SendError> {
        // An idle connection that closed while the request was handed over
        // returns it untouched; the next one (or a new one) gets it.
        while let Some(mut sender) = self.checkout().await {
            match sender.try_send_request(request).await {
                Ok(response) => return Ok(self.wrap(response, sender)),
                Err(mut error) => match error.take_message() {
                    Some(returned) => request = returned,
                    None => return Err(SendError::Exchange(error.into_error())),
                },
            }
        }
        let mut sender = self.connect(connect_timeout).await?;
        match sender.try_send_request(request).await {
            Ok(response) => Ok(self.wrap(response, sender)),
            Err(mut error) => match error.take_message() {
                Some(returned) => Err(SendError::NotSent(Box::new(returned))),
                None => Err(SendError::Exchange(error.into_error())),
            },
        }
    }

    /// An idle connection ready for a request, if there is one.
    async fn checkout(&self) -> Option<SendRequest<AttemptBody>> {
        loop {
            let idle = {
                let mut idle = self.idle.lock().expect("idle connections");
                let now = Instant::now();
                // The oldest sit at the bottom: close those past their time.
                let expired = idle
                    .iter()
                    .take_while(|entry| {
                        now.saturating_duration_since(entry.since) >= self.idle_timeout
                    })
                    .count();
                idle.drain(..expired);
                idle.pop()
            }?;
            let mut sender = idle.sender;
            if sender.is_closed() {
                continue;
            }
            // A connection comes back as soon as its response body ends,
            // which can be a moment before hyper has marked it ready for the
            // next request.
            if sender.is_ready() || sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    /// A new connection.
    async fn connect(
        &self,
        connect_timeout: Duration,
    ) -> Result<SendRequest<AttemptBody>, SendError> {
        let address = self.address.as_deref().ok_or(SendError::Connect)?;
        let stream = tokio::time::timeout(connect_timeout, TcpStream::connect(address))
            .await
            .map_err(|_elapsed| SendError::Connect)?
            .map_err(|_refused| SendError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|_| SendError::Connect)?;
        tokio::spawn(async move {
            // The connection ends when the backend closes it, a response is
            // abandoned, or the pool drops it; none of that is an error to
            // report here (the attempt that was using it sees its own).
            if let Err(error) = connection.await {
                tracing::debug!(%error, "backend connection closed");
            }
        });
        Ok(sender)
    }

    fn wrap(
        self: &Arc<Self>,
        response: Response<Incoming>,
        sender: SendRequest<AttemptBody>,
    ) -> Response<UpstreamBody> {
        response.map(|inner| UpstreamBody {
            inner,
            ended: false,
            checkin: Some((Arc::clone(self), sender)),
        })
    }

    /// Takes a connection back after its exchange.
    fn checkin(&self, sender: SendRequest<AttemptBody>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().expect("idle connections");
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }
}

/// A backend response body that gives its connection back to the pool
/// when it is dropped after its end.
pub struct UpstreamBody {
    inner: Incoming,
    ended: bool,
    checkin: Option<(Arc<Upstream>, SendRequest<AttemptBody>)>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if let Some((upstream, sender)) = self.checkin.take()
            && (self.ended || self.inner.is_end_stream())
        {
            upstream.checkin(sender);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.ended = true,
            // A broken body leaves the connection in no state to reuse.
            Poll::Ready(Some(Err(_))) => self.checkin = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
