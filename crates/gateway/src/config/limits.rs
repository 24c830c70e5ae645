//! `[limits]`, `[limits.tenant]` and `[limits.shard]`: connection, size
//! and time limits, every tenant's default limits (also read by the
//! tenants file), and the default in-flight cap of shards.

use std::time::Duration;

use serde::Deserialize;

use super::cells::MAX_SHARD_IN_FLIGHT;
use super::check::{KeyProblem, MAX_MS, millis, within};
use super::store::{Redacted, RedisUrl, StoreSettings};

/// Connection and size limits.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LimitSettings {
    /// Largest request head (request line and headers).
    pub max_header_bytes: usize,
    /// Largest request body.
    pub max_body_bytes: u64,
    /// Time a client has to send its request head (slowloris guard).
    pub header_read_timeout: Duration,
    /// Time in-flight requests get to finish on shutdown.
    pub shutdown_grace: Duration,
    /// Client connections served at once; more wait in the listen queue.
    /// A closing connection that still drains what its client sends
    /// (lingering) holds its place until it is gone.
    pub max_connections: usize,
    /// How long a response body may wait for bytes from its backend before
    /// both sides are closed (and the shard charged with a failure).
    pub backend_idle_timeout: Duration,
    /// How long a response may wait for its client to accept bytes before
    /// both sides are closed.
    pub client_write_timeout: Duration,
    /// How long a request body still open may send nothing while the
    /// gateway waits for it before the request is ended (408, or its
    /// stream reset); on HTTP/2, per stream.
    pub client_body_timeout: Duration,
    /// How long a response body may wait on its backend in all (time its
    /// client takes to read does not count) before both sides are closed
    /// and the shard charged with a failure; `None` (0 in the file, the
    /// default) for no limit, as in nginx: set it to catch a shard that
    /// trickles.
    pub backend_body_timeout: Option<Duration>,
    /// How long a tunnel (a WebSocket: an upgraded connection) may carry no
    /// byte in either direction before both sides are closed
    /// (`limits.tunnel_idle_timeout_ms`, once `websocket_idle_timeout_ms`).
    pub tunnel_idle_timeout: Duration,
    /// How long an HTTP/2 connection may have no open stream before it is
    /// closed, whatever PINGs or SETTINGS it exchanges.
    pub http2_idle_timeout: Duration,
    /// The in-flight cap of shards that set none of their own
    /// (`limits.shard.max_in_flight`); `None`: no cap.
    pub shard_max_in_flight: Option<u64>,
    /// `[limits.tenant]`: every tenant's limits unless the tenants file
    /// says otherwise, and where global limits are kept.
    pub tenant: TenantLimitSettings,
}

/// One tenant's limits as a file states them: `[limits.tenant]` for every
/// tenant, or a tenant's own entry in the tenants file. `None` leaves the
/// key to the level below (the default, then no limit); in the tenants
/// file a zero lifts the default for that tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TenantLimits {
    /// Requests of the tenant in flight at once (`max_in_flight`).
    pub max_in_flight: Option<u32>,
    /// The time one request's token takes to come back: one second over
    /// `requests_per_second` (`Duration::ZERO` for no rate limit).
    pub per_request: Option<Duration>,
    /// Requests the tenant may send at once after a quiet spell (`burst`).
    pub burst: Option<u32>,
}

/// `[limits.tenant]`.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct TenantLimitSettings {
    /// The limits of a tenant whose entry sets none.
    pub defaults: TenantLimits,
    /// Where request rates are kept across replicas (`store`), when they are.
    pub store: Option<StoreSettings>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    max_header_bytes: Option<usize>,
    max_body_bytes: Option<u64>,
    header_read_timeout_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
    max_connections: Option<usize>,
    backend_idle_timeout_ms: Option<u64>,
    client_write_timeout_ms: Option<u64>,
    client_body_timeout_ms: Option<u64>,
    backend_body_timeout_ms: Option<u64>,
    tunnel_idle_timeout_ms: Option<u64>,
    /// `tunnel_idle_timeout_ms`'s old name, still read.
    websocket_idle_timeout_ms: Option<u64>,
    http2_idle_timeout_ms: Option<u64>,
    #[serde(default)]
    tenant: RawTenantLimits,
    #[serde(default)]
    shard: RawShardLimits,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenantLimits {
    max_in_flight: Option<u32>,
    requests_per_second: Option<f64>,
    burst: Option<u32>,
    store: Option<Redacted>,
    store_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShardLimits {
    max_in_flight: Option<u64>,
}

/// The most requests per second, in-flight requests or burst a tenant
/// limit accepts: more is no limit, and a typo.
const MAX_TENANT_LIMIT: u32 = 1_000_000;

/// `requests_per_second` as the time between requests; `allow_zero` (the
/// tenants file) makes 0 mean "no rate limit".
pub(crate) fn per_request(rate: f64, allow_zero: bool) -> Result<Duration, String> {
    if allow_zero && rate == 0.0 {
        return Ok(Duration::ZERO);
    }
    if !(rate.is_finite() && rate >= 0.001 && rate <= f64::from(MAX_TENANT_LIMIT)) {
        return Err(format!(
            "{rate} is out of range; use a rate from 0.001 to {MAX_TENANT_LIMIT} requests per second{}",
            if allow_zero {
                ", or 0 for no rate limit for this tenant"
            } else {
                ""
            }
        ));
    }
    Ok(Duration::from_nanos((1e9 / rate).round() as u64))
}

/// A tenant limit count (`max_in_flight`, `burst`) within its range; 0 is
/// allowed only where it means "no limit" (`max_in_flight` in the tenants
/// file).
pub(crate) fn limit_count(value: u32, allow_zero: bool) -> Result<u32, String> {
    let least = u32::from(!allow_zero);
    if (least..=MAX_TENANT_LIMIT).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{value} is out of range; use a value from {least} to {MAX_TENANT_LIMIT}"
        ))
    }
}

fn tenant_limit_settings(t: RawTenantLimits) -> Result<TenantLimitSettings, KeyProblem> {
    let defaults = TenantLimits {
        max_in_flight: t
            .max_in_flight
            .map(|n| limit_count(n, false))
            .transpose()
            .map_err(|p| ("limits.tenant.max_in_flight", p))?,
        per_request: t
            .requests_per_second
            .map(|rate| per_request(rate, false))
            .transpose()
            .map_err(|p| ("limits.tenant.requests_per_second", p))?,
        burst: t
            .burst
            .map(|n| limit_count(n, false))
            .transpose()
            .map_err(|p| ("limits.tenant.burst", p))?,
    };
    let timeout = millis(
        "limits.tenant.store_timeout_ms",
        t.store_timeout_ms,
        5,
        1..=1_000,
    )?;
    let store = t
        .store
        .map(|Redacted(url)| RedisUrl::parse(&url))
        .transpose()
        .map_err(|p| ("limits.tenant.store", p))?
        .map(|url| {
            // `rediss://`: checked against the system's trust store.
            let tls = url
                .tls
                .then(|| super::tls::store_tls("limits.tenant.store", None))
                .transpose()
                .map_err(|(_, problem)| ("limits.tenant.store", problem))?;
            Ok::<_, KeyProblem>(StoreSettings { url, timeout, tls })
        })
        .transpose()?;
    Ok(TenantLimitSettings { defaults, store })
}

pub(super) fn limit_settings(l: RawLimits) -> Result<LimitSettings, KeyProblem> {
    Ok(LimitSettings {
        tenant: tenant_limit_settings(l.tenant)?,
        max_header_bytes: within(
            "limits.max_header_bytes",
            l.max_header_bytes.unwrap_or(16 * 1024),
            1024..=1024 * 1024,
        )?,
        max_body_bytes: within(
            "limits.max_body_bytes",
            l.max_body_bytes.unwrap_or(10 * 1024 * 1024),
            0..=1 << 40,
        )?,
        header_read_timeout: millis(
            "limits.header_read_timeout_ms",
            l.header_read_timeout_ms,
            10_000,
            1..=MAX_MS,
        )?,
        shutdown_grace: millis(
            "limits.shutdown_grace_ms",
            l.shutdown_grace_ms,
            10_000,
            0..=MAX_MS,
        )?,
        // It caps the client connections served at once: zero would serve
        // nobody, and the semaphore behind it has a ceiling of its own.
        max_connections: within(
            "limits.max_connections",
            l.max_connections.unwrap_or(10_000),
            1..=1_000_000,
        )?,
        backend_idle_timeout: millis(
            "limits.backend_idle_timeout_ms",
            l.backend_idle_timeout_ms,
            60_000,
            1..=MAX_MS,
        )?,
        client_write_timeout: millis(
            "limits.client_write_timeout_ms",
            l.client_write_timeout_ms,
            60_000,
            1..=MAX_MS,
        )?,
        // nginx's `client_body_timeout`: the backend-idle timer's mirror.
        client_body_timeout: millis(
            "limits.client_body_timeout_ms",
            l.client_body_timeout_ms,
            60_000,
            1..=MAX_MS,
        )?,
        backend_body_timeout: Some(millis(
            "limits.backend_body_timeout_ms",
            l.backend_body_timeout_ms,
            0,
            0..=24 * MAX_MS,
        )?)
        .filter(|limit| !limit.is_zero()),
        tunnel_idle_timeout: tunnel_idle_timeout(
            l.tunnel_idle_timeout_ms,
            l.websocket_idle_timeout_ms,
        )?,
        // Envoy's `idle_timeout`, nginx's keep-alive timeout on HTTP/2.
        http2_idle_timeout: millis(
            "limits.http2_idle_timeout_ms",
            l.http2_idle_timeout_ms,
            60_000,
            1..=MAX_MS,
        )?,
        shard_max_in_flight: l
            .shard
            .max_in_flight
            .map(|cap| within("limits.shard.max_in_flight", cap, 1..=MAX_SHARD_IN_FLIGHT))
            .transpose()?,
    })
}

/// `limits.tunnel_idle_timeout_ms`, or its old name
/// `limits.websocket_idle_timeout_ms` (configurations written before the
/// rename keep working); both at once is refused, since which one wins
/// would be a guess.
fn tunnel_idle_timeout(current: Option<u64>, old: Option<u64>) -> Result<Duration, KeyProblem> {
    const RANGE: std::ops::RangeInclusive<u64> = 1..=24 * MAX_MS;
    match (current, old) {
        (Some(_), Some(_)) => Err((
            "limits.tunnel_idle_timeout_ms",
            "set twice, also by its old name limits.websocket_idle_timeout_ms; remove limits.websocket_idle_timeout_ms".into(),
        )),
        (None, Some(old)) => millis("limits.websocket_idle_timeout_ms", Some(old), 0, RANGE),
        (current, None) => millis("limits.tunnel_idle_timeout_ms", current, 300_000, RANGE),
    }
}
