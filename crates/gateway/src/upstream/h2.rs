//! HTTP/2 to a shard (`protocol = "h2c"` or `"h2"`): one multiplexed
//! connection in the shard's pool (a few, when the streams the shard
//! allows on one run out), a stream per attempt.
//!
//! Unlike an HTTP/1.1 exchange, which runs in the client's request task,
//! an HTTP/2 connection is shared by many requests at once, so it is
//! driven by a task of its own (hyper's `client::conn::http2` over the
//! same [`Transport`] as HTTP/1.1). A connection counts as made only once
//! the shard's own preface (a SETTINGS frame) has arrived: a peer that
//! answers with anything else (an HTTP/1.1 server, garbage) is a connect
//! failure, as a failed TLS handshake is.
//!
//! What "nothing was sent" means here, for the request path's failover
//! rules ([`SendError`]): a connection that could not be made; a stream
//! the shard refused (`RST_STREAM` with `REFUSED_STREAM`, which RFC 9113
//! section 8.7 says was not processed); and a stream above the last stream
//! id of a graceful `GOAWAY` (`NO_ERROR`: streams at or below it run to
//! their end, so a stream that fails with it was never taken up). A
//! `GOAWAY` with an error code fails every stream alike, processed or not,
//! so those may have been sent. A connection that ends or says `GOAWAY`
//! takes no more streams; the next attempt makes a new one.
//!
//! Trailers pass both ways through the trust boundary's trailer rules;
//! a client's `te: trailers` (which gRPC servers insist on) is the one
//! `te` HTTP/2 allows, and is passed on.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Uri, Version, header};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::protocol::wire::{Fields, RequestHead};
use crate::syntax::fields::InvalidField;
use crate::syntax::trace_context::TRACEPARENT;
use crate::trust::headers::{
    self, FORWARDED_FOR, FORWARDED_HOST, Inbound, REQUEST_ID, SHARD, TENANT,
};
use crate::upstream::body::{AttemptBody, AttemptBodyError, Upload};
use crate::upstream::exchange::{ExchangeError, SendError};
use crate::upstream::transport::{Connector, Transport};

/// How often an HTTP/2 connection to a shard is pinged, idle or not: a
/// shard that vanished without closing is noticed, and the connection
/// retired, before requests are sent into it.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);

/// How long a ping's answer may take before the connection is closed.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The shard's HTTP/2 connections.
#[derive(Default)]
pub(crate) struct Pool {
    connections: Mutex<Vec<Arc<Connection>>>,
    /// Held while a connection is made, so that a burst of requests to a
    /// shard with no connection waits for one instead of making one each.
    connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("connections", &self.len())
            .finish()
    }
}

/// One HTTP/2 connection to a shard.
struct Connection {
    sender: http2::SendRequest<OutgoingBody>,
    /// What made it: once a reload changes how the shard is reached, it
    /// takes no more streams.
    made_by: Arc<Connector>,
    /// Streams open on it now (an attempt's, until its response ends).
    streams: AtomicUsize,
    /// The most streams the shard allows at once, as its task last saw
    /// (its `SETTINGS_MAX_CONCURRENT_STREAMS`).
    max_streams: Arc<AtomicUsize>,
    /// Its task ended, or the shard said `GOAWAY`: no new streams.
    retired: Arc<AtomicBool>,
}

impl Connection {
    /// Whether it may take another stream now.
    fn usable(&self, current: &Arc<Connector>) -> bool {
        !self.retired.load(Ordering::Relaxed)
            && !self.sender.is_closed()
            && Arc::ptr_eq(&self.made_by, current)
    }

    /// Whether the shard allows another stream on it.
    fn has_room(&self) -> bool {
        self.streams.load(Ordering::Relaxed) < self.max_streams.load(Ordering::Relaxed).max(1)
    }

    fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }
}

/// One stream's place on a connection, given back when dropped (with the
/// response body that holds it, or with a failed attempt).
pub(crate) struct Stream(Arc<Connection>);

impl Stream {
    fn open(connection: &Arc<Connection>) -> Self {
        connection.streams.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(connection))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pool {
    /// Connections kept now.
    pub(crate) fn len(&self) -> usize {
        self.connections.lock().expect("h2 connections").len()
    }

    /// Closes every connection to new streams (a reload changed how the
    /// shard is reached); streams under way finish on them.
    pub(crate) fn clear(&self) {
        self.connections.lock().expect("h2 connections").clear();
    }

    /// A stream on a connection `current` made that has room, if any;
    /// connections that can take no more streams are let go of.
    fn take(&self, current: &Arc<Connector>) -> Option<Stream> {
        let mut connections = self.connections.lock().expect("h2 connections");
        connections.retain(|connection| connection.usable(current));
        connections
            .iter()
            .find(|connection| connection.has_room())
            .map(Stream::open)
    }

    /// A stream on a new connection made by `deadline` (or on one another
    /// attempt made meanwhile).
    async fn connect(
        &self,
        connector: &Arc<Connector>,
        deadline: Instant,
    ) -> Result<Stream, SendError> {
        let made = tokio::time::timeout_at(deadline, async {
            let _turn = self.connecting.lock().await;
            if let Some(stream) = self.take(connector) {
                return Some(stream);
            }
            let connection = Arc::new(handshake(connector, deadline).await?);
            let stream = Stream::open(&connection);
            self.connections
                .lock()
                .expect("h2 connections")
                .push(connection);
            Some(stream)
        })
        .await;
        made.ok().flatten().ok_or(SendError::Connect)
    }
}

/// A new HTTP/2 connection by `connector`, its task started, once the
/// shard's preface has come; `None` if any of it failed.
async fn handshake(connector: &Arc<Connector>, deadline: Instant) -> Option<Connection> {
    let transport = connector.connect(deadline).await?;
    let (verdict, preface) = oneshot::channel();
    let io = PrefaceWatch {
        inner: transport,
        seen: [0; FRAME_HEADER],
        have: 0,
        verdict: Some(verdict),
        settings: false,
    };
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    let (sender, mut connection) = builder.handshake(TokioIo::new(io)).await.ok()?;
    let retired = Arc::new(AtomicBool::new(false));
    let ended = Arc::clone(&retired);
    let max_streams = Arc::new(AtomicUsize::new(connection.current_max_send_streams()));
    let allowed = Arc::clone(&max_streams);
    let address = connector.address().unwrap_or_default().to_owned();
    tokio::spawn(async move {
        // The connection, polled here so that what the shard allows is
        // read after every turn (the settings can change at any time).
        let driven = std::future::poll_fn(|cx| {
            let polled = Pin::new(&mut connection).poll(cx);
            allowed.store(connection.current_max_send_streams(), Ordering::Relaxed);
            polled
        });
        if let Err(error) = driven.await {
            tracing::debug!(%address, %error, "an HTTP/2 connection to a shard failed");
        }
        ended.store(true, Ordering::Relaxed);
    });
    if !preface.await.unwrap_or(false) {
        tracing::debug!(address = ?connector.address(), "a shard configured for HTTP/2 did not answer with an HTTP/2 preface");
        // Dropping the sender ends the connection's task.
        return None;
    }
    Some(Connection {
        sender,
        made_by: Arc::clone(connector),
        streams: AtomicUsize::new(0),
        max_streams,
        retired,
    })
}

/// The length of an HTTP/2 frame header.
const FRAME_HEADER: usize = 9;

/// A connection whose first bytes from the shard are looked at: they must
/// be the header of a SETTINGS frame on stream 0 without the ACK flag (RFC
/// 9113 section 3.4), or the shard does not speak HTTP/2.
///
/// A good preface is told only once the connection has taken in what came
/// with it: at the next read (the connection reads again only after it
/// has handled every frame it has), or when the connection ends. A shard
/// that sends `GOAWAY` with its SETTINGS has then been heard before any
/// stream is sent, so the connection takes none and the request is still
/// whole for another shard; told at once, the request could race the
/// `GOAWAY` onto the connection and lose its body to a stream the shard
/// refused.
struct PrefaceWatch {
    inner: Transport,
    seen: [u8; FRAME_HEADER],
    have: usize,
    /// Told the verdict (see above), or that the connection ended before
    /// there was one; `None` after.
    verdict: Option<oneshot::Sender<bool>>,
    /// A SETTINGS frame header came; the verdict waits for the next read.
    settings: bool,
}

impl PrefaceWatch {
    /// Looks at what a read added (`read`, empty at the end of the stream).
    fn observe(&mut self, read: &[u8]) {
        if self.settings {
            return;
        }
        let Some(verdict) = self.verdict.take() else {
            return;
        };
        if read.is_empty() {
            let _ = verdict.send(false);
            return;
        }
        let take = read.len().min(FRAME_HEADER - self.have);
        self.seen[self.have..self.have + take].copy_from_slice(&read[..take]);
        self.have += take;
        if self.have < FRAME_HEADER {
            self.verdict = Some(verdict);
            return;
        }
        let settings =
            self.seen[3] == 0x4 && self.seen[4] & 0x1 == 0 && self.seen[5..9] == [0, 0, 0, 0];
        if settings {
            self.settings = true;
            self.verdict = Some(verdict);
        } else {
            let _ = verdict.send(false);
        }
    }

    /// Tells a good preface, if one is waiting to be told.
    fn tell(&mut self) {
        if self.settings
            && let Some(verdict) = self.verdict.take()
        {
            let _ = verdict.send(true);
        }
    }
}

impl Drop for PrefaceWatch {
    fn drop(&mut self) {
        // The connection ended (a `GOAWAY` and nothing more, say) after a
        // good preface: it was HTTP/2, and its sender will say it is
        // closed.
        self.tell();
    }
}

impl AsyncRead for PrefaceWatch {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Everything read so far has been handled.
        this.tell();
        let before = buf.filled().len();
        let polled = ready!(Pin::new(&mut this.inner).poll_read(cx, buf));
        if this.verdict.is_some() {
            match &polled {
                Ok(()) => this.observe(&buf.filled()[before..]),
                Err(_) => this.observe(&[]),
            }
        }
        Poll::Ready(polled)
    }
}

impl AsyncWrite for PrefaceWatch {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The request body as it goes out on a stream: the attempt's body, its
/// trailers through the same rules as the client's header fields.
pub(crate) struct OutgoingBody {
    body: AttemptBody,
    inbound: Inbound,
}

impl Body for OutgoingBody {
    type Data = Bytes;
    /// The client's body failing or growing past the limit; trailers that
    /// break the header rules are dropped, not an error.
    type Error = AttemptBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = ready!(Pin::new(&mut self.body).poll_frame(cx));
        Poll::Ready(polled.map(|frame| {
            frame.map(|frame| match frame.into_trailers() {
                Ok(trailers) => Frame::trailers(headers::filter_trailers(trailers, |name| {
                    headers::request_trailer_passes(&self.inbound, name)
                })),
                Err(frame) => frame,
            })
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response body coming in on a stream, holding its place on the
/// connection until it ends.
pub(crate) struct IncomingStream {
    body: Incoming,
    _stream: Stream,
}

impl std::fmt::Debug for IncomingStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingStream").finish_non_exhaustive()
    }
}

impl IncomingStream {
    /// The next frame of the response body.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Whether an attempt's body can still go out whole on another
/// connection, asked after a stream failed: bytes can be sent again, a
/// client's stream only if nothing took it.
enum Untouched {
    Always,
    Unless(Arc<Upload>),
}

impl Untouched {
    fn of(body: &AttemptBody) -> Self {
        match body.upload() {
            Some(upload) => Untouched::Unless(upload),
            None => Untouched::Always,
        }
    }

    fn still(&self) -> bool {
        match self {
            Untouched::Always => true,
            Untouched::Unless(upload) => upload.untaken(),
        }
    }
}

/// Fields HTTP/2 forbids (RFC 9113 section 8.2.2), and `Host`, which goes
/// as `:authority`. A head the gateway composes (health checks) lets every
/// field through, so they are dropped here whatever the filter says.
const CONNECTION_SPECIFIC: [&[u8]; 7] = [
    b"connection",
    b"proxy-connection",
    b"keep-alive",
    b"transfer-encoding",
    b"upgrade",
    b"te",
    b"host",
];

/// Whether the client's `te` fields offer `trailers`.
fn accepts_trailers(fields: &Fields) -> bool {
    fields
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"te"))
        .flat_map(|(_, value)| value.split(|&b| b == b','))
        .any(|coding| {
            let coding = coding.split(|&b| b == b';').next().unwrap_or_default();
            coding.trim_ascii().eq_ignore_ascii_case(b"trailers")
        })
}

/// The request as it goes out on a stream to a shard that `connector`
/// reaches: the same fields an HTTP/1.1 head would carry, as a header map,
/// with `Host` as the authority.
fn outgoing(
    request: &RequestHead<'_>,
    connector: &Connector,
    body: AttemptBody,
) -> Result<Request<OutgoingBody>, SendError> {
    let scheme = if matches!(connector, Connector::Tls { .. }) {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    };
    // A shard's URL always has a host, or it is unreachable.
    let authority = request
        .host
        .and_then(|host| Authority::try_from(host.as_bytes()).ok())
        .ok_or(SendError::Connect)?;
    let uri = Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(request.target)
        .build()
        .map_err(|_| SendError::Exchange(ExchangeError::Field(InvalidField)))?;
    let fields = request.fields;
    let mut headers = fields
        .to_header_map(fields.iter().filter(|(name, _)| {
            request.inbound.forwards(name)
                && !CONNECTION_SPECIFIC
                    .iter()
                    .any(|never| name.eq_ignore_ascii_case(never))
        }))
        .map_err(|error| SendError::Exchange(ExchangeError::Field(error)))?;
    add(&mut headers, FORWARDED_HOST, request.added.forwarded_host)?;
    add(
        &mut headers,
        FORWARDED_FOR,
        request.added.forwarded_for.map(HeaderValue::as_bytes),
    )?;
    add(
        &mut headers,
        TENANT,
        request.added.tenant.map(HeaderValue::as_bytes),
    )?;
    add(
        &mut headers,
        REQUEST_ID,
        request.added.request_id.map(HeaderValue::as_bytes),
    )?;
    add(
        &mut headers,
        SHARD,
        request.shard.map(HeaderValue::as_bytes),
    )?;
    if let Some(parent) = request.added.traceparent {
        add(
            &mut headers,
            HeaderName::from_static(TRACEPARENT),
            Some(parent),
        )?;
    }
    if accepts_trailers(fields) {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    let mut outgoing = Request::new(OutgoingBody {
        body,
        inbound: request.inbound.clone(),
    });
    *outgoing.method_mut() = request.method.clone();
    *outgoing.uri_mut() = uri;
    *outgoing.version_mut() = Version::HTTP_2;
    *outgoing.headers_mut() = headers;
    Ok(outgoing)
}

/// Appends one of the gateway's own fields, when it has a value.
fn add(headers: &mut HeaderMap, name: HeaderName, value: Option<&[u8]>) -> Result<(), SendError> {
    if let Some(value) = value {
        let value = HeaderValue::from_bytes(value)
            .map_err(|_| SendError::Exchange(ExchangeError::Field(InvalidField)))?;
        headers.append(name, value);
    }
    Ok(())
}

/// The `h2` error behind a hyper error, if there is one.
fn h2_error(error: &hyper::Error) -> Option<&::h2::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if let Some(h2) = error.downcast_ref::<::h2::Error>() {
            return Some(h2);
        }
        source = error.source();
    }
    None
}

impl Pool {
    /// `request` with `body` on a stream of a pooled connection that
    /// `connector` made, or of a new one made by `deadline`: the response's
    /// head and the stream its body comes on.
    pub(crate) async fn send(
        &self,
        connector: &Arc<Connector>,
        request: &RequestHead<'_>,
        body: AttemptBody,
        deadline: Instant,
    ) -> Result<(http::response::Parts, IncomingStream), SendError> {
        let untouched = Untouched::of(&body);
        let mut request = outgoing(request, connector, body)?;
        loop {
            let (stream, fresh) = match self.take(connector) {
                Some(stream) => (stream, false),
                None => (self.connect(connector, deadline).await?, true),
            };
            let mut sender = stream.0.sender.clone();
            let error = match sender.try_send_request(request).await {
                Ok(response) => {
                    let (head, body) = response.into_parts();
                    return Ok((
                        head,
                        IncomingStream {
                            body,
                            _stream: stream,
                        },
                    ));
                }
                Err(mut error) => match error.take_message() {
                    // The connection had ended before it took the stream:
                    // the next one gets the request as it is.
                    Some(unsent) if !fresh => {
                        stream.0.retire();
                        request = unsent;
                        continue;
                    }
                    Some(_) => return Err(SendError::Connect),
                    None => error.into_error(),
                },
            };
            return Err(failed(error, &stream, &untouched));
        }
    }
}

/// How a stream that got no response failed, for the failover rules (see
/// the module's documentation).
fn failed(error: hyper::Error, stream: &Stream, untouched: &Untouched) -> SendError {
    let cause = h2_error(&error);
    let reason = cause.and_then(::h2::Error::reason);
    let graceful_goaway = cause.is_some_and(|cause| cause.is_go_away() && cause.is_remote())
        && reason == Some(::h2::Reason::NO_ERROR);
    if graceful_goaway {
        stream.0.retire();
        // Another connection to the same shard may take it, if the body
        // can go again as it was.
        return if untouched.still() {
            SendError::NotSent
        } else {
            SendError::Connect
        };
    }
    if reason == Some(::h2::Reason::REFUSED_STREAM) {
        return SendError::Connect;
    }
    if cause.is_none_or(|cause| cause.is_go_away() || cause.is_io()) {
        // The connection itself failed.
        stream.0.retire();
    }
    SendError::Exchange(ExchangeError::Http2(error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A watch over the client end of a fresh TCP connection, the server
    /// end, and where its verdict comes.
    async fn watched() -> (PrefaceWatch, tokio::net::TcpStream, oneshot::Receiver<bool>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (verdict, told) = oneshot::channel();
        let watch = PrefaceWatch {
            inner: Transport::Tcp(client),
            seen: [0; FRAME_HEADER],
            have: 0,
            verdict: Some(verdict),
            settings: false,
        };
        (watch, server, told)
    }

    const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
    const GOAWAY: [u8; 17] = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

    #[tokio::test]
    async fn a_good_preface_is_told_only_once_what_came_with_it_was_handled() {
        let (mut watch, mut server, mut told) = watched().await;
        let together = [&SETTINGS[..], &GOAWAY[..]].concat();
        server.write_all(&together).await.unwrap();
        let mut read = vec![0; together.len()];
        watch.read_exact(&mut read).await.unwrap();
        // The connection has the GOAWAY, but has not handled it yet: no
        // stream may go out on it until it reads again.
        assert_eq!(told.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        server.write_all(&[0]).await.unwrap();
        watch.read_exact(&mut [0]).await.unwrap();
        assert_eq!(told.try_recv(), Ok(true));
    }

    #[tokio::test]
    async fn a_connection_that_ends_after_a_good_preface_is_told_good() {
        let (mut watch, mut server, told) = watched().await;
        server.write_all(&SETTINGS).await.unwrap();
        watch.read_exact(&mut [0; 9]).await.unwrap();
        drop(watch);
        assert_eq!(told.await, Ok(true));
    }

    #[tokio::test]
    async fn anything_but_settings_is_told_bad_at_once() {
        let (mut watch, mut server, mut told) = watched().await;
        server.write_all(b"HTTP/1.1 400 Bad\r\n").await.unwrap();
        watch.read_exact(&mut [0; 9]).await.unwrap();
        assert_eq!(told.try_recv(), Ok(false));
    }
}
