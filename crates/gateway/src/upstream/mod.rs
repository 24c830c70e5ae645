//! Connections to one shard: a pool of HTTP/1.1 keep-alive connections
//! that an attempt borrows for one exchange and that come back when the
//! response has been read to its end.
//!
//! Each shard owns its pool, so a lookup is a pop from a short list. A
//! connection goes back only after its response ended and its request was
//! sent whole (one abandoned mid-body cannot carry another exchange and is
//! closed), idle connections older than [`IDLE_TIMEOUT`] are closed instead
//! of reused, and at most [`MAX_IDLE`] are kept per shard.
//!
//! The exchange runs in the task of the client's request: the request head
//! is written by [`crate::protocol::wire`] straight to the socket, the response head
//! read back from it, and the response body read from the socket as the
//! client takes it. An earlier version drove each connection with hyper's
//! client, as a task of its own reached through a channel; that hand-off
//! (and hyper's client codec) was about a quarter of the gateway's
//! instructions per request, measured with callgrind.
//!
//! A request a connection never took (the first write failed, so the
//! backend received nothing, and the body was not touched) can go out on
//! another connection whatever its method. A pooled connection the backend closed
//! while it sat idle, or sent anything on (bytes beyond a response's end
//! read with it, or arriving any time before the connection is taken
//! again), is never reused: the kernel is asked, with one non-blocking
//! peek (for TLS, a read of its records: [`transport`]), just before the
//! request would be written, since bytes there would
//! be read as that request's answer, and the request may be another
//! tenant's. Bytes a shard sends after the next request went out cannot be
//! told from its answer (HTTP/1.1 has no request ids), so a shard caught
//! sending bytes nobody asked for gets no connection reused for
//! [`NO_REUSE_AFTER_UNASKED_BYTES`]. What happens after a request may have
//! been sent is for the attempt to judge.
//!
//! A connection is plain TCP or TLS ([`transport`]); both are pooled alike.
//! An HTTP/2 shard (`h2c`, `h2`) is one multiplexed connection (or a few)
//! instead, a stream per exchange ([`h2`]); which of the two a shard
//! speaks is one flag looked at per request.
//! A reload that changes how a shard is reached (its `server_name`, or
//! `[upstream.tls]`) gives its pool a new connector, and connections the
//! old one made are closed instead of reused.

// What an exchange carries and how long it may wait.
pub mod body;
pub(crate) mod exchange;
pub(crate) mod h2;
// HTTP/1.1's reads and writes on a connection, and how a response body is
// read (the body's type is below, with the pool that makes it).
mod http1_io;
pub(crate) mod idle;
mod response_body;
pub(crate) mod transport;
pub(crate) mod upgrade;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::BytesMut;
use http::{Response, Uri};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::protocol::wire::{self, ChunkedDecoder, Fields, RequestHead, ResponseFraming};
use crate::upstream::body::AttemptBody;
use crate::upstream::http1_io::{
    READ_SIZE, Written, read_head, refused_session, request_framing, upload, write_head,
};
use crate::upstream::idle::IdleTimer;
use crate::upstream::transport::{Connector, Transport, WhileIdle};

pub use exchange::{ExchangeError, SendError, Timeouts};

/// How long an idle connection may wait to be reused before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle connections kept per shard; more are closed as they come back.
pub const MAX_IDLE: usize = 512;

/// How long a shard caught sending bytes nobody asked for (after a
/// response's end, or on an idle connection) gets none of its connections
/// reused: each exchange has a connection of its own, so bytes it sends
/// late cannot be read as another request's answer.
pub const NO_REUSE_AFTER_UNASKED_BYTES: Duration = Duration::from_secs(60);

/// A buffered request body at most this large is copied behind its head,
/// so that both leave in one write.
const COALESCE_BODY: usize = 16 * 1024;

/// One open connection and its buffers, kept with it across exchanges.
struct Connection {
    stream: Transport,
    /// The pool's generation when it was made: once a reload changes how
    /// the shard is reached, a connection made the old way is not reused.
    generation: u64,
    /// What has been read and not yet handed on.
    read: BytesMut,
    /// The request head (and a small body) being written.
    write: Vec<u8>,
}

impl Connection {
    fn new(stream: Transport, generation: u64) -> Self {
        Self {
            stream,
            generation,
            read: BytesMut::with_capacity(READ_SIZE),
            write: Vec::with_capacity(1024),
        }
    }

    /// What the backend did with the connection while it sat idle.
    fn while_idle(&mut self) -> WhileIdle {
        self.stream.while_idle()
    }
}

/// An idle connection and since when.
struct Idle {
    connection: Connection,
    since: Instant,
}

/// One shard's connections.
pub struct Upstream {
    /// How to open a connection (what carries it: TCP or TLS). A reload
    /// that changes how the shard is reached (its `server_name`, or
    /// `[upstream.tls]`) replaces it, and the connections it made stop
    /// being reused.
    connector: ArcSwap<Connector>,
    /// Bumped (under the `idle` lock) whenever `connector` is replaced: a
    /// counter compared on every checkout and checkin is cheaper than
    /// loading the connector, which only a new connection needs.
    generation: AtomicU64,
    idle: Mutex<Vec<Idle>>,
    idle_timeout: Duration,
    /// The connector speaks HTTP/2: exchanges go to [`Upstream::h2`].
    http2: AtomicBool,
    /// The HTTP/2 connections, for a shard that speaks it.
    h2: h2::Pool,
    /// Until when (milliseconds on [`clock_ms`]'s clock; 0 for never) no
    /// connection is reused: the shard was caught sending bytes nobody
    /// asked for. Read on every checkin, as one atomic load.
    no_reuse_until: AtomicU64,
}

/// Milliseconds since the first call, at least 1, on tokio's clock (which
/// tests may pause).
fn clock_ms(now: Instant) -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(now.saturating_duration_since(base).as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("address", &self.connector.load().address())
            .field("idle", &self.idle_count())
            .field("http2", &self.h2)
            .finish()
    }
}

/// How a request that did not get a response ended.
enum Failed {
    /// Not a byte left, and the body was not touched.
    NotSent,
    /// The shard's TLS refused the session with an alert instead of an
    /// answer: on a new connection, the handshake failed (see
    /// [`refused_session`]). A streamed body may have been taken; whether
    /// the request can go elsewhere is the request path's to judge, as
    /// after any connect failure.
    Refused(ExchangeError),
    /// The request may have been (partly) sent.
    Exchange(ExchangeError),
}

impl Upstream {
    /// The connections to the shard at `url` (`http://host[:port]/...`).
    /// An `https://` shard needs the configuration's TLS settings, which a
    /// configured shard's pool is built with; here it is unreachable.
    pub fn new(url: &Uri) -> Self {
        Self::with_idle_timeout(url, IDLE_TIMEOUT)
    }

    /// The same, with idle connections closed after `idle_timeout`.
    pub fn with_idle_timeout(url: &Uri, idle_timeout: Duration) -> Self {
        Self::with_connector(Connector::for_url(url, None, None), idle_timeout)
    }

    /// The connections `connector` makes, closed after `idle_timeout` idle.
    pub(crate) fn with_connector(connector: Connector, idle_timeout: Duration) -> Self {
        Self {
            http2: AtomicBool::new(connector.http2()),
            connector: ArcSwap::from_pointee(connector),
            generation: AtomicU64::new(0),
            idle: Mutex::new(Vec::new()),
            idle_timeout,
            h2: h2::Pool::default(),
            no_reuse_until: AtomicU64::new(0),
        }
    }

    /// From now on, new connections are made by `connector`, unless it
    /// reaches the shard as the current one does; when it does not, the
    /// idle connections are closed, and those in use are closed instead of
    /// pooled when their exchange ends.
    pub(crate) fn reach(&self, connector: Connector) {
        if self.connector.load().same_as(&connector) {
            // Keeping the old one keeps its pool and its TLS sessions.
            return;
        }
        let http2 = connector.http2();
        let mut idle = self.idle.lock().expect("idle connections");
        self.connector.store(Arc::new(connector));
        self.http2.store(http2, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Release);
        idle.clear();
        drop(idle);
        self.h2.clear();
    }

    /// Whether the shard is spoken to in HTTP/2.
    pub(crate) fn speaks_http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
    }

    /// Whether `connection` was made the way the shard is reached now.
    fn current(&self, connection: &Connection) -> bool {
        connection.generation == self.generation.load(Ordering::Relaxed)
    }

    /// Idle connections kept now.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().expect("idle connections").len()
    }

    /// Sends `request` with `body` on an idle connection, or a new one made
    /// within `timeouts.connect`, and returns the response once its head has
    /// arrived. `now` is a recent clock reading (the caller has one), which
    /// decides which idle connections have expired. The response body gives
    /// the connection back when it has been read to its end, and holds the
    /// response's header fields ([`UpstreamBody::fields`]); the response's
    /// header map is empty.
    pub async fn send(
        self: &Arc<Self>,
        request: RequestHead<'_>,
        mut body: AttemptBody,
        timeouts: Timeouts,
        now: Instant,
    ) -> Result<Response<UpstreamBody>, SendError> {
        if self.speaks_http2() {
            // Boxed, so that an HTTP/1.1 exchange's future does not grow
            // by it.
            return Box::pin(self.send_http2(request, body, timeouts, now)).await;
        }
        // A pooled connection that turns out closed when the head is
        // written took nothing; the next one (or a new one) gets the request.
        while let Some(connection) = self.checkout(now) {
            match self
                .exchange(connection, &request, &mut body, timeouts)
                .await
            {
                Ok(response) => return Ok(response),
                Err(Failed::NotSent) => {}
                // A session that was accepted once is judged like any
                // other failed exchange.
                Err(Failed::Refused(error) | Failed::Exchange(error)) => {
                    return Err(SendError::Exchange(error));
                }
            }
        }
        let deadline = now.checked_add(timeouts.connect).unwrap_or(now);
        let connection = self.connect(deadline).await?;
        match self
            .exchange(connection, &request, &mut body, timeouts)
            .await
        {
            Ok(response) => Ok(response),
            Err(Failed::NotSent) => Err(SendError::NotSent),
            Err(Failed::Refused(_)) => Err(SendError::Connect),
            Err(Failed::Exchange(error)) => Err(SendError::Exchange(error)),
        }
    }

    /// An idle connection the backend has not closed and that has not
    /// been idle too long at `now`, if there is one.
    fn checkout(&self, now: Instant) -> Option<Connection> {
        loop {
            let Idle { mut connection, .. } = {
                let mut idle = self.idle.lock().expect("idle connections");
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
            if !self.current(&connection) {
                continue;
            }
            match connection.while_idle() {
                WhileIdle::Quiet => return Some(connection),
                WhileIdle::Closed => {}
                WhileIdle::Unasked => {
                    drop(connection);
                    self.caught_sending_unasked(now);
                    return None;
                }
            }
        }
    }

    /// The shard sent bytes nobody asked for: what it sends late could be
    /// read as another request's answer (another tenant's, maybe), and a
    /// check before reuse cannot see bytes that come after the request
    /// went out. So for [`NO_REUSE_AFTER_UNASKED_BYTES`] none of its
    /// connections is reused, and those pooled now are closed.
    fn caught_sending_unasked(&self, now: Instant) {
        let until = clock_ms(now).saturating_add(NO_REUSE_AFTER_UNASKED_BYTES.as_millis() as u64);
        let before = self.no_reuse_until.fetch_max(until, Ordering::Relaxed);
        self.idle.lock().expect("idle connections").clear();
        if before < clock_ms(now) {
            tracing::warn!(
                address = self.connector.load().address(),
                "a shard sent bytes nobody asked for on a kept-alive connection; none of its connections is reused for {} s",
                NO_REUSE_AFTER_UNASKED_BYTES.as_secs()
            );
        }
    }

    /// Whether connections may be reused at `now` (see
    /// [`Upstream::caught_sending_unasked`]).
    #[inline]
    fn reuse_barred(&self, now: Instant) -> bool {
        let until = self.no_reuse_until.load(Ordering::Relaxed);
        until != 0 && clock_ms(now) < until
    }

    /// A new connection, made by `deadline`.
    async fn connect(&self, deadline: Instant) -> Result<Connection, SendError> {
        // The generation first: a connector replaced after it was read
        // makes this connection look old, never the other way round.
        let generation = self.generation.load(Ordering::Acquire);
        let connector = self.connector.load_full();
        let stream = connector
            .connect(deadline)
            .await
            .ok_or(SendError::Connect)?;
        Ok(Connection::new(stream, generation))
    }

    /// One exchange on `connection`: the request out, the response head in.
    async fn exchange(
        self: &Arc<Self>,
        mut connection: Connection,
        request: &RequestHead<'_>,
        body: &mut AttemptBody,
        timeouts: Timeouts,
    ) -> Result<Response<UpstreamBody>, Failed> {
        let (framing, add_length) = request_framing(request, body);
        let Connection {
            stream,
            read,
            write,
            ..
        } = &mut connection;
        write.clear();
        wire::encode_request_head(write, request, framing, add_length);
        let mut body_after_head = None;
        if let AttemptBody::Buffered(Some(bytes)) = &*body {
            if bytes.len() <= COALESCE_BODY {
                write.extend_from_slice(bytes);
            } else {
                body_after_head = Some(bytes.clone());
            }
        }
        match write_head(stream, write).await {
            Ok(()) => {}
            Err(Written::Nothing) => return Err(Failed::NotSent),
            Err(Written::Some(error)) => return Err(Failed::Exchange(ExchangeError::Io(error))),
        }

        let streamed = matches!(body, AttemptBody::Waiting(_) | AttemptBody::Streaming(..));
        let (head, sent_whole) = if streamed {
            // The backend may answer before the body is all there (a 413,
            // say): its answer is taken, and the rest of the body is not
            // sent, which leaves the connection unfit for reuse.
            // Written and read at once; only streamed uploads pay for the
            // split's lock.
            let (mut reader, mut writer) = tokio::io::split(&mut *stream);
            let upload = upload(&mut writer, body, framing, request.inbound, write);
            let answer = read_head(&mut reader, read, request.method, wire::parse_response_head);
            tokio::pin!(upload, answer);
            tokio::select! {
                biased;
                uploaded = &mut upload => {
                    uploaded.map_err(Failed::Exchange)?;
                    (answer.await, true)
                }
                head = &mut answer => (head, false),
            }
        } else {
            if let Some(bytes) = body_after_head {
                stream
                    .write_all(&bytes)
                    .await
                    .map_err(|error| Failed::Exchange(ExchangeError::Io(error)))?;
            }
            let head = read_head(stream, read, request.method, wire::parse_response_head);
            (head.await, true)
        };
        let head = match head {
            Ok(head) => head,
            Err(error) if refused_session(&error) => {
                if let ExchangeError::Io(io_error) = &error {
                    self.connector.load().tls_failed(io_error);
                }
                return Err(Failed::Refused(error));
            }
            Err(error) => return Err(Failed::Exchange(error)),
        };
        Ok(self.response(connection, head, sent_whole, timeouts))
    }

    /// The response whose head has been read off `connection`: its body is
    /// read from the connection as the client takes it, and the connection
    /// goes back to the pool after it if the backend keeps it alive and the
    /// request went out whole (`sent_whole`).
    #[inline]
    fn response(
        self: &Arc<Self>,
        connection: Connection,
        head: wire::ResponseHead,
        sent_whole: bool,
        timeouts: Timeouts,
    ) -> Response<UpstreamBody> {
        let state = match head.framing {
            ResponseFraming::Length(length) => BodyState::Length(length),
            ResponseFraming::Chunked => BodyState::Chunked(ChunkedDecoder::default()),
            ResponseFraming::UntilClose => BodyState::UntilClose,
        };
        let mut body = UpstreamBody {
            connection: Some(connection),
            state,
            reusable: head.keep_alive && sent_whole,
            upstream: Arc::clone(self),
            fields: head.fields,
            idle: IdleTimer::with_budget(timeouts.body_idle, timeouts.body_total),
        };
        if matches!(body.state, BodyState::Length(0)) {
            body.finish();
        }
        let mut response = Response::new(body);
        *response.status_mut() = head.status;
        *response.version_mut() = head.version;
        response
    }

    /// Takes a connection back after its exchange.
    fn checkin(&self, connection: Connection) {
        let now = Instant::now();
        #[cfg(test)]
        tests::BEFORE_CHECKIN_LOCK.with_borrow_mut(|hook| hook.take().map(|hook| hook()));
        let mut idle = self.idle.lock().expect("idle connections");
        // Compared under the lock, so a connection cannot slip in after
        // `reach` or `caught_sending_unasked` has emptied the pool (the bar
        // is set before that lock is taken).
        if idle.len() < MAX_IDLE && self.current(&connection) && !self.reuse_barred(now) {
            idle.push(Idle {
                connection,
                since: now,
            });
        }
    }
}

impl Upstream {
    /// [`Upstream::send`] to an HTTP/2 shard: `request` with `body` on a
    /// stream of a pooled connection, or of a new one made within
    /// `timeouts.connect` of `now`.
    async fn send_http2(
        self: &Arc<Self>,
        request: RequestHead<'_>,
        body: AttemptBody,
        timeouts: Timeouts,
        now: Instant,
    ) -> Result<Response<UpstreamBody>, SendError> {
        let connector = self.connector.load_full();
        if !connector.http2() {
            // A reload changed the shard's protocol under this attempt:
            // nothing was sent, and the next try goes the new way.
            return Err(SendError::NotSent);
        }
        let deadline = now.checked_add(timeouts.connect).unwrap_or(now);
        let (head, stream) = self.h2.send(&connector, &request, body, deadline).await?;
        // The head's header map becomes fields, as an HTTP/1.1 shard's head
        // would be, and the body holds the stream until it ends.
        let body = UpstreamBody {
            connection: None,
            state: BodyState::Http2(Box::new(stream)),
            reusable: false,
            upstream: Arc::clone(self),
            fields: Fields::from_header_map(&head.headers),
            idle: IdleTimer::with_budget(timeouts.body_idle, timeouts.body_total),
        };
        let mut response = Response::new(body);
        *response.status_mut() = head.status;
        // What the client is answered in is its own connection's business.
        *response.version_mut() = http::Version::HTTP_11;
        Ok(response)
    }
}

/// Where a response body stands.
#[derive(Debug)]
enum BodyState {
    /// This many bytes to go.
    Length(u64),
    /// Chunked, decoded as it arrives.
    Chunked(ChunkedDecoder),
    /// Until the backend closes the connection.
    UntilClose,
    /// An HTTP/2 stream's (the connection is not the body's own).
    Http2(Box<h2::IncomingStream>),
    /// Read to its end (or failed).
    Done,
}

/// A backend response body, read from the connection as the client takes
/// it; the connection goes back to the pool as soon as the body has been
/// read to its end, if it may carry another exchange.
pub struct UpstreamBody {
    connection: Option<Connection>,
    state: BodyState,
    /// Keep-alive allowed by the backend and the request sent whole.
    reusable: bool,
    upstream: Arc<Upstream>,
    /// The response's header fields, as the backend sent them. (The
    /// response's header map is left empty: a map is built only where one
    /// is needed, see [`Fields`].)
    fields: Fields,
    /// Fires when the backend has sent nothing for too long.
    idle: IdleTimer,
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    thread_local! {
        /// Run (once) by [`Upstream::checkin`] on this thread just before
        /// it takes the idle lock: whatever another thread may do there.
        pub(super) static BEFORE_CHECKIN_LOCK: RefCell<Option<Box<dyn FnOnce()>>> =
            const { RefCell::new(None) };
    }

    /// A pooled connection to a listener that accepts and says nothing.
    async fn idle_connection() -> (Connection, tokio::net::TcpListener) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        (Connection::new(Transport::Tcp(stream), 0), listener)
    }

    /// Review of issue 28: `checkin` looked at the bar before it took the
    /// idle lock, so a shard caught sending bytes nobody asked for between
    /// the two (on another thread: its pool emptied, the bar set) still
    /// got this connection pooled, and reused by the next request. The
    /// interleaving is made here, on one thread, by a hook at that point.
    #[tokio::test]
    async fn a_connection_coming_back_while_its_shard_is_caught_is_not_pooled() {
        let (connection, _listener) = idle_connection().await;
        let upstream = Arc::new(Upstream::new(&"http://127.0.0.1:1".parse().unwrap()));
        let caught = Arc::clone(&upstream);
        BEFORE_CHECKIN_LOCK.with_borrow_mut(|hook| {
            *hook = Some(Box::new(move || {
                caught.caught_sending_unasked(Instant::now())
            }));
        });
        upstream.checkin(connection);
        assert!(upstream.reuse_barred(Instant::now()));
        assert_eq!(
            upstream.idle_count(),
            0,
            "pooled after its shard was caught"
        );

        // Without the bar, the same checkin pools it.
        let (connection, _listener) = idle_connection().await;
        let fresh = Upstream::new(&"http://127.0.0.1:1".parse().unwrap());
        fresh.checkin(connection);
        assert_eq!(fresh.idle_count(), 1);
    }
}
