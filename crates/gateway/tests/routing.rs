//! The request path end to end: placement, header hygiene, failover,
//! replay rules, ejection, the retry budget, strict and spill, and the 401
//! paths.

use std::collections::BTreeSet;
use std::time::Duration;

use backend::Mode;
use gateway::health::Availability;
use http::StatusCode;

use crate::util::{Fixture, Options, eventually};

/// `[admin]` lines that let a test scrape `/metrics` without a token.
const SCRAPE: &str = "metrics_without_token = true\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_land_only_on_the_tenants_subset() {
    let fixture = Fixture::start(Options::default()).await;
    for (tenant, _) in fixture.tenants.clone().iter().take(10) {
        for backend in &fixture.backends {
            backend.clear_seen();
        }
        for _ in 0..20 {
            let (status, body) = fixture.get(tenant, "/work").await;
            assert_eq!(status, StatusCode::OK);
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(answer["tenant"], tenant.as_str());
        }
        let subset: BTreeSet<String> = fixture.subset_ids(tenant).into_iter().collect();
        let served: BTreeSet<String> = fixture
            .backends
            .iter()
            .filter(|b| b.requests() > 0)
            .map(|b| b.id().to_owned())
            .collect();
        assert!(
            served.is_subset(&subset),
            "{tenant}: served by {served:?}, subset {subset:?}"
        );
        // Power of two choices spreads 20 requests over both members.
        assert_eq!(served, subset, "{tenant}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_placement_headers_never_reach_a_backend() {
    let fixture = Fixture::start(Options::default()).await;
    let (victim, attacker) = ("tenant-1", "tenant-2");
    let headers = [
        ("x-shuffle-tenant", victim),
        ("x-shuffle-shard", "s0"),
        ("X-Shuffle-Tenant", victim),
        ("x-shuffle-anything", "1"),
    ];
    for _ in 0..10 {
        let (status, _, _) = fixture
            .send(Some(attacker), "GET", "/", &headers, b"")
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let subset = fixture.subset_ids(attacker);
    for backend in &fixture.backends {
        for seen in backend.seen() {
            assert_eq!(seen.header("x-shuffle-tenant"), [attacker]);
            assert_eq!(seen.header("x-shuffle-shard"), [backend.id()]);
            assert!(seen.header("x-shuffle-anything").is_empty());
            assert!(
                seen.header("authorization").is_empty(),
                "credentials are not forwarded"
            );
            assert!(subset.contains(&backend.id().to_owned()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shard_costs_its_tenants_no_failed_gets() {
    let fixture = Fixture::start(Options {
        tenants: 60,
        admin: SCRAPE.into(),
        ..Options::default()
    })
    .await;
    let victim = "s3";
    fixture.backend(victim).set_mode(Mode::Killed);
    let mut affected = 0;
    for (tenant, _) in fixture.tenants.clone() {
        let on_victim = fixture.subset_ids(&tenant).contains(&victim.to_owned());
        affected += usize::from(on_victim);
        for _ in 0..5 {
            let (status, body) = fixture.get(&tenant, "/").await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{tenant} (on the killed shard: {on_victim})"
            );
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_ne!(answer["shard"], victim);
        }
    }
    assert!(affected > 0, "the test needs tenants on the killed shard");
    // Every connection the killed shard refused moved its request on to
    // the other member. (Health checks may take the shard out before
    // requests try it; then fewer or no failovers are needed.)
    let metrics = fixture.scrape().await;
    let refused = metrics.count(
        "shuffle_attempts_total",
        &[
            ("cell", "default"),
            ("shard", victim),
            ("outcome", "connect"),
        ],
    );
    let retries = metrics.count(
        "shuffle_failovers_total",
        &[("cell", "default"), ("kind", "retry")],
    );
    assert!(
        retries >= refused,
        "{refused} refused connections, {retries} retries"
    );
}

/// Both members of the tenant's subset answer 503.
async fn both_members_failing() -> (Fixture, String) {
    let fixture = Fixture::start(Options::default()).await;
    let tenant = "tenant-7".to_owned();
    for id in fixture.subset_ids(&tenant) {
        fixture.backend(&id).set_mode(Mode::Errors {
            status: 503,
            rate: 1.0,
        });
    }
    (fixture, tenant)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_idempotency_key_is_not_replayed() {
    let (fixture, tenant) = both_members_failing().await;
    let (status, _, _) = fixture
        .send(Some(&tenant), "POST", "/charge", &[], b"{\"amount\":1}")
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        fixture.total_backend_requests(),
        1,
        "sent once, never replayed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_with_idempotency_key_is_replayed_on_the_other_member() {
    let (fixture, tenant) = both_members_failing().await;
    let headers = [("idempotency-key", "charge-42")];
    let (status, _, _) = fixture
        .send(
            Some(&tenant),
            "POST",
            "/charge",
            &headers,
            b"{\"amount\":1}",
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        fixture.total_backend_requests(),
        2,
        "one attempt per member, each member once"
    );
    for id in fixture.subset_ids(&tenant) {
        let seen = fixture.backend(&id).seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].body_len, 12, "the replay carries the same body");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_retry_budget_stops_retries() {
    let fixture = Fixture::start(Options {
        extra: "[retry_budget]\nratio = 0.0\nmin_per_second = 0\n".into(),
        admin: SCRAPE.into(),
        ..Options::default()
    })
    .await;
    let tenant = "tenant-7";
    for id in fixture.subset_ids(tenant) {
        fixture.backend(&id).set_mode(Mode::Errors {
            status: 503,
            rate: 1.0,
        });
    }
    let (status, _) = fixture.get(tenant, "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(fixture.total_backend_requests(), 1);
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.count(
            "shuffle_retry_budget_exhausted_total",
            &[("cell", "default")]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timing_out_shard_is_ejected_and_later_readmitted() {
    let fixture = Fixture::start(Options::default()).await;
    let tenant = "tenant-3";
    let slow = fixture.subset_ids(tenant)[0].clone();
    fixture.backend(&slow).set_mode(Mode::Blackhole);
    let shard = fixture.shard(&slow);
    // Every GET still succeeds through the other member while the slow one
    // times out often enough to be ejected (or failed by health checks).
    for _ in 0..12 {
        let (status, _) = fixture.get(tenant, "/").await;
        assert_eq!(status, StatusCode::OK);
    }
    let config = fixture.config();
    assert_ne!(shard.availability(&config), Availability::Up);
    fixture.backend(&slow).set_mode(Mode::Healthy);
    assert!(
        eventually(Duration::from_secs(5), || shard.availability(&config)
            == Availability::Up)
        .await,
        "the shard came back but was not readmitted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_answers_503_when_the_whole_subset_is_out() {
    let fixture = Fixture::start(Options::default()).await;
    let tenant = "tenant-5";
    for id in fixture.subset_ids(tenant) {
        fixture.backend(&id).set_mode(Mode::Killed);
    }
    let (status, headers, _) = fixture.send(Some(tenant), "GET", "/", &[], b"").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "1");
    for backend in &fixture.backends {
        assert_eq!(backend.requests(), 0, "strict never leaves the subset");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spill_uses_a_shard_outside_the_subset_and_counts_it() {
    let fixture = Fixture::start(Options {
        routing: "exhausted = \"spill\"\n".into(),
        admin: SCRAPE.into(),
        ..Options::default()
    })
    .await;
    let tenant = "tenant-5";
    let subset = fixture.subset_ids(tenant);
    for id in &subset {
        fixture.backend(id).set_mode(Mode::Killed);
    }
    let (status, body) = fixture.get(tenant, "/").await;
    assert_eq!(status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(!subset.contains(&answer["shard"].as_str().unwrap().to_owned()));
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.count("shuffle_spills_total", &[("cell", "default")]),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_wrong_credentials_get_401_and_reach_nobody() {
    let fixture = Fixture::start(Options::default()).await;
    let cases: [&[(&str, &str)]; 4] = [
        &[],
        &[("authorization", "Bearer not-a-key")],
        &[("x-api-key", "not-a-key")],
        &[("authorization", "Basic dXNlcjpwYXNz")],
    ];
    for headers in cases {
        let (status, response_headers, body) = fixture.send(None, "GET", "/", headers, b"").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{headers:?}");
        assert_eq!(response_headers["content-type"], "application/json");
        let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error["status"], 401);
        assert!(!String::from_utf8_lossy(&body).contains("not-a-key"));
    }
    assert_eq!(fixture.total_backend_requests(), 0);
}
