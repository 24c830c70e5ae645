//! HTTP/2 from clients: h2c with prior knowledge on the plaintext listener
//! and h2 by ALPN on the TLS listener, beside HTTP/1.1 on the same ports,
//! with every per-request rule applied per stream. Real clients: hyper's
//! HTTP/2 client and curl.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::pki::{Ca, client_config};
use crate::util::{Fixture, Options};

/// An HTTP/2 connection over `io` (prior knowledge).
async fn h2_over<Io>(io: Io) -> http2::SendRequest<Full<Bytes>>
where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// One request on an HTTP/2 connection: status, headers and body.
async fn send(
    sender: &mut http2::SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> (StatusCode, http::HeaderMap, Bytes) {
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn get(fixture: &Fixture, tenant: Option<&str>, path: &str) -> Request<Full<Bytes>> {
    let mut request = Request::get(format!("http://localhost{path}"));
    if let Some(tenant) = tenant {
        request = request.header("x-api-key", fixture.api_key(tenant));
    }
    request.body(Full::new(Bytes::new())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_with_prior_knowledge_routes_every_stream_inside_its_subset() {
    let fixture = Fixture::start(Options::default()).await;
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let sender = h2_over(tcp).await;
    // Many streams at once on one connection, for two tenants, one of them
    // without a credential.
    let mut calls = Vec::new();
    for i in 0..60 {
        let tenant = match i % 3 {
            0 => Some("tenant-1"),
            1 => Some("tenant-2"),
            _ => None,
        };
        let request = get(&fixture, tenant, &format!("/h2/{i}"));
        let mut sender = sender.clone();
        calls.push(tokio::spawn(async move {
            (tenant, send(&mut sender, request).await)
        }));
    }
    for call in calls {
        let (tenant, (status, headers, body)) = call.await.unwrap();
        let Some(tenant) = tenant else {
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            continue;
        };
        assert_eq!(status, StatusCode::OK);
        assert!(
            headers
                .keys()
                .all(|name| !name.as_str().starts_with("x-shuffle"))
        );
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["tenant"], tenant);
        let shard = answer["shard"].as_str().unwrap().to_owned();
        assert!(
            fixture.subset_ids(tenant).contains(&shard),
            "{tenant} on {shard}"
        );
    }
    // The shards saw 40 requests, each once, over HTTP/1.1.
    let seen: Vec<_> = fixture
        .backends
        .iter()
        .flat_map(|backend| backend.seen())
        .filter(|seen| seen.path.starts_with("/h2/"))
        .collect();
    assert_eq!(seen.len(), 40);
    // HTTP/1.1 on the same port still works.
    assert_eq!(fixture.get("tenant-1", "/").await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_streams_through_http2_whole() {
    let fixture = Fixture::start(Options::default()).await;
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let mut sender = h2_over(tcp).await;
    let body: Vec<u8> = (0..300_000_u32).map(|i| (i % 251) as u8).collect();
    let request = Request::post("http://localhost/upload")
        .header("x-api-key", fixture.api_key("tenant-3"))
        .body(Full::new(Bytes::from(body.clone())))
        .unwrap();
    let (status, _, _) = send(&mut sender, request).await;
    assert_eq!(status, StatusCode::OK);
    let seen: Vec<_> = fixture
        .backends
        .iter()
        .flat_map(|backend| backend.seen())
        .filter(|seen| seen.path == "/upload")
        .collect();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body_len, body.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_is_chosen_by_alpn_on_the_tls_listener() {
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new("h2 test CA");
    let (cert, key) = ca.server(&["localhost"]).write(certs.path(), "server");
    let fixture = Fixture::start(Options {
        extra: format!(
            "[tls]\nlisten = \"127.0.0.1:0\"\ncert_file = {cert:?}\nkey_file = {key:?}\n"
        ),
        ..Options::default()
    })
    .await;
    let tls_addr = fixture.running.tls_addr.unwrap();
    let mut config = (*client_config(&[ca.der()], None, &[])).clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let stream = crate::pki::connect(tls_addr, "localhost", std::sync::Arc::new(config))
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut sender = h2_over(stream).await;
    let (status, _, body) = send(&mut sender, get(&fixture, Some("tenant-4"), "/over-h2")).await;
    assert_eq!(status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["tenant"], "tenant-4");

    // curl, a real client, both ways: h2 over TLS and h2c.
    let ca_file = certs.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let port = tls_addr.port();
    let curl = |args: Vec<String>| {
        let output = std::process::Command::new("curl")
            .args(args)
            .output()
            .expect("curl is installed (.ci/run installs it)");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let key = format!("x-api-key: {}", fixture.api_key("tenant-5"));
    let version = "%{http_version}";
    let over_tls = curl(vec![
        "-sS".into(),
        "--http2".into(),
        "--cacert".into(),
        ca_file.display().to_string(),
        "--resolve".into(),
        format!("localhost:{port}:127.0.0.1"),
        "-H".into(),
        key.clone(),
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        format!("{version} %{{http_code}}"),
        format!("https://localhost:{port}/curl"),
    ]);
    assert_eq!(over_tls, "2 200");
    let h2c = curl(vec![
        "-sS".into(),
        "--http2-prior-knowledge".into(),
        "-H".into(),
        key,
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        format!("{version} %{{http_code}}"),
        format!("http://{}/curl", fixture.running.addr),
    ]);
    assert_eq!(h2c, "2 200");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_header_list_is_refused_and_reaches_nobody() {
    let fixture = Fixture::start(Options {
        extra: "[limits]\nmax_header_bytes = 4096\n".into(),
        ..Options::default()
    })
    .await;
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let (mut sender, connection) = http2::Builder::new(TokioExecutor::new())
        .max_header_list_size(1 << 20)
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::get("http://localhost/big")
        .header("x-api-key", fixture.api_key("tenant-1"))
        .header("x-filler", "y".repeat(8000))
        .body(Full::new(Bytes::new()))
        .unwrap();
    sender.ready().await.unwrap();
    // Refused on its stream (431, or the stream reset): never served.
    if let Ok(response) = sender.send_request(request).await {
        assert_eq!(
            response.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
    }
    // A gRPC call over the limit is told so as gRPC: RESOURCE_EXHAUSTED in
    // a trailers-only answer.
    let call = Request::post("http://localhost/big")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-api-key", fixture.api_key("tenant-1"))
        .header("x-filler", "y".repeat(6000))
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    sender.ready().await.unwrap();
    let response = sender.send_request(call).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["grpc-status"], "8");
    // Far over it (past twice the limit), hyper refuses the list itself.
    let huge = Request::get("http://localhost/big")
        .header("x-api-key", fixture.api_key("tenant-1"))
        .header("x-filler", "y".repeat(20_000))
        .body(Full::new(Bytes::new()))
        .unwrap();
    sender.ready().await.unwrap();
    if let Ok(response) = sender.send_request(huge).await {
        assert_eq!(
            response.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
    }
    let reached = fixture
        .backends
        .iter()
        .flat_map(|backend| backend.seen())
        .filter(|seen| seen.path == "/big")
        .count();
    assert_eq!(reached, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_lets_open_streams_finish_and_says_goaway() {
    let backend = crate::util::CustomShard::start(|_request| async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        crate::util::text(200, "late but whole")
    })
    .await;
    let fixture = Fixture::start(Options {
        routing: "per_try_timeout_ms = 3000\n".into(),
        ..backend.options()
    })
    .await;
    let tcp = TcpStream::connect(fixture.running.addr).await.unwrap();
    let mut sender = h2_over(tcp).await;
    let request = get(&fixture, Some("tenant-1"), "/slow");
    sender.ready().await.unwrap();
    let pending = sender.send_request(request);
    let call = tokio::spawn(async move {
        let response = pending.await.unwrap();
        let status = response.status();
        (
            status,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let Fixture { running, .. } = fixture;
    let shutdown = tokio::spawn(running.shutdown());
    assert_eq!(backend.seen(), ["GET /slow"]);
    let (status, body) = call.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"late but whole");
    shutdown.await.unwrap();
    // After GOAWAY no new stream is taken (the client's connection task
    // may take a moment to read it on a busy machine).
    assert!(
        crate::util::eventually(Duration::from_secs(10), || sender.is_closed()).await,
        "the connection is gone after shutdown"
    );
    assert!(sender.ready().await.is_err());
}
