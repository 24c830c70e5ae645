//! OpenTelemetry tracing (`[tracing]`), through real sockets: the gateway
//! exports OTLP/HTTP protobuf to a test receiver (`testkit::otlp`), and
//! test backends record the `traceparent` each attempt carried.
//!
//! What is pinned: a request's SERVER span and one CLIENT span per attempt
//! (a failover's two attempts, each with its shard, outcome and the reason
//! it moved on); the `traceparent` a shard receives naming that attempt's
//! client span; untrusted incoming context replaced and linked, trusted
//! context continued; an exporter that stalls, fails or is absent never
//! failing a request, its spans counted as dropped; `sample_ratio = 0`
//! exporting nothing yet still propagating unsampled context; no credential
//! or query string in any exported byte; and, without `[tracing]`, a
//! client's `traceparent` passing through untouched.
//!
//! Nothing here bounds how fast anything happens: exports are batched on
//! the exporter's own clock, so every wait polls with a generous limit.

use std::time::Duration;

use backend::{Mode, Seen};
use http::StatusCode;
use testkit::otlp::{Link, Mode as ReceiverMode, OtlpReceiver, Span};
use tokio::task::JoinSet;

use crate::admin::options;
use crate::util::{Exposition, Fixture, Options, eventually, send_to};

/// How long any wait for an export or a metric may take before the test
/// fails: far beyond the 100 ms export interval, for a loaded CI machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// An incoming W3C context a client sends (the spec's own example ids).
const INCOMING_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const INCOMING_SPAN: &str = "b7ad6b7169203331";

const EXPORTED: &str = "shuffle_trace_spans_exported_total";
const DROPPED: &str = "shuffle_trace_spans_dropped_total";

/// The `[tracing]` table over `endpoint`: `lines`, preceded by test
/// defaults for the keys `lines` does not set (every request sampled, a
/// service name of the test's, exports every 100 ms).
fn tracing_table(endpoint: &str, lines: &str) -> String {
    let mut table = format!("\n[tracing]\notlp_endpoint = \"{endpoint}\"\n");
    for (key, default) in [
        ("sample_ratio", "1.0"),
        ("service_name", "\"gw-test\""),
        ("export_interval_ms", "100"),
    ] {
        if !lines
            .lines()
            .any(|line| line.split('=').next().map(str::trim) == Some(key))
        {
            table.push_str(&format!("{key} = {default}\n"));
        }
    }
    table.push_str(lines);
    table.push('\n');
    table
}

/// A gateway (eight shards, k = 2, the admin token, health checked once at
/// start so only the test moves shards) tracing to `endpoint`.
async fn gateway(endpoint: &str, lines: &str) -> Fixture {
    Fixture::start(Options {
        extra: tracing_table(endpoint, lines),
        ..options()
    })
    .await
}

/// A `traceparent` header, split.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TraceParent {
    trace_id: String,
    span_id: String,
    flags: String,
}

/// Parses `00-<32 hex>-<16 hex>-<2 hex>` (lowercase, as W3C requires of a
/// sender), panicking on anything else; an all-zero id is invalid too.
fn parse_traceparent(value: &str) -> TraceParent {
    let parts: Vec<&str> = value.split('-').collect();
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    assert!(
        parts.len() == 4
            && parts[0] == "00"
            && lower_hex(parts[1], 32)
            && lower_hex(parts[2], 16)
            && lower_hex(parts[3], 2),
        "a malformed traceparent {value:?}"
    );
    assert!(
        parts[1].bytes().any(|b| b != b'0') && parts[2].bytes().any(|b| b != b'0'),
        "an all-zero id in {value:?}"
    );
    TraceParent {
        trace_id: parts[1].to_owned(),
        span_id: parts[2].to_owned(),
        flags: parts[3].to_owned(),
    }
}

/// The one `traceparent` a request to a shard carried.
fn traceparent(seen: &Seen) -> TraceParent {
    let values = seen.header("traceparent");
    assert_eq!(values.len(), 1, "traceparents of {}: {values:?}", seen.path);
    parse_traceparent(values[0])
}

/// What the backend `id` saw of requests to exactly `path` (with query).
fn seen_at(fixture: &Fixture, id: &str, path: &str) -> Vec<Seen> {
    fixture
        .backend(id)
        .seen()
        .into_iter()
        .filter(|seen| seen.path == path)
        .collect()
}

/// Every span of `trace_id` received so far.
fn of_trace(spans: &[Span], trace_id: &str) -> Vec<Span> {
    spans
        .iter()
        .filter(|span| span.trace_id == trace_id)
        .cloned()
        .collect()
}

/// Whether the trace is complete as far as the receiver can tell: its
/// server span has arrived, and as many client spans as it counts
/// attempts (its client spans end before it, but may travel in another
/// export).
fn complete(spans: &[Span], trace_id: &str) -> bool {
    let trace = of_trace(spans, trace_id);
    let servers: Vec<&Span> = trace.iter().filter(|s| s.is_server()).collect();
    let clients = trace.iter().filter(|s| s.is_client()).count();
    match servers.as_slice() {
        [server] => server
            .int("shuffle.attempts")
            .is_some_and(|attempts| clients as i64 >= attempts),
        _ => false,
    }
}

/// Waits for the whole trace `trace_id`; its server span and its client
/// spans ordered by `shuffle.attempt`. Fails the test, showing what did
/// arrive, when it does not come whole.
async fn whole_trace(receiver: &OtlpReceiver, trace_id: &str) -> (Span, Vec<Span>) {
    let arrived = receiver
        .wait_for(|spans| complete(spans, trace_id), PATIENCE)
        .await;
    let trace = of_trace(&receiver.spans(), trace_id);
    assert!(
        arrived,
        "trace {trace_id} did not arrive whole (one server span with \
         shuffle.attempts, as many client spans): {trace:#?}\nrejected: {:?}",
        receiver.rejected()
    );
    let servers: Vec<Span> = trace.iter().filter(|s| s.is_server()).cloned().collect();
    assert_eq!(servers.len(), 1, "{trace:#?}");
    let mut clients: Vec<Span> = trace.iter().filter(|s| s.is_client()).cloned().collect();
    clients.sort_by_key(|span| span.int("shuffle.attempt"));
    (servers.into_iter().next().unwrap(), clients)
}

/// The zone the fixture gives shard `s<i>`: `a` for even `i`, `b` for odd.
fn zone_of(id: &str) -> &'static str {
    let index: usize = id.trim_start_matches('s').parse().unwrap();
    ["a", "b"][index % 2]
}

/// The sum of the dropped-spans counter over `reasons`.
fn dropped(exposition: &Exposition, reasons: &[&str]) -> f64 {
    reasons
        .iter()
        .map(|reason| exposition.count(DROPPED, &[("reason", reason)]))
        .sum()
}

/// Scrapes until `condition` holds over the exposition, or [`PATIENCE`]
/// passes; the last exposition, and whether it held.
async fn scrape_until(
    fixture: &Fixture,
    condition: impl Fn(&Exposition) -> bool,
) -> (Exposition, bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let exposition = fixture.scrape().await;
        if condition(&exposition) {
            return (exposition, true);
        }
        if tokio::time::Instant::now() >= deadline {
            return (exposition, false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The counters' values, for failure messages.
fn trace_counters(exposition: &Exposition) -> String {
    format!(
        "exported {}, dropped queue_full {}, dropped export_failed {}",
        exposition.count(EXPORTED, &[]),
        dropped(exposition, &["queue_full"]),
        dropped(exposition, &["export_failed"]),
    )
}

/// The client span attributes every attempt has, whatever its outcome.
fn assert_attempt(client: &Span, server: &Span, fixture: &Fixture, shard: &str, path: &str) {
    assert!(client.is_client(), "{client:#?}");
    assert_eq!(client.name, "GET", "{client:#?}");
    assert_eq!(client.trace_id, server.trace_id, "{client:#?}");
    assert_eq!(client.parent_span_id, server.span_id, "{client:#?}");
    assert_eq!(client.str("shuffle.shard"), Some(shard), "{client:#?}");
    assert_eq!(
        client.str("shuffle.zone"),
        Some(zone_of(shard)),
        "{client:#?}"
    );
    let addr = fixture.backend(shard).addr();
    assert_eq!(
        client.str("server.address"),
        Some(addr.ip().to_string().as_str()),
        "{client:#?}"
    );
    assert_eq!(
        client.int("server.port"),
        Some(i64::from(addr.port())),
        "{client:#?}"
    );
    assert_eq!(
        client.str("url.full"),
        Some(format!("http://{addr}{path}").as_str()),
        "the shard's URL, without the query: {client:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_one_server_span_with_a_client_span_per_attempt() {
    let receiver = OtlpReceiver::start().await;
    let fixture = gateway(&receiver.url(), "").await;
    let tenant = "tenant-3";
    let subset = fixture.subset_ids(tenant);
    assert_eq!(subset.len(), 2);
    let (victim, other) = (subset[0].clone(), subset[1].clone());
    // Refused connections; the health check ran at start and does not run
    // again, so the gateway learns of it only by trying. Either member is
    // tried first at random (the less busy of the two, both idle): send
    // until one request tried the victim first. The first such request is
    // the one checked, so the victim's later ejection does not matter.
    fixture.backend(&victim).set_mode(Mode::Killed);
    let mut found = None;
    for n in 0..40 {
        let path = format!("/failover/{n}");
        let target = format!("{path}?x=1");
        let (status, _, _) = fixture.send(Some(tenant), "GET", &target, &[], b"").await;
        assert_eq!(status, StatusCode::OK, "{target}");
        let seen = seen_at(&fixture, &other, &target);
        assert_eq!(seen.len(), 1, "{target} reached {other} once");
        let trace_id = traceparent(&seen[0]).trace_id;
        let (server, clients) = whole_trace(&receiver, &trace_id).await;
        if server.int("shuffle.attempts") == Some(2) {
            found = Some((path, server, clients));
            break;
        }
        assert_eq!(server.int("shuffle.attempts"), Some(1), "{server:#?}");
        assert_eq!(clients.len(), 1, "{clients:#?}");
    }
    let (path, server, clients) =
        found.expect("no request in 40 tried the killed member first (odds 2^-40)");

    assert!(server.is_server(), "{server:#?}");
    assert_eq!(server.name, "GET");
    assert_eq!(server.parent_span_id, "", "a root span: {server:#?}");
    assert_eq!(server.service_name.as_deref(), Some("gw-test"));
    assert_eq!(server.str("http.request.method"), Some("GET"));
    assert_eq!(
        server.str("url.path"),
        Some(path.as_str()),
        "the path, never the query"
    );
    assert_eq!(server.str("url.scheme"), Some("http"));
    assert_eq!(server.int("http.response.status_code"), Some(200));
    assert!(
        server
            .str("client.address")
            .is_some_and(|a| a.starts_with("127.0.0.1")),
        "{server:#?}"
    );
    assert_eq!(server.str("shuffle.tenant"), Some(tenant));
    assert_eq!(server.str("shuffle.cell"), Some("default"));
    assert!(
        !server.has("shuffle.outcome"),
        "a shard answered: {server:#?}"
    );
    assert!(!server.is_error(), "{server:#?}");

    assert_eq!(
        clients.len(),
        2,
        "exactly one client span per attempt: {clients:#?}"
    );
    let (first, second) = (&clients[0], &clients[1]);
    assert_attempt(first, &server, &fixture, &victim, &path);
    assert_eq!(first.int("shuffle.attempt"), Some(1));
    assert_eq!(first.str("shuffle.outcome"), Some("connect"), "{first:#?}");
    assert!(first.is_error(), "{first:#?}");
    assert!(!first.has("shuffle.failover_reason"), "{first:#?}");
    assert!(!first.has("http.request.resend_count"), "{first:#?}");
    assert!(
        !first.has("http.response.status_code"),
        "the killed shard never answered: {first:#?}"
    );

    assert_attempt(second, &server, &fixture, &other, &path);
    assert_eq!(second.int("shuffle.attempt"), Some(2));
    assert_eq!(second.str("shuffle.outcome"), Some("ok"), "{second:#?}");
    assert_eq!(
        second.str("shuffle.failover_reason"),
        Some("connect"),
        "{second:#?}"
    );
    assert_eq!(second.int("http.request.resend_count"), Some(1));
    assert_eq!(second.int("http.response.status_code"), Some(200));
    assert!(!second.is_error(), "{second:#?}");
    assert_ne!(first.span_id, second.span_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shard_receives_its_attempts_client_span_as_traceparent() {
    let receiver = OtlpReceiver::start().await;
    let fixture = gateway(&receiver.url(), "").await;
    let tenant = "tenant-5";
    let (status, _, _) = fixture
        .send(Some(tenant), "GET", "/propagated", &[], b"")
        .await;
    assert_eq!(status, StatusCode::OK);
    let seen: Vec<Seen> = fixture
        .subset_ids(tenant)
        .iter()
        .flat_map(|id| seen_at(&fixture, id, "/propagated"))
        .collect();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    let sent = traceparent(&seen[0]);
    assert_eq!(sent.flags, "01", "sampled");
    let (server, clients) = whole_trace(&receiver, &sent.trace_id).await;
    assert_eq!(clients.len(), 1, "{clients:#?}");
    assert_eq!(
        sent.span_id, clients[0].span_id,
        "the shard's parent is the attempt's client span"
    );
    assert_eq!(clients[0].parent_span_id, server.span_id);
    assert_ne!(sent.span_id, server.span_id);
    assert_eq!(clients[0].str("shuffle.outcome"), Some("ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_sends_its_own_client_span_to_its_shard() {
    let receiver = OtlpReceiver::start().await;
    let fixture = gateway(&receiver.url(), "").await;
    let tenant = "tenant-7";
    let subset = fixture.subset_ids(tenant);
    let (victim, other) = (subset[0].clone(), subset[1].clone());
    // 503 is retried on another member by default; the victim records
    // what it was sent before answering it.
    fixture.backend(&victim).set_mode(Mode::Errors {
        status: 503,
        rate: 1.0,
    });
    for n in 0..40 {
        let path = format!("/attempts/{n}");
        let (status, _, _) = fixture.send(Some(tenant), "GET", &path, &[], b"").await;
        assert_eq!(status, StatusCode::OK, "{path}");
        let failed = seen_at(&fixture, &victim, &path);
        if failed.is_empty() {
            continue;
        }
        let served = seen_at(&fixture, &other, &path);
        assert_eq!((failed.len(), served.len()), (1, 1), "{path}");
        let (first, second) = (traceparent(&failed[0]), traceparent(&served[0]));
        assert_eq!(first.trace_id, second.trace_id, "one trace per request");
        assert_ne!(first.span_id, second.span_id, "one span per attempt");
        assert_eq!((first.flags.as_str(), second.flags.as_str()), ("01", "01"));
        let (server, clients) = whole_trace(&receiver, &first.trace_id).await;
        assert_eq!(clients.len(), 2, "{clients:#?}");
        assert_eq!(server.int("shuffle.attempts"), Some(2), "{server:#?}");
        assert_eq!(clients[0].span_id, first.span_id, "{clients:#?}");
        assert_eq!(clients[1].span_id, second.span_id, "{clients:#?}");
        assert_attempt(&clients[0], &server, &fixture, &victim, &path);
        assert_attempt(&clients[1], &server, &fixture, &other, &path);
        assert_eq!(clients[0].str("shuffle.outcome"), Some("status"));
        assert_eq!(clients[0].int("http.response.status_code"), Some(503));
        assert!(clients[0].is_error(), "{:#?}", clients[0]);
        assert_eq!(clients[1].str("shuffle.outcome"), Some("ok"));
        assert_eq!(clients[1].str("shuffle.failover_reason"), Some("status"));
        return;
    }
    panic!("no request in 40 tried the failing member first (odds 2^-40)");
}

/// Sends `GET path` as `tenant` with the example incoming context (flags
/// `flags`) and `tracestate: vendor=x`; what the one shard that served it
/// saw.
async fn send_with_context(fixture: &Fixture, tenant: &str, path: &str, flags: &str) -> Seen {
    let incoming = format!("00-{INCOMING_TRACE}-{INCOMING_SPAN}-{flags}");
    let (status, _, _) = fixture
        .send(
            Some(tenant),
            "GET",
            path,
            &[("traceparent", &incoming), ("tracestate", "vendor=x")],
            b"",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{path}");
    let seen: Vec<Seen> = fixture
        .subset_ids(tenant)
        .iter()
        .flat_map(|id| seen_at(fixture, id, path))
        .collect();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    seen.into_iter().next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_incoming_context_is_replaced_and_linked() {
    let receiver = OtlpReceiver::start().await;
    let fixture = gateway(&receiver.url(), "").await;
    let seen = send_with_context(&fixture, "tenant-2", "/untrusted", "01").await;
    let sent = traceparent(&seen);
    assert_ne!(sent.trace_id, INCOMING_TRACE, "a new trace");
    assert_ne!(sent.span_id, INCOMING_SPAN);
    assert_eq!(sent.flags, "01");
    assert!(
        seen.header("tracestate").is_empty(),
        "the client's tracestate reached the shard: {:?}",
        seen.header("tracestate")
    );
    let (server, clients) = whole_trace(&receiver, &sent.trace_id).await;
    assert_eq!(server.parent_span_id, "", "a root span: {server:#?}");
    assert_eq!(
        server.links,
        vec![Link {
            trace_id: INCOMING_TRACE.into(),
            span_id: INCOMING_SPAN.into(),
        }],
        "{server:#?}"
    );
    assert_eq!(clients.len(), 1);
    assert_eq!(clients[0].span_id, sent.span_id);
    assert!(
        of_trace(&receiver.spans(), INCOMING_TRACE).is_empty(),
        "a span joined the client's trace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_incoming_context_is_continued_and_its_sampling_followed() {
    let receiver = OtlpReceiver::start().await;
    let fixture = gateway(&receiver.url(), "trust_incoming = true").await;
    let tenant = "tenant-2";

    // Not sampled by the client: the gateway follows (even at ratio 1),
    // still continuing the trace at the shard.
    let seen = send_with_context(&fixture, tenant, "/trusted/unsampled", "00").await;
    let unsampled = traceparent(&seen);
    assert_eq!(unsampled.trace_id, INCOMING_TRACE);
    assert_ne!(unsampled.span_id, INCOMING_SPAN);
    assert_eq!(unsampled.flags, "00", "the client's decision is followed");

    let seen = send_with_context(&fixture, tenant, "/trusted/sampled", "01").await;
    let sent = traceparent(&seen);
    assert_eq!(sent.trace_id, INCOMING_TRACE, "the trace is continued");
    assert_ne!(sent.span_id, INCOMING_SPAN, "the attempt's own span");
    assert_eq!(sent.flags, "01");
    assert_eq!(seen.header("tracestate"), ["vendor=x"], "forwarded");

    let (server, clients) = whole_trace(&receiver, INCOMING_TRACE).await;
    assert_eq!(server.parent_span_id, INCOMING_SPAN, "{server:#?}");
    assert_eq!(server.str("url.path"), Some("/trusted/sampled"));
    assert_eq!(clients.len(), 1);
    assert_eq!(clients[0].span_id, sent.span_id);
    // The unsampled request ended before the sampled one began, and spans
    // leave in the order they end: had it been exported, its spans would
    // be here by now.
    let trace = of_trace(&receiver.spans(), INCOMING_TRACE);
    assert!(
        trace
            .iter()
            .all(|span| span.str("url.path") != Some("/trusted/unsampled")
                && span.span_id != unsampled.span_id),
        "the unsampled request was exported: {trace:#?}"
    );
}

/// Sends `count` GETs at once (so spans arrive faster than a small queue
/// drains), spread over the tenants; panics unless every one answers 200.
async fn burst(fixture: &Fixture, count: usize) {
    let mut requests = JoinSet::new();
    for n in 0..count {
        let client = fixture.client.clone();
        let addr = fixture.running.addr;
        let (tenant, key) = fixture.tenants[n % fixture.tenants.len()].clone();
        requests.spawn(async move {
            let path = format!("/burst/{n}");
            let (status, _, _) = send_to(&client, addr, "GET", &path, Some(&key), &[], b"").await;
            (tenant, path, status)
        });
    }
    while let Some(answer) = requests.join_next().await {
        let (tenant, path, status) = answer.unwrap();
        assert_eq!(status, StatusCode::OK, "{tenant} {path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_receiver_fails_no_request_and_its_spans_are_counted_dropped() {
    let receiver = OtlpReceiver::start().await;
    receiver.set_mode(ReceiverMode::Stall);
    let fixture = gateway(
        &receiver.url(),
        "export_timeout_ms = 5000\nexport_interval_ms = 50\nqueue_size = 16",
    )
    .await;
    // One request's spans (within the queue) start an export that hangs:
    // the receiver has read its POST and will not answer.
    let (status, _) = fixture.get("tenant-1", "/first").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        eventually(PATIENCE, || receiver.posts() > 0).await,
        "the exporter never tried"
    );
    // While that export hangs, 80 more spans than the queue holds arrive:
    // every request still answers, the spans past the queue are dropped
    // as queue_full, and the hung export's spans as export_failed once it
    // times out.
    burst(&fixture, 40).await;
    let (exposition, counted) = scrape_until(&fixture, |e| {
        dropped(e, &["queue_full"]) > 0.0 && dropped(e, &["export_failed"]) > 0.0
    })
    .await;
    assert!(counted, "{}", trace_counters(&exposition));
    assert!(receiver.spans().is_empty());
    assert_eq!(exposition.count(EXPORTED, &[]), 0.0, "nothing was answered");
    // Still answering after the drops.
    let (status, _) = fixture.get("tenant-1", "/after").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_receiver_fails_no_request_and_its_spans_are_counted_dropped() {
    let receiver = OtlpReceiver::start().await;
    receiver.set_mode(ReceiverMode::Fail(500));
    let fixture = gateway(&receiver.url(), "export_interval_ms = 50").await;
    burst(&fixture, 20).await;
    let (exposition, counted) =
        scrape_until(&fixture, |e| dropped(e, &["export_failed"]) > 0.0).await;
    assert!(counted, "{}", trace_counters(&exposition));
    assert!(receiver.posts() > 0, "the exporter never tried");
    assert_eq!(exposition.count(EXPORTED, &[]), 0.0);
    // Once the receiver recovers, spans flow and are counted as exported.
    receiver.set_mode(ReceiverMode::Accept);
    burst(&fixture, 5).await;
    let (exposition, counted) = scrape_until(&fixture, |e| e.count(EXPORTED, &[]) > 0.0).await;
    assert!(counted, "{}", trace_counters(&exposition));
    assert!(!receiver.spans().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_receiver_fails_no_request_and_its_spans_are_counted_dropped() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fixture = gateway(
        &format!("http://127.0.0.1:{port}"),
        "export_interval_ms = 50\nexport_timeout_ms = 500",
    )
    .await;
    burst(&fixture, 20).await;
    let (exposition, counted) =
        scrape_until(&fixture, |e| dropped(e, &["export_failed"]) > 0.0).await;
    assert!(counted, "{}", trace_counters(&exposition));
    assert_eq!(exposition.count(EXPORTED, &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_ratio_zero_exports_nothing_but_still_propagates() {
    let receiver = OtlpReceiver::start().await;
    // Trusting incoming context lets one request be sampled by its client
    // below: the positive control that this gateway's exporter works.
    let fixture = gateway(
        &receiver.url(),
        "sample_ratio = 0\nexport_interval_ms = 50\ntrust_incoming = true",
    )
    .await;
    burst(&fixture, 40).await;
    let mut trace_ids = std::collections::BTreeSet::new();
    for backend in &fixture.backends {
        for seen in backend.seen() {
            let sent = traceparent(&seen);
            assert_eq!(sent.flags, "00", "not sampled: {seen:#?}");
            trace_ids.insert(sent.trace_id);
        }
    }
    assert_eq!(trace_ids.len(), 40, "one trace per request, ids still made");
    // Twenty export intervals.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(receiver.posts(), 0, "an export at sample_ratio 0");
    let exposition = fixture.scrape().await;
    assert_eq!(
        exposition.count(EXPORTED, &[]),
        0.0,
        "{}",
        trace_counters(&exposition)
    );

    // The control: a client-sampled request is exported, by the same
    // exporter, after the forty; had any of theirs been queued, it would
    // have left first.
    let seen = send_with_context(&fixture, "tenant-1", "/control", "01").await;
    assert_eq!(traceparent(&seen).flags, "01");
    let (server, _) = whole_trace(&receiver, INCOMING_TRACE).await;
    assert_eq!(server.str("url.path"), Some("/control"));
    let (exposition, counted) = scrape_until(&fixture, |e| e.count(EXPORTED, &[]) > 0.0).await;
    assert!(counted, "{}", trace_counters(&exposition));
    let strays: Vec<Span> = receiver
        .spans()
        .into_iter()
        .filter(|span| span.trace_id != INCOMING_TRACE)
        .collect();
    assert!(strays.is_empty(), "unsampled spans exported: {strays:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_or_query_reaches_an_exported_byte() {
    let receiver = OtlpReceiver::start().await;
    let fixture = gateway(&receiver.url(), "").await;
    let tenant = "tenant-4";
    let key = fixture.api_key(tenant).to_owned();
    let wrong = "guessed-key-that-is-wrong-7f3a";
    let path = "/secret/path";
    let target = format!("{path}?api_key=query-secret&x=1");
    // The key as a bearer token, as x-api-key, and a wrong one (answered
    // by the gateway itself).
    let (status, _, _) = fixture.send(Some(tenant), "GET", &target, &[], b"").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = fixture
        .send(None, "GET", &target, &[("x-api-key", &key)], b"")
        .await;
    assert_eq!(status, StatusCode::OK);
    let bearer = format!("Bearer {wrong}");
    let (status, _, _) = fixture
        .send(None, "GET", &target, &[("authorization", &bearer)], b"")
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let servers = |spans: &[Span]| -> Vec<Span> {
        spans
            .iter()
            .filter(|s| s.is_server() && s.str("url.path") == Some(path))
            .cloned()
            .collect()
    };
    let arrived = receiver
        .wait_for(
            |spans| {
                servers(spans).len() == 3 && spans.iter().filter(|s| s.is_client()).count() >= 2
            },
            PATIENCE,
        )
        .await;
    assert!(arrived, "{:#?}", receiver.spans());
    let refused: Vec<Span> = servers(&receiver.spans())
        .into_iter()
        .filter(|s| s.int("http.response.status_code") == Some(401))
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0].str("shuffle.outcome"), Some("unauthorized"));
    assert!(!refused[0].has("shuffle.tenant"), "{:#?}", refused[0]);

    let bodies = receiver.raw_bodies();
    assert!(!bodies.is_empty());
    for body in &bodies {
        let text = String::from_utf8_lossy(body).to_ascii_lowercase();
        for secret in [
            key.as_str(),
            wrong,
            "query-secret",
            "api_key",
            "x=1",
            "bearer",
            "authorization",
            "x-api-key",
        ] {
            assert!(
                !text.contains(&secret.to_ascii_lowercase()),
                "{secret:?} in an exported body"
            );
        }
    }
    // And no attribute of any span carries a query.
    for span in receiver.spans() {
        for (name, value) in &span.attributes {
            assert!(
                !format!("{value:?}").contains('?'),
                "{name} = {value:?} in {span:#?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tracing_a_clients_context_reaches_the_shard_untouched() {
    let fixture = Fixture::start(options()).await;
    let seen = send_with_context(&fixture, "tenant-6", "/untraced", "01").await;
    assert_eq!(
        seen.header("traceparent"),
        [format!("00-{INCOMING_TRACE}-{INCOMING_SPAN}-01").as_str()]
    );
    assert_eq!(seen.header("tracestate"), ["vendor=x"]);
}

/// A reload that names another collector sends the next spans there and
/// none more to the old one; a reload that removes `[tracing]` stops
/// tracing, and a client's `traceparent` passes untouched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_export_to_another_collector_and_can_turn_tracing_off() {
    let first = OtlpReceiver::start().await;
    let second = OtlpReceiver::start().await;
    let fixture = gateway(&first.url(), "").await;
    let tenant = "tenant-3";
    let sent = send_with_context(&fixture, tenant, "/before", "01").await;
    let before = traceparent(&sent);
    whole_trace(&first, &before.trace_id).await;

    let path = fixture.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace(&first.url(), &second.url())).unwrap();
    fixture.running.gateway.reload(false).unwrap();
    let sent = send_with_context(&fixture, tenant, "/after", "01").await;
    let after = traceparent(&sent);
    whole_trace(&second, &after.trace_id).await;
    assert!(
        of_trace(&first.spans(), &after.trace_id).is_empty(),
        "the old collector got spans after the reload"
    );

    // The table's lines: from its header to the next table's.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut inside = false;
    let without: Vec<&str> = text
        .lines()
        .filter(|line| {
            if line.starts_with('[') {
                inside = *line == "[tracing]";
            }
            !inside
        })
        .collect();
    assert!(without.len() < text.lines().count(), "no [tracing] table");
    std::fs::write(&path, without.join("\n")).unwrap();
    fixture.running.gateway.reload(false).unwrap();
    let sent = send_with_context(&fixture, tenant, "/off", "01").await;
    let off = traceparent(&sent);
    assert_eq!(
        off.trace_id, INCOMING_TRACE,
        "the client's context passes untouched"
    );
    assert_eq!(off.span_id, INCOMING_SPAN);
}

/// Spans still waiting for their batch when the gateway stops are sent
/// before it has stopped (the batch window here is a minute): shutdown
/// waits for the collector's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_the_spans_still_waiting() {
    let receiver = OtlpReceiver::start().await;
    // A minute's window and timeout: nothing is sent before the
    // shutdown, and the shutdown waits for as long as the test needs.
    let fixture = gateway(
        &receiver.url(),
        "export_interval_ms = 60000\nexport_timeout_ms = 60000",
    )
    .await;
    let sent = send_with_context(&fixture, "tenant-6", "/last-words", "01").await;
    let parent = traceparent(&sent);
    assert_eq!(receiver.posts(), 0, "the batch window has not passed");
    // The collector holds the shutdown's export until the test lets it go.
    receiver.set_mode(ReceiverMode::Stall);
    let Fixture { running, .. } = fixture;
    let stopping = tokio::spawn(running.shutdown());
    assert!(
        eventually(PATIENCE, || receiver.posts() == 1).await,
        "shutdown sent no spans"
    );
    assert!(
        !stopping.is_finished(),
        "shutdown finished before its export was answered"
    );
    receiver.set_mode(ReceiverMode::Accept);
    stopping.await.unwrap();
    assert_eq!(
        of_trace(&receiver.spans(), &parent.trace_id).len(),
        2,
        "the server span and the attempt's: {:#?}",
        receiver.spans()
    );
}

/// Tracing turned on by a reload names the replica in every span's
/// resource (`service.instance.id`), as tracing on from the start does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracing_turned_on_by_a_reload_names_the_replica() {
    let receiver = OtlpReceiver::start().await;
    let fixture = Fixture::start(options()).await;
    let path = fixture.config_path();
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&tracing_table(&receiver.url(), ""));
    std::fs::write(&path, text).unwrap();
    fixture.running.gateway.reload(false).unwrap();
    let sent = send_with_context(&fixture, "tenant-3", "/reloaded", "01").await;
    whole_trace(&receiver, &traceparent(&sent).trace_id).await;
    // The default replica name starts with the host's name.
    let host: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .collect();
    let named = receiver.raw_bodies().iter().any(|body| {
        body.windows(host.len())
            .any(|window| window == host.as_bytes())
    });
    assert!(named, "no service.instance.id naming {host:?}");
}

/// The queue bound holds across reloads: an export task a reload replaced
/// still holds its spans against `queue_size` until they are sent or
/// dropped, so collectors that hang one after another cannot make the
/// gateway hold more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_bound_holds_across_reloads_to_hanging_collectors() {
    let receivers = [
        OtlpReceiver::start().await,
        OtlpReceiver::start().await,
        OtlpReceiver::start().await,
    ];
    for receiver in &receivers {
        receiver.set_mode(ReceiverMode::Stall);
    }
    let fixture = gateway(
        &receivers[0].url(),
        "export_timeout_ms = 60000\nexport_interval_ms = 10\nqueue_size = 16",
    )
    .await;
    let path = fixture.config_path();
    for (n, receiver) in receivers.iter().enumerate() {
        if n > 0 {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(
                &path,
                text.replace(&receivers[n - 1].url(), &receiver.url()),
            )
            .unwrap();
            fixture.running.gateway.reload(false).unwrap();
        }
        // Each collector gets an export that hangs, holding its spans:
        // one request's to the first two, then more than the queue holds.
        burst(&fixture, if n < 2 { 1 } else { 20 }).await;
        assert!(
            eventually(PATIENCE, || receiver.posts() > 0).await,
            "collector {n} was never tried"
        );
    }
    let (exposition, dropped_some) =
        scrape_until(&fixture, |e| dropped(e, &["queue_full"]) > 0.0).await;
    assert!(dropped_some, "{}", trace_counters(&exposition));
    let held = exposition.value("shuffle_trace_spans_queued", &[]);
    assert!(held <= 16.0, "{held} spans held against a queue_size of 16");
}

/// With the JSON access log on, a request's line carries the trace id its
/// shard was sent, so a log line leads to its trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_access_log_names_each_requests_trace() {
    let receiver = OtlpReceiver::start().await;
    let fixture = Fixture::start(Options {
        extra: tracing_table(&receiver.url(), "")
            + "\n[logging]\naccess_log = \"json\"\naccess_log_file = \"access.log\"\n",
        ..options()
    })
    .await;
    let sent = send_with_context(&fixture, "tenant-4", "/logged", "01").await;
    let sent = traceparent(&sent);
    let log = fixture.dir.path().join("access.log");
    let mut line = None;
    assert!(
        eventually(PATIENCE, || {
            line = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .find(|line| line.contains("\"/logged\""))
                .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap());
            line.is_some()
        })
        .await,
        "no access log line"
    );
    assert_eq!(line.unwrap()["trace_id"], sent.trace_id.as_str());
}
