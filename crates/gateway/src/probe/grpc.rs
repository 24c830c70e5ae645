//! The standard gRPC health check (`grpc.health.v1.Health/Check`, with
//! the empty service name, which asks about the server as a whole), for
//! HTTP/2 shards under `health.grpc = true`: the shard passes when it
//! answers `SERVING` with `grpc-status: 0`.
//!
//! The messages are small enough to write and read by hand, so the gateway
//! needs no protobuf library: the request is the empty message, and the
//! answer's one field that matters is field 1, a varint.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, header};
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::config::HealthSettings;
use crate::protocol::wire::{Fields, RequestHead};
use crate::state::ShardRuntime;
use crate::trust::headers::{Added, Inbound};
use crate::trust::target::backend_target;
use crate::upstream::Timeouts;
use crate::upstream::body::AttemptBody;

/// The method every gRPC health check calls.
pub const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// The most of an answer that is read (as much as a GET check reads); a
/// longer one fails: a health answer is a few bytes.
const MAX_BODY: usize = 64 * 1024;

/// `HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: u64 = 1;

/// The request: one uncompressed message of length 0 (an empty
/// `HealthCheckRequest`, whose `service` is "").
const EMPTY_MESSAGE: [u8; 5] = [0, 0, 0, 0, 0];

/// One gRPC health check's exchange, without its deadline (the caller's).
pub(super) async fn exchange(
    shard: &ShardRuntime,
    settings: &HealthSettings,
    started: Instant,
) -> bool {
    let uri = http::Uri::from_static(CHECK_PATH);
    let target = backend_target(&shard.path_prefix, &uri);
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    // gRPC servers refuse a call that does not say it takes trailers.
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    let fields = Fields::from_header_map(&headers);
    let request = RequestHead {
        method: &Method::POST,
        target: &target,
        fields: &fields,
        inbound: &Inbound::everything(),
        stated: None,
        added: Added::default(),
        host: shard.host_header.as_ref(),
        shard: None,
    };
    let timeouts = Timeouts {
        connect: settings.timeout,
        body_idle: settings.timeout,
        body_total: None,
    };
    let body = AttemptBody::Buffered(Some(Bytes::from_static(&EMPTY_MESSAGE)));
    let Ok(response) = shard.upstream.send(request, body, timeouts, started).await else {
        return false;
    };
    if !response.status().is_success() {
        return false;
    }
    // A call that fails at once answers with its status in the head.
    let mut status = response
        .body()
        .fields()
        .get("grpc-status")
        .map(<[u8]>::to_vec);
    let mut body = response.into_body();
    let mut message = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return false;
        };
        match frame.into_data() {
            Ok(data) => {
                if message.len() + data.len() > MAX_BODY {
                    return false;
                }
                message.extend_from_slice(&data);
            }
            Err(frame) => {
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(value) = trailers.get("grpc-status")
                {
                    status = Some(value.as_bytes().to_vec());
                }
            }
        }
    }
    status.as_deref() == Some(b"0") && serving(&message)
}

/// Whether `body` is one uncompressed `HealthCheckResponse` whose status
/// is `SERVING`.
pub fn serving(body: &[u8]) -> bool {
    // A compressed message (flag 1) was not asked for.
    let Some((&[0], rest)) = body.split_first_chunk::<1>() else {
        return false;
    };
    let Some((length, message)) = rest.split_first_chunk::<4>() else {
        return false;
    };
    if u32::from_be_bytes(*length) as usize != message.len() {
        return false;
    }
    status(message) == Some(SERVING)
}

/// Field 1 (`status`) of a `HealthCheckResponse`, its last value winning as
/// protobuf says; 0 (`UNKNOWN`) when absent; `None` when the message is
/// malformed.
fn status(mut message: &[u8]) -> Option<u64> {
    let mut status = 0;
    while !message.is_empty() {
        let tag = varint(&mut message)?;
        match (tag >> 3, tag & 0x7) {
            (1, 0) => status = varint(&mut message)?,
            (_, 0) => {
                varint(&mut message)?;
            }
            (_, 1) => message = message.get(8..)?,
            (_, 2) => {
                let length = usize::try_from(varint(&mut message)?).ok()?;
                message = message.get(length..)?;
            }
            (_, 5) => message = message.get(4..)?,
            _ => return None,
        }
    }
    Some(status)
}

/// Reads one varint off the front of `bytes`.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0_u64;
    for (index, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7F) << (7 * index);
        if byte & 0x80 == 0 {
            *bytes = &bytes[index + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_serving_answer_passes() {
        assert!(serving(&[0, 0, 0, 0, 2, 0x08, 0x01]));
        // Another field before it is skipped; the last status wins.
        assert!(serving(&[
            0, 0, 0, 0, 7, 0x12, 0x01, b'x', 0x08, 0x02, 0x08, 0x01
        ]));
        // NOT_SERVING, UNKNOWN (absent), compressed, short, or truncated.
        assert!(!serving(&[0, 0, 0, 0, 2, 0x08, 0x02]));
        assert!(!serving(&[0, 0, 0, 0, 0]));
        assert!(!serving(&[1, 0, 0, 0, 2, 0x08, 0x01]));
        assert!(!serving(&[0, 0, 0, 0, 3, 0x08, 0x01]));
        assert!(!serving(&[0, 0, 0, 0, 1, 0x08]));
        assert!(!serving(&[]));
        assert!(!serving(&[0, 0, 0, 0, 2, 0x0B, 0x01]));
    }
}
