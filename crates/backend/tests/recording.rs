//! A backend records what it sees only when asked to, and counts requests either way.

use std::net::SocketAddr;

use backend::{Backend, Recording};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends one `GET /x` with a tenant header and reads the answer to its end.
async fn get(backend: &Backend) -> String {
    let mut stream = TcpStream::connect(backend.addr()).await.unwrap();
    stream
        .write_all(
            b"GET /x HTTP/1.1\r\nhost: shard\r\nx-shuffle-tenant: acme\r\nconnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

#[tokio::test]
async fn a_recording_backend_keeps_each_request() {
    let backend = Backend::start_with("s0", any_port(), Recording::Every)
        .await
        .unwrap();
    let answer = get(&backend).await;
    assert!(answer.contains(r#""tenant":"acme""#), "{answer}");
    let seen = backend.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/x");
    assert_eq!(seen[0].header("x-shuffle-tenant"), ["acme"]);
    assert_eq!(backend.requests(), 1);
}

#[tokio::test]
async fn a_backend_that_does_not_record_still_answers_and_counts() {
    let backend = Backend::start_with("s0", any_port(), Recording::Off)
        .await
        .unwrap();
    for _ in 0..3 {
        let answer = get(&backend).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""tenant":"acme""#), "{answer}");
    }
    assert!(backend.seen().is_empty());
    assert_eq!(backend.requests(), 3);
}
