//! The admin API on its own listener: the bearer token guards every route
//! of the router, walked from the router's own table (`ops::admin::ROUTES`)
//! rather than a list kept here, and only the documented ones open without
//! it (an unconfigured token shuts the rest); each endpoint answers the
//! documented JSON; fail, restore and drain steer real traffic; the live
//! blast radius equals the analyser's for the same failed shards; and the
//! data listener never reveals which shards serve a tenant.

use std::collections::BTreeSet;
use testkit::json::keys;

use analysis::{BlastModel, Placements, Population};
use http::StatusCode;
use placement::ShardIndex;
use serde_json::Value;

use gateway::ops::admin::{Access, ROUTES};

use crate::util::{Fixture, Options};

pub const TOKEN: &str = "admin-test-token-5f0c2a9e71d84b36";

/// Options with the admin token set and health checks that run once at
/// start, so only the operator (and passive ejection) moves shards.
pub fn options() -> Options {
    Options {
        admin_token: Some(TOKEN.into()),
        health: "interval_ms = 60000\ntimeout_ms = 2000\n".into(),
        ..Options::default()
    }
}

/// Whether the documentation opens a route without a token: `/readyz`
/// always, `/metrics` with `admin.metrics_without_token` and the status
/// page with `admin.status_page_without_token`. Kept by hand on purpose:
/// it is what the table in `ops::admin` is checked against.
fn documented_open(method: &str, pattern: &str, metrics_open: bool, page_open: bool) -> bool {
    match (method, pattern) {
        ("GET", "/readyz") => true,
        ("GET", "/metrics") => metrics_open,
        ("GET", "/") => page_open,
        _ => false,
    }
}

/// Every route of the admin router, read off its table, as requests that
/// reach it: `(method, pattern, path)`, with sample values for the path
/// parameters that exist in the fixture (a shard, a tenant, each shard
/// action with `restore` last, so a walk with the token leaves every shard
/// as it found it), each path once bare and once with a query string.
fn admin_requests(fixture: &Fixture) -> Vec<(String, &'static str, String)> {
    let shard = fixture
        .running
        .gateway
        .snapshot()
        .all_shards()
        .next()
        .expect("a shard")
        .id
        .clone();
    let tenant = fixture.tenants[0].0.clone();
    let mut requests = Vec::new();
    for route in ROUTES {
        let mut paths = vec![String::new()];
        let mut previous = "";
        for segment in route.path.split('/').skip(1) {
            let samples: Vec<&str> = match segment {
                "{id}" if previous == "shards" => vec![&shard],
                "{id}" if previous == "tenants" => vec![&tenant],
                "{action}" => vec!["fail", "drain", "restore"],
                _ if segment.starts_with('{') => panic!(
                    "no sample value for {segment} in {}: add one to admin_requests",
                    route.path
                ),
                _ => vec![segment],
            };
            paths = paths
                .iter()
                .flat_map(|path| samples.iter().map(move |s| format!("{path}/{s}")))
                .collect();
            previous = segment;
        }
        for path in paths {
            let query = format!("{path}?cell=default&worst=5&allow_migration=true");
            for path in [path, query] {
                requests.push((route.method.to_string(), route.path, path));
            }
        }
    }
    assert_eq!(
        requests
            .iter()
            .map(|(method, pattern, _)| (method, pattern))
            .collect::<BTreeSet<_>>()
            .len(),
        ROUTES.len(),
        "every route is walked"
    );
    requests
}

/// Sends `method path` to the admin listener with these header fields.
async fn to_admin(
    fixture: &Fixture,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> (StatusCode, http::HeaderMap, bytes::Bytes) {
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| ("authorization", a))
        .into_iter()
        .collect();
    crate::util::request_to(
        &fixture.client,
        fixture.running.admin_addr,
        method,
        path,
        &headers,
    )
    .await
}

/// No shard is failed or drained.
fn all_shards_untouched(fixture: &Fixture, what: &str) {
    let snapshot = fixture.running.gateway.snapshot();
    for shard in snapshot.all_shards() {
        let health = shard.health.lock().unwrap();
        assert!(!health.failed && !health.drained, "{what}: {}", shard.id);
    }
}

fn json(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(body)))
}

fn assert_unauthorized(status: StatusCode, headers: &http::HeaderMap, body: &[u8], what: &str) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
    assert_eq!(headers["www-authenticate"], "Bearer", "{what}");
    let error = json(body);
    assert_eq!(error["status"], 401, "{what}");
    assert!(
        error["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_needs_the_right_token() {
    let fixture = Fixture::start(options()).await;
    let api_key = fixture.api_key("tenant-1").to_owned();
    let basic = format!("Basic {TOKEN}");
    let longer = format!("Bearer {TOKEN}x");
    let shorter = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let tenant_key = format!("Bearer {api_key}");
    let wrong: [Option<&str>; 7] = [
        None,
        Some("Bearer wrong-token"),
        Some(TOKEN),
        Some(&basic),
        Some(&longer),
        Some(&shorter),
        Some(&tenant_key),
    ];
    let requests = admin_requests(&fixture);
    for (method, pattern, path) in &requests {
        let open = documented_open(method, pattern, false, false);
        for authorization in wrong {
            let (status, response_headers, body) =
                to_admin(&fixture, method, path, authorization).await;
            let what = format!("{method} {path} with {authorization:?}");
            if open {
                assert_eq!(status, StatusCode::OK, "{what}: documented as open");
            } else {
                assert_unauthorized(status, &response_headers, &body, &what);
            }
            let text = String::from_utf8_lossy(&body);
            assert!(!text.contains(TOKEN) && !text.contains(&api_key));
        }
    }
    // Nothing a refused call asked for happened.
    all_shards_untouched(&fixture, "after the refused calls");
    // With the token every route answers (the shard actions end on
    // `restore`, so the shards are as they were).
    let bearer = format!("Bearer {TOKEN}");
    for (method, pattern, path) in &requests {
        let (status, _, body) = to_admin(&fixture, method, path, Some(&bearer)).await;
        // Tenants are written through the tenant store; with a tenants
        // file (this fixture) a write is refused, saying so.
        let tenant_write = *pattern == "/admin/tenants/{id}" && method != "GET";
        let text = String::from_utf8_lossy(&body);
        assert!(
            status.is_success()
                || (tenant_write
                    && status == StatusCode::CONFLICT
                    && text.contains("tenants_file")),
            "{method} {path} with the token: {status} {text}"
        );
    }
    all_shards_untouched(&fixture, "after the walk with the token");

    // With the token: 2xx, and the documented shape.
    assert_eq!(fixture.get("tenant-1", "/").await.0, StatusCode::OK);
    let (status, headers, body) = fixture.admin("GET", "/", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(String::from_utf8_lossy(&body).contains("<h2>Shards</h2>"));
    let (status, _, body) = fixture.admin("GET", "/metrics", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("# TYPE shuffle_requests counter"));

    let shards = fixture.admin_json("GET", "/admin/shards").await;
    let shards = shards["shards"].as_array().unwrap();
    assert_eq!(shards.len(), fixture.backends.len());
    for (shard, backend) in shards.iter().zip(&fixture.backends) {
        assert_eq!(
            keys(shard),
            BTreeSet::from([
                "cell",
                "id",
                "zone",
                "health",
                "active",
                "last_check",
                "last_check_age_ms",
                "ejected",
                "ejections",
                "failed",
                "drained",
                "marked_by",
                "marked_at_unix",
                "in_flight",
                "request_rate",
                "url",
                "source",
                "known_since_unix",
                "missing",
                "missing_since_unix",
                "missing_why"
            ])
        );
        assert_eq!(shard["cell"], "default");
        // A written shard: its source is the configuration, and discovery
        // has nothing to say of it.
        assert_eq!(shard["source"], "config");
        assert_eq!(shard["url"], backend.url() + "/");
        assert_eq!(shard["missing"], false);
        assert!(shard["known_since_unix"].is_null() && shard["missing_why"].is_null());
        assert_eq!(shard["id"], backend.id());
        assert!(shard["zone"].is_string());
        assert_eq!(shard["health"], "up");
        assert!(
            ["presumed", "healthy"].contains(&shard["active"].as_str().unwrap()),
            "{shard}"
        );
        assert!(
            shard["last_check"].is_null() || shard["last_check"] == "pass",
            "{shard}"
        );
        // Its age comes with the result, or neither does.
        assert_eq!(
            shard["last_check"].is_null(),
            shard["last_check_age_ms"].is_null(),
            "{shard}"
        );
        assert_eq!(shard["ejected"], false);
        assert_eq!(shard["failed"], false);
        assert_eq!(shard["drained"], false);
        assert!(shard["in_flight"].is_u64());
        assert!(shard["request_rate"].as_f64().unwrap() >= 0.0);
    }
    assert!(
        shards
            .iter()
            .any(|s| s["request_rate"].as_f64().unwrap() > 0.0),
        "tenant-1's request shows in a rate"
    );

    let tenant = fixture.admin_json("GET", "/admin/tenants/tenant-1").await;
    assert_eq!(
        keys(&tenant),
        BTreeSet::from([
            "tenant",
            "cell",
            "subset",
            "members",
            "lookback_members",
            "lookback_until_unix",
            "lookback_seconds_left",
            "availability"
        ])
    );
    assert_eq!(tenant["tenant"], "tenant-1");
    assert_eq!(tenant["cell"], "default");
    // No lookback window without reload.lookback_seconds.
    assert_eq!(tenant["lookback_members"], serde_json::json!([]));
    assert!(tenant["lookback_until_unix"].is_null(), "{tenant}");
    let subset: Vec<String> = tenant["subset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(subset, fixture.subset_ids("tenant-1"));
    let members = tenant["members"].as_array().unwrap();
    assert_eq!(members.len(), 2);
    for (member, id) in members.iter().zip(&subset) {
        assert_eq!(keys(member), BTreeSet::from(["id", "zone", "health"]));
        assert_eq!(member["id"], id.as_str());
        assert_eq!(member["health"], "up");
    }
    let availability = &tenant["availability"];
    assert_eq!(availability["ok"], 1);
    assert_eq!(availability["total"], 1);
    assert_eq!(availability["ratio"], 1.0);
    assert_eq!(availability["window_seconds"], 60);
    // A tenant with no traffic yet has no ratio.
    let quiet = fixture.admin_json("GET", "/admin/tenants/tenant-2").await;
    assert_eq!(quiet["availability"]["total"], 0);
    assert!(quiet["availability"]["ratio"].is_null());

    for tenant in ["tenant-2", "tenant-3", "tenant-4"] {
        assert_eq!(fixture.get(tenant, "/").await.0, StatusCode::OK);
    }
    let worst = fixture.admin_json("GET", "/admin/tenants?worst=3").await;
    assert_eq!(worst["window_seconds"], 60);
    let rows = worst["tenants"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        assert_eq!(
            keys(row),
            BTreeSet::from(["tenant", "ok", "total", "availability"])
        );
        assert_eq!(row["availability"], 1.0);
    }
    let all = fixture.admin_json("GET", "/admin/tenants?worst=100").await;
    assert_eq!(
        all["tenants"].as_array().unwrap().len(),
        4,
        "only tenants with traffic"
    );

    // Without [fleet], the fleet view says so.
    assert_eq!(
        fixture.admin_json("GET", "/admin/fleet").await,
        serde_json::json!({ "fleet": null })
    );
    let blast = fixture.admin_json("GET", "/admin/blast").await;
    let cells = blast["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1);
    assert_eq!(
        keys(&cells[0]),
        BTreeSet::from([
            "cell",
            "unavailable",
            "tenants",
            "fully_down",
            "degraded",
            "fully_down_tenants"
        ])
    );
    assert_eq!(cells[0]["cell"], "default");
    assert_eq!(cells[0]["tenants"], 40);
    assert_eq!(cells[0]["fully_down"], 0);
    assert_eq!(cells[0]["degraded"], 0);
    assert_eq!(cells[0]["unavailable"], serde_json::json!([]));

    for (action, health, failed, drained) in [
        ("fail", "failed", true, false),
        ("restore", "up", false, false),
        ("drain", "drained", false, true),
        ("restore", "up", false, false),
    ] {
        let answer = fixture
            .admin_json("POST", &format!("/admin/shards/s1/{action}"))
            .await;
        let shard = &answer["shard"];
        assert_eq!(shard["id"], "s1", "{action}");
        assert_eq!(shard["health"], health, "{action}");
        assert_eq!(shard["failed"], failed, "{action}");
        assert_eq!(shard["drained"], drained, "{action}");
    }

    let reload = fixture.admin_json("POST", "/admin/reload").await;
    assert_eq!(
        reload,
        serde_json::json!({ "reloaded": true, "changed": 0, "tenants": 40, "members_gained": 0, "members_lost": 0 })
    );

    // What does not exist, and the wrong method.
    for (method, path, expected) in [
        ("POST", "/admin/shards/s99/fail", StatusCode::NOT_FOUND),
        ("GET", "/admin/tenants/nobody", StatusCode::NOT_FOUND),
        ("GET", "/admin/reload", StatusCode::METHOD_NOT_ALLOWED),
        ("POST", "/admin/shards", StatusCode::METHOD_NOT_ALLOWED),
        ("GET", "/admin/nothing-here", StatusCode::NOT_FOUND),
    ] {
        let (status, _, _) = fixture.admin(method, path, Some(TOKEN)).await;
        assert_eq!(status, expected, "{method} {path}");
    }
    // Without the token, an unknown tenant and a known one look the same.
    let (status, _, _) = fixture.admin("GET", "/admin/tenants/nobody", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_file_the_admin_api_stays_shut() {
    let fixture = Fixture::start(Options {
        health: "interval_ms = 60000\ntimeout_ms = 2000\n".into(),
        ..Options::default()
    })
    .await;
    let bearer = format!("Bearer {TOKEN}");
    for (method, pattern, path) in admin_requests(&fixture) {
        for authorization in [None, Some(bearer.as_str())] {
            let (status, response_headers, body) =
                to_admin(&fixture, &method, &path, authorization).await;
            let what = format!("{method} {path} with {authorization:?}");
            if documented_open(&method, pattern, false, false) {
                assert_eq!(status, StatusCode::OK, "{what}: documented as open");
                continue;
            }
            assert_unauthorized(status, &response_headers, &body, &what);
            assert!(
                json(&body)["error"]
                    .as_str()
                    .unwrap()
                    .contains("admin.token_file"),
                "{what}: the error says how to open it"
            );
        }
    }
    all_shards_untouched(&fixture, "after the refused calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_metrics_or_the_status_page_opens_nothing_else() {
    for (metrics_open, page_open) in [(true, false), (false, true), (true, true)] {
        let mut admin = String::new();
        if metrics_open {
            admin.push_str("metrics_without_token = true\n");
        }
        if page_open {
            admin.push_str("status_page_without_token = true\n");
        }
        let fixture = Fixture::start(Options { admin, ..options() }).await;
        for (method, pattern, path) in admin_requests(&fixture) {
            let (status, headers, body) = to_admin(&fixture, &method, &path, None).await;
            let what = format!("{method} {path} with metrics {metrics_open}, page {page_open}");
            if documented_open(&method, pattern, metrics_open, page_open) {
                assert_eq!(status, StatusCode::OK, "{what}");
            } else {
                assert_unauthorized(status, &headers, &body, &what);
            }
        }
        all_shards_untouched(&fixture, "after the calls without a token");
    }
}

/// Every route's row says what the documentation says, so the walks above
/// and the table cannot drift apart unnoticed.
#[test]
fn the_route_table_matches_the_documented_access() {
    for route in ROUTES {
        let method = route.method.as_str();
        let expected = match (
            documented_open(method, route.path, false, false),
            documented_open(method, route.path, true, false),
            documented_open(method, route.path, false, true),
        ) {
            (true, _, _) => Access::Open,
            (false, true, false) => Access::TokenUnlessMetricsOpen,
            (false, false, true) => Access::TokenUnlessStatusPageOpen,
            (false, false, false) => Access::Token,
            _ => unreachable!("{method} {}", route.path),
        };
        assert_eq!(route.access, expected, "{method} {}", route.path);
    }
}

/// Which shard served a GET, from the test backend's answer.
async fn served_by(fixture: &Fixture, tenant: &str) -> String {
    let (status, body) = fixture.get(tenant, "/").await;
    assert_eq!(status, StatusCode::OK, "{tenant}");
    json(&body)["shard"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_restore_and_drain_steer_real_traffic() {
    let fixture = Fixture::start(options()).await;
    let victim = "s2";
    let on_victim: Vec<String> = fixture
        .tenants
        .iter()
        .map(|(t, _)| t.clone())
        .filter(|t| fixture.subset_ids(t).contains(&victim.to_owned()))
        .collect();
    assert!(on_victim.len() >= 3, "the test needs tenants on {victim}");

    // Before: the victim serves its tenants.
    let mut seen = BTreeSet::new();
    for tenant in &on_victim {
        for _ in 0..10 {
            seen.insert(served_by(&fixture, tenant).await);
        }
    }
    assert!(seen.contains(victim));

    // fail: its tenants fail over, and nothing reaches it.
    fixture
        .admin_json("POST", &format!("/admin/shards/{victim}/fail"))
        .await;
    let before = fixture.backend(victim).requests();
    for tenant in &on_victim {
        for _ in 0..10 {
            let shard = served_by(&fixture, tenant).await;
            assert_ne!(shard, victim, "{tenant} was served by a failed shard");
            assert!(
                fixture.subset_ids(tenant).contains(&shard),
                "{tenant} left its subset"
            );
        }
        let view = fixture
            .admin_json("GET", &format!("/admin/tenants/{tenant}"))
            .await;
        let member = view["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == victim)
            .unwrap()
            .clone();
        assert_eq!(member["health"], "failed");
    }
    assert_eq!(fixture.backend(victim).requests(), before);

    // restore: with the other members failed, only the victim can serve.
    fixture
        .admin_json("POST", &format!("/admin/shards/{victim}/restore"))
        .await;
    let tenant = &on_victim[0];
    let others: Vec<String> = fixture
        .subset_ids(tenant)
        .into_iter()
        .filter(|s| s != victim)
        .collect();
    for other in &others {
        fixture
            .admin_json("POST", &format!("/admin/shards/{other}/fail"))
            .await;
    }
    for _ in 0..5 {
        assert_eq!(served_by(&fixture, tenant).await, victim);
    }
    for other in &others {
        fixture
            .admin_json("POST", &format!("/admin/shards/{other}/restore"))
            .await;
    }

    // drain: no new requests reach it.
    fixture
        .admin_json("POST", &format!("/admin/shards/{victim}/drain"))
        .await;
    let before = fixture.backend(victim).requests();
    for tenant in &on_victim {
        for _ in 0..10 {
            assert_ne!(served_by(&fixture, tenant).await, victim);
        }
    }
    assert_eq!(fixture.backend(victim).requests(), before);
    let shards = fixture.admin_json("GET", "/admin/shards").await;
    let drained = shards["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == victim)
        .unwrap()
        .clone();
    assert_eq!(drained["health"], "drained");
    assert_eq!(drained["drained"], true);

    // restore undoes a drain too.
    fixture
        .admin_json("POST", &format!("/admin/shards/{victim}/restore"))
        .await;
    let mut seen = BTreeSet::new();
    for _ in 0..40 {
        seen.insert(served_by(&fixture, &on_victim[0]).await);
        if seen.contains(victim) {
            break;
        }
    }
    assert!(
        seen.contains(victim),
        "a restored shard takes traffic again"
    );
}

/// What the analyser says failing `failed` does to the fixture's tenants,
/// computed from scratch: the cell's placer from the snapshot, the tenants
/// of the configuration, the analysis crate's model.
pub fn analyser(fixture: &Fixture, failed: &[&str]) -> (u64, u64, Vec<String>) {
    let snapshot = fixture.running.gateway.snapshot();
    let cell = &snapshot.topology.cells()[0];
    let ids: Vec<String> = snapshot.tenants.iter().map(|t| t.id().to_owned()).collect();
    let population = Population::listed(ids.clone(), None);
    let placements = Placements::compute(&cell.placer, &population);
    let model = BlastModel::new(&placements).unwrap();
    let indices: Vec<ShardIndex> = failed
        .iter()
        .map(|id| {
            snapshot.config.cells()[0]
                .shards
                .iter()
                .position(|s| s.id == *id)
                .unwrap() as ShardIndex
        })
        .collect();
    let impact = model.impact(&indices).unwrap();
    let fully_down: Vec<String> = ids
        .iter()
        .enumerate()
        .filter(|(t, _)| placements.subset(*t).iter().all(|s| indices.contains(s)))
        .map(|(_, id)| id.clone())
        .collect();
    (impact.fully_down, impact.degraded, fully_down)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_blast_radius_matches_the_analyser() {
    let fixture = Fixture::start(Options {
        tenants: 300,
        ..options()
    })
    .await;
    // Two shards that are some tenant's whole subset, so failing both takes
    // at least that tenant fully down.
    let pair = fixture.subset_ids("tenant-0");
    let live = |blast: &Value| -> (u64, u64, Vec<String>, Vec<String>) {
        let cell = &blast["cells"][0];
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect()
        };
        (
            cell["fully_down"].as_u64().unwrap(),
            cell["degraded"].as_u64().unwrap(),
            strings(&cell["fully_down_tenants"]),
            strings(&cell["unavailable"]),
        )
    };

    let mut failed: Vec<&str> = Vec::new();
    for shard in &pair {
        fixture
            .admin_json("POST", &format!("/admin/shards/{shard}/fail"))
            .await;
        failed.push(shard);
        let (fully_down, degraded, down_list, unavailable) =
            live(&fixture.admin_json("GET", "/admin/blast").await);
        let (expected_down, expected_degraded, expected_list) = analyser(&fixture, &failed);
        let mut sorted = failed.clone();
        sorted.sort_unstable();
        let mut unavailable = unavailable;
        unavailable.sort_unstable();
        assert_eq!(unavailable, sorted);
        assert_eq!(
            (fully_down, degraded),
            (expected_down, expected_degraded),
            "failed {failed:?}"
        );
        assert_eq!(down_list, expected_list, "failed {failed:?}");
        assert_eq!(down_list.len() as u64, fully_down);
        // And by hand, from each tenant's subset as the gateway routes it.
        let out: BTreeSet<String> = failed.iter().map(|s| (*s).to_owned()).collect();
        let by_hand = fixture
            .tenants
            .iter()
            .filter(|(t, _)| {
                let members: BTreeSet<String> = fixture.subset_ids(t).into_iter().collect();
                !members.is_disjoint(&out)
            })
            .count() as u64;
        assert_eq!(degraded, by_hand);
    }
    let (fully_down, degraded, down_list, _) =
        live(&fixture.admin_json("GET", "/admin/blast").await);
    assert!(fully_down >= 1 && down_list.contains(&"tenant-0".to_owned()));
    assert!(degraded > fully_down);

    for shard in &pair {
        fixture
            .admin_json("POST", &format!("/admin/shards/{shard}/restore"))
            .await;
    }
    let (fully_down, degraded, down_list, unavailable) =
        live(&fixture.admin_json("GET", "/admin/blast").await);
    assert_eq!((fully_down, degraded), (0, 0));
    assert!(down_list.is_empty() && unavailable.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_listener_never_shows_placement() {
    let fixture = Fixture::start(options()).await;
    for path in [
        "/",
        "/admin/tenants/tenant-1",
        "/admin/shards",
        "/admin/blast",
        "/metrics",
    ] {
        // Without a credential: 401, and nothing about the gateway's state.
        let (status, headers, body) = fixture.send(None, "GET", path, &[], b"").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(headers.keys().all(|h| !h.as_str().starts_with("x-shuffle")));
        let text = String::from_utf8_lossy(&body);
        assert!(
            !text.contains("subset") && !text.contains("\"s1\""),
            "{path}: {text}"
        );

        // With a valid key: the backend's own answer, forwarded, and no
        // placement header on the way back.
        let (status, headers, body) = fixture.send(Some("tenant-1"), "GET", path, &[], b"").await;
        assert_eq!(status, StatusCode::OK, "{path}");
        for name in headers.keys() {
            assert!(!name.as_str().starts_with("x-shuffle"), "{path}: {name}");
        }
        let answer = json(&body);
        assert_eq!(
            answer["path"],
            path.split('?').next().unwrap(),
            "proxied, not answered"
        );
        assert_eq!(answer["tenant"], "tenant-1");
        assert!(answer.get("subset").is_none() && answer.get("members").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_needs_no_token_and_says_nothing_else() {
    let fixture = Fixture::start(options()).await;
    let (status, _, body) = fixture.admin("GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, b"ready\n".as_slice());
    // Everything else still wants the token.
    let (status, headers, body) = fixture.admin("GET", "/metrics", None).await;
    assert_unauthorized(status, &headers, &body, "/metrics");
}
