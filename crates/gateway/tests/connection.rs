//! The client connection's own loop (`connection.rs`) on real sockets:
//! pipelined requests, the hand-off to hyper in the middle of a connection,
//! `HEAD` and chunked response framing, `Connection: close`, a malformed
//! head after a good request, graceful shutdown of idle connections, and
//! the header-read timeout.
//!
//! Every test writes raw bytes on a `TcpStream`, so that what the gateway
//! receives is exactly what the test means (a client library would neither
//! pipeline nor send a malformed head), and reads the answers back with a
//! strict HTTP/1.1 response reader: a response framed wrongly (a stray body
//! byte, a missing chunk terminator) shows up as the next response failing
//! to parse.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

use crate::util::{
    CustomShard, Fixture, Options, RawResponse, ShardBody, TestBody, eventually, full,
};

/// How long anything in these tests may take before it counts as a hang:
/// far beyond what any step takes on a busy 2-core machine, so only a hang
/// reaches it. Tests that pin a timeout's length assert their own bound.
const DEADLINE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// Helpers: one raw client connection, requests as bytes, shard bodies.

/// One client connection to the gateway, with the bytes read from it that
/// no response has claimed yet (the start of the next response, or stray
/// bytes that would corrupt it).
struct Client {
    stream: TcpStream,
    received: Vec<u8>,
}

impl Client {
    async fn open(addr: SocketAddr) -> Self {
        Self {
            stream: TcpStream::connect(addr).await.unwrap(),
            received: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .await
            .expect("the gateway closed the connection while a request was being sent");
    }

    /// Reads what is available; false once the gateway has closed the
    /// connection (or reset it).
    async fn fill(&mut self) -> bool {
        let mut buffer = [0_u8; 8192];
        match self.stream.read(&mut buffer).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.received.extend_from_slice(&buffer[..n]);
                true
            }
        }
    }

    /// Reads one response head, leaving whatever follows it unread.
    async fn head(&mut self) -> RawResponse {
        timeout(DEADLINE, async {
            loop {
                if let Some(at) = self.received.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&self.received[..at]).into_owned();
                    self.received.drain(..at + 4);
                    let status = head
                        .strip_prefix("HTTP/1.1 ")
                        .and_then(|rest| rest.get(..3))
                        .and_then(|code| code.parse().ok())
                        .unwrap_or_else(|| panic!("not an HTTP/1.1 status line: {head:?}"));
                    return RawResponse {
                        status,
                        head,
                        body: Vec::new(),
                    };
                }
                assert!(
                    self.fill().await,
                    "the connection closed before a complete response head: {:?}",
                    String::from_utf8_lossy(&self.received)
                );
            }
        })
        .await
        .expect("no complete response head in time")
    }

    /// Reads the body of `response` as its head frames it (none for a
    /// `HEAD` request, 204 and 304), leaving whatever follows it unread.
    async fn body(&mut self, response: &mut RawResponse, head_request: bool) {
        if head_request || response.status == 204 || response.status == 304 {
            return;
        }
        let body = timeout(DEADLINE, async {
            if let Some(length) = response.header("content-length") {
                let length: usize = length.parse().unwrap();
                while self.received.len() < length {
                    assert!(self.fill().await, "the connection closed mid-body");
                }
                return self.received.drain(..length).collect();
            }
            if response
                .header("transfer-encoding")
                .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
            {
                return self.chunked().await;
            }
            // Neither: the body runs until the connection closes.
            while self.fill().await {}
            std::mem::take(&mut self.received)
        })
        .await
        .expect("no complete response body in time");
        response.body = body;
    }

    /// Decodes a chunked body up to and including its last (empty) chunk.
    async fn chunked(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(at) = self.received.windows(2).position(|w| w == b"\r\n") {
                    break at;
                }
                assert!(self.fill().await, "the connection closed mid-chunk");
            };
            let line = String::from_utf8_lossy(&self.received[..line_end]).into_owned();
            let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                .unwrap_or_else(|_| panic!("not a chunk-size line: {line:?}"));
            while self.received.len() < line_end + 2 + size + 2 {
                assert!(self.fill().await, "the connection closed mid-chunk");
            }
            let chunk: Vec<u8> = self.received.drain(..line_end + 2 + size + 2).collect();
            assert_eq!(
                &chunk[line_end + 2 + size..],
                b"\r\n",
                "a chunk not followed by CRLF"
            );
            if size == 0 {
                // No trailers: the last chunk's CRLF ends the body.
                return body;
            }
            body.extend_from_slice(&chunk[line_end + 2..line_end + 2 + size]);
        }
    }

    /// Reads one whole response.
    async fn response(&mut self, head_request: bool) -> RawResponse {
        let mut response = self.head().await;
        self.body(&mut response, head_request).await;
        response
    }

    /// Reads until the gateway closes the connection (EOF or reset) and
    /// returns every byte no response claimed; panics if it is still open
    /// after [`DEADLINE`].
    async fn closed(&mut self) -> Vec<u8> {
        timeout(DEADLINE, async { while self.fill().await {} })
            .await
            .expect("the gateway did not close the connection");
        std::mem::take(&mut self.received)
    }
}

/// A bodiless request as `key`, with extra header lines (each ending in
/// CRLF).
fn request(method: &str, path: &str, key: &str, extra: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\n{extra}\r\n")
        .into_bytes()
}

fn get(path: &str, key: &str) -> Vec<u8> {
    request("GET", path, key, "")
}

/// The path the test backend says it served (it answers with JSON naming
/// the method and path it saw).
fn served_path(response: &RawResponse) -> String {
    let answer: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_else(|e| {
        panic!(
            "not the test backend's JSON ({e}): {:?}",
            String::from_utf8_lossy(&response.body)
        )
    });
    answer["path"].as_str().unwrap().to_owned()
}

/// A gateway over one test backend, so that every request lands on it.
async fn one_backend(extra: &str) -> Fixture {
    Fixture::start(Options {
        shards: 1,
        tenants: 2,
        k: 1,
        extra: extra.into(),
        ..Options::default()
    })
    .await
}

fn limits(lines: &str) -> String {
    format!("[limits]\n{lines}\n")
}

/// Answers `METHOD /path ` followed by the request body it received.
async fn echo(request: Request<Incoming>) -> Response<ShardBody> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let mut answer = format!("{} {} ", parts.method, parts.uri.path()).into_bytes();
    answer.extend_from_slice(&body);
    Response::new(full(answer))
}

// ---------------------------------------------------------------------------
// Pipelining and the hand-off.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_on_the_loop() {
    let fixture = one_backend("").await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut client = Client::open(fixture.running.addr).await;

    // Three complete requests in one write: the loop finds the second and
    // third already in its buffer after the first.
    let mut pipelined = Vec::new();
    for path in ["/p1", "/p2", "/p3"] {
        pipelined.extend_from_slice(&get(path, &key));
    }
    client.send(&pipelined).await;
    for path in ["/p1", "/p2", "/p3"] {
        let response = client.response(false).await;
        assert_eq!(response.status, 200, "{path}: {}", response.head);
        assert_eq!(served_path(&response), path, "answers out of order");
    }
    let seen: Vec<String> = fixture.backends[0]
        .seen()
        .into_iter()
        .map(|seen| seen.path)
        .collect();
    assert_eq!(seen, ["/p1", "/p2", "/p3"]);

    // The connection is still in step: a fourth request on it is answered.
    client.send(&get("/p4", &key)).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(served_path(&response), "/p4");
    assert!(
        client.received.is_empty(),
        "bytes beyond the four responses: {:?}",
        String::from_utf8_lossy(&client.received)
    );
}

/// A POST with a body that a naive parser would take for a second request.
fn post_with_body(key: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = request(
        "POST",
        "/upload",
        key,
        &format!(
            "content-length: {}\r\nidempotency-key: upload-1\r\n",
            body.len()
        ),
    );
    bytes.extend_from_slice(body);
    bytes
}

const TRICKY_BODY: &[u8] =
    b"first line\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: gw\r\n\r\n\x00\xff end";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_body_hands_the_connection_to_hyper_and_it_keeps_serving() {
    let shard = CustomShard::start(echo).await;
    let fixture = shard.gateway().await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut client = Client::open(fixture.running.addr).await;

    // A bodiless GET: served by the loop.
    client.send(&get("/before", &key)).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(response.body, b"GET /before ");

    // A POST with a body: the loop hands the connection to hyper, which
    // must read the head the loop already read and then the body.
    client.send(&post_with_body(&key, TRICKY_BODY)).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    let mut expected = b"POST /upload ".to_vec();
    expected.extend_from_slice(TRICKY_BODY);
    assert_eq!(
        response.body,
        expected,
        "the backend did not receive the body intact: {:?}",
        String::from_utf8_lossy(&response.body)
    );

    // The same connection, now hyper's, serves the next GET.
    client.send(&get("/after", &key)).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(response.body, b"GET /after ");
    assert_eq!(
        shard.seen(),
        ["GET /before", "POST /upload", "GET /after"],
        "the body was taken for a request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_in_the_middle_of_a_pipeline_keeps_every_byte_read_so_far() {
    // The loop reads the POST's head, its body and the GET after it in one
    // read before it sees that the POST is not its to serve: all of it has
    // to reach hyper, in order.
    let shard = CustomShard::start(echo).await;
    let fixture = shard.gateway().await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut client = Client::open(fixture.running.addr).await;
    let mut pipelined = get("/first", &key);
    pipelined.extend_from_slice(&post_with_body(&key, TRICKY_BODY));
    pipelined.extend_from_slice(&get("/last", &key));
    client.send(&pipelined).await;

    let first = client.response(false).await;
    assert_eq!(first.body, b"GET /first ", "{}", first.head);
    let post = client.response(false).await;
    let mut expected = b"POST /upload ".to_vec();
    expected.extend_from_slice(TRICKY_BODY);
    assert_eq!(
        post.body,
        expected,
        "{}: {:?}",
        post.head,
        String::from_utf8_lossy(&post.body)
    );
    let last = client.response(false).await;
    assert_eq!(last.body, b"GET /last ", "{}", last.head);
    assert_eq!(shard.seen(), ["GET /first", "POST /upload", "GET /last"]);
}

// ---------------------------------------------------------------------------
// Response framing on the loop.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_request_gets_the_length_but_no_body_and_the_connection_stays_in_step() {
    let fixture = one_backend("").await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut client = Client::open(fixture.running.addr).await;

    client.send(&request("HEAD", "/head", &key, "")).await;
    let head = client.response(true).await;
    assert_eq!(head.status, 200, "{}", head.head);
    let length: usize = head
        .header("content-length")
        .unwrap_or_else(|| panic!("no content-length on the HEAD answer: {}", head.head))
        .parse()
        .unwrap();
    assert!(length > 0, "the backend's length was not passed on");
    assert!(head.header("transfer-encoding").is_none(), "{}", head.head);

    // Had any body bytes followed the HEAD answer, they would sit in front
    // of the next response and its status line would not parse.
    client.send(&get("/after-head", &key)).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(served_path(&response), "/after-head");
    assert!(
        client.received.is_empty(),
        "stray bytes after the GET: {:?}",
        String::from_utf8_lossy(&client.received)
    );
    let methods: Vec<String> = fixture.backends[0]
        .seen()
        .into_iter()
        .map(|seen| seen.method)
        .collect();
    assert_eq!(methods, ["HEAD", "GET"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_backend_sends_chunked_reaches_the_client_chunked_and_whole() {
    // The first response streams what the test sends on a channel (so the
    // loop writes the head and a first chunk, then waits for the rest);
    // every later one is a few ready pieces of undeclared length.
    let (chunks, streamed) = mpsc::channel::<std::io::Result<Bytes>>(4);
    let streamed = Arc::new(Mutex::new(Some(streamed)));
    let shard = CustomShard::start(move |_request| {
        let streamed = streamed.lock().unwrap().take();
        async move {
            match streamed {
                Some(streamed) => Response::new(TestBody::channel(streamed).boxed()),
                None => Response::new(
                    TestBody::frames([
                        Frame::data(Bytes::from_static(b"alpha,")),
                        Frame::data(Bytes::from_static(b"beta,")),
                        Frame::data(Bytes::from_static(b"gamma")),
                    ])
                    .boxed(),
                ),
            }
        }
    })
    .await;
    let fixture = shard.gateway().await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut client = Client::open(fixture.running.addr).await;

    chunks
        .send(Ok(Bytes::from_static(b"first;")))
        .await
        .unwrap();
    client.send(&get("/stream", &key)).await;
    // The head arrives while the backend still holds the rest of the body.
    let mut response = client.head().await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(
        response.header("transfer-encoding"),
        Some("chunked"),
        "{}",
        response.head
    );
    assert!(
        response.header("content-length").is_none(),
        "{}",
        response.head
    );
    // A chunk larger than the loop copies into its write buffer, then a
    // small one, then the end of the body.
    let large: Bytes = (0..20 * 1024).map(|i| (i % 251) as u8).collect();
    chunks.send(Ok(large.clone())).await.unwrap();
    chunks.send(Ok(Bytes::from_static(b";last"))).await.unwrap();
    drop(chunks);
    client.body(&mut response, false).await;
    let mut expected = b"first;".to_vec();
    expected.extend_from_slice(&large);
    expected.extend_from_slice(b";last");
    assert_eq!(response.body.len(), expected.len());
    assert!(response.body == expected, "the decoded body differs");

    // The last chunk was framed right: the next response on the
    // connection parses, and is chunked and whole as well.
    client.send(&get("/pieces", &key)).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(response.header("transfer-encoding"), Some("chunked"));
    assert_eq!(response.body, b"alpha,beta,gamma");
    assert!(
        client.received.is_empty(),
        "stray bytes: {:?}",
        String::from_utf8_lossy(&client.received)
    );
}

// ---------------------------------------------------------------------------
// Closing the connection.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_from_the_client_is_answered_then_the_connection_closes() {
    let fixture = one_backend("").await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut client = Client::open(fixture.running.addr).await;

    // A request pipelined after the closing one must not be served: the
    // client said it would send nothing more.
    let mut bytes = request("GET", "/bye", &key, "connection: close\r\n");
    bytes.extend_from_slice(&get("/too-late", &key));
    client.send(&bytes).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(served_path(&response), "/bye");
    assert_eq!(
        response.header("connection"),
        Some("close"),
        "{}",
        response.head
    );
    let rest = client.closed().await;
    assert!(
        rest.is_empty(),
        "bytes after the closing answer: {:?}",
        String::from_utf8_lossy(&rest)
    );
    let paths: Vec<String> = fixture.backends[0]
        .seen()
        .into_iter()
        .map(|seen| seen.path)
        .collect();
    assert_eq!(paths, ["/bye"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_head_after_a_good_request_gets_400_and_reaches_no_backend() {
    let fixture = one_backend("").await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut client = Client::open(fixture.running.addr).await;

    client.send(&get("/good", &key)).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    let before = fixture.total_backend_requests();
    assert_eq!(before, 1);

    // A header line without a colon: httparse refuses it, so the loop
    // hands the connection to hyper, which answers 400.
    client
        .send(&request("GET", "/bad", &key, "x-no-colon-here\r\n"))
        .await;
    let response = client.response(false).await;
    assert_eq!(response.status, 400, "{}", response.head);
    let rest = client.closed().await;
    assert!(
        rest.is_empty(),
        "bytes after the 400: {:?}",
        String::from_utf8_lossy(&rest)
    );
    assert_eq!(fixture.total_backend_requests(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_keep_alive_connections_at_once() {
    // A grace period far longer than every deadline here: a connection
    // that is only closed when it runs out fails the test.
    let fixture = one_backend(&limits("shutdown_grace_ms = 120000")).await;
    let key = fixture.api_key("tenant-0").to_owned();
    let addr = fixture.running.addr;

    // One idle connection still on the loop, one that hyper serves since a
    // request with a body.
    let mut looped = Client::open(addr).await;
    looped.send(&get("/idle", &key)).await;
    assert_eq!(looped.response(false).await.status, 200);
    let mut handed = Client::open(addr).await;
    handed.send(&post_with_body(&key, b"payload")).await;
    assert_eq!(handed.response(false).await.status, 200);

    let Fixture { running, .. } = fixture;
    let started = Instant::now();
    let shutdown = tokio::spawn(running.shutdown());
    for (name, client) in [("loop", &mut looped), ("hyper", &mut handed)] {
        let rest = client.closed().await;
        assert!(
            rest.is_empty(),
            "{name}: bytes on an idle connection at shutdown: {:?}",
            String::from_utf8_lossy(&rest)
        );
    }
    // Closing at once takes milliseconds; the grace period is 120 s. Ten
    // seconds tells the two apart even on a machine too busy for a tight
    // bound.
    let closed_after = started.elapsed();
    assert!(
        closed_after < Duration::from_secs(10),
        "idle connections closed only after {closed_after:?}"
    );
    timeout(DEADLINE, shutdown)
        .await
        .expect("shutdown waited for idle connections")
        .unwrap();
}

// ---------------------------------------------------------------------------
// The header-read timeout.

/// Sends `half` (a request head that never ends) on `client` and asserts
/// that the gateway then closes the connection, about `header_read_timeout`
/// after `started` and without a 2xx answer. `started` must come before
/// the gateway's timer can have started (before the connect, or before the
/// last request was sent), so that a busy test thread only makes the
/// measured time longer, never shorter.
async fn assert_half_head_closed(
    client: &mut Client,
    half: &[u8],
    started: Instant,
    header_read_timeout: Duration,
) {
    client.send(half).await;
    let answer = client.closed().await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= header_read_timeout * 3 / 4,
        "closed after {elapsed:?}, before the {header_read_timeout:?} timeout"
    );
    // Ten times the timeout: generous for a busy machine, and still far
    // under the 10 s default a timeout that ignored the setting would use.
    assert!(
        elapsed < header_read_timeout * 10,
        "closed only after {elapsed:?} with a {header_read_timeout:?} timeout"
    );
    assert!(
        !answer.starts_with(b"HTTP/1.1 2"),
        "a half head was answered: {:?}",
        String::from_utf8_lossy(&answer)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_head_is_closed_after_the_header_read_timeout() {
    // Long enough that the paced requests below (one every TIMEOUT / 4)
    // reach the gateway in time even when the test thread is starved for a
    // while; short enough for the upper bound to stay well under the 10 s
    // default.
    const TIMEOUT: Duration = Duration::from_millis(500);
    let fixture = one_backend(&limits("header_read_timeout_ms = 500")).await;
    let key = fixture.api_key("tenant-0").to_owned();
    let addr = fixture.running.addr;
    let half = format!("GET /stalled HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\n");

    // On a fresh connection, the timeout runs from the accept.
    let started = Instant::now();
    let mut fresh = Client::open(addr).await;
    assert_half_head_closed(&mut fresh, half.as_bytes(), started, TIMEOUT).await;

    // A connection kept busy for longer than the timeout stays open: the
    // timeout runs again for each request, on the connection's one reused
    // timer, which fires at the first request's deadline and must then wait
    // for the later one rather than close the connection. (The interval only
    // paces the requests; every answer is read before the next is sent.)
    let mut reused = Client::open(addr).await;
    let busy_from = Instant::now();
    let mut pace = tokio::time::interval(TIMEOUT / 4);
    let mut sent = 0;
    let mut last_sent = busy_from;
    while busy_from.elapsed() < TIMEOUT * 2 {
        pace.tick().await;
        last_sent = Instant::now();
        reused.send(&get("/busy", &key)).await;
        let response = reused.response(false).await;
        assert_eq!(
            response.status,
            200,
            "request {sent} after {:?}: {}",
            busy_from.elapsed(),
            response.head
        );
        sent += 1;
    }
    // Then the timeout runs from the end of the last response, which came
    // after the last request was sent.
    assert_half_head_closed(&mut reused, half.as_bytes(), last_sent, TIMEOUT).await;
    let paths: Vec<String> = fixture.backends[0]
        .seen()
        .into_iter()
        .map(|seen| seen.path)
        .collect();
    assert_eq!(
        paths,
        vec!["/busy"; sent],
        "a stalled head reached the backend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_quiet_for_a_second_parks_serves_its_next_request_and_keeps_its_deadline() {
    // Longer than the gateway's one second of quiet before it parks an
    // idle connection (giving back its buffers and its request future's
    // room), so that each wait below parks first.
    const TIMEOUT: Duration = Duration::from_millis(3000);
    let fixture = one_backend(&limits("header_read_timeout_ms = 3000")).await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut client = Client::open(fixture.running.addr).await;
    client.send(&get("/first", &key)).await;
    assert_eq!(client.response(false).await.status, 200);

    // Parked, then woken by the next request: served as any other.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sent = Instant::now();
    client.send(&get("/after-parking", &key)).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(served_path(&response), "/after-parking");

    // Parked again, and woken by half a head: the head is still due by
    // the deadline its wait began with, not a fresh one from the wake-up.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let half = format!("GET /stalled HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\n");
    assert_half_head_closed(&mut client, half.as_bytes(), sent, TIMEOUT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_cancels_its_request_at_once() {
    // A shard that takes every request and never answers: only the client
    // hanging up can end the request before the long per-try timeout.
    let shard = CustomShard::start(|_request| std::future::pending()).await;
    let fixture = Fixture::start(Options {
        routing: "per_try_timeout_ms = 30000\nrequest_timeout_ms = 60000\n".into(),
        ..shard.options()
    })
    .await;
    let key = fixture.api_key("tenant-0").to_owned();
    let gateway = &fixture.running.gateway;
    let in_flight = || {
        gateway
            .snapshot()
            .all_shards()
            .map(|shard| shard.in_flight())
            .sum::<u64>()
    };

    let mut client = Client::open(fixture.running.addr).await;
    client.send(&get("/held", &key)).await;
    assert!(
        eventually(Duration::from_secs(5), || shard.seen() == ["GET /held"]).await,
        "the request never reached the shard"
    );
    assert_eq!(in_flight(), 1, "the held request is in flight");

    drop(client);
    // Cancelled as soon as the gateway sees the connection close, not at
    // the 30 s per-try timeout.
    assert!(
        eventually(Duration::from_secs(5), || in_flight() == 0).await,
        "the request outlived its client"
    );
}

// ---------------------------------------------------------------------------
// The connection's memory of its API key.

/// The tenant the backend was told the last request came from.
fn last_tenant(fixture: &Fixture) -> String {
    let seen = fixture.backends[0].seen();
    let last = seen.last().expect("the backend saw no request");
    last.header("x-shuffle-tenant")[0].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reuses_its_tenant_only_for_the_same_key_in_the_same_snapshot() {
    let fixture = Fixture::start(Options {
        shards: 1,
        tenants: 3,
        k: 1,
        admin_token: Some("memo-test-admin-token-0123456789".into()),
        ..Options::default()
    })
    .await;
    let keys: Vec<String> = (0..3)
        .map(|t| fixture.api_key(&format!("tenant-{t}")).to_owned())
        .collect();
    let mut client = Client::open(fixture.running.addr).await;
    let mut ask = async |key: &str| {
        client.send(&get("/memo", key)).await;
        client.response(false).await.status
    };

    // The same key twice, then another tenant's key on the same
    // connection: each request is its own key's tenant.
    assert_eq!(ask(&keys[0]).await, 200);
    assert_eq!(last_tenant(&fixture), "tenant-0");
    assert_eq!(ask(&keys[0]).await, 200);
    assert_eq!(last_tenant(&fixture), "tenant-0");
    assert_eq!(ask(&keys[1]).await, 200);
    assert_eq!(last_tenant(&fixture), "tenant-1");
    // A key one byte off the remembered one, or a prefix of it, is no key.
    let mut off = keys[1].clone().into_bytes();
    *off.last_mut().unwrap() ^= 1;
    assert_eq!(ask(std::str::from_utf8(&off).unwrap()).await, 401);
    assert_eq!(ask(&keys[1][..keys[1].len() - 1]).await, 401);
    assert_eq!(ask(&keys[1]).await, 200);
    assert_eq!(last_tenant(&fixture), "tenant-1");

    // tenant-1 is removed by a reload: its key, remembered by this open
    // connection, is refused on it at once.
    let path = fixture.dir.path().join("tenants.toml");
    let tenants = std::fs::read_to_string(&path).unwrap();
    let without: String = tenants
        .split("[[tenants]]")
        .filter(|block| !block.contains("id = \"tenant-1\""))
        .collect::<Vec<_>>()
        .join("[[tenants]]");
    std::fs::write(&path, without).unwrap();
    let (status, _, body) = fixture
        .admin(
            "POST",
            "/admin/reload",
            Some("memo-test-admin-token-0123456789"),
        )
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(ask(&keys[1]).await, 401);
    assert_eq!(ask(&keys[2]).await, 200);
    assert_eq!(last_tenant(&fixture), "tenant-2");
}
