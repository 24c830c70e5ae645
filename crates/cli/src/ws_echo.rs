//! `shuffle-shard backend --protocol ws`: a WebSocket echo server, so that a
//! WebSocket quick start through the gateway needs no server of one's own.
//!
//! It speaks HTTP/1.1: an upgrade to `websocket` on any path is accepted and
//! every text and binary message is sent back as it came; pings are
//! answered (tungstenite answers them while reading) and a close is
//! answered with a close. Any other request, such as the gateway's health
//! check `GET /healthz`, gets `200` and a small JSON body naming the shard
//! and the tenant the gateway forwarded, as the HTTP/1.1 backend does.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::header::{CONNECTION, CONTENT_TYPE, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, UPGRADE};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Message, Role};

/// Binds `listen`; returns the listener and the address it got (port 0
/// becomes a free port).
pub async fn bind(listen: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    Ok((listener, bound))
}

/// Accepts connections on `listener` for ever, answering as shard `id`.
pub async fn serve(listener: TcpListener, id: String) {
    let id: Arc<str> = id.into();
    loop {
        // A failed accept (too many open files, a reset before accept) is
        // the client's loss, not a reason to stop serving the others.
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let id = Arc::clone(&id);
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(request, Arc::clone(&id)));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

/// Whether a header's comma-separated list holds `token` (any case).
fn lists(headers: &HeaderMap, name: http::header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| item.trim().eq_ignore_ascii_case(token))
}

/// One request: a WebSocket upgrade becomes an echo session, anything else
/// a 200 naming the shard.
async fn answer(
    mut request: Request<Incoming>,
    id: Arc<str>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let headers = request.headers();
    let upgrade = request.method() == Method::GET
        && lists(headers, CONNECTION, "upgrade")
        && lists(headers, UPGRADE, "websocket");
    if !upgrade {
        let tenant = headers
            .get("x-shuffle-tenant")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        let body = serde_json::json!({ "shard": &*id, "tenant": tenant }).to_string();
        let mut response = Response::new(Full::new(Bytes::from(body)));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return Ok(response);
    }
    let Some(key) = headers.get(SEC_WEBSOCKET_KEY) else {
        let mut response = Response::new(Full::new(Bytes::from_static(
            b"a WebSocket upgrade needs Sec-WebSocket-Key\n",
        )));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        return Ok(response);
    };
    let accept = derive_accept_key(key.as_bytes());
    let upgraded = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else {
            return;
        };
        let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None);
        echo(socket.await).await;
    });
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let fields = response.headers_mut();
    fields.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    fields.insert(UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        fields.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    Ok(response)
}

/// Sends every text and binary message back until the peer closes (the
/// close is answered by tungstenite) or the connection fails.
async fn echo<S>(mut socket: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = socket.next().await {
        let sent = match message {
            Message::Text(_) | Message::Binary(_) => socket.send(message).await,
            // The pong is queued while reading; flushing sends it now
            // rather than with the next echo.
            Message::Ping(_) => socket.flush().await,
            Message::Pong(_) | Message::Close(_) | Message::Frame(_) => Ok(()),
        };
        if sent.is_err() {
            break;
        }
    }
}
