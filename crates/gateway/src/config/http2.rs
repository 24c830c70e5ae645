//! `[http2]`: HTTP/2 from clients (streams, keep-alive, flow-control
//! windows).

use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, MAX_MS, millis, within};

/// HTTP/2 from clients: h2 by ALPN on the TLS listener, h2c with prior
/// knowledge on the plaintext one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Http2Settings {
    /// Serve HTTP/2 at all.
    pub enabled: bool,
    /// Streams a client may have open at once on one connection.
    pub max_concurrent_streams: u32,
    /// A PING is sent after a connection has been idle this long; `None`
    /// for never.
    pub keep_alive_interval: Option<Duration>,
    /// A PING not answered within this closes the connection.
    pub keep_alive_timeout: Duration,
    /// The flow-control window of one stream, in bytes.
    pub initial_stream_window: u32,
    /// The flow-control window of a whole connection, in bytes.
    pub initial_connection_window: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp2 {
    pub(super) enabled: Option<bool>,
    max_concurrent_streams: Option<u32>,
    keep_alive_interval_ms: Option<u64>,
    keep_alive_timeout_ms: Option<u64>,
    initial_stream_window_bytes: Option<u32>,
    initial_connection_window_bytes: Option<u32>,
}

/// The largest flow-control window HTTP/2 allows (RFC 9113 §6.9.1).
const MAX_WINDOW: u32 = (1 << 31) - 1;

pub(super) fn http2_settings(h: RawHttp2) -> Result<Http2Settings, KeyProblem> {
    Ok(Http2Settings {
        enabled: h.enabled.unwrap_or(true),
        // nginx's http2_max_concurrent_streams.
        max_concurrent_streams: within(
            "http2.max_concurrent_streams",
            h.max_concurrent_streams.unwrap_or(128),
            1..=10_000,
        )?,
        // Zero turns the ping off.
        keep_alive_interval: Some(millis(
            "http2.keep_alive_interval_ms",
            h.keep_alive_interval_ms,
            30_000,
            0..=MAX_MS,
        )?)
        .filter(|interval| !interval.is_zero()),
        keep_alive_timeout: millis(
            "http2.keep_alive_timeout_ms",
            h.keep_alive_timeout_ms,
            20_000,
            1..=MAX_MS,
        )?,
        initial_stream_window: within(
            "http2.initial_stream_window_bytes",
            h.initial_stream_window_bytes.unwrap_or(1 << 20),
            65_535..=MAX_WINDOW,
        )?,
        initial_connection_window: within(
            "http2.initial_connection_window_bytes",
            h.initial_connection_window_bytes.unwrap_or(2 << 20),
            65_535..=MAX_WINDOW,
        )?,
    })
}
