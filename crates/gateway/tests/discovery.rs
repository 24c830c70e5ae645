//! Discovered cells through a real DNS server (dnsmasq on 127.0.0.1,
//! changed during each test): an added SRV target receives exactly the
//! tenants placement predicts, a removed one is out of rotation at once
//! and out of placement only after its grace, a returned one moves nobody,
//! a look that loses most of the cell is refused, and a resolver that
//! stops, fails or answers garbage keeps the last good membership.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use backend::Backend;
use bytes::Bytes;
use gateway::Snapshot;
use gateway::config::writer::{GatewayToml, tenants, tenants_toml};
use gateway::runtime::{self, Running};
use http::StatusCode;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use testkit::dns_fault::{DnsFault, Fault};
use testkit::dnsmasq::{self, Dnsmasq, Record};

use crate::util::{eventually, send_to};

/// The SRV name every test's cell is found under.
const SERVICE: &str = "_shards._tcp.shards.test";

/// The records that make `backends` the shards of [`SERVICE`], each named
/// by its backend's id.
fn records(backends: &[&Backend]) -> Vec<Record> {
    let shards: Vec<(&str, u16)> = backends.iter().map(|b| (b.id(), b.addr().port())).collect();
    dnsmasq::shards(SERVICE, &shards)
}

/// A gateway whose one cell is found in DNS, its DNS server, its shards
/// and tenants.
struct Discovered {
    dir: tempfile::TempDir,
    dns: Dnsmasq,
    backends: Vec<Backend>,
    running: Running,
    tenants: Vec<(String, String)>,
    key: Vec<u8>,
    token: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Discovered {
    /// `shards` backends s0… found through dnsmasq, `tenant_count` tenants,
    /// and `[discovery]` lines beside the resolver and a fast refresh.
    async fn start(
        shards: usize,
        tenant_count: usize,
        discovery: &str,
        cell: &str,
    ) -> Option<Self> {
        Self::start_listing(shards, shards, tenant_count, discovery, cell).await
    }

    /// [`Discovered::start`] with only the first `listed` backends in DNS.
    async fn start_listing(
        shards: usize,
        listed: usize,
        tenant_count: usize,
        discovery: &str,
        cell: &str,
    ) -> Option<Self> {
        Self::start_full(shards, listed, tenant_count, discovery, cell, "").await
    }

    /// [`Discovered::start_listing`] with `extra` tables (`[fleet]`).
    async fn start_full(
        shards: usize,
        listed: usize,
        tenant_count: usize,
        discovery: &str,
        cell: &str,
        extra: &str,
    ) -> Option<Self> {
        let mut backends = Vec::new();
        for i in 0..shards {
            backends.push(Backend::start(&format!("s{i}")).await.unwrap());
        }
        let dns =
            Dnsmasq::start(records(&backends.iter().take(listed).collect::<Vec<_>>())).await?;
        let dir = tempfile::tempdir().unwrap();
        let tenants = tenants(tenant_count);
        let token = "discovery-test-admin-token".to_owned();
        let toml = GatewayToml {
            tables: vec![
                (
                    "health".into(),
                    "interval_ms = 100\ntimeout_ms = 200\nrise = 1\nfall = 2\n".into(),
                ),
                (
                    "routing".into(),
                    "per_try_timeout_ms = 300\nrequest_timeout_ms = 3000\n".into(),
                ),
            ],
            admin_token: Some(token.clone()),
            extra: format!(
                "[discovery]\nresolver = \"{}\"\nrefresh_seconds = 0.1\ntimeout_ms = 300\n{discovery}\n{extra}\n",
                dns.addr()
            ),
            cell_lines: format!("discovery = \"dns+srv://{SERVICE}\"\n{cell}"),
            tenants: tenants_toml(&tenants),
            ..GatewayToml::default()
        };
        let key = toml.placement_key.clone();
        let path = toml.write(dir.path()).unwrap();
        let snapshot = Snapshot::load(&path, None).unwrap_or_else(|e| panic!("{e}"));
        let running = runtime::start(snapshot).await.unwrap();
        Some(Self {
            dir,
            dns,
            backends,
            running,
            tenants,
            key,
            token,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("gateway.toml")
    }

    /// Each tenant's members, by shard id, as the gateway places it now.
    fn placed(&self) -> Vec<BTreeSet<String>> {
        crate::util::members_by_id(&self.running, &self.tenants)
    }

    /// The ids of the cell's placed shards.
    fn shard_ids(&self) -> Vec<String> {
        crate::util::shard_ids(&self.running)
    }

    /// A shard's availability by name (`up`, `missing`, …), if placed.
    fn health(&self, id: &str) -> Option<&'static str> {
        crate::util::availability(&self.running, id)
    }

    async fn admin_json(&self, path: &str) -> serde_json::Value {
        let (status, _, body) = send_to(
            &self.client,
            self.running.admin_addr,
            "GET",
            path,
            Some(&self.token),
            &[],
            b"",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{path}: {body:?}");
        serde_json::from_slice(&body).unwrap()
    }

    /// A shard's availability on another replica.
    fn health_on(running: &Running, id: &str) -> Option<&'static str> {
        crate::util::availability(running, id)
    }

    /// The value of one series of the metrics, 0 when absent.
    async fn metric(&self, name: &str, labels: &str) -> f64 {
        let (_, _, body) = send_to(
            &self.client,
            self.running.admin_addr,
            "GET",
            "/metrics",
            Some(&self.token),
            &[],
            b"",
        )
        .await;
        let text = String::from_utf8_lossy(&body).into_owned();
        let prefix = format!("{name}{{{labels}}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// A GET as the tenant at `index`.
    async fn get(&self, index: usize) -> StatusCode {
        send_to(
            &self.client,
            self.running.addr,
            "GET",
            "/",
            Some(&self.tenants[index].1),
            &[],
            b"",
        )
        .await
        .0
    }

    /// What placement says over `ids` with the gateway's key, `k` = 2,
    /// rendezvous: what `shuffle-shard migrate` computes.
    fn predicted(&self, ids: &[&str]) -> Vec<BTreeSet<String>> {
        let key = placement::PlacementKey::from_bytes(self.key.clone());
        let fleet = placement::Fleet::new(
            ids.iter()
                .map(|id| placement::Shard {
                    id: (*id).to_owned(),
                    zone: None,
                    weight: 1.0,
                })
                .collect(),
        )
        .unwrap();
        let placer = placement::Placer::new(
            fleet,
            &key,
            placement::PlacementConfig {
                algorithm: placement::Algorithm::Rendezvous,
                k: 2,
                zone_aware: false,
            },
        )
        .unwrap();
        self.tenants
            .iter()
            .map(|(tenant, _)| {
                placer
                    .subset(tenant)
                    .iter()
                    .map(|&i| ids[i as usize].to_owned())
                    .collect()
            })
            .collect()
    }
}

const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_target_receives_exactly_the_tenants_placement_predicts() {
    // Five of the six are listed at start.
    let Some(mut fleet) = Discovered::start_listing(6, 5, 300, "", "").await else {
        return;
    };
    let ids5: Vec<&str> = fleet.backends.iter().take(5).map(|b| b.id()).collect();
    assert_eq!(fleet.shard_ids(), ids5);
    let all: Vec<&Backend> = fleet.backends.iter().collect();
    let before = fleet.placed();
    assert_eq!(before, fleet.predicted(&ids5));
    let moved_before = fleet
        .metric("shuffle_discovery_tenants_moved_total", "cell=\"default\"")
        .await;

    fleet.dns.set_records(records(&all)).await;
    assert!(eventually(WITHIN, || fleet.shard_ids().len() == 6).await);
    let after = fleet.placed();
    let ids6: Vec<&str> = all.iter().map(|b| b.id()).collect();
    assert_eq!(
        after,
        fleet.predicted(&ids6),
        "placement after the addition"
    );
    // Every tenant that moved gained the new shard and nothing else.
    let moved: Vec<usize> = (0..before.len())
        .filter(|&t| before[t] != after[t])
        .collect();
    assert!(!moved.is_empty());
    for &t in &moved {
        let gained: Vec<&String> = after[t].difference(&before[t]).collect();
        assert_eq!(gained, [&"s5".to_owned()], "tenant {t}");
    }
    let moved_metric = fleet
        .metric("shuffle_discovery_tenants_moved_total", "cell=\"default\"")
        .await;
    assert_eq!(moved_metric - moved_before, moved.len() as f64);
    // The new shard takes its tenants' requests.
    for &t in moved.iter().take(5) {
        assert_eq!(fleet.get(t).await, StatusCode::OK);
    }
    let shards = fleet.admin_json("/admin/shards").await;
    let s5 = shards["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|shard| shard["id"] == "s5")
        .unwrap()
        .clone();
    assert_eq!(s5["source"], format!("dns+srv://{SERVICE}"));
    assert!(s5["known_since_unix"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_target_is_down_at_once_and_leaves_placement_only_after_the_grace() {
    let Some(mut fleet) = Discovered::start(5, 200, "removal_grace_seconds = 600\n", "").await
    else {
        return;
    };
    let before = fleet.placed();
    let on_s2: Vec<usize> = (0..before.len())
        .filter(|&t| before[t].contains("s2"))
        .collect();
    assert!(!on_s2.is_empty());
    let four: Vec<&Backend> = fleet.backends.iter().filter(|b| b.id() != "s2").collect();
    fleet.dns.set_records(records(&four)).await;
    assert!(
        eventually(WITHIN, || fleet.health("s2") == Some("missing")).await,
        "s2 is missing: {:?}",
        fleet.health("s2")
    );
    // Still placed: nobody moved yet; its tenants are served by their
    // other member.
    assert_eq!(fleet.placed(), before);
    let served_before = fleet.backends[2].requests();
    for &t in &on_s2 {
        assert_eq!(fleet.get(t).await, StatusCode::OK, "tenant {t}");
    }
    assert_eq!(
        fleet.backends[2].requests(),
        served_before,
        "s2 is out of rotation"
    );
    let view = fleet.admin_json("/admin/shards").await;
    let s2 = view["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|shard| shard["id"] == "s2")
        .unwrap()
        .clone();
    assert_eq!(s2["health"], "missing");
    assert_eq!(s2["missing_why"], "no longer listed");
    // Counted in the live blast radius: every tenant on s2 is degraded,
    // none fully down.
    let blast = fleet.admin_json("/admin/blast").await;
    assert_eq!(blast["cells"][0]["unavailable"], serde_json::json!(["s2"]));
    assert_eq!(blast["cells"][0]["degraded"], on_s2.len());
    assert_eq!(blast["cells"][0]["fully_down"], 0);
    // And on the status page: the cell's source, the tile's cause.
    let (_, _, page) = send_to(
        &fleet.client,
        fleet.running.admin_addr,
        "GET",
        "/",
        Some(&fleet.token),
        &[],
        b"",
    )
    .await;
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("data-discovery=\"default\""), "{page}");
    assert!(
        page.contains(&format!(
            "shards from dns+srv://{SERVICE} · 5 found, 1 missing"
        )),
        "{page}"
    );
    assert!(
        page.contains("data-shard=\"s2\" data-health=\"missing\""),
        "{page}"
    );
    assert!(page.contains("by discovery (no longer listed)"), "{page}");
    // Still there a while later (the grace is ten minutes).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fleet.shard_ids().len(), 5);
    assert_eq!(fleet.placed(), before);
    // A grace that has run out (half a second, by a reload; the time s2
    // went missing is kept): out of placement, and only its tenants moved.
    let path = fleet.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("removal_grace_seconds = 600", "removal_grace_seconds = 0.5"),
    )
    .unwrap();
    fleet.running.gateway.reload(false).unwrap();
    assert!(eventually(WITHIN, || fleet.shard_ids().len() == 4).await);
    let after = fleet.placed();
    for t in 0..before.len() {
        if on_s2.contains(&t) {
            assert!(!after[t].contains("s2"));
            assert_eq!(
                after[t].intersection(&before[t]).count(),
                1,
                "tenant {t} kept its other member"
            );
        } else {
            assert_eq!(after[t], before[t], "tenant {t} did not have s2");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_returns_at_a_new_address_moves_nobody() {
    let Some(mut fleet) = Discovered::start(5, 200, "", "").await else {
        return;
    };
    let before = fleet.placed();
    let four: Vec<&Backend> = fleet.backends.iter().filter(|b| b.id() != "s2").collect();
    fleet.dns.set_records(records(&four)).await;
    assert!(eventually(WITHIN, || fleet.health("s2") == Some("missing")).await);
    // s2 restarts elsewhere, under the same name.
    let restarted = Backend::start("s2").await.unwrap();
    let mut back: Vec<&Backend> = fleet.backends.iter().filter(|b| b.id() != "s2").collect();
    back.push(&restarted);
    let records = records(&back);
    fleet.dns.set_records(records).await;
    assert!(
        eventually(WITHIN, || fleet.health("s2") == Some("up")).await,
        "s2 back: {:?}",
        fleet.health("s2")
    );
    assert_eq!(fleet.placed(), before, "a return moves nobody");
    let snapshot = fleet.running.gateway.snapshot();
    let url = snapshot
        .find_shard("default", "s2")
        .unwrap()
        .url
        .to_string();
    assert!(url.contains(&restarted.addr().port().to_string()), "{url}");
    drop(snapshot);
    assert_eq!(
        fleet
            .metric("shuffle_discovery_tenants_moved_total", "cell=\"default\"")
            .await,
        0.0
    );
    // Its tenants reach the new address.
    let on_s2: Vec<usize> = (0..before.len())
        .filter(|&t| before[t].contains("s2"))
        .collect();
    let mut reached = false;
    for _ in 0..5 {
        for &t in &on_s2 {
            assert_eq!(fleet.get(t).await, StatusCode::OK);
        }
        if restarted.requests() > 0 {
            reached = true;
            break;
        }
    }
    assert!(reached, "the restarted s2 took requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_that_returns_two_of_twenty_shards_is_refused() {
    let Some(mut fleet) = Discovered::start(20, 100, "", "").await else {
        return;
    };
    assert_eq!(fleet.shard_ids().len(), 20);
    let two: Vec<&Backend> = fleet.backends.iter().take(2).collect();
    fleet.dns.set_records(records(&two)).await;
    assert!(
        eventually(WITHIN, || {
            let looks = fleet.running.gateway.discovery_looks.lock().unwrap();
            looks
                .get("default")
                .and_then(|look| look.last_refusal.clone())
                .is_some()
        })
        .await
    );
    let view = fleet.admin_json("/admin/discovery").await;
    let refusal = view["cells"][0]["last_refusal"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(refusal.contains("18 of the cell's 20"), "{refusal}");
    assert!(
        fleet
            .metric(
                "shuffle_discovery_changes_total",
                "cell=\"default\",outcome=\"refused\""
            )
            .await
            >= 1.0
    );
    // Every shard stays placed and up.
    assert_eq!(fleet.shard_ids().len(), 20);
    for i in 0..20 {
        assert_eq!(fleet.health(&format!("s{i}")), Some("up"), "s{i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_failing_or_garbled_resolver_keeps_the_last_good_membership() {
    let Some(mut fleet) = Discovered::start(4, 50, "", "").await else {
        return;
    };
    let before = fleet.placed();
    const FAILED: &str = "cell=\"default\",outcome=\"failed\"";
    fleet.dns.stop();
    let at_stop = fleet.metric("shuffle_discovery_looks_total", FAILED).await;
    let mut grew = false;
    for _ in 0..200 {
        if fleet.metric("shuffle_discovery_looks_total", FAILED).await > at_stop + 1.0 {
            grew = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(grew, "looks fail while the server is down");
    assert_eq!(fleet.placed(), before);
    assert!((0..4).all(|i| fleet.health(&format!("s{i}")) == Some("up")));
    let view = fleet.admin_json("/admin/discovery").await;
    assert!(view["cells"][0]["last_problem"].is_string(), "{view}");

    // Then a resolver that answers SERVFAIL, REFUSED, junk and garbled
    // answers, reached by a reload that names it.
    let fault = DnsFault::start(Fault::ServFail).await;
    let path = fleet.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(&fleet.dns.addr().to_string(), &fault.addr().to_string());
    std::fs::write(&path, text).unwrap();
    fleet.running.gateway.reload(false).unwrap();
    for mode in [
        Fault::ServFail,
        Fault::Refused,
        Fault::Junk,
        Fault::Garbled,
        Fault::Silent,
    ] {
        fault.set(mode);
        let asked = fault.queries();
        assert!(
            eventually(WITHIN, || fault.queries() > asked + 2).await,
            "{mode:?}: the gateway keeps asking"
        );
        assert_eq!(fleet.placed(), before, "{mode:?}");
        assert!(
            (0..4).all(|i| fleet.health(&format!("s{i}")) == Some("up")),
            "{mode:?}"
        );
        assert_eq!(fleet.get(0).await, StatusCode::OK);
    }
    // And back to a good one: the same shards, nothing changed.
    fleet.dns.restart().await;
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace(&fault.addr().to_string(), &fleet.dns.addr().to_string()),
    )
    .unwrap();
    fleet.running.gateway.reload(false).unwrap();
    assert!(
        eventually(WITHIN, || {
            let looks = fleet.running.gateway.discovery_looks.lock().unwrap();
            looks
                .get("default")
                .is_some_and(|look| look.last_problem.is_none())
        })
        .await
    );
    assert_eq!(fleet.placed(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addition_that_remaps_is_refused_unless_migration_is_allowed() {
    // hmac_modulo places by position: a sixth shard remaps most tenants.
    let Some(mut fleet) = Discovered::start(6, 200, "", "algorithm = \"hmac-modulo\"\n").await
    else {
        return;
    };
    assert_eq!(fleet.shard_ids().len(), 6);
    let before = fleet.placed();
    let seven = Backend::start("s6").await.unwrap();
    let mut all: Vec<&Backend> = fleet.backends.iter().collect();
    all.push(&seven);
    fleet.dns.set_records(records(&all)).await;
    assert!(
        eventually(WITHIN, || {
            let looks = fleet.running.gateway.discovery_looks.lock().unwrap();
            looks
                .get("default")
                .and_then(|look| look.last_refusal.clone())
                .is_some_and(|(_, why)| why.contains("allow_migration"))
        })
        .await
    );
    assert_eq!(fleet.shard_ids().len(), 6, "s6 waits");
    assert_eq!(fleet.placed(), before);
    // Allowed: it applies.
    let path = fleet.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("[discovery]\n", "[discovery]\nallow_migration = true\n"),
    )
    .unwrap();
    fleet.running.gateway.reload(false).unwrap();
    assert!(eventually(WITHIN, || fleet.shard_ids().len() == 7).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_check_resolves_once_and_prints_the_membership() {
    let Some(fleet) = Discovered::start(3, 10, "", "").await else {
        return;
    };
    let checked = runtime::check(&fleet.config_path()).unwrap();
    let text = checked.to_string();
    assert!(
        text.contains(&format!("cell default: 3 shards from dns+srv://{SERVICE}")),
        "{text}"
    );
    for backend in &fleet.backends {
        let line = format!("  {} 127.0.0.1:{}", backend.id(), backend.addr().port());
        assert!(text.contains(&line), "{line} in {text}");
    }
    // A name with no records fails the check, saying which cell and why.
    let path = fleet.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace(SERVICE, "_none._tcp.shards.test")).unwrap();
    let error = runtime::check(&path).unwrap_err().to_string();
    assert!(error.contains("cell \"default\""), "{error}");
    assert!(error.contains("found no shards"), "{error}");
    let _: SocketAddr = fleet.dns.addr();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_fleet_a_replica_that_sees_a_shard_go_and_come_back_tells_the_others() {
    let Some(redis) = testkit::redis::Redis::start().await else {
        return;
    };
    let fleet_table = format!("[fleet]\nstore = \"{}\"\ntimeout_ms = 500\n", redis.url());
    let Some(mut fleet) = Discovered::start_full(5, 5, 50, "", "", &fleet_table).await else {
        return;
    };
    // A second replica of the same configuration that looks at DNS only
    // once an hour: whatever it learns here, it learns through the fleet.
    let path = fleet.dir.path().join("slow.toml");
    let text = std::fs::read_to_string(fleet.config_path()).unwrap();
    std::fs::write(
        &path,
        text.replace("refresh_seconds = 0.1", "refresh_seconds = 3600"),
    )
    .unwrap();
    let slow = runtime::start(Snapshot::load(&path, None).unwrap())
        .await
        .unwrap();
    assert_eq!(Discovered::health_on(&slow, "s2"), Some("up"));

    let four: Vec<&Backend> = fleet.backends.iter().filter(|b| b.id() != "s2").collect();
    fleet.dns.set_records(records(&four)).await;
    assert!(eventually(WITHIN, || fleet.health("s2") == Some("missing")).await);
    assert!(
        eventually(WITHIN, || Discovered::health_on(&slow, "s2")
            == Some("missing"))
        .await,
        "the slow replica takes the missing mark through the fleet: {:?}",
        Discovered::health_on(&slow, "s2")
    );
    // Back: both route to it again.
    let all: Vec<&Backend> = fleet.backends.iter().collect();
    fleet.dns.set_records(records(&all)).await;
    assert!(eventually(WITHIN, || fleet.health("s2") == Some("up")).await);
    assert!(
        eventually(WITHIN, || Discovered::health_on(&slow, "s2") == Some("up")).await,
        "and the return: {:?}",
        Discovered::health_on(&slow, "s2")
    );
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_mark_from_another_replica_never_outlives_this_ones_own_source() {
    let Some(redis) = testkit::redis::Redis::start().await else {
        return;
    };
    let fleet_table = format!("[fleet]\nstore = \"{}\"\ntimeout_ms = 500\n", redis.url());
    let Some(mut fleet) = Discovered::start_full(5, 5, 50, "", "", &fleet_table).await else {
        return;
    };
    // Replica A's source loses s2: A marks it missing for the fleet.
    let four: Vec<&Backend> = fleet.backends.iter().filter(|b| b.id() != "s2").collect();
    fleet.dns.set_records(records(&four)).await;
    assert!(eventually(WITHIN, || fleet.health("s2") == Some("missing")).await);
    // Replica C asks another DNS server, which lists s2: it starts, takes
    // A's mark from the store, and then its own looks lift it (for itself
    // and the fleet) ...
    let all: Vec<&Backend> = fleet.backends.iter().collect();
    let Some(other_dns) = Dnsmasq::start(records(&all)).await else {
        return;
    };
    let path = fleet.dir.path().join("c.toml");
    let text = std::fs::read_to_string(fleet.config_path()).unwrap();
    std::fs::write(
        &path,
        text.replace(&fleet.dns.addr().to_string(), &other_dns.addr().to_string()),
    )
    .unwrap();
    let c = runtime::start(Snapshot::load(&path, None).unwrap())
        .await
        .unwrap();
    assert!(
        eventually(WITHIN, || Discovered::health_on(&c, "s2") == Some("up")).await,
        "C's own source lists s2: {:?}",
        Discovered::health_on(&c, "s2")
    );
    // ... while A, whose source still lists s2 as gone, keeps it out
    // whatever C published.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(fleet.health("s2"), Some("missing"));
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_mark_and_discoverys_mark_never_undo_each_other_in_the_store() {
    use gateway::store::fleet::{Looked, MarkKind, SharedMark};
    let Some(redis) = testkit::redis::Redis::start().await else {
        return;
    };
    let fleet_table = format!("[fleet]\nstore = \"{}\"\ntimeout_ms = 500\n", redis.url());
    let Some(fleet) = Discovered::start_full(3, 3, 10, "", "", &fleet_table).await else {
        return;
    };
    let store = fleet.running.gateway.fleet.clone().unwrap();
    assert!(eventually(WITHIN, || store.is_up()).await);
    // Far in the future, so that nothing the running replica publishes
    // meanwhile is later than these.
    let base = crate::util::unix_now() * 1000 + 1_000_000_000;
    let mark = |failed, drained, missing, step: u64, by: &str| SharedMark {
        cell: "default".into(),
        id: "s1".into(),
        failed,
        drained,
        missing,
        at_ms: base + step,
        by: by.into(),
    };
    // Whether a mark stands in the store.
    let set = |mark: SharedMark, kind| {
        let store = &store;
        async move { store.mark(&mark, kind).await.unwrap() }
    };
    let held = || async {
        match store.look(("", "")).await.unwrap() {
            Looked::Changed(state) => state
                .marks
                .into_iter()
                .find(|mark| mark.id == "s1")
                .map(|mark| (mark.failed, mark.drained, mark.missing)),
            Looked::Unchanged => None,
        }
    };
    // An operator drains s1 on replica a.
    assert!(set(mark(false, true, false, 1, "a"), MarkKind::Operator).await);
    // Replica b, which has not seen the drain yet, finds s1 gone: its
    // missing mark keeps the drain.
    assert!(set(mark(false, false, true, 2, "b"), MarkKind::Discovery).await);
    assert_eq!(held().await, Some((false, true, true)));
    // The operator lifts the drain on a, which has not seen s1 go: the
    // lift keeps discovery's mark.
    assert!(set(mark(false, false, false, 3, "a"), MarkKind::Operator).await);
    assert_eq!(held().await, Some((false, false, true)));
    // b finds s1 back.
    assert!(set(mark(false, false, false, 4, "b"), MarkKind::Discovery).await);
    assert_eq!(held().await, Some((false, false, false)));
    // An earlier mark never stands over a later one.
    assert!(!set(mark(true, false, false, 0, "c"), MarkKind::Operator).await);
    drop(redis);
}
