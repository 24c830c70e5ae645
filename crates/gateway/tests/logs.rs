//! Logs: with `logging.access_log` one structured event per request, and
//! never an API key, a bearer token, the admin token or the placement key
//! in any event, whatever the client or operator sent.
//!
//! Events are captured by a minimal `tracing` subscriber installed for this
//! thread; the test runs on a current-thread runtime, so every task of the
//! gateway under test logs through it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use crate::admin::{TOKEN, options};
use crate::util::{Fixture, Options, eventually};

/// Every event (and span field) as one line: `target level message k=v …`
/// (`tenant_sync` reads the store's logs with it too).
#[derive(Clone, Default)]
pub(crate) struct Capture {
    pub(crate) lines: Arc<Mutex<Vec<String>>>,
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
        // Milliseconds to the microsecond, written as such (never
        // 3.0224599999999997).
        let elapsed = line
            .split(" elapsed_ms=")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap();
        let decimals = elapsed.split('.').nth(1).map_or(0, str::len);
        assert!(decimals <= 3, "{line}");
        // The request id the shard was sent, and where the request came from.
        assert!(line.contains(" request_id="), "{line}");
        assert!(line.contains(" client=127.0.0.1:"), "{line}");
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

/// The lines of the JSON access log at `path`, parsed (each must be one
/// JSON object).
fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

/// `logging.access_log = "json"`: one object per request, with the
/// request id the shard saw (the client's when valid, else a fresh one),
/// the shards tried, exact durations and byte counts, written to
/// `logging.access_log_file` and to a new file after a reopen; no
/// credential and no query in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_access_log_has_every_field_and_no_credential() {
    let fixture = Fixture::start(Options {
        extra: "[logging]\naccess_log = \"json\"\naccess_log_file = \"access.log\"\n".into(),
        ..options()
    })
    .await;
    let log = fixture.dir.path().join("access.log");
    let tenant = "tenant-4";
    let key = fixture.api_key(tenant).to_owned();
    let subset = fixture.subset_ids(tenant);

    // A valid client id is kept; one with a space, or too long, is not.
    let long = "x".repeat(129);
    let cases = [
        ("/work?api_key=query-secret", Some("client-id-1.2_3")),
        ("/spaced", Some("has a space")),
        ("/long", Some(long.as_str())),
        ("/none", None),
    ];
    for (path, id) in cases {
        let headers: Vec<(&str, &str)> = id.map(|id| ("x-request-id", id)).into_iter().collect();
        let (status, _, _) = fixture.send(Some(tenant), "GET", path, &headers, b"").await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, _, _) = fixture
        .send(
            None,
            "POST",
            "/denied",
            &[("x-api-key", "guessed-key-that-is-wrong-42")],
            b"abc",
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let mut lines = Vec::new();
    assert!(
        eventually(Duration::from_secs(5), || {
            lines = json_lines(&log);
            lines.len() == 5
        })
        .await,
        "{lines:?}"
    );
    // What the shards saw, by path.
    let seen: Vec<(String, Vec<String>)> = fixture
        .backends
        .iter()
        .flat_map(|b| b.seen())
        .map(|s| {
            let ids = s
                .header("x-request-id")
                .iter()
                .map(|v| v.to_string())
                .collect();
            (s.path.clone(), ids)
        })
        .collect();
    for (line, (path, id)) in lines.iter().zip(cases) {
        let object = line.as_object().unwrap();
        let fields: BTreeSet<&str> = object.keys().map(String::as_str).collect();
        assert_eq!(
            fields,
            BTreeSet::from([
                "time",
                "request_id",
                "tenant",
                "cell",
                "shards",
                "status",
                "attempts",
                "duration",
                "method",
                "path",
                "client",
                "bytes_in",
                "bytes_out"
            ]),
            "{line}"
        );
        assert_eq!(line["tenant"], tenant);
        assert_eq!(line["cell"], "default");
        assert_eq!(line["status"], 200);
        assert_eq!(line["attempts"], 1);
        assert_eq!(line["method"], "GET");
        let path_only = path.split('?').next().unwrap();
        assert_eq!(line["path"], path_only);
        let shards = line["shards"].as_array().unwrap();
        assert_eq!(shards.len(), 1);
        assert!(
            subset.contains(&shards[0].as_str().unwrap().to_owned()),
            "{line}"
        );
        assert!(line["client"].as_str().unwrap().starts_with("127.0.0.1:"));
        assert_eq!(line["bytes_in"], 0);
        assert!(line["bytes_out"].as_u64().unwrap() > 0, "{line}");
        let time = line["time"].as_str().unwrap();
        assert!(
            time.len() == 27 && time.ends_with('Z') && &time[10..11] == "T",
            "{time}"
        );
        // Seconds, to the microsecond, written as such.
        let duration = line["duration"].as_f64().unwrap();
        assert!(duration > 0.0);
        assert_eq!(format!("{duration:.6}").parse::<f64>().unwrap(), duration);
        let request_id = line["request_id"].as_str().unwrap();
        match id {
            Some(valid) if !valid.contains(' ') && valid.len() <= 128 => {
                assert_eq!(request_id, valid)
            }
            _ => assert!(
                request_id.len() == 32 && request_id.bytes().all(|b| b.is_ascii_hexdigit()),
                "{request_id}"
            ),
        }
        // The shard saw that id, and only that one.
        let (_, ids) = seen
            .iter()
            .find(|(p, _)| p.starts_with(path_only))
            .unwrap_or_else(|| panic!("{path} not seen: {seen:?}"));
        assert_eq!(ids, &vec![request_id.to_owned()], "{path}");
    }
    // A refused request is logged too, with no tenant.
    let denied = &lines[4];
    assert_eq!(denied["status"], 401);
    assert_eq!(denied["tenant"], serde_json::Value::Null);
    assert_eq!(denied["path"], "/denied");
    assert_eq!(denied["attempts"], 0);
    assert!(denied["bytes_out"].as_u64().unwrap() > 0);

    let text = std::fs::read_to_string(&log).unwrap();
    for (what, secret) in [
        ("the API key", key.as_str()),
        ("a guessed key", "guessed-key-that-is-wrong-42"),
        ("a query", "query-secret"),
    ] {
        assert!(
            !text.contains(secret),
            "{what} is in the access log:\n{text}"
        );
    }

    // A failover: the shards tried are listed in order, the dead first.
    let (dead, alive) = (&subset[0], &subset[1]);
    fixture.backend(dead).set_mode(backend::Mode::Killed);
    let mut failed_over = None;
    for sent in 0.. {
        assert!(sent < 50, "no request tried {dead} first");
        assert_eq!(fixture.get(tenant, "/failover").await.0, StatusCode::OK);
        let mut lines = Vec::new();
        assert!(
            eventually(Duration::from_secs(5), || {
                lines = json_lines(&log);
                lines.len() == 6 + sent
            })
            .await
        );
        let last = lines.last().unwrap().clone();
        if last["attempts"] == 2 {
            failed_over = Some(last);
            break;
        }
    }
    let line = failed_over.unwrap();
    assert_eq!(line["shards"], serde_json::json!([dead, alive]), "{line}");
    assert_eq!(line["status"], 200);
    fixture.backend(dead).set_mode(backend::Mode::Healthy);
    let logged = json_lines(&log).len();

    // logrotate: the file is renamed, the gateway told to reopen it.
    let rotated = fixture.dir.path().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    fixture.running.gateway.access_log.reopen().unwrap();
    assert_eq!(fixture.get(tenant, "/after").await.0, StatusCode::OK);
    assert!(
        eventually(Duration::from_secs(5), || json_lines(&log).len() == 1).await,
        "nothing in the new file"
    );
    assert_eq!(json_lines(&log)[0]["path"], "/after");
    assert_eq!(json_lines(&rotated).len(), logged);
}
