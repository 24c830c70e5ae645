//! The transport end to end: request head and body limits, the slowloris
//! timeout, streamed responses, backends that break off or drop idle
//! connections, graceful shutdown, and response header hygiene.
//!
//! Where the test backend cannot misbehave in the way a test needs (a huge
//! or held-open response body, placement headers on the response, a
//! keep-alive connection closed just as it is reused), the test runs its
//! own small server as the shard (`Options::custom_shards`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use backend::Mode;
use bytes::Bytes;
use gateway::health::Availability;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

use crate::util::{
    CustomShard, Fixture, Options, TestBody, eventually, only_shard, raw_until_closed,
    read_while_open, text,
};

/// How long anything in these tests may take before it counts as a hang:
/// far beyond what any step takes on a busy 2-core machine, so only a hang
/// reaches it. Tests that pin a timeout's length assert their own bound.
const DEADLINE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// Helpers: raw connections and bodies (a test's own shard is
// `util::CustomShard`).

/// Reads until the peer closes the connection (EOF or reset); panics if it
/// is still open after [`DEADLINE`].
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    assert!(
        read_while_open(stream, &mut received, DEADLINE).await,
        "the gateway neither answered nor closed the connection"
    );
    received
}

/// The status line of a raw answer, for assertion messages.
fn status_line(answer: &str) -> &str {
    answer.lines().next().unwrap_or("<nothing>")
}

/// Asserts that a raw answer has `status`; a failure names `context` and
/// the status line received.
fn assert_status(answer: &str, status: u16, context: &str) {
    assert!(
        answer.starts_with(&format!("HTTP/1.1 {status}")),
        "{context}: {}",
        status_line(answer)
    );
}

/// A request to the gateway as the fixture's first tenant.
fn request(fixture: &Fixture, method: &str, path: &str) -> http::request::Builder {
    let (_, key) = &fixture.tenants[0];
    Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", fixture.running.addr))
        .header("authorization", format!("Bearer {key}"))
}

fn empty() -> Full<Bytes> {
    Full::new(Bytes::new())
}

fn limits(lines: &str) -> String {
    format!("[limits]\n{lines}\n")
}

/// Two tenants on `shards` test backends (k = 1 when there is one), with
/// `limits` (when not empty) as the `[limits]` table.
fn small(shards: usize, limits_lines: &str) -> Options {
    Options {
        shards,
        tenants: 2,
        k: if shards == 1 { 1 } else { 2 },
        extra: if limits_lines.is_empty() {
            String::new()
        } else {
            limits(limits_lines)
        },
        ..Options::default()
    }
}

// ---------------------------------------------------------------------------
// 1. Request head size.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_heads_get_431_and_reach_nobody() {
    let fixture = Fixture::start(small(2, "max_header_bytes = 16384")).await;
    let addr = fixture.running.addr;
    let key = fixture.tenants[0].1.clone();

    let one_big_header = format!(
        "GET / HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\nx-big: {}\r\n\r\n",
        "a".repeat(32 * 1024)
    );
    let answer = raw_until_closed(addr, one_big_header.as_bytes(), DEADLINE).await;
    assert_status(&answer, 431, "one 32 KiB header");

    let many_headers: String = (0..70)
        .map(|i| format!("x-h{i}: {}\r\n", "b".repeat(300)))
        .collect();
    let many =
        format!("GET / HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\n{many_headers}\r\n");
    let answer = raw_until_closed(addr, many.as_bytes(), DEADLINE).await;
    assert_status(&answer, 431, "70 headers of 300 bytes");
    assert_eq!(fixture.total_backend_requests(), 0);

    // A head under the limit passes.
    let fits = format!(
        "GET / HTTP/1.1\r\nhost: gw\r\nconnection: close\r\nauthorization: Bearer {key}\r\nx-big: {}\r\n\r\n",
        "c".repeat(12 * 1024)
    );
    let answer = raw_until_closed(addr, fits.as_bytes(), DEADLINE).await;
    assert_status(&answer, 200, "a 12 KiB head");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_limit_below_hypers_minimum_buffer_is_still_enforced() {
    // hyper's read buffer cannot be smaller than 8 KiB; a smaller
    // configured limit must still be the limit.
    let fixture = Fixture::start(small(2, "max_header_bytes = 4096")).await;
    let addr = fixture.running.addr;
    let key = fixture.tenants[0].1.clone();
    let head = |filler: usize| {
        format!(
            "GET / HTTP/1.1\r\nhost: gw\r\nconnection: close\r\nauthorization: Bearer {key}\r\nx-fill: {}\r\n\r\n",
            "d".repeat(filler)
        )
    };
    let answer = raw_until_closed(addr, head(6 * 1024).as_bytes(), DEADLINE).await;
    assert_status(&answer, 431, "a 6 KiB head with a 4 KiB limit");
    assert_eq!(fixture.total_backend_requests(), 0);
    let answer = raw_until_closed(addr, head(3 * 1024).as_bytes(), DEADLINE).await;
    assert_status(&answer, 200, "a 3 KiB head with a 4 KiB limit");
}

// ---------------------------------------------------------------------------
// 2. Request body size.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_bodies_over_the_limit_get_413_and_reach_nobody() {
    let fixture = Fixture::start(small(2, "max_body_bytes = 65536")).await;
    let key = fixture.tenants[0].1.clone();

    // Only the head: the gateway must not wait for a body it will refuse.
    let head = format!(
        "PUT /upload HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\ncontent-length: 1000000\r\n\r\n"
    );
    let answer = raw_until_closed(fixture.running.addr, head.as_bytes(), DEADLINE).await;
    assert_status(&answer, 413, "the head of a 1 MB body");

    // A client that sends the whole body anyway still reads the 413.
    for method in ["PUT", "POST"] {
        let body = Full::new(Bytes::from(vec![b'x'; 256 * 1024]));
        let response = timeout(
            DEADLINE,
            fixture
                .client
                .request(request(&fixture, method, "/upload").body(body).unwrap()),
        )
        .await
        .expect("never a hang")
        .expect("the client reads the answer");
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE, "{method}");
    }
    assert_eq!(fixture.total_backend_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_still_uploading_when_refused_can_finish_and_read_the_413() {
    // Many clients write the whole body before they read anything. Here
    // the body (4 MiB) is far larger than the limit and than the socket
    // buffers, so the gateway answers 413 before the client has finished
    // writing. The gateway must keep reading (and discarding) the rest for
    // a while instead of closing at once: closing with unread data resets
    // the connection, the client's write fails and it never sees the 413.
    let fixture = Fixture::start(small(1, "max_body_bytes = 65536")).await;
    let key = fixture.tenants[0].1.clone();
    let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
    let mut request = format!(
        "POST /upload HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\ncontent-length: 4194304\r\n\r\n"
    )
    .into_bytes();
    request.extend_from_slice(&vec![b'z'; 4 * 1024 * 1024]);
    timeout(DEADLINE, stream.write_all(&request))
        .await
        .expect("the gateway stopped reading without closing")
        .expect("the gateway reset the connection while the client was still sending");
    let mut received = Vec::new();
    let mut buffer = [0_u8; 4096];
    let ended = timeout(DEADLINE, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) => return Ok(()),
                Ok(n) => received.extend_from_slice(&buffer[..n]),
                Err(error) => return Err(error),
            }
        }
    })
    .await
    .expect("the gateway neither answered nor closed the connection");
    let answer = String::from_utf8_lossy(&received).to_ascii_lowercase();
    assert!(
        answer.starts_with("http/1.1 413"),
        "{}",
        status_line(&answer)
    );
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(ended.is_ok(), "the connection was reset: {ended:?}");
    assert_eq!(fixture.total_backend_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_limit_is_cut_off_and_answered_413() {
    // Decided behaviour: the gateway stops forwarding at the limit and
    // aborts the backend request (the backend sees a truncated body and a
    // closed connection, never the whole body); the client gets 413. The
    // shard is not blamed: the client's oversized body is not a shard
    // failure.
    const LIMIT: usize = 64 * 1024;
    let fixture = Fixture::start(small(1, &format!("max_body_bytes = {LIMIT}"))).await;
    let client: Client<HttpConnector, TestBody> =
        Client::builder(TokioExecutor::new()).build_http();
    for (method, headers) in [
        ("POST", &[][..]),
        ("PUT", &[][..]),
        ("POST", &[("idempotency-key", "k1")][..]),
    ] {
        let body = TestBody::filler(Bytes::from(vec![b'y'; 16 * 1024]), 16 * 16 * 1024, false);
        let mut builder = request(&fixture, method, "/upload");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let response = timeout(DEADLINE, client.request(builder.body(body).unwrap()))
            .await
            .expect("never a hang")
            .expect("the client reads the answer");
        assert_eq!(
            response.status(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "{method} {headers:?}"
        );
    }
    for seen in fixture.backends[0].seen() {
        assert!(
            seen.body_len <= LIMIT,
            "the backend received {} bytes of a body over the {LIMIT}-byte limit",
            seen.body_len
        );
    }
    let shard = fixture.shard("s0");
    assert_eq!(
        shard.failures.load(Ordering::Relaxed),
        0,
        "the shard was blamed"
    );
    // The gateway and the shard still serve.
    let (status, _) = fixture.get(&fixture.tenants[0].0.clone(), "/").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stalls_its_body_is_answered_and_the_shard_not_blamed() {
    // Slow-body (R.U.D.Y.) clients: the head arrives in time, the body never
    // does. Bodies buffered for replay and streamed bodies are both bounded
    // by the request deadline, and the stall is the client's, not the
    // shard's.
    let fixture = Fixture::start(Options {
        routing: "request_timeout_ms = 400\n".into(),
        ..small(1, "")
    })
    .await;
    let key = fixture.tenants[0].1.clone();
    for (method, length) in [("PUT", 100), ("POST", 100_000)] {
        let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
        let head = format!(
            "{method} /upload HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\ncontent-length: {length}\r\n\r\n0123456789"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        let answer = String::from_utf8_lossy(&read_until_closed(&mut stream).await).into_owned();
        assert_status(&answer, 408, method);
        // Ten times the 400 ms request deadline: room for a busy machine,
        // while a body wait that the deadline did not bound would run into
        // DEADLINE (or this bound) instead.
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(4), "{method}: {elapsed:?}");
    }
    let shard = fixture.shard("s0");
    assert_eq!(
        shard.failures.load(Ordering::Relaxed),
        0,
        "the shard was blamed"
    );
}

// ---------------------------------------------------------------------------
// Connection cap.

/// Sends one GET for `tenant` on an open connection and reads the answer's
/// head (the test backend's answers are small, so the head and body arrive
/// together).
async fn get_on(stream: &mut TcpStream, fixture: &Fixture, tenant: &str) -> String {
    let request = format!(
        "GET /capped HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {}\r\n\r\n",
        fixture.api_key(tenant)
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = vec![0_u8; 4096];
    let read = stream.read(&mut buffer).await.unwrap();
    String::from_utf8_lossy(&buffer[..read]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_connections_clients_wait_until_a_connection_closes() {
    let fixture = Fixture::start(small(1, "max_connections = 1")).await;
    let addr = fixture.running.addr;
    let tenant = "tenant-0";

    // The first client holds the only slot with a kept-alive connection.
    let mut first = TcpStream::connect(addr).await.unwrap();
    assert!(
        get_on(&mut first, &fixture, tenant)
            .await
            .starts_with("HTTP/1.1 200")
    );

    // The second connects (the kernel queues it) but is not served while
    // the first is open.
    let mut second = TcpStream::connect(addr).await.unwrap();
    let waiting = timeout(
        Duration::from_millis(300),
        get_on(&mut second, &fixture, tenant),
    )
    .await;
    assert!(
        waiting.is_err(),
        "served beyond max_connections: {waiting:?}"
    );

    // The first is still served; once it closes, the second is.
    assert!(
        get_on(&mut first, &fixture, tenant)
            .await
            .starts_with("HTTP/1.1 200")
    );
    drop(first);
    let mut buffer = vec![0_u8; 4096];
    let read = timeout(DEADLINE, second.read(&mut buffer))
        .await
        .expect("the waiting client is served once a slot frees")
        .unwrap();
    assert!(String::from_utf8_lossy(&buffer[..read]).starts_with("HTTP/1.1 200"));
}

// ---------------------------------------------------------------------------
// 3. Slowloris.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_connection_is_closed_after_the_header_timeout() {
    let fixture = Fixture::start(small(1, "header_read_timeout_ms = 300")).await;
    let addr = fixture.running.addr;

    // A head trickled one line every 50 ms, never finished.
    let started = Instant::now();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        let mut pace = tokio::time::interval(Duration::from_millis(50));
        writer.write_all(b"GET / HTTP/1.1\r\n").await?;
        for i in 0_u32.. {
            pace.tick().await;
            writer
                .write_all(format!("x-slow-{i}: 1\r\n").as_bytes())
                .await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let closed = timeout(DEADLINE, async {
        let mut buffer = [0_u8; 1024];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    trickle.abort();
    let elapsed = started.elapsed();
    assert!(
        closed.is_ok(),
        "a trickling client was still connected after {DEADLINE:?}"
    );
    assert!(
        elapsed >= Duration::from_millis(250),
        "closed after {elapsed:?}, before the header timeout"
    );

    // A client that connects and sends nothing at all.
    let started = Instant::now();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(read_until_closed(&mut silent).await.is_empty());
    // Ten times the 300 ms header timeout: the header timeout closed it,
    // not some later one.
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(3), "closed after {elapsed:?}");
    assert_eq!(fixture.total_backend_requests(), 0);
}

// ---------------------------------------------------------------------------
// 4. Streaming.

/// A shard whose first response streams what the test sends on the
/// returned channel.
async fn streaming_shard() -> (CustomShard, mpsc::Sender<std::io::Result<Bytes>>) {
    let (chunks, held) = mpsc::channel(4);
    let held = Arc::new(Mutex::new(Some(held)));
    let shard = CustomShard::start(move |_request| {
        let body = held.lock().unwrap().take();
        async move {
            match body {
                Some(body) => Response::new(TestBody::channel(body).boxed()),
                None => text(500, "one streamed response per test"),
            }
        }
    })
    .await;
    (shard, chunks)
}

/// A GET whose response has begun streaming: through a gateway over a
/// [`streaming_shard`], its head and first chunk have arrived while the
/// shard still holds the rest.
struct Streaming {
    /// Serves until the test ends.
    _shard: CustomShard,
    fixture: Fixture,
    /// The rest of the body: what the test sends, until it drops this.
    chunks: mpsc::Sender<std::io::Result<Bytes>>,
    status: StatusCode,
    /// The body after the first chunk.
    body: Incoming,
}

/// Starts a gateway with `options` (given the shard's) over a
/// [`streaming_shard`], has the shard send `first`, and sends a GET for
/// `path` that reads the head and checks that `first` arrives.
async fn streaming(
    options: impl FnOnce(Options) -> Options,
    path: &str,
    first: &'static [u8],
) -> Streaming {
    let (shard, chunks) = streaming_shard().await;
    let fixture = Fixture::start(options(shard.options())).await;
    chunks.send(Ok(Bytes::from_static(first))).await.unwrap();
    let response = get_head(&fixture, path).await;
    let status = response.status();
    let mut body = response.into_body();
    let frame = timeout(DEADLINE, body.frame())
        .await
        .expect("the first chunk arrives while the backend still holds the rest")
        .unwrap()
        .unwrap();
    assert_eq!(frame.into_data().unwrap(), first);
    Streaming {
        _shard: shard,
        fixture,
        chunks,
        status,
        body,
    }
}

/// Sends a GET for `path` and waits (within the deadline) for the
/// response head only; the body is the caller's to read.
async fn get_head(fixture: &Fixture, path: &str) -> Response<Incoming> {
    timeout(
        DEADLINE,
        fixture
            .client
            .request(request(fixture, "GET", path).body(empty()).unwrap()),
    )
    .await
    .expect("the response head arrives in time (while the backend may still hold the body)")
    .expect("the gateway answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_reach_the_client_before_the_backend_has_finished() {
    let streaming = streaming(|options| options, "/stream", b"first;").await;
    assert_eq!(streaming.status, StatusCode::OK);
    streaming
        .chunks
        .send(Ok(Bytes::from_static(b"second")))
        .await
        .unwrap();
    drop(streaming.chunks);
    let rest = timeout(DEADLINE, streaming.body.collect())
        .await
        .expect("the body ends when the backend's does")
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_larger_than_every_limit_streams_through() {
    const CHUNK: usize = 64 * 1024;
    const CHUNKS: usize = 128; // 8 MiB
    let shard = CustomShard::start(|_request| async {
        let chunk = Bytes::from((0..CHUNK).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
        Response::new(TestBody::filler(chunk, CHUNK * CHUNKS, true).boxed())
    })
    .await;
    let fixture = Fixture::start(Options {
        extra: limits("max_body_bytes = 1024\nmax_header_bytes = 1024"),
        routing: "max_replay_body_bytes = 1024\n".into(),
        ..shard.options()
    })
    .await;
    let response = get_head(&fixture, "/large").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-length"],
        (CHUNK * CHUNKS).to_string()
    );
    let mut body = response.into_body();
    let mut received = 0_usize;
    let read_all = timeout(DEADLINE, async {
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            for (offset, byte) in data.iter().enumerate() {
                assert_eq!(*byte, ((received + offset) % CHUNK % 251) as u8);
            }
            received += data.len();
        }
    })
    .await;
    assert!(read_all.is_ok(), "stalled after {received} bytes");
    assert_eq!(received, CHUNK * CHUNKS);
}

/// A raw shard that refuses `POST /upload` with 413 as soon as its head
/// arrives, without reading the body, and answers anything else with 200.
/// It keeps every byte that arrives on a connection after a refusal, so a
/// test can tell whether that connection was ever used again.
async fn refusing_shard() -> (SocketAddr, Arc<Mutex<Vec<u8>>>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let after_refusal = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&after_refusal);
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buffer = [0_u8; 16 * 1024];
                loop {
                    // These requests have no body, except the refused upload.
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let end = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    if head.starts_with(b"POST /upload ") {
                        let refusal =
                            b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\n\r\ntoo big!";
                        if stream.write_all(refusal).await.is_err() {
                            return;
                        }
                        kept.lock().unwrap().extend_from_slice(&head[end..]);
                        while let Ok(n @ 1..) = stream.read(&mut buffer).await {
                            kept.lock().unwrap().extend_from_slice(&buffer[..n]);
                        }
                        return;
                    }
                    head.drain(..end);
                    if stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, after_refusal, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_answers_before_the_upload_ends_is_heard_and_its_connection_retired() {
    // A backend may refuse a streamed upload before reading it. Its answer
    // reaches the client while the client is still uploading (no waiting
    // for the rest of the body, no failure for the half-sent request); the
    // client is told the connection closes (the rest of its body was never
    // read); and the backend connection, left in the middle of a request,
    // never carries another one.
    let (addr, after_refusal, task) = refusing_shard().await;
    let fixture = Fixture::start(only_shard(addr)).await;
    let client: Client<HttpConnector, TestBody> =
        Client::builder(TokioExecutor::new()).build_http();
    let (chunks, body) = mpsc::channel(4);
    chunks
        .send(Ok(Bytes::from(vec![b'u'; 1024])))
        .await
        .unwrap();
    // A POST without an Idempotency-Key is streamed, not buffered.
    let upload = request(&fixture, "POST", "/upload")
        .body(TestBody::channel(body))
        .unwrap();
    let response = timeout(DEADLINE, client.request(upload))
        .await
        .expect("the backend's answer arrives while the client still holds its body")
        .expect("the gateway answers");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        response
            .headers()
            .get("connection")
            .map(|v| v.to_str().unwrap()),
        Some("close")
    );
    let refusal = timeout(DEADLINE, response.into_body().collect())
        .await
        .expect("the refusal's body arrives")
        .unwrap()
        .to_bytes();
    assert_eq!(refusal, "too big!");
    drop(chunks);
    for round in 0..5 {
        let (status, body) = fixture.get(&fixture.tenants[0].0.clone(), "/after").await;
        assert_eq!(
            (status, &body[..]),
            (StatusCode::OK, &b"ok"[..]),
            "round {round}"
        );
    }
    let reused = String::from_utf8_lossy(&after_refusal.lock().unwrap()).into_owned();
    assert!(
        !reused.contains("GET "),
        "the connection left mid-request carried another request: {reused:?}"
    );
    task.abort();
}

// ---------------------------------------------------------------------------
// 5. A backend that resets mid-response.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_response_is_a_clean_error_for_the_client() {
    let fixture = Fixture::start(small(1, "")).await;
    fixture.backends[0].set_mode(Mode::ResetMidResponse);
    let outcome = timeout(DEADLINE, async {
        let response = fixture
            .client
            .request(request(&fixture, "GET", "/").body(empty()).unwrap())
            .await?;
        let status = response.status();
        let body = response.into_body().collect().await;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body.map(|b| b.to_bytes())))
    })
    .await
    .expect("the client hangs on a backend that reset mid-response");
    match outcome {
        // The backend's head never left it (hyper aborts before flushing
        // it): nothing reached the client yet, so the gateway answers 502.
        Ok((StatusCode::BAD_GATEWAY, body)) => assert!(body.is_ok()),
        // The head was already on its way: the body must fail, not end as
        // if it were complete.
        Ok((status, body)) => {
            assert_eq!(status, StatusCode::OK);
            assert!(body.is_err(), "a truncated body ended cleanly: {body:?}");
        }
        Err(_closed) => {}
    }
    let shard = fixture.shard("s0");
    assert!(
        eventually(DEADLINE, || shard.in_flight() == 0).await,
        "the broken response is still counted in flight"
    );
    fixture.backends[0].set_mode(Mode::Healthy);
    let (status, _) = fixture.get(&fixture.tenants[0].0.clone(), "/").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_after_the_client_got_part_of_the_body_fails_the_body() {
    let streaming = streaming(|options| options, "/", b"{\"partial\":").await;
    assert_eq!(streaming.status, StatusCode::OK);
    streaming
        .chunks
        .send(Err(std::io::Error::other("injected reset")))
        .await
        .unwrap();
    let rest = timeout(DEADLINE, streaming.body.collect())
        .await
        .expect("the client hangs after the backend reset");
    assert!(rest.is_err(), "a truncated body ended cleanly: {rest:?}");
}

// ---------------------------------------------------------------------------
// 6. Backends that close idle keep-alive connections.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_after_a_backend_restart_do_not_fail_on_stale_connections() {
    let fixture = Fixture::start(small(1, "")).await;
    let tenant = fixture.tenants[0].0.clone();
    let backend = &fixture.backends[0];
    // Fill the gateway's pool with several idle connections.
    let warm = (0..8).map(|_| fixture.get(&tenant, "/warm"));
    for (status, _) in join_all(warm).await {
        assert_eq!(status, StatusCode::OK);
    }
    // Restart the backend's listener: it drops every open connection.
    backend.set_mode(Mode::Killed);
    assert!(
        eventually(DEADLINE, || std::net::TcpStream::connect(backend.addr())
            .is_err())
        .await,
        "the backend did not stop listening"
    );
    backend.set_mode(Mode::Healthy);
    assert!(
        eventually(DEADLINE, || std::net::TcpStream::connect(backend.addr())
            .is_ok())
        .await,
        "the backend did not listen again"
    );
    let shard = fixture.shard("s0");
    let config = fixture.config();
    assert!(
        eventually(DEADLINE, || shard.availability(&config) == Availability::Up).await,
        "the health checker did not readmit the restarted backend"
    );
    let failures_before = shard.failures.load(Ordering::Relaxed);
    for _ in 0..10 {
        let (status, _) = fixture.get(&tenant, "/after").await;
        assert_eq!(status, StatusCode::OK);
    }
    let burst = (0..8).map(|_| fixture.get(&tenant, "/burst"));
    for (status, _) in join_all(burst).await {
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(shard.failures.load(Ordering::Relaxed), failures_before);
}

/// Awaits every future concurrently; the outputs in order.
async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<_> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (slot, output) in pending.iter_mut().zip(&mut outputs) {
            if let Some(future) = slot
                && let Poll::Ready(value) = future.as_mut().poll(cx)
            {
                *output = Some(value);
                *slot = None;
            }
        }
        if pending.iter().all(Option::is_none) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

/// A raw HTTP/1.1 shard that answers the first request on each connection
/// and keeps it alive, then closes the connection without answering as soon
/// as a second request arrives on it: the race of a backend closing an idle
/// keep-alive connection just as the gateway reuses it, made deterministic.
/// With `dies`, it also stops listening (first) as a killed process would.
struct ClosesReusedConnections {
    addr: SocketAddr,
    answered: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Drop for ClosesReusedConnections {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClosesReusedConnections {
    async fn start(dies: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answered = Arc::new(AtomicU64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let (a, d) = (Arc::clone(&answered), Arc::clone(&dropped));
        // A connection that is about to close asks the accept loop to stop
        // listening and waits until it has.
        let (die, mut dying) = mpsc::channel::<oneshot::Sender<()>>(1);
        let task = tokio::spawn(async move {
            loop {
                let (mut stream, _) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(_) => continue,
                    },
                    Some(stopped) = dying.recv() => {
                        drop(listener);
                        let _ = stopped.send(());
                        return;
                    }
                };
                let (answered, dropped, die) = (Arc::clone(&a), Arc::clone(&d), die.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0_u8; 4096];
                    let mut served = 0;
                    loop {
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut buffer).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => head.extend_from_slice(&buffer[..n]),
                            }
                        }
                        if head.starts_with(b"GET /healthz ") {
                            let _ = stream
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                                .await;
                            return;
                        }
                        if served == 1 {
                            dropped.fetch_add(1, Ordering::Relaxed);
                            if dies {
                                let (stopped, listening_stopped) = oneshot::channel();
                                if die.send(stopped).await.is_ok() {
                                    let _ = listening_stopped.await;
                                }
                            }
                            return;
                        }
                        served += 1;
                        answered.fetch_add(1, Ordering::Relaxed);
                        head.clear();
                        if stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            answered,
            dropped,
            task,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_request_on_a_connection_the_backend_just_closed_succeeds() {
    let shard = ClosesReusedConnections::start(false).await;
    let fixture = Fixture::start(only_shard(shard.addr)).await;
    let tenant = fixture.tenants[0].0.clone();
    for i in 0..5 {
        let (status, body) = fixture.get(&tenant, "/").await;
        assert_eq!(status, StatusCode::OK, "request {i}");
        assert_eq!(body, "ok");
    }
    assert_eq!(shard.answered.load(Ordering::Relaxed), 5);
    assert!(
        shard.dropped.load(Ordering::Relaxed) >= 1,
        "the test never made the gateway reuse a connection the backend closed"
    );

    // A POST without an idempotency key may have been received before the
    // connection closed, so it is not sent again.
    let dropped = shard.dropped.load(Ordering::Relaxed);
    let answered = shard.answered.load(Ordering::Relaxed);
    let (status, _, _) = fixture.send(Some(&tenant), "POST", "/", &[], b"").await;
    let replayed = shard.answered.load(Ordering::Relaxed) > answered;
    let was_dropped = shard.dropped.load(Ordering::Relaxed) > dropped;
    assert!(
        (status == StatusCode::BAD_GATEWAY && was_dropped && !replayed)
            || (status == StatusCode::OK && !was_dropped),
        "POST: {status}, dropped {was_dropped}, replayed {replayed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_as_its_pooled_connection_is_reused_costs_no_failed_get() {
    // The member dies (stops listening, drops its connections) just as the
    // gateway reuses a pooled connection to it. Nothing was answered and
    // the backend now refuses connections: the GET fails over to the other
    // member as on any refused connection, without the retry budget
    // (spent here on purpose).
    let dying = ClosesReusedConnections::start(true).await;
    let fixture = Fixture::start(Options {
        shards: 1,
        tenants: 2,
        k: 2,
        custom_shards: vec![("c0".into(), format!("http://{}", dying.addr))],
        extra: "[retry_budget]\nratio = 0.0\nmin_per_second = 0\n".into(),
        admin: "metrics_without_token = true\n".into(),
        ..Options::default()
    })
    .await;
    let tenant = fixture.tenants[0].0.clone();
    // Power of two choices alternates between the members at random; keep
    // going until a request has reused a connection to the dying member.
    let mut sent = 0;
    while dying.dropped.load(Ordering::Relaxed) == 0 {
        assert!(sent < 200, "the gateway never reused a connection to c0");
        sent += 1;
        let (status, _) = fixture.get(&tenant, "/").await;
        assert_eq!(status, StatusCode::OK, "request {sent}");
    }
    for _ in 0..5 {
        let (status, _) = fixture.get(&tenant, "/").await;
        assert_eq!(status, StatusCode::OK);
    }
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.count(
            "shuffle_retry_budget_exhausted_total",
            &[("cell", "default")]
        ),
        0.0
    );
}

// ---------------------------------------------------------------------------
// 7. Graceful shutdown.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_requests_then_refuses_connections() {
    // The shard holds the request until the test releases it, so "still in
    // flight while the listener closes" is an order the test sets, not a
    // race against a slow answer.
    let (release, held) = oneshot::channel::<()>();
    let held = Arc::new(Mutex::new(Some(held)));
    let shard = CustomShard::start(move |_request| {
        let held = held.lock().unwrap().take();
        async move {
            if let Some(held) = held {
                let _ = held.await;
            }
            text(200, "finished")
        }
    })
    .await;
    // Neither a timeout nor the grace period may end the held request
    // before the test releases it.
    let fixture = Fixture::start(Options {
        routing: "per_try_timeout_ms = 120000\nrequest_timeout_ms = 120000\n".into(),
        extra: limits("shutdown_grace_ms = 120000"),
        ..shard.options()
    })
    .await;
    let addr = fixture.running.addr;
    let in_flight = {
        let client = fixture.client.clone();
        let request = request(&fixture, "GET", "/slow").body(empty()).unwrap();
        tokio::spawn(async move {
            let response = client.request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body))
        })
    };
    assert!(
        eventually(DEADLINE, || shard.seen() == ["GET /slow"]).await,
        "the held request never reached the shard"
    );
    let Fixture { running, .. } = fixture;
    let shutdown = tokio::spawn(running.shutdown());
    // The listener closes as soon as shutdown starts, while the held
    // request is still in flight: new clients are refused rather than left
    // waiting in the accept queue. (Waiting for the grace period to end
    // would take 120 s, far beyond DEADLINE.)
    assert!(
        eventually(DEADLINE, || std::net::TcpStream::connect(addr).is_err()).await,
        "the listener still accepts connections during the shutdown grace period"
    );
    assert!(
        !in_flight.is_finished(),
        "shutdown ended the request in flight"
    );
    release.send(()).unwrap();
    let (status, body) = timeout(DEADLINE, in_flight)
        .await
        .expect("the in-flight request did not finish")
        .unwrap()
        .expect("the in-flight request failed");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "finished");
    timeout(DEADLINE, shutdown)
        .await
        .expect("shutdown did not return")
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_responses_that_outlast_the_grace_period() {
    // A response the backend never finishes: shutdown waits the grace
    // period, then the connection is closed rather than left running.
    let mut streaming = streaming(
        |options| Options {
            extra: limits("shutdown_grace_ms = 200"),
            ..options
        },
        "/forever",
        b"begun;",
    )
    .await;
    let Fixture { running, .. } = streaming.fixture;
    let started = Instant::now();
    timeout(DEADLINE, running.shutdown())
        .await
        .expect("shutdown did not return after its grace period");
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(150), "{elapsed:?}");
    // 25 times the configured grace, and half the default one (10 s): a
    // shutdown that ignored the setting fails here.
    assert!(
        elapsed < Duration::from_secs(5),
        "shutdown took {elapsed:?} with a 200 ms grace period"
    );
    let end = timeout(DEADLINE, streaming.body.frame())
        .await
        .expect("the response outlived the shutdown grace period");
    assert!(!matches!(end, Some(Ok(_))), "data after shutdown: {end:?}");
    drop(streaming.chunks);
}

// ---------------------------------------------------------------------------
// 8. Response header hygiene.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_and_hop_by_hop_headers_never_reach_the_client() {
    let shard = CustomShard::start(|request| async move {
        let mut response = if request.uri().path() == "/fail" {
            text(503, "down")
        } else {
            text(200, "up")
        };
        let headers = response.headers_mut();
        headers.insert("x-shuffle-shard", "c0".parse().unwrap());
        headers.insert("x-shuffle-tenant", "someone".parse().unwrap());
        headers.insert("x-shuffle-subset", "c0,c1".parse().unwrap());
        headers.insert("connection", "x-hop".parse().unwrap());
        headers.insert("x-hop", "1".parse().unwrap());
        headers.insert("keep-alive", "timeout=5".parse().unwrap());
        headers.insert("x-kept", "1".parse().unwrap());
        response
    })
    .await;
    let fixture = Fixture::start(shard.options()).await;
    let tenant = fixture.tenants[0].0.clone();
    // A served response, and a retryable status passed on as the last
    // answer once nothing else may be tried; each for a GET (the
    // connection's own loop writes the backend's fields) and a POST with a
    // body (hyper writes them, from a header map).
    for (method, body, path, expected) in [
        ("GET", &b""[..], "/ok", StatusCode::OK),
        ("GET", b"", "/fail", StatusCode::SERVICE_UNAVAILABLE),
        ("POST", b"payload", "/ok", StatusCode::OK),
        ("POST", b"payload", "/fail", StatusCode::SERVICE_UNAVAILABLE),
    ] {
        let (status, headers, _) = fixture.send(Some(&tenant), method, path, &[], body).await;
        assert_eq!(status, expected, "{method} {path}");
        for name in headers.keys() {
            assert!(
                !name.as_str().starts_with("x-shuffle-"),
                "{method} {path}: {name} reached the client"
            );
        }
        for gone in ["x-hop", "keep-alive"] {
            assert!(
                headers.get(gone).is_none(),
                "{method} {path}: {gone} reached the client"
            );
        }
        assert_eq!(headers["x-kept"], "1", "{method} {path}");
    }
}
