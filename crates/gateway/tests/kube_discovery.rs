//! Kubernetes discovery through kube's real client and watcher, against the
//! fake API server (`testkit::kube_api`): what a list finds, what a watch
//! reports as pods come, go and change condition, and how it recovers from
//! a stalled watch, a broken one, failing lists and a forgotten version.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gateway::config::{DiscoverySettings, DiscoverySource};
use gateway::discovery::kubernetes;
use gateway::discovery::{Condition, DiscoveryError, Found};
use serde_json::Value;
use testkit::kube_api::{Endpoint, KubeApi, slice};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::pki::Ca;

const NAMESPACE: &str = "prod";
const SERVICE: &str = "shards";
const TOKEN: &str = "dummy-token-5f3a9c";

/// How long anything may take on a busy 2-core machine: a bound that only
/// a hang reaches.
const PATIENCE: Duration = Duration::from_secs(30);

struct Fixture {
    api: KubeApi,
    settings: DiscoverySettings,
    source: DiscoverySource,
    _dir: tempfile::TempDir,
}

async fn fixture(port_name: Option<&str>, watch_timeout: Duration) -> Fixture {
    let api = KubeApi::start(NAMESPACE).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig: PathBuf = api.write_kubeconfig(dir.path(), Some(TOKEN));
    let mut settings = DiscoverySettings::default();
    settings.kubeconfig = Some(kubeconfig);
    settings.watch_timeout = watch_timeout;
    // Generous: a list on a loaded machine must not time out.
    settings.timeout = Duration::from_secs(10);
    let source = DiscoverySource::Kubernetes {
        namespace: NAMESPACE.into(),
        service: SERVICE.into(),
        port_name: port_name.map(str::to_owned),
    };
    Fixture {
        api,
        settings,
        source,
        _dir: dir,
    }
}

const A: Endpoint<'static> = ("shard-a", "10.0.0.1", Some(true), None, Some("zone-1"));
const B: Endpoint<'static> = ("shard-b", "10.0.0.2", None, None, Some("zone-2"));
const C: Endpoint<'static> = ("shard-c", "10.0.1.3", Some(true), Some(false), None);

fn slices(first: &[Endpoint<'_>], second: &[Endpoint<'_>]) -> Vec<Value> {
    vec![
        slice("shards-x1", SERVICE, Some("http"), 8080, first),
        slice("shards-y2", SERVICE, Some("http"), 8080, second),
        // Another service's slice in the same namespace: never reported.
        slice(
            "other-z3",
            "other",
            Some("http"),
            9999,
            &[("other-0", "10.9.9.9", None, None, None)],
        ),
    ]
}

/// Each shard as `id address condition`, for one-line comparisons.
fn seen(found: &[Found]) -> Vec<String> {
    found
        .iter()
        .map(|f| format!("{} {} {}", f.id, f.address, f.condition.name()))
        .collect()
}

struct Watching {
    reports: mpsc::Receiver<Result<Vec<Found>, DiscoveryError>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start_watch(fixture: &Fixture) -> Watching {
    let client = kubernetes::client(&fixture.settings).await.unwrap();
    let (report, reports) = mpsc::channel(64);
    let task = tokio::spawn(kubernetes::watch(
        client,
        fixture.source.clone(),
        fixture.settings.clone(),
        report,
    ));
    Watching { reports, task }
}

impl Watching {
    /// The first report `wanted` accepts, skipping others; panics naming
    /// `what` after [`PATIENCE`].
    async fn until(
        &mut self,
        what: &str,
        wanted: impl Fn(&Result<Vec<Found>, DiscoveryError>) -> bool,
    ) -> Result<Vec<Found>, DiscoveryError> {
        let deadline = Instant::now() + PATIENCE;
        let mut skipped = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, self.reports.recv()).await {
                Ok(Some(report)) if wanted(&report) => return report,
                Ok(Some(report)) => skipped.push(report),
                Ok(None) => panic!("the watch ended before {what}; saw {skipped:?}"),
                Err(_) => panic!("no {what} within {PATIENCE:?}; saw {skipped:?}"),
            }
        }
    }

    /// The first `Ok` report equal to `shards` (as [`seen`] writes them).
    async fn until_set(&mut self, what: &str, shards: &[&str]) -> Vec<Found> {
        self.until(what, |r| {
            r.as_ref().is_ok_and(|found| seen(found) == shards)
        })
        .await
        .unwrap()
    }
}

/// Waits until `ready` holds, or panics naming `what`.
async fn eventually(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !ready() {
        assert!(Instant::now() < deadline, "no {what} within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_list_finds_pods_with_addresses_ports_and_zones() {
    let fixture = fixture(None, Duration::from_secs(290)).await;
    fixture.api.set_slices(slices(&[A, B], &[C]));
    let client = kubernetes::client(&fixture.settings).await.unwrap();
    let found = kubernetes::list_once(&client, &fixture.source, &fixture.settings)
        .await
        .unwrap();
    assert_eq!(
        seen(&found),
        [
            "shard-a 10.0.0.1:8080 ready",
            "shard-b 10.0.0.2:8080 ready",
            "shard-c 10.0.1.3:8080 ready",
        ]
    );
    let zones: Vec<Option<&str>> = found.iter().map(|f| f.zone.as_deref()).collect();
    assert_eq!(zones, [Some("zone-1"), Some("zone-2"), None]);
    // The kubeconfig's token reached the server; the service's label
    // selected the slices.
    assert!(
        fixture
            .api
            .authorizations()
            .iter()
            .all(|a| a == &format!("Bearer {TOKEN}")),
        "{:?}",
        fixture.api.authorizations()
    );
    let requests = fixture.api.requests();
    assert!(
        requests[0].starts_with("/apis/discovery.k8s.io/v1/namespaces/prod/endpointslices?")
            && requests[0].contains("labelSelector=kubernetes.io%2Fservice-name%3Dshards"),
        "{requests:?}"
    );

    // A failing list is the server's error, and never shows the token.
    fixture.api.fail_lists(Some(500));
    let error = kubernetes::list_once(&client, &fixture.source, &fixture.settings)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, DiscoveryError::Server { code, .. } if code.starts_with("500")),
        "{error:?}"
    );
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(TOKEN), "{text}");
    }
}

#[tokio::test]
async fn a_missing_port_name_is_malformed() {
    let fixture = fixture(Some("grpc"), Duration::from_secs(290)).await;
    fixture.api.set_slices(slices(&[A], &[B]));
    let client = kubernetes::client(&fixture.settings).await.unwrap();
    let error = kubernetes::list_once(&client, &fixture.source, &fixture.settings)
        .await
        .unwrap_err();
    match error {
        DiscoveryError::Malformed { problem, .. } => {
            assert!(problem.contains("\"grpc\""), "{problem}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn no_kubeconfig_and_no_cluster_says_how_to_fix_it() {
    let mut settings = DiscoverySettings::default();
    settings.kubeconfig = Some(PathBuf::from("/nonexistent/kubeconfig"));
    let Err(DiscoveryError::Unreachable(problem)) = kubernetes::client(&settings).await else {
        panic!("a missing kubeconfig made a client");
    };
    assert!(problem.contains("discovery.kubeconfig"), "{problem}");
}

#[tokio::test]
async fn a_watch_reports_pods_coming_going_and_changing_condition() {
    let fixture = fixture(Some("http"), Duration::from_secs(290)).await;
    fixture.api.set_slices(slices(&[A], &[B]));
    let mut watching = start_watch(&fixture).await;
    watching
        .until_set(
            "the initial set",
            &["shard-a 10.0.0.1:8080 ready", "shard-b 10.0.0.2:8080 ready"],
        )
        .await;

    fixture.api.set_slices(slices(&[A], &[B, C]));
    watching
        .until_set(
            "the added pod",
            &[
                "shard-a 10.0.0.1:8080 ready",
                "shard-b 10.0.0.2:8080 ready",
                "shard-c 10.0.1.3:8080 ready",
            ],
        )
        .await;

    fixture.api.set_slices(slices(&[], &[B, C]));
    watching
        .until_set(
            "the removed pod",
            &["shard-b 10.0.0.2:8080 ready", "shard-c 10.0.1.3:8080 ready"],
        )
        .await;

    let b_not_ready = ("shard-b", "10.0.0.2", Some(false), None, Some("zone-2"));
    let c_terminating = ("shard-c", "10.0.1.3", Some(false), Some(true), None);
    fixture
        .api
        .set_slices(slices(&[], &[b_not_ready, c_terminating]));
    let found = watching
        .until_set(
            "not ready and terminating",
            &[
                "shard-b 10.0.0.2:8080 not ready",
                "shard-c 10.0.1.3:8080 terminating",
            ],
        )
        .await;
    assert_eq!(found[0].condition, Condition::NotReady);
    assert_eq!(found[1].condition, Condition::Terminating);

    // A slice deleted whole takes its pods with it.
    fixture
        .api
        .set_slices(vec![slice("shards-x1", SERVICE, Some("http"), 8080, &[A])]);
    watching
        .until_set("the deleted slice", &["shard-a 10.0.0.1:8080 ready"])
        .await;
    // One list, then watches only: no polling.
    assert_eq!(fixture.api.lists(), 1);
    let watches: Vec<String> = fixture
        .api
        .requests()
        .into_iter()
        .filter(|r| r.contains("watch=true"))
        .collect();
    assert!(
        watches[0].contains("timeoutSeconds=290") && watches[0].contains("resourceVersion="),
        "{watches:?}"
    );
}

#[tokio::test]
async fn an_unchanged_set_is_not_reported_again() {
    let fixture = fixture(None, Duration::from_secs(290)).await;
    fixture.api.set_slices(slices(&[A], &[]));
    let mut watching = start_watch(&fixture).await;
    watching
        .until_set("the initial set", &["shard-a 10.0.0.1:8080 ready"])
        .await;
    // A label edit changes the slice but not its endpoints.
    let mut edited = slices(&[A], &[]);
    edited[0]["metadata"]["labels"]["edited"] = "yes".into();
    fixture.api.set_slices(edited.clone());
    edited.push(slice("shards-w0", SERVICE, Some("http"), 8080, &[B]));
    fixture.api.set_slices(edited);
    let next = tokio::time::timeout(PATIENCE, watching.reports.recv())
        .await
        .expect("no report of the added pod")
        .unwrap()
        .unwrap();
    assert_eq!(
        seen(&next),
        ["shard-a 10.0.0.1:8080 ready", "shard-b 10.0.0.2:8080 ready"]
    );
}

#[tokio::test]
async fn a_stalled_watch_is_cut_and_started_again() {
    let fixture = fixture(None, Duration::from_secs(1)).await;
    fixture.api.set_slices(slices(&[A], &[]));
    let mut watching = start_watch(&fixture).await;
    watching
        .until_set("the initial set", &["shard-a 10.0.0.1:8080 ready"])
        .await;
    eventually("a watch", || fixture.api.watches() >= 1).await;
    fixture.api.stall_watches(true);
    let before = fixture.api.watches();
    // Made while every watch is stalled: only a new watch can bring it.
    fixture.api.set_slices(slices(&[A], &[B]));
    // A stalled watch is never ended by the server: a new one means the
    // client cut the old.
    eventually("a new watch after the stall", || {
        fixture.api.watches() > before
    })
    .await;
    fixture.api.stall_watches(false);
    watching
        .until_set(
            "the change made while stalled",
            &["shard-a 10.0.0.1:8080 ready", "shard-b 10.0.0.2:8080 ready"],
        )
        .await;
    fixture.api.set_slices(slices(&[A], &[B, C]));
    watching
        .until_set(
            "a change after the stall",
            &[
                "shard-a 10.0.0.1:8080 ready",
                "shard-b 10.0.0.2:8080 ready",
                "shard-c 10.0.1.3:8080 ready",
            ],
        )
        .await;
}

#[tokio::test]
async fn a_broken_watch_is_started_again() {
    let fixture = fixture(None, Duration::from_secs(290)).await;
    fixture.api.set_slices(slices(&[A], &[]));
    let mut watching = start_watch(&fixture).await;
    watching
        .until_set("the initial set", &["shard-a 10.0.0.1:8080 ready"])
        .await;
    eventually("a watch", || fixture.api.watches() >= 1).await;
    let before = fixture.api.watches();
    fixture.api.break_watches();
    eventually("a new watch after the break", || {
        fixture.api.watches() > before
    })
    .await;
    fixture.api.set_slices(slices(&[A], &[B]));
    watching
        .until_set(
            "a change after the break",
            &["shard-a 10.0.0.1:8080 ready", "shard-b 10.0.0.2:8080 ready"],
        )
        .await;
    // Resumed from the version it had: no second list.
    assert_eq!(fixture.api.lists(), 1);
}

#[tokio::test]
async fn failing_lists_are_reported_then_recovered_from() {
    let fixture = fixture(None, Duration::from_secs(290)).await;
    fixture.api.set_slices(slices(&[A], &[B]));
    fixture.api.fail_lists(Some(500));
    let mut watching = start_watch(&fixture).await;
    let error = watching
        .until("the failing list", Result::is_err)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, DiscoveryError::Server { code, .. } if code.starts_with("500")),
        "{error:?}"
    );
    fixture.api.fail_lists(None);
    watching
        .until_set(
            "the set once lists answer",
            &["shard-a 10.0.0.1:8080 ready", "shard-b 10.0.0.2:8080 ready"],
        )
        .await;
    assert!(fixture.api.lists() >= 2);
}

#[tokio::test]
async fn a_forgotten_version_is_listed_again() {
    let fixture = fixture(None, Duration::from_secs(290)).await;
    fixture.api.set_slices(slices(&[A], &[]));
    let mut watching = start_watch(&fixture).await;
    watching
        .until_set("the initial set", &["shard-a 10.0.0.1:8080 ready"])
        .await;
    eventually("a watch", || fixture.api.watches() >= 1).await;
    // The change (shard-a's slice deleted, shard-b's added) is never sent
    // to the watch, and its version is forgotten before the watch starts
    // again: only a new list can bring it, and the list replaces what was
    // known rather than adding to it.
    fixture.api.stall_watches(true);
    fixture
        .api
        .set_slices(vec![slice("shards-y2", SERVICE, Some("http"), 8080, &[B])]);
    fixture.api.forget_history();
    fixture.api.break_watches();
    fixture.api.stall_watches(false);
    let error = watching
        .until("410 Gone", Result::is_err)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, DiscoveryError::Server { code, .. } if code.starts_with("410")),
        "{error:?}"
    );
    watching
        .until_set("the set listed again", &["shard-b 10.0.0.2:8080 ready"])
        .await;
    assert_eq!(fixture.api.lists(), 2);
}

/// A TLS front for the fake API server, with a certificate for 127.0.0.1
/// from `ca`: as a real cluster's API server is reached (its CA, a bearer
/// token). Returns its port.
async fn tls_front(ca: &Ca, behind: std::net::SocketAddr) -> u16 {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let leaf = ca.server(&["127.0.0.1"]);
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.cert.clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(behind).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

/// A kubeconfig for `https://127.0.0.1:PORT` trusting the CA in `ca_file`
/// (relative to the kubeconfig, as kubectl allows) with a bearer token.
fn https_kubeconfig(dir: &std::path::Path, port: u16, ca_file: &str) -> PathBuf {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "c", "cluster": {
            "server": format!("https://127.0.0.1:{port}"),
            "certificate-authority": ca_file,
        } }],
        "users": [{ "name": "u", "user": { "token": TOKEN } }],
        "contexts": [{ "name": "x", "context": { "cluster": "c", "user": "u" } }],
        "current-context": "x",
    });
    let path = dir.join("kubeconfig-https");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

#[tokio::test]
async fn https_with_the_cluster_ca_and_a_token_works_and_never_shows_the_token() {
    let mut fixture = fixture(None, Duration::from_secs(290)).await;
    fixture.api.set_slices(slices(&[A], &[]));
    let ca = Ca::new("cluster CA");
    let port = tls_front(&ca, fixture.api.addr).await;
    let dir = fixture._dir.path().to_owned();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    fixture.settings.kubeconfig = Some(https_kubeconfig(&dir, port, "ca.crt"));
    let client = kubernetes::client(&fixture.settings).await.unwrap();
    let found = kubernetes::list_once(&client, &fixture.source, &fixture.settings)
        .await
        .unwrap();
    assert_eq!(seen(&found), ["shard-a 10.0.0.1:8080 ready"]);
    assert_eq!(fixture.api.authorizations(), [format!("Bearer {TOKEN}")]);

    // A server the CA did not sign is refused, and the error says so
    // without the token.
    let stranger = Ca::new("someone else");
    std::fs::write(dir.join("other.crt"), stranger.pem()).unwrap();
    fixture.settings.kubeconfig = Some(https_kubeconfig(&dir, port, "other.crt"));
    let client = kubernetes::client(&fixture.settings).await.unwrap();
    let error = kubernetes::list_once(&client, &fixture.source, &fixture.settings)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, DiscoveryError::Unreachable(_)),
        "{error:?}"
    );
    assert!(
        error.to_string().to_lowercase().contains("certificate"),
        "{error}"
    );
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(TOKEN), "{text}");
    }
    assert_eq!(fixture.api.authorizations().len(), 1);
}
