//! gRPC calls from clients: the gateway's own errors as gRPC answers a real
//! gRPC client (tonic's generated health client, over h2c) decodes as the
//! right code, `grpc-timeout` shortening the deadline and restated to the
//! shard, the failover rules on trailers-only answers, and the HTTP/2
//! hygiene that keeps anything a client sends over HTTP/2 from becoming
//! something else on a shard's HTTP/1.1 connection (frames written by
//! hand where a client library refuses to send them).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backend::Mode;
use bytes::Bytes;
use gateway::syntax::grpc::parse_timeout;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::util::{CustomShard, Fixture, Options, ShardBody, eventually, full};

/// The method every call here makes.
const CHECK: &str = "/grpc.health.v1.Health/Check";

/// A tonic channel to the gateway's plaintext listener (h2c, prior
/// knowledge).
async fn channel(fixture: &Fixture) -> Channel {
    Endpoint::from_shared(format!("http://{}", fixture.running.addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A health check call as `tenant` (by API key, in metadata), with
/// `service` as its one field (its length sets the message's), and the
/// client's timeout when given.
pub(crate) fn check(
    fixture: &Fixture,
    tenant: Option<&str>,
    service: String,
    timeout: Option<Duration>,
) -> tonic::Request<HealthCheckRequest> {
    let mut request = tonic::Request::new(HealthCheckRequest { service });
    if let Some(tenant) = tenant {
        request
            .metadata_mut()
            .insert("x-api-key", fixture.api_key(tenant).parse().unwrap());
    }
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    request
}

/// Makes the call and returns its error status (every call here fails).
pub(crate) async fn status_of(
    fixture: &Fixture,
    request: tonic::Request<HealthCheckRequest>,
) -> tonic::Status {
    let mut client = HealthClient::new(channel(fixture).await);
    client
        .check(request)
        .await
        .expect_err("the gateway answers every call here with an error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_is_unauthenticated() {
    let fixture = Fixture::start(Options::default()).await;
    let status = status_of(&fixture, check(&fixture, None, String::new(), None)).await;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(!status.message().is_empty());
    let status = status_of(&fixture, {
        let mut request = check(&fixture, None, String::new(), None);
        request
            .metadata_mut()
            .insert("x-api-key", "not-a-key".parse().unwrap());
        request
    })
    .await;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(fixture.total_backend_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_down_is_unavailable_and_counted_as_such() {
    let fixture = Fixture::start(Options {
        admin_token: Some("t".repeat(32)),
        ..Options::default()
    })
    .await;
    for backend in &fixture.backends {
        backend.set_mode(Mode::Killed);
    }
    let status = status_of(
        &fixture,
        check(&fixture, Some("tenant-1"), String::new(), None),
    )
    .await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // Metrics: the gRPC status beside the HTTP outcome it stands for.
    let token = "t".repeat(32);
    let (_, _, body) = fixture.admin("GET", "/metrics", Some(&token)).await;
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains(
            "shuffle_grpc_requests_total{cell=\"default\",grpc_status=\"UNAVAILABLE\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("shuffle_requests_total{cell=\"default\",outcome=\"unavailable\"} 1"),
        "{text}"
    );
}

/// A shard that never answers and records every request head it gets.
async fn silent_shard(heads: Arc<Mutex<Vec<http::HeaderMap>>>) -> CustomShard {
    CustomShard::start(move |request| {
        heads.lock().unwrap().push(request.headers().clone());
        async move {
            tokio::time::sleep(Duration::from_secs(120)).await;
            Response::new(full(Bytes::new()))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_try_timeout_is_deadline_exceeded() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let shard = silent_shard(Arc::clone(&heads)).await;
    let fixture = shard.gateway().await;
    let status = status_of(
        &fixture,
        check(&fixture, Some("tenant-1"), String::new(), None),
    )
    .await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(status.message(), "the backend did not answer in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_timeout_shortens_the_deadline_and_the_shard_is_told_what_is_left() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let shard = silent_shard(Arc::clone(&heads)).await;
    // The gateway's own limits are far off: only the call's 200 ms can end
    // it before the shard answers (which it never does).
    let fixture = Fixture::start(Options {
        routing: "per_try_timeout_ms = 60000\nrequest_timeout_ms = 60000\n".into(),
        ..shard.options()
    })
    .await;
    // tonic's channel also times the call out itself (`Cancelled`), so the
    // call is made by an HTTP/2 client that only states its timeout: what
    // ends it can only be the gateway.
    let mut sender = h2c(&fixture).await;
    let request = grpc_post(&fixture, CHECK, &[("grpc-timeout", "200m")], b"\0\0\0\0\0");
    let call = sender.send_request(request);
    let response = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the call ended at its own deadline, long before the gateway's")
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["grpc-status"], "4", "DEADLINE_EXCEEDED");
    assert_eq!(
        response.headers()["grpc-message"],
        "the backend did not answer in time"
    );
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 1);
    let restated: Vec<_> = heads[0].get_all("grpc-timeout").iter().collect();
    assert_eq!(restated.len(), 1, "one grpc-timeout, the gateway's");
    let told = parse_timeout(restated[0].as_bytes()).unwrap();
    assert!(
        told <= Duration::from_millis(200) && told > Duration::ZERO,
        "{told:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_resource_exhausted() {
    let fixture = Fixture::start(Options {
        extra: "[limits]\nmax_body_bytes = 1024\n".into(),
        ..Options::default()
    })
    .await;
    let status = status_of(
        &fixture,
        check(&fixture, Some("tenant-1"), "x".repeat(64 * 1024), None),
    )
    .await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
}

/// An h2c connection for requests tonic will not make.
async fn h2c<B>(fixture: &Fixture) -> http2::SendRequest<B>
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// A gRPC-shaped POST to `path` as `tenant` with `extra` fields and `body`.
fn grpc_post(
    fixture: &Fixture,
    path: &str,
    extra: &[(&str, &str)],
    body: &'static [u8],
) -> Request<Full<Bytes>> {
    let mut request = Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-api-key", fixture.api_key("tenant-1"));
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    request.body(Full::new(Bytes::from_static(body))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_grpc_timeout_is_internal_and_reaches_nobody() {
    let fixture = Fixture::start(Options::default()).await;
    let mut sender = h2c(&fixture).await;
    for bad in ["2s", "100", "123456789m", "-1S", "1.5S"] {
        let request = grpc_post(&fixture, CHECK, &[("grpc-timeout", bad)], b"\0\0\0\0\0");
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "13", "{bad}");
        assert!(
            response.headers()["grpc-message"]
                .to_str()
                .unwrap()
                .starts_with("malformed grpc-timeout"),
        );
    }
    assert_eq!(fixture.total_backend_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_errors_over_http_1_1_are_grpc_shaped_in_the_head_and_others_are_not() {
    let fixture = Fixture::start(Options::default()).await;
    let grpc = crate::util::raw_request(
        fixture.running.addr,
        &crate::util::raw(
            "POST /pkg.Svc/Get HTTP/1.1",
            &["Host: localhost", "Content-Type: application/grpc+proto"],
            b"\0\0\0\0\0",
        ),
    )
    .await;
    assert_eq!(grpc.status, 200);
    assert_eq!(grpc.header("grpc-status"), Some("16"));
    assert_eq!(grpc.header("content-type"), Some("application/grpc"));
    assert_eq!(grpc.header("content-length"), Some("0"));
    assert!(grpc.body.is_empty());
    // Not gRPC (grpc-web is another protocol; a GET is never a call):
    // the JSON error as before.
    for (line, content_type) in [
        ("POST /pkg.Svc/Get HTTP/1.1", "application/grpc-web"),
        ("GET /pkg.Svc/Get HTTP/1.1", "application/grpc"),
    ] {
        let plain = crate::util::raw_request(
            fixture.running.addr,
            &crate::util::raw(
                line,
                &["Host: localhost", &format!("Content-Type: {content_type}")],
                b"",
            ),
        )
        .await;
        assert_eq!(plain.status, 401, "{line} {content_type}");
        assert_eq!(plain.header("content-type"), Some("application/json"));
        assert!(plain.header("grpc-status").is_none());
    }
}

/// Two tenants over the two shards at `one` and `two` (k = 2, so each
/// tenant has both), with `routing` as the `[routing]` keys.
fn two_shards(
    one: std::net::SocketAddr,
    two: std::net::SocketAddr,
    routing: impl Into<String>,
) -> Options {
    Options {
        shards: 0,
        tenants: 2,
        k: 2,
        custom_shards: vec![
            ("c0".into(), format!("http://{one}")),
            ("c1".into(), format!("http://{two}")),
        ],
        routing: routing.into(),
        ..Options::default()
    }
}

/// A shard that answers every call with a trailers-only `UNAVAILABLE`,
/// and the paths it was asked for.
async fn unavailable_shard() -> CustomShard {
    CustomShard::start(|_request| async {
        let mut response: Response<ShardBody> = Response::new(full(Bytes::new()));
        let headers = response.headers_mut();
        headers.insert("content-type", "application/grpc".parse().unwrap());
        headers.insert("grpc-status", "14".parse().unwrap());
        headers.insert("grpc-message", "draining".parse().unwrap());
        response
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_answer_fails_over_only_for_a_repeat_safe_method() {
    let (one, two) = (unavailable_shard().await, unavailable_shard().await);
    let fixture = Fixture::start(two_shards(
        one.addr,
        two.addr,
        "grpc_idempotent_methods = [\"/pkg.Svc/Get*\"]\n",
    ))
    .await;
    let seen = || one.seen().len() + two.seen().len();
    let mut sender = h2c(&fixture).await;
    // Declared length and small: the body is buffered, so it can be sent
    // again; what decides is the method.
    let message = b"\0\0\0\0\0";
    let send = |path: &'static str| grpc_post(&fixture, path, &[("content-length", "5")], message);
    let response = sender
        .send_request(send("/pkg.Svc/GetThing"))
        .await
        .unwrap();
    assert_eq!(response.headers()["grpc-status"], "14");
    assert_eq!(seen(), 2, "a repeat-safe call tried both members");
    let response = sender.send_request(send("/pkg.Svc/Delete")).await.unwrap();
    // The shard's own answer comes back, unreplayed.
    assert_eq!(response.headers()["grpc-status"], "14");
    assert_eq!(response.headers()["grpc-message"], "draining");
    assert_eq!(
        seen(),
        3,
        "a call not safe to repeat went to one member only"
    );
}

/// A gateway over shards `one` and `two` where the health check's method
/// is safe to repeat.
async fn check_is_repeat_safe(one: &CustomShard, two: &CustomShard) -> Fixture {
    Fixture::start(two_shards(
        one.addr,
        two.addr,
        format!("grpc_idempotent_methods = [\"{CHECK}\"]\n"),
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_a_length_fails_over_when_its_method_is_repeat_safe() {
    // Shards that read a call's message before they answer, as a gRPC
    // server does for a unary method: by the time the answer comes, the
    // gateway has seen the body end. (A shard that answers before the body
    // has ended is the streaming case below: nothing is sent again.)
    let unary_unavailable = || {
        CustomShard::start(|request: Request<hyper::body::Incoming>| async move {
            let _ = http_body_util::BodyExt::collect(request.into_body()).await;
            let mut response: Response<ShardBody> = Response::new(full(Bytes::new()));
            let headers = response.headers_mut();
            headers.insert("content-type", "application/grpc".parse().unwrap());
            headers.insert("grpc-status", "14".parse().unwrap());
            response
        })
    };
    let (one, two) = (unary_unavailable().await, unary_unavailable().await);
    let fixture = check_is_repeat_safe(&one, &two).await;
    let seen = || one.seen().len() + two.seen().len();
    // tonic states no length: the body streams to the first member and is
    // kept as it passes, so once it has ended the call can go to the
    // second member after the first's UNAVAILABLE.
    let status = status_of(
        &fixture,
        check(&fixture, Some("tenant-1"), "svc".into(), None),
    )
    .await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        seen(),
        2,
        "a repeat-safe call without a length tried both members"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_streaming_when_the_shard_answers_goes_to_one_member_only() {
    let (one, two) = (unavailable_shard().await, unavailable_shard().await);
    let fixture = check_is_repeat_safe(&one, &two).await;
    let seen = || one.seen().len() + two.seen().len();
    // A call whose body has not ended when the shard answers (a streaming
    // call): once its first message went out, it is not sent again, safe
    // or not.
    let mut sender = h2c(&fixture).await;
    let (mut body, streamed) =
        http_body_util::channel::Channel::<Bytes, std::convert::Infallible>::new(1);
    let request = Request::post(format!("http://localhost{CHECK}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-api-key", fixture.api_key("tenant-1"))
        .body(streamed)
        .unwrap();
    let sent = tokio::spawn(async move { sender.send_request(request).await });
    body.send_data(Bytes::from_static(b"\0\0\0\0\0"))
        .await
        .unwrap();
    let response = sent.await.unwrap().unwrap();
    drop(body);
    assert_eq!(response.headers()["grpc-status"], "14");
    assert_eq!(seen(), 1, "a call still streaming went to one member only");
}

/// A fixture over two shards that crash when a request carries the poison
/// marker (the connection of the call dropped unanswered, as a shard
/// process dying mid-call would), with `/pkg.Svc/Get*` safe to repeat.
async fn crashing_pair() -> Fixture {
    let fixture = Fixture::start(Options {
        shards: 2,
        tenants: 2,
        k: 2,
        routing: "grpc_idempotent_methods = [\"/pkg.Svc/Get*\"]\n".into(),
        ..Options::default()
    })
    .await;
    for backend in &fixture.backends {
        backend.set_mode(Mode::CrashOnPoison(Duration::from_secs(60)));
    }
    fixture
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_dying_mid_call_fails_a_repeat_safe_call_over_and_no_other() {
    let seen = |fixture: &Fixture| -> usize {
        fixture
            .backends
            .iter()
            .map(|backend| backend.seen().len())
            .sum()
    };
    let poisoned = [("x-poison", "1")];
    // Safe to repeat, its body kept whole (no length stated): the broken
    // connection counts as UNAVAILABLE, and the call goes to the other
    // member (which dies too).
    let fixture = crashing_pair().await;
    let mut sender = h2c(&fixture).await;
    let request = grpc_post(&fixture, "/pkg.Svc/GetThing", &poisoned, b"\0\0\0\0\0");
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "14");
    assert_eq!(seen(&fixture), 2, "a repeat-safe call went to both members");

    // Not safe to repeat: sent once, whatever became of it.
    let fixture = crashing_pair().await;
    let mut sender = h2c(&fixture).await;
    let request = grpc_post(&fixture, "/pkg.Svc/Delete", &poisoned, b"\0\0\0\0\0");
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "14");
    assert_eq!(seen(&fixture), 1, "a call not safe to repeat was sent once");
}

/// A shard that reads each request's head and closes the connection
/// without answering (and keeps accepting), counting the calls it read.
async fn closing_shard() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut read = Vec::new();
                let mut buf = [0; 4096];
                while !read.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read.extend_from_slice(&buf[..n]),
                    }
                }
                // Health checks (GETs) are not calls.
                if read.starts_with(b"POST ") {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    (addr, heads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_breaks_is_unavailable_to_the_failover_rules() {
    let (one, one_heads) = closing_shard().await;
    let (two, two_heads) = closing_shard().await;
    let fixture = Fixture::start(Options {
        health: "interval_ms = 600000".into(),
        ..two_shards(one, two, "grpc_idempotent_methods = [\"/pkg.Svc/Get*\"]\n")
    })
    .await;
    let heads = || {
        one_heads.load(std::sync::atomic::Ordering::SeqCst)
            + two_heads.load(std::sync::atomic::Ordering::SeqCst)
    };
    let mut sender = h2c(&fixture).await;
    // Safe to repeat: each member gets it on a second connection too (a
    // connection closed before any answer may be a keep-alive race), then
    // the broken call counts as UNAVAILABLE and goes to the other member.
    let request = grpc_post(&fixture, "/pkg.Svc/GetThing", &[], b"\0\0\0\0\0");
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "14");
    assert_eq!(heads(), 4, "two connections on each member");
    // Not safe to repeat: one member, once.
    let request = grpc_post(&fixture, "/pkg.Svc/Delete", &[], b"\0\0\0\0\0");
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "14");
    assert_eq!(heads(), 5, "a call not safe to repeat was sent once");
}

// ---------------------------------------------------------------------
// HTTP/2 hygiene, frame by frame.

/// The flags these tests set on HEADERS and DATA frames.
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// Writes a frame: its 9-byte header, then `payload`.
fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap();
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// One HPACK field as a literal without indexing, new name, no Huffman
/// coding: whatever bytes the test wants, unchecked (lengths under 127).
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    out.push(u8::try_from(name.len()).unwrap());
    out.extend_from_slice(name);
    out.push(u8::try_from(value.len()).unwrap());
    out.extend_from_slice(value);
}

// Frame types (RFC 9113 §6), only those these tests send or watch for.
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;

/// How the gateway ended stream 1.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// A response HEADERS frame (whatever its status).
    Answered,
    /// RST_STREAM on the stream.
    Reset,
    /// GOAWAY, or the connection closed.
    ConnectionClosed,
}

/// Sends one request on stream 1 of a fresh h2c connection: a HEADERS
/// frame of `fields` (ending the stream unless `data` follows), then the
/// `data` frame if given; returns how the gateway ended the stream.
async fn raw_h2(fixture: &Fixture, fields: &[(&[u8], &[u8])], data: Option<&[u8]>) -> Ended {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, SETTINGS, 0, 0, &[]);
    let mut block = Vec::new();
    for (name, value) in fields {
        literal(&mut block, name, value);
    }
    let flags = END_HEADERS | if data.is_none() { END_STREAM } else { 0 };
    frame(&mut out, HEADERS, flags, 1, &block);
    if let Some(data) = data {
        frame(&mut out, DATA, END_STREAM, 1, data);
    }
    let mut tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    tcp.write_all(&out).await.unwrap();
    let read = async {
        loop {
            let mut head = [0_u8; 9];
            if tcp.read_exact(&mut head).await.is_err() {
                return Ended::ConnectionClosed;
            }
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0; len];
            if tcp.read_exact(&mut payload).await.is_err() {
                return Ended::ConnectionClosed;
            }
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7FFF_FFFF;
            match (head[3], stream) {
                (SETTINGS, 0) if head[4] & 0x1 == 0 => {
                    let mut ack = Vec::new();
                    frame(&mut ack, SETTINGS, 0x1, 0, &[]);
                    let _ = tcp.write_all(&ack).await;
                }
                (GOAWAY, _) => return Ended::ConnectionClosed,
                (HEADERS, 1) => return Ended::Answered,
                (RST_STREAM, 1) => return Ended::Reset,
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the gateway ended the stream")
}

/// Header fields as a HEADERS frame carries them, in order.
type FieldList<'a> = Vec<(&'a [u8], &'a [u8])>;

/// A GET's pseudo-header fields and credential, `extra` after them.
fn get_fields<'a>(
    key: &'a [u8],
    path: &'a [u8],
    extra: &[(&'a [u8], &'a [u8])],
) -> Vec<(&'a [u8], &'a [u8])> {
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":authority", b"localhost"),
        (b":path", path),
        (b"x-api-key", key),
    ];
    fields.extend_from_slice(extra);
    fields
}

/// Every request the fleet has seen, as `path` and headers.
fn everything_seen(fixture: &Fixture) -> Vec<backend::Seen> {
    fixture
        .backends
        .iter()
        .flat_map(backend::Backend::seen)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_http_2_forbids_never_reaches_a_shard() {
    let fixture = Fixture::start(Options::default()).await;
    let key = fixture.api_key("tenant-1").as_bytes().to_vec();
    // The harness works: a well-formed request written the same way is
    // served.
    let ok = raw_h2(&fixture, &get_fields(&key, b"/hygiene/ok", &[]), None).await;
    assert_eq!(ok, Ended::Answered);
    assert!(
        eventually(Duration::from_secs(5), || everything_seen(&fixture)
            .iter()
            .any(|seen| seen.path == "/hygiene/ok"))
        .await
    );
    // Connection-specific fields (RFC 9113 §8.2.2), named for themselves.
    let connection_specific: [(&[u8], &[u8]); 6] = [
        (b"connection", b"keep-alive"),
        (b"keep-alive", b"timeout=5"),
        (b"proxy-connection", b"keep-alive"),
        (b"transfer-encoding", b"chunked"),
        (b"upgrade", b"websocket"),
        (b"te", b"gzip"),
    ];
    for (name, value) in connection_specific {
        let fields = get_fields(&key, b"/hygiene/bad", &[(name, value)]);
        let ended = raw_h2(&fixture, &fields, None).await;
        let name = String::from_utf8_lossy(name);
        assert_ne!(ended, Ended::Answered, "{name}: served");
    }
    let malformed: [(&str, &[u8], &[u8]); 7] = [
        ("an uppercase name", b"X-Upper", b"1"),
        ("a CR LF in a value", b"x-note", b"a\r\nx-injected: 1"),
        ("a NUL in a value", b"x-note", b"a\0b"),
        ("a LF alone in a value", b"x-note", b"a\nx-injected: 1"),
        ("a pseudo-header after a field", b":path", b"/hygiene/again"),
        ("an unknown pseudo-header", b":smuggle", b"1"),
        ("a response pseudo-header", b":status", b"200"),
    ];
    for (case, name, value) in malformed {
        let fields = get_fields(&key, b"/hygiene/bad", &[(name, value)]);
        let ended = raw_h2(&fixture, &fields, None).await;
        assert_ne!(ended, Ended::Answered, "{case}: served");
    }
    // Malformed :path values and a missing one.
    for (case, path) in [
        ("a space in :path", &b"/hygiene/bad x"[..]),
        (
            "a CR LF in :path",
            b"/hygiene/bad\r\nGET /smuggled HTTP/1.1",
        ),
        ("an empty :path", b""),
    ] {
        let ended = raw_h2(&fixture, &get_fields(&key, path, &[]), None).await;
        assert_ne!(ended, Ended::Answered, "{case}: served");
    }
    // A duplicated :path.
    let doubled = get_fields(&key, b"/hygiene/bad", &[]);
    let mut doubled: Vec<_> = doubled.into_iter().collect();
    doubled.insert(4, (b":path", b"/hygiene/second"));
    assert_ne!(raw_h2(&fixture, &doubled, None).await, Ended::Answered);
    // `content-length` that disagrees with DATA: the stream is reset, and
    // no complete request of either length is served.
    let post: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"localhost"),
        (b":path", b"/hygiene/length"),
        (b"x-api-key", &key),
        (b"content-length", b"10"),
    ];
    assert_ne!(raw_h2(&fixture, &post, Some(b"abc")).await, Ended::Answered);
    let seen = everything_seen(&fixture);
    for seen in &seen {
        assert!(
            seen.path == "/hygiene/ok"
                || (seen.path == "/hygiene/length" && seen.body_len != 3 && seen.body_len != 10),
            "reached a shard: {} {:?}",
            seen.path,
            seen.headers
        );
        assert!(seen.header("x-injected").is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_sent_over_http_2_becomes_a_second_request_on_the_shard_connection() {
    let fixture = Fixture::start(Options::default()).await;
    let key = fixture.api_key("tenant-1").as_bytes().to_vec();
    // Absolute-form, authority tricks and a `host` that disagrees with
    // `:authority`: whatever is served goes out as one origin-form request
    // with the shard's own Host.
    let cases: [(&str, FieldList); 5] = [
        (
            "absolute-form :path",
            get_fields(&key, b"http://evil.example/hygiene/abs", &[]),
        ),
        (
            "authority-form :path",
            get_fields(&key, b"evil.example:80", &[]),
        ),
        ("asterisk :path", get_fields(&key, b"*", &[])),
        (
            "host disagreeing with :authority",
            get_fields(&key, b"/hygiene/host", &[(b"host", b"evil.example")]),
        ),
        (
            "a smuggled request in a value",
            get_fields(
                &key,
                b"/hygiene/value",
                &[(b"x-note", b"1\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: x")],
            ),
        ),
    ];
    for (case, fields) in &cases {
        // Refused or served, either is fine here: what matters is what
        // the shards saw, below.
        let ended = raw_h2(&fixture, fields, None).await;
        eprintln!("{case}: {ended:?}");
    }
    // A well-formed request last: on connections the attempts above may
    // have left in a shard's pool, it must arrive as itself.
    let ok = raw_h2(&fixture, &get_fields(&key, b"/hygiene/last", &[]), None).await;
    assert_eq!(ok, Ended::Answered);
    let seen = everything_seen(&fixture);
    assert!(seen.iter().any(|seen| seen.path == "/hygiene/last"));
    for seen in &seen {
        // `*` passes as the one request it is (`GET * HTTP/1.1`, which
        // the shard refuses or answers as it would from any client); the
        // absolute- and authority-form targets are refused, and so is a
        // `host` that disagrees with `:authority`.
        assert!(
            (seen.path.starts_with("/hygiene/") || seen.path == "*")
                && seen.path != "/hygiene/host"
                && !seen.path.contains("smuggled"),
            "a shard was asked for {:?}",
            seen.path
        );
        let hosts = seen.header("host");
        assert_eq!(hosts.len(), 1, "{:?}", seen.headers);
        assert!(hosts[0].starts_with("127.0.0.1:"), "{:?}", seen.headers);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_shards_are_at_their_caps_is_shed_as_unavailable() {
    // The only shard, capped at one request in flight, holds one.
    let shard = silent_shard(Arc::new(Mutex::new(Vec::new()))).await;
    let fixture = Arc::new(
        Fixture::start(Options {
            extra: "[limits.shard]\nmax_in_flight = 1\n".into(),
            routing: "per_try_timeout_ms = 60000\nrequest_timeout_ms = 60000\n".into(),
            admin_token: Some("t".repeat(32)),
            ..shard.options()
        })
        .await,
    );
    let held = {
        let fixture = Arc::clone(&fixture);
        tokio::spawn(async move { fixture.get("tenant-0", "/held").await })
    };
    assert!(
        eventually(Duration::from_secs(10), || fixture.shard("c0").in_flight()
            == 1)
        .await
    );
    let status = status_of(
        &fixture,
        check(&fixture, Some("tenant-1"), String::new(), None),
    )
    .await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("in-flight limit"), "{status:?}");
    assert_eq!(
        fixture.shard("c0").in_flight(),
        1,
        "the call reached no shard"
    );
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.count("shuffle_shed_total", &[("cell", "default")]),
        1.0
    );
    held.abort();
}
