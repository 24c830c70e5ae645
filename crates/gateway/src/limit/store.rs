//! Global rate limits: a tenant's token bucket kept in Redis, shared by
//! every replica, taken by one atomic GCRA script per request.
//!
//! The client is our own, a few dozen lines of RESP over one TCP
//! connection (requests pipelined, replies matched in order), run by one
//! background task that connects, logs in, loads the script and
//! reconnects with backoff. A request never waits on Redis longer than
//! `limits.tenant.store_timeout_ms`, and never at all while the task has
//! no working connection: the caller then judges it by the replica's own
//! bucket ([`Fault`]). Redis's answer is trusted for nothing but
//! allowed-or-not: a reply that is not what the script returns is a fault
//! like any other, and ends the connection.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::config::StoreSettings;
use crate::limit::bucket::Rate;

/// The GCRA script: the bucket of `KEYS[1]` at Redis's own clock (so that
/// replicas whose clocks differ agree), `ARGV[1]` microseconds per request,
/// `ARGV[2]` microseconds of burst. Returns `{1, 0}` when a token was
/// taken, else `{0, microseconds until one will be there}`. The key expires
/// when the bucket would be full again, so idle tenants leave nothing.
pub const SCRIPT: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local per_request = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local next_tat = tat + per_request
local ahead = next_tat - now
if ahead > tolerance then
  return {0, ahead - tolerance}
end
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', math.floor(ahead / 1000) + 1)
return {1, 0}
";

/// Where the keys live: `shuffle-shard:rate:{tenant}`.
const KEY_PREFIX: &str = "shuffle-shard:rate:";

/// Calls that may wait for the connection at once; more are judged
/// locally at once (Redis is not keeping up).
const QUEUE: usize = 4096;

/// The first wait before reconnecting, doubled after each failure.
const BACKOFF_MIN: Duration = Duration::from_millis(50);

/// The longest wait between reconnection attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Connecting, logging in and loading the script, together.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);

/// The largest reply accepted (bulk string or array length): the script's
/// answers are tiny, and a server that sends more is not Redis.
const MAX_REPLY: usize = 64 * 1024;

/// Why a call got no answer from Redis, so the request was judged by the
/// local bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No working connection (refused, lost, logging in, reconnecting), or
    /// too many calls already waiting.
    Unreachable,
    /// No answer within `store_timeout_ms`.
    Timeout,
    /// An answer that is not the script's.
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

/// One call waiting for its answer.
struct Call {
    tenant: String,
    rate: Rate,
    reply: oneshot::Sender<Result<Result<(), Duration>, Fault>>,
}

/// What the connection task and the callers share.
#[derive(Debug)]
struct Shared {
    settings: StoreSettings,
    /// The task has a working connection.
    up: AtomicBool,
}

/// The Redis store of one configuration (kept across reloads while
/// `limits.tenant.store` and its timeout stay the same).
#[derive(Debug)]
pub struct Store {
    shared: Arc<Shared>,
    calls: mpsc::Sender<Call>,
    /// Taken by the connection task when it starts, at the first call
    /// (a snapshot may be built outside a runtime).
    waiting: Mutex<Option<mpsc::Receiver<Call>>>,
    /// The task was started: every call after the first reads this flag
    /// and takes no lock.
    started: AtomicBool,
    /// A fallback has been logged and the store has not answered since:
    /// one warning per outage.
    pub(crate) warned: AtomicBool,
}

impl Store {
    /// A store for `settings`; it connects at the first call.
    pub fn new(settings: StoreSettings) -> Self {
        let (calls, waiting) = mpsc::channel(QUEUE);
        Self {
            shared: Arc::new(Shared {
                settings,
                up: AtomicBool::new(false),
            }),
            calls,
            waiting: Mutex::new(Some(waiting)),
            started: AtomicBool::new(false),
            warned: AtomicBool::new(false),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &StoreSettings {
        &self.shared.settings
    }

    /// Whether the connection task has a working connection now (the
    /// script loaded): while it has not, every call is judged locally at
    /// once.
    pub fn is_up(&self) -> bool {
        self.shared.up.load(Ordering::Relaxed)
    }

    /// `host:port`, for logs (never the URL, which may carry a password).
    pub fn address(&self) -> String {
        let url = &self.shared.settings.url;
        format!("{}:{}", url.host, url.port)
    }

    /// Starts the connection task, once; the first call finds the store
    /// still connecting and is judged locally.
    pub fn start(&self) {
        if self.started.load(Ordering::Relaxed) {
            return;
        }
        let Some(waiting) = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        else {
            return;
        };
        tokio::spawn(run(Arc::clone(&self.shared), waiting));
        self.started.store(true, Ordering::Relaxed);
    }

    /// Takes a token from `tenant`'s global bucket: `Ok(Ok(()))` when
    /// taken, `Ok(Err(wait))` when empty, `Err(fault)` when Redis could
    /// not say within the timeout.
    pub async fn take(&self, tenant: &str, rate: Rate) -> Result<Result<(), Duration>, Fault> {
        self.start();
        if !self.shared.up.load(Ordering::Relaxed) {
            return Err(Fault::Unreachable);
        }
        let (reply, answer) = oneshot::channel();
        let call = Call {
            tenant: tenant.to_owned(),
            rate,
            reply,
        };
        if self.calls.try_send(call).is_err() {
            return Err(Fault::Unreachable);
        }
        match tokio::time::timeout(self.shared.settings.timeout, answer).await {
            Ok(Ok(answer)) => answer,
            // The connection ended with the call unanswered.
            Ok(Err(_)) => Err(Fault::Unreachable),
            Err(_) => Err(Fault::Timeout),
        }
    }
}

/// The connection task: connect, serve calls until the connection fails,
/// back off, again; until every [`Store`] handle is gone.
async fn run(shared: Arc<Shared>, mut calls: mpsc::Receiver<Call>) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let connected = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&shared.settings)).await;
        match connected {
            Ok(Ok(connection)) => {
                backoff = BACKOFF_MIN;
                shared.up.store(true, Ordering::Relaxed);
                let ended = connection.serve(&mut calls, shared.settings.timeout).await;
                shared.up.store(false, Ordering::Relaxed);
                match ended {
                    Ended::Closed => return,
                    Ended::Failed(why) => {
                        tracing::debug!(why, "limits store connection ended; reconnecting")
                    }
                }
            }
            Ok(Err(why)) => tracing::debug!(why, "limits store handshake failed"),
            Err(_) => tracing::debug!("limits store handshake timed out"),
        }
        // Calls that slipped in while the flag was up are answered at once.
        let wake = Instant::now() + backoff;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(wake) => break,
                call = calls.recv() => match call {
                    Some(call) => {
                        let _ = call.reply.send(Err(Fault::Unreachable));
                    }
                    None => return,
                },
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Why a connection stopped serving.
enum Ended {
    /// Every store handle is gone.
    Closed,
    /// Lost, stalled or spoke nonsense.
    Failed(&'static str),
}

/// One RESP value.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// A working connection, the script loaded.
struct Connection {
    stream: TcpStream,
    buffer: BytesMut,
    sha: String,
}

/// Connects, logs in, selects the database and loads the script.
async fn handshake(settings: &StoreSettings) -> Result<Connection, &'static str> {
    let url = &settings.url;
    let stream = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|_| "cannot connect")?;
    let _ = stream.set_nodelay(true);
    let mut connection = Connection {
        stream,
        buffer: BytesMut::with_capacity(4096),
        sha: String::new(),
    };
    if let Some(password) = url.password() {
        let mut auth: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(user) = &url.username {
            auth.push(user.as_bytes());
        }
        auth.push(password.as_bytes());
        match connection.command(&auth).await? {
            Reply::Simple(_) => {}
            // The server's words may quote what was sent: never logged.
            _ => return Err("AUTH refused: check the user and password in limits.tenant.store"),
        }
    }
    if url.db != 0 {
        let db = url.db.to_string();
        match connection.command(&[b"SELECT", db.as_bytes()]).await? {
            Reply::Simple(_) => {}
            _ => return Err("SELECT refused: check the database number in limits.tenant.store"),
        }
    }
    match connection
        .command(&[b"SCRIPT", b"LOAD", SCRIPT.as_bytes()])
        .await?
    {
        Reply::Bulk(Some(sha)) if sha.len() == 40 && sha.iter().all(u8::is_ascii_hexdigit) => {
            connection.sha = String::from_utf8_lossy(&sha).into_owned();
        }
        _ => return Err("SCRIPT LOAD did not answer with a script digest"),
    }
    Ok(connection)
}

/// One command in RESP: an array of bulk strings.
fn encode(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
}

/// The command that takes `call`'s token: by digest, or with the script's
/// text when the server has forgotten it (`NOSCRIPT`, after a restart or a
/// `SCRIPT FLUSH`).
fn gcra_command(out: &mut Vec<u8>, sha: &str, call: &Call, with_text: bool) {
    let key = format!("{KEY_PREFIX}{}", call.tenant);
    let per_request = call.rate.per_request_nanos().div_ceil(1000).to_string();
    let tolerance = (call.rate.tolerance_nanos() / 1000).to_string();
    let (verb, script): (&[u8], &[u8]) = if with_text {
        (b"EVAL", SCRIPT.as_bytes())
    } else {
        (b"EVALSHA", sha.as_bytes())
    };
    encode(
        out,
        &[
            verb,
            script,
            b"1",
            key.as_bytes(),
            per_request.as_bytes(),
            tolerance.as_bytes(),
        ],
    );
}

/// The script's answer: a token taken, or the wait.
fn verdict(reply: &Reply) -> Option<Result<(), Duration>> {
    let Reply::Array(Some(items)) = reply else {
        return None;
    };
    match items.as_slice() {
        [Reply::Integer(1), Reply::Integer(_)] => Some(Ok(())),
        [Reply::Integer(0), Reply::Integer(wait)] if *wait >= 0 => {
            Some(Err(Duration::from_micros(*wait as u64)))
        }
        _ => None,
    }
}

impl Connection {
    /// Sends one command and reads its reply (the handshake's commands).
    async fn command(&mut self, parts: &[&[u8]]) -> Result<Reply, &'static str> {
        let mut out = Vec::new();
        encode(&mut out, parts);
        self.stream
            .write_all(&out)
            .await
            .map_err(|_| "write failed")?;
        loop {
            if let Some(reply) = parse(&mut self.buffer)? {
                return Ok(reply);
            }
            let read = self
                .stream
                .read_buf(&mut self.buffer)
                .await
                .map_err(|_| "read failed")?;
            if read == 0 {
                return Err("closed by the server");
            }
        }
    }

    /// Serves calls, pipelined: each is written as it comes and answered
    /// as its reply arrives, in order. A connection whose oldest call has
    /// waited ten timeouts is stalled, and dropped.
    async fn serve(mut self, calls: &mut mpsc::Receiver<Call>, timeout: Duration) -> Ended {
        let stall = (timeout * 10).max(Duration::from_millis(50));
        // The calls written and not yet answered, whether their text was.
        let mut pending: VecDeque<(Call, bool, Instant)> = VecDeque::new();
        let mut out = Vec::new();
        let ended = loop {
            let oldest = pending.front().map(|(_, _, sent)| *sent + stall);
            tokio::select! {
                call = calls.recv() => {
                    let Some(call) = call else { break Ended::Closed };
                    out.clear();
                    gcra_command(&mut out, &self.sha, &call, false);
                    if !matches!(tokio::time::timeout(stall, self.stream.write_all(&out)).await, Ok(Ok(()))) {
                        let _ = call.reply.send(Err(Fault::Unreachable));
                        break Ended::Failed("write failed");
                    }
                    pending.push_back((call, false, Instant::now()));
                }
                read = self.stream.read_buf(&mut self.buffer) => {
                    if !matches!(read, Ok(n) if n > 0) {
                        break Ended::Failed("closed by the server");
                    }
                    if let Err(why) = self.answer(&mut pending).await {
                        break Ended::Failed(why);
                    }
                }
                () = async { tokio::time::sleep_until(oldest.unwrap_or_else(Instant::now)).await }, if oldest.is_some() => {
                    break Ended::Failed("stalled");
                }
            }
        };
        let fault = match ended {
            Ended::Failed("not RESP" | "unexpected reply") => Fault::BadReply,
            _ => Fault::Unreachable,
        };
        for (call, _, _) in pending {
            let _ = call.reply.send(Err(fault));
        }
        ended
    }

    /// Answers the calls whose replies are complete in the buffer.
    async fn answer(
        &mut self,
        pending: &mut VecDeque<(Call, bool, Instant)>,
    ) -> Result<(), &'static str> {
        while let Some(reply) = parse(&mut self.buffer)? {
            let Some((call, with_text, _)) = pending.pop_front() else {
                return Err("unexpected reply");
            };
            if let Reply::Error(error) = &reply
                && error.starts_with("NOSCRIPT")
                && !with_text
            {
                // Sent again with the script's text, answered in turn.
                let mut out = Vec::new();
                gcra_command(&mut out, &self.sha, &call, true);
                self.stream
                    .write_all(&out)
                    .await
                    .map_err(|_| "write failed")?;
                pending.push_back((call, true, Instant::now()));
                continue;
            }
            match verdict(&reply) {
                Some(verdict) => {
                    let _ = call.reply.send(Ok(verdict));
                }
                None => {
                    let _ = call.reply.send(Err(Fault::BadReply));
                    return Err("unexpected reply");
                }
            }
        }
        Ok(())
    }
}

/// Takes one complete reply off the front of `buffer`: `None` while it is
/// incomplete, an error when it is not RESP (or larger than any reply the
/// script gives).
fn parse(buffer: &mut BytesMut) -> Result<Option<Reply>, &'static str> {
    let mut at = 0;
    match parse_at(buffer, &mut at, 0)? {
        Some(reply) => {
            buffer.advance(at);
            Ok(Some(reply))
        }
        None => Ok(None),
    }
}

fn parse_at(buffer: &[u8], at: &mut usize, depth: usize) -> Result<Option<Reply>, &'static str> {
    if depth > 4 {
        return Err("not RESP");
    }
    let Some(line_end) = buffer[*at..].windows(2).position(|w| w == b"\r\n") else {
        if buffer.len() - *at > MAX_REPLY {
            return Err("not RESP");
        }
        return Ok(None);
    };
    let line = &buffer[*at..*at + line_end];
    let Some((&kind, rest)) = line.split_first() else {
        return Err("not RESP");
    };
    let text = std::str::from_utf8(rest).map_err(|_| "not RESP")?;
    let after = *at + line_end + 2;
    let number = || text.parse::<i64>().map_err(|_| "not RESP");
    let reply = match kind {
        b'+' => Reply::Simple(text.to_owned()),
        b'-' => Reply::Error(text.to_owned()),
        b':' => Reply::Integer(number()?),
        b'$' => {
            let length = number()?;
            if length < 0 {
                *at = after;
                return Ok(Some(Reply::Bulk(None)));
            }
            let length = usize::try_from(length).map_err(|_| "not RESP")?;
            if length > MAX_REPLY {
                return Err("not RESP");
            }
            if buffer.len() < after + length + 2 {
                return Ok(None);
            }
            if &buffer[after + length..after + length + 2] != b"\r\n" {
                return Err("not RESP");
            }
            *at = after + length + 2;
            return Ok(Some(Reply::Bulk(Some(
                buffer[after..after + length].to_vec(),
            ))));
        }
        b'*' => {
            let length = number()?;
            if length < 0 {
                *at = after;
                return Ok(Some(Reply::Array(None)));
            }
            let length = usize::try_from(length).map_err(|_| "not RESP")?;
            if length > 1024 {
                return Err("not RESP");
            }
            let mut cursor = after;
            let mut items = Vec::with_capacity(length);
            for _ in 0..length {
                match parse_at(buffer, &mut cursor, depth + 1)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            *at = cursor;
            return Ok(Some(Reply::Array(Some(items))));
        }
        _ => return Err("not RESP"),
    };
    *at = after;
    Ok(Some(reply))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RedisUrl;

    fn parsed(bytes: &[u8]) -> Result<Option<Reply>, &'static str> {
        parse(&mut BytesMut::from(bytes))
    }

    #[test]
    fn replies_parse_whole_or_wait_for_more() {
        assert_eq!(
            parsed(b"*2\r\n:1\r\n:0\r\n"),
            Ok(Some(Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Integer(0)
            ]))))
        );
        assert_eq!(parsed(b"*2\r\n:1\r\n"), Ok(None));
        assert_eq!(parsed(b"$3\r\nab"), Ok(None));
        assert_eq!(
            parsed(b"$3\r\nabc\r\n"),
            Ok(Some(Reply::Bulk(Some(b"abc".to_vec()))))
        );
        assert_eq!(
            parsed(b"-NOSCRIPT No matching script\r\n"),
            Ok(Some(Reply::Error("NOSCRIPT No matching script".into())))
        );
        let mut two = BytesMut::from(&b":5\r\n+OK\r\n"[..]);
        assert_eq!(parse(&mut two), Ok(Some(Reply::Integer(5))));
        assert_eq!(parse(&mut two), Ok(Some(Reply::Simple("OK".into()))));
        assert_eq!(parse(&mut two), Ok(None));
    }

    #[test]
    fn garbage_is_refused_not_buffered_for_ever() {
        for garbage in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"?\r\n",
            b":twelve\r\n",
            b"$5\r\nabcdefg\r\n",
            b"$99999999\r\n",
            b"*99999999\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(parsed(garbage).is_err(), "{garbage:?}");
        }
        assert!(parsed(&vec![b'+'; MAX_REPLY + 10]).is_err());
    }

    #[test]
    fn only_the_scripts_answers_are_verdicts() {
        let array = |items: Vec<Reply>| Reply::Array(Some(items));
        assert_eq!(
            verdict(&array(vec![Reply::Integer(1), Reply::Integer(0)])),
            Some(Ok(()))
        );
        assert_eq!(
            verdict(&array(vec![Reply::Integer(0), Reply::Integer(2500)])),
            Some(Err(Duration::from_micros(2500)))
        );
        for other in [
            Reply::Simple("OK".into()),
            Reply::Error("ERR".into()),
            array(vec![Reply::Integer(0), Reply::Integer(-1)]),
            array(vec![Reply::Integer(2), Reply::Integer(0)]),
            array(vec![Reply::Integer(1)]),
        ] {
            assert_eq!(verdict(&other), None, "{other:?}");
        }
    }

    #[test]
    fn the_password_stays_out_of_debug_and_logs() {
        let url = RedisUrl::parse("redis://limiter:hunter2-secret@10.0.0.5:6380/2").unwrap();
        assert_eq!(url.password(), Some("hunter2-secret"));
        assert_eq!(url.username.as_deref(), Some("limiter"));
        assert_eq!((url.host.as_str(), url.port, url.db), ("10.0.0.5", 6380, 2));
        let store = Store::new(StoreSettings {
            url,
            timeout: Duration::from_millis(5),
        });
        for shown in [format!("{store:?}"), store.address()] {
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        assert_eq!(store.address(), "10.0.0.5:6380");
        for bad in [
            "http://:hunter2-secret@host:1",
            "redis://:hunter2-secret@host",
            "redis://:hunter2-secret@host:0",
            "redis://:hunter2-secret@host:1/x",
        ] {
            let error = RedisUrl::parse(bad).unwrap_err();
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
