//! A fake Kubernetes API server that serves EndpointSlices the way the real
//! one does (list, and watch as a chunked stream of JSON events), so that
//! discovery is tested through kube's real client and watcher; and the
//! controls a test needs to make it misbehave (stalled or broken watches,
//! failing lists).
//!
//! What it answers, and how:
//!
//! * `GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices` with
//!   `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`, joined by commas),
//!   `limit` and `continue` (pages; a continue token from before a change
//!   is answered `410 Gone`, as an expired one is), and `resourceVersion`
//!   / `resourceVersionMatch` (accepted; the current state is always at
//!   least as new as asked): an `EndpointSliceList` whose
//!   `metadata.resourceVersion` is the store's current version.
//! * The same with `watch=true` (or `watch=1`) and `resourceVersion=N`:
//!   every change after `N` that matches the selector, then each later
//!   one as it happens, one JSON event a line. `N` older than the retained
//!   history gets the real server's answer: a `200` stream whose only event
//!   is an `ERROR` holding a `410 Gone` Status, upon which a client lists
//!   again. `timeoutSeconds` ends the stream cleanly (after a `BOOKMARK`
//!   when `allowWatchBookmarks=true`). `sendInitialEvents=true` (streaming
//!   lists) sends every current object as `ADDED`, then a `BOOKMARK`
//!   annotated `k8s.io/initial-events-end`.
//! * Anything else: `404` with a Status body.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

const LIST_PREFIX: &str = "/apis/discovery.k8s.io/v1/namespaces/";

/// One change kept for watches: its version, its type and the object as
/// it was then.
#[derive(Clone)]
struct Change {
    version: u64,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Store {
    /// The newest resourceVersion handed out.
    version: u64,
    /// The current slices by name, each with its own resourceVersion.
    objects: BTreeMap<String, Value>,
    /// Every change since `oldest` (watches from a version before it are
    /// answered 410 Gone).
    history: Vec<Change>,
    /// The oldest version a watch may start from.
    oldest: u64,
    stalled: bool,
    fail_lists: Option<u16>,
    /// Bumped by [`KubeApi::break_watches`]: a watch that sees it move
    /// ends its connection with an error.
    breaks: u64,
    lists: usize,
    watches: usize,
    /// Every request's path and query, in order.
    requests: Vec<String>,
    /// Every `Authorization` header received.
    authorizations: Vec<String>,
}

struct Shared {
    namespace: String,
    store: Mutex<Store>,
    /// Bumped on every change of the store, so that watches look again.
    changed: watch::Sender<u64>,
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        // A test that panicked while holding it has failed already; the
        // state is still readable.
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn poke(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// The fake API server: serves one namespace's EndpointSlices on
/// `127.0.0.1`, until dropped.
pub struct KubeApi {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl KubeApi {
    /// Starts one serving `namespace` (any other namespace is empty), with
    /// no slices yet.
    pub async fn start(namespace: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            namespace: namespace.to_owned(),
            store: Mutex::new(Store {
                version: 1,
                oldest: 1,
                ..Store::default()
            }),
            changed: watch::channel(0).0,
        });
        let serving = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(answer(&shared, request)) }
                    });
                    // A connection ended by a broken watch is an error here,
                    // and the point of breaking it.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            shared,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Makes the namespace's slices exactly `slices` (each needs a
    /// `metadata.name`): a new name is `ADDED`, a changed one `MODIFIED`,
    /// a missing one `DELETED`, each change with the next resourceVersion,
    /// as open watches then see them. An unchanged slice makes no event.
    pub fn set_slices(&self, slices: Vec<Value>) {
        let mut store = self.shared.store();
        let mut wanted = BTreeMap::new();
        for mut slice in slices {
            let name = slice["metadata"]["name"]
                .as_str()
                .expect("a slice needs metadata.name")
                .to_owned();
            slice["metadata"]["namespace"] = json!(self.shared.namespace);
            wanted.insert(name, slice);
        }
        let gone: Vec<String> = store
            .objects
            .keys()
            .filter(|name| !wanted.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            let mut object = store.objects.remove(&name).unwrap();
            store.version += 1;
            let version = store.version;
            object["metadata"]["resourceVersion"] = json!(version.to_string());
            store.history.push(Change {
                version,
                kind: "DELETED",
                object,
            });
        }
        for (name, mut slice) in wanted {
            let kind = match store.objects.get(&name) {
                None => "ADDED",
                Some(old) => {
                    let mut old = old.clone();
                    old["metadata"]["resourceVersion"] = Value::Null;
                    slice["metadata"]["resourceVersion"] = Value::Null;
                    if old == slice {
                        continue;
                    }
                    "MODIFIED"
                }
            };
            store.version += 1;
            let version = store.version;
            slice["metadata"]["resourceVersion"] = json!(version.to_string());
            store.objects.insert(name, slice.clone());
            store.history.push(Change {
                version,
                kind,
                object: slice,
            });
        }
        drop(store);
        self.shared.poke();
    }

    /// Forgets every change so far, as etcd's compaction does: a watch
    /// started from an older version is then answered `410 Gone`.
    pub fn forget_history(&self) {
        let mut store = self.shared.store();
        store.history.clear();
        store.oldest = store.version;
    }

    /// `true`: open watches send nothing more (no events, no end at their
    /// `timeoutSeconds`) and keep their connections open, as behind a dead
    /// network path; new watches stall too. `false`: they carry on.
    pub fn stall_watches(&self, stall: bool) {
        self.shared.store().stalled = stall;
        self.shared.poke();
    }

    /// Ends every open watch's connection abruptly (no last chunk).
    pub fn break_watches(&self) {
        self.shared.store().breaks += 1;
        self.shared.poke();
    }

    /// `Some(code)`: every list is answered `code` with a Status body;
    /// `None`: lists answer again.
    pub fn fail_lists(&self, code: Option<u16>) {
        self.shared.store().fail_lists = code;
    }

    /// How many lists were asked for (failed ones too).
    pub fn lists(&self) -> usize {
        self.shared.store().lists
    }

    /// How many watches were asked for.
    pub fn watches(&self) -> usize {
        self.shared.store().watches
    }

    /// Every request's path and query so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.shared.store().requests.clone()
    }

    /// Every `Authorization` header received so far.
    pub fn authorizations(&self) -> Vec<String> {
        self.shared.store().authorizations.clone()
    }

    /// Writes a kubeconfig in `dir` whose current context reaches this
    /// server over plain HTTP, in its namespace, with `token` as the bearer
    /// token when given (else no credentials); returns its path.
    pub fn write_kubeconfig(&self, dir: &Path, token: Option<&str>) -> PathBuf {
        let user = match token {
            Some(token) => json!({ "token": token }),
            None => json!({}),
        };
        // JSON is YAML: kube reads it as a kubeconfig.
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "fake", "cluster": { "server": self.url() } }],
            "users": [{ "name": "fake", "user": user }],
            "contexts": [{
                "name": "fake",
                "context": { "cluster": "fake", "user": "fake", "namespace": self.shared.namespace }
            }],
            "current-context": "fake",
        });
        let path = dir.join("kubeconfig");
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        path
    }
}

/// One endpoint of [`slice`]: its pod, IP address, `ready`, `terminating`
/// (`None`: the condition is left out, as Kubernetes may) and zone.
pub type Endpoint<'a> = (
    &'a str,
    &'a str,
    Option<bool>,
    Option<bool>,
    Option<&'a str>,
);

/// An EndpointSlice of `service` named `name`, with one port (`port_name`
/// `None`: unnamed, as for a single-port service) and an endpoint for each
/// pod, its address type IPv6 when the first address has a `:`.
pub fn slice(
    name: &str,
    service: &str,
    port_name: Option<&str>,
    port: u16,
    endpoints: &[Endpoint<'_>],
) -> Value {
    let ipv6 = endpoints.first().is_some_and(|e| e.1.contains(':'));
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(pod, ip, ready, terminating, zone)| {
            let mut conditions = serde_json::Map::new();
            if let Some(ready) = ready {
                conditions.insert("ready".into(), json!(ready));
                conditions.insert("serving".into(), json!(ready));
            }
            if let Some(terminating) = terminating {
                conditions.insert("terminating".into(), json!(terminating));
            }
            let mut endpoint = json!({
                "addresses": [ip],
                "conditions": conditions,
                "targetRef": { "kind": "Pod", "name": pod, "namespace": "ignored" },
            });
            if let Some(zone) = zone {
                endpoint["zone"] = json!(zone);
            }
            endpoint
        })
        .collect();
    let mut port = json!({ "port": port, "protocol": "TCP" });
    if let Some(port_name) = port_name {
        port["name"] = json!(port_name);
    }
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": if ipv6 { "IPv6" } else { "IPv4" },
        "ports": [port],
        "endpoints": endpoints,
    })
}

/// A body fed through a channel: whole answers are sent and the sender
/// dropped; watches send events as they come, and an `Err` ends the
/// connection abruptly.
struct ChannelBody(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.get_mut()
            .0
            .poll_recv(cx)
            .map(|item| item.map(|chunk| chunk.map(Frame::data)))
    }
}

fn whole(status: StatusCode, body: &Value) -> Response<ChannelBody> {
    let (send, receive) = mpsc::channel(1);
    let mut text = serde_json::to_vec(body).unwrap();
    text.push(b'\n');
    send.try_send(Ok(Bytes::from(text))).unwrap();
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(ChannelBody(receive))
        .unwrap()
}

/// A `Status` body, as the API server answers failures.
fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn failure(code: u16, reason: &str, message: &str) -> Response<ChannelBody> {
    let status_code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    whole(status_code, &status(code, reason, message))
}

/// One requirement of a label selector.
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

fn parse_selector(text: &str) -> Result<Vec<Requirement>, String> {
    let mut requirements = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let requirement = if let Some((key, value)) = part.split_once("!=") {
            Requirement::NotEquals(key.trim().into(), value.trim().into())
        } else if let Some((key, value)) = part.split_once("==") {
            Requirement::Equals(key.trim().into(), value.trim().into())
        } else if let Some((key, value)) = part.split_once('=') {
            Requirement::Equals(key.trim().into(), value.trim().into())
        } else if part.contains(' ') || part.contains('(') {
            return Err(format!(
                "unable to parse requirement: {part:?} (the fake knows =, ==, !=, exists and !key)"
            ));
        } else if let Some(key) = part.strip_prefix('!') {
            Requirement::Absent(key.into())
        } else {
            Requirement::Exists(part.into())
        };
        requirements.push(requirement);
    }
    Ok(requirements)
}

fn matches(requirements: &[Requirement], object: &Value) -> bool {
    let labels = &object["metadata"]["labels"];
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    requirements.iter().all(|requirement| match requirement {
        Requirement::Equals(key, value) => label(key) == Some(value.as_str()),
        Requirement::NotEquals(key, value) => label(key) != Some(value.as_str()),
        Requirement::Exists(key) => label(key).is_some(),
        Requirement::Absent(key) => label(key).is_none(),
    })
}

fn answer(shared: &Arc<Shared>, request: Request<Incoming>) -> Response<ChannelBody> {
    let path = request.uri().path().to_owned();
    let query: HashMap<String, String> = request
        .uri()
        .query()
        .map(|q| {
            url_pairs(q)
                .into_iter()
                .collect::<HashMap<String, String>>()
        })
        .unwrap_or_default();
    {
        let mut store = shared.store();
        store.requests.push(request.uri().to_string());
        if let Some(auth) = request.headers().get("authorization") {
            store
                .authorizations
                .push(String::from_utf8_lossy(auth.as_bytes()).into_owned());
        }
    }
    let namespace = path
        .strip_prefix(LIST_PREFIX)
        .and_then(|rest| rest.strip_suffix("/endpointslices"))
        .filter(|ns| !ns.contains('/'));
    let Some(namespace) = namespace else {
        return failure(
            404,
            "NotFound",
            &format!("the server could not find {path}"),
        );
    };
    if request.method() != hyper::Method::GET {
        return failure(405, "MethodNotAllowed", "the fake serves GET only");
    }
    let selector = match parse_selector(query.get("labelSelector").map_or("", String::as_str)) {
        Ok(selector) => selector,
        Err(problem) => return failure(400, "BadRequest", &problem),
    };
    let same_namespace = namespace == shared.namespace;
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    if watching {
        return start_watch(shared, &query, selector, same_namespace);
    }
    list(shared, &query, &selector, same_namespace)
}

/// Splits `a=b&c=d` and decodes `%XX` and `+`.
fn url_pairs(query: &str) -> Vec<(String, String)> {
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' => {
                    let hex = bytes
                        .get(i + 1..i + 3)
                        .and_then(|hex| std::str::from_utf8(hex).ok())
                        .and_then(|hex| u8::from_str_radix(hex, 16).ok());
                    match hex {
                        Some(byte) => {
                            out.push(byte);
                            i += 2;
                        }
                        None => out.push(b'%'),
                    }
                }
                byte => out.push(byte),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

fn list(
    shared: &Arc<Shared>,
    query: &HashMap<String, String>,
    selector: &[Requirement],
    same_namespace: bool,
) -> Response<ChannelBody> {
    let mut store = shared.store();
    store.lists += 1;
    if let Some(code) = store.fail_lists {
        return failure(code, "InternalError", "lists fail (the test asked)");
    }
    let items: Vec<Value> = if same_namespace {
        store
            .objects
            .values()
            .filter(|object| matches(selector, object))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    // A continue token is `VERSION/OFFSET`: good only while nothing has
    // changed (the real server keeps a snapshot until compaction; "changed"
    // stands in for "compacted").
    let start = match query.get("continue").filter(|c| !c.is_empty()) {
        None => 0,
        Some(token) => {
            let parsed = token
                .split_once('/')
                .and_then(|(v, o)| Some((v.parse::<u64>().ok()?, o.parse::<usize>().ok()?)));
            match parsed {
                Some((version, offset)) if version == store.version => offset,
                Some(_) => {
                    return failure(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result.",
                    );
                }
                None => return failure(400, "BadRequest", "bad continue token"),
            }
        }
    };
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let page: Vec<Value> = items.iter().skip(start).take(limit).cloned().collect();
    let mut metadata = json!({ "resourceVersion": store.version.to_string() });
    if start.saturating_add(limit) < items.len() {
        metadata["continue"] = json!(format!("{}/{}", store.version, start + limit));
        metadata["remainingItemCount"] = json!(items.len() - start - limit);
    }
    whole(
        StatusCode::OK,
        &json!({
            "kind": "EndpointSliceList",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": metadata,
            "items": page,
        }),
    )
}

fn event(kind: &str, object: &Value) -> Result<Bytes, std::io::Error> {
    let mut line = serde_json::to_vec(&json!({ "type": kind, "object": object })).unwrap();
    line.push(b'\n');
    Ok(Bytes::from(line))
}

fn bookmark(version: u64, initial_end: bool) -> Value {
    let mut metadata = json!({ "resourceVersion": version.to_string() });
    if initial_end {
        metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    json!({
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": metadata,
    })
}

fn start_watch(
    shared: &Arc<Shared>,
    query: &HashMap<String, String>,
    selector: Vec<Requirement>,
    same_namespace: bool,
) -> Response<ChannelBody> {
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        // The real server's default is a random 30 to 60 minutes.
        .unwrap_or(1800);
    let bookmarks = query.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    let initial_events = query.get("sendInitialEvents").map(String::as_str) == Some("true");
    let since = query
        .get("resourceVersion")
        .map(|v| v.parse::<u64>().unwrap_or(0))
        .unwrap_or(0);
    let (send, receive) = mpsc::channel(16);
    let mut store = shared.store();
    store.watches += 1;
    let mut backlog: Vec<Result<Bytes, std::io::Error>> = Vec::new();
    let mut from = since;
    if initial_events || since == 0 {
        // "0" (or none): start from the current state, every object as
        // ADDED (the real server's "any version" watch).
        for object in store.objects.values() {
            if same_namespace && matches(&selector, object) {
                backlog.push(event("ADDED", object));
            }
        }
        if initial_events {
            backlog.push(event("BOOKMARK", &bookmark(store.version, true)));
        }
        from = store.version;
    } else if since < store.oldest {
        backlog.push(event(
            "ERROR",
            &status(
                410,
                "Expired",
                &format!("too old resource version: {since} ({})", store.oldest),
            ),
        ));
        drop(store);
        for item in backlog {
            let _ = send.try_send(item);
        }
        return Response::builder()
            .header("content-type", "application/json")
            .body(ChannelBody(receive))
            .unwrap();
    }
    let breaks = store.breaks;
    drop(store);
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut changed = shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let mut backlog = backlog.into_iter();
        loop {
            // What to send now, or how to end, decided under the lock.
            let (pending, stalled, broken) = {
                let store = shared.store();
                let broken = store.breaks != breaks;
                let pending: Vec<Change> = if store.stalled || broken {
                    Vec::new()
                } else {
                    store
                        .history
                        .iter()
                        .filter(|c| c.version > from)
                        .cloned()
                        .collect()
                };
                (pending, store.stalled, broken)
            };
            if broken {
                let _ = send
                    .send(Err(std::io::Error::other("watch broken (the test asked)")))
                    .await;
                return;
            }
            if !stalled {
                for item in backlog.by_ref() {
                    if send.send(item).await.is_err() {
                        return;
                    }
                }
                for change in pending {
                    from = change.version;
                    if same_namespace
                        && matches(&selector, &change.object)
                        && send.send(event(change.kind, &change.object)).await.is_err()
                    {
                        return;
                    }
                }
            }
            tokio::select! {
                _ = changed.changed() => {}
                () = send.closed() => return,
                () = tokio::time::sleep_until(deadline), if !stalled => {
                    if bookmarks {
                        let version = shared.store().version.max(from);
                        let _ = send.send(event("BOOKMARK", &bookmark(version, false))).await;
                    }
                    return;
                }
            }
        }
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(ChannelBody(receive))
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode() {
        let pairs = url_pairs("labelSelector=kubernetes.io%2Fservice-name%3Dshards&limit=500&x");
        assert_eq!(
            pairs,
            vec![
                (
                    "labelSelector".into(),
                    "kubernetes.io/service-name=shards".into()
                ),
                ("limit".into(), "500".into()),
                ("x".into(), String::new()),
            ]
        );
        assert_eq!(url_pairs("a=%2"), vec![("a".into(), "%2".into())]);
    }

    #[test]
    fn selectors_match_labels() {
        let object = slice("s", "shards", None, 80, &[]);
        let selector = parse_selector("kubernetes.io/service-name=shards").unwrap();
        assert!(matches(&selector, &object));
        let selector = parse_selector("kubernetes.io/service-name==other").unwrap();
        assert!(!matches(&selector, &object));
        let selector = parse_selector("kubernetes.io/service-name,!nope").unwrap();
        assert!(matches(&selector, &object));
        assert!(parse_selector("a in (b)").is_err());
    }
}
