//! Kubernetes discovery: a service's EndpointSlices listed and watched
//! through kube's client and watcher.
//!
//! A client comes from `discovery.kubeconfig` or, without one, from the
//! pod's service account. [`list_once`] lists the service's slices once;
//! [`watch`] follows them with kube's watcher (which lists, watches from the
//! list's version, and lists again when the watch falls too far behind) and
//! reports the whole membership after every change. [`endpoints`] turns
//! slices into shards: the pure part, where every odd answer is handled.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use tokio::sync::mpsc;

use super::found::{Condition, DiscoveryError, Found, MAX_FOUND};
use crate::config::{DiscoverySettings, DiscoverySource};

/// The label the EndpointSlice controller puts on a service's slices.
const SERVICE_LABEL: &str = "kubernetes.io/service-name";

/// How much longer than a watch's own timeout a read may wait: the server
/// ends a healthy watch at `timeoutSeconds`, so a read still waiting past
/// that plus this margin is a dead connection.
const READ_MARGIN: Duration = Duration::from_secs(5);

/// A client for the API server: from `settings.kubeconfig` when set (its
/// current context), else in-cluster (the pod's service account). Connects
/// within `settings.timeout`; a read waits at most the watch timeout plus
/// five seconds, so a stalled watch is cut rather than waited on forever.
pub async fn client(settings: &DiscoverySettings) -> Result<kube::Client, DiscoveryError> {
    let mut config = match &settings.kubeconfig {
        Some(path) => {
            // `read_from` also makes the file's relative paths (a CA file
            // next to it) relative to the file, as kubectl does.
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                DiscoveryError::Unreachable(format!(
                    "cannot read the kubeconfig {} (discovery.kubeconfig): {e}",
                    path.display()
                ))
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| {
                    DiscoveryError::Unreachable(format!(
                        "the kubeconfig {} (discovery.kubeconfig) is unusable: {e}",
                        path.display()
                    ))
                })?
        }
        None => Config::incluster().map_err(|e| {
            DiscoveryError::Unreachable(format!(
                "no Kubernetes API to ask: not in a pod with a service account ({e}); \
                 run the gateway in a pod whose service account may list and watch \
                 EndpointSlices, or set discovery.kubeconfig"
            ))
        })?,
    };
    config.connect_timeout = Some(settings.timeout);
    config.read_timeout = Some(settings.watch_timeout + READ_MARGIN);
    // Without this the time a pooled connection sat idle would count
    // against the next answer's read timeout.
    config.reset_reader_on_write = true;
    kube::Client::try_from(config).map_err(|e| {
        DiscoveryError::Unreachable(format!("cannot build a Kubernetes API client: {e}"))
    })
}

/// The namespace, service and port name of a Kubernetes source.
fn parts(source: &DiscoverySource) -> Result<(&str, &str, Option<&str>), DiscoveryError> {
    match source {
        DiscoverySource::Kubernetes {
            namespace,
            service,
            port_name,
        } => Ok((namespace, service, port_name.as_deref())),
        other => Err(DiscoveryError::Unreachable(format!(
            "{other} is not a Kubernetes source"
        ))),
    }
}

/// Lists the service's EndpointSlices once, the whole call bounded by
/// `settings.timeout`.
pub async fn list_once(
    client: &kube::Client,
    source: &DiscoverySource,
    settings: &DiscoverySettings,
) -> Result<Vec<Found>, DiscoveryError> {
    let (namespace, service, port_name) = parts(source)?;
    let server = source.to_string();
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&format!("{SERVICE_LABEL}={service}"));
    let list = tokio::time::timeout(settings.timeout, api.list(&params))
        .await
        .map_err(|_| DiscoveryError::Timeout {
            ms: u64::try_from(settings.timeout.as_millis()).unwrap_or(u64::MAX),
            server: server.clone(),
        })?
        .map_err(|e| from_kube(&server, &e))?;
    endpoints(&list.items, &server, port_name)
}

/// Follows the service's EndpointSlices until `report` is closed: the whole
/// membership once the first list is complete, again after every change
/// that alters it, and an `Err` whenever the watcher fails (it then lists
/// or watches again by itself, after a backoff).
pub async fn watch(
    client: kube::Client,
    source: DiscoverySource,
    settings: DiscoverySettings,
    report: mpsc::Sender<Result<Vec<Found>, DiscoveryError>>,
) {
    let (namespace, service, port_name) = match parts(&source) {
        Ok((namespace, service, port_name)) => (
            namespace.to_owned(),
            service.to_owned(),
            port_name.map(str::to_owned),
        ),
        Err(e) => {
            let _ = report.send(Err(e)).await;
            return;
        }
    };
    let server = source.to_string();
    let api: Api<EndpointSlice> = Api::namespaced(client, &namespace);
    let seconds = u32::try_from(settings.watch_timeout.as_secs().max(1)).unwrap_or(u32::MAX);
    let config = watcher::Config::default()
        .labels(&format!("{SERVICE_LABEL}={service}"))
        .timeout(seconds);
    let mut events = watch_stream(api, config).default_backoff().boxed();
    // The slices as last known, by name; `relisting` gathers a fresh list
    // (between Init and InitDone) that then replaces them whole.
    let mut slices: BTreeMap<String, EndpointSlice> = BTreeMap::new();
    let mut relisting: Option<BTreeMap<String, EndpointSlice>> = None;
    let mut last: Option<Result<Vec<Found>, DiscoveryError>> = None;
    loop {
        let event = tokio::select! {
            () = report.closed() => return,
            event = events.next() => event,
        };
        let Some(event) = event else {
            // The watcher's stream never ends; if it did, nothing more
            // would come.
            return;
        };
        let outcome = match event {
            Ok(Event::Init) => {
                relisting = Some(BTreeMap::new());
                continue;
            }
            Ok(Event::InitApply(slice)) => {
                if let Some(list) = relisting.as_mut() {
                    list.insert(slice.metadata.name.clone().unwrap_or_default(), slice);
                }
                continue;
            }
            Ok(Event::InitDone) => {
                slices = relisting.take().unwrap_or_default();
                endpoints_of(&slices, &server, port_name.as_deref())
            }
            Ok(Event::Apply(slice)) => {
                slices.insert(slice.metadata.name.clone().unwrap_or_default(), slice);
                if relisting.is_some() {
                    continue;
                }
                endpoints_of(&slices, &server, port_name.as_deref())
            }
            Ok(Event::Delete(slice)) => {
                slices.remove(slice.metadata.name.as_deref().unwrap_or_default());
                if relisting.is_some() {
                    continue;
                }
                endpoints_of(&slices, &server, port_name.as_deref())
            }
            Err(e) => Err(from_watcher(&server, &e)),
        };
        // An unchanged membership (a slice's label edited, the same error
        // again while the watcher backs off) is not news.
        if last.as_ref() == Some(&outcome) {
            continue;
        }
        last = Some(outcome.clone());
        if report.send(outcome).await.is_err() {
            return;
        }
    }
}

fn endpoints_of(
    slices: &BTreeMap<String, EndpointSlice>,
    server: &str,
    port_name: Option<&str>,
) -> Result<Vec<Found>, DiscoveryError> {
    let slices: Vec<EndpointSlice> = slices.values().cloned().collect();
    endpoints(&slices, server, port_name)
}

/// What a kube error says, as a discovery error: an HTTP status from the
/// API server, an unreadable answer, or no connection. Nothing here holds
/// credentials: kube's errors name the URL and the failure, never headers.
fn from_kube(server: &str, error: &kube::Error) -> DiscoveryError {
    match error {
        kube::Error::Api(status) => DiscoveryError::Server {
            server: server.to_owned(),
            code: format!("{} {}: {}", status.code, status.reason, status.message),
        },
        kube::Error::SerdeError(e) => DiscoveryError::Malformed {
            server: server.to_owned(),
            problem: e.to_string(),
        },
        other => DiscoveryError::Unreachable(format!("{server}: {}", chain(other))),
    }
}

/// An error and its sources, joined: kube's top-level messages ("HyperError:
/// client error (Connect)") say little without them.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn from_watcher(server: &str, error: &watcher::Error) -> DiscoveryError {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => from_kube(server, e),
        watcher::Error::WatchError(status) => DiscoveryError::Server {
            server: server.to_owned(),
            code: format!("{} {}: {}", status.code, status.reason, status.message),
        },
        watcher::Error::NoResourceVersion => DiscoveryError::Malformed {
            server: server.to_owned(),
            problem: "a list or watch event without metadata.resourceVersion".into(),
        },
    }
}

/// The shards in `slices`, sorted by id: each endpoint of an IPv4 or IPv6
/// slice (FQDN slices name no address) on the slice's port, `port_name`'s
/// when given, else its only one.
///
/// An endpoint's id is its pod's name (`targetRef` of kind `Pod`), else its
/// hostname, else its first address. Its condition: `terminating` true is
/// [`Condition::Terminating`], else `ready` false is
/// [`Condition::NotReady`], else [`Condition::Ready`] (Kubernetes: an
/// unknown readiness is ready). An id twice (a pod in two slices while it
/// moves between them) is kept once: its ready entry, else its first. An
/// endpoint without a usable address is left out; a slice without the port
/// is left out, and if no slice has it the answer is
/// [`DiscoveryError::Malformed`], as is one past [`MAX_FOUND`].
pub fn endpoints(
    slices: &[EndpointSlice],
    server: &str,
    port_name: Option<&str>,
) -> Result<Vec<Found>, DiscoveryError> {
    let malformed = |problem: String| DiscoveryError::Malformed {
        server: server.to_owned(),
        problem,
    };
    let mut found: HashMap<String, Found> = HashMap::new();
    // Whether some slice with endpoints lacked the named port, and whether
    // any had it: only "none had it" is a misconfiguration (one slice
    // without it may be a rollout renaming the port).
    let mut lacked_port = false;
    let mut had_port = false;
    for slice in slices {
        if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        let slice_endpoints = slice.endpoints.as_deref().unwrap_or_default();
        if slice_endpoints.is_empty() {
            continue;
        }
        let ports = slice.ports.as_deref().unwrap_or_default();
        let port = match port_name {
            Some(name) => ports.iter().find(|p| p.name.as_deref() == Some(name)),
            None => match ports {
                [] => None,
                [only] => Some(only),
                _ => {
                    let mut names: Vec<&str> =
                        ports.iter().filter_map(|p| p.name.as_deref()).collect();
                    names.sort_unstable();
                    names.dedup();
                    return Err(malformed(format!(
                        "the service has {} ports ({}); name the port: {server}:PORT_NAME",
                        ports.len(),
                        names.join(", ")
                    )));
                }
            },
        };
        // A port without a number means "all ports" (or is junk): no
        // address to reach a shard on.
        let Some(port) = port
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            lacked_port = true;
            continue;
        };
        had_port = true;
        for endpoint in slice_endpoints {
            let Some(ip) = endpoint
                .addresses
                .first()
                .and_then(|a| a.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let pod = endpoint
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| r.name.as_deref());
            let id = [pod, endpoint.hostname.as_deref()]
                .into_iter()
                .flatten()
                .find(|name| !name.is_empty())
                .map_or_else(|| ip.to_string(), str::to_owned);
            let conditions = endpoint.conditions.as_ref();
            let condition = if conditions.and_then(|c| c.terminating) == Some(true) {
                Condition::Terminating
            } else if conditions.and_then(|c| c.ready) == Some(false) {
                Condition::NotReady
            } else {
                Condition::Ready
            };
            let shard = Found {
                id: id.clone(),
                address: SocketAddr::new(ip, port),
                zone: endpoint.zone.clone().filter(|z| !z.is_empty()),
                condition,
            };
            match found.get(&id) {
                Some(kept)
                    if kept.condition == Condition::Ready || condition != Condition::Ready => {}
                _ => {
                    found.insert(id, shard);
                }
            }
        }
    }
    if let Some(name) = port_name
        && lacked_port
        && !had_port
    {
        return Err(malformed(format!(
            "no EndpointSlice of the service has a port named {name:?}; name one of the service's ports"
        )));
    }
    if found.len() > MAX_FOUND {
        return Err(malformed(format!(
            "{} endpoints, more than the {MAX_FOUND} one source may report",
            found.len()
        )));
    }
    let mut found: Vec<Found> = found.into_values().collect();
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str = "kubernetes://prod/shards";

    fn slice(value: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(value).unwrap()
    }

    fn endpoint(
        pod: &str,
        ip: &str,
        ready: Option<bool>,
        terminating: Option<bool>,
    ) -> serde_json::Value {
        serde_json::json!({
            "addresses": [ip],
            "conditions": { "ready": ready, "terminating": terminating },
            "targetRef": { "kind": "Pod", "name": pod },
            "zone": "z1",
        })
    }

    fn one_port(
        name: &str,
        ports: serde_json::Value,
        endpoints: Vec<serde_json::Value>,
    ) -> EndpointSlice {
        slice(serde_json::json!({
            "metadata": { "name": name },
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints,
        }))
    }

    #[test]
    fn endpoints_become_shards_sorted_by_pod() {
        let slices = [one_port(
            "a",
            serde_json::json!([{ "name": "http", "port": 8080 }]),
            vec![
                endpoint("pod-b", "10.0.0.2", Some(false), None),
                endpoint("pod-a", "10.0.0.1", None, None),
                endpoint("pod-c", "10.0.0.3", Some(true), Some(true)),
            ],
        )];
        let found = endpoints(&slices, SERVER, None).unwrap();
        let seen: Vec<(&str, String, Condition)> = found
            .iter()
            .map(|f| (f.id.as_str(), f.address.to_string(), f.condition))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("pod-a", "10.0.0.1:8080".into(), Condition::Ready),
                ("pod-b", "10.0.0.2:8080".into(), Condition::NotReady),
                ("pod-c", "10.0.0.3:8080".into(), Condition::Terminating),
            ]
        );
        assert_eq!(found[0].zone.as_deref(), Some("z1"));
        // The named port picks the same one.
        assert_eq!(endpoints(&slices, SERVER, Some("http")).unwrap(), found);
    }

    #[test]
    fn ids_fall_back_to_hostname_then_address() {
        let slices = [one_port(
            "a",
            serde_json::json!([{ "port": 80 }]),
            vec![
                serde_json::json!({ "addresses": ["10.0.0.9"], "hostname": "web-0",
                    "targetRef": { "kind": "Node", "name": "node-1" } }),
                serde_json::json!({ "addresses": ["10.0.0.8"], "targetRef": { "kind": "Pod", "name": "" } }),
                serde_json::json!({ "addresses": ["fd00::1"] }),
            ],
        )];
        let ids: Vec<String> = endpoints(&slices, SERVER, None)
            .unwrap()
            .into_iter()
            .map(|f| f.id)
            .collect();
        assert_eq!(ids, ["10.0.0.8", "fd00::1", "web-0"]);
    }

    #[test]
    fn ports_are_chosen_or_the_answer_is_malformed() {
        let two =
            serde_json::json!([{ "name": "http", "port": 80 }, { "name": "grpc", "port": 9090 }]);
        let slices = [one_port(
            "a",
            two,
            vec![endpoint("p", "10.0.0.1", None, None)],
        )];
        let problem = endpoints(&slices, SERVER, None).unwrap_err().to_string();
        assert!(
            problem.contains("name the port: kubernetes://prod/shards:PORT_NAME"),
            "{problem}"
        );
        let found = endpoints(&slices, SERVER, Some("grpc")).unwrap();
        assert_eq!(found[0].address.port(), 9090);
        let problem = endpoints(&slices, SERVER, Some("admin"))
            .unwrap_err()
            .to_string();
        assert!(problem.contains("\"admin\""), "{problem}");
        // One slice lacking the port is skipped while another has it.
        let other = one_port(
            "b",
            serde_json::json!([{ "name": "grpc", "port": 9090 }]),
            vec![endpoint("q", "10.0.0.2", None, None)],
        );
        let found = endpoints(&[slices[0].clone(), other.clone()], SERVER, Some("http")).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id, "p");
        // Nothing at all is an empty fleet, not a misconfiguration.
        assert_eq!(endpoints(&[], SERVER, Some("http")).unwrap(), vec![]);
    }

    #[test]
    fn a_pod_in_two_slices_is_kept_once_ready_first() {
        let port = serde_json::json!([{ "port": 80 }]);
        let old = one_port(
            "a",
            port.clone(),
            vec![endpoint("p", "10.0.0.1", Some(false), None)],
        );
        let new = one_port("b", port, vec![endpoint("p", "10.0.0.1", Some(true), None)]);
        for slices in [[old.clone(), new.clone()], [new, old]] {
            let found = endpoints(&slices, SERVER, None).unwrap();
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].condition, Condition::Ready);
        }
    }

    #[test]
    fn odd_answers_are_skipped_without_panics() {
        let slices = [
            slice(serde_json::json!({ "metadata": {}, "addressType": "FQDN",
                "ports": [{ "port": 80 }], "endpoints": [{ "addresses": ["example.com"] }] })),
            slice(serde_json::json!({ "metadata": {}, "addressType": "IPv4" })),
            one_port(
                "c",
                serde_json::json!([{ "port": -1 }]),
                vec![endpoint("p", "10.0.0.1", None, None)],
            ),
            one_port(
                "d",
                serde_json::json!([{ "port": 70000 }]),
                vec![endpoint("q", "10.0.0.2", None, None)],
            ),
            one_port(
                "e",
                serde_json::json!([{ "port": 80 }]),
                vec![
                    serde_json::json!({ "addresses": [] }),
                    serde_json::json!({ "addresses": ["not-an-ip"] }),
                    serde_json::json!({ "addresses": ["10.0.0.3"], "targetRef": {} }),
                ],
            ),
        ];
        let found = endpoints(&slices, SERVER, None).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id, "10.0.0.3");
    }

    #[test]
    fn too_many_is_malformed() {
        let many: Vec<serde_json::Value> = (0..=MAX_FOUND)
            .map(|i| {
                endpoint(
                    &format!("p{i}"),
                    &format!("10.1.{}.{}", i / 256, i % 256),
                    None,
                    None,
                )
            })
            .collect();
        let slices = [one_port("a", serde_json::json!([{ "port": 80 }]), many)];
        assert!(matches!(
            endpoints(&slices, SERVER, None),
            Err(DiscoveryError::Malformed { .. })
        ));
    }
}
