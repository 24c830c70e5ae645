//! A discovered cell through a fake Kubernetes API server (the test's own
//! hyper handler serving EndpointSlice lists and watches as the real one
//! does): pods added, removed, not ready and terminating reach the
//! gateway's membership as the guard says; a watch that stalls or breaks
//! is started again by the kube client while the last good membership
//! keeps serving.

use std::collections::BTreeSet;
use std::time::Duration;

use backend::Backend;
use gateway::Snapshot;
use gateway::config::writer::{GatewayToml, tenants, tenants_toml};
use gateway::runtime::{self, Running};
use serde_json::Value;
use testkit::kube_api::{KubeApi, slice};

use crate::util::eventually;

const WITHIN: Duration = Duration::from_secs(30);

/// One slice per pod, so that each test backend keeps its own port on
/// 127.0.0.1: (pod, port, ready, terminating).
fn slices(pods: &[(&str, u16, Option<bool>, Option<bool>)]) -> Vec<Value> {
    pods.iter()
        .map(|(pod, port, ready, terminating)| {
            slice(
                &format!("shards-{pod}"),
                "shards",
                Some("http"),
                *port,
                &[(pod, "127.0.0.1", *ready, *terminating, Some("zone-a"))],
            )
        })
        .collect()
}

struct Kube {
    _dir: tempfile::TempDir,
    api: KubeApi,
    backends: Vec<Backend>,
    running: Running,
    tenants: Vec<(String, String)>,
}

impl Kube {
    fn ready(&self, count: usize) -> Vec<(&str, u16, Option<bool>, Option<bool>)> {
        self.backends
            .iter()
            .take(count)
            .map(|b| (b.id(), b.addr().port(), Some(true), None))
            .collect()
    }

    fn health(&self, id: &str) -> Option<&'static str> {
        crate::util::availability(&self.running, id)
    }

    fn shard_ids(&self) -> Vec<String> {
        crate::util::shard_ids(&self.running)
    }

    fn placed(&self) -> Vec<BTreeSet<String>> {
        crate::util::members_by_id(&self.running, &self.tenants)
    }

    fn missing_why(&self, id: &str) -> Option<&'static str> {
        let snapshot = self.running.gateway.snapshot();
        snapshot
            .memberships
            .get("default")?
            .member(id)?
            .missing
            .map(|missing| missing.why)
    }
}

async fn start(listed: usize) -> Kube {
    let mut backends = Vec::new();
    for i in 0..6 {
        backends.push(Backend::start(&format!("pod-{i}")).await.unwrap());
    }
    let api = KubeApi::start("shards").await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path(), Some("a-fake-service-account-token"));
    let tenants = tenants(60);
    let pods: Vec<(&str, u16, Option<bool>, Option<bool>)> = backends
        .iter()
        .take(listed)
        .map(|b| (b.id(), b.addr().port(), Some(true), None))
        .collect();
    api.set_slices(slices(&pods));
    let path = GatewayToml {
        tables: vec![(
            "health".into(),
            "interval_ms = 100\ntimeout_ms = 200\nrise = 1\nfall = 2\n".into(),
        )],
        extra: format!(
            "[discovery]\nkubeconfig = \"{}\"\nrefresh_seconds = 0.1\ntimeout_ms = 2000\nwatch_timeout_seconds = 2\nremoval_grace_seconds = 600\nmax_removed_fraction = 0.5\n",
            kubeconfig.display()
        ),
        cell_lines: "discovery = \"kubernetes://shards/shards:http\"\n".into(),
        tenants: tenants_toml(&tenants),
        ..GatewayToml::default()
    }
    .write(dir.path())
    .unwrap();
    let running = runtime::start(Snapshot::load(&path, None).unwrap_or_else(|e| panic!("{e}")))
        .await
        .unwrap();
    Kube {
        _dir: dir,
        api,
        backends,
        running,
        tenants,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_added_removed_not_ready_and_terminating_reach_the_membership() {
    let kube = start(4).await;
    assert_eq!(kube.shard_ids(), ["pod-0", "pod-1", "pod-2", "pod-3"]);
    let snapshot = kube.running.gateway.snapshot();
    assert_eq!(
        snapshot
            .find_shard("default", "pod-0")
            .unwrap()
            .zone
            .as_deref(),
        Some("zone-a")
    );
    drop(snapshot);

    // Added.
    kube.api.set_slices(slices(&kube.ready(5)));
    assert!(eventually(WITHIN, || kube.shard_ids().len() == 5).await);

    // Not ready, then terminating: missing, with why, still placed.
    let before = kube.placed();
    let mut pods = kube.ready(5);
    pods[1].2 = Some(false);
    pods[2].3 = Some(true);
    kube.api.set_slices(slices(&pods));
    // A change marks its shards missing just before it installs the
    // snapshot that says why (out of rotation first): wait for both.
    assert!(
        eventually(WITHIN, || kube.health("pod-1") == Some("missing")
            && kube.health("pod-2") == Some("missing")
            && kube.missing_why("pod-1").is_some()
            && kube.missing_why("pod-2").is_some())
        .await
    );
    assert_eq!(kube.missing_why("pod-1"), Some("not ready"));
    assert_eq!(kube.missing_why("pod-2"), Some("terminating"));
    assert_eq!(kube.placed(), before, "nobody moved");

    // Ready again; and one removed outright is missing too.
    let mut pods = kube.ready(5);
    pods.remove(3);
    kube.api.set_slices(slices(&pods));
    assert!(
        eventually(WITHIN, || kube.health("pod-1") == Some("up")
            && kube.health("pod-2") == Some("up")
            && kube.health("pod-3") == Some("missing")
            && kube.missing_why("pod-3").is_some())
        .await,
        "{:?} {:?} {:?}",
        kube.health("pod-1"),
        kube.health("pod-2"),
        kube.health("pod-3")
    );
    assert_eq!(kube.missing_why("pod-3"), Some("no longer listed"));
    assert_eq!(kube.placed(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_broken_watch_is_started_again_and_the_last_membership_holds() {
    let kube = start(4).await;
    // Stalled: nothing arrives, the membership holds, and the client
    // starts a new watch (watch_timeout_seconds = 2) that sees what
    // changed meanwhile.
    kube.api.stall_watches(true);
    let watches = kube.api.watches();
    kube.api.set_slices(slices(&kube.ready(5)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // (A list the client makes when a watch ends on its own may bring the
    // addition early; what must not happen is losing a shard.)
    assert!((0..4).all(|i| kube.health(&format!("pod-{i}")) == Some("up")));
    kube.api.stall_watches(false);
    assert!(
        eventually(WITHIN, || kube.shard_ids().len() == 5).await,
        "the change made during the stall arrives: {:?}",
        kube.shard_ids()
    );
    assert!(kube.api.watches() > watches, "a new watch was started");

    // Broken: the connection ends mid-stream; the client lists and
    // watches again, and a later change arrives.
    let lists = kube.api.lists() + kube.api.watches();
    kube.api.break_watches();
    assert!(eventually(WITHIN, || kube.api.lists() + kube.api.watches() > lists).await);
    kube.api.set_slices(slices(&kube.ready(6)));
    assert!(eventually(WITHIN, || kube.shard_ids().len() == 6).await);

    // Lists that fail: the membership holds.
    kube.api.fail_lists(Some(500));
    kube.api.break_watches();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(kube.shard_ids().len(), 6);
    assert!((0..6).all(|i| kube.health(&format!("pod-{i}")) == Some("up")));
    kube.api.fail_lists(None);
}
