//! `[routing]`: retries, failover, timeouts, gRPC retries and poison
//! containment.

use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, MAX_MS, millis, within};
use crate::syntax::grpc::{Code, CodeSet, MethodPattern};

/// What to do when every member of a tenant's subset is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exhausted {
    /// Answer 503 with `Retry-After`: the tenant's blast radius stays its own.
    Strict,
    /// Use a healthy shard outside the subset, and count it.
    Spill,
}

/// How a tenant's concurrent attempts may spread over its subset
/// (`routing.poison_spread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoisonSpread {
    /// A tenant's attempts in flight at once span at most
    /// `routing.poison_after` members, struck ones counted, even before
    /// any of them failed: a burst of poison crashes at most that many.
    Contained,
    /// Only a tenant with strikes is held to `routing.poison_after`
    /// members: a cold burst may reach every member.
    Free,
}

/// Retry and failover behaviour.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RoutingSettings {
    /// When the whole subset is out.
    pub exhausted: Exhausted,
    /// Timeout for one attempt (until response headers arrive).
    pub per_try_timeout: Duration,
    /// Deadline for the whole request, all attempts included.
    pub request_timeout: Duration,
    /// Statuses that count as a failed attempt and may be retried.
    pub retry_on_status: Vec<u16>,
    /// Largest request body buffered so it can be replayed on another shard.
    pub max_replay_body_bytes: usize,
    /// Backoff before the second attempt; doubles per attempt, jittered.
    pub backoff_base: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// `Retry-After` seconds on a 503 when the subset is exhausted.
    pub retry_after_seconds: u32,
    /// Route around unavailable members and retry on another member. Off
    /// only to show, in a drill, what happens without failover.
    pub failover: bool,
    /// gRPC methods that may be sent to another member after one may have
    /// received them (`routing.grpc_idempotent_methods`).
    pub grpc_idempotent_methods: Vec<MethodPattern>,
    /// The `grpc-status` values, seen in a trailers-only answer, on which
    /// such a call goes to another member (`routing.retry_on_grpc_status`).
    pub retry_on_grpc_status: CodeSet,
    /// Crash-like failures (reset, closed before a complete answer, or a
    /// per-try timeout) on this many distinct members stop a request and
    /// make its tenant suspect (`routing.poison_after`); 0: never.
    pub poison_after: u32,
    /// Whether the `poison_after` cap holds for every tenant's attempts in
    /// flight or only once it has a strike (`routing.poison_spread`).
    pub poison_spread: PoisonSpread,
    /// How long a tenant stays suspect (`routing.quarantine_seconds`).
    pub quarantine: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouting {
    exhausted: Option<Exhausted>,
    per_try_timeout_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    retry_on_status: Option<Vec<u16>>,
    max_replay_body_bytes: Option<usize>,
    backoff_base_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
    retry_after_seconds: Option<u32>,
    failover: Option<bool>,
    grpc_idempotent_methods: Option<Vec<String>>,
    retry_on_grpc_status: Option<Vec<GrpcStatusSetting>>,
    poison_after: Option<u32>,
    /// Any value, so that a number or a table is refused naming the key.
    poison_spread: Option<toml::Value>,
    quarantine_seconds: Option<u64>,
}

/// A gRPC status as the configuration names it: by number or by name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum GrpcStatusSetting {
    Number(i64),
    Name(String),
}

pub(super) fn routing_settings(r: RawRouting) -> Result<RoutingSettings, KeyProblem> {
    let per_try_timeout = millis(
        "routing.per_try_timeout_ms",
        r.per_try_timeout_ms,
        2_000,
        1..=MAX_MS,
    )?;
    let request_timeout = millis(
        "routing.request_timeout_ms",
        r.request_timeout_ms,
        10_000,
        1..=MAX_MS,
    )?;
    if request_timeout < per_try_timeout {
        return Err((
            "routing.request_timeout_ms",
            "must be at least routing.per_try_timeout_ms".into(),
        ));
    }
    let retry_on_status = r.retry_on_status.unwrap_or_else(|| vec![502, 503, 504]);
    if let Some(bad) = retry_on_status.iter().find(|s| !(100..=599).contains(*s)) {
        return Err((
            "routing.retry_on_status",
            format!("{bad} is not an HTTP status (100 to 599)"),
        ));
    }
    let backoff_base = millis("routing.backoff_base_ms", r.backoff_base_ms, 2, 0..=60_000)?;
    let backoff_max = millis("routing.backoff_max_ms", r.backoff_max_ms, 50, 0..=60_000)?;
    if backoff_max < backoff_base {
        return Err((
            "routing.backoff_max_ms",
            "must be at least routing.backoff_base_ms".into(),
        ));
    }
    Ok(RoutingSettings {
        exhausted: r.exhausted.unwrap_or(Exhausted::Strict),
        per_try_timeout,
        request_timeout,
        retry_on_status,
        max_replay_body_bytes: within(
            "routing.max_replay_body_bytes",
            r.max_replay_body_bytes.unwrap_or(64 * 1024),
            0..=64 * 1024 * 1024,
        )?,
        backoff_base,
        backoff_max,
        retry_after_seconds: within(
            "routing.retry_after_seconds",
            r.retry_after_seconds.unwrap_or(1),
            0..=86_400,
        )?,
        failover: r.failover.unwrap_or(true),
        grpc_idempotent_methods: grpc_methods(r.grpc_idempotent_methods.unwrap_or_default())?,
        retry_on_grpc_status: grpc_statuses(r.retry_on_grpc_status)?,
        // Two: one crash may be the shard's own bad luck; a second member
        // failing the same request the same way points at the request.
        poison_after: within("routing.poison_after", r.poison_after.unwrap_or(2), 0..=64)?,
        poison_spread: poison_spread(r.poison_spread.as_ref())?,
        quarantine: Duration::from_secs(within(
            "routing.quarantine_seconds",
            r.quarantine_seconds.unwrap_or(60),
            1..=86_400,
        )?),
    })
}

/// `routing.poison_spread`: `"contained"` (the default) or `"free"`.
fn poison_spread(written: Option<&toml::Value>) -> Result<PoisonSpread, KeyProblem> {
    match written.map(|value| value.as_str().ok_or(value)) {
        None | Some(Ok("contained")) => Ok(PoisonSpread::Contained),
        Some(Ok("free")) => Ok(PoisonSpread::Free),
        Some(Ok(other)) => Err((
            "routing.poison_spread",
            format!(
                "{other:?} is not a spread; use \"contained\" (a tenant's requests in flight use at most routing.poison_after members) or \"free\" (only after a strike)"
            ),
        )),
        Some(Err(other)) => Err((
            "routing.poison_spread",
            format!(
                "a {} is not a spread; use the string \"contained\" or \"free\"",
                other.type_str()
            ),
        )),
    }
}

/// `routing.grpc_idempotent_methods`, each entry a method path or a prefix.
fn grpc_methods(methods: Vec<String>) -> Result<Vec<MethodPattern>, KeyProblem> {
    methods
        .iter()
        .map(|method| MethodPattern::parse(method))
        .collect::<Result<_, _>>()
        .map_err(|error| ("routing.grpc_idempotent_methods", error.to_string()))
}

/// `routing.retry_on_grpc_status`, by name or number; `UNAVAILABLE` unless
/// set. `OK` makes no sense there: a call that succeeded is never repeated.
fn grpc_statuses(statuses: Option<Vec<GrpcStatusSetting>>) -> Result<CodeSet, KeyProblem> {
    const KEY: &str = "routing.retry_on_grpc_status";
    let Some(statuses) = statuses else {
        return Ok(CodeSet::of([Code::Unavailable]));
    };
    let mut codes = Vec::with_capacity(statuses.len());
    for status in statuses {
        let code = match &status {
            GrpcStatusSetting::Number(number) => u32::try_from(*number)
                .ok()
                .and_then(Code::from_number)
                .ok_or_else(|| (KEY, format!("{number} is not a gRPC status (0 to 16)")))?,
            GrpcStatusSetting::Name(name) => Code::from_name(name).ok_or_else(|| {
                (
                    KEY,
                    format!("{name:?} is not a gRPC status name; write one such as \"UNAVAILABLE\", or its number"),
                )
            })?,
        };
        if code == Code::Ok {
            return Err((
                KEY,
                "OK is a success and is never retried; remove it".into(),
            ));
        }
        codes.push(code);
    }
    Ok(CodeSet::of(codes))
}
