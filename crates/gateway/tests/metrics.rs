//! `GET /metrics` on the admin listener, scraped after real traffic (good
//! requests, a 401, a failover off a killed shard, a spent retry budget,
//! ejections, a spill) and parsed as the text exposition: every family is
//! there, with values that agree with what the test sent and what the
//! backends saw, and no secret appears anywhere in it.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use backend::Mode;
use gateway::health::Availability;
use http::StatusCode;

use crate::util::{Exposition, Fixture, Options, eventually, parse};

#[test]
fn the_parser_reads_labels_escapes_and_histograms() {
    let text = "# HELP a_requests Requests.\n# TYPE a_requests counter\n\
                a_requests_total{cell=\"x\\\"y\",outcome=\"ok\"} 3\n\
                # HELP a_latency Latency.\n# TYPE a_latency histogram\n\
                a_latency_sum 1.5\na_latency_count 2\n\
                a_latency_bucket{le=\"0.5\"} 1\na_latency_bucket{le=\"+Inf\"} 2\n\
                # HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# EOF\n";
    let parsed = parse(text);
    assert_eq!(
        parsed.value("a_requests_total", &[("cell", "x\"y"), ("outcome", "ok")]),
        3.0
    );
    assert_eq!(parsed.family_of("a_latency_bucket"), "a_latency");
    assert_eq!(parsed.value("a_latency_bucket", &[("le", "+Inf")]), 2.0);
    assert_eq!(parsed.value("a_up", &[]), 1.0);
}

#[test]
#[should_panic(expected = "has no # TYPE")]
fn the_parser_refuses_an_undeclared_family() {
    parse("# HELP a A.\n# TYPE a gauge\na 1\nb 2\n# EOF\n");
}

#[test]
#[should_panic(expected = "does not end with # EOF")]
fn the_parser_refuses_a_truncated_exposition() {
    parse("# HELP a A.\n# TYPE a gauge\na 1\n");
}

/// The histogram `family`'s series with labels `labels` (le excluded) is
/// well formed: buckets cumulative in `le` order, `+Inf` equal to `_count`.
/// Returns the count.
fn check_histogram(metrics: &Exposition, family: &str, labels: &[(&str, &str)]) -> f64 {
    assert_eq!(metrics.kind(family), Some("histogram"), "{family}");
    let mut buckets: Vec<(f64, f64)> = metrics
        .matching(&format!("{family}_bucket"), labels)
        .iter()
        .map(|s| {
            let le = &s.labels["le"];
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (bound, s.value)
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.len() >= 10, "{family}{labels:?}: {buckets:?}");
    assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
    for pair in buckets.windows(2) {
        assert!(
            pair[0].1 <= pair[1].1,
            "{family}: not cumulative: {buckets:?}"
        );
    }
    let count = metrics.value(&format!("{family}_count"), labels);
    assert_eq!(buckets.last().unwrap().1, count, "{family}: +Inf ≠ _count");
    let sum = metrics.value(&format!("{family}_sum"), labels);
    assert!(
        count == 0.0 || sum > 0.0,
        "{family}: {count} observations summing to {sum}"
    );
    count
}

const TOKEN: &str = "metrics-test-admin-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_is_exported_with_values_that_match_the_traffic() {
    let fixture = Fixture::start(Options {
        // Only passive ejection and the test move shards: health checks
        // run once at start, and ejections outlast the test.
        health: "interval_ms = 60000\ntimeout_ms = 2000\n".into(),
        // Two of the eight shards are ejected below, which the default cap
        // (10 %, one shard) would not allow.
        outlier: "consecutive_failures = 3\nbase_ejection_ms = 60000\nmax_ejection_ms = 60000\nmax_ejection_percent = 25\n"
            .into(),
        routing: "exhausted = \"spill\"\n".into(),
        // No retries after a request may have reached a backend; failover
        // after a refused connection needs no budget.
        extra: "[retry_budget]\nratio = 0.0\nmin_per_second = 0\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let gateway = &fixture.running.gateway;
    let tenants: Vec<String> = fixture.tenants.iter().map(|(t, _)| t.clone()).collect();
    // The victim tenant's two members: one is killed, the other answers 503.
    let victim = &tenants[0];
    let subset = fixture.subset_ids(victim);
    let (killed, erroring) = (subset[0].clone(), subset[1].clone());
    let on = |shard: &str| -> Vec<String> {
        tenants
            .iter()
            .filter(|t| fixture.subset_ids(t).contains(&shard.to_owned()))
            .cloned()
            .collect()
    };

    // Requests with a good credential, as the test sends them: the
    // gateway's count of requests is checked against this.
    let mut credentialed = 0_u64;
    // Good traffic: every tenant, twice.
    for tenant in &tenants {
        for _ in 0..2 {
            assert_eq!(fixture.get(tenant, "/").await.0, StatusCode::OK);
            credentialed += 1;
        }
    }
    // One bad credential.
    let (status, _, _) = fixture
        .send(None, "GET", "/", &[("x-api-key", "not-a-key")], b"")
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let shard_state = |id: &str| {
        gateway
            .snapshot()
            .find_shard("default", id)
            .unwrap()
            .availability(&fixture.config())
    };
    // A killed member: refused connections fail over (no budget needed)
    // until it is ejected.
    fixture.backend(&killed).set_mode(Mode::Killed);
    let others: Vec<String> = on(&killed).into_iter().filter(|t| t != victim).collect();
    assert!(
        !others.is_empty(),
        "the test needs other tenants on {killed}"
    );
    for (sent, tenant) in others.iter().cycle().enumerate() {
        if shard_state(&killed) == Availability::Ejected {
            break;
        }
        assert!(sent < 500, "{killed} was never ejected");
        let (status, _) = fixture.get(tenant, "/").await;
        credentialed += 1;
        assert_eq!(status, StatusCode::OK, "{tenant} failed over");
    }
    // An erroring member: its 503s may not be retried (the budget is
    // spent), so some clients see them, until it too is ejected.
    fixture.backend(&erroring).set_mode(Mode::Errors {
        status: 503,
        rate: 1.0,
    });
    let mut unavailable = 0;
    // Tenants whose other member is healthy (the killed one is ejected).
    let others: Vec<String> = on(&erroring)
        .into_iter()
        .filter(|t| !fixture.subset_ids(t).contains(&killed))
        .collect();
    assert!(
        !others.is_empty(),
        "the test needs other tenants on {erroring}"
    );
    for (sent, tenant) in others.iter().cycle().enumerate() {
        if shard_state(&erroring) == Availability::Ejected {
            break;
        }
        assert!(sent < 500, "{erroring} was never ejected");
        let (status, _) = fixture.get(tenant, "/").await;
        credentialed += 1;
        assert!(
            status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
            "{tenant}: {status}"
        );
        unavailable += usize::from(status == StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(
        unavailable, 3,
        "each of the 3 ejecting failures reached a client"
    );
    // The victim's whole subset is out: its request spills.
    assert_eq!(fixture.get(victim, "/").await.0, StatusCode::OK);
    credentialed += 1;
    // Responses are complete; wait for the in-flight counts to drain.
    assert!(
        eventually(Duration::from_secs(5), || gateway
            .snapshot()
            .all_shards()
            .all(|s| s.in_flight() == 0))
        .await
    );

    let (status, headers, body) = fixture.admin("GET", "/metrics", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{headers:?}"
    );
    let text = String::from_utf8(body.to_vec()).unwrap();
    let metrics = parse(&text);
    let cell = [("cell", "default")];
    let shard_ids: Vec<String> = fixture.backends.iter().map(|b| b.id().to_owned()).collect();

    // Every family, under the name the encoder gives it.
    for (family, kind) in [
        ("shuffle_requests", "counter"),
        ("shuffle_attempts", "counter"),
        ("shuffle_failovers", "counter"),
        ("shuffle_spills", "counter"),
        ("shuffle_retry_budget_exhausted", "counter"),
        ("shuffle_ejections", "counter"),
        ("shuffle_request_duration_seconds", "histogram"),
        ("shuffle_attempt_duration_seconds", "histogram"),
        ("shuffle_shard_healthy", "gauge"),
        ("shuffle_shard_ejected", "gauge"),
        ("shuffle_shard_in_flight", "gauge"),
        ("shuffle_shard_utilization_cv", "gauge"),
        ("shuffle_tenants_availability_at_most", "gauge"),
        ("shuffle_tenants_below_availability", "gauge"),
        ("shuffle_blast_fully_down_tenants", "gauge"),
        ("shuffle_blast_degraded_tenants", "gauge"),
        ("shuffle_stream_timeouts", "counter"),
    ] {
        assert_eq!(metrics.kind(family), Some(kind), "{family}\n{text}");
    }
    // Nothing stalled: both sides' series exist, at zero.
    for side in ["backend", "client"] {
        assert_eq!(
            metrics.value("shuffle_stream_timeouts_total", &[("side", side)]),
            0.0,
            "{side}"
        );
    }

    // Requests by outcome: every good GET, the 401 (no cell: no tenant),
    // the 503s.
    let ok = metrics.value(
        "shuffle_requests_total",
        &[("cell", "default"), ("outcome", "ok")],
    );
    assert_eq!(ok, credentialed as f64 - 3.0, "all but the 3 503s");
    assert_eq!(
        metrics.value(
            "shuffle_requests_total",
            &[("cell", ""), ("outcome", "unauthorized")]
        ),
        1.0
    );
    assert_eq!(
        metrics.value(
            "shuffle_requests_total",
            &[("cell", "default"), ("outcome", "unavailable")]
        ),
        3.0
    );
    // Every request the test sent is counted once: the credentialed ones
    // in their cell, the 401 in none.
    let requests = metrics.sum("shuffle_requests_total", &cell);
    assert_eq!(requests, credentialed as f64);
    assert_eq!(
        metrics.sum("shuffle_requests_total", &[]),
        credentialed as f64 + 1.0
    );

    // Attempts by shard and outcome.
    assert_eq!(
        metrics.value(
            "shuffle_attempts_total",
            &[
                ("cell", "default"),
                ("shard", &killed),
                ("outcome", "connect")
            ]
        ),
        3.0
    );
    assert_eq!(
        metrics.value(
            "shuffle_attempts_total",
            &[
                ("cell", "default"),
                ("shard", &erroring),
                ("outcome", "status")
            ]
        ),
        3.0
    );
    let attempts = metrics.sum("shuffle_attempts_total", &cell);
    let backend_attempts: u64 = gateway
        .snapshot()
        .all_shards()
        .map(|s| s.attempts.load(Ordering::Relaxed))
        .sum();
    assert_eq!(attempts, backend_attempts as f64);
    // Every attempt but a refused connection reached a backend, which saw
    // it (health checks are not on the data path the backends count).
    let reached = attempts
        - metrics.sum(
            "shuffle_attempts_total",
            &[("cell", "default"), ("outcome", "connect")],
        );
    assert_eq!(reached, fixture.total_backend_requests() as f64);
    for sample in metrics.series("shuffle_attempts_total") {
        assert!(shard_ids.contains(&sample.labels["shard"]), "{sample:?}");
        assert!(
            ["ok", "connect", "timeout", "reset", "status"]
                .contains(&sample.labels["outcome"].as_str()),
            "{sample:?}"
        );
    }

    // Failovers: retries (each refused connection moved the request on)
    // and reroutes (first attempts steered around a member that was out);
    // the spent budget (each 503 that could not be retried), the spill,
    // ejections.
    let retries = metrics.value(
        "shuffle_failovers_total",
        &[("cell", "default"), ("kind", "retry")],
    );
    assert_eq!(retries, 3.0, "one retry per refused connection");
    // Each request's attempts after its first are its retries (nothing
    // here ran into the deadline, and every request made an attempt).
    assert_eq!(attempts, requests + retries);
    let reroutes = metrics.value(
        "shuffle_failovers_total",
        &[("cell", "default"), ("kind", "reroute")],
    );
    assert!(
        reroutes >= 1.0,
        "the victim's request went around its members"
    );
    assert_eq!(
        metrics.value("shuffle_retry_budget_exhausted_total", &cell),
        3.0
    );
    assert_eq!(metrics.value("shuffle_spills_total", &cell), 1.0);
    for shard in [&killed, &erroring] {
        assert_eq!(
            metrics.value(
                "shuffle_ejections_total",
                &[
                    ("cell", "default"),
                    ("shard", shard),
                    ("reason", "consecutive_failures")
                ]
            ),
            1.0,
            "{shard}"
        );
    }
    assert_eq!(metrics.sum("shuffle_ejections_total", &[]), 2.0);

    // Per-shard gauges: every shard has one of each.
    for id in &shard_ids {
        let labels = [("cell", "default"), ("shard", id.as_str())];
        let out = *id == killed || *id == erroring;
        assert_eq!(
            metrics.value("shuffle_shard_healthy", &labels),
            if out { 0.0 } else { 1.0 },
            "{id}"
        );
        assert_eq!(
            metrics.value("shuffle_shard_ejected", &labels),
            if out { 1.0 } else { 0.0 },
            "{id}"
        );
        assert_eq!(
            metrics.value("shuffle_shard_in_flight", &labels),
            0.0,
            "{id}"
        );
    }

    // Latency histograms: one observation per request, one per attempt.
    let observed = check_histogram(&metrics, "shuffle_request_duration_seconds", &cell);
    assert_eq!(observed, requests);
    for id in &shard_ids {
        let labels = [("cell", "default"), ("shard", id.as_str())];
        let observed = check_histogram(&metrics, "shuffle_attempt_duration_seconds", &labels);
        assert_eq!(
            observed,
            metrics.sum("shuffle_attempts_total", &labels),
            "{id}"
        );
    }

    // Utilization variance: the admin API's per-shard rates give the same
    // coefficient of variation; two ejected shards make it clearly positive.
    let shards = fixture.admin_json("GET", "/admin/shards").await;
    let rates: Vec<f64> = shards["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["request_rate"].as_f64().unwrap())
        .collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let cv =
        (rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64).sqrt() / mean;
    let exported = metrics.value("shuffle_shard_utilization_cv", &cell);
    assert!(
        (exported - cv).abs() < 1e-9,
        "exported {exported}, from rates {cv}"
    );
    assert!(exported > 0.0);

    // Tenant availability, from the admin API's tallies of every tenant.
    let worst = fixture.admin_json("GET", "/admin/tenants?worst=1000").await;
    let ratios: Vec<f64> = worst["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["availability"].as_f64().unwrap())
        .collect();
    assert_eq!(ratios.len(), tenants.len(), "every tenant had traffic");
    assert!(ratios.iter().any(|&r| r < 0.99), "some tenant saw a 503");
    let mut previous = 0.0;
    for le in [
        "0", "0.5", "0.9", "0.95", "0.99", "0.995", "0.999", "0.9999", "1",
    ] {
        let bound: f64 = le.parse().unwrap();
        let value = metrics.value("shuffle_tenants_availability_at_most", &[("le", le)]);
        assert_eq!(
            value,
            ratios.iter().filter(|&&r| r <= bound).count() as f64,
            "le = {le}"
        );
        assert!(value >= previous, "not cumulative at le = {le}");
        previous = value;
    }
    assert_eq!(previous, tenants.len() as f64);
    for threshold in ["0.99", "0.999"] {
        let bound: f64 = threshold.parse().unwrap();
        let value = metrics.value(
            "shuffle_tenants_below_availability",
            &[("threshold", threshold)],
        );
        assert_eq!(value, ratios.iter().filter(|&&r| r < bound).count() as f64);
        assert!(value > 0.0);
    }

    // The live blast radius of the two ejected shards, counted by hand.
    let out: BTreeSet<String> = [killed.clone(), erroring.clone()].into();
    let (mut fully_down, mut degraded) = (0.0, 0.0);
    for tenant in &tenants {
        let members: BTreeSet<String> = fixture.subset_ids(tenant).into_iter().collect();
        fully_down += f64::from(u8::from(members.is_subset(&out)));
        degraded += f64::from(u8::from(!members.is_disjoint(&out)));
    }
    assert!(fully_down >= 1.0, "the victim is fully down");
    assert_eq!(
        metrics.value("shuffle_blast_fully_down_tenants", &cell),
        fully_down
    );
    assert_eq!(
        metrics.value("shuffle_blast_degraded_tenants", &cell),
        degraded
    );

    // Nothing secret, and nothing per tenant.
    for (tenant, key) in &fixture.tenants {
        assert!(!text.contains(key.as_str()), "an API key is in the metrics");
        assert!(
            !text.contains(&format!("\"{tenant}\"")),
            "{tenant} has a series"
        );
    }
    assert!(!text.contains(TOKEN), "the admin token is in the metrics");
    let key = std::fs::read(fixture.dir.path().join("placement.key")).unwrap();
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        !text.contains(&hex),
        "the placement key (hex) is in the metrics"
    );
    assert!(
        !text.contains(String::from_utf8_lossy(&key[..8]).as_ref()),
        "placement key bytes are in the metrics"
    );
    for sample in &metrics.samples {
        for label in sample.labels.keys() {
            assert!(
                [
                    "cell",
                    "shard",
                    "outcome",
                    "reason",
                    "kind",
                    "le",
                    "threshold",
                    "side",
                    "limit",
                    "version",
                    "profile",
                    "result",
                    "listener",
                    "direction",
                    "operation",
                    // The standing model's failure sizes (1, 2 and at most
                    // one more), and a discovered cell's shard states.
                    "failures",
                    "state"
                ]
                .contains(&label.as_str()),
                "unexpected label {label} on {}",
                sample.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_be_opened_without_the_token_and_nothing_else_is() {
    let fixture = Fixture::start(Options {
        admin: "metrics_without_token = true\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    assert_eq!(fixture.get("tenant-1", "/").await.0, StatusCode::OK);
    let (status, _, body) = fixture.admin("GET", "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = parse(std::str::from_utf8(&body).unwrap());
    assert!(
        metrics.value(
            "shuffle_requests_total",
            &[("cell", "default"), ("outcome", "ok")]
        ) >= 1.0
    );
    for (method, path) in [
        ("GET", "/admin/shards"),
        ("GET", "/"),
        ("POST", "/admin/reload"),
    ] {
        let (status, _, _) = fixture.admin(method, path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_removed_by_a_reload_stops_being_reported() {
    let fixture = Fixture::start(Options {
        shards: 4,
        admin: "metrics_without_token = true\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let scrape = async || {
        let (status, _, body) = fixture.admin("GET", "/metrics", None).await;
        assert_eq!(status, StatusCode::OK);
        parse(std::str::from_utf8(&body).unwrap())
    };
    let shards = |metrics: &Exposition, family: &str| -> BTreeSet<String> {
        metrics
            .series(family)
            .iter()
            .map(|s| s.labels["shard"].clone())
            .collect()
    };
    let all: BTreeSet<String> = ["s0", "s1", "s2", "s3"].map(String::from).into();
    let before = scrape().await;
    for family in [
        "shuffle_shard_healthy",
        "shuffle_shard_ejected",
        "shuffle_shard_in_flight",
    ] {
        assert_eq!(shards(&before, family), all, "{family}");
    }

    // Decommission s3 (a migration: its tenants move).
    let path = fixture.config_path();
    let config = std::fs::read_to_string(&path).unwrap();
    let line = config
        .lines()
        .find(|l| l.contains("id = \"s3\""))
        .unwrap()
        .to_owned();
    std::fs::write(&path, config.replace(&format!("{line}\n"), "")).unwrap();
    let (status, _, body) = fixture
        .admin("POST", "/admin/reload?allow_migration=true", Some(TOKEN))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));

    let after = scrape().await;
    let remaining: BTreeSet<String> = ["s0", "s1", "s2"].map(String::from).into();
    for family in [
        "shuffle_shard_healthy",
        "shuffle_shard_ejected",
        "shuffle_shard_in_flight",
    ] {
        assert_eq!(shards(&after, family), remaining, "{family}");
    }
    assert_eq!(after.series("shuffle_blast_degraded_tenants").len(), 1);
}

/// Runs promtool with `args`, `input` on stdin: `Err` with what it said
/// when it fails or (for `check metrics`) complains. `None` when promtool
/// is missing (CI fails instead: `testkit::skip`).
fn promtool(args: &[&str], input: &str) -> Option<Result<(), String>> {
    use std::io::Write;
    let spawned = std::process::Command::new("promtool")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            testkit::skip::missing("promtool", "apt-get install prometheus");
            return None;
        }
        Err(error) => panic!("cannot run promtool: {error}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(if output.status.success() {
        Ok(())
    } else {
        Err(format!("{}\n{said}", output.status))
    })
}

/// `promtool check metrics` (Prometheus's classic text parser and its
/// lints) over a classic exposition.
fn promtool_check_classic(text: &str) -> Option<Result<(), String>> {
    let checked = promtool(&["check", "metrics"], text)?;
    // The one lint allowed, by name: the availability distribution is a
    // histogram-shaped gauge whose `le` bounds the dashboards and alert
    // rules select on (`{le="0"}`: fully down). Anything else fails.
    let allowed =
        "shuffle_tenants_availability_at_most non-histogram metrics should not have \"le\" label";
    Some(checked.or_else(|said| {
        let (status, said) = said.split_once('\n').unwrap_or(("", &said));
        let rest: Vec<&str> = said
            .lines()
            .filter(|line| !line.trim().is_empty() && line.trim() != allowed)
            .collect();
        // Exit status 3 is lint problems only (1 would be a parse error).
        if status.ends_with("exit status: 3") && rest.is_empty() {
            Ok(())
        } else {
            Err(format!("{status}\n{said}"))
        }
    }))
}

/// Prometheus's OpenMetrics parser over an OpenMetrics exposition. promtool
/// 2.42's `check metrics` reads only the classic format (it takes a
/// counter's `_total` samples for another, undeclared family), so the
/// exposition goes through `promtool tsdb create-blocks-from openmetrics`,
/// which parses it as OpenMetrics, each sample given a timestamp (the
/// importer needs one) and `# EOF` required.
fn promtool_check_openmetrics(text: &str) -> Option<Result<(), String>> {
    let dir = tempfile::tempdir().unwrap();
    let stamped: String = text
        .lines()
        .map(|line| {
            if line.starts_with('#') {
                format!("{line}\n")
            } else {
                format!("{line} 1700000000\n")
            }
        })
        .collect();
    let input = dir.path().join("metrics.om");
    std::fs::write(&input, stamped).unwrap();
    let out = dir.path().join("blocks");
    promtool(
        &[
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        "",
    )
}

/// A scrape in the format `accept` asks for: its content type and text.
async fn scrape_as(fixture: &Fixture, accept: Option<&str>) -> (String, String) {
    let mut request = http::Request::builder()
        .uri(format!("http://{}/metrics", fixture.running.admin_addr))
        .header("authorization", format!("Bearer {TOKEN}"));
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = fixture
        .client
        .request(request.body(http_body_util::Full::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (content_type, String::from_utf8(body.to_vec()).unwrap())
}

/// The classic text format, read the way Prometheus's classic parser
/// reads it: every sample belongs to the family its `# TYPE` names
/// exactly (no `_total` stripped), histograms' `_bucket`, `_sum` and
/// `_count` aside. Returns family → (type, sample count).
fn classic_families(text: &str) -> std::collections::BTreeMap<String, (String, usize)> {
    let mut families = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.insert(name.to_owned(), (kind.to_owned(), 0));
        } else if !line.starts_with('#') && !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|base| families.get(*base).is_some_and(|(k, _)| k == "histogram"))
                .unwrap_or(name);
            let entry = families
                .get_mut(family)
                .unwrap_or_else(|| panic!("{name}: no # TYPE names it in classic text"));
            entry.1 += 1;
        }
    }
    families
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_speak_classic_text_and_openmetrics_and_start_at_zero() {
    let fixture = Fixture::start(Options {
        shards: 4,
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let cells = fixture.config().cells().len();
    assert_eq!(cells, 1);

    // Before any request: every known counter series is there, at 0.
    let (content_type, fresh) = scrape_as(&fixture, None).await;
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let fresh = parse(&fresh);
    let cell = [("cell", "default")];
    for family in [
        "shuffle_spills_total",
        "shuffle_retry_budget_exhausted_total",
    ] {
        assert_eq!(fresh.value(family, &cell), 0.0, "{family}");
    }
    for shard in ["s0", "s1", "s2", "s3"] {
        let labels = [
            ("cell", "default"),
            ("shard", shard),
            ("reason", "consecutive_failures"),
        ];
        assert_eq!(fresh.value("shuffle_ejections_total", &labels), 0.0);
        assert_eq!(
            fresh.value(
                "shuffle_attempts_total",
                &[("cell", "default"), ("shard", shard), ("outcome", "ok")]
            ),
            0.0
        );
    }
    for kind in ["retry", "reroute"] {
        assert_eq!(
            fresh.value(
                "shuffle_failovers_total",
                &[("cell", "default"), ("kind", kind)]
            ),
            0.0
        );
    }
    for result in ["success", "failure"] {
        assert_eq!(
            fresh.value("shuffle_reloads_total", &[("result", result)]),
            0.0
        );
    }
    for outcome in ["ok", "failed", "timeout"] {
        assert_eq!(
            fresh.value("shuffle_tls_handshakes_total", &[("outcome", outcome)]),
            0.0
        );
    }
    let build = fresh.series("shuffle_build_info");
    assert_eq!(build.len(), 1);
    assert_eq!(build[0].value, 1.0);
    assert_eq!(build[0].labels["version"], env!("CARGO_PKG_VERSION"));
    let started_at = fresh.value("shuffle_last_reload_success_timestamp_seconds", &[]);
    assert!(
        (started_at - crate::util::unix_now() as f64).abs() < 600.0,
        "{started_at}"
    );
    assert_eq!(fresh.value("shuffle_last_reload_successful", &[]), 1.0);

    // Traffic on one keep-alive connection, which then closes: its
    // connection and bytes are counted.
    let (tenant, key) = fixture.tenants[0].clone();
    let request = crate::util::raw(
        "GET /hello HTTP/1.1",
        &[
            "host: gateway",
            &format!("x-api-key: {key}"),
            "connection: close",
        ],
        b"",
    );
    let answer = crate::util::raw_request(fixture.running.addr, &request).await;
    assert_eq!(answer.status, 200, "{tenant}");
    let sent = request.len() as f64;
    let mut counted = None;
    assert!(
        eventually(Duration::from_secs(5), || {
            // Polled through the registry: the scrape itself is async.
            let text = fixture.running.gateway.metrics.encode();
            let metrics = parse(&text);
            let bytes_in = metrics.value("shuffle_client_bytes_total", &[("direction", "in")]);
            let open = metrics.value("shuffle_client_connections_open", &[("listener", "plain")]);
            counted = Some((
                bytes_in,
                metrics.value("shuffle_client_bytes_total", &[("direction", "out")]),
                metrics.value("shuffle_client_connections_total", &[("listener", "plain")]),
            ));
            bytes_in >= sent && open == 0.0
        })
        .await,
        "{counted:?}"
    );
    let (bytes_in, bytes_out, accepted) = counted.unwrap();
    assert_eq!(bytes_in, sent);
    assert!(
        bytes_out >= (answer.head.len() + answer.body.len()) as f64,
        "{bytes_out}"
    );
    assert!(accepted >= 1.0);

    // A refused reload and a good one are counted.
    let path = fixture.config_path();
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, "not toml [").unwrap();
    let (status, _, _) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.value("shuffle_reloads_total", &[("result", "failure")]),
        1.0
    );
    assert_eq!(metrics.value("shuffle_last_reload_successful", &[]), 0.0);
    std::fs::write(&path, good).unwrap();
    let (status, _, _) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.value("shuffle_reloads_total", &[("result", "success")]),
        1.0
    );
    assert_eq!(metrics.value("shuffle_last_reload_successful", &[]), 1.0);
    assert!(metrics.value("shuffle_last_reload_success_timestamp_seconds", &[]) >= started_at);

    // What Prometheus sends asks for OpenMetrics first.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (content_type, openmetrics) = scrape_as(&fixture, Some(prometheus)).await;
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(openmetrics.ends_with("# EOF\n"));
    // A classic scraper's Accept gets the classic text format.
    for accept in [
        "text/plain;version=0.0.4",
        "text/plain;version=0.0.4;q=0.9,*/*;q=0.1",
    ] {
        let (content_type, classic) = scrape_as(&fixture, Some(accept)).await;
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        assert!(!classic.contains("# EOF"));
        // The classic parser's reading: each counter's samples belong to
        // the family its # TYPE names, so the main counters have samples.
        let families = classic_families(&classic);
        for family in [
            "shuffle_requests_total",
            "shuffle_attempts_total",
            "shuffle_failovers_total",
            "shuffle_ejections_total",
            "shuffle_client_bytes_total",
        ] {
            let (kind, samples) = &families[family];
            assert_eq!(kind, "counter", "{family}");
            assert!(*samples > 0, "{family} has no samples");
        }
        assert!(!families.contains_key("shuffle_requests"));
        // The same samples as OpenMetrics, line for line.
        let samples = |text: &str| -> BTreeSet<String> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .map(|l| l.split(' ').next().unwrap().to_owned())
                .collect()
        };
        assert_eq!(samples(&classic), samples(&openmetrics));
        if let Some(checked) = promtool_check_classic(&classic) {
            checked.unwrap_or_else(|problems| panic!("classic text: {problems}\n{classic}"));
        }
    }
    // Prometheus's OpenMetrics parser reads the OpenMetrics answer whole;
    // and it is no classic exposition (what the issue saw: promtool's
    // classic reading finds the counters' samples outside their families).
    if let Some(checked) = promtool_check_classic(&openmetrics) {
        assert!(checked.is_err(), "OpenMetrics read as classic text passed");
    }
    if let Some(checked) = promtool_check_openmetrics(&openmetrics) {
        checked.unwrap_or_else(|problems| panic!("OpenMetrics: {problems}\n{openmetrics}"));
    }
}
