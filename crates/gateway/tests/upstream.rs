//! The backend connection pool, against a raw HTTP/1.1 server on 127.0.0.1
//! that counts the connections it accepts: connections are reused only
//! when that is safe, and closed when they are not.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gateway::body::AttemptBody;
use gateway::upstream::{SendError, Upstream, UpstreamBody};
use gateway::wire::RequestHead;
use http::{HeaderMap, HeaderValue, Method, Response, Uri};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server that answers every request on a connection with `body` (a
/// fixed-length response), counting accepted connections.
async fn counting_server(body: &'static [u8]) -> (Uri, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0_u8; 4096];
                loop {
                    // One request per head; these requests have no body.
                    while !buffer.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buffer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buffer.drain(..end);
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                    if stream.write_all(head.as_bytes()).await.is_err()
                        || stream.write_all(body).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}").parse().unwrap(), accepted)
}

/// Sends `GET /x` through `upstream`.
async fn get(upstream: &Arc<Upstream>, uri: &Uri) -> Result<Response<UpstreamBody>, SendError> {
    let host: HeaderValue = uri.authority().unwrap().as_str().parse().unwrap();
    let request = RequestHead {
        method: &Method::GET,
        target: "/x",
        headers: &HeaderMap::new(),
        host: Some(&host),
        shard: None,
    };
    upstream.send(request, AttemptBody::Done, CONNECT).await
}

const CONNECT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_connection_whose_response_was_read_is_reused() {
    let (uri, accepted) = counting_server(b"hello").await;
    let upstream = Arc::new(Upstream::new(&uri));
    for _ in 0..10 {
        let response = get(&upstream, &uri).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection for ten requests"
    );
    assert_eq!(upstream.idle_count(), 1);
}

#[tokio::test]
async fn a_response_abandoned_mid_body_never_carries_another_request() {
    // Large enough that the first frame cannot be the whole body.
    static BIG: [u8; 4 << 20] = [b'x'; 4 << 20];
    let (uri, accepted) = counting_server(&BIG).await;
    let upstream = Arc::new(Upstream::new(&uri));
    let response = get(&upstream, &uri).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert!(first.data_ref().is_some_and(|data| data.len() < BIG.len()));
    drop(body);
    assert_eq!(
        upstream.idle_count(),
        0,
        "a half-read connection is not pooled"
    );
    let response = get(&upstream, &uri).await.unwrap();
    let whole = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(whole.len(), BIG.len());
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn idle_connections_past_their_time_are_closed_not_reused() {
    let (uri, accepted) = counting_server(b"hello").await;
    let upstream = Arc::new(Upstream::with_idle_timeout(&uri, Duration::ZERO));
    for _ in 0..3 {
        let response = get(&upstream, &uri).await.unwrap();
        response.into_body().collect().await.unwrap();
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "every request on a new connection"
    );
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

#[tokio::test]
async fn a_pooled_connection_the_backend_closed_is_replaced() {
    // The server answers once per connection and then closes it (without
    // saying so in the head), the keep-alive race every pool meets.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut chunk = [0_u8; 4096];
            let _ = stream.read(&mut chunk).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
            drop(stream);
        }
    });
    let uri: Uri = format!("http://{addr}").parse().unwrap();
    let upstream = Arc::new(Upstream::new(&uri));
    for round in 1..=3 {
        let response = get(&upstream, &uri).await;
        // A request sent on a connection that is closing either finds it
        // closed in the pool (and takes a new one) or fails as a stale
        // exchange, which the attempt resends; it never hangs.
        match response {
            Ok(response) => {
                response.into_body().collect().await.unwrap();
            }
            Err(SendError::Exchange(error)) => {
                assert!(error.closed_before_answering(), "{error}");
            }
            Err(other) => panic!("round {round}: {other:?}"),
        }
    }
    assert!(accepted.load(Ordering::SeqCst) >= 2);
}
