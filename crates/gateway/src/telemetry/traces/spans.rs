//! A sampled request's spans, finished: one server span for the request and
//! one client span per attempt, named and described as OpenTelemetry's
//! HTTP semantic conventions ask, with the gateway's own `shuffle.*`
//! attributes beside them. Built with owned strings when the request ends
//! ([`finish`]) and turned into the SDK's span data on the export task
//! ([`Finished::into_span_data`]), so the request path never formats an
//! attribute.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{Link, SpanContext, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue, SpanId, TraceId};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::{RequestView, ShardView, Trace};
use crate::syntax::trace_context::{self, TraceParent};

/// A sampled request's spans, ready to export.
#[derive(Debug, Clone)]
pub struct Finished {
    trace_id: [u8; 16],
    server: ServerSpan,
    attempts: Vec<ClientSpan>,
}

#[derive(Debug, Clone)]
struct ServerSpan {
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    tracestate: Option<String>,
    link: Option<TraceParent>,
    name: String,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    error: bool,
}

#[derive(Debug, Clone)]
struct ClientSpan {
    span_id: [u8; 8],
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    error: bool,
}

impl Finished {
    /// How many spans this is: the server span and one per attempt.
    pub fn spans(&self) -> usize {
        1 + self.attempts.len()
    }

    /// The SDK's span data for these spans, under `scope`.
    pub fn into_span_data(self, scope: &InstrumentationScope) -> Vec<SpanData> {
        let trace_id = TraceId::from_bytes(self.trace_id);
        let server_id = SpanId::from_bytes(self.server.span_id);
        let tracestate = self
            .server
            .tracestate
            .as_deref()
            .and_then(|state| state.parse::<TraceState>().ok())
            .unwrap_or_default();
        let context = |span_id: SpanId, state: TraceState| {
            SpanContext::new(trace_id, span_id, TraceFlags::SAMPLED, false, state)
        };
        let status = |error: bool| {
            if error {
                Status::error("")
            } else {
                Status::Unset
            }
        };
        let links = self.server.link.map_or_else(Vec::new, |link| {
            let linked = SpanContext::new(
                TraceId::from_bytes(link.trace_id),
                SpanId::from_bytes(link.span_id),
                TraceFlags::new(link.flags & 1),
                true,
                TraceState::NONE,
            );
            vec![Link::new(
                linked,
                vec![KeyValue::new("shuffle.link", "untrusted_incoming_context")],
                0,
            )]
        });
        let method = self.server.name.clone();
        let mut out = Vec::with_capacity(self.spans());
        out.push(SpanData {
            span_context: context(server_id, tracestate.clone()),
            parent_span_id: self
                .server
                .parent
                .map_or(SpanId::INVALID, SpanId::from_bytes),
            parent_span_is_remote: self.server.parent.is_some(),
            span_kind: SpanKind::Server,
            name: Cow::Owned(self.server.name),
            start_time: self.server.start,
            end_time: self.server.end,
            attributes: self.server.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: span_links(links),
            status: status(self.server.error),
            instrumentation_scope: scope.clone(),
        });
        for attempt in self.attempts {
            out.push(SpanData {
                span_context: context(SpanId::from_bytes(attempt.span_id), tracestate.clone()),
                parent_span_id: server_id,
                parent_span_is_remote: false,
                span_kind: SpanKind::Client,
                name: Cow::Owned(method.clone()),
                start_time: attempt.start,
                end_time: attempt.end,
                attributes: attempt.attributes,
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status: status(attempt.error),
                instrumentation_scope: scope.clone(),
            });
        }
        out
    }
}

/// `links` as the SDK keeps them (built field by field: the type is
/// non-exhaustive).
fn span_links(links: Vec<Link>) -> SpanLinks {
    let mut out = SpanLinks::default();
    out.links = links;
    out
}

/// The spans of `trace`, a sampled request that came to `request`, its
/// shards named by `shard`.
pub(super) fn finish<'a>(
    trace: Trace,
    request: RequestView<'_>,
    shard: impl Fn(u32) -> Option<ShardView<'a>>,
) -> Finished {
    let end = trace.time + request.elapsed;
    let server_error = request.status >= 500;
    let line = trace
        .line
        .as_deref()
        .cloned()
        .unwrap_or(super::RequestLine {
            method: String::new(),
            path: String::new(),
            scheme: "http",
            protocol: "1.1",
        });
    let mut server = vec![
        KeyValue::new("http.request.method", line.method.clone()),
        KeyValue::new("url.path", line.path.clone()),
        KeyValue::new("url.scheme", line.scheme),
        KeyValue::new("network.protocol.version", line.protocol),
        KeyValue::new("http.response.status_code", i64::from(request.status)),
        KeyValue::new("client.address", request.client.ip().to_string()),
        KeyValue::new("client.port", i64::from(request.client.port())),
        KeyValue::new("shuffle.attempts", trace.attempts.len() as i64),
    ];
    if let Some(tenant) = request.tenant {
        server.push(KeyValue::new("shuffle.tenant", tenant.to_owned()));
    }
    if let Some(cell) = request.cell {
        server.push(KeyValue::new("shuffle.cell", cell.to_owned()));
    }
    if let Some(status) = request.grpc_status {
        server.push(KeyValue::new("rpc.grpc.status_code", status));
    }
    if let Some(outcome) = trace.outcome {
        server.push(KeyValue::new("shuffle.outcome", outcome));
    }
    if let Some(limit) = trace.limit {
        server.push(KeyValue::new("shuffle.limit", limit));
    }
    if trace.budget_exhausted {
        server.push(KeyValue::new("shuffle.retry_budget", "exhausted"));
    }
    if server_error {
        server.push(KeyValue::new("error.type", request.status.to_string()));
    }
    let mut previous: Option<&'static str> = None;
    let mut attempts = Vec::with_capacity(trace.attempts.len());
    for (n, record) in trace.attempts.iter().enumerate() {
        let outcome = record.outcome.unwrap_or("unfinished");
        let mut attributes = vec![
            KeyValue::new("http.request.method", line.method.clone()),
            KeyValue::new("shuffle.attempt", n as i64 + 1),
            KeyValue::new("shuffle.outcome", outcome),
            KeyValue::new("shuffle.member", record.start.member.name()),
        ];
        if let Some(shard) = shard(record.start.shard) {
            attributes.extend([
                KeyValue::new("shuffle.shard", shard.id.to_owned()),
                KeyValue::new("server.address", shard.host.to_owned()),
                KeyValue::new("server.port", i64::from(shard.port)),
                KeyValue::new(
                    "url.full",
                    format!(
                        "{}://{}:{}{}{}",
                        shard.scheme,
                        shard.host,
                        shard.port,
                        shard.prefix.trim_end_matches('/'),
                        line.path
                    ),
                ),
                KeyValue::new("network.protocol.version", shard.protocol),
            ]);
            if let Some(zone) = shard.zone {
                attributes.push(KeyValue::new("shuffle.zone", zone.to_owned()));
            }
        }
        if let Some(cell) = request.cell {
            attributes.push(KeyValue::new("shuffle.cell", cell.to_owned()));
        }
        if n > 0 {
            attributes.push(KeyValue::new("http.request.resend_count", n as i64));
        }
        match previous {
            Some(reason) => attributes.push(KeyValue::new("shuffle.failover_reason", reason)),
            None if record.start.steered => {
                attributes.push(KeyValue::new("shuffle.failover_reason", "reroute"));
            }
            None => {}
        }
        if record.start.drew_budget {
            attributes.push(KeyValue::new("shuffle.retry_budget", "drawn"));
        }
        if let Some(status) = record.status {
            attributes.push(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        let error = !matches!(outcome, "ok" | "miss");
        if error {
            let kind = match (outcome, record.status) {
                ("status", Some(status)) => status.to_string(),
                _ => outcome.to_owned(),
            };
            attributes.push(KeyValue::new("error.type", kind));
        }
        attempts.push(ClientSpan {
            span_id: record.span_id,
            start: trace.wall(record.started),
            end: record.ended.map_or(end, |ended| trace.wall(ended)),
            attributes,
            error,
        });
        previous = Some(outcome);
    }
    Finished {
        trace_id: trace.context.trace_id,
        server: ServerSpan {
            span_id: trace.context.span_id,
            parent: trace.parent,
            tracestate: trace.tracestate,
            link: trace.link,
            name: line.method,
            start: trace.time,
            end,
            attributes: server,
            error: server_error,
        },
        attempts,
    }
}

/// Lowercase hex of an id, as trace viewers show them.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    trace_context::write_hex(&mut out, bytes);
    String::from_utf8(out).expect("hex digits are ASCII")
}
