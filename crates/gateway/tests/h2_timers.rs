//! HTTP/2's timers and what a client that stops reading leaves behind:
//! connections that send no request (a partial preface, a preface without
//! SETTINGS, a TLS client that negotiated `h2` or nothing) are closed at the
//! header-read timeout and one that only answers PINGs at
//! `limits.http2_idle_timeout_ms`, so they cannot hold every place under
//! `limits.max_connections`; a stream whose client grants no flow-control
//! window is reset at `limits.client_write_timeout_ms`, releasing its shard;
//! and a client that stops reading is closed with a reset, so the kernel
//! keeps nothing queued for it; a stream whose client stops sending its
//! request body is ended at `limits.client_body_timeout_ms`, releasing the
//! same. Also what HTTP/2 leaves to one stream (a malformed request). Real
//! sockets, raw frames and the `h2` crate's client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pki::{Ca, client_config};
use crate::util::{CustomShard, Fixture, Options, TestBody, eventually, read_h2_frame};

/// How long anything that must happen may take: it bounds a hang, never a
/// timing (the timeouts under test are a few hundred milliseconds).
const DEADLINE: Duration = Duration::from_secs(30);

/// The admin token the tests scrape metrics with.
const TOKEN: &str = "h2-timers-admin-token-5c1e9a07";

/// A response far larger than any socket buffer.
const HUGE: usize = 64 << 20;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A shard answering every request with [`HUGE`] bytes; the counter says
/// how many of its response bodies have been dropped (sent whole, or their
/// connection gone).
async fn huge_shard() -> (CustomShard, Arc<AtomicUsize>) {
    let dropped = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&dropped);
    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
    let shard = CustomShard::start(move |_request| {
        let body = TestBody::filler(chunk.clone(), HUGE, true).counting_drops(Arc::clone(&counter));
        async move { Response::new(body.boxed()) }
    })
    .await;
    (shard, dropped)
}

/// `shuffle_stream_timeouts_total{side="client"}`.
async fn client_timeouts(fixture: &Fixture) -> f64 {
    fixture
        .scrape()
        .await
        .count("shuffle_stream_timeouts_total", &[("side", "client")])
}

/// Whether `stream` is closed by its peer (EOF or an error) within
/// [`DEADLINE`], whatever it sends first.
async fn closed_by_peer(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> bool {
    let mut sink = vec![0_u8; 64 * 1024];
    tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// One HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut frame = len.to_be_bytes()[1..].to_vec();
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// An HPACK integer (RFC 7541 §5.1) in a `prefix`-bit prefix, the first
/// byte's other bits set to `flags`.
fn hpack_int(out: &mut Vec<u8>, flags: u8, prefix: u32, value: usize) {
    let max = (1_usize << prefix) - 1;
    if value < max {
        out.push(flags | u8::try_from(value).unwrap());
        return;
    }
    out.push(flags | u8::try_from(max).unwrap());
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push(0x80 | u8::try_from(rest & 0x7f).unwrap());
        rest >>= 7;
    }
    out.push(u8::try_from(rest).unwrap());
}

/// An HPACK string literal, not Huffman-coded.
fn hpack_string(out: &mut Vec<u8>, value: &str) {
    hpack_int(out, 0x00, 7, value.len());
    out.extend_from_slice(value.as_bytes());
}

/// The opening of a client that will take anything: the preface, SETTINGS
/// with the largest stream window, and the connection window opened to
/// the largest too; then a `GET /work` as `key` on stream 1.
fn greedy_get(key: &str) -> Vec<u8> {
    const MAX_WINDOW: u32 = (1 << 31) - 1;
    let mut bytes = PREFACE.to_vec();
    let mut settings = vec![0x00, 0x04];
    settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
    bytes.extend(frame(0x4, 0, 0, &settings));
    bytes.extend(frame(0x8, 0, 0, &(MAX_WINDOW - 65_535).to_be_bytes()));
    // :method GET, :scheme http, then :path, :authority and x-api-key as
    // literals without indexing.
    let mut block = vec![0x82, 0x86, 0x04];
    hpack_string(&mut block, "/work");
    block.push(0x01);
    hpack_string(&mut block, "localhost");
    block.push(0x00);
    hpack_string(&mut block, "x-api-key");
    hpack_string(&mut block, key);
    // END_STREAM | END_HEADERS.
    bytes.extend(frame(0x1, 0x5, 1, &block));
    bytes
}

/// The kernel's state of the TCP socket from `local` to `remote`
/// (`/proc/net/tcp`'s `st`), if there is one.
fn socket_state(local: SocketAddr, remote: SocketAddr) -> Option<String> {
    let hex = |addr: SocketAddr| {
        let SocketAddr::V4(v4) = addr else {
            panic!("IPv4 only: {addr}")
        };
        format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        )
    };
    let (local, remote) = (hex(local), hex(remote));
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields[1] == local && fields[2] == remote).then(|| fields[3].to_owned())
        })
}

/// Reads `stream` to its end; the error that ended it, if one did.
async fn read_to_end(stream: &mut TcpStream) -> Option<std::io::ErrorKind> {
    let mut sink = vec![0_u8; 256 * 1024];
    tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) => return None,
                Ok(_) => {}
                Err(error) => return Some(error.kind()),
            }
        }
    })
    .await
    .expect("the gateway neither finished nor closed the connection")
}

/// Checks that the client on `stream`, which asked for a [`HUGE`] answer
/// and stopped reading (the `nth` to, and the `nth` huge answer), is given
/// up on at the write timeout with a reset:
/// the gateway's socket is gone at once (nothing left queued in the
/// kernel), and the client, once it reads what reached it, sees
/// `ECONNRESET`, not the end of a stream.
async fn reset_when_it_stops_reading(
    fixture: &Fixture,
    dropped: &AtomicUsize,
    mut stream: TcpStream,
    nth: usize,
) {
    let gateway_side = stream.peer_addr().unwrap();
    let client_side = stream.local_addr().unwrap();
    assert!(
        eventually(DEADLINE, || dropped.load(Ordering::SeqCst) >= nth).await,
        "the backend's response was never dropped after the client stopped reading"
    );
    assert!(
        eventually(DEADLINE, || socket_state(gateway_side, client_side)
            .is_none())
        .await,
        "the gateway's socket is still there (state {:?}): its unsent bytes stay queued in the kernel",
        socket_state(gateway_side, client_side)
    );
    assert!(client_timeouts(fixture).await >= nth as f64);
    let ended = read_to_end(&mut stream).await;
    assert_eq!(
        ended,
        Some(std::io::ErrorKind::ConnectionReset),
        "the client's connection ended without a reset"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_without_requests_or_streams_are_closed_and_free_their_places() {
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new("h2 timers CA");
    let (cert, key) = ca.server(&["localhost"]).write(certs.path(), "server");
    // Six places, one for each kind of client that holds one without
    // asking for anything (a second for the header timeout, so that the
    // served client's request is in before it on a busy machine); the gateway PINGs idle connections every 100 ms.
    // A PING unanswered, and the TLS handshake's own timeout, would close a
    // connection only long after the test: the new timers must.
    let fixture = Fixture::start(Options {
        extra: format!(
            "[limits]\nmax_connections = 6\nheader_read_timeout_ms = 2000\nhttp2_idle_timeout_ms = 1000\n\n\
             [http2]\nkeep_alive_interval_ms = 100\nkeep_alive_timeout_ms = 3600000\n\n\
             [tls]\nlisten = \"127.0.0.1:0\"\ncert_file = {cert:?}\nkey_file = {key:?}\n\
             handshake_timeout_ms = 60000\n"
        ),
        ..Options::default()
    })
    .await;
    let addr = fixture.running.addr;
    let tls_addr = fixture.running.tls_addr.unwrap();

    // 1. The first 20 bytes of the h2c preface, then nothing.
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(&PREFACE[..20]).await.unwrap();
    // 2. The whole preface without SETTINGS.
    let mut no_settings = TcpStream::connect(addr).await.unwrap();
    no_settings.write_all(PREFACE).await.unwrap();
    // 3. The preface and SETTINGS, and no request.
    let mut no_request = TcpStream::connect(addr).await.unwrap();
    no_request.write_all(PREFACE).await.unwrap();
    no_request.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    // 4. TLS with ALPN h2, then nothing.
    let mut config = (*client_config(&[ca.der()], None, &[])).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let mut silent_tls = crate::pki::connect(tls_addr, "localhost", Arc::new(config))
        .await
        .unwrap();
    assert_eq!(silent_tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // 5. A TCP connection to the TLS port that never starts its handshake.
    let mut no_handshake = TcpStream::connect(tls_addr).await.unwrap();
    // 6. A client served once that then only answers the gateway's PINGs.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let idle = tokio::spawn(connection);
    let request = Request::get("http://localhost/once")
        .header("x-api-key", fixture.api_key("tenant-1"))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = tokio::time::timeout(DEADLINE, response)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        let _ = body.flow_control().release_capacity(data.len());
    }

    // Every place is taken; each is given back by its timer, and a client
    // waiting behind them is served.
    let (status, _) = tokio::time::timeout(DEADLINE, fixture.get("tenant-2", "/after"))
        .await
        .expect(
            "a GET from another client was never answered: the six connections kept every place",
        );
    assert_eq!(status, StatusCode::OK);
    assert!(closed_by_peer(&mut partial).await, "partial preface");
    assert!(
        closed_by_peer(&mut no_settings).await,
        "preface without SETTINGS"
    );
    assert!(
        closed_by_peer(&mut no_request).await,
        "SETTINGS, no request"
    );
    assert!(
        closed_by_peer(&mut silent_tls).await,
        "TLS with h2, nothing sent"
    );
    assert!(
        closed_by_peer(&mut no_handshake).await,
        "TLS handshake never started"
    );
    let ended = tokio::time::timeout(DEADLINE, idle)
        .await
        .expect("the idle connection answering PINGs was never closed");
    assert!(ended.unwrap().is_ok(), "closed with GOAWAY, not an error");
    drop(client);
    // The backend saw the one request that was made, and nothing else.
    let seen: Vec<_> = fixture
        .backends
        .iter()
        .flat_map(|backend| backend.seen())
        .filter(|seen| seen.path == "/once")
        .collect();
    assert_eq!(seen.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_gets_no_window_is_reset_and_its_shards_place_released() {
    let (shard, dropped) = huge_shard().await;
    let fixture = Fixture::start(Options {
        tenants: 4,
        extra: "[limits]\nclient_write_timeout_ms = 300\n\n[limits.shard]\nmax_in_flight = 2\n\n\
                [limits.tenant]\nmax_in_flight = 2\n"
            .into(),
        admin_token: Some(TOKEN.into()),
        ..shard.options()
    })
    .await;
    let c0 = fixture.shard("c0");
    // The victim grants no window at all, and asks for two huge answers:
    // the shard's two places.
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let (mut client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let mut bodies = Vec::new();
    for i in 0..2 {
        let request = Request::get(format!("http://localhost/huge/{i}"))
            .header("x-api-key", fixture.api_key("tenant-1"))
            .body(())
            .unwrap();
        let (response, _) = client.send_request(request, true).unwrap();
        let response = tokio::time::timeout(DEADLINE, response)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        bodies.push(response.into_body());
    }
    assert_eq!(shard.seen().len(), 2);
    // The streams cannot move: each is reset, and its backend connection
    // and place are released.
    for mut body in bodies {
        let ended = tokio::time::timeout(DEADLINE, body.data())
            .await
            .expect("a stream without window was never reset");
        let error = ended.expect("reset, not ended").unwrap_err();
        assert_eq!(error.reason(), Some(h2::Reason::CANCEL), "{error}");
    }
    assert!(
        eventually(DEADLINE, || c0.in_flight() == 0).await,
        "c0 still has {} in flight",
        c0.in_flight()
    );
    assert!(
        eventually(DEADLINE, || dropped.load(Ordering::SeqCst) >= 2).await,
        "the backend's responses were not dropped"
    );
    assert!(client_timeouts(&fixture).await >= 2.0);
    // Only the streams: the connection is still open.
    assert!(!connection.is_finished());
    // Another tenant on the same shard is served, not shed; and the
    // victim's own in-flight places are back (its limit is 2).
    let (status, _) = fixture.get("tenant-2", "/after").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = fixture.get("tenant-1", "/again").await;
    assert_eq!(status, StatusCode::OK);
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_reset_over_http_1_1_and_http_2() {
    let (shard, dropped) = huge_shard().await;
    let fixture = Fixture::start(Options {
        extra: "[limits]\nclient_write_timeout_ms = 300\n".into(),
        admin_token: Some(TOKEN.into()),
        ..shard.options()
    })
    .await;
    let key = fixture.api_key("tenant-1").to_owned();

    // HTTP/1.1 (the gateway's own loop).
    let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
    stream
        .write_all(
            format!("GET /work HTTP/1.1\r\nhost: gateway\r\nx-api-key: {key}\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    reset_when_it_stops_reading(&fixture, &dropped, stream, 1).await;

    // HTTP/2, with every window open, so what blocks is the socket.
    let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
    stream.write_all(&greedy_get(&key)).await.unwrap();
    reset_when_it_stops_reading(&fixture, &dropped, stream, 2).await;
    assert_eq!(shard.seen().len(), 2);
}

/// Reads frames off `stream` until `done` says so, the peer closes, or
/// [`DEADLINE`] passes: `(type, flags, stream id, payload)` each.
async fn frames_until(
    stream: &mut TcpStream,
    mut done: impl FnMut(&(u8, u8, u32, Vec<u8>)) -> bool,
) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut frames = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, async {
        while let Some(frame) = read_h2_frame(stream).await {
            let stop = done(&frame);
            frames.push(frame);
            if stop {
                return;
            }
        }
    })
    .await;
    frames
}

/// A shard that reads each request's whole body before it answers, with
/// what it got: `"<path> <bytes>"`, or `"<path> aborted"` when the body
/// broke off. The log holds one line per request.
async fn reading_shard() -> (CustomShard, Arc<std::sync::Mutex<Vec<String>>>) {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    let shard = CustomShard::start(move |request: Request<hyper::body::Incoming>| {
        let seen = Arc::clone(&seen);
        async move {
            let path = request.uri().path().to_owned();
            let line = match request.into_body().collect().await {
                Ok(body) => format!("{path} {}", body.to_bytes().len()),
                Err(_) => format!("{path} aborted"),
            };
            seen.lock().unwrap().push(line.clone());
            Response::new(crate::util::full(line))
        }
    })
    .await;
    (shard, log)
}

/// Sends a request on `client` whose body starts with `first` and is left
/// open.
fn open_upload(
    client: &mut h2::client::SendRequest<Bytes>,
    method: &str,
    path: &str,
    key: &str,
    fields: &[(&str, &str)],
    first: &'static [u8],
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://localhost{path}"))
        .header("x-api-key", key);
    for (name, value) in fields {
        request = request.header(*name, *value);
    }
    let (response, mut body) = client
        .send_request(request.body(()).unwrap(), false)
        .unwrap();
    body.send_data(Bytes::from_static(first), false).unwrap();
    (response, body)
}

/// The status of `response`, which must come within [`DEADLINE`], once
/// its body has been read to its end (by then the gateway has let go of
/// the answer, and of the tenant's in-flight place with it).
async fn status_of(response: h2::client::ResponseFuture, what: &str) -> StatusCode {
    tokio::time::timeout(DEADLINE, async {
        let response = response
            .await
            .unwrap_or_else(|error| panic!("{what}: {error}"));
        let status = response.status();
        let mut body = response.into_body();
        while let Some(data) = body.data().await {
            let data = data.unwrap_or_else(|error| panic!("{what}: {error}"));
            let _ = body.flow_control().release_capacity(data.len());
        }
        status
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: never answered"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_stalled_over_http2_is_ended_at_the_body_timeout_and_frees_its_places() {
    let (shard, log) = reading_shard().await;
    // The request deadline is an hour: only the body timer can end the
    // stalled streams within the test.
    let fixture = Fixture::start(Options {
        tenants: 4,
        routing: "request_timeout_ms = 3600000\n".into(),
        extra: "[limits]\nclient_body_timeout_ms = 300\n\n[limits.shard]\nmax_in_flight = 1\n\n\
                [limits.tenant]\nmax_in_flight = 1\n"
            .into(),
        admin_token: Some(TOKEN.into()),
        ..shard.options()
    })
    .await;
    let c0 = fixture.shard("c0");
    let key = fixture.api_key("tenant-1").to_owned();
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);

    // A body streamed to the shard (a POST is not repeated): half of it,
    // then nothing. It holds the shard's one place, and its tenant's.
    let (response, stalled) =
        open_upload(&mut client, "POST", "/upload", &key, &[], b"half a body");
    assert!(eventually(DEADLINE, || c0.in_flight() == 1).await);
    assert_eq!(
        status_of(response, "the stalled POST").await,
        StatusCode::REQUEST_TIMEOUT
    );
    // The shard saw its upload break off (the gateway closed the
    // connection rather than pool it mid-body), and its place is back:
    // another tenant is served.
    assert!(
        eventually(DEADLINE, || log
            .lock()
            .unwrap()
            .contains(&"/upload aborted".to_owned()))
        .await,
        "the shard's upload never broke off: {:?}",
        log.lock().unwrap()
    );
    assert!(
        eventually(DEADLINE, || c0.in_flight() == 0).await,
        "c0 still has {} in flight",
        c0.in_flight()
    );
    let (status, _) = fixture.get("tenant-2", "/after").await;
    assert_eq!(status, StatusCode::OK);
    assert!(client_timeouts(&fixture).await >= 1.0);
    drop(stalled);

    // A body read whole before any shard is tried (a PUT that states its
    // length may be repeated): it stalls too, and is ended the same way.
    let (response, stalled) = open_upload(
        &mut client,
        "PUT",
        "/replayable",
        &key,
        &[("content-length", "100")],
        b"ten bytes!",
    );
    assert_eq!(
        status_of(response, "the stalled PUT").await,
        StatusCode::REQUEST_TIMEOUT
    );
    assert!(client_timeouts(&fixture).await >= 2.0);
    drop(stalled);

    // Only the streams ended: on the same connection the tenant (whose
    // one in-flight place both held) is served.
    let request = Request::get("http://localhost/again")
        .header("x-api-key", &key)
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    assert_eq!(status_of(response, "the GET after").await, StatusCode::OK);
    assert!(!connection.is_finished());
    // Nothing of the PUT reached the shard.
    assert!(
        !shard
            .seen()
            .iter()
            .any(|seen| seen.ends_with("/replayable"))
    );
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_http2_body_leaves_its_connections_other_streams_alone_and_a_trickle_completes() {
    let (shard, log) = reading_shard().await;
    let fixture = Fixture::start(Options {
        routing: "request_timeout_ms = 3600000\n".into(),
        extra: "[limits]\nclient_body_timeout_ms = 500\n".into(),
        ..shard.options()
    })
    .await;
    let key = fixture.api_key("tenant-1").to_owned();
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);

    // One stream stalls; beside it on the same connection one trickles a
    // byte every 50 ms, three times the timeout in all, and a GET is
    // served meanwhile.
    let (stalled_response, stalled) = open_upload(&mut client, "POST", "/stalled", &key, &[], b"x");
    let (trickled_response, mut trickle) =
        open_upload(&mut client, "POST", "/trickled", &key, &[], b"x");
    let request = Request::get("http://localhost/meanwhile")
        .header("x-api-key", &key)
        .body(())
        .unwrap();
    let (meanwhile, _) = client.send_request(request, true).unwrap();
    assert_eq!(
        status_of(meanwhile, "the GET meanwhile").await,
        StatusCode::OK
    );
    for _ in 1..30 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trickle.send_data(Bytes::from_static(b"x"), false).unwrap();
    }
    trickle.send_data(Bytes::new(), true).unwrap();

    assert_eq!(
        status_of(stalled_response, "the stalled POST").await,
        StatusCode::REQUEST_TIMEOUT
    );
    let trickled = tokio::time::timeout(DEADLINE, trickled_response)
        .await
        .expect("the trickled POST was never answered")
        .expect("the trickled POST was reset");
    assert_eq!(trickled.status(), StatusCode::OK);
    let mut body = trickled.into_body();
    let mut answer = Vec::new();
    while let Some(data) = body.data().await {
        answer.extend_from_slice(&data.unwrap());
    }
    // The shard got the whole trickled body.
    assert_eq!(String::from_utf8_lossy(&answer), "/trickled 30");
    assert!(
        eventually(DEADLINE, || log
            .lock()
            .unwrap()
            .contains(&"/stalled aborted".to_owned()))
        .await,
        "{:?}",
        log.lock().unwrap()
    );
    assert!(!connection.is_finished());
    drop((stalled, client));
}

/// The request HEADERS block of a `GET path` as `key`, with `extra`
/// fields (literals, as written) before the credential.
fn get_block(path: &str, key: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut fields = Vec::new();
    for (name, value) in extra {
        fields.push(0x00);
        hpack_string(&mut fields, name);
        hpack_string(&mut fields, value);
    }
    get_block_with(path, key, &fields)
}

/// The request HEADERS block of a `GET path` as `key`, with `fields`
/// (already HPACK-encoded) before the credential. Nothing but `fields`
/// touches the dynamic table.
fn get_block_with(path: &str, key: &str, fields: &[u8]) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04];
    hpack_string(&mut block, path);
    block.push(0x01);
    hpack_string(&mut block, "localhost");
    block.extend_from_slice(fields);
    block.push(0x00);
    hpack_string(&mut block, "x-api-key");
    hpack_string(&mut block, key);
    block
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_request_fails_its_own_stream_and_the_next_stream_is_served() {
    let fixture = Fixture::start(Options::default()).await;
    let key = fixture.api_key("tenant-1").to_owned();
    // What RFC 9113 makes a malformed request (a stream error), and a
    // `host` that disagrees with `:authority` (the gateway's 400). From
    // "an uppercase name" on, the field is one h2's HPACK decoder itself
    // refuses: the registry's h2 0.4.21 closes the connection with GOAWAY
    // for it, vendor/h2 fails the stream alone.
    let cases: &[(&str, &[(&str, &str)])] = &[
        (
            "a connection-specific field",
            &[("connection", "keep-alive")],
        ),
        ("te other than trailers", &[("te", "gzip")]),
        ("a response pseudo-header", &[(":status", "200")]),
        ("transfer-encoding", &[("transfer-encoding", "chunked")]),
        ("host against :authority", &[("host", "elsewhere.example")]),
        ("an uppercase name", &[("X-Upper", "v")]),
        ("a name with a space", &[("x space", "v")]),
        ("a name with a colon", &[("x:colon", "v")]),
        ("a CR in a value", &[("x-cr", "a\rb")]),
        ("an LF in a value", &[("x-lf", "a\nb")]),
        ("a NUL in a value", &[("x-nul", "a\0b")]),
        ("an unknown pseudo-header", &[(":unknown", "v")]),
        ("a method that is not a token", &[(":method", "G T")]),
    ];
    for (what, extra) in cases {
        let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, 0, &[]));
        bytes.extend(frame(0x1, 0x5, 1, &get_block("/malformed", &key, extra)));
        bytes.extend(frame(0x1, 0x5, 3, &get_block("/next", &key, &[])));
        stream.write_all(&bytes).await.unwrap();
        let frames = frames_until(&mut stream, |(kind, flags, id, _)| {
            // The next stream's answer ends, or the connection goes away.
            (*kind == 0x0 && *id == 3 && flags & 0x1 != 0) || *kind == 0x7
        })
        .await;
        assert!(
            frames.iter().all(|(kind, ..)| *kind != 0x7),
            "{what}: the connection was closed with GOAWAY"
        );
        let first_failed = frames.iter().any(|(kind, _, id, payload)| {
            *id == 1
                && match kind {
                    // RST_STREAM with PROTOCOL_ERROR.
                    0x3 => payload[..] == [0, 0, 0, 1],
                    // The gateway's own answer: a 400 (`:status` 400 is
                    // HPACK's static entry 12).
                    0x1 => payload.first() == Some(&0x8c),
                    _ => false,
                }
        });
        assert!(first_failed, "{what}: stream 1 was not refused: {frames:?}");
        assert!(
            frames
                .iter()
                .any(|(kind, flags, id, _)| *kind == 0x0 && *id == 3 && flags & 0x1 != 0),
            "{what}: the next stream was not answered"
        );
    }
    // Only the well-formed requests reached a shard.
    assert_eq!(
        shard_paths(&fixture, &["/malformed", "/next"]),
        vec!["/next"; cases.len()]
    );
}

/// The paths, among `paths`, of the requests the shards received.
fn shard_paths(fixture: &Fixture, paths: &[&str]) -> Vec<String> {
    fixture
        .backends
        .iter()
        .flat_map(|backend| backend.seen())
        .map(|seen| seen.path)
        .filter(|path| paths.contains(&path.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_only_malformed_requests_is_closed_after_1024_resets() {
    let fixture = Fixture::start(Options::default()).await;
    let key = fixture.api_key("tenant-1").to_owned();
    // Each request fails its own stream, so what bounds a client that
    // sends nothing else is hyper's limit on streams reset for the peer's
    // errors (1024 a connection), then GOAWAY(ENHANCE_YOUR_CALM).
    const LIMIT: u32 = 1024;
    let malformed = get_block("/malformed", &key, &[("X-Upper", "v")]);
    let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    for n in 0..LIMIT {
        bytes.extend(frame(0x1, 0x5, 2 * n + 1, &malformed));
    }
    stream.write_all(&bytes).await.unwrap();
    let mut resets = 0;
    let frames = frames_until(&mut stream, |(kind, _, _, payload)| {
        if *kind == 0x3 && payload[..] == [0, 0, 0, 1] {
            resets += 1;
        }
        resets == LIMIT || *kind == 0x7
    })
    .await;
    assert_eq!(resets, LIMIT, "{:?}", frames.last());
    // Up to the limit the connection still serves a good request...
    let good = 2 * LIMIT + 1;
    let bytes = frame(0x1, 0x5, good, &get_block("/good", &key, &[]));
    stream.write_all(&bytes).await.unwrap();
    let frames = frames_until_ended(&mut stream, &[good]).await;
    assert_eq!(outcome(&frames, good), Some("served"), "{frames:?}");
    // ...and the next malformed one closes it.
    let bytes = frame(0x1, 0x5, good + 2, &malformed);
    stream.write_all(&bytes).await.unwrap();
    let frames = frames_until(&mut stream, |(kind, ..)| *kind == 0x7).await;
    let goaway = frames.iter().find(|(kind, ..)| *kind == 0x7);
    // ENHANCE_YOUR_CALM is 0xb.
    assert!(
        goaway.is_some_and(|(.., payload)| payload[4..8] == [0, 0, 0, 0xb]),
        "no GOAWAY(ENHANCE_YOUR_CALM): {frames:?}"
    );
    assert_eq!(shard_paths(&fixture, &["/malformed", "/good"]), ["/good"]);
}

/// A literal field added to the HPACK dynamic table, with a new name.
fn hpack_insert(name: &str, value: &str) -> Vec<u8> {
    let mut out = vec![0x40];
    hpack_string(&mut out, name);
    hpack_string(&mut out, value);
    out
}

/// A field taken whole from table entry `index`.
fn hpack_indexed(index: usize) -> Vec<u8> {
    let mut out = Vec::new();
    hpack_int(&mut out, 0x80, 7, index);
    out
}

/// A literal field, not indexed, with the name of table entry `index`.
fn hpack_name_indexed(index: usize, value: &str) -> Vec<u8> {
    let mut out = Vec::new();
    hpack_int(&mut out, 0x00, 4, index);
    hpack_string(&mut out, value);
    out
}

/// Whether stream `id` was answered 200 (`:status` 200 is HPACK's static
/// entry 8) or reset with `PROTOCOL_ERROR` in `frames`; `None` if neither.
fn outcome(frames: &[(u8, u8, u32, Vec<u8>)], id: u32) -> Option<&'static str> {
    frames.iter().find_map(|(kind, _, stream, payload)| {
        if *stream != id {
            return None;
        }
        match kind {
            0x1 if payload.first() == Some(&0x88) => Some("served"),
            0x3 if payload[..] == [0, 0, 0, 1] => Some("reset"),
            _ => None,
        }
    })
}

/// Reads `stream` until each of `ids` has ended (`END_STREAM` or
/// `RST_STREAM`) or the connection goes away.
async fn frames_until_ended(stream: &mut TcpStream, ids: &[u32]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut open: std::collections::BTreeSet<u32> = ids.iter().copied().collect();
    frames_until(stream, |(kind, flags, id, _)| {
        if *kind == 0x3 || (matches!(kind, 0x0 | 0x1) && flags & 0x1 != 0) {
            open.remove(id);
        }
        open.is_empty() || *kind == 0x7
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_field_in_the_dynamic_table_stays_malformed_and_a_good_entry_after_it_works() {
    let fixture = Fixture::start(Options::default()).await;
    let key = fixture.api_key("tenant-1").to_owned();
    // Two entries that fill the 4096-byte table exactly (32 + name + value
    // each): a good `x-a`, then a malformed `X-Bad`.
    let long_a = "a".repeat(2048 - 32 - 3);
    let long_bad = "b".repeat(2048 - 32 - 5);
    let steps: [(u32, Vec<u8>, &str); 8] = [
        (1, hpack_insert("x-a", &long_a), "served"),
        (3, hpack_insert("X-Bad", &long_bad), "reset"),
        // Table: 62 X-Bad, 63 x-a. x-a is still there only if X-Bad took
        // its place in the table and no more than its size.
        (5, hpack_indexed(63), "served"),
        (7, hpack_indexed(62), "reset"),
        (9, hpack_name_indexed(62, "fine"), "reset"),
        // 36 bytes more: x-a, the oldest, is evicted. Table: 62 x-c,
        // 63 X-Bad.
        (11, hpack_insert("x-c", "c"), "served"),
        (13, hpack_indexed(62), "served"),
        (15, hpack_indexed(63), "reset"),
    ];
    let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    for (id, fields, _) in &steps {
        let path = format!("/d{id}");
        bytes.extend(frame(0x1, 0x5, *id, &get_block_with(&path, &key, fields)));
    }
    stream.write_all(&bytes).await.unwrap();
    let ids: Vec<u32> = steps.iter().map(|(id, ..)| *id).collect();
    let frames = frames_until_ended(&mut stream, &ids).await;
    assert!(
        frames.iter().all(|(kind, ..)| *kind != 0x7),
        "the connection was closed with GOAWAY: {frames:?}"
    );
    for (id, _, expected) in &steps {
        assert_eq!(
            outcome(&frames, *id),
            Some(*expected),
            "stream {id}: {frames:?}"
        );
    }
    // Had X-Bad been counted smaller than its size, x-a would still be in
    // the table as entry 64; it is not, which is a connection error.
    let bytes = frame(
        0x1,
        0x5,
        17,
        &get_block_with("/d17", &key, &hpack_indexed(64)),
    );
    stream.write_all(&bytes).await.unwrap();
    let frames = frames_until_ended(&mut stream, &[17]).await;
    assert!(
        frames.iter().any(|(kind, ..)| *kind == 0x7),
        "entry 64 should have been evicted: {frames:?}"
    );
    // The shards saw the served streams only, each with the field it
    // indexed.
    let mut seen: Vec<(String, Vec<(String, String)>)> = fixture
        .backends
        .iter()
        .flat_map(|backend| backend.seen())
        .filter(|seen| seen.path.starts_with("/d"))
        .map(|seen| {
            let fields = seen
                .headers
                .iter()
                .filter(|(name, _)| ["x-a", "x-bad", "x-c"].contains(&name.as_str()))
                .cloned()
                .collect();
            (seen.path, fields)
        })
        .collect();
    seen.sort();
    let field = |name: &str, value: &str| vec![(name.to_owned(), value.to_owned())];
    assert_eq!(
        seen,
        vec![
            ("/d1".to_owned(), field("x-a", &long_a)),
            ("/d11".to_owned(), field("x-c", "c")),
            ("/d13".to_owned(), field("x-c", "c")),
            ("/d5".to_owned(), field("x-a", &long_a)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http2_idle_timeout_is_reloadable() {
    let fixture = Fixture::start(Options {
        extra: "[limits]\nhttp2_idle_timeout_ms = 3600000\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let path = fixture.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replace(
        "http2_idle_timeout_ms = 3600000",
        "http2_idle_timeout_ms = 300",
    );
    assert_ne!(text, edited);
    std::fs::write(&path, edited).unwrap();
    let (status, _, body) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        fixture.config().limits().http2_idle_timeout,
        Duration::from_millis(300)
    );
    // A connection accepted after the reload is closed once idle.
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    let request = Request::get("http://localhost/")
        .header("x-api-key", fixture.api_key("tenant-1"))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    assert_eq!(response.await.unwrap().status(), StatusCode::OK);
    tokio::time::timeout(DEADLINE, connection)
        .await
        .expect("an idle connection outlived the reloaded http2_idle_timeout_ms")
        .unwrap()
        .unwrap();
    drop(client);
}

/// An HTTP/2 shard (the h2 crate's server) that answers every stream at
/// once, `started` and no end, then reads the request body and logs how
/// it ended: `"<path> <bytes> end"`, or `"<path> <bytes> reset <reason>"`;
/// except `/late`, answered only once its body has ended.
async fn duplex_h2_shard() -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    let seen = Arc::clone(&seen);
                    tokio::spawn(async move {
                        let path = request.uri().path().to_owned();
                        if path == "/healthz" {
                            let _ = respond.send_response(Response::new(()), true);
                            return;
                        }
                        let mut started = None;
                        if path != "/late" {
                            let Ok(mut send) = respond.send_response(Response::new(()), false)
                            else {
                                return;
                            };
                            let _ = send.send_data(Bytes::from_static(b"started"), false);
                            started = Some(send);
                        }
                        let mut body = request.into_body();
                        let mut got = 0;
                        let end = loop {
                            match body.data().await {
                                None => break "end".to_owned(),
                                Some(Ok(data)) => {
                                    got += data.len();
                                    let _ = body.flow_control().release_capacity(data.len());
                                }
                                Some(Err(error)) => break format!("reset {:?}", error.reason()),
                            }
                        };
                        seen.lock().unwrap().push(format!("{path} {got} {end}"));
                        match started {
                            Some(mut send) => {
                                let _ = send.send_data(Bytes::from_static(b"done"), true);
                            }
                            None => {
                                let _ = respond.send_response(Response::new(()), true);
                            }
                        }
                    });
                }
            });
        }
    });
    (addr, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_stalled_after_its_answer_began_is_reset_with_cancel_on_both_http2_streams() {
    // An HTTP/2 shard answers before it has read the body (a streaming
    // call): the client's answer has begun when its body stalls, so the
    // stream can only be reset; the shard's stream is reset with it.
    let (addr, log) = duplex_h2_shard().await;
    let fixture = Fixture::start(Options {
        shards: 0,
        k: 1,
        tenants: 2,
        shard_entries: vec![
            gateway::config::writer::Shard::new("c0", format!("http://{addr}")).speaking("h2c"),
        ],
        routing: "per_try_timeout_ms = 10000\nrequest_timeout_ms = 3600000\n".into(),
        extra: "[limits]\nclient_body_timeout_ms = 300\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let key = fixture.api_key("tenant-1").to_owned();
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    let (response, stalled) = open_upload(&mut client, "POST", "/duplex", &key, &[], b"some");
    let response = tokio::time::timeout(DEADLINE, response)
        .await
        .expect("the shard's answer never began")
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let first = tokio::time::timeout(DEADLINE, body.data()).await.unwrap();
    assert_eq!(first.unwrap().unwrap(), Bytes::from_static(b"started"));
    let ended = tokio::time::timeout(DEADLINE, body.data())
        .await
        .expect("the stream whose body stalled was never reset");
    let error = ended.expect("reset, not ended").unwrap_err();
    assert_eq!(error.reason(), Some(h2::Reason::CANCEL), "{error}");
    assert!(
        eventually(DEADLINE, || !log.lock().unwrap().is_empty()).await,
        "the shard's stream was never ended"
    );
    assert_eq!(*log.lock().unwrap(), ["/duplex 4 reset Some(CANCEL)"]);
    let c0 = fixture.shard("c0");
    assert!(
        eventually(DEADLINE, || c0.in_flight() == 0).await,
        "c0 still has {} in flight",
        c0.in_flight()
    );
    assert!(client_timeouts(&fixture).await >= 1.0);
    drop(stalled);

    // The same shard, a body that stalls before any answer: 408, and the
    // shard's stream reset with CANCEL.
    let (response, stalled) = open_upload(&mut client, "POST", "/late", &key, &[], b"some");
    assert_eq!(
        status_of(response, "the stalled POST before any answer").await,
        StatusCode::REQUEST_TIMEOUT
    );
    assert!(eventually(DEADLINE, || log.lock().unwrap().len() == 2).await);
    assert_eq!(log.lock().unwrap()[1], "/late 4 reset Some(CANCEL)");
    assert!(eventually(DEADLINE, || c0.in_flight() == 0).await);
    assert!(client_timeouts(&fixture).await >= 2.0);
    assert!(!connection.is_finished());
    drop((stalled, client));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_body_timeout_is_reloadable_and_checked_on_reload() {
    let (shard, log) = reading_shard().await;
    let fixture = Fixture::start(Options {
        routing: "request_timeout_ms = 3600000\n".into(),
        extra: "[limits]\nclient_body_timeout_ms = 3600000\n".into(),
        admin_token: Some(TOKEN.into()),
        ..shard.options()
    })
    .await;
    let path = fixture.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    // Out of range: refused naming the key, the running value kept.
    std::fs::write(
        &path,
        text.replace(
            "client_body_timeout_ms = 3600000",
            "client_body_timeout_ms = 0",
        ),
    )
    .unwrap();
    let (status, _, body) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    let body = String::from_utf8_lossy(&body);
    assert_ne!(status, StatusCode::OK, "{body}");
    assert!(body.contains("limits.client_body_timeout_ms"), "{body}");
    assert_eq!(
        fixture.config().limits().client_body_timeout,
        Duration::from_secs(3600)
    );
    std::fs::write(
        &path,
        text.replace(
            "client_body_timeout_ms = 3600000",
            "client_body_timeout_ms = 300",
        ),
    )
    .unwrap();
    let (status, _, body) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    // A connection accepted after the reload runs the new timer.
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let key = fixture.api_key("tenant-1").to_owned();
    let (response, stalled) = open_upload(&mut client, "POST", "/upload", &key, &[], b"half");
    assert_eq!(
        status_of(response, "the stalled POST after the reload").await,
        StatusCode::REQUEST_TIMEOUT
    );
    assert!(eventually(DEADLINE, || !log.lock().unwrap().is_empty()).await);
    assert_eq!(*log.lock().unwrap(), ["/upload aborted"]);
    drop((stalled, client));
}
