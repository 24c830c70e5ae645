//! The Redis server replicas share, through the `redis` crate: one
//! multiplexed connection, kept by a background task that connects, logs
//! in, loads the scripts its users registered and reconnects with backoff.
//!
//! Its users (today the global rate limits, [`crate::limit::store`]) send
//! commands and scripts through [`Redis::call`], which keeps the rules that
//! make a shared store safe to put in front of a request: a call never
//! waits longer than the configured timeout, and never at all while there
//! is no working connection (it fails with [`Fault::Unreachable`] at once,
//! so the caller falls back to what the replica knows itself); a reply the
//! caller cannot use is a [`Fault::BadReply`] and ends the connection; a
//! connection whose calls keep timing out with no answer at all is
//! stalled, and dropped.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisConnectionInfo, RedisError, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::RedisUrl;

pub mod fleet;
pub mod tenants;

/// Calls that may wait for an answer at once; more are refused at once
/// ([`Fault::Unreachable`]: Redis is not keeping up).
const QUEUE: usize = 4096;

/// The first wait before reconnecting, doubled after each failure.
const BACKOFF_MIN: Duration = Duration::from_millis(50);

/// The longest wait between reconnection attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Connecting, logging in and loading the scripts, together.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a connection may go without an answer before it is pinged.
const PING_EVERY: Duration = Duration::from_secs(1);

/// Timeouts in a row (with no answer for ten timeouts) that mark the
/// connection stalled: one slow answer after a quiet spell is not a stall.
const STALL_TIMEOUTS: u32 = 3;

/// Why a call got no usable answer from Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No working connection (refused, lost, logging in, reconnecting), or
    /// too many calls already waiting.
    Unreachable,
    /// No answer within the timeout.
    Timeout,
    /// An answer that is not what the caller asked for.
    BadReply,
}

impl Fault {
    /// Its metric label.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Unreachable => "unreachable",
            Fault::Timeout => "timeout",
            Fault::BadReply => "bad_reply",
        }
    }
}

/// Where the server is, how long a call may take, and the scripts every
/// connection loads before it is used.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// Where it is, and how to log in.
    pub url: RedisUrl,
    /// The longest one call may take.
    pub timeout: Duration,
    /// The scripts' text, loaded at each handshake: a connection is
    /// working once they are (and a server that cannot even answer that
    /// is never used).
    pub scripts: &'static [&'static str],
    /// Names the store in logs ("limits.tenant.store").
    pub key: &'static str,
    /// What the server may send for each call ([`REPLY_BYTES`] for calls
    /// whose replies are a few numbers).
    pub reply_bytes: i64,
    /// TLS to the server (`rediss://`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// A working connection.
struct Live {
    connection: MultiplexedConnection,
    /// What the server may still send it ([`Metered`]).
    allowance: Arc<AtomicI64>,
    /// What it may send for each call ([`RedisSettings::reply_bytes`]).
    reply_bytes: i64,
}

impl Live {
    /// The connection, with `reply_bytes` more that its server may send
    /// for the call about to be made on it.
    fn for_call(&self) -> MultiplexedConnection {
        // Capped: what calls answered with less than their share leave
        // does not add up, so a server quiet for an hour cannot then send
        // an hour's worth of allowances at once.
        let cap = self.reply_bytes * ALLOWANCE_CALLS;
        let _ = self
            .allowance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left.saturating_add(self.reply_bytes).min(cap))
            });
        self.connection.clone()
    }
}

/// What the connection task and the callers share.
struct Shared {
    settings: RedisSettings,
    /// The working connection, when there is one.
    live: ArcSwapOption<Live>,
    /// Wakes the task: the connection was dropped, or the store closed.
    wake: Notify,
    /// Every [`Redis`] handle is gone.
    closed: AtomicBool,
    /// Calls waiting for an answer now.
    waiting: AtomicUsize,
    /// When the last answer came, in microseconds after `epoch`.
    last_answer: AtomicU64,
    /// Calls that timed out since the last answer.
    timeouts: AtomicU32,
    /// What `last_answer` counts from.
    epoch: Instant,
}

impl Shared {
    fn micros(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Drops `live` (when it is still the connection) and wakes the task
    /// to reconnect.
    fn drop_connection(&self, live: &Arc<Live>, why: &'static str) {
        let previous = self.live.compare_and_swap(live, None);
        if previous
            .as_ref()
            .is_some_and(|previous| Arc::ptr_eq(previous, live))
        {
            tracing::debug!(
                store = self.settings.key,
                why,
                "Redis connection dropped; reconnecting"
            );
            self.wake.notify_one();
        }
    }
}

/// A Redis server, shared by every replica: cheap to call from the request
/// path, and never holding a caller up while it is down.
pub struct Redis {
    shared: Arc<Shared>,
    /// The task was started.
    started: AtomicBool,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("url", &self.shared.settings.url)
            .field("timeout", &self.shared.settings.timeout)
            .field("up", &self.is_up())
            .finish()
    }
}

impl Redis {
    /// A store for `settings`; it connects when [`Redis::start`]ed.
    pub fn new(settings: RedisSettings) -> Self {
        Self {
            shared: Arc::new(Shared {
                settings,
                live: ArcSwapOption::empty(),
                wake: Notify::new(),
                closed: AtomicBool::new(false),
                waiting: AtomicUsize::new(0),
                last_answer: AtomicU64::new(0),
                timeouts: AtomicU32::new(0),
                epoch: Instant::now(),
            }),
            started: AtomicBool::new(false),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &RedisSettings {
        &self.shared.settings
    }

    /// Whether there is a working connection now (the scripts loaded):
    /// while there is not, every call fails at once.
    pub fn is_up(&self) -> bool {
        self.shared.live.load().is_some()
    }

    /// `host:port`, for logs (never the URL, which may carry a password).
    pub fn address(&self) -> String {
        let url = &self.shared.settings.url;
        format!("{}:{}", url.host, url.port)
    }

    /// Starts the connection task, once (inside a runtime: a snapshot may
    /// be built outside one, so nothing connects before the first call).
    pub fn start(&self) {
        if self.started.load(Ordering::Relaxed) || self.started.swap(true, Ordering::Relaxed) {
            return;
        }
        tokio::spawn(run(Arc::clone(&self.shared)));
    }

    /// Runs `call` on the connection: its value, or why there is none.
    /// `call` gets its own handle of the multiplexed connection, and
    /// `check` judges the reply: `None` is a [`Fault::BadReply`], and ends
    /// the connection.
    pub async fn call<T, F, Fut>(
        &self,
        call: F,
        check: impl FnOnce(Value) -> Option<T>,
    ) -> Result<T, Fault>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<Value, RedisError>>,
    {
        self.call_within(self.shared.settings.timeout, call, check)
            .await
    }

    /// [`Redis::call`] with its own `timeout`, for calls off the request
    /// path (a look for changes, a write-back) that may wait longer.
    pub async fn call_within<T, F, Fut>(
        &self,
        timeout: Duration,
        call: F,
        check: impl FnOnce(Value) -> Option<T>,
    ) -> Result<T, Fault>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<Value, RedisError>>,
    {
        self.start();
        let shared = &*self.shared;
        let Some(live) = shared.live.load_full() else {
            return Err(Fault::Unreachable);
        };
        if shared.waiting.fetch_add(1, Ordering::Relaxed) >= QUEUE {
            shared.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(Fault::Unreachable);
        }
        let answer = tokio::time::timeout(timeout, call(live.for_call())).await;
        shared.waiting.fetch_sub(1, Ordering::Relaxed);
        match answer {
            Ok(Ok(value)) => {
                shared.last_answer.store(shared.micros(), Ordering::Relaxed);
                shared.timeouts.store(0, Ordering::Relaxed);
                check(value).ok_or_else(|| {
                    shared.drop_connection(&live, "unexpected reply");
                    Fault::BadReply
                })
            }
            Ok(Err(error)) => {
                let (fault, why) = judge(&error);
                shared.drop_connection(&live, why);
                Err(fault)
            }
            Err(_) => {
                // Stalled: several calls in a row timed out and nothing
                // has been answered for ten timeouts.
                let stall = (shared.settings.timeout * 10).max(Duration::from_millis(50));
                let quiet = shared
                    .micros()
                    .saturating_sub(shared.last_answer.load(Ordering::Relaxed));
                if shared.timeouts.fetch_add(1, Ordering::Relaxed) + 1 >= STALL_TIMEOUTS
                    && Duration::from_micros(quiet) >= stall
                {
                    shared.drop_connection(&live, "stalled");
                }
                Err(Fault::Timeout)
            }
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        self.shared.live.store(None);
        self.shared.wake.notify_one();
    }
}

/// The fault of a call that failed, and why (for the debug log: never the
/// server's words, which may quote what was sent).
fn judge(error: &RedisError) -> (Fault, &'static str) {
    match error.kind() {
        ErrorKind::Parse => (Fault::BadReply, "not RESP"),
        ErrorKind::Server(_) | ErrorKind::Extension | ErrorKind::UnexpectedReturnType => {
            (Fault::BadReply, "an error reply")
        }
        _ => (Fault::Unreachable, "lost"),
    }
}

/// The connection task: connect, wait until the connection is dropped,
/// back off, again; until every [`Redis`] handle is gone.
async fn run(shared: Arc<Shared>) {
    let mut backoff = BACKOFF_MIN;
    while !shared.closed.load(Ordering::Relaxed) {
        if let Some(live) = shared.live.load_full() {
            tokio::select! {
                () = shared.wake.notified() => {}
                () = tokio::time::sleep(PING_EVERY) => check_idle(&shared, &live).await,
            }
            drop(live);
            if shared.live.load().is_some() || shared.closed.load(Ordering::Relaxed) {
                continue;
            }
            // Dropped: a pause before the next try, so a server that
            // breaks every connection is not reconnected to at the rate
            // of requests.
        } else {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&shared.settings)).await {
                Ok(Ok(live)) => {
                    backoff = BACKOFF_MIN;
                    shared.last_answer.store(shared.micros(), Ordering::Relaxed);
                    shared.timeouts.store(0, Ordering::Relaxed);
                    if !shared.closed.load(Ordering::Relaxed) {
                        shared.live.store(Some(Arc::new(live)));
                    }
                    continue;
                }
                Ok(Err(why)) => {
                    tracing::debug!(store = shared.settings.key, why, "Redis handshake failed")
                }
                Err(_) => tracing::debug!(store = shared.settings.key, "Redis handshake timed out"),
            }
        }
        // Woken early only to close (a wake-up left by the drop is not
        // one).
        let until = Instant::now() + backoff;
        while Instant::now() < until && !shared.closed.load(Ordering::Relaxed) {
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                () = shared.wake.notified() => {}
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Pings a connection no call has had an answer on for [`PING_EVERY`]:
/// a server that went away or stopped (SIGSTOP) while nobody asked is
/// noticed, so [`Redis::is_up`] tells the truth and calls fail at once
/// instead of each waiting out its timeout.
async fn check_idle(shared: &Shared, live: &Arc<Live>) {
    let quiet = shared
        .micros()
        .saturating_sub(shared.last_answer.load(Ordering::Relaxed));
    if Duration::from_micros(quiet) < PING_EVERY {
        return;
    }
    let mut connection = live.for_call();
    let command = redis::cmd("PING");
    let ping = command.query_async::<Value>(&mut connection);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, ping).await {
        Ok(Ok(Value::SimpleString(pong))) if pong == "PONG" => {
            shared.last_answer.store(shared.micros(), Ordering::Relaxed);
        }
        Ok(Ok(_)) => shared.drop_connection(live, "PING answered with something else"),
        Ok(Err(error)) => shared.drop_connection(live, judge(&error).1),
        Err(_) => shared.drop_connection(live, "no answer to PING"),
    }
}

/// Connects, logs in, selects the database and loads the scripts.
async fn handshake(settings: &RedisSettings) -> Result<Live, &'static str> {
    let url = &settings.url;
    let mut login = RedisConnectionInfo::default()
        .set_db(i64::from(url.db))
        // No `CLIENT SETINFO`: one command fewer, and nothing to answer
        // before the scripts load.
        .set_skip_set_lib_name();
    if let Some(password) = url.password() {
        login = login.set_password(password);
        if let Some(user) = &url.username {
            login = login.set_username(user);
        }
    }
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(HANDSHAKE_TIMEOUT))
        // Each call has its own timeout (ours, shorter).
        .set_response_timeout(None);
    // Our own socket, so that what the server sends is metered: the crate
    // buffers whatever length a reply announces.
    let socket = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|_| "cannot connect")?;
    let _ = socket.set_nodelay(true);
    let allowance = Arc::new(AtomicI64::new(HANDSHAKE_BYTES));
    let mut connection = match &settings.tls {
        None => open(&login, metered(socket, &allowance), config).await?,
        Some(tls) => {
            let name = rustls_pki_types::ServerName::try_from(url.host.clone())
                .map_err(|_| "the store's host is not a name a certificate can carry")?;
            let stream = tokio_rustls::TlsConnector::from(Arc::clone(tls))
                .connect(name, socket)
                .await
                .map_err(
                    |_| "TLS handshake failed: check the store's certificate against the CA",
                )?;
            open(&login, metered(stream, &allowance), config).await?
        }
    };
    for script in settings.scripts {
        // Not `Script::load_async`: it asserts (in debug builds) that the
        // digest is the one it computed, and a forged server's is not.
        let digest: Value = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(*script)
            .query_async(&mut connection)
            .await
            .map_err(|_| "SCRIPT LOAD failed")?;
        match digest {
            Value::BulkString(sha) if sha.len() == 40 && sha.iter().all(u8::is_ascii_hexdigit) => {}
            _ => return Err("SCRIPT LOAD did not answer with a script digest"),
        }
    }
    Ok(Live {
        connection,
        allowance,
        reply_bytes: settings.reply_bytes,
    })
}

/// `socket`, metered by `allowance`.
fn metered<S>(socket: S, allowance: &Arc<AtomicI64>) -> Metered<S> {
    Metered {
        socket,
        allowance: Arc::clone(allowance),
    }
}

/// Logs in over `metered` and starts the connection's driver task.
async fn open<S>(
    login: &RedisConnectionInfo,
    metered: Metered<S>,
    config: AsyncConnectionConfig,
) -> Result<MultiplexedConnection, &'static str>
where
    S: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static,
{
    let (connection, driver) = MultiplexedConnection::new_with_config(login, metered, config)
        .await
        .map_err(|error| match error.kind() {
            // The server's words may quote what was sent: never logged.
            ErrorKind::AuthenticationFailed => {
                "AUTH refused: check the user and password in the store's URL"
            }
            ErrorKind::Server(_) => {
                "refused: check the user, password and database in the store's URL"
            }
            _ => "cannot connect",
        })?;
    // Ends when every handle of the connection is gone, or its socket.
    tokio::spawn(driver);
    Ok(connection)
}

/// How many calls' worth of replies a connection's allowance may hold at
/// most ([`Live::for_call`]).
const ALLOWANCE_CALLS: i64 = 4;

/// What the server may send during the handshake (the login's answers and
/// the scripts' digests are a few dozen bytes each).
const HANDSHAKE_BYTES: i64 = 64 * 1024;

/// What the server may send for each call made on a connection, beyond
/// what earlier calls left unused, where replies are a few numbers or a
/// short string (the global limits'): a server that sends more is not one
/// to trust, and nothing it announces is buffered past this.
pub const REPLY_BYTES: i64 = 64 * 1024;

/// A store connection's socket, failing its reads once the server has sent
/// more than the calls made allow ([`HANDSHAKE_BYTES`], [`REPLY_BYTES`] a
/// call): a forged or broken server announcing a huge reply, or streaming
/// without end, ends its connection (a [`Fault::Unreachable`]) instead of
/// growing the gateway's memory.
struct Metered<S> {
    socket: S,
    allowance: Arc<AtomicI64>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.socket).poll_read(cx, buf))?;
        let read = (buf.filled().len() - before) as i64;
        if self.allowance.fetch_sub(read, Ordering::Relaxed) < read {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the store sent more than its calls allow",
            )));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.socket).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}
