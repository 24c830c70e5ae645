//! Lookback after a migration (`reload.lookback_seconds`), through real
//! sockets: shards in the `data-store` mode answer `404` for data they
//! never received, every tenant's datum is written to each member of its
//! subset, and the placement key is rotated. With lookback, every read
//! inside the window is served (a new member's `404` is a miss, and the
//! old members hold the data); without it, or once the window has closed,
//! reads of moved tenants answer `404`.

use std::collections::BTreeSet;
use std::time::Duration;

use backend::Mode;
use http::StatusCode;
use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer, Shard};
use serde_json::Value;

use crate::admin::{TOKEN, options};
use crate::util::{Fixture, Options, random_bytes, send_to};

/// The path each tenant's datum is written at.
const DATUM: &str = "/data/item";

/// Six data-store shards, k = 2, 20 tenants, with an admin token.
async fn start() -> Fixture {
    let fixture = Fixture::start(Options {
        shards: 6,
        tenants: 20,
        k: 2,
        ..options()
    })
    .await;
    for backend in &fixture.backends {
        backend.set_mode(Mode::DataStore);
    }
    fixture
}

/// A tenant's admin view.
async fn view(fixture: &Fixture, tenant: &str) -> Value {
    fixture
        .admin_json("GET", &format!("/admin/tenants/{tenant}"))
        .await
}

/// Each tenant's subset, by shard id, as the admin API gives it.
async fn subsets(fixture: &Fixture) -> Vec<(String, BTreeSet<String>)> {
    let mut out = Vec::new();
    for (tenant, _) in &fixture.tenants {
        let ids = view(fixture, tenant).await["subset"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect();
        out.push((tenant.clone(), ids));
    }
    out
}

/// Writes every tenant's datum straight to each member of its subset (as
/// a replicated store would hold it), then checks it reads back through
/// the gateway.
async fn write_data(fixture: &Fixture, subsets: &[(String, BTreeSet<String>)]) {
    for (tenant, members) in subsets {
        for id in members {
            let (status, _, _) = send_to(
                &fixture.client,
                fixture.backend(id).addr(),
                "PUT",
                DATUM,
                None,
                &[("x-shuffle-tenant", tenant)],
                b"datum",
            )
            .await;
            assert_eq!(status, StatusCode::CREATED, "{tenant} on {id}");
        }
        let (status, body) = fixture.get(tenant, DATUM).await;
        assert_eq!(
            (status, &body[..]),
            (StatusCode::OK, &b"datum"[..]),
            "{tenant}"
        );
    }
}

/// A placement key under which at least one tenant keeps none of its
/// members (every read of it needs an old member), found with the
/// placement library, not the gateway.
fn key_moving_someone_fully(fixture: &Fixture, before: &[(String, BTreeSet<String>)]) -> Vec<u8> {
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
    loop {
        let key = random_bytes(32);
        let placer = Placer::new(
            fleet.clone(),
            &PlacementKey::from_bytes(key.clone()),
            PlacementConfig {
                algorithm: Algorithm::Rendezvous,
                k: cell.k,
                zone_aware: false,
            },
        )
        .unwrap();
        let fully = before.iter().any(|(tenant, old)| {
            placer
                .subset_ids(tenant)
                .iter()
                .all(|id| !old.contains(*id))
        });
        if fully {
            return key;
        }
    }
}

/// Rotates the placement key (a new version) with `lookback_seconds`,
/// allowed as a migration.
async fn rotate(fixture: &Fixture, key: &[u8], lookback_seconds: &str) {
    let dir = fixture.dir.path();
    std::fs::write(dir.join("placement.key"), key).unwrap();
    let config = dir.join("gateway.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("key_version = \"v1\"", "key_version = \"v2\"");
    std::fs::write(
        &config,
        format!("{text}\n[reload]\nlookback_seconds = {lookback_seconds}\n"),
    )
    .unwrap();
    let (status, _, body) = fixture
        .admin("POST", "/admin/reload?allow_migration=true", Some(TOKEN))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
}

/// `reads` GETs of every tenant's datum through the gateway: how many
/// answered 404 (every other answer must be the datum).
async fn read_all(fixture: &Fixture, tenants: &[String], reads: usize) -> usize {
    let mut not_found = 0;
    for tenant in tenants {
        for _ in 0..reads {
            let (status, body) = fixture.get(tenant, DATUM).await;
            if status == StatusCode::NOT_FOUND {
                not_found += 1;
            } else {
                assert_eq!(
                    (status, &body[..]),
                    (StatusCode::OK, &b"datum"[..]),
                    "{tenant}"
                );
            }
        }
    }
    not_found
}

/// The tenants that kept none of their members.
fn fully_moved(
    before: &[(String, BTreeSet<String>)],
    after: &[(String, BTreeSet<String>)],
) -> Vec<String> {
    before
        .iter()
        .zip(after)
        .filter(|((_, old), (_, new))| old.is_disjoint(new))
        .map(|((tenant, _), _)| tenant.clone())
        .collect()
}

fn ids(tenants: &[(String, String)]) -> Vec<String> {
    tenants.iter().map(|(id, _)| id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lookback_no_read_sees_a_404_inside_the_window() {
    let fixture = start().await;
    let before = subsets(&fixture).await;
    write_data(&fixture, &before).await;
    let key = key_moving_someone_fully(&fixture, &before);
    rotate(&fixture, &key, "300").await;
    let after = subsets(&fixture).await;
    assert!(!fully_moved(&before, &after).is_empty());
    // Each moved tenant's admin view names its lookback members: its old
    // members it lost.
    for ((tenant, old), (_, new)) in before.iter().zip(&after) {
        let view = view(&fixture, tenant).await;
        let lookback: BTreeSet<String> = view["lookback_members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(lookback, old - new, "{tenant}");
        assert!(view["lookback_until_unix"].as_u64().is_some(), "{view}");
    }
    // Several reads each: the first member is drawn at random.
    assert_eq!(read_all(&fixture, &ids(&fixture.tenants), 5).await, 0);
    let scraped = fixture.scrape().await;
    assert!(
        scraped.count("shuffle_lookback_attempts_total", &[("cell", "default")]) > 0.0,
        "a fully moved tenant's reads went to its old members"
    );
    // A miss is no failure: no shard was ejected for its 404s.
    assert_eq!(scraped.count("shuffle_ejections_total", &[]), 0.0);
    // The status page says so.
    let (status, _, page) = fixture.admin("GET", "/", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let page = String::from_utf8_lossy(&page);
    assert!(
        page.contains("Lookback: tenants moved by the migration at"),
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_lookback_reads_of_moved_tenants_answer_404() {
    let fixture = start().await;
    let before = subsets(&fixture).await;
    write_data(&fixture, &before).await;
    let key = key_moving_someone_fully(&fixture, &before);
    rotate(&fixture, &key, "0").await;
    let after = subsets(&fixture).await;
    let moved = fully_moved(&before, &after);
    assert!(!moved.is_empty());
    assert!(
        view(&fixture, &moved[0]).await["lookback_members"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // A fully moved tenant's every read meets only new members.
    assert_eq!(read_all(&fixture, &moved, 3).await, 3 * moved.len());
    let scraped = fixture.scrape().await;
    assert_eq!(
        scraped.count("shuffle_lookback_attempts_total", &[("cell", "default")]),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_the_window_closes_reads_of_moved_tenants_answer_404_again() {
    let fixture = start().await;
    let before = subsets(&fixture).await;
    write_data(&fixture, &before).await;
    let key = key_moving_someone_fully(&fixture, &before);
    rotate(&fixture, &key, "1").await;
    let after = subsets(&fixture).await;
    let moved = fully_moved(&before, &after);
    assert!(!moved.is_empty());
    // Until the admin view says the window is closed (polled, no bound).
    while view(&fixture, &moved[0]).await["lookback_until_unix"].is_u64() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(read_all(&fixture, &moved, 3).await, 3 * moved.len());
    let (_, _, page) = fixture.admin("GET", "/", Some(TOKEN)).await;
    assert!(!String::from_utf8_lossy(&page).contains("Lookback:"));
}
