//! The sick-shard modes through real sockets: each misbehaves on its path
//! only, answers the other path healthy on the same keep-alive connection,
//! counts data requests, and a switch reaches connections already open.

use std::time::Duration;

use backend::{Backend, Mode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Long enough for a local answer to arrive, short enough for a quick test.
const QUIET: Duration = Duration::from_millis(300);

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: shard\r\nx-shuffle-tenant: acme\r\n\r\n").into_bytes()
}

async fn connect(backend: &Backend) -> TcpStream {
    TcpStream::connect(backend.addr()).await.unwrap()
}

/// Reads up to the end of a response head; returns the head and any body
/// bytes read past it.
async fn read_head(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8(buf[..end].to_vec()).unwrap();
            return (head.to_ascii_lowercase(), buf[end + 4..].to_vec());
        }
        let mut chunk = [0u8; 4096];
        let n = timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("a head within 5 s")
            .unwrap();
        assert!(n > 0, "closed before a head: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads until `want` bytes are in `have`.
async fn read_exactly(stream: &mut TcpStream, have: &mut Vec<u8>, want: usize) {
    while have.len() < want {
        let mut chunk = vec![0u8; 64 * 1024];
        let n = timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("data within 5 s")
            .unwrap();
        assert!(n > 0, "closed after {} of {want} bytes", have.len());
        have.extend_from_slice(&chunk[..n]);
    }
}

/// A whole `content-length` response: head and JSON body.
async fn healthy_answer(stream: &mut TcpStream) -> serde_json::Value {
    let (head, mut body) = read_head(stream).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("content-length")
        .parse()
        .unwrap();
    read_exactly(stream, &mut body, length).await;
    assert_eq!(body.len(), length, "nothing past the body");
    serde_json::from_slice(&body).unwrap()
}

/// True when nothing arrives and the connection stays open for `QUIET`.
async fn silent(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 64];
    timeout(QUIET, stream.read(&mut chunk)).await.is_err()
}

/// True when the peer closes (FIN or reset) within a few seconds.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        match timeout(Duration::from_secs(5), stream.read(&mut chunk)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

async fn backend_in(mode: Mode) -> Backend {
    let backend = Backend::start("s0").await.unwrap();
    backend.set_mode(mode);
    // The supervisor applies the switch on its own task.
    tokio::time::sleep(Duration::from_millis(20)).await;
    backend
}

/// The health path answers healthy; checked on its own connection.
async fn health_is_healthy(backend: &Backend) {
    let mut stream = connect(backend).await;
    stream.write_all(&get("/healthz")).await.unwrap();
    let body = healthy_answer(&mut stream).await;
    assert_eq!(body["path"], "/healthz");
}

/// A data request answers healthy, with the same JSON as the hyper handler.
async fn data_is_healthy(backend: &Backend) {
    let mut stream = connect(backend).await;
    stream.write_all(&get("/x?q=1")).await.unwrap();
    let body = healthy_answer(&mut stream).await;
    assert_eq!(body["shard"], "s0");
    assert_eq!(body["tenant"], "acme");
    assert_eq!(body["method"], "GET");
    assert_eq!(body["path"], "/x");
    assert_eq!(body["body_len"], 0);
}

#[tokio::test]
async fn stall_body_sends_a_head_and_16_bytes_then_nothing() {
    for (mode, path) in [(Mode::StallBody, "/x"), (Mode::HealthStallBody, "/healthz")] {
        let backend = backend_in(mode.clone()).await;
        let mut stream = connect(&backend).await;
        stream.write_all(&get(path)).await.unwrap();
        let (head, mut body) = read_head(&mut stream).await;
        assert!(head.starts_with("http/1.1 200"), "{mode}: {head}");
        assert!(head.contains("content-length: 1024"), "{mode}: {head}");
        read_exactly(&mut stream, &mut body, 16).await;
        assert_eq!(body.len(), 16, "{mode}");
        assert!(
            silent(&mut stream).await,
            "{mode}: more arrived or it closed"
        );
        if mode == Mode::StallBody {
            health_is_healthy(&backend).await;
            assert_eq!(backend.requests(), 1);
            assert_eq!(backend.seen()[0].path, "/x");
        } else {
            data_is_healthy(&backend).await;
            assert_eq!(backend.requests(), 1, "health checks are not counted");
        }
    }
}

#[tokio::test]
async fn trickle_sends_one_byte_chunks_forever() {
    let period = Duration::from_millis(40);
    for (mode, path) in [
        (Mode::Trickle(period), "/x"),
        (Mode::HealthTrickle(period), "/healthz"),
    ] {
        let backend = backend_in(mode.clone()).await;
        let mut stream = connect(&backend).await;
        stream.write_all(&get(path)).await.unwrap();
        let (head, mut body) = read_head(&mut stream).await;
        assert!(head.starts_with("http/1.1 200"), "{mode}: {head}");
        assert!(
            head.contains("transfer-encoding: chunked"),
            "{mode}: {head}"
        );
        read_exactly(&mut stream, &mut body, 3 * b"1\r\nx\r\n".len()).await;
        assert!(
            body.starts_with(b"1\r\nx\r\n1\r\nx\r\n1\r\nx\r\n"),
            "{body:?}"
        );
        assert!(!body.windows(3).any(|w| w == b"\n0\r"), "no last chunk");
        if mode == Mode::Trickle(period) {
            health_is_healthy(&backend).await;
        } else {
            data_is_healthy(&backend).await;
        }
    }
}

#[tokio::test]
async fn close_after_head_sends_a_head_and_closes() {
    let backend = backend_in(Mode::CloseAfterHead).await;
    let mut stream = connect(&backend).await;
    stream.write_all(&get("/x")).await.unwrap();
    let mut all = Vec::new();
    timeout(Duration::from_secs(5), stream.read_to_end(&mut all))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(all).unwrap().to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("content-length: 1024"), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "no body bytes: {text:?}");
    assert_eq!(backend.requests(), 1);
    health_is_healthy(&backend).await;
}

#[tokio::test]
async fn health_no_head_reads_the_check_and_never_answers() {
    let backend = backend_in(Mode::HealthNoHead).await;
    let mut stream = connect(&backend).await;
    stream.write_all(&get("/healthz")).await.unwrap();
    assert!(silent(&mut stream).await);
    data_is_healthy(&backend).await;
    assert_eq!(backend.requests(), 1);
}

#[tokio::test]
async fn health_huge_sends_every_byte_and_keeps_the_connection() {
    let size = 3_000_000;
    let backend = backend_in(Mode::HealthHuge(size)).await;
    let mut stream = connect(&backend).await;
    stream.write_all(&get("/healthz")).await.unwrap();
    let (head, mut body) = read_head(&mut stream).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains(&format!("content-length: {size}")), "{head}");
    read_exactly(&mut stream, &mut body, size as usize).await;
    assert_eq!(body.len(), size as usize, "nothing past the body");
    // The same connection then serves a data request.
    stream.write_all(&get("/x")).await.unwrap();
    assert_eq!(healthy_answer(&mut stream).await["path"], "/x");
}

#[tokio::test]
async fn health_garbage_answers_bytes_that_are_not_http_and_closes() {
    let backend = backend_in(Mode::HealthGarbage).await;
    let mut stream = connect(&backend).await;
    stream.write_all(&get("/healthz")).await.unwrap();
    let mut all = Vec::new();
    timeout(Duration::from_secs(5), stream.read_to_end(&mut all))
        .await
        .unwrap()
        .unwrap();
    assert!(!all.is_empty());
    assert!(!all.starts_with(b"HTTP/"), "{all:?}");
    data_is_healthy(&backend).await;
}

#[tokio::test]
async fn unread_holds_connections_without_reading_or_counting() {
    let backend = backend_in(Mode::Unread).await;
    let mut stream = connect(&backend).await;
    stream.write_all(&get("/x")).await.unwrap();
    assert!(silent(&mut stream).await);
    let mut health = connect(&backend).await;
    health.write_all(&get("/healthz")).await.unwrap();
    assert!(silent(&mut health).await);
    assert_eq!(backend.requests(), 0);
    assert!(backend.seen().is_empty());
}

#[tokio::test]
async fn the_raw_loop_serves_keep_alive_requests_with_bodies_then_misbehaves() {
    let backend = backend_in(Mode::HealthStallBody).await;
    let mut stream = connect(&backend).await;
    stream.write_all(&get("/a")).await.unwrap();
    assert_eq!(healthy_answer(&mut stream).await["path"], "/a");
    stream
        .write_all(b"POST /b HTTP/1.1\r\nhost: s\r\ncontent-length: 5\r\n\r\nhello")
        .await
        .unwrap();
    assert_eq!(healthy_answer(&mut stream).await["body_len"], 5);
    stream
        .write_all(
            b"POST /c HTTP/1.1\r\nhost: s\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    let body = healthy_answer(&mut stream).await;
    assert_eq!(
        (body["path"].as_str(), body["body_len"].as_u64()),
        (Some("/c"), Some(7))
    );
    stream.write_all(&get("/healthz")).await.unwrap();
    let (head, _) = read_head(&mut stream).await;
    assert!(head.contains("content-length: 1024"), "{head}");
    assert!(silent(&mut stream).await);
    let paths: Vec<String> = backend.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/a", "/b", "/c"]);
    assert_eq!(backend.seen()[0].header("x-shuffle-tenant"), ["acme"]);
}

#[tokio::test]
async fn a_switch_closes_open_connections_so_the_next_start_in_the_new_mode() {
    let backend = backend_in(Mode::Healthy).await;
    // A pooled keep-alive connection, as the gateway holds.
    let mut pooled = connect(&backend).await;
    pooled.write_all(&get("/x")).await.unwrap();
    healthy_answer(&mut pooled).await;

    backend.set_mode(Mode::HealthGarbage);
    assert!(
        closed(&mut pooled).await,
        "the hyper connection stayed open"
    );
    let mut stream = connect(&backend).await;
    stream.write_all(&get("/x")).await.unwrap();
    healthy_answer(&mut stream).await;

    backend.set_mode(Mode::Healthy);
    assert!(closed(&mut stream).await, "the raw connection stayed open");
    health_is_healthy(&backend).await;
}

#[tokio::test]
async fn switching_between_hyper_modes_keeps_connections() {
    let backend = backend_in(Mode::Healthy).await;
    let mut pooled = connect(&backend).await;
    pooled.write_all(&get("/x")).await.unwrap();
    healthy_answer(&mut pooled).await;
    backend.set_mode(Mode::Slow(Duration::from_millis(1)));
    tokio::time::sleep(Duration::from_millis(20)).await;
    pooled.write_all(&get("/y")).await.unwrap();
    assert_eq!(healthy_answer(&mut pooled).await["path"], "/y");
}

#[tokio::test]
async fn crash_on_poison_drops_every_connection_refuses_then_comes_back() {
    let backend = backend_in("crash-on-poison:600".parse().unwrap()).await;
    // Healthy until the marker: data and health, on a connection kept open.
    health_is_healthy(&backend).await;
    let mut bystander = connect(&backend).await;
    bystander.write_all(&get("/x?q=1")).await.unwrap();
    healthy_answer(&mut bystander).await;
    assert_eq!(backend.crashes(), 0);

    let mut poison = connect(&backend).await;
    poison
        .write_all(b"GET /x HTTP/1.1\r\nhost: shard\r\nx-poison: 1\r\n\r\n")
        .await
        .unwrap();
    // The poison request gets no answer, and both connections go.
    assert!(
        closed(&mut poison).await,
        "the poison connection is dropped"
    );
    assert!(
        closed(&mut bystander).await,
        "every open connection is dropped"
    );
    assert_eq!(backend.crashes(), 1);
    // New connections are refused while it is down...
    assert!(
        TcpStream::connect(backend.addr()).await.is_err(),
        "refused while crashed"
    );
    // ...and it comes back on its own, still in the same mode.
    tokio::time::sleep(Duration::from_millis(900)).await;
    data_is_healthy(&backend).await;
    assert_eq!(
        backend.mode(),
        Mode::CrashOnPoison(Duration::from_millis(600))
    );
}

#[tokio::test]
async fn the_poison_marker_is_harmless_in_other_modes_and_on_the_health_path() {
    let backend = backend_in(Mode::Healthy).await;
    let mut stream = connect(&backend).await;
    stream
        .write_all(b"GET /x HTTP/1.1\r\nhost: shard\r\nx-poison: 1\r\n\r\n")
        .await
        .unwrap();
    healthy_answer(&mut stream).await;
    backend.set_mode("crash-on-poison:600".parse().unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut health = connect(&backend).await;
    health
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: shard\r\nx-poison: 1\r\n\r\n")
        .await
        .unwrap();
    healthy_answer(&mut health).await;
    assert_eq!(backend.crashes(), 0);
}

#[tokio::test]
async fn healing_a_crashed_shard_brings_it_back_at_once() {
    let backend = backend_in("crash-on-poison:60000".parse().unwrap()).await;
    let mut poison = connect(&backend).await;
    poison
        .write_all(b"GET /x HTTP/1.1\r\nhost: shard\r\nX-Poison: yes\r\n\r\n")
        .await
        .unwrap();
    assert!(closed(&mut poison).await);
    assert!(TcpStream::connect(backend.addr()).await.is_err());
    backend.set_mode(Mode::Healthy);
    tokio::time::sleep(Duration::from_millis(100)).await;
    data_is_healthy(&backend).await;
}

#[tokio::test]
async fn data_store_answers_what_it_received_and_404s_the_rest() {
    let backend = backend_in(Mode::DataStore).await;
    let mut stream = connect(&backend).await;
    stream.write_all(&get("/datum")).await.unwrap();
    let (head, _) = read_head(&mut stream).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
    let mut stream = connect(&backend).await;
    stream
        .write_all(b"PUT /datum HTTP/1.1\r\nhost: shard\r\nx-shuffle-tenant: acme\r\ncontent-length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let (head, _) = read_head(&mut stream).await;
    assert!(head.starts_with("http/1.1 201"), "{head}");
    stream.write_all(&get("/datum")).await.unwrap();
    let (head, mut body) = read_head(&mut stream).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    read_exactly(&mut stream, &mut body, 5).await;
    assert_eq!(body, b"hello");
    assert_eq!(backend.stored(), 1);
    // The health path stays healthy.
    health_is_healthy(&backend).await;
}
