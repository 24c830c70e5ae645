//! Logs: with `logging.access_log` one structured event per request, and
//! never an API key, a bearer token, the admin token or the placement key
//! in any event, whatever the client or operator sent.
//!
//! Events are captured by a minimal `tracing` subscriber installed for this
//! thread; the test runs on a current-thread runtime, so every task of the
//! gateway under test logs through it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::StatusCode;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use crate::admin::{TOKEN, options};
use crate::util::{Fixture, Options};

/// Every event (and span field) as one line: `target level message k=v …`.
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    next_span: Arc<AtomicU64>,
}

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push_str(&format!(" {}={value}", field.name()));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut line = Line(format!("span {}", span.metadata().name()));
        span.record(&mut line);
        self.lines.lock().unwrap().push(line.0);
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut line = Line("record".into());
        values.record(&mut line);
        self.lines.lock().unwrap().push(line.0);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let metadata = event.metadata();
        let mut line = Line(format!("{} {}", metadata.target(), metadata.level()));
        event.record(&mut line);
        self.lines.lock().unwrap().push(line.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[tokio::test]
async fn the_access_log_has_one_event_per_request_and_no_secret_anywhere() {
    // tracing caches each callsite's interest globally. With a single live
    // dispatcher it asks the registering thread's default, so a callsite
    // first hit by another test's thread (no subscriber) would be cached as
    // "never" and vanish here too. A second live dispatcher makes every
    // registration consult all of them ("sometimes"), so each event is
    // checked against this thread's subscriber.
    let _second = tracing::Dispatch::new(Capture::default());
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.clone());
    let fixture = Fixture::start(Options {
        extra: "[logging]\naccess_log = true\n".into(),
        ..options()
    })
    .await;
    let tenant = "tenant-4";
    let key = fixture.api_key(tenant).to_owned();

    assert_eq!(fixture.get(tenant, "/work?x=1").await.0, StatusCode::OK);
    let (status, _, _) = fixture
        .send(None, "GET", "/", &[("x-api-key", &key)], b"")
        .await;
    assert_eq!(status, StatusCode::OK);
    // Wrong credentials of every kind.
    let guessed = "guessed-key-that-is-wrong-42";
    for headers in [
        [("authorization", format!("Bearer {guessed}"))],
        [("x-api-key", guessed.to_owned())],
        [("authorization", format!("Bearer {TOKEN}"))],
        [(
            "authorization",
            "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ0ZW5hbnQtMSJ9.".to_owned(),
        )],
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (status, _, _) = fixture.send(None, "GET", "/", &headers, b"").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // The admin API: a wrong token, the right one, a fail and a refused
    // reload (a key file that is too short names the file, not the bytes).
    let (status, _, _) = fixture.admin("GET", "/admin/shards", Some(guessed)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    fixture.admin_json("POST", "/admin/shards/s1/fail").await;
    let key_path = fixture.dir.path().join("placement.key");
    let placement_key = std::fs::read(&key_path).unwrap();
    std::fs::write(&key_path, &placement_key[..10]).unwrap();
    let (status, _, _) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    std::fs::write(&key_path, &placement_key).unwrap();

    let lines = capture.lines.lock().unwrap().clone();
    let text = lines.join("\n");
    // One access-log event per request that named a tenant.
    let access: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("message=request") && l.contains("gateway::route::proxy"))
        .collect();
    assert_eq!(access.len(), 2, "{text}");
    for line in &access {
        assert!(line.contains(&format!("tenant={tenant}")), "{line}");
        assert!(
            line.contains("status=200") && line.contains("attempts=1"),
            "{line}"
        );
        assert!(
            line.contains("cell=default") && line.contains("elapsed_ms="),
            "{line}"
        );
        assert!(line.contains("method=GET"), "{line}");
        // The path, never the query (which can carry secrets).
        assert!(line.contains("path=/"), "{line}");
        assert!(!line.contains("x=1"), "{line}");
    }
    assert!(
        access.iter().any(|line| line.contains("path=/work")),
        "{text}"
    );
    // The operator's action and the refused reload are logged.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("operator changed shard state") && l.contains("shard=s1")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("reload through the admin API refused")
                && l.contains("placement.key")),
        "{text}"
    );
    // No secret anywhere.
    let hex: String = placement_key.iter().map(|b| format!("{b:02x}")).collect();
    for (what, secret) in [
        ("the API key", key.as_str()),
        ("a guessed key", guessed),
        ("the admin token", TOKEN),
        ("the placement key (hex)", &hex),
        ("the placement key (hex prefix)", &hex[..20]),
        ("a JWT", "eyJhbGciOiJub25lIn0"),
    ] {
        assert!(!text.contains(secret), "{what} is in the logs:\n{text}");
    }
    for (_, other) in &fixture.tenants {
        assert!(!text.contains(other.as_str()), "an API key is in the logs");
    }
}
