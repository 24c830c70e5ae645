//! The control API: switches a running backend's mode over HTTP, so a drill
//! in another process can make a shard sick and well again.
//!
//! It listens on its own address, apart from the shard's, so that no mode
//! (not even `killed` or `unread`) takes the control API down with it:
//!
//! - `PUT /mode` with a mode in the `--mode` spelling as the body (e.g.
//!   `health-stall`, `trickle:100`): `204`, or `400` naming the bad mode and
//!   the valid ones.
//! - `GET /mode`: `200` with the current mode in that spelling.
//! - `GET /crashes`: `200` with how many times the poison marker crashed
//!   the shard (`crash-on-poison`), as a decimal number: how a drill tells
//!   which shards a poison tenant took down, even after they came back.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::{MODE_SYNTAX, Mode, ModeSwitch, ParseModeError};

/// The largest `PUT /mode` body read; every mode's spelling is far shorter.
const MAX_BODY: usize = 1024;

/// Serves the control API on `listener` for the backend behind `switch`,
/// until the task is dropped or aborted (which also closes its open
/// connections).
pub async fn serve(listener: TcpListener, switch: ModeSwitch) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let switch = switch.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| answer(switch.clone(), request));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // Reaps finished connections so the set does not grow.
            Some(_) = connections.join_next() => {}
        }
    }
}

async fn answer(
    switch: ModeSwitch,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.uri().path() == "/crashes" && request.method() == Method::GET {
        return Ok(text(StatusCode::OK, switch.crashes().to_string()));
    }
    if request.uri().path() != "/mode" {
        return Ok(text(
            StatusCode::NOT_FOUND,
            "the control API serves /mode and GET /crashes only\n",
        ));
    }
    match *request.method() {
        Method::GET => Ok(text(StatusCode::OK, switch.get().to_string())),
        Method::PUT => {
            let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => {
                    return Ok(text(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("a mode is at most {MAX_BODY} bytes; use one of {MODE_SYNTAX}\n"),
                    ));
                }
            };
            let parsed = std::str::from_utf8(&body)
                .map_err(|_| ParseModeError::Unknown {
                    text: String::from_utf8_lossy(&body).into_owned(),
                })
                .and_then(|text| text.trim().parse::<Mode>());
            match parsed {
                Ok(mode) => match switch.try_set(mode) {
                    Ok(()) => Ok(text(StatusCode::NO_CONTENT, "")),
                    Err(unsupported) => {
                        Ok(text(StatusCode::BAD_REQUEST, format!("{unsupported}\n")))
                    }
                },
                Err(error) => Ok(text(StatusCode::BAD_REQUEST, bad_mode(&error))),
            }
        }
        _ => {
            let mut response = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "use GET /mode or PUT /mode\n",
            );
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET, PUT"));
            Ok(response)
        }
    }
}

/// The `400` message: what is wrong, and every valid spelling (which the
/// error for an unknown name already lists).
fn bad_mode(error: &ParseModeError) -> String {
    match error {
        ParseModeError::Unknown { .. } => format!("{error}\n"),
        _ => format!("{error}; the modes are {MODE_SYNTAX}\n"),
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if status != StatusCode::NO_CONTENT {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    response
}
