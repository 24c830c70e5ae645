//! Hot reload through `POST /admin/reload` (SIGHUP runs the same
//! `Gateway::reload`): a change that moves nobody applies at once and keeps
//! shard state and in-flight requests; a change that moves tenants is a
//! migration, refused with the share that would move unless allowed; an
//! invalid or missing file is refused; and whenever a reload is refused the
//! old configuration keeps serving exactly as before.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use backend::Mode;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer, Shard};
use serde_json::Value;

use crate::admin::{TOKEN, options};
use crate::util::{Fixture, eventually, random_bytes, sha256_hex};

/// Replaces `from` (which must occur exactly once) by `to` in a file.
fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from:?} in {}",
        path.display()
    );
    std::fs::write(path, text.replace(from, to)).unwrap();
}

async fn reload(fixture: &Fixture, query: &str) -> (StatusCode, Value) {
    let (status, _, body) = fixture
        .admin("POST", &format!("/admin/reload{query}"), Some(TOKEN))
        .await;
    (status, serde_json::from_slice(&body).unwrap())
}

/// Every tenant's subset as the running gateway routes it.
fn routing(fixture: &Fixture) -> Vec<(String, Vec<String>)> {
    fixture
        .tenants
        .iter()
        .map(|(t, _)| (t.clone(), fixture.subset_ids(t)))
        .collect()
}

/// The shards that actually served `tenant` over `count` GETs.
async fn served(fixture: &Fixture, tenant: &str, count: usize) -> BTreeSet<String> {
    for backend in &fixture.backends {
        backend.clear_seen();
    }
    for _ in 0..count {
        assert_eq!(fixture.get(tenant, "/").await.0, StatusCode::OK, "{tenant}");
    }
    fixture
        .backends
        .iter()
        .flat_map(|b| b.seen())
        .map(|seen| seen.header("x-shuffle-shard")[0].to_owned())
        .collect()
}

/// The old configuration is still the one serving: same placement, same
/// timeout, and traffic still lands inside the old subsets.
async fn still_serving(fixture: &Fixture, before: &[(String, Vec<String>)], per_try: Duration) {
    assert_eq!(routing(fixture), before);
    assert_eq!(fixture.config().routing().per_try_timeout, per_try);
    for (tenant, subset) in before.iter().take(5) {
        let served = served(fixture, tenant, 10).await;
        let subset: BTreeSet<String> = subset.iter().cloned().collect();
        assert!(
            served.is_subset(&subset),
            "{tenant}: {served:?} ⊄ {subset:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_moves_nobody_applies_and_keeps_state_and_requests() {
    let fixture = Fixture::start(options()).await;
    let dir = fixture.dir.path();
    let before = routing(&fixture);
    // Run-time state that must survive: an operator-failed shard.
    fixture.admin_json("POST", "/admin/shards/s1/fail").await;
    let shard = fixture.shard("s1");

    // A new timeout and a new tenant.
    edit(
        &dir.join("gateway.toml"),
        "per_try_timeout_ms = 300",
        "per_try_timeout_ms = 2000",
    );
    let new_key = format!("new-tenant-key-{}", fastrand::u64(..));
    let mut tenants = std::fs::read_to_string(dir.join("tenants.toml")).unwrap();
    // The newcomer has its own k: a new tenant has no old placement to
    // move from, so even that is not a migration.
    tenants.push_str(&format!(
        "[[tenants]]\nid = \"newcomer\"\napi_key_sha256 = \"{}\"\nk = 3\n",
        sha256_hex(&new_key)
    ));
    std::fs::write(dir.join("tenants.toml"), tenants).unwrap();
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // Adding a tenant moves nobody: every old tenant keeps its subset, and
    // only tenants in both configurations are compared.
    assert_eq!(
        answer,
        serde_json::json!({ "reloaded": true, "changed": 0, "tenants": 40, "members_gained": 0, "members_lost": 0 })
    );
    assert_eq!(
        fixture.config().routing().per_try_timeout,
        Duration::from_secs(2)
    );
    assert_eq!(routing(&fixture), before);
    let snapshot = fixture.running.gateway.snapshot();
    assert!(std::sync::Arc::ptr_eq(
        snapshot.find_shard("default", "s1").unwrap(),
        &shard
    ));
    assert!(
        shard.health.lock().unwrap().failed,
        "the failed shard stays failed"
    );
    drop(snapshot);

    // The newcomer's key works at once.
    let (status, _, body) = fixture
        .send(None, "GET", "/", &[("x-api-key", &new_key)], b"")
        .await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["tenant"], "newcomer");
    assert!(
        fixture
            .subset_ids("newcomer")
            .contains(&answer["shard"].as_str().unwrap().to_owned())
    );

    // A request in flight across a reload finishes normally.
    for backend in &fixture.backends {
        backend.set_mode(Mode::Slow(Duration::from_millis(300)));
    }
    let requests_before = fixture.total_backend_requests();
    let client = fixture.client.clone();
    let request = http::Request::get(format!("http://{}/slow", fixture.running.addr))
        .header(
            "authorization",
            format!("Bearer {}", fixture.api_key("tenant-3")),
        )
        .body(Full::new(Bytes::new()))
        .unwrap();
    let in_flight = tokio::spawn(async move {
        let response = client.request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    });
    assert!(
        eventually(Duration::from_secs(5), || fixture.total_backend_requests()
            > requests_before)
        .await,
        "the request never reached a backend"
    );
    edit(
        &dir.join("gateway.toml"),
        "request_timeout_ms = 3000",
        "request_timeout_ms = 8000",
    );
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["path"], "/slow");
    assert_eq!(
        fixture.config().routing().request_timeout,
        Duration::from_secs(8)
    );

    // Removing a tenant moves nobody else either; its key stops working.
    for backend in &fixture.backends {
        backend.set_mode(Mode::Healthy);
    }
    let tenants = std::fs::read_to_string(dir.join("tenants.toml")).unwrap();
    let without: String = tenants
        .split("[[tenants]]")
        .filter(|block| !block.contains("id = \"tenant-5\""))
        .collect::<Vec<_>>()
        .join("[[tenants]]");
    std::fs::write(dir.join("tenants.toml"), without).unwrap();
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["changed"], 0);
    assert_eq!(
        fixture.get("tenant-5", "/").await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(fixture.get("tenant-6", "/").await.0, StatusCode::OK);
}

/// How many of the fixture's tenants a new key would move, computed with
/// the placement library directly.
fn moved_by_key(fixture: &Fixture, key: &[u8]) -> usize {
    let config = fixture.config();
    let cell = &config.cells()[0];
    let fleet = Fleet::new(
        cell.shards
            .iter()
            .map(|s| Shard {
                id: s.id.clone(),
                zone: s.zone.clone(),
                weight: s.weight,
            })
            .collect(),
    )
    .unwrap();
    let placer = Placer::new(
        fleet,
        &PlacementKey::from_bytes(key.to_vec()),
        PlacementConfig {
            algorithm: Algorithm::Rendezvous,
            k: cell.k,
            zone_aware: false,
        },
    )
    .unwrap();
    fixture
        .tenants
        .iter()
        .filter(|(t, _)| {
            let old: BTreeSet<String> = fixture.subset_ids(t).into_iter().collect();
            let new: BTreeSet<String> =
                placer.subset_ids(t).into_iter().map(String::from).collect();
            old != new
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_moves_tenants_is_a_migration_refused_unless_allowed() {
    let fixture = Fixture::start(options()).await;
    let dir = fixture.dir.path();
    let config = dir.join("gateway.toml");
    let before = routing(&fixture);
    let per_try = fixture.config().routing().per_try_timeout;

    // k = 2 → 3 gives every tenant a new member: all 40 would move.
    edit(&config, "k = 2", "k = 3");
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["status"], 409);
    let message = answer["error"].as_str().unwrap();
    assert!(
        message.contains("moves 40 of 40 tenants (100.00%)"),
        "{message}"
    );
    assert!(message.contains("allow_migration"), "{message}");
    // What really moves: each tenant keeps its two shards and gains one.
    assert!(
        message.contains("40 tenants gain 40 members, 0 tenants lose 0 members"),
        "{message}"
    );
    assert!(message.contains("reload.allow_growth = true"), "{message}");
    still_serving(&fixture, &before, per_try).await;
    assert_eq!(fixture.config().cells()[0].k, 2);

    // The same change, allowed by the call.
    let (status, answer) = reload(&fixture, "?allow_migration=true").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        serde_json::json!({ "reloaded": true, "changed": 40, "tenants": 40, "members_gained": 40, "members_lost": 0 })
    );
    assert_eq!(fixture.config().cells()[0].k, 3);
    for (tenant, subset) in &before {
        let now = fixture.subset_ids(tenant);
        assert_eq!(now.len(), 3);
        // Rendezvous: a larger k keeps the old members and adds one.
        assert!(subset.iter().all(|s| now.contains(s)), "{tenant}");
    }
    let now_routing = routing(&fixture);

    // A new placement key: the share that would move, as the placement
    // library computes it, is in the refusal.
    let key = random_bytes(32);
    let expected = moved_by_key(&fixture, &key);
    assert!(expected > 0);
    std::fs::write(dir.join("placement.key"), &key).unwrap();
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let message = answer["error"].as_str().unwrap();
    let share = format!(
        "moves {expected} of 40 tenants ({:.2}%)",
        100.0 * expected as f64 / 40.0
    );
    assert!(message.contains(&share), "{message} (expected {share:?})");
    assert!(
        !message.contains(&key.iter().map(|b| format!("{b:02x}")).collect::<String>()),
        "the key is not in the message"
    );
    still_serving(&fixture, &now_routing, per_try).await;

    // The same change, allowed by the configuration itself.
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[reload]\nallow_migration = true\n");
    std::fs::write(&config, text).unwrap();
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["changed"], expected as u64);
    assert!(fixture.config().reload_allow_migration());
    assert_ne!(routing(&fixture), now_routing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_or_missing_configuration_is_refused_and_the_old_one_keeps_serving() {
    let fixture = Fixture::start(options()).await;
    let dir = fixture.dir.path();
    let config = dir.join("gateway.toml");
    let good = std::fs::read_to_string(&config).unwrap();
    let good_tenants = std::fs::read_to_string(dir.join("tenants.toml")).unwrap();
    let before = routing(&fixture);
    let per_try = fixture.config().routing().per_try_timeout;

    let refused = async |expected: &[&str]| {
        let (status, answer) = reload(&fixture, "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["status"], 400);
        let message = answer["error"].as_str().unwrap().to_owned();
        for part in expected {
            assert!(message.contains(part), "{message:?} lacks {part:?}");
        }
        still_serving(&fixture, &before, per_try).await;
    };

    // Broken TOML (with a new timeout that must not apply).
    std::fs::write(
        &config,
        good.replace("per_try_timeout_ms = 300", "per_try_timeout_ms = 900\n[[["),
    )
    .unwrap();
    refused(&["gateway.toml", "line "]).await;

    // Valid TOML, invalid configuration.
    std::fs::write(&config, good.replace("k = 2", "k = 9")).unwrap();
    refused(&["gateway.toml", "placement.k"]).await;
    std::fs::write(&config, good.replace("k = 2", "k = 2\nkay = 1")).unwrap();
    refused(&["gateway.toml", "kay"]).await;

    // A broken tenants file.
    std::fs::write(
        dir.join("tenants.toml"),
        format!(
            "{good_tenants}[[tenants]]\nid = \"tenant-1\"\napi_key_sha256 = \"{}\"\n",
            sha256_hex("x")
        ),
    )
    .unwrap();
    std::fs::write(&config, &good).unwrap();
    refused(&["tenants.toml", "tenant-1"]).await;
    std::fs::write(dir.join("tenants.toml"), &good_tenants).unwrap();

    // A key file that is too short.
    let key = std::fs::read(dir.join("placement.key")).unwrap();
    std::fs::write(dir.join("placement.key"), &key[..8]).unwrap();
    refused(&["placement.key_file", "8-byte key"]).await;
    std::fs::write(dir.join("placement.key"), &key).unwrap();

    // The admin token file disappearing: refused, and the old token still
    // opens the admin API (the refusals above were made with it).
    let token_file = dir.join("admin.token");
    std::fs::remove_file(&token_file).unwrap();
    refused(&["admin.token_file"]).await;
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();

    // The configuration file disappearing.
    std::fs::remove_file(&config).unwrap();
    refused(&["gateway.toml", "cannot read the configuration"]).await;

    // Put back, it reloads.
    std::fs::write(&config, &good).unwrap();
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["changed"], 0);
}

/// `reload.allow_growth`: a larger `k` under rendezvous keeps every
/// tenant's shards and adds one, so it goes through with the setting, and
/// says so in the answer; a change that takes members away still does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growth_goes_through_with_allow_growth_and_a_loss_still_does_not() {
    let fixture = Fixture::start(options()).await;
    let dir = fixture.dir.path();
    let config = dir.join("gateway.toml");
    let before = routing(&fixture);
    let per_try = fixture.config().routing().per_try_timeout;

    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[reload]\nallow_growth = true\n");
    std::fs::write(&config, text).unwrap();
    edit(&config, "k = 2", "k = 3");
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        serde_json::json!({ "reloaded": true, "changed": 40, "tenants": 40, "members_gained": 40, "members_lost": 0 })
    );
    for (tenant, subset) in &before {
        let now = fixture.subset_ids(tenant);
        assert_eq!(now.len(), 3);
        assert!(subset.iter().all(|s| now.contains(s)), "{tenant}");
    }
    let grown = routing(&fixture);

    // Back to k = 2 loses a member per tenant: growth it is not.
    edit(&config, "k = 3", "k = 2");
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let message = answer["error"].as_str().unwrap();
    assert!(
        message.contains("0 tenants gain 0 members, 40 tenants lose 40 members"),
        "{message}"
    );
    assert!(!message.contains("allow_growth"), "{message}");
    still_serving(&fixture, &grown, per_try).await;
    assert_eq!(fixture.config().cells()[0].k, 3);
}

/// Issue 28: a reload whose shard URL has a port that does not parse (or
/// is 0), a password, no host or a fragment is refused naming the key,
/// never echoes the password, and the old configuration keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_shard_url_that_would_reach_somewhere_unwritten_is_refused() {
    let fixture = Fixture::start(options()).await;
    let config = fixture.dir.path().join("gateway.toml");
    let good = std::fs::read_to_string(&config).unwrap();
    let before = routing(&fixture);
    let per_try = fixture.config().routing().per_try_timeout;
    let second = fixture.backends[1].url();
    assert_eq!(good.matches(&second).count(), 1, "{good}");

    for (url, says) in [
        ("http://127.0.0.1:99999", "1 to 65535"),
        ("http://127.0.0.1:notaport", "1 to 65535"),
        ("http://127.0.0.1:0", "1 to 65535"),
        ("http://ops:hunter2@127.0.0.1:9100", "user information"),
        ("http://127.0.0.1:9100/#top", "fragment"),
    ] {
        std::fs::write(&config, good.replace(&second, url)).unwrap();
        let (status, answer) = reload(&fixture, "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(
            message.contains("cells[0].shards[1].url") && message.contains(says),
            "{url}: {message}"
        );
        assert!(!answer.to_string().contains("hunter2"), "{answer}");
        still_serving(&fixture, &before, per_try).await;
    }
    std::fs::write(&config, &good).unwrap();
    let (status, answer) = reload(&fixture, "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}
