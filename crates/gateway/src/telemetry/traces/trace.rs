//! One request's trace as it goes: its ids and sampling decision, read
//! from the client's `traceparent` or made anew ([`Trace::begin`]), each
//! attempt's span id and outcome, and the finished spans' attributes
//! ([`Trace::finish`]).

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use tokio::time::Instant;

use crate::syntax::fields::Fields;
use crate::syntax::trace_context::{self, SpanId, TRACEPARENT_LEN, TraceId, TraceParent};

use super::export::ExportSettings;
use super::spans::{ClientSpan, Finished, ServerSpan};

/// What `[tracing]` decides per request (the export's own settings are
/// [`ExportSettings`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The share of new traces recorded and exported, 0 to 1
    /// (`sample_ratio`).
    pub sample_ratio: f64,
    /// Whether a client's `traceparent` is continued (`true`) or replaced
    /// and kept as a link (`false`, the default at an internet edge).
    pub trust_incoming: bool,
    /// Where and how spans go.
    pub export: ExportSettings,
}

/// One request's trace, from its head to its answer.
#[derive(Debug)]
pub struct Trace {
    /// The trace, the server span's id, and the sampled flag.
    context: TraceParent,
    /// The server span's parent: a trusted incoming `traceparent`'s span.
    parent: Option<SpanId>,
    /// An incoming context that was not trusted, kept as a link.
    link: Option<TraceParent>,
    /// A trusted incoming `tracestate` (recorded only when sampled).
    tracestate: Option<String>,
    /// The client's `tracestate` goes to the shard.
    passes_tracestate: bool,
    /// The request as its server span names it (only when sampled).
    line: Option<Box<RequestLine>>,
    /// When the request's head had been read: by the wall clock (span
    /// times) and by the monotonic one (every later time is an offset).
    time: SystemTime,
    started: Instant,
    /// The span id the latest attempt sends as its parent, and its
    /// `traceparent` as written (encoded once per attempt).
    attempt_span: SpanId,
    header: [u8; TRACEPARENT_LEN],
    /// The attempts, when sampled.
    attempts: Vec<AttemptRecord>,
    /// Why the gateway answered itself, if it did (`shuffle.outcome`).
    outcome: Option<&'static str>,
    /// Which of the tenant's limits refused it (`shuffle.limit`).
    limit: Option<&'static str>,
    /// A failover the retry budget refused.
    budget_exhausted: bool,
}

/// How the member of an attempt was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKind {
    /// One of the tenant's subset.
    Subset,
    /// Outside the subset (`routing.exhausted = "spill"`).
    Spill,
    /// One of its previous subset, during a lookback window.
    Lookback,
}

impl MemberKind {
    /// `shuffle.member`'s value.
    pub fn name(self) -> &'static str {
        match self {
            MemberKind::Subset => "subset",
            MemberKind::Spill => "spill",
            MemberKind::Lookback => "lookback",
        }
    }
}

/// How an attempt came to be made, as its span tells.
#[derive(Debug, Clone, Copy)]
pub struct AttemptStart {
    /// The shard's index in its cell.
    pub shard: u32,
    /// In the subset, spilled, or a lookback member.
    pub member: MemberKind,
    /// A member of the subset not yet tried was out of rotation, and this
    /// first attempt went around it.
    pub steered: bool,
    /// The attempt drew on the retry budget.
    pub drew_budget: bool,
}

/// One attempt as recorded for its span.
#[derive(Debug, Clone)]
pub(crate) struct AttemptRecord {
    pub(crate) span_id: SpanId,
    pub(crate) start: AttemptStart,
    pub(crate) started: Instant,
    pub(crate) ended: Option<Instant>,
    /// `ok`, a failure's name, `miss` or `client_fault`; `None` until it
    /// ends.
    pub(crate) outcome: Option<&'static str>,
    /// The shard's status, when it answered.
    pub(crate) status: Option<u16>,
}

/// A random, non-zero trace id (drawn over the whole range and drawn
/// again on zero, once in 2¹²⁸: a range would cost a 128-bit division).
fn new_trace_id() -> TraceId {
    loop {
        let id = fastrand::u128(..);
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

/// A random, non-zero span id.
fn new_span_id() -> SpanId {
    loop {
        let id = fastrand::u64(..);
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

/// OpenTelemetry's `TraceIdRatioBased` decision: the trace id's last 8
/// bytes, less their lowest bit, below `ratio` × 2⁶³. Every component that
/// samples a trace id by the same ratio agrees.
pub fn ratio_sampled(trace_id: &TraceId, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    let low = u64::from_be_bytes(trace_id[8..].try_into().expect("eight bytes"));
    (low >> 1) < bound
}

impl Trace {
    /// The trace of a request with `fields` whose head was read at
    /// `started`: a trusted incoming context is continued (its sampled flag
    /// decides, as OpenTelemetry's parent-based sampler does); otherwise a
    /// new trace starts, sampled by `sample_ratio`, and a valid incoming
    /// context is kept as a link.
    /// `line` describes the request, called only for a sampled trace.
    pub fn begin(
        settings: &TraceSettings,
        fields: &Fields,
        started: Instant,
        line: impl FnOnce() -> RequestLine,
    ) -> Box<Self> {
        let incoming = TraceParent::of(fields);
        let (context, parent, link) = match incoming {
            Some(incoming) if settings.trust_incoming => (
                TraceParent {
                    trace_id: incoming.trace_id,
                    span_id: new_span_id(),
                    flags: incoming.flags & 1,
                },
                Some(incoming.span_id),
                None,
            ),
            _ => {
                let trace_id = new_trace_id();
                let sampled = ratio_sampled(&trace_id, settings.sample_ratio);
                let context = TraceParent {
                    trace_id,
                    span_id: new_span_id(),
                    flags: u8::from(sampled),
                };
                (context, None, incoming)
            }
        };
        let incoming_state = parent.and_then(|_| trace_context::tracestate(fields));
        let tracestate = incoming_state
            .filter(|_| context.sampled())
            .map(|state| String::from_utf8_lossy(state).into_owned());
        let line = context.sampled().then(|| Box::new(line()));
        Box::new(Self {
            context,
            parent,
            link,
            tracestate,
            passes_tracestate: incoming_state.is_some(),
            line,
            // The wall clock is read for spans only: an unsampled trace
            // has none.
            time: if context.sampled() {
                SystemTime::now()
            } else {
                SystemTime::UNIX_EPOCH
            },
            started,
            attempt_span: context.span_id,
            // Written by each attempt as it begins (the server span sends none).
            header: [0; TRACEPARENT_LEN],
            attempts: Vec::new(),
            outcome: None,
            limit: None,
            budget_exhausted: false,
        })
    }

    /// Whether this trace's spans are recorded and exported.
    pub fn sampled(&self) -> bool {
        self.context.sampled()
    }

    /// The trace's id.
    pub fn trace_id(&self) -> &TraceId {
        &self.context.trace_id
    }

    /// Whether the client's trace was trusted and continued.
    pub fn continues_incoming(&self) -> bool {
        self.parent.is_some()
    }

    /// Whether the shard may be sent the client's `tracestate`: only
    /// beside a `traceparent` that was trusted and continued, and only a
    /// single one that [`trace_context::tracestate`] accepts.
    pub fn passes_tracestate(&self) -> bool {
        self.passes_tracestate
    }

    /// An attempt starts at `started`: it gets a span id of its own, which
    /// [`Self::traceparent`] gives its shard as the parent.
    pub fn begin_attempt(&mut self, start: AttemptStart, started: Instant) {
        self.attempt_span = new_span_id();
        self.header = self.traceparent().encode();
        if self.sampled() {
            self.attempts.push(AttemptRecord {
                span_id: self.attempt_span,
                start,
                started,
                ended: None,
                outcome: None,
                status: None,
            });
        }
    }

    /// The latest attempt's `traceparent` value.
    pub fn header(&self) -> &[u8; TRACEPARENT_LEN] {
        &self.header
    }

    /// What the latest attempt sends as `traceparent`.
    pub fn traceparent(&self) -> TraceParent {
        TraceParent {
            span_id: self.attempt_span,
            ..self.context
        }
    }

    /// The latest attempt ended at `ended` with `outcome` (and the shard's
    /// `status`, when it answered).
    pub fn end_attempt(&mut self, ended: Instant, outcome: &'static str, status: Option<u16>) {
        if let Some(attempt) = self.attempts.last_mut() {
            attempt.ended = Some(ended);
            attempt.outcome = Some(outcome);
            attempt.status = status;
        }
    }

    /// The latest attempt's answer turned out to be a miss (a `404` during
    /// a lookback window), not the answer.
    pub fn attempt_missed(&mut self) {
        if let Some(attempt) = self.attempts.last_mut() {
            attempt.outcome = Some("miss");
        }
    }

    /// The gateway answered the request itself, for `outcome`.
    pub fn note_outcome(&mut self, outcome: &'static str) {
        self.outcome.get_or_insert(outcome);
    }

    /// The tenant's `limit` refused the request.
    pub fn note_limit(&mut self, limit: &'static str) {
        self.note_outcome("limited");
        self.limit = Some(limit);
    }

    /// A failover was refused because the retry budget was spent.
    pub fn note_budget_exhausted(&mut self) {
        self.budget_exhausted = true;
    }

    /// The finished spans of this request, when sampled: `request` says
    /// what came of it, `shard` names a shard of its cell by index.
    pub fn finish<'a>(
        self,
        request: RequestView<'_>,
        shard: impl Fn(u32) -> Option<ShardView<'a>>,
    ) -> Option<Finished> {
        if !self.sampled() {
            return None;
        }
        Some(finish(self, request, shard))
    }

    /// The wall-clock time of `instant` (never before the request began).
    fn wall(&self, instant: Instant) -> SystemTime {
        self.time + instant.saturating_duration_since(self.started)
    }
}

/// The spans of `trace`, a sampled request that came to `request`, its
/// shards named by `shard`.
fn finish<'a>(
    trace: Trace,
    request: RequestView<'_>,
    shard: impl Fn(u32) -> Option<ShardView<'a>>,
) -> Finished {
    let end = trace.time + request.elapsed;
    let server_error = request.status >= 500;
    let line = trace.line.as_deref().cloned().unwrap_or(RequestLine {
        method: String::new(),
        path: String::new(),
        scheme: "http",
        protocol: "1.1",
    });
    // The HTTP semantic conventions name only the standard methods; any
    // other (a client's own token) is `_OTHER`, its span `HTTP`, and the
    // method as sent goes in `http.request.method_original`.
    let known = matches!(
        line.method.as_str(),
        "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE" | "PATCH"
    );
    let (method, span_name) = if known {
        (line.method.clone(), line.method.clone())
    } else {
        ("_OTHER".to_owned(), "HTTP".to_owned())
    };
    let mut server = vec![
        KeyValue::new("http.request.method", method.clone()),
        KeyValue::new("url.path", line.path.clone()),
        KeyValue::new("url.scheme", line.scheme),
        KeyValue::new("network.protocol.version", line.protocol),
        KeyValue::new("http.response.status_code", i64::from(request.status)),
        KeyValue::new("client.address", request.client.ip().to_string()),
        KeyValue::new("client.port", i64::from(request.client.port())),
        KeyValue::new("shuffle.attempts", trace.attempts.len() as i64),
    ];
    if !known {
        server.push(KeyValue::new(
            "http.request.method_original",
            line.method.clone(),
        ));
    }
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
            KeyValue::new("http.request.method", method.clone()),
            KeyValue::new("shuffle.attempt", n as i64 + 1),
            KeyValue::new("shuffle.outcome", outcome),
            KeyValue::new("shuffle.member", record.start.member.name()),
        ];
        if let Some(shard) = shard(record.start.shard) {
            attributes.extend(shard_attributes(&shard, &line.path));
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
            name: span_name,
            start: trace.time,
            end,
            attributes: server,
            error: server_error,
        },
        attempts,
    }
}

/// What an attempt's span says of its shard, `path` (without the query)
/// appended to its URL.
fn shard_attributes(shard: &ShardView<'_>, path: &str) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("shuffle.shard", shard.id.to_owned()),
        // An IPv6 address without the URL's brackets.
        KeyValue::new(
            "server.address",
            shard
                .host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        ),
        KeyValue::new("server.port", i64::from(shard.port)),
        KeyValue::new(
            "url.full",
            format!(
                "{}://{}:{}{}{}",
                shard.scheme,
                shard.host,
                shard.port,
                shard.prefix.trim_end_matches('/'),
                path
            ),
        ),
        KeyValue::new("network.protocol.version", shard.protocol),
    ];
    if let Some(zone) = shard.zone {
        attributes.push(KeyValue::new("shuffle.zone", zone.to_owned()));
    }
    attributes
}

/// A request as its server span names it. Never a credential and never
/// the query: only the path.
#[derive(Debug, Clone)]
pub struct RequestLine {
    /// The method, which names the spans.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// `1.1` or `2`.
    pub protocol: &'static str,
}

/// What came of a request, for its server span.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The client's address.
    pub client: SocketAddr,
    /// The tenant, once authenticated.
    pub tenant: Option<&'a str>,
    /// Its cell's name.
    pub cell: Option<&'a str>,
    /// The status the client got.
    pub status: u16,
    /// The gRPC status its answer's head showed, for a gRPC call.
    pub grpc_status: Option<i64>,
    /// How long after its head was read the request ended.
    pub elapsed: Duration,
}

/// A shard, for an attempt's client span.
#[derive(Debug, Clone, Copy)]
pub struct ShardView<'a> {
    /// Its id in its cell.
    pub id: &'a str,
    /// Its failure domain, if it has one.
    pub zone: Option<&'a str>,
    /// `http` or `https`.
    pub scheme: &'a str,
    /// Where it is reached: its host and port.
    pub host: &'a str,
    /// (See `host`.)
    pub port: u16,
    /// The shard's path prefix ("" for none), which the request's path
    /// goes under.
    pub prefix: &'a str,
    /// `1.1` or `2`.
    pub protocol: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanKind, Status};
    use opentelemetry::{InstrumentationScope, Value};

    const INCOMING: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn settings(sample_ratio: f64, trust_incoming: bool) -> TraceSettings {
        TraceSettings {
            sample_ratio,
            trust_incoming,
            export: ExportSettings {
                endpoint: "http://127.0.0.1:4318/v1/traces".into(),
                service_name: "test".into(),
                timeout: Duration::from_secs(1),
                interval: Duration::from_secs(1),
                queue_size: 16,
            },
        }
    }

    fn fields(pairs: &[(&'static str, &'static str)]) -> Fields {
        let mut headers = http::HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, http::HeaderValue::from_static(value));
        }
        Fields::from_header_map(&headers)
    }

    /// A first attempt at the subset member `shard`.
    fn first_try(shard: u32) -> AttemptStart {
        AttemptStart {
            shard,
            member: MemberKind::Subset,
            steered: false,
            drew_budget: false,
        }
    }

    fn line() -> RequestLine {
        RequestLine {
            method: "GET".into(),
            path: "/orders".into(),
            scheme: "http",
            protocol: "1.1",
        }
    }

    fn attribute<'a>(span: &'a opentelemetry_sdk::trace::SpanData, key: &str) -> Option<&'a Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| &kv.value)
    }

    /// A failover: the first attempt refused its connection, the second
    /// answered; one server span, two client spans under it, the second
    /// saying why it was made.
    #[test]
    fn a_failover_is_one_server_span_over_two_attempt_spans() {
        let started = Instant::now();
        let mut trace = Trace::begin(&settings(1.0, false), &fields(&[]), started, line);
        assert!(trace.sampled());
        let first = first_try(0);
        trace.begin_attempt(first, started);
        let first_parent = trace.traceparent();
        assert_eq!(
            trace.header(),
            &first_parent.encode(),
            "what the shard is sent"
        );
        trace.end_attempt(started, "connect", None);
        trace.begin_attempt(AttemptStart { shard: 1, ..first }, started);
        let second_parent = trace.traceparent();
        assert_ne!(first_parent.span_id, second_parent.span_id);
        assert_eq!(first_parent.trace_id, second_parent.trace_id);
        trace.end_attempt(started + Duration::from_millis(3), "ok", Some(200));
        let ids = ["s4", "s9"];
        let finished = trace
            .finish(
                RequestView {
                    client: "10.0.0.7:5000".parse().unwrap(),
                    tenant: Some("acme"),
                    cell: Some("default"),
                    status: 200,
                    grpc_status: None,
                    elapsed: Duration::from_millis(4),
                },
                |index| {
                    Some(ShardView {
                        id: ids[index as usize],
                        zone: Some("a"),
                        scheme: "http",
                        host: "10.0.1.1",
                        port: 9000,
                        prefix: "/",
                        protocol: "1.1",
                    })
                },
            )
            .unwrap();
        let spans = finished.into_span_data(&InstrumentationScope::builder("t").build());
        assert_eq!(spans.len(), 3);
        let server = &spans[0];
        assert_eq!(server.span_kind, SpanKind::Server);
        assert_eq!(server.status, Status::Unset);
        assert_eq!(
            attribute(server, "shuffle.tenant"),
            Some(&Value::from("acme"))
        );
        assert_eq!(attribute(server, "shuffle.attempts"), Some(&Value::I64(2)));
        assert_eq!(attribute(server, "url.path"), Some(&Value::from("/orders")));
        for (span, parent) in spans[1..].iter().zip([first_parent, second_parent]) {
            assert_eq!(span.span_kind, SpanKind::Client);
            assert_eq!(span.parent_span_id, server.span_context.span_id());
            assert_eq!(span.span_context.trace_id(), server.span_context.trace_id());
            // The span the shard was told is its parent is this span.
            assert_eq!(span.span_context.span_id().to_bytes(), parent.span_id);
        }
        assert_eq!(
            attribute(&spans[1], "shuffle.shard"),
            Some(&Value::from("s4"))
        );
        assert_eq!(
            attribute(&spans[1], "shuffle.outcome"),
            Some(&Value::from("connect"))
        );
        assert!(matches!(spans[1].status, Status::Error { .. }));
        assert_eq!(
            attribute(&spans[2], "shuffle.shard"),
            Some(&Value::from("s9"))
        );
        assert_eq!(
            attribute(&spans[2], "shuffle.failover_reason"),
            Some(&Value::from("connect"))
        );
        assert_eq!(
            attribute(&spans[2], "http.request.resend_count"),
            Some(&Value::I64(1))
        );
        assert_eq!(
            attribute(&spans[2], "url.full"),
            Some(&Value::from("http://10.0.1.1:9000/orders"))
        );
    }

    #[test]
    fn an_untrusted_context_is_replaced_and_linked_a_trusted_one_continued() {
        let incoming = TraceParent::parse(INCOMING.as_bytes()).unwrap();
        let headers = [("traceparent", INCOMING), ("tracestate", "vendor=x")];
        let started = Instant::now();

        let untrusted = Trace::begin(&settings(1.0, false), &fields(&headers), started, line);
        assert_ne!(untrusted.trace_id(), &incoming.trace_id);
        assert!(!untrusted.continues_incoming());
        assert_eq!(untrusted.link, Some(incoming));
        assert_eq!(untrusted.parent, None);
        assert_eq!(untrusted.tracestate, None);
        assert!(!untrusted.passes_tracestate());

        let trusted = Trace::begin(&settings(0.0, true), &fields(&headers), started, line);
        assert_eq!(trusted.trace_id(), &incoming.trace_id);
        assert!(trusted.continues_incoming());
        assert!(
            trusted.sampled(),
            "the parent's flag decides, not the ratio"
        );
        assert_eq!(trusted.parent, Some(incoming.span_id));
        assert_eq!(trusted.tracestate.as_deref(), Some("vendor=x"));
        assert!(trusted.passes_tracestate());
        // Two `tracestate` fields, or one over 512 bytes, do not pass.
        let two = [
            ("traceparent", INCOMING),
            ("tracestate", "a=1"),
            ("tracestate", "b=2"),
        ];
        let trace = Trace::begin(&settings(1.0, true), &fields(&two), started, line);
        assert!(trace.continues_incoming() && !trace.passes_tracestate());
        let long: &'static str = Box::leak(format!("a={}", "x".repeat(600)).into_boxed_str());
        let trace = Trace::begin(
            &settings(1.0, true),
            &fields(&[("traceparent", INCOMING), ("tracestate", long)]),
            started,
            line,
        );
        assert!(!trace.passes_tracestate());
        assert_eq!(trusted.traceparent().trace_id, incoming.trace_id);

        // An unsampled parent is not sampled whatever the ratio; an
        // invalid one starts a trace of the gateway's own.
        let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let trace = Trace::begin(
            &settings(1.0, true),
            &fields(&[("traceparent", unsampled)]),
            started,
            line,
        );
        assert!(!trace.sampled());
        let invalid = "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01";
        let trace = Trace::begin(
            &settings(1.0, true),
            &fields(&[("traceparent", invalid)]),
            started,
            line,
        );
        assert!(!trace.continues_incoming());
        assert_eq!(trace.link, None);
    }

    #[test]
    fn an_unsampled_trace_records_nothing_and_still_gives_each_attempt_a_parent() {
        let started = Instant::now();
        let mut trace = Trace::begin(&settings(0.0, false), &fields(&[]), started, || {
            panic!("an unsampled request is never described")
        });
        assert!(!trace.sampled());
        let start = first_try(0);
        trace.begin_attempt(start, started);
        let parent = trace.traceparent();
        assert!(!parent.sampled());
        assert_ne!(parent.span_id, [0; 8]);
        assert!(trace.attempts.is_empty());
    }

    #[test]
    fn ratio_sampling_follows_the_trace_ids_low_bytes() {
        let mut id = [0u8; 16];
        assert!(ratio_sampled(&id, 0.5), "zero is below every bound");
        assert!(!ratio_sampled(&id, 0.0));
        id[8] = 0x80; // low >> 1 = 2^62: at half of 2^63 exactly.
        assert!(!ratio_sampled(&id, 0.5));
        assert!(ratio_sampled(&id, 0.51));
        assert!(ratio_sampled(&[0xff; 16], 1.0));
        let sampled = (0..20_000)
            .filter(|_| ratio_sampled(&new_trace_id(), 0.1))
            .count();
        assert!((1_600..2_400).contains(&sampled), "{sampled}");
    }
}
