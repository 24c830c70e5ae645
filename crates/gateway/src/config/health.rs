//! `[health]`: the active health checks' path, timing and thresholds.

use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, MAX_MS, millis, within};

/// Active health checks.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HealthSettings {
    /// The path to GET on every shard.
    pub path: String,
    /// Time between checks.
    pub interval: Duration,
    /// Timeout of one check.
    pub timeout: Duration,
    /// Consecutive passes that make a shard healthy.
    pub rise: u32,
    /// Consecutive failures that make a shard unhealthy.
    pub fall: u32,
    /// Health older than this is unknown, not healthy.
    pub staleness: Duration,
    /// HTTP/2 shards are checked with the gRPC health protocol
    /// (`grpc.health.v1.Health/Check`, empty service name) instead of a
    /// GET of `path`.
    pub grpc: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    path: Option<String>,
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    rise: Option<u32>,
    fall: Option<u32>,
    staleness_ms: Option<u64>,
    grpc: Option<bool>,
}

pub(super) fn health_settings(h: RawHealth) -> Result<HealthSettings, KeyProblem> {
    let interval = millis("health.interval_ms", h.interval_ms, 1_000, 1..=MAX_MS)?;
    let timeout = millis("health.timeout_ms", h.timeout_ms, 500, 1..=MAX_MS)?;
    let path = h.path.unwrap_or_else(|| "/healthz".into());
    if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
        return Err((
            "health.path",
            format!("{path:?} is not a path; write an absolute path such as \"/healthz\""),
        ));
    }
    // A shard's checks start one interval after the last one ended, and a
    // check may take up to its timeout: results are that far apart when all
    // is well, so staleness must allow for both, or a shard that answers
    // its checks slowly but well would flap stale.
    let cycle = interval + timeout;
    let staleness = match h.staleness_ms {
        Some(staleness) => millis("health.staleness_ms", Some(staleness), 0, 1..=24 * MAX_MS)?,
        None => interval * 3 + timeout,
    };
    if staleness <= cycle {
        return Err((
            "health.staleness_ms",
            format!(
                "must be longer than health.interval_ms + health.timeout_ms ({} ms), or a shard whose checks pass slowly would go stale between them",
                cycle.as_millis()
            ),
        ));
    }
    Ok(HealthSettings {
        path,
        interval,
        timeout,
        rise: within("health.rise", h.rise.unwrap_or(2), 1..=1000)?,
        fall: within("health.fall", h.fall.unwrap_or(3), 1..=1000)?,
        staleness,
        grpc: h.grpc.unwrap_or(false),
    })
}
