//! The backend connection pool and its HTTP/1.1 exchange, against raw
//! servers on 127.0.0.1 that answer every request head with fixed bytes,
//! count the connections they accept and record what they received:
//! responses come through whole however they are framed, connections are
//! reused only when that is safe, and requests go out as the backend
//! expects them.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use gateway::protocol::wire::{Fields, RequestHead, WireError};
use gateway::trust::headers::{Added, Inbound};
use gateway::upstream::body::AttemptBody;
use gateway::upstream::{ExchangeError, SendError, Timeouts, Upstream, UpstreamBody};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::{Instant, timeout};

/// The connect timeout given to every send.
const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(5),
    body_idle: Duration::from_secs(60),
    body_total: None,
};

/// How long anything in these tests may take before it counts as a hang.
const DEADLINE: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Helpers: a raw server, requests, and reading a response body.

/// What the server does with a connection after each answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Waits for the next request on it.
    KeepOpen,
    /// Closes it (which is how a body without a length ends).
    Close,
}

/// One request as the server received it.
#[derive(Debug, Clone)]
struct Received {
    head: Vec<u8>,
    body: Vec<u8>,
}

impl Received {
    /// The request line and fields, parsed: (method, target, fields).
    fn parsed(&self) -> (String, String, Vec<(String, String)>) {
        let mut storage = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut storage);
        assert!(request.parse(&self.head).unwrap().is_complete());
        let fields = request
            .headers
            .iter()
            .map(|field| {
                (
                    field.name.to_ascii_lowercase(),
                    String::from_utf8(field.value.to_vec()).unwrap(),
                )
            })
            .collect();
        (
            request.method.unwrap().to_owned(),
            request.path.unwrap().to_owned(),
            fields,
        )
    }

    /// The values of the fields named `name` (lowercase), in order.
    fn values(&self, name: &str) -> Vec<String> {
        self.parsed()
            .2
            .into_iter()
            .filter(|(field, _)| field == name)
            .map(|(_, value)| value)
            .collect()
    }
}

/// A raw HTTP/1.1 server: it reads each request (head, and a body of its
/// `Content-Length`), records it, and answers with the same bytes every
/// time, written in the given pieces.
struct RawServer {
    uri: Uri,
    /// The client address of each connection accepted, in order.
    accepted: Arc<Mutex<Vec<SocketAddr>>>,
    received: Arc<Mutex<Vec<Received>>>,
    /// The client address of each connection the server closed, once it
    /// has closed it.
    closed: mpsc::UnboundedReceiver<SocketAddr>,
}

impl RawServer {
    /// Starts a server answering every request with `pieces` (written one
    /// after the other, so that a response may arrive in several reads),
    /// then doing `after`.
    async fn start(pieces: &[&[u8]], after: After) -> RawServer {
        Self::start_gated(pieces, after, None).await
    }

    /// The same, but each piece after the first waits for a permit from
    /// `gate`, so that a test decides when it goes out.
    async fn start_gated(
        pieces: &[&[u8]],
        after: After,
        gate: Option<Arc<Semaphore>>,
    ) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let answer: Arc<[Bytes]> = pieces.iter().map(|p| Bytes::copy_from_slice(p)).collect();
        let (counter, record) = (Arc::clone(&accepted), Arc::clone(&received));
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                counter.lock().unwrap().push(peer);
                let answer = Arc::clone(&answer);
                let record = Arc::clone(&record);
                let closed_tx = closed_tx.clone();
                let gate = gate.clone();
                tokio::spawn(async move {
                    serve(stream, &answer, after, gate.as_deref(), &record).await;
                    let _ = closed_tx.send(peer);
                });
            }
        });
        RawServer {
            uri: format!("http://{addr}").parse().unwrap(),
            accepted,
            received,
            closed,
        }
    }

    /// Connections accepted so far.
    fn accepted(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }

    /// The client address of the `n`th connection accepted (from 0).
    fn peer(&self, n: usize) -> SocketAddr {
        self.accepted.lock().unwrap()[n]
    }

    /// The server's own address.
    fn addr(&self) -> SocketAddr {
        self.uri.authority().unwrap().as_str().parse().unwrap()
    }

    /// The requests received so far, in order.
    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Serves one connection until the client closes it or `after` says to.
async fn serve(
    mut stream: tokio::net::TcpStream,
    answer: &[Bytes],
    after: After,
    gate: Option<&Semaphore>,
    record: &Mutex<Vec<Received>>,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0_u8; 16 * 1024];
    loop {
        // The head, then as many body bytes as it says.
        let head_end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head: Vec<u8> = buffer.drain(..head_end).collect();
        let length = {
            let mut storage = [httparse::EMPTY_HEADER; 64];
            let mut request = httparse::Request::new(&mut storage);
            request.parse(&head).unwrap();
            assert!(
                !request
                    .headers
                    .iter()
                    .any(|f| f.name.eq_ignore_ascii_case("transfer-encoding")),
                "this server reads Content-Length bodies only"
            );
            request
                .headers
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case("content-length"))
                .map_or(0, |f| {
                    std::str::from_utf8(f.value)
                        .unwrap()
                        .parse::<usize>()
                        .unwrap()
                })
        };
        while buffer.len() < length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buffer.drain(..length).collect();
        record.lock().unwrap().push(Received { head, body });
        for (n, piece) in answer.iter().enumerate() {
            if n > 0
                && let Some(gate) = gate
            {
                gate.acquire().await.unwrap().forget();
            }
            if stream.write_all(piece).await.is_err() || stream.flush().await.is_err() {
                return;
            }
            // Another read may see the next piece on its own.
            tokio::task::yield_now().await;
        }
        if after == After::Close {
            return;
        }
    }
}

/// A request to send: `method target` with `headers`, to the server's
/// authority as `Host`, with an optional `x-shuffle-shard`.
struct Request<'a> {
    method: Method,
    target: &'a str,
    headers: HeaderMap,
    shard: Option<HeaderValue>,
}

impl Request<'_> {
    fn new(method: Method) -> Self {
        Self {
            method,
            target: "/x",
            headers: HeaderMap::new(),
            shard: None,
        }
    }
}

/// Sends `request` with `body` through `upstream` to the server at `uri`.
async fn send(
    upstream: &Arc<Upstream>,
    uri: &Uri,
    request: &Request<'_>,
    body: AttemptBody,
) -> Result<Response<UpstreamBody>, SendError> {
    let host: HeaderValue = uri.authority().unwrap().as_str().parse().unwrap();
    let fields = Fields::from_header_map(&request.headers);
    let head = RequestHead {
        method: &request.method,
        target: request.target,
        fields: &fields,
        inbound: &Inbound::everything(),
        stated: None,
        added: Added::default(),
        host: Some(&host),
        shard: request.shard.as_ref(),
    };
    timeout(
        DEADLINE,
        upstream.send(head, body, TIMEOUTS, Instant::now()),
    )
    .await
    .expect("no answer in time")
}

/// Sends `GET /x` with no body.
async fn get(upstream: &Arc<Upstream>, uri: &Uri) -> Result<Response<UpstreamBody>, SendError> {
    send(upstream, uri, &Request::new(Method::GET), AttemptBody::Done).await
}

/// A response body read frame by frame.
#[derive(Debug)]
struct Read {
    data: Vec<u8>,
    trailers: Option<HeaderMap>,
    /// The error the body ended with, if it failed.
    error: Option<ExchangeError>,
}

/// Reads `body` to its end (or its error), within [`DEADLINE`].
async fn read(mut body: UpstreamBody) -> Read {
    let mut read = Read {
        data: Vec::new(),
        trailers: None,
        error: None,
    };
    timeout(DEADLINE, async {
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => {
                        assert!(read.trailers.is_none(), "data after the trailers");
                        read.data.extend_from_slice(&data);
                    }
                    Err(frame) => {
                        assert!(read.trailers.is_none(), "two trailer frames");
                        read.trailers = Some(frame.into_trailers().unwrap());
                    }
                },
                Err(error) => {
                    read.error = Some(error);
                    break;
                }
            }
        }
    })
    .await
    .expect("the body did not end in time");
    if read.error.is_some() {
        // A failed body stays ended.
        assert!(body.frame().await.is_none(), "a frame after the error");
    }
    read
}

/// Sends `GET /x`, expects a 200, and reads its body, which must not fail.
async fn get_ok(upstream: &Arc<Upstream>, uri: &Uri) -> Read {
    let response = get(upstream, uri).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let read = read(response.into_body()).await;
    assert!(read.error.is_none(), "{:?}", read.error);
    read
}

/// A 200 whose body is `ok`.
const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A 200 whose body is `hello`.
const HELLO: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";

/// A 200 with an empty body.
const EMPTY: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";

/// A server answering every request with `pieces` and then doing `after`
/// (see [`RawServer::start`]), and a pool of connections to it.
async fn backend(pieces: &[&[u8]], after: After) -> (RawServer, Arc<Upstream>) {
    let server = RawServer::start(pieces, after).await;
    let upstream = Arc::new(Upstream::new(&server.uri));
    (server, upstream)
}

/// What one `GET /x` to a fresh [`backend`] got back: a 200, with its
/// body read to its end or its error.
struct Fetched {
    upstream: Arc<Upstream>,
    headers: HeaderMap,
    read: Read,
}

/// Sends `GET /x` to a fresh [`backend`] answering `pieces`, expects a 200,
/// and reads its body. A body that fails must leave no connection pooled.
async fn fetch(pieces: &[&[u8]], after: After) -> Fetched {
    let (server, upstream) = backend(pieces, after).await;
    let (head, body) = get(&upstream, &server.uri).await.unwrap().into_parts();
    assert_eq!(head.status, StatusCode::OK);
    // The backend's fields travel with the body; the map is built here.
    let headers = body.fields().to_header_map(body.fields().iter()).unwrap();
    let read = read(body).await;
    if read.error.is_some() {
        assert_eq!(upstream.idle_count(), 0, "a failed body was pooled");
    }
    Fetched {
        upstream,
        headers,
        read,
    }
}

/// Asserts that the body of a 200 from a server answering `answer` and
/// then doing `after` brings `data` and then fails with an error that
/// `expected` accepts, leaving no connection pooled.
async fn assert_body_fails(
    answer: &[u8],
    after: After,
    data: &[u8],
    expected: fn(&ExchangeError) -> bool,
) {
    let Fetched { read, .. } = fetch(&[answer], after).await;
    assert_eq!(read.data, data);
    assert!(read.error.as_ref().is_some_and(expected), "{read:?}");
}

/// Asserts that `GET /x` to a server answering `pieces` and then doing
/// `after` fails before any response with an error that `expected`
/// accepts, leaving no connection pooled.
async fn assert_exchange_fails(
    pieces: &[&[u8]],
    after: After,
    expected: fn(&ExchangeError) -> bool,
) {
    let (server, upstream) = backend(pieces, after).await;
    let result = get(&upstream, &server.uri).await;
    assert!(
        matches!(&result, Err(SendError::Exchange(error)) if expected(error)),
        "{result:?}"
    );
    assert_eq!(upstream.idle_count(), 0);
}

/// Asserts that a response to `GET /x` from a server answering `pieces`
/// has `body` and leaves its connection pooled or not, and that a second
/// request then reuses the connection or opens a new one accordingly.
/// Returns what the two requests read.
async fn assert_pooled(pieces: &[&[u8]], after: After, body: &[u8], pooled: bool) -> Vec<Read> {
    let (server, upstream) = backend(pieces, after).await;
    let mut reads = Vec::new();
    for round in 1..=2 {
        let read = get_ok(&upstream, &server.uri).await;
        // Compared without printing both, which may be megabytes.
        assert!(
            read.data == body,
            "round {round}: the body arrived altered: {:?}…",
            String::from_utf8_lossy(&read.data[..read.data.len().min(100)])
        );
        assert_eq!(upstream.idle_count(), usize::from(pooled), "round {round}");
        reads.push(read);
    }
    let expected = if pooled { 1 } else { 2 };
    assert_eq!(server.accepted(), expected, "connections for two requests");
    reads
}

// ---------------------------------------------------------------------------
// Reuse: the pool keeps what is safe to keep.

#[tokio::test]
async fn a_connection_whose_response_was_read_is_reused() {
    let (server, upstream) = backend(&[HELLO], After::KeepOpen).await;
    for _ in 0..10 {
        assert_eq!(get_ok(&upstream, &server.uri).await.data, b"hello");
    }
    assert_eq!(server.accepted(), 1, "one connection for ten requests");
    assert_eq!(upstream.idle_count(), 1);
}

#[tokio::test]
async fn a_response_abandoned_mid_body_never_carries_another_request() {
    // Large enough that the first frame cannot be the whole body.
    const LENGTH: usize = 4 << 20;
    let big = vec![b'x'; LENGTH];
    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {LENGTH}\r\n\r\n");
    let (server, upstream) = backend(&[head.as_bytes(), &big], After::KeepOpen).await;
    let response = get(&upstream, &server.uri).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert!(first.data_ref().is_some_and(|data| data.len() < LENGTH));
    drop(body);
    assert_eq!(
        upstream.idle_count(),
        0,
        "a half-read connection is not pooled"
    );
    let whole = get_ok(&upstream, &server.uri).await;
    assert_eq!(whole.data.len(), LENGTH);
    assert_eq!(server.accepted(), 2);
}

#[tokio::test]
async fn idle_connections_past_their_time_are_closed_not_reused() {
    let server = RawServer::start(&[HELLO], After::KeepOpen).await;
    let upstream = Arc::new(Upstream::with_idle_timeout(&server.uri, Duration::ZERO));
    for _ in 0..3 {
        assert_eq!(get_ok(&upstream, &server.uri).await.data, b"hello");
    }
    assert_eq!(server.accepted(), 3, "every request on a new connection");
}

#[tokio::test]
async fn a_chunked_response_with_trailers_comes_through_whole_and_is_pooled() {
    // The head and the first chunk's start in one piece, the rest in
    // another, so that the decoder meets a chunk cut in two.
    let reads = assert_pooled(
        &[
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n5;ext=1\r\nhel",
            b"lo\r\n6\r\n world\r\n0\r\nx-sum: 42\r\nx-other: a\r\nx-other: b\r\n\r\n",
        ],
        After::KeepOpen,
        b"hello world",
        true,
    )
    .await;
    for (round, read) in (1..).zip(reads) {
        let trailers = read.trailers.expect("a trailers frame");
        assert_eq!(trailers.len(), 3, "round {round}: {trailers:?}");
        assert_eq!(trailers["x-sum"], "42");
        let others: Vec<_> = trailers.get_all("x-other").iter().collect();
        assert_eq!(others, ["a", "b"]);
    }
}

#[tokio::test]
async fn a_large_chunked_body_comes_through_whole_across_many_reads() {
    // Three chunks far larger than one read, each of distinct bytes.
    let chunks: Vec<Vec<u8>> = (0..3_u8)
        .map(|n| (0..300_000_u32).map(|i| (i % 241) as u8 ^ n).collect())
        .collect();
    let mut answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for chunk in &chunks {
        answer.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        answer.extend_from_slice(chunk);
        answer.extend_from_slice(b"\r\n");
    }
    answer.extend_from_slice(b"0\r\n\r\n");
    let reads = assert_pooled(&[&answer], After::KeepOpen, &chunks.concat(), true).await;
    assert!(reads.iter().all(|read| read.trailers.is_none()));
}

#[tokio::test]
async fn a_head_larger_than_one_read_is_read_and_one_past_the_limit_refused() {
    let with_field_of = |size| {
        format!(
            "HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 2\r\n\r\nok",
            "a".repeat(size)
        )
    };
    let fetched = fetch(&[with_field_of(20_000).as_bytes()], After::KeepOpen).await;
    assert_eq!(fetched.headers["x-big"].len(), 20_000);
    assert_eq!(fetched.read.data, b"ok");
    assert_eq!(fetched.upstream.idle_count(), 1);

    assert_exchange_fails(
        &[with_field_of(gateway::protocol::wire::MAX_HEAD_BYTES).as_bytes()],
        After::KeepOpen,
        |error| matches!(error, ExchangeError::Protocol(WireError::HeadTooLarge)),
    )
    .await;
}

#[tokio::test]
async fn a_body_delimited_by_close_is_read_to_the_end_and_not_pooled() {
    assert_pooled(
        &[b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nhello, until the end"],
        After::Close,
        b"hello, until the end",
        false,
    )
    .await;
}

#[tokio::test]
async fn a_response_saying_connection_close_is_not_pooled() {
    // The server leaves the connection open: a client that pooled it
    // anyway would send the second request on it, and the count would say.
    assert_pooled(
        &[b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"],
        After::KeepOpen,
        b"ok",
        false,
    )
    .await;
}

#[tokio::test]
async fn an_http_1_0_response_is_pooled_only_when_it_says_keep_alive() {
    for (answer, pooled) in [
        (
            &b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok"[..],
            false,
        ),
        (
            b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok",
            true,
        ),
    ] {
        assert_pooled(&[answer], After::KeepOpen, b"ok", pooled).await;
    }
}

#[tokio::test]
async fn a_response_to_head_has_no_body_whatever_its_length_says() {
    let (server, upstream) = backend(
        &[b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n"],
        After::KeepOpen,
    )
    .await;
    for round in 1..=2 {
        let response = send(
            &upstream,
            &server.uri,
            &Request::new(Method::HEAD),
            AttemptBody::Done,
        )
        .await
        .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        // The length describes the GET's body: it is passed on as is.
        assert_eq!(
            response.body().fields().get("content-length"),
            Some(&b"1000"[..])
        );
        assert!(response.body().is_end_stream(), "round {round}");
        // Pooled as soon as the head is in: nothing is left to read.
        assert_eq!(upstream.idle_count(), 1, "round {round}");
        // `read` fails the test if the body waits for the 1000 bytes.
        let read = read(response.into_body()).await;
        assert!(read.data.is_empty() && read.error.is_none(), "{read:?}");
    }
    assert_eq!(server.accepted(), 1);
}

#[tokio::test]
async fn no_content_and_not_modified_have_no_body_and_are_pooled() {
    for answer in [
        &b"HTTP/1.1 204 No Content\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\ncontent-length: 50\r\n\r\n",
    ] {
        let (server, upstream) = backend(&[answer], After::KeepOpen).await;
        for _ in 0..2 {
            let response = get(&upstream, &server.uri).await.unwrap();
            assert!(matches!(response.status().as_u16(), 204 | 304));
            let read = read(response.into_body()).await;
            assert!(read.data.is_empty() && read.error.is_none(), "{read:?}");
            assert_eq!(upstream.idle_count(), 1);
        }
        assert_eq!(server.accepted(), 1, "{}", String::from_utf8_lossy(answer));
    }
}

#[tokio::test]
async fn a_100_continue_is_skipped_for_the_response_after_it() {
    assert_pooled(
        &[b"HTTP/1.1 100 Continue\r\n\r\n", HELLO],
        After::KeepOpen,
        b"hello",
        true,
    )
    .await;
}

#[tokio::test]
async fn a_response_with_bytes_after_its_end_is_not_pooled() {
    // Whatever follows the body (a second response nobody asked for, or
    // junk) would be read as the answer to the next request.
    assert_pooled(
        &[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nevil"],
        After::KeepOpen,
        b"ok",
        false,
    )
    .await;
}

#[tokio::test]
async fn bytes_arriving_after_a_pooled_response_are_noticed_before_reuse() {
    // The junk goes out only once the first response has been read and its
    // connection pooled.
    let gate = Arc::new(Semaphore::new(0));
    let server = RawServer::start_gated(
        &[OK, b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nevil"],
        After::KeepOpen,
        Some(Arc::clone(&gate)),
    )
    .await;
    let upstream = Arc::new(Upstream::new(&server.uri));
    assert_eq!(get_ok(&upstream, &server.uri).await.data, b"ok");
    assert_eq!(upstream.idle_count(), 1);
    gate.add_permits(1);
    wait_for_client_socket(&server, 0, |_, received| received > 0).await;
    // Not read as the answer to the next request: that goes on a new
    // connection (whose junk is held back: no permit is left).
    let read = get_ok(&upstream, &server.uri).await;
    assert_eq!(read.data, b"ok");
    assert_eq!(server.accepted(), 2);
}

/// Issue 28: bytes a shard sends on a pooled connection after its response
/// (a late tail, or a whole answer nobody asked for) retire it when they
/// are in the kernel before the next request would go out, even when the
/// event loop has not turned since they came (the pool used to trust its
/// view, and read them as the next request's answer: 42 % wrong answers
/// for the next tenant with bytes 1 ms late). The test runs on one thread
/// and blocks it while the bytes arrive, so the event loop cannot have
/// seen them when the pool is asked for a connection.
#[tokio::test]
async fn late_bytes_in_the_kernel_retire_a_pooled_connection_the_event_loop_has_not_seen_them_on() {
    // A shard on threads of its own, with blocking sockets: it answers
    // every request `ok`; on its first connection, when the test says so,
    // it also sends an answer nobody asked for.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (late_tx, late_rx) = std::sync::mpsc::channel::<()>();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&accepted);
    std::thread::spawn(move || {
        let mut late = Some((late_rx, sent_tx));
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut late = late.take();
            std::thread::spawn(move || {
                use std::io::{Read as _, Write as _};
                let mut buffer = Vec::new();
                let mut chunk = [0_u8; 4096];
                loop {
                    while !buffer.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buffer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                    buffer.drain(..end + 4);
                    if stream.write_all(OK).is_err() {
                        return;
                    }
                    if let Some((go, sent)) = late.take() {
                        go.recv().unwrap();
                        stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nevil")
                            .unwrap();
                        sent.send(stream.peer_addr().unwrap()).unwrap();
                    }
                }
            });
        }
    });
    let uri: Uri = format!("http://{addr}").parse().unwrap();
    let upstream = Arc::new(Upstream::new(&uri));
    assert_eq!(get_ok(&upstream, &uri).await.data, b"ok");
    assert_eq!(upstream.idle_count(), 1);

    // From here to the next request nothing awaits: the event loop does
    // not turn.
    late_tx.send(()).unwrap();
    let client = sent_rx.recv_timeout(DEADLINE).unwrap();
    let deadline = std::time::Instant::now() + DEADLINE;
    while socket_table(client, addr).is_some_and(|(_, received)| received == 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the late bytes never arrived"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));

    // The next request does not read them as its answer: it goes on a new
    // connection. And a shard caught sending bytes nobody asked for gets
    // no connection reused for a while: each request has its own.
    for _ in 0..3 {
        assert_eq!(get_ok(&upstream, &uri).await.data, b"ok");
        assert_eq!(upstream.idle_count(), 0);
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 4);
}

// ---------------------------------------------------------------------------
// Failures: each one is reported as what it is, and the connection goes.

#[tokio::test]
async fn a_truncated_length_body_ends_with_an_error() {
    assert_body_fails(
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
        After::Close,
        b"abc",
        |error| matches!(error, ExchangeError::Truncated),
    )
    .await;
}

#[tokio::test]
async fn a_truncated_chunked_body_ends_with_an_error() {
    assert_body_fails(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n3\r\nab",
        After::Close,
        b"helloab",
        |error| matches!(error, ExchangeError::Truncated),
    )
    .await;
}

#[tokio::test]
async fn a_chunk_size_line_without_digits_fails_the_body() {
    // One CRLF too many after the first chunk's data.
    assert_body_fails(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        After::KeepOpen,
        b"abc",
        |error| matches!(error, ExchangeError::Protocol(WireError::BadChunk)),
    )
    .await;
}

#[tokio::test]
async fn two_different_lengths_are_a_protocol_error() {
    assert_exchange_fails(
        &[b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd"],
        After::KeepOpen,
        |error| matches!(error, ExchangeError::Protocol(WireError::BadContentLength)),
    )
    .await;
}

#[tokio::test]
async fn a_backend_that_closes_without_answering_or_mid_head_is_told_apart() {
    assert_exchange_fails(&[], After::Close, |error| {
        matches!(error, ExchangeError::ClosedBeforeAnswer)
    })
    .await;
    assert_exchange_fails(&[b"HTTP/1.1 200 OK\r\ncontent-le"], After::Close, |error| {
        matches!(error, ExchangeError::Truncated)
    })
    .await;
}

#[tokio::test]
async fn an_upgrade_is_a_protocol_error() {
    assert_exchange_fails(
        &[b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"],
        After::KeepOpen,
        |error| matches!(error, ExchangeError::Protocol(WireError::Upgrade)),
    )
    .await;
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    // Bind and drop to find a port nothing listens on.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let uri: Uri = format!("http://{addr}").parse().unwrap();
    let upstream = Arc::new(Upstream::new(&uri));
    assert!(matches!(
        get(&upstream, &uri).await,
        Err(SendError::Connect)
    ));
}

// ---------------------------------------------------------------------------
// A pooled connection the backend closed while it sat idle.

/// What the kernel says of the TCP connection `local` → `remote` (both on
/// 127.0.0.1), from `/proc/net/tcp`: its state (`"08"` is `CLOSE_WAIT`: the
/// peer's FIN has arrived) and the bytes received and not yet read. `None`
/// where that table cannot be read or does not list the connection.
fn socket_table(local: SocketAddr, remote: SocketAddr) -> Option<(String, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    // The table prints the address as a number in the host's byte order.
    let spell = |addr: SocketAddr| {
        let SocketAddr::V4(addr) = addr else {
            panic!("{addr} is not IPv4")
        };
        let ip = u32::from_ne_bytes(addr.ip().octets());
        format!("{ip:08X}:{:04X}", addr.port())
    };
    let (local, remote) = (spell(local), spell(remote));
    table.lines().skip(1).find_map(|line| {
        let columns: Vec<&str> = line.split_whitespace().collect();
        if columns.get(1) != Some(&local.as_str()) || columns.get(2) != Some(&remote.as_str()) {
            return None;
        }
        let (_, received) = columns.get(4)?.split_once(':')?;
        Some((
            (*columns.get(3)?).to_owned(),
            u64::from_str_radix(received, 16).ok()?,
        ))
    })
}

/// Waits until the kernel says `done` of the client's end of `server`'s
/// `n`th connection, or fails the test after [`DEADLINE`]. Where the socket
/// table cannot be read (not Linux), it returns at once: the test then
/// relies on the loopback delivering at once, as it does in practice.
///
/// This is the one poll in these tests: the pool checks a connection when
/// it takes it from the pool, and what it checks (a FIN, or bytes nobody
/// asked for, on the client's socket) is not visible from the test but is
/// in the kernel's socket table.
async fn wait_for_client_socket(server: &RawServer, n: usize, done: impl Fn(&str, u64) -> bool) {
    if std::fs::metadata("/proc/net/tcp").is_err() {
        return;
    }
    let (local, remote) = (server.peer(n), server.addr());
    let deadline = Instant::now() + DEADLINE;
    loop {
        let row = socket_table(local, remote);
        if row
            .as_ref()
            .is_some_and(|(state, received)| done(state, *received))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the client's socket is still {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // One turn of the event loop, so that it has recorded the socket as
    // readable (the runtime polls its I/O driver before resuming a task
    // that yielded).
    tokio::task::yield_now().await;
}

#[tokio::test]
async fn an_idle_connection_the_backend_closed_is_noticed_before_it_is_used() {
    // The server answers once per connection and then closes it without
    // saying so in the head: the keep-alive race every pool meets.
    let (mut server, upstream) = backend(&[OK], After::Close).await;
    assert_eq!(get_ok(&upstream, &server.uri).await.data, b"ok");
    assert_eq!(upstream.idle_count(), 1, "the response allowed keep-alive");

    // Wait until the server has closed the connection and the client's
    // socket has its FIN. The test must not send before the close has
    // reached the client's socket: it would then test the (separate) case
    // of a request racing the close. The server's report says close()
    // returned; the FIN's arrival is polled in the socket table.
    let client = timeout(DEADLINE, server.closed.recv())
        .await
        .expect("the server did not close in time")
        .unwrap();
    assert_eq!(client, server.peer(0));
    wait_for_client_socket(&server, 0, |state, _| state == "08").await;

    // Sent without error, on a new connection.
    assert_eq!(get_ok(&upstream, &server.uri).await.data, b"ok");
    assert_eq!(server.accepted(), 2);
    assert_eq!(
        server.received().len(),
        2,
        "each connection took one request"
    );
}

#[tokio::test]
async fn a_pooled_connection_closing_as_it_is_reused_never_hangs() {
    // Here the request may race the close: it either finds the connection
    // closed in the pool (and takes a new one) or fails as a stale
    // exchange, which the attempt resends; it never hangs.
    let (server, upstream) = backend(&[OK], After::Close).await;
    let mut answered = 0;
    for round in 1..=3 {
        match get(&upstream, &server.uri).await {
            Ok(response) => {
                let read = read(response.into_body()).await;
                assert_eq!(read.data, b"ok", "round {round}");
                answered += 1;
            }
            Err(SendError::Exchange(error)) => {
                assert!(error.closed_before_answering(), "round {round}: {error}");
            }
            Err(other) => panic!("round {round}: {other:?}"),
        }
    }
    assert!(answered >= 2, "the first round and a retried one answered");
    assert!(server.accepted() >= 2);
}

// ---------------------------------------------------------------------------
// What goes out: the request head and a buffered body.

#[tokio::test]
async fn a_buffered_body_goes_out_with_its_length() {
    let (server, upstream) = backend(
        &[b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n"],
        After::KeepOpen,
    )
    .await;
    // Small enough to leave with the head, and larger than that.
    let small = Bytes::from_static(b"hello world");
    let large: Bytes = (0..100_000_u32).map(|i| (i % 251) as u8).collect();
    for body in [small, large] {
        let response = send(
            &upstream,
            &server.uri,
            &Request::new(Method::POST),
            AttemptBody::Buffered(Some(body.clone())),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let received = server.received().pop().unwrap();
        assert_eq!(received.parsed().0, "POST");
        assert_eq!(received.values("content-length"), [body.len().to_string()]);
        assert!(received.values("transfer-encoding").is_empty());
        assert!(received.body == body, "the body arrived altered");
    }
    assert_eq!(server.accepted(), 1);
}

#[tokio::test]
async fn an_empty_post_says_length_zero_and_an_empty_get_says_nothing() {
    let (server, upstream) = backend(&[EMPTY], After::KeepOpen).await;
    let cases = [
        (
            Method::POST,
            AttemptBody::Buffered(Some(Bytes::new())),
            Some("0"),
        ),
        (Method::POST, AttemptBody::Done, Some("0")),
        (Method::PUT, AttemptBody::Buffered(None), Some("0")),
        (Method::GET, AttemptBody::Done, None),
        (Method::GET, AttemptBody::Buffered(Some(Bytes::new())), None),
        (Method::DELETE, AttemptBody::Done, None),
    ];
    for (method, body, length) in cases {
        let response = send(&upstream, &server.uri, &Request::new(method.clone()), body)
            .await
            .unwrap();
        assert!(read(response.into_body()).await.error.is_none());
        let received = server.received().pop().unwrap();
        assert_eq!(received.parsed().0, method.as_str());
        assert_eq!(
            received.values("content-length"),
            Vec::from_iter(length.map(str::to_owned)),
            "{method}"
        );
        assert!(received.values("transfer-encoding").is_empty(), "{method}");
        assert!(received.body.is_empty());
    }
    assert_eq!(server.accepted(), 1);
}

#[tokio::test]
async fn the_request_head_names_the_shard_host_first() {
    let (server, upstream) = backend(&[EMPTY], After::KeepOpen).await;
    let mut request = Request::new(Method::GET);
    request.target = "/v1/items?x=1";
    // Stale values in the map never go out beside the attempt's own.
    request
        .headers
        .insert("host", HeaderValue::from_static("client.example"));
    request
        .headers
        .insert("x-shuffle-shard", HeaderValue::from_static("s9"));
    request
        .headers
        .insert("accept", HeaderValue::from_static("*/*"));
    request.shard = Some(HeaderValue::from_static("s3"));
    let response = send(&upstream, &server.uri, &request, AttemptBody::Done)
        .await
        .unwrap();
    assert!(read(response.into_body()).await.error.is_none());

    // Without a shard id, no x-shuffle-shard at all.
    let response = get(&upstream, &server.uri).await.unwrap();
    assert!(read(response.into_body()).await.error.is_none());

    let received = server.received();
    let authority = server.uri.authority().unwrap().as_str().to_owned();
    let (method, target, fields) = received[0].parsed();
    assert_eq!((method.as_str(), target.as_str()), ("GET", "/v1/items?x=1"));
    assert_eq!(
        fields,
        [
            ("host".to_owned(), authority.clone()),
            ("accept".to_owned(), "*/*".to_owned()),
            ("x-shuffle-shard".to_owned(), "s3".to_owned()),
        ]
    );
    let (_, target, fields) = received[1].parsed();
    assert_eq!(target, "/x");
    assert_eq!(fields, [("host".to_owned(), authority)]);
}
