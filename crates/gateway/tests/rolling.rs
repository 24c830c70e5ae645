//! A rolling restart under load: every shard of an 8-shard cell restarted
//! once, one down at a time, the next one as soon as the last passes its
//! health checks again (as a deploy waits for readiness), through the test
//! shards' control API over real sockets, while several tenants (k = 2)
//! send requests without a pause. No tenant may see a single error: a
//! restarted shard that passes its checks is readmitted at once (its
//! ejection ends), and passive ejection never holds out a second shard of
//! the cell while one is out (`outlier.max_ejection_percent`).
//!
//! Before ejections healed, the shard restarted last stayed ejected for
//! `outlier.base_ejection_ms` after it was back, the next restart took a
//! second shard out, and the tenants on exactly those two got 503s.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use gateway::health::{Active, Availability};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};

use crate::util::{Fixture, Options, eventually};

/// How long each shard stays down.
const DOWN: Duration = Duration::from_millis(1500);

/// Bounds every wait that would otherwise hang (none is expected to come
/// near it).
const HANG: Duration = Duration::from_secs(30);

/// What one tenant's requests got: answers by status, and transport errors.
#[derive(Debug, Default)]
struct Outcomes {
    statuses: BTreeMap<u16, u64>,
    broken: u64,
}

impl Outcomes {
    fn ok(&self) -> u64 {
        self.statuses.get(&200).copied().unwrap_or(0)
    }

    fn errors(&self) -> u64 {
        self.broken
            + self
                .statuses
                .iter()
                .filter(|(status, _)| **status != 200)
                .map(|(_, count)| count)
                .sum::<u64>()
    }
}

/// Sets a test shard's mode through its control API (`PUT /mode`).
async fn set_mode(fixture: &Fixture, control: std::net::SocketAddr, mode: &'static str) {
    let request = Request::put(format!("http://{control}/mode"))
        .body(Full::new(Bytes::from_static(mode.as_bytes())))
        .unwrap();
    let response = fixture.client.request(request).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NO_CONTENT,
        "PUT /mode {mode}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_gives_no_tenant_an_error() {
    let fixture = Arc::new(
        Fixture::start(Options {
            shards: 8,
            tenants: 40,
            k: 2,
            // Quick checks with the product's rise and fall; the product's
            // ejection settings, whose 10 s base outlasted each restart.
            health: "interval_ms = 100\ntimeout_ms = 200\nrise = 2\nfall = 2".into(),
            outlier: "consecutive_failures = 5\nbase_ejection_ms = 10000\nmax_ejection_ms = 300000"
                .into(),
            ..Options::default()
        })
        .await,
    );
    let mut controls = Vec::new();
    for backend in &fixture.backends {
        controls.push(
            backend
                .serve_control("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap(),
        );
    }
    for i in 0..8 {
        let shard = fixture.shard(&format!("s{i}"));
        assert!(
            eventually(HANG, || shard.health.lock().unwrap().active()
                == Active::Healthy)
            .await,
            "s{i} never passed its first checks"
        );
    }

    // Continuous load: four clients, each going round every tenant.
    let outcomes: Arc<Mutex<BTreeMap<String, Outcomes>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for client in 0..4 {
        let (fixture, outcomes, stop) = (
            Arc::clone(&fixture),
            Arc::clone(&outcomes),
            Arc::clone(&stop),
        );
        load.push(tokio::spawn(async move {
            let mut round = client;
            while !stop.load(Ordering::Relaxed) {
                let (tenant, key) = &fixture.tenants[round % fixture.tenants.len()];
                round += 1;
                let request = Request::get(format!("http://{}/rolling", fixture.running.addr))
                    .header("authorization", format!("Bearer {key}"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                let answer = tokio::time::timeout(HANG, async {
                    let response = fixture.client.request(request).await.ok()?;
                    let status = response.status();
                    response.into_body().collect().await.ok()?;
                    Some(status)
                })
                .await
                .ok()
                .flatten();
                let mut outcomes = outcomes.lock().unwrap();
                let outcome = outcomes.entry(tenant.clone()).or_default();
                match answer {
                    Some(status) => *outcome.statuses.entry(status.as_u16()).or_default() += 1,
                    None => outcome.broken += 1,
                }
            }
        }));
    }

    // Watches how many shards are out at once.
    let most_out = Arc::new(Mutex::new(0_usize));
    let watcher = {
        let (fixture, most_out, stop) = (
            Arc::clone(&fixture),
            Arc::clone(&most_out),
            Arc::clone(&stop),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let snapshot = fixture.running.gateway.snapshot();
                let out = snapshot
                    .all_shards()
                    .filter(|shard| shard.availability(&snapshot.config) != Availability::Up)
                    .count();
                {
                    let mut most = most_out.lock().unwrap();
                    *most = (*most).max(out);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    tokio::time::sleep(Duration::from_millis(500)).await;
    for (i, control) in controls.iter().enumerate() {
        let id = format!("s{i}");
        let shard = fixture.shard(&id);
        set_mode(&fixture, *control, "killed").await;
        tokio::time::sleep(DOWN).await;
        // Down long enough for its checks to see it (a deploy that is
        // quicker than the checks is not what this is about).
        assert!(
            eventually(HANG, || shard.health.lock().unwrap().last_check_passed()
                == Some(false))
            .await,
            "{id}'s checks never saw it down"
        );
        set_mode(&fixture, *control, "healthy").await;
        // Ready again: its checks pass (as a deploy's readiness probe
        // would), whatever the gateway's ejection says.
        assert!(
            eventually(HANG, || {
                let health = shard.health.lock().unwrap();
                health.active() == Active::Healthy && health.last_check_passed() == Some(true)
            })
            .await,
            "{id} never passed its checks after coming back"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    watcher.await.unwrap();

    let outcomes = outcomes.lock().unwrap();
    assert_eq!(
        outcomes.len(),
        fixture.tenants.len(),
        "some tenant sent nothing"
    );
    let failing: Vec<String> = outcomes
        .iter()
        .filter(|(_, outcome)| outcome.errors() > 0)
        .map(|(tenant, outcome)| {
            format!(
                "{tenant} (subset {:?}): {outcome:?}",
                fixture.subset_ids(tenant)
            )
        })
        .collect();
    let total: u64 = outcomes.values().map(|o| o.ok() + o.errors()).sum();
    assert!(
        failing.is_empty(),
        "{} of {} tenants (k = 2) saw errors in {total} requests:\n{}",
        failing.len(),
        outcomes.len(),
        failing.join("\n")
    );
    assert!(
        outcomes.values().all(|outcome| outcome.ok() >= 10),
        "some tenant was barely served: {outcomes:?}"
    );
    // Never two shards out at once, though each came back while its
    // ejection (10 s) would still have run.
    assert_eq!(*most_out.lock().unwrap(), 1, "shards out at once");
    // Every shard serves again.
    for backend in &fixture.backends {
        assert_eq!(backend.mode(), backend::Mode::Healthy);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_ejection_holds_out_at_most_one_of_eight_shards_counting_drained_ones() {
    const TOKEN: &str = "rolling-admin-token-0123456789";
    let fixture = Fixture::start(Options {
        shards: 8,
        tenants: 40,
        k: 2,
        // Checks that pass once at start and not again for a minute, so only
        // passive ejection (and the operator) moves shards; ejections that
        // outlast the test.
        health: "interval_ms = 60000\ntimeout_ms = 2000".into(),
        outlier: "consecutive_failures = 3\nbase_ejection_ms = 60000\nmax_ejection_ms = 300000"
            .into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    for i in 0..8 {
        let shard = fixture.shard(&format!("s{i}"));
        assert!(
            eventually(HANG, || shard.health.lock().unwrap().active()
                == Active::Healthy)
            .await,
            "s{i} never passed its first check"
        );
    }
    let traffic = || async {
        let mut statuses = BTreeMap::new();
        for _ in 0..4 {
            for (tenant, _) in &fixture.tenants {
                let (status, _) = fixture.get(tenant, "/cap").await;
                statuses.insert(tenant.clone(), status);
            }
        }
        statuses
    };
    let ejected = |id: &str| {
        fixture
            .shard(id)
            .health
            .lock()
            .unwrap()
            .is_ejected(tokio::time::Instant::now())
    };
    let skipped = |metrics: &crate::util::Exposition, id: &str| {
        metrics.value(
            "shuffle_ejections_skipped_total",
            &[("cell", "default"), ("shard", id)],
        )
    };

    // An operator drains s5: with the default 10 % of 8 shards, that is the
    // one shard the cell may have out, so s0, killed, is not ejected. Its
    // tenants are served by their other member.
    fixture.admin_json("POST", "/admin/shards/s5/drain").await;
    fixture.backend("s0").set_mode(backend::Mode::Killed);
    let statuses = traffic().await;
    assert!(!ejected("s0"), "s0 was ejected with s5 drained");
    let metrics = fixture.scrape().await;
    assert!(
        skipped(&metrics, "s0") >= 1.0,
        "no skipped ejection counted"
    );
    assert_eq!(skipped(&metrics, "s1"), 0.0);
    for (tenant, status) in &statuses {
        let subset = fixture.subset_ids(tenant);
        if !subset.iter().any(|id| id == "s5") {
            assert_eq!(*status, StatusCode::OK, "{tenant} on {subset:?}");
        }
    }

    // s5 back, and s1 killed as well: one of the two dead shards is ejected,
    // never both.
    fixture.admin_json("POST", "/admin/shards/s5/restore").await;
    fixture.backend("s1").set_mode(backend::Mode::Killed);
    traffic().await;
    let both = [ejected("s0"), ejected("s1")];
    assert_eq!(
        both.iter().filter(|e| **e).count(),
        1,
        "ejected (s0, s1): {both:?}"
    );
    let metrics = fixture.scrape().await;
    assert!(
        metrics.sum(
            "shuffle_ejections_total",
            &[
                ("cell", "default"),
                ("shard", if both[0] { "s0" } else { "s1" })
            ]
        ) >= 1.0
    );
    let held_in = if both[0] { "s1" } else { "s0" };
    assert!(skipped(&metrics, held_in) >= 1.0, "{held_in}");
}
