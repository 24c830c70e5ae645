//! A sampled request's spans, finished: one server span for the request and
//! one client span per attempt, named and described as OpenTelemetry's
//! HTTP semantic conventions ask, with the gateway's own `shuffle.*`
//! attributes beside them. Built with owned strings when the request ends
//! (`Trace::finish`, which names the attributes) and turned into the SDK's
//! span data on the export task ([`Finished::into_span_data`]), so the
//! request path never encodes a span.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{Link, SpanContext, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue, SpanId, TraceId};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use crate::syntax::trace_context::TraceParent;

/// A sampled request's spans, ready to export.
#[derive(Debug, Clone)]
pub struct Finished {
    pub(super) trace_id: [u8; 16],
    pub(super) server: ServerSpan,
    pub(super) attempts: Vec<ClientSpan>,
}

/// The request's span.
#[derive(Debug, Clone)]
pub(super) struct ServerSpan {
    pub(super) span_id: [u8; 8],
    pub(super) parent: Option<[u8; 8]>,
    pub(super) tracestate: Option<String>,
    pub(super) link: Option<TraceParent>,
    pub(super) name: String,
    pub(super) start: SystemTime,
    pub(super) end: SystemTime,
    pub(super) attributes: Vec<KeyValue>,
    pub(super) error: bool,
}

/// One attempt's span.
#[derive(Debug, Clone)]
pub(super) struct ClientSpan {
    pub(super) span_id: [u8; 8],
    pub(super) start: SystemTime,
    pub(super) end: SystemTime,
    pub(super) attributes: Vec<KeyValue>,
    pub(super) error: bool,
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
