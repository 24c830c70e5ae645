//! The control API through real sockets: `PUT /mode` switches the shard,
//! `GET /mode` reads it back, bad modes get a 400 that names the valid ones,
//! and the API stays up whatever the shard does.

use std::net::SocketAddr;
use std::time::Duration;

use backend::{Backend, Mode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request with `connection: close`; the status and body.
async fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: control\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    (status, body.to_owned())
}

async fn shard_with_control() -> (Backend, SocketAddr) {
    let backend = Backend::start("s0").await.unwrap();
    let control = backend
        .serve_control("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    (backend, control)
}

#[tokio::test]
async fn put_switches_the_mode_and_get_reads_it_back() {
    let (backend, control) = shard_with_control().await;
    assert_eq!(
        call(control, "GET", "/mode", "").await,
        (200, "healthy".into())
    );
    for text in [
        "health-stall",
        "trickle:250",
        "errors:503:0.5",
        "health-huge:4096",
    ] {
        assert_eq!(
            call(control, "PUT", "/mode", text).await,
            (204, String::new())
        );
        assert_eq!(backend.mode(), text.parse::<Mode>().unwrap());
        assert_eq!(call(control, "GET", "/mode", "").await, (200, text.into()));
    }
    // Surrounding whitespace (a shell's `echo`) is not part of the mode.
    assert_eq!(call(control, "PUT", "/mode", "unread\n").await.0, 204);
    assert_eq!(backend.mode(), Mode::Unread);
}

#[tokio::test]
async fn a_bad_mode_gets_a_400_naming_it_and_the_valid_ones() {
    let (backend, control) = shard_with_control().await;
    for bad in ["sick", "trickle:0", "health-huge:x", "", "slow"] {
        let (status, body) = call(control, "PUT", "/mode", bad).await;
        assert_eq!(status, 400, "{bad:?}: {body}");
        assert!(body.contains(&format!("{bad:?}")), "{bad:?}: {body}");
        assert!(
            body.contains("health-stall") && body.contains("unread"),
            "{body}"
        );
    }
    assert_eq!(backend.mode(), Mode::Healthy, "nothing changed");
}

#[tokio::test]
async fn other_paths_and_methods_are_refused() {
    let (_backend, control) = shard_with_control().await;
    assert_eq!(call(control, "GET", "/", "").await.0, 404);
    assert_eq!(call(control, "PUT", "/modes", "healthy").await.0, 404);
    assert_eq!(call(control, "DELETE", "/mode", "").await.0, 405);
}

#[tokio::test]
async fn the_control_api_outlives_a_killed_shard_and_revives_it() {
    let (backend, control) = shard_with_control().await;
    assert_eq!(call(control, "PUT", "/mode", "killed").await.0, 204);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        TcpStream::connect(backend.addr()).await.is_err(),
        "still listening"
    );
    assert_eq!(
        call(control, "GET", "/mode", "").await,
        (200, "killed".into())
    );
    assert_eq!(call(control, "PUT", "/mode", "health-garbage").await.0, 204);
    // The shard listens again, in the mode the control API set.
    let mut stream = loop {
        if let Ok(stream) = TcpStream::connect(backend.addr()).await {
            break stream;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: s\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
}

#[tokio::test]
async fn the_control_api_stops_with_its_backend() {
    let (backend, control) = shard_with_control().await;
    drop(backend);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(TcpStream::connect(control).await.is_err());
}

#[tokio::test]
async fn crashes_counts_what_the_poison_marker_did() {
    let (backend, control) = shard_with_control().await;
    assert_eq!(
        call(control, "GET", "/crashes", "").await,
        (200, "0".into())
    );
    assert_eq!(
        call(control, "PUT", "/mode", "crash-on-poison:50").await.0,
        204
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut poison = TcpStream::connect(backend.addr()).await.unwrap();
    poison
        .write_all(b"GET / HTTP/1.1\r\nhost: s\r\nx-poison: 1\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), poison.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "a crashed shard answers nothing");
    // The control API stays up through the crash and counts it.
    assert_eq!(
        call(control, "GET", "/crashes", "").await,
        (200, "1".into())
    );
    assert_eq!(
        call(control, "GET", "/mode", "").await,
        (200, "crash-on-poison:50".into())
    );
}
