//! One client connection: serves plain bodiless HTTP/1.1 requests on its
//! own loop, and hands the connection to hyper for anything else.
//!
//! Most requests a gateway like this sees are `GET`s: a head and no body.
//! For those the loop reads the head ([`crate::protocol::client_wire`] decides what it
//! may serve), runs the request path ([`crate::route::proxy::handle`]) and writes
//! the response, usually in one `writev`. It keeps one timer per connection
//! for the header-read timeout, moved only when it fires, where hyper arms
//! and cancels one per request, and has no dispatcher in between: about a
//! sixth of the instructions a proxied request cost.
//!
//! The first request that is anything else (a body, `Expect`, an upgrade,
//! HTTP/1.0, a head that is malformed or too large) hands the connection,
//! with every byte read so far, to hyper for the rest of its life. hyper
//! then decodes request bodies, answers 100-continue, refuses what is
//! malformed with 400 or 431, and shuts down gracefully, as before.

use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Response, header};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use crate::config::{Http2Settings, LimitSettings};
use crate::listen::http2;
use crate::listen::lingering::{Lingering, client_io};
use crate::listen::shutdown::ShutdownWatch;
use crate::protocol::client_wire::{self, BodyFraming, HeadRead, SimpleRequest};
use crate::route::grpc::Kind;
use crate::route::peer::Peer;
use crate::route::proxy;
use crate::route::refusal;
use crate::route::response::{BoxError, ResponseBody};
use crate::route::tunnel;
use crate::state::Gateway;
use crate::syntax::fields::Fields;
use crate::syntax::grpc::Code;
use crate::trust::headers;
use crate::upstream::body::ClientBody;

/// The read buffer's first size, and what is added when it runs low.
const READ_BUFFER: usize = 8 * 1024;

/// Below this much free room the read buffer grows (or is compacted).
const MIN_READ_ROOM: usize = 1024;

/// Body data at least this large is written as it is, not copied into the
/// write buffer first.
const LARGE_DATA: usize = 16 * 1024;

/// The write buffer goes out once it holds this much.
const FLUSH_AT: usize = 64 * 1024;

/// hyper refuses read buffers smaller than this.
const MIN_HYPER_BUFFER: usize = 8192;

/// A busy connection quiet for this long parks: it gives back its buffers
/// and the room its requests' futures take, and waits for its next
/// request holding little more than its socket. A connection not yet
/// known to be busy parks as soon as it has nothing to read.
const PARK_AFTER: Duration = Duration::from_secs(1);

/// Serves one client connection until it closes, the client goes away, or
/// the gateway shuts down (an idle connection closes at once; one serving a
/// request finishes it and says `connection: close`).
///
/// A connection is served by [`serve_active`], boxed once per stretch of
/// activity: its future holds the request path's (kilobytes), built in
/// place for each request with no copy. When it has nothing to read it
/// parks here, as nginx and HAProxy keep an idle keep-alive connection:
/// this future is small, and while parked the connection holds no buffer
/// and no room for a request's future. The next request boxes the active
/// loop again, a copy of its future; so a connection whose next request
/// came soon after it parked (a busy one) waits for the one after in the
/// active loop, and parks only once quiet for [`PARK_AFTER`]: a copy per
/// stretch of activity, not per request, and a burst of new connections
/// that each ask once holds only what their requests in flight need.
pub async fn serve(
    gateway: Arc<Gateway>,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: ShutdownWatch,
    slot: OwnedSemaphorePermit,
) {
    let mut connection = Connection {
        config: Arc::clone(&gateway.snapshot().config),
        peer: Peer::new(peer),
        io: client_io(&gateway, stream, slot),
        buffers: Buffers::default(),
        timer: Deadline::default(),
        head_deadline: None,
        served: false,
        busy: false,
        woken: false,
    };
    loop {
        let active = Box::pin(serve_active(&gateway, &mut connection, &shutdown));
        match active.await {
            Phase::Closed => return,
            Phase::HandOff(deadline) => {
                let Connection {
                    io, buffers, peer, ..
                } = connection;
                // Boxed: hyper's connection is several kilobytes, and this
                // future would hold room for it all its life.
                let handed = hand_off(gateway, io, buffers.read, peer, shutdown, deadline);
                return Box::pin(handed).await;
            }
            Phase::Parked(deadline) => {
                connection.buffers = Buffers::default();
                let parked_at = Instant::now();
                tokio::select! {
                    biased;
                    ready = connection.io.tcp().readable() => if ready.is_err() {
                        return;
                    },
                    () = connection.timer.until(deadline) => return,
                    () = shutdown.stopping() => return,
                }
                // The head that wakes it is still due by the deadline the
                // wait began with.
                connection.head_deadline = Some(deadline);
                connection.busy = connection.served && parked_at.elapsed() < PARK_AFTER;
                connection.woken = true;
            }
        }
    }
}

/// What a connection keeps for its whole life.
struct Connection {
    /// The configuration it was accepted under (its limits).
    config: Arc<crate::config::GatewayConfig>,
    peer: Peer,
    io: Lingering,
    buffers: Buffers,
    /// The one timer of the header-read deadline and of parking.
    timer: Deadline,
    /// The deadline of the head being waited for, when the wait began
    /// before the connection parked.
    head_deadline: Option<Instant>,
    /// It has served a request.
    served: bool,
    /// Its last request came soon after the one before: wait for the next
    /// in the active loop rather than park at once.
    busy: bool,
    /// It was woken from parking by something to read: read it before
    /// parking again.
    woken: bool,
}

/// How a stretch of activity ended.
enum Phase {
    /// Quiet for [`PARK_AFTER`]: park until the next request's head must
    /// have come by the deadline.
    Parked(Instant),
    /// To hyper, with the header-read deadline.
    HandOff(Instant),
    Closed,
}

/// Serves requests until the connection closes, goes to hyper, or is
/// quiet for [`PARK_AFTER`].
async fn serve_active(
    gateway: &Arc<Gateway>,
    connection: &mut Connection,
    shutdown: &ShutdownWatch,
) -> Phase {
    loop {
        let simple = match read_request(connection, shutdown).await {
            Next::Request(simple) => simple,
            Next::HandOff(deadline) => {
                // A head read without waiting (pipelined) has its deadline
                // from now.
                let deadline = deadline.unwrap_or_else(|| {
                    Instant::now() + connection.config.limits.header_read_timeout
                });
                return Phase::HandOff(deadline);
            }
            Next::Park(deadline) => return Phase::Parked(deadline),
            Next::Close => return Phase::Closed,
        };
        let SimpleRequest {
            request,
            fields,
            close,
        } = simple;
        let head_request = request.method() == Method::HEAD;
        let request = request.map(|()| ClientBody::Empty);
        // With the next request's bytes already here there is nothing to
        // watch; otherwise a client that hangs up cancels its request, as
        // it would under hyper.
        let watch_client = connection.buffers.read.is_empty();
        // Pinned where it is: the request path's future is a few
        // kilobytes, and every layer it passed through would copy it.
        let handled = proxy::handle(Arc::clone(gateway), request, &fields, &connection.peer);
        tokio::pin!(handled);
        let response = if watch_client {
            tokio::select! {
                biased;
                response = &mut handled => response,
                () = hung_up(connection.io.tcp()) => return Phase::Closed,
            }
        } else {
            handled.await
        };
        let close = close || shutdown.is_stopping() || says_close(&response);
        let out = &mut connection.buffers.out;
        match write_response(&mut connection.io, out, response, head_request, close).await {
            Ok(true) if !close => connection.served = true,
            _ => return Phase::Closed,
        }
    }
}

/// A connection's read and write buffers, given back when it parks.
#[derive(Default)]
struct Buffers {
    /// What has been read of the next request.
    read: BytesMut,
    /// The response being written.
    out: Vec<u8>,
}

/// What the connection does next.
#[expect(
    clippy::large_enum_variant,
    reason = "one per request, moved once: boxing would cost an allocation per request"
)]
enum Next {
    Request(SimpleRequest),
    /// To hyper, with the header-read deadline if one was set.
    HandOff(Option<Instant>),
    /// Nothing of a head read, and not busy (or quiet for [`PARK_AFTER`]):
    /// park, the head still due by this deadline.
    Park(Instant),
    Close,
}

/// Reads until the read buffer starts with a complete head, within the
/// header-read timeout. An idle connection (nothing of a head read) parks,
/// at once unless it is busy, else after [`PARK_AFTER`]; it closes at
/// shutdown.
async fn read_request(connection: &mut Connection, shutdown: &ShutdownWatch) -> Next {
    let limits = &connection.config.limits;
    let buf = &mut connection.buffers.read;
    let mut deadline = connection.head_deadline.take();
    let mut park_at = None;
    loop {
        match client_wire::read_head(buf, limits.max_header_bytes) {
            HeadRead::Simple(simple) => return Next::Request(simple),
            HeadRead::HandOff => return Next::HandOff(deadline),
            HeadRead::Partial => {}
        }
        // The clock is read only when a head has to be waited for.
        let head_deadline = *deadline.get_or_insert_with(|| {
            let now = Instant::now();
            park_at = Some(now + PARK_AFTER);
            now + limits.header_read_timeout
        });
        if buf.capacity() - buf.len() < MIN_READ_ROOM {
            buf.reserve(READ_BUFFER);
        }
        let idle = buf.is_empty();
        if idle && !connection.busy && !std::mem::take(&mut connection.woken) {
            return Next::Park(head_deadline);
        }
        // A busy one parks once quiet, unless its head is due sooner.
        let park = park_at.filter(|&at| idle && at < head_deadline);
        let wake_at = park.unwrap_or(head_deadline);
        tokio::select! {
            biased;
            read = connection.io.read_buf(buf) => match read {
                Ok(0) | Err(_) => return Next::Close,
                Ok(_) => {}
            },
            () = connection.timer.until(wake_at) => {
                return match park {
                    Some(_) => Next::Park(head_deadline),
                    None => Next::Close,
                };
            }
            () = shutdown.stopping(), if idle => return Next::Close,
        }
    }
}

/// Completes when the client closes its side or the connection breaks;
/// never when it sends more (a pipelined request waits its turn). Polled
/// directly rather than through `peek`'s future: it is polled with every
/// poll of the request it watches.
async fn hung_up(stream: &TcpStream) {
    let mut sent_more = false;
    poll_fn(|cx| {
        if sent_more {
            return Poll::Pending;
        }
        let mut probe = [0_u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        match stream.poll_peek(cx, &mut probe) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(0) | Err(_)) => Poll::Ready(()),
            Poll::Ready(Ok(_)) => {
                sent_more = true;
                Poll::Pending
            }
        }
    })
    .await;
}

/// Whether a response asks for the connection to close.
fn says_close(response: &Response<ResponseBody>) -> bool {
    response
        .headers()
        .get(header::CONNECTION)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"close"))
}

/// Writes a response; `Ok(true)` if all of it went out, `Ok(false)` if the
/// body broke off or did not match its length (the client must then see
/// the connection close rather than wait for the rest).
async fn write_response(
    io: &mut Lingering,
    out: &mut Vec<u8>,
    response: Response<ResponseBody>,
    head_request: bool,
    close: bool,
) -> io::Result<bool> {
    let (head, mut body) = response.into_parts();
    let framing =
        client_wire::response_framing(head_request, head.status, &head.headers, &body.size_hint());
    out.clear();
    client_wire::encode_response_head(
        out,
        head.status,
        &head.headers,
        body.backend_fields(),
        framing,
        close,
    );
    drop(head);
    let mut remaining = match framing {
        BodyFraming::None => {
            io.write_all(out).await?;
            return Ok(true);
        }
        BodyFraming::Length(length) => Some(length),
        BodyFraming::Chunked => None,
    };
    let mut complete = true;
    while !body.is_end_stream() {
        // A frame that is ready joins what is buffered; only a body that
        // has to be waited for sends the buffer out first, so a small
        // response leaves in one write.
        let frame = match poll_now(&mut body).await {
            Some(frame) => frame,
            None => {
                flush(io, out).await?;
                body.frame().await
            }
        };
        let data = match frame {
            None => break,
            Some(Err(_)) => {
                complete = false;
                break;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                // Trailers are not forwarded; empty frames say nothing.
                _ => continue,
            },
        };
        match &mut remaining {
            Some(left) => {
                let take = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= take as u64;
                put(io, out, data.slice(..take)).await?;
                if take < data.len() {
                    // More than the response said it had.
                    complete = false;
                    break;
                }
            }
            None => {
                client_wire::encode_chunk_size(out, data.len());
                put(io, out, data).await?;
                out.extend_from_slice(b"\r\n");
            }
        }
        if out.len() >= FLUSH_AT {
            flush(io, out).await?;
        }
    }
    match remaining {
        Some(0) => {}
        // Fewer bytes than the response said it had.
        Some(_) => complete = false,
        None if complete => out.extend_from_slice(b"0\r\n\r\n"),
        None => {}
    }
    flush(io, out).await?;
    Ok(complete)
}

/// The body's next frame if it is ready now, without waiting.
async fn poll_now(body: &mut ResponseBody) -> Option<Option<Result<Frame<Bytes>, BoxError>>> {
    poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
        Poll::Ready(frame) => Poll::Ready(Some(frame)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Adds body data to the write buffer, or writes large data as it is.
async fn put(io: &mut Lingering, out: &mut Vec<u8>, data: Bytes) -> io::Result<()> {
    if data.len() < LARGE_DATA {
        out.extend_from_slice(&data);
        return Ok(());
    }
    flush(io, out).await?;
    io.write_all(&data).await
}

async fn flush(io: &mut Lingering, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    Ok(())
}

/// Gives the connection to hyper, with what has been read of it. An
/// HTTP/2 connection's first request must still be complete by
/// `header_deadline`.
async fn hand_off(
    gateway: Arc<Gateway>,
    io: Lingering,
    read: BytesMut,
    peer: Peer,
    shutdown: ShutdownWatch,
    header_deadline: Instant,
) {
    // HTTP/2 with prior knowledge (h2c) opens with its preface, whose
    // first line reads as a head `PRI * HTTP/2.0` the loop does not serve.
    let protocol = if read.starts_with(H2_PREFACE_START) && gateway.snapshot().config.http2.enabled
    {
        Protocol::Http2
    } else {
        Protocol::Http1
    };
    let io = Prefixed {
        prefix: read.freeze(),
        inner: io,
    };
    serve_with_hyper(gateway, io, peer, shutdown, protocol, header_deadline).await;
}

/// The start of the HTTP/2 connection preface (RFC 9113 §3.4), as much of
/// it as the loop may have read before it gave up on the head (hyper checks
/// the rest).
const H2_PREFACE_START: &[u8] = b"PRI * HTTP/2";

/// Which HTTP hyper speaks on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http1,
    Http2,
}

/// Serves a connection with hyper for the rest of its life: what the fast
/// path hands off, and every TLS connection. At shutdown an HTTP/1.1
/// connection finishes its request and closes; an HTTP/2 one sends
/// `GOAWAY` and finishes the streams it has.
///
/// An HTTP/2 connection also keeps the timers hyper's server lacks
/// ([`http2`]): its first request must be complete by `header_deadline`,
/// and it is closed once no stream has been open for
/// `limits.http2_idle_timeout_ms`. (hyper's HTTP/1.1 server keeps its own
/// header-read timeout.)
pub(crate) async fn serve_with_hyper<Io>(
    gateway: Arc<Gateway>,
    io: Io,
    peer: Peer,
    shutdown: ShutdownWatch,
    protocol: Protocol,
    header_deadline: Instant,
) where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let snapshot = gateway.snapshot();
    let io = TokioIo::new(io);
    let tunnel = tunnel::Slot::default();
    // The two connection types share no trait for graceful shutdown. Each
    // is boxed so that it can be dropped before a tunnel runs: until then
    // a connection that failed still holds what the tunnel waits on.
    macro_rules! drive {
        ($connection:expr, $quiet:expr, $goaway_for:expr) => {{
            let mut connection = Box::pin($connection);
            let quiet = $quiet;
            tokio::pin!(quiet);
            tokio::select! {
                // Errors here are the client's doing (a reset, a bad
                // request, a header timeout); hyper has already answered
                // what it could.
                _ = connection.as_mut() => {}
                () = shutdown.stopping() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.as_mut().await;
                }
                why = &mut quiet => {
                    if why == http2::Quiet::Idle {
                        // A client that was served is told with GOAWAY;
                        // one that does not answer its PING is not waited
                        // for longer than a request head would be.
                        connection.as_mut().graceful_shutdown();
                        let _ = tokio::time::timeout($goaway_for, connection.as_mut()).await;
                    }
                    // One that never sent a request is just closed.
                }
            }
        }};
    }
    match protocol {
        Protocol::Http1 => {
            let builder = builder(&snapshot.config.limits);
            drop(snapshot);
            let service = service(
                gateway,
                peer,
                tunnel.clone(),
                ClientBody::Streamed,
                std::convert::identity,
            );
            drive!(
                builder.serve_connection(io, service).with_upgrades(),
                std::future::pending::<http2::Quiet>(),
                Duration::ZERO
            );
        }
        Protocol::Http2 => {
            let limits = &snapshot.config.limits;
            let (executor, mut watcher) = http2::timers(
                header_deadline,
                limits.http2_idle_timeout,
                limits.client_write_timeout,
                gateway.metrics.client_stalls.clone(),
            );
            let goaway_for = limits.header_read_timeout;
            let builder = http2_builder(executor, limits, &snapshot.config.http2);
            // Each stream's body runs its own timer: a stream whose client
            // stops sending its body would otherwise hold its attempt (the
            // shard's and the tenant's places, a backend connection) until
            // the request deadline, and one connection has many streams.
            let body_timeout = limits.client_body_timeout;
            let body_stalls = gateway.metrics.client_stalls.clone();
            drop(snapshot);
            let service = service(
                gateway,
                peer,
                tunnel.clone(),
                move |incoming| ClientBody::timed(incoming, body_timeout, &body_stalls),
                http2::WatchedBody::new,
            );
            drive!(
                builder.serve_connection(io, service),
                watcher.quiet(),
                goaway_for
            );
        }
    }
    // A WebSocket upgrade's 101 went out and hyper handed the connection
    // over: the tunnel runs in this task, so the connection keeps its slot
    // and shutdown ends it after the grace period like any request.
    if let Some(tunnel) = tunnel.take() {
        tunnel.run().await;
    }
}

/// hyper's HTTP/2 server with the configured limits, spawning streams
/// through `executor`. A header list over
/// `limits.max_header_bytes` is refused by the request path, in the shape
/// the request needs (a gRPC call's `RESOURCE_EXHAUSTED`); hyper itself
/// answers 431 on that stream only past twice the limit, so no client can
/// make the gateway hold an unbounded list. More streams than allowed are
/// refused with `REFUSED_STREAM`.
fn http2_builder(
    executor: http2::Executor,
    limits: &LimitSettings,
    http2: &Http2Settings,
) -> hyper::server::conn::http2::Builder<http2::Executor> {
    let mut builder = hyper::server::conn::http2::Builder::new(executor);
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(http2.max_concurrent_streams)
        .max_header_list_size(
            u32::try_from(limits.max_header_bytes.saturating_mul(2)).unwrap_or(u32::MAX),
        )
        .initial_stream_window_size(http2.initial_stream_window)
        .initial_connection_window_size(http2.initial_connection_window)
        .keep_alive_interval(http2.keep_alive_interval)
        .keep_alive_timeout(http2.keep_alive_timeout);
    builder
}

fn builder(limits: &LimitSettings) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // The head limit itself; the buffer bound below keeps memory per
        // connection small but cannot go under hyper's minimum, so on its
        // own it would let heads up to 8 KiB through whatever the limit.
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes.max(MIN_HYPER_BUFFER))
        .keep_alive(true);
    builder
}

/// The request path as hyper's service; `request_body` wraps each
/// request's body (an HTTP/2 stream's runs the client body timeout), and
/// `body` each response's body (an HTTP/2 stream's is watched by its
/// stream's task).
fn service<B>(
    gateway: Arc<Gateway>,
    peer: Peer,
    tunnel: tunnel::Slot,
    request_body: impl Fn(Incoming) -> ClientBody + Send + Sync + Clone + 'static,
    body: fn(ResponseBody) -> B,
) -> impl hyper::service::Service<
    http::Request<Incoming>,
    Response = Response<B>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<Response<B>, std::convert::Infallible>> + Send,
> + Clone
where
    B: Body + Send + 'static,
{
    service_fn(move |request: http::Request<Incoming>| {
        let request = request.map(&request_body);
        let gateway = Arc::clone(&gateway);
        let peer = peer.clone();
        let tunnel = tunnel.clone();
        // Boxed: the request path's future is about 6 KiB, and hyper moves
        // what it is given (an HTTP/2 stream's task several times, between
        // the connection, the executor and tokio's task cell); a box is
        // one allocation where those moves were about 60 KB of copying a
        // request (bench/README.md, "HTTP/2's lost requests").
        Box::pin(async move {
            // The request path reads fields as a client wrote them: a
            // header map is written out as such once.
            let fields = Fields::from_header_map(request.headers());
            let kind = Kind::of(request.method(), &fields);
            let mut response = proxy::handle(gateway, request, &fields, &peer).await;
            tunnel.keep(&mut response);
            Ok(with_header_map(response, kind).map(body))
        })
    })
}

/// A timer set again and again on one connection, for deadlines that only
/// move later. The timer entry stays where it is (the earliest deadline
/// still to come) and is moved only when it fires before the deadline now
/// asked for: once per timeout period at most, instead of an entry
/// registered and cancelled for every request.
#[derive(Default)]
struct Deadline {
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    /// Completes at `deadline`.
    async fn until(&mut self, deadline: Instant) {
        poll_fn(|cx| self.poll_until(deadline, cx)).await;
    }

    fn poll_until(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() > deadline {
            sleep.as_mut().reset(deadline);
        }
        while sleep.as_mut().poll(cx).is_ready() {
            if sleep.deadline() >= deadline {
                return Poll::Ready(());
            }
            sleep.as_mut().reset(deadline);
        }
        Poll::Pending
    }
}

/// The response as hyper needs it: a backend's header fields (the ones
/// that may pass) in the header map, where hyper writes them from. A
/// request's `kind` shapes the error when they cannot be.
fn with_header_map(mut response: Response<ResponseBody>, kind: Kind) -> Response<ResponseBody> {
    let Some(fields) = response.body().backend_fields() else {
        return response;
    };
    match fields.to_header_map(headers::outbound(fields)) {
        Ok(passed) => {
            // Appends every value (the gateway's own fields stay).
            response.headers_mut().extend(passed);
            response
        }
        // httparse accepted a field `http` does not: the backend's answer
        // cannot be passed on as it is.
        Err(_) => refusal::refuse(
            kind,
            http::StatusCode::BAD_GATEWAY,
            Code::Unavailable,
            "the backend failed",
        ),
    }
}

/// A connection whose first bytes were already read: they are read again
/// first. (How hyper gets a connection the loop has started on.)
struct Prefixed {
    prefix: Bytes,
    inner: Lingering,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.prefix.is_empty() {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        let take = self.prefix.len().min(buf.remaining());
        buf.put_slice(&self.prefix[..take]);
        self.prefix.advance(take);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::Semaphore;

    use super::*;
    use crate::listen::shutdown::Shutdown;
    use crate::state::{Gateway, Snapshot};

    /// A gateway on ephemeral loopback ports with one shard nobody serves.
    fn gateway(dir: &Path) -> Arc<Gateway> {
        std::fs::write(dir.join("placement.key"), [9_u8; 32]).unwrap();
        std::fs::write(dir.join("tenants.toml"), "").unwrap();
        let path = dir.join("gateway.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:0\"\ntenants_file = \"tenants.toml\"\n\
             [placement]\nalgorithm = \"rendezvous\"\nk = 1\nkey_file = \"placement.key\"\nkey_version = \"v1\"\n\
             [[cells]]\nname = \"default\"\nshards = [{ id = \"s0\", url = \"http://127.0.0.1:9\" }]\n",
        )
        .unwrap();
        Gateway::new(Snapshot::load(&path, None).unwrap())
    }

    /// What an idle connection's task holds beyond its socket: bounded, so
    /// that ten thousand idle keep-alive clients cost about what nginx's
    /// do. The request path's future and the response live in the active
    /// loop's box (they were 11,112 bytes of every connection's task, idle
    /// or not; 768 are left in the test build).
    #[tokio::test]
    async fn an_idle_connection_holds_a_small_future() {
        let dir = tempfile::tempdir().unwrap();
        let gateway = gateway(dir.path());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let slot = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        let stop = Shutdown::new();
        let serving = serve(Arc::clone(&gateway), stream, peer, stop.watch(), slot);
        let size = size_of_val(&serving);
        eprintln!("serve future: {size} bytes");
        assert!(size <= 896, "the connection's future grew to {size} bytes");
    }

    /// The request path's future, built in place in a busy connection's
    /// active loop and moved whole when a parked connection wakes (and by
    /// hyper's service, which boxes it): every byte is copied then. It was
    /// 6,160 bytes in the test build when this bound was set; grow it only
    /// knowingly.
    #[tokio::test]
    async fn the_request_paths_future_stays_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let gateway = gateway(dir.path());
        let request = http::Request::get("/").body(ClientBody::Empty).unwrap();
        let fields = Fields::from_header_map(&http::HeaderMap::new());
        let peer = Peer::new("127.0.0.1:1".parse().unwrap());
        let handled = proxy::handle(Arc::clone(&gateway), request, &fields, &peer);
        let size = size_of_val(&handled);
        eprintln!("request path future: {size} bytes");
        assert!(
            size <= 6_400,
            "the request path's future grew to {size} bytes"
        );
        let active = serve_active_size(&gateway).await;
        eprintln!("active loop future: {active} bytes");
        assert!(
            active <= 9_472,
            "the active loop's future grew to {active} bytes"
        );
    }

    /// The size of a connection's active loop (boxed per stretch of
    /// activity: copied whole at every wake-up; 9,000 bytes in the test
    /// build when its bound was set).
    async fn serve_active_size(gateway: &Arc<Gateway>) -> usize {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let slot = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        let mut connection = Connection {
            config: Arc::clone(&gateway.snapshot().config),
            peer: Peer::new(peer),
            io: client_io(gateway, stream, slot),
            buffers: Buffers::default(),
            timer: Deadline::default(),
            head_deadline: None,
            served: false,
            busy: false,
            woken: false,
        };
        let stop = Shutdown::new();
        let watch = stop.watch();
        size_of_val(&serve_active(gateway, &mut connection, &watch))
    }
}
