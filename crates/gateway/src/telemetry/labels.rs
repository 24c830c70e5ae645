//! The metrics' label sets and the label values known in advance (each
//! listener, limit kind, fallback reason and request outcome), kept apart
//! from the registry in [`super::metrics`] so each file holds one thing.

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CellLabels {
    pub(crate) cell: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailoverLabels {
    pub(crate) cell: String,
    /// `retry`: an attempt after a failed one; `reroute`: the first attempt
    /// went to another member because one was out of rotation.
    pub(crate) kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) cell: String,
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GrpcLabels {
    pub(crate) cell: String,
    /// The status's name (`OK`, `UNAVAILABLE`, ...), or `unseen` when the
    /// answer's head carried none (it comes in trailers).
    pub(crate) grpc_status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ShardLabels {
    pub(crate) cell: String,
    pub(crate) shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AttemptLabels {
    pub(crate) cell: String,
    pub(crate) shard: String,
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EjectionLabels {
    pub(crate) cell: String,
    pub(crate) shard: String,
    pub(crate) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SideLabels {
    /// `backend`: a response body the backend stopped sending;
    /// `client`: a response the client stopped accepting.
    pub(crate) side: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabels {
    /// `ok`, `failed` (refused by either side: no common version or
    /// cipher, a certificate refused, not TLS at all) or `timeout`.
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BoundLabels {
    pub(crate) le: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ThresholdLabels {
    pub(crate) threshold: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LimitLabels {
    pub(crate) cell: String,
    /// `rate` or `in_flight`.
    pub(crate) limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FallbackLabels {
    /// `unreachable`, `timeout` or `bad_reply`.
    pub(crate) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabels {
    pub(crate) version: &'static str,
    /// `release` or `debug`.
    pub(crate) profile: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    /// `success` or `failure`.
    pub(crate) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ListenerLabels {
    /// `plain` or `tls`.
    pub(crate) listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DirectionLabels {
    /// `in` (from clients) or `out` (to clients).
    pub(crate) direction: &'static str,
}

/// The data listeners, as `listener` labels.
pub(crate) const LISTENERS: [&str; 2] = ["plain", "tls"];

/// The limits a tenant's request can be refused for, in the order of
/// [`CellHandles`](crate::telemetry::metrics::CellHandles)' limited counters.
pub(crate) const LIMIT_KINDS: [&str; 2] = ["rate", "in_flight"];

/// Why the global limits store gave no answer, in the order of
/// [`Metrics::store_fallback`](crate::telemetry::metrics::Metrics::store_fallback)'s series.
pub(crate) const FALLBACK_REASONS: [&str; 3] = ["unreachable", "timeout", "bad_reply"];

/// Request outcomes, in the order of [`CellHandles`](crate::telemetry::metrics::CellHandles)' counters.
pub(crate) const REQUEST_OUTCOMES: [&str; 8] = [
    "ok",
    "unauthorized",
    "too_large",
    "client_error",
    "bad_gateway",
    "unavailable",
    "timeout",
    "server_error",
];

/// The outcome label of a response status.
pub(crate) fn request_outcome(status: http::StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "unauthorized",
        413 => "too_large",
        400..=499 => "client_error",
        502 => "bad_gateway",
        503 => "unavailable",
        504 => "timeout",
        500..=599 => "server_error",
        _ => "ok",
    }
}
