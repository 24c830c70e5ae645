//! A test backend that can be told to misbehave.
//!
//! The gateway's tests, the drills and the demo all need shards that fail in
//! realistic ways: a killed process (connection refused), a hung one that
//! accepts and never answers (blackhole), a slow one, one that returns
//! errors at some rate, one that flaps, one that resets mid-response, and
//! the sicker ones a real fleet shows: bodies that stall or trickle, heads
//! without bodies, health checks that hang, flood or answer garbage, a
//! process that stops reading its sockets, and a stateful shard that
//! answers `404` for data it never received ([`Mode`]).
//! [`Backend`] is one shard: it answers `200` with a small JSON body naming
//! itself and the tenant the gateway said it was serving, answers its health
//! path, records every request's headers when asked to ([`Recording`]), and
//! switches behaviour on demand, in process ([`Backend::set_mode`]) or from
//! another one through its control API ([`control`]).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use backend::{Backend, Mode};
//!
//! let shard = Backend::start("s0").await?;
//! let control = shard.serve_control("127.0.0.1:0".parse().unwrap()).await?;
//! shard.set_mode("health-stall".parse().unwrap());
//! assert_eq!(shard.mode(), Mode::HealthStallBody);
//! # let _ = control;
//! # Ok(())
//! # }
//! ```

pub mod control;
mod data_store;
pub mod grpc;
mod mode;
mod raw;

pub use data_store::MAX_ENTRIES as DATA_STORE_MAX_ENTRIES;
pub use grpc::{PROTOCOL_SYNTAX, Protocol, UnsupportedMode};
pub use mode::{
    DEFAULT_CRASH, LATE_BYTES_HEADER, MODE_SYNTAX, Mode, POISON_HEADER, ParseModeError,
};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinHandle;

/// Whether a backend keeps what it sees of each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recording {
    /// Keeps every request's method, path, headers and body length, for
    /// tests to inspect with [`Backend::seen`].
    Every,
    /// Counts requests and keeps nothing else: for benchmarks and long
    /// runs. Copying each header of each request would cost more than
    /// answering it, and would charge a proxy that forwards more headers
    /// for the backend's bookkeeping.
    Off,
}

/// What the backend saw of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Every header, lowercase names, in order.
    pub headers: Vec<(String, String)>,
    /// Body length in bytes.
    pub body_len: usize,
}

impl Seen {
    /// The values of one header.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

#[derive(Debug)]
struct Shared {
    id: String,
    health_path: String,
    /// The current mode; the supervisor subscribes to it, handlers read it
    /// per request.
    mode: watch::Sender<Mode>,
    recording: Recording,
    /// What it speaks, fixed at start.
    protocol: Protocol,
    seen: Mutex<Vec<Seen>>,
    requests: AtomicU64,
    /// Crashes caused by the poison marker so far.
    crashes: AtomicU64,
    /// Unasked copies of answers written so far ([`Mode::LateBytes`]).
    late_answers: AtomicU64,
    /// Raised by a handler that saw the poison marker; the supervisor
    /// carries the crash out, as it owns the listener and the connections.
    crash: Notify,
    /// What it received in [`Mode::DataStore`] (kept across switches, so
    /// a shard that flaps does not lose its data).
    data: data_store::DataStore,
}

impl Shared {
    fn mode(&self) -> Mode {
        self.mode.borrow().clone()
    }

    /// The poison marker arrived: the crash is counted and left to the
    /// supervisor, which drops this connection with the others; a crashed
    /// process answers nothing, so this never completes.
    async fn crash(&self) {
        self.crashes.fetch_add(1, Ordering::Relaxed);
        self.crash.notify_one();
        std::future::pending::<()>().await;
    }

    /// Counts a data-path request and keeps what `seen` says of it when
    /// recording; `seen` is only called then, as copying headers costs.
    fn note(&self, seen: impl FnOnce() -> Seen) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if self.recording == Recording::Every {
            self.seen.lock().expect("seen lock").push(seen());
        }
    }

    /// The healthy answer's body, the same from hyper and from the raw loop.
    fn answer(&self, tenant: &str, method: &str, path: &str, body_len: usize) -> String {
        serde_json::json!({
            "shard": self.id,
            "tenant": tenant,
            "method": method,
            "path": path,
            "body_len": body_len,
        })
        .to_string()
    }
}

/// Switches one backend's mode from anywhere: a cheap, cloneable handle
/// for the control API and for tests.
#[derive(Debug, Clone)]
pub struct ModeSwitch {
    shared: Arc<Shared>,
}

impl ModeSwitch {
    /// The current mode.
    pub fn get(&self) -> Mode {
        self.shared.mode()
    }

    /// How many times the poison marker crashed the backend.
    pub fn crashes(&self) -> u64 {
        self.shared.crashes.load(Ordering::Relaxed)
    }

    /// Switches behaviour, as [`Backend::set_mode`] does.
    pub fn set(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    /// Switches behaviour when the backend's protocol can act `mode` out
    /// ([`Protocol::acts_out`]); otherwise keeps the mode it has.
    pub fn try_set(&self, mode: Mode) -> Result<(), UnsupportedMode> {
        if !self.shared.protocol.acts_out(&mode) {
            return Err(UnsupportedMode {
                mode: mode.to_string(),
            });
        }
        self.set(mode);
        Ok(())
    }
}

/// One running test shard.
#[derive(Debug)]
pub struct Backend {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    /// Control API servers started by [`Backend::serve_control`], stopped
    /// with the backend.
    control: Mutex<Vec<JoinHandle<()>>>,
}

impl Backend {
    /// Starts a backend on `127.0.0.1` with an ephemeral port.
    pub async fn start(id: &str) -> std::io::Result<Self> {
        Self::start_on(id, "127.0.0.1:0".parse().expect("address")).await
    }

    /// Starts a backend on a given address (port 0 for an ephemeral one)
    /// that records every request.
    pub async fn start_on(id: &str, addr: SocketAddr) -> std::io::Result<Self> {
        Self::start_with(id, addr, Recording::Every).await
    }

    /// Starts a backend on a given address (port 0 for an ephemeral one)
    /// that records requests as `recording` says.
    pub async fn start_with(
        id: &str,
        addr: SocketAddr,
        recording: Recording,
    ) -> std::io::Result<Self> {
        Self::start_speaking(id, addr, recording, Protocol::Http1).await
    }

    /// Starts a backend speaking `protocol` on a given address (port 0 for
    /// an ephemeral one) that records requests as `recording` says.
    pub async fn start_speaking(
        id: &str,
        addr: SocketAddr,
        recording: Recording,
        protocol: Protocol,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Healthy);
        let shared = Arc::new(Shared {
            id: id.to_owned(),
            health_path: "/healthz".into(),
            mode,
            recording,
            protocol,
            seen: Mutex::new(Vec::new()),
            requests: AtomicU64::new(0),
            crashes: AtomicU64::new(0),
            late_answers: AtomicU64::new(0),
            crash: Notify::new(),
            data: data_store::DataStore::default(),
        });
        let task = tokio::spawn(supervise(listener, addr, Arc::clone(&shared), mode_rx));
        Ok(Self {
            addr,
            shared,
            task,
            control: Mutex::new(Vec::new()),
        })
    }

    /// The backend's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The backend's base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it speaks.
    pub fn protocol(&self) -> Protocol {
        self.shared.protocol
    }

    /// The shard id it answers as.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// Switches behaviour. Killing closes the listener and every open
    /// connection; any other mode reopens the listener on the same port.
    /// Switching into or out of the modes hyper cannot act out (see
    /// [`Mode`]: the stalls, trickles, health faults and `Unread`) also
    /// closes every open connection, so the next ones start in the new mode.
    pub fn set_mode(&self, mode: Mode) {
        self.switch().set(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    /// A handle that switches this backend's mode from elsewhere.
    pub fn switch(&self) -> ModeSwitch {
        ModeSwitch {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Serves the control API ([`control`]) on `addr` (port 0 for an
    /// ephemeral one) until the backend is dropped, and returns the address
    /// it listens on.
    pub async fn serve_control(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let task = tokio::spawn(control::serve(listener, self.switch()));
        self.control.lock().expect("control lock").push(task);
        Ok(bound)
    }

    /// Requests answered or refused by the handler (health checks excluded).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// How many times the poison marker crashed this backend
    /// ([`Mode::CrashOnPoison`]).
    pub fn crashes(&self) -> u64 {
        self.shared.crashes.load(Ordering::Relaxed)
    }

    /// How many unasked copies of answers this backend has written
    /// ([`Mode::LateBytes`]): each is in the client's socket once counted.
    pub fn late_answers(&self) -> u64 {
        self.shared.late_answers.load(Ordering::Relaxed)
    }

    /// Every non-health request seen so far; always empty when started
    /// with [`Recording::Off`].
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("seen lock").clone()
    }

    /// How many (tenant, path) entries it holds in [`Mode::DataStore`].
    pub fn stored(&self) -> usize {
        self.shared.data.len()
    }

    /// Forgets what was seen.
    pub fn clear_seen(&self) {
        self.shared.seen.lock().expect("seen lock").clear();
        self.shared.requests.store(0, Ordering::Relaxed);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
        for task in self.control.lock().expect("control lock").drain(..) {
            task.abort();
        }
    }
}

/// Keeps a listener open while the mode wants one, closing it (and every
/// open connection) when killed; flapping toggles between the two on a timer.
async fn supervise(
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    mut mode: watch::Receiver<Mode>,
) {
    let mut listener = Some(listener);
    let mut flap_up = true;
    let (stop, _) = broadcast::channel::<()>(1);
    loop {
        let current = mode.borrow_and_update().clone();
        let want = |mode: &Mode, flap_up: bool| match mode {
            Mode::Killed => false,
            Mode::Flapping(_) => flap_up,
            _ => true,
        };
        if want(&current, flap_up) && listener.is_none() {
            listener = rebind(addr).await;
        }
        if !want(&current, flap_up) {
            listener = None;
        }
        let flap_timer = async {
            match &current {
                Mode::Flapping(period) => tokio::time::sleep(*period).await,
                _ => std::future::pending::<()>().await,
            }
        };
        let crash_for = match &current {
            Mode::CrashOnPoison(down) => Some(*down),
            _ => None,
        };
        let poisoned = async {
            match crash_for {
                Some(_) => shared.crash.notified().await,
                None => std::future::pending::<()>().await,
            }
        };
        let mut crashed = false;
        tokio::select! {
            () = accept_loop(listener.as_ref(), &shared, &stop) => {}
            changed = mode.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = flap_timer => flap_up = !flap_up,
            () = poisoned => crashed = true,
        }
        if let (true, Some(down)) = (crashed, crash_for) {
            // A crash: every connection goes (the poison request's with
            // them, unanswered), the port refuses for `down`, then the top
            // of the loop binds it again. A mode switch meanwhile ends the
            // crash early, so a drill can heal a crashed shard at once.
            let _ = stop.send(());
            listener = None;
            tokio::select! {
                () = tokio::time::sleep(down) => {}
                changed = mode.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            continue;
        }
        let next = mode.borrow().clone();
        // A shard that stops listening also drops the connections it has,
        // as a killed process would. A connection is served by hyper or by
        // the raw loop for its whole life, and the gateway keeps pooled
        // connections alive, so a switch that involves a raw mode drops
        // them too: otherwise the new mode would reach only new connections.
        let serving_changes = next != current && (next.is_raw() || current.is_raw());
        if !want(&next, flap_up) || serving_changes {
            let _ = stop.send(());
        }
    }
}

/// Binds the backend's port again. The old socket may take a moment to
/// release it, so this retries for up to a second.
async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    for _ in 0..100 {
        if let Ok(listener) = TcpListener::bind(addr).await {
            return Some(listener);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

async fn accept_loop(
    listener: Option<&TcpListener>,
    shared: &Arc<Shared>,
    stop: &broadcast::Sender<()>,
) {
    let Some(listener) = listener else {
        return std::future::pending().await;
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = Arc::clone(shared);
        let mut stopped = stop.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                () = serve_connection(stream, shared) => {}
                _ = stopped.recv() => {}
            }
        });
    }
}

/// Serves one connection as the mode at accept time says; the supervisor
/// drops it when the mode moves to one served differently.
async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let mode = shared.mode();
    if mode == Mode::Unread {
        // Holding the socket without reading leaves the request in the
        // kernel's buffer, as a wedged process would.
        let _held = stream;
        return std::future::pending().await;
    }
    if shared.protocol == Protocol::Grpc {
        grpc::serve(stream, shared).await;
        return;
    }
    if mode.is_raw() {
        let _ = raw::serve(stream, shared).await;
        return;
    }
    let service = service_fn(move |request| handle(Arc::clone(&shared), request));
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// The response body type: a full body, or one that breaks off.
type Body = BoxBody<Bytes, std::io::Error>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let mode = shared.mode();
    let is_health = request.uri().path() == shared.health_path;
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if !is_health {
        shared.note(|| Seen {
            method: parts.method.to_string(),
            path: parts
                .uri
                .path_and_query()
                .map_or("/".into(), |pq| pq.to_string()),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body_len: body.len(),
        });
    }
    if mode.is_raw() && raw::affects(&mode, is_health) {
        // The mode moved to one hyper cannot act out while this connection
        // was open; the supervisor is closing it, so say nothing meanwhile.
        std::future::pending::<()>().await;
    }
    match mode {
        Mode::CrashOnPoison(_) if !is_health && parts.headers.contains_key(POISON_HEADER) => {
            shared.crash().await;
        }
        Mode::Blackhole => std::future::pending::<()>().await,
        Mode::Slow(delay) => tokio::time::sleep(delay).await,
        Mode::Errors { status, rate } if fastrand::f64() < rate => {
            let mut response = Response::new(full(&b"{\"error\":\"injected\"}"[..]));
            *response.status_mut() =
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return Ok(response);
        }
        Mode::ResetMidResponse if !is_health => {
            // Headers and a first chunk go out, then the stream fails, which
            // makes hyper abort the connection mid-body.
            return Ok(Response::new(BrokenBody { sent: false }.boxed()));
        }
        _ => {}
    }
    let tenant = parts
        .headers
        .get("x-shuffle-tenant")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if mode == Mode::DataStore && !is_health {
        let (status, body) = shared
            .data
            .respond(&parts.method, tenant, parts.uri.path(), body);
        let mut response = Response::new(full(body));
        *response.status_mut() = status;
        return Ok(response);
    }
    let answer = shared.answer(tenant, parts.method.as_str(), parts.uri.path(), body.len());
    Ok(Response::new(full(answer)))
}

/// A body that sends one chunk and then fails.
struct BrokenBody {
    sent: bool,
}

impl hyper::body::Body for BrokenBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.sent {
            return std::task::Poll::Ready(Some(Err(std::io::Error::other("injected reset"))));
        }
        self.sent = true;
        std::task::Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"{\"partial\":")))))
    }
}
