//! The OTLP receiver checked on its own, with hand-made exports over raw
//! HTTP/1.1: the gateway's tracing tests trust what it reports, so what it
//! reports is pinned here (flattening, the three modes, refusals).

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Link;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use testkit::otlp::{Mode, OtlpReceiver, SpanKind, SpanStatus, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

/// One resource (`service.name` = `service`) with one server span carrying
/// a string and an int attribute, an error status and a link.
fn export(service: &str) -> Vec<u8> {
    let span = Span {
        trace_id: vec![0xab; 16],
        span_id: vec![0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08],
        parent_span_id: vec![0xcd; 8],
        name: "GET".into(),
        kind: SpanKind::Server as i32,
        attributes: vec![
            attribute("url.path", any_value::Value::StringValue("/a".into())),
            attribute("shuffle.attempts", any_value::Value::IntValue(2)),
        ],
        links: vec![Link {
            trace_id: vec![0x11; 16],
            span_id: vec![0x22; 8],
            ..Link::default()
        }],
        status: Some(Status {
            code: SpanStatus::Error as i32,
            ..Status::default()
        }),
        ..Span::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![attribute(
                    "service.name",
                    any_value::Value::StringValue(service.into()),
                )],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![span],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
    .encode_to_vec()
}

/// Writes one POST on a fresh connection and returns the status line, or
/// `None` when nothing came back within `within`.
async fn post(
    receiver: &OtlpReceiver,
    path: &str,
    content_type: &str,
    body: &[u8],
    within: Duration,
) -> (TcpStream, Option<String>) {
    let mut stream = TcpStream::connect(receiver.addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let line = status_line(&mut stream, within).await;
    (stream, line)
}

async fn status_line(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut received = Vec::new();
    tokio::time::timeout(within, async {
        let mut buffer = [0_u8; 1024];
        while !received.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buffer).await.unwrap();
            assert_ne!(n, 0, "closed before a status line");
            received.extend_from_slice(&buffer[..n]);
        }
    })
    .await
    .ok()?;
    let text = String::from_utf8_lossy(&received).into_owned();
    text.lines().next().map(str::to_owned)
}

/// `body` posted as an OTLP/HTTP export, as the gateway sends one.
async fn export_to(
    receiver: &OtlpReceiver,
    body: &[u8],
    within: Duration,
) -> (TcpStream, Option<String>) {
    post(
        receiver,
        "/v1/traces",
        "application/x-protobuf",
        body,
        within,
    )
    .await
}

#[tokio::test]
async fn accepted_spans_are_flattened_with_their_service_name() {
    let receiver = OtlpReceiver::start().await;
    let body = export("svc-a");
    let (_, line) = export_to(&receiver, &body, Duration::from_secs(5)).await;
    assert_eq!(line.as_deref(), Some("HTTP/1.1 200 OK"));
    assert_eq!(receiver.posts(), 1);
    assert_eq!(receiver.raw_bodies(), vec![body]);
    let spans = receiver.spans();
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(span.service_name.as_deref(), Some("svc-a"));
    assert_eq!(span.trace_id, "ab".repeat(16));
    assert_eq!(span.span_id, "0102030405060708");
    assert_eq!(span.parent_span_id, "cd".repeat(8));
    assert!(span.is_server() && !span.is_client() && span.is_error());
    assert_eq!(span.str("url.path"), Some("/a"));
    assert_eq!(span.int("shuffle.attempts"), Some(2));
    // The typed lookups do not convert: an int is no string, nor the
    // reverse.
    assert_eq!(span.str("shuffle.attempts"), None);
    assert_eq!(span.int("url.path"), None);
    assert_eq!(span.attr("shuffle.attempts"), Some(&Value::Int(2)));
    assert!(!span.has("url.query"));
    assert_eq!(span.links.len(), 1);
    assert_eq!(span.links[0].trace_id, "11".repeat(16));
    assert_eq!(span.links[0].span_id, "22".repeat(8));
    assert!(
        receiver
            .wait_for(|spans| spans.len() == 1, Duration::from_secs(1))
            .await
    );
    assert!(
        !receiver
            .wait_for(|spans| spans.len() == 2, Duration::from_millis(100))
            .await
    );
    assert!(receiver.rejected().is_empty());
}

#[tokio::test]
async fn failing_and_stalling_keep_no_spans_but_count_the_posts() {
    let receiver = OtlpReceiver::start().await;
    receiver.set_mode(Mode::Fail(500));
    let body = export("svc-b");
    let (_, line) = export_to(&receiver, &body, Duration::from_secs(5)).await;
    assert_eq!(line.as_deref(), Some("HTTP/1.1 500 Internal Server Error"));
    assert_eq!(receiver.posts(), 1);
    assert!(receiver.spans().is_empty());

    receiver.set_mode(Mode::Stall);
    let (mut held, line) = export_to(&receiver, &body, Duration::from_millis(300)).await;
    assert_eq!(line, None, "a stalled receiver answered");
    assert_eq!(receiver.posts(), 2, "the stalled POST was read");
    assert_eq!(receiver.raw_bodies().len(), 2);
    // Released, the held request is answered as the new mode says.
    receiver.set_mode(Mode::Accept);
    let line = status_line(&mut held, Duration::from_secs(5)).await;
    assert_eq!(line.as_deref(), Some("HTTP/1.1 200 OK"));
    assert_eq!(receiver.spans().len(), 1);
}

#[tokio::test]
async fn other_paths_types_and_bodies_are_refused_and_recorded() {
    let receiver = OtlpReceiver::start().await;
    let body = export("svc-c");
    for (path, content_type, body, status) in [
        ("/v1/metrics", "application/x-protobuf", &body[..], "404"),
        ("/v1/traces", "application/json", &body[..], "400"),
        (
            "/v1/traces",
            "application/x-protobuf",
            b"\xff\xff\xff",
            "400",
        ),
    ] {
        let (_, line) = post(&receiver, path, content_type, body, Duration::from_secs(5)).await;
        let line = line.unwrap();
        assert!(line.starts_with(&format!("HTTP/1.1 {status}")), "{line}");
    }
    assert_eq!(receiver.rejected().len(), 3, "{:?}", receiver.rejected());
    assert!(receiver.spans().is_empty());
    // The two POSTs to /v1/traces count, the other path does not.
    assert_eq!(receiver.posts(), 2);
}
