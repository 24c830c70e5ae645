//! What a fleet of replicas keeps in Redis (`[fleet]`): poison
//! containment's strikes and suspects, the operators' shard marks, and a
//! version that changes with every change, each written by one script so
//! that replicas acting at once never see half a change.
//!
//! This file holds the store's side only: the scripts, the calls, and
//! their replies read into plain values. What a replica does with them
//! (merge them into its own suspects and shard health, write its own back
//! when the store returns) is [`crate::fleet`]'s. Every number Redis
//! returns is checked before it is used: a reply that is not what the
//! script returns is a [`Fault::BadReply`], never a panic, and nothing a
//! forged server sends is buffered past four calls of [`FLEET_REPLY_BYTES`].
//!
//! Times that decide anything (a strike's life, a quarantine's end) are
//! Redis's own clock, read in the script, so replicas whose clocks differ
//! agree; what a person reads (when a mark was set) is the replica's wall
//! clock, which also orders two marks of one shard (the later wins).

use std::time::Duration;

use redis::{ErrorKind, Script, ServerErrorKind, Value};

use crate::config::StoreSettings;
pub use crate::store::Fault;
use crate::store::{Redis, RedisSettings};

/// Where the fleet's keys live: `shuffle-shard:fleet:*`.
const PREFIX: &str = "shuffle-shard:fleet:";

/// What one call may read: a full state (every mark and suspect) is a few
/// hundred bytes an entry.
pub const FLEET_REPLY_BYTES: i64 = 4 * 1024 * 1024;

/// Separates the fields of one stored value (tenant ids and shard ids are
/// visible ASCII, so never a tab).
const TAB: char = '\t';

/// Records one crash-like failure. KEYS: the tenant's strikes, the
/// suspects, the version. ARGV: tenant, member, replica, request token,
/// stopped (0/1), poison_after, strike life (ms), quarantine (ms), cell.
/// A suspect gains the member and its quarantine starts again; otherwise
/// the strike is kept for its life, and the tenant becomes suspect once
/// the fleet's strikes name `poison_after` distinct members (or the
/// request stopped). Returns `{suspect, new, ms left, members...}`.
const STRIKE: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function fields(text)
  local out = {}
  for part in string.gmatch(text, '[^\t]+') do out[#out + 1] = part end
  return out
end
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then
  local s = fields(held)
  if #s == 7 and tonumber(s[1]) and tonumber(s[1]) > now then
    local members, seen = {}, false
    for m in string.gmatch(s[7], '[^,]+') do
      members[#members + 1] = m
      if m == ARGV[2] then seen = true end
    end
    if not seen then members[#members + 1] = ARGV[2] end
    table.sort(members)
    local ends = now + tonumber(ARGV[8])
    redis.call('HSET', KEYS[2], ARGV[1], table.concat({ends, s[2], s[3], s[4],
      (tonumber(s[5]) or 0) + 1, (tonumber(s[6]) or 0) + tonumber(ARGV[5]),
      table.concat(members, ',')}, '\t'))
    redis.call('INCR', KEYS[3])
    local reply = {1, 0, ends - now}
    for _, m in ipairs(members) do reply[#reply + 1] = m end
    return reply
  end
end
redis.call('HSET', KEYS[1], ARGV[2] .. '\t' .. ARGV[3] .. '\t' .. ARGV[4], now + tonumber(ARGV[7]))
local all = redis.call('HGETALL', KEYS[1])
local seen, list, strikes = {}, {}, 0
for i = 1, #all, 2 do
  if (tonumber(all[i + 1]) or 0) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    strikes = strikes + 1
    local m = string.match(all[i], '^[^\t]+')
    if not seen[m] then seen[m] = true; list[#list + 1] = m end
  end
end
table.sort(list)
if #list >= tonumber(ARGV[6]) or ARGV[5] == '1' then
  local ends = now + tonumber(ARGV[8])
  redis.call('HSET', KEYS[2], ARGV[1], table.concat({ends, ARGV[9], now, ARGV[3], strikes, 1,
    table.concat(list, ',')}, '\t'))
  redis.call('DEL', KEYS[1])
  redis.call('INCR', KEYS[3])
  local reply = {1, 1, ends - now}
  for _, m in ipairs(list) do reply[#reply + 1] = m end
  return reply
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
local reply = {0, 0, 0}
for _, m in ipairs(list) do reply[#reply + 1] = m end
return reply
";

/// Takes back one request's strikes. KEYS: the tenant's strikes. ARGV:
/// the fields' ending (tab, replica, tab, request token).
const WITHDRAW: &str = r"
local n = 0
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, -#ARGV[1]) == ARGV[1] then
    redis.call('HDEL', KEYS[1], f)
    n = n + 1
  end
end
return n
";

/// Lifts a tenant's quarantine and forgets its strikes. KEYS: the
/// tenant's strikes, the suspects, the version. ARGV: tenant. Returns
/// whether it was suspect.
const CLEAR: &str = r"
redis.call('DEL', KEYS[1])
local n = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[3])
return n
";

/// Sets a shard's mark unless a later one is held (a restore is a mark
/// too: neither failed nor drained); two set in the same millisecond are
/// ordered by replica id, as every replica orders them. KEYS: the marks, the version. ARGV:
/// field, failed, drained, set at (ms), replica, cell, shard id, missing
/// (discovery's mark, last so that a store written by an older replica,
/// without it, still reads), and what the mark is about: `operator`
/// (failed and drained: the held missing flag is kept), `discovery`
/// (missing: the held failed and drained are kept) or `all`. So neither
/// kind of mark undoes the other's, whichever replica sets it. Returns 1
/// when set, 0 when a later mark stands.
const MARK: &str = r"
local held = redis.call('HGET', KEYS[1], ARGV[1])
local failed, drained, missing = ARGV[2], ARGV[3], ARGV[8]
if held then
  local hf, hd, at, by = string.match(held, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)')
  at = tonumber(at)
  if at and (at > tonumber(ARGV[4]) or (at == tonumber(ARGV[4]) and by > ARGV[5])) then return 0 end
  if ARGV[9] == 'discovery' and hf then failed = hf; drained = hd end
  if ARGV[9] == 'operator' then
    local hm = string.match(held, '^[^\t]*\t[^\t]*\t[^\t]*\t[^\t]*\t[^\t]*\t[^\t]*\t([^\t]*)$')
    if hm then missing = hm end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], table.concat({failed, drained, ARGV[4], ARGV[5], ARGV[6], ARGV[7], missing}, '\t'))
redis.call('INCR', KEYS[2])
return 1
";

/// What a mark sent to the fleet is about ([`MARK`]'s last argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// An operator's failed and drained.
    Operator,
    /// Discovery's missing.
    Discovery,
    /// Everything this replica holds (written back after an outage).
    All,
}

/// Writes back a suspect a replica knows (when the store returns, perhaps
/// empty): merged with what is held (members joined, the later end kept).
/// KEYS: the suspects, the version. ARGV: tenant, ms left, cell, replica,
/// strikes, stops, members (comma-separated), first marked (ms).
const SUSPECT: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ends = now + tonumber(ARGV[2])
local members, seen = {}, {}
local function add(list)
  for m in string.gmatch(list, '[^,]+') do
    if not seen[m] then seen[m] = true; members[#members + 1] = m end
  end
end
add(ARGV[7])
local since, by, strikes, stops = ARGV[8], ARGV[4], ARGV[5], ARGV[6]
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  local s = {}
  for part in string.gmatch(held, '[^\t]+') do s[#s + 1] = part end
  if #s == 7 and tonumber(s[1]) and tonumber(s[1]) > now then
    if tonumber(s[1]) > ends then ends = tonumber(s[1]) end
    since, by, strikes, stops = s[3], s[4], s[5], s[6]
    add(s[7])
  end
end
table.sort(members)
redis.call('HSET', KEYS[1], ARGV[1], table.concat({ends, ARGV[3], since, by, strikes, stops,
  table.concat(members, ',')}, '\t'))
redis.call('INCR', KEYS[2])
return 1
";

/// The fleet's state, unless it is the one the replica holds. KEYS: the
/// epoch, the version, the marks, the suspects. ARGV: an epoch to set if
/// the store has none (it is new, or restarted empty), the epoch and the
/// version the replica holds. Returns `{epoch, version}` when unchanged,
/// else `{epoch, version, marks' count, marks..., suspects...}` (field and
/// value pairs; suspects with their ms left in place of their end, and
/// expired ones dropped).
const STATE: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'NX')
local epoch = redis.call('GET', KEYS[1])
local version = redis.call('GET', KEYS[2]) or '0'
if epoch == ARGV[2] and version == ARGV[3] then return {epoch, version} end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local marks = redis.call('HGETALL', KEYS[3])
local reply = {epoch, version, #marks / 2}
for _, item in ipairs(marks) do reply[#reply + 1] = item end
local suspects = redis.call('HGETALL', KEYS[4])
for i = 1, #suspects, 2 do
  local ends = tonumber(string.match(suspects[i + 1], '^[^\t]+'))
  if ends and ends > now then
    reply[#reply + 1] = suspects[i]
    reply[#reply + 1] = (ends - now) .. string.match(suspects[i + 1], '\t.*$')
  else
    redis.call('HDEL', KEYS[4], suspects[i])
  end
end
return reply
";

/// A tenant's standing, read: KEYS: its strikes, the suspects. ARGV:
/// tenant. Returns [`STRIKE`]'s shape (`{suspect, 0, ms left,
/// members...}`), its strikes' members when it is not suspect.
const STANDING: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then
  local s = {}
  for part in string.gmatch(held, '[^\t]+') do s[#s + 1] = part end
  if #s == 7 and tonumber(s[1]) and tonumber(s[1]) > now then
    local reply = {1, 0, tonumber(s[1]) - now}
    for m in string.gmatch(s[7], '[^,]+') do reply[#reply + 1] = m end
    return reply
  end
end
local seen, list = {}, {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if (tonumber(all[i + 1]) or 0) > now then
    local m = string.match(all[i], '^[^\t]+')
    if not seen[m] then seen[m] = true; list[#list + 1] = m end
  end
end
table.sort(list)
local reply = {0, 0, 0}
for _, m in ipairs(list) do reply[#reply + 1] = m end
return reply
";

/// Every script, loaded at each handshake.
const SCRIPTS: [&str; 7] = [STRIKE, WITHDRAW, CLEAR, MARK, SUSPECT, STATE, STANDING];

/// An operator's mark on one shard, as the fleet holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedMark {
    /// The shard's cell.
    pub cell: String,
    /// The shard's id.
    pub id: String,
    /// Treated as down.
    pub failed: bool,
    /// No new requests.
    pub drained: bool,
    /// Discovery no longer lists it (treated as down).
    pub missing: bool,
    /// When it was set, on the setting replica's wall clock (ms since the
    /// Unix epoch).
    pub at_ms: u64,
    /// The replica that set it.
    pub by: String,
}

/// A suspect tenant, as the fleet holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSuspect {
    /// The tenant's id.
    pub tenant: String,
    /// Its cell.
    pub cell: String,
    /// The members it struck (sorted): where it is served.
    pub members: Vec<String>,
    /// Until its quarantine ends, on Redis's clock.
    pub left: Duration,
    /// When it was first marked (ms since the Unix epoch, Redis's clock).
    pub since_ms: u64,
    /// The replica that marked it.
    pub by: String,
    /// Crash-like failures counted against it.
    pub strikes: u64,
    /// Requests stopped by containment.
    pub stops: u64,
}

/// The fleet's whole state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetState {
    /// Names this store's life: another after it restarted empty.
    pub epoch: String,
    /// Changes with every change.
    pub version: String,
    /// Every shard's mark (a restore is one too).
    pub marks: Vec<SharedMark>,
    /// The tenants suspect now.
    pub suspects: Vec<SharedSuspect>,
}

/// What a look at the store found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Looked {
    /// The epoch and version the replica holds.
    Unchanged,
    /// Something changed.
    Changed(FleetState),
}

/// What one strike made of its tenant, fleet-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The tenant is suspect.
    pub suspect: bool,
    /// This strike made it so.
    pub new: bool,
    /// Until its quarantine ends (zero when not suspect).
    pub left: Duration,
    /// The members it has struck, fleet-wide (sorted).
    pub members: Vec<String>,
}

/// One strike, as [`FleetStore::strike`] records it.
#[derive(Debug, Clone, Copy)]
pub struct StrikeCall<'s> {
    /// The tenant's cell.
    pub cell: &'s str,
    /// The tenant.
    pub tenant: &'s str,
    /// The member its request failed on.
    pub member: &'s str,
    /// This replica's token for the request ([`FleetStore::withdraw`]).
    pub request: u64,
    /// The request failed on `poison_after` members of its own.
    pub stopped: bool,
    /// `routing.poison_after`.
    pub poison_after: usize,
    /// How long a strike counts (`routing.request_timeout`).
    pub strike_life: Duration,
    /// `routing.quarantine_seconds`.
    pub quarantine: Duration,
}

/// The fleet's Redis server, and what this replica knows of it between
/// looks.
#[derive(Debug)]
pub struct FleetStore {
    redis: Redis,
    replica: String,
    scripts: [Script; 7],
    /// Since the last look that found the store answering, a call it did
    /// not answer: what this replica set meanwhile is written back at the
    /// next look that it answers.
    pub write_back_due: std::sync::atomic::AtomicBool,
    /// The epoch and version of the state last applied here (empty before
    /// the first look).
    pub held: std::sync::Mutex<(String, String)>,
    /// Since when the store has not answered, while it has not (wall
    /// clock, for the status page).
    pub down_since: std::sync::Mutex<Option<std::time::SystemTime>>,
    /// Tenants an operator cleared here while the store was unreachable:
    /// cleared there once it answers.
    pub pending_clears: std::sync::Mutex<Vec<String>>,
    /// Which tenants were found clean lately ([`FleetStore::clean_lately`]):
    /// a tenant hash and a time in each pair of slots.
    clean: Box<[std::sync::atomic::AtomicU64]>,
    /// What `clean`'s times count from.
    started: tokio::time::Instant,
}

/// Slots of [`FleetStore::clean_lately`]: tenants whose hashes share one
/// are read again sooner, nothing worse.
const CLEAN_SLOTS: usize = 1024;

/// The longest a call made off the request path (the look for changes,
/// writing back) may take.
pub const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(1);

impl FleetStore {
    /// The store of `settings`, as replica `replica`; it connects when
    /// started.
    pub fn new(settings: &StoreSettings, replica: &str) -> Self {
        let redis = Redis::new(RedisSettings {
            url: settings.url.clone(),
            timeout: settings.timeout,
            scripts: &SCRIPTS,
            key: "fleet.store",
            reply_bytes: FLEET_REPLY_BYTES,
            tls: settings
                .tls
                .as_ref()
                .map(|tls| std::sync::Arc::clone(&tls.client)),
        });
        Self {
            redis,
            replica: replica.to_owned(),
            scripts: SCRIPTS.map(Script::new),
            write_back_due: std::sync::atomic::AtomicBool::new(false),
            held: std::sync::Mutex::default(),
            down_since: std::sync::Mutex::default(),
            pending_clears: std::sync::Mutex::default(),
            clean: (0..2 * CLEAN_SLOTS)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            started: tokio::time::Instant::now(),
        }
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Whether there is a working connection now.
    pub fn is_up(&self) -> bool {
        self.redis.is_up()
    }

    /// `host:port`, for logs (never the URL, which may carry a password).
    pub fn address(&self) -> String {
        self.redis.address()
    }

    /// Starts the connection task, once.
    pub fn start(&self) {
        self.redis.start();
    }

    /// Runs script `which` (an index into [`SCRIPTS`]) with `keys` and
    /// `args` within `timeout`, its reply judged by `check`.
    async fn run<T>(
        &self,
        which: usize,
        keys: &[String],
        args: &[String],
        timeout: Option<Duration>,
        check: impl FnOnce(Value) -> Option<T>,
    ) -> Result<T, Fault> {
        let digest = self.scripts[which].get_hash();
        let text = SCRIPTS[which];
        let call = |mut connection: redis::aio::MultiplexedConnection| async move {
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha.arg(digest).arg(keys.len()).arg(keys).arg(args);
            match evalsha.query_async::<Value>(&mut connection).await {
                // Redis forgot the scripts (a restart with the connection
                // kept, or `SCRIPT FLUSH`): once more with the text.
                Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    let mut eval = redis::cmd("EVAL");
                    eval.arg(text).arg(keys.len()).arg(keys).arg(args);
                    eval.query_async::<Value>(&mut connection).await
                }
                answer => answer,
            }
        };
        match timeout {
            Some(timeout) => self.redis.call_within(timeout, call, check).await,
            None => self.redis.call(call, check).await,
        }
    }

    /// Records a strike, on the request path (within `fleet.timeout_ms`).
    pub async fn strike(&self, strike: StrikeCall<'_>) -> Result<Verdict, Fault> {
        let keys = [
            key(&["strikes:", strike.tenant]),
            key(&["suspects"]),
            key(&["version"]),
        ];
        let args = [
            strike.tenant.to_owned(),
            strike.member.to_owned(),
            self.replica.clone(),
            strike.request.to_string(),
            u8::from(strike.stopped).to_string(),
            strike.poison_after.to_string(),
            millis(strike.strike_life).to_string(),
            millis(strike.quarantine).to_string(),
            strike.cell.to_owned(),
        ];
        self.run(0, &keys, &args, None, |reply| verdict(&reply))
            .await
    }

    /// The tenant's standing fleet-wide, on the request path (within
    /// `fleet.timeout_ms`): whether it is suspect, with its members, or
    /// the members its strikes name.
    pub async fn standing(&self, tenant: &str) -> Result<Verdict, Fault> {
        let keys = [key(&["strikes:", tenant]), key(&["suspects"])];
        let args = [tenant.to_owned()];
        self.run(6, &keys, &args, None, |reply| {
            verdict(&reply).filter(|verdict| !verdict.new)
        })
        .await
    }

    /// Whether the tenant with `hash` was found, within `within` ago, with
    /// neither strikes nor a quarantine anywhere in the fleet
    /// ([`FleetStore::note_clean`]).
    pub fn clean_lately(&self, hash: u64, within: Duration) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let slot = (hash as usize % CLEAN_SLOTS) * 2;
        self.clean[slot].load(Relaxed) == hash
            && self
                .millis_now()
                .saturating_sub(self.clean[slot + 1].load(Relaxed))
                < u64::try_from(within.as_millis()).unwrap_or(u64::MAX)
    }

    /// Notes that the tenant with `hash` was found clean just now.
    pub fn note_clean(&self, hash: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let slot = (hash as usize % CLEAN_SLOTS) * 2;
        self.clean[slot].store(hash, Relaxed);
        self.clean[slot + 1].store(self.millis_now(), Relaxed);
    }

    /// Milliseconds since this store was made, plus one (0: never).
    fn millis_now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX) + 1
    }

    /// Takes back this replica's strikes of request `request`.
    pub async fn withdraw(&self, tenant: &str, request: u64) -> Result<(), Fault> {
        let keys = [key(&["strikes:", tenant])];
        let args = [format!("{TAB}{}{TAB}{request}", self.replica)];
        self.run(1, &keys, &args, None, |reply| {
            matches!(reply, Value::Int(n) if n >= 0).then_some(())
        })
        .await
    }

    /// Lifts `tenant`'s quarantine fleet-wide; whether it was suspect.
    pub async fn clear(&self, tenant: &str) -> Result<bool, Fault> {
        let keys = [
            key(&["strikes:", tenant]),
            key(&["suspects"]),
            key(&["version"]),
        ];
        let args = [tenant.to_owned()];
        self.run(2, &keys, &args, Some(BACKGROUND_TIMEOUT), flag)
            .await
    }

    /// Sets a shard's mark (`kind`: which of its flags this replica
    /// speaks for); whether it stands (`false`: a later one does).
    pub async fn mark(&self, mark: &SharedMark, kind: MarkKind) -> Result<bool, Fault> {
        let keys = [key(&["marks"]), key(&["version"])];
        let args = [
            format!("{}{TAB}{}", mark.cell, mark.id),
            u8::from(mark.failed).to_string(),
            u8::from(mark.drained).to_string(),
            mark.at_ms.to_string(),
            mark.by.clone(),
            mark.cell.clone(),
            mark.id.clone(),
            u8::from(mark.missing).to_string(),
            match kind {
                MarkKind::Operator => "operator",
                MarkKind::Discovery => "discovery",
                MarkKind::All => "all",
            }
            .to_owned(),
        ];
        self.run(3, &keys, &args, Some(BACKGROUND_TIMEOUT), flag)
            .await
    }

    /// Writes back a suspect this replica holds, merged with the fleet's.
    pub async fn write_suspect(&self, suspect: &SharedSuspect) -> Result<(), Fault> {
        let keys = [key(&["suspects"]), key(&["version"])];
        let args = [
            suspect.tenant.clone(),
            millis(suspect.left).max(1).to_string(),
            suspect.cell.clone(),
            suspect.by.clone(),
            suspect.strikes.to_string(),
            suspect.stops.to_string(),
            suspect.members.join(","),
            suspect.since_ms.to_string(),
        ];
        self.run(4, &keys, &args, Some(BACKGROUND_TIMEOUT), |reply| {
            matches!(reply, Value::Int(1)).then_some(())
        })
        .await
    }

    /// The fleet's state unless it is at `held` (epoch, version); an
    /// empty store takes a fresh epoch (this replica's id and the time, so
    /// that no two looks offer the same one: a store restarted empty is
    /// always seen as new).
    pub async fn look(&self, held: (&str, &str)) -> Result<Looked, Fault> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let fresh_epoch = format!("{}@{now}", self.replica);
        let keys = [
            key(&["epoch"]),
            key(&["version"]),
            key(&["marks"]),
            key(&["suspects"]),
        ];
        let args = [fresh_epoch, held.0.to_owned(), held.1.to_owned()];
        self.run(5, &keys, &args, Some(BACKGROUND_TIMEOUT), |reply| {
            state(&reply)
        })
        .await
    }
}

/// A script's 0 or 1, as `false` or `true`.
fn flag(reply: Value) -> Option<bool> {
    match reply {
        Value::Int(n @ (0 | 1)) => Some(n == 1),
        _ => None,
    }
}

/// A key under [`PREFIX`].
fn key(parts: &[&str]) -> String {
    let mut key = String::from(PREFIX);
    for part in parts {
        key.push_str(part);
    }
    key
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A bulk string as text (what the scripts store is ASCII).
fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

/// A non-negative integer, as Redis returns numbers from Lua.
fn count(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// Whether `text` can be kept in the store as an id: visible ASCII
/// without the separator the stored lists use (`,`), at most [`MAX_ID`]
/// bytes. The fleet shares nothing about a shard, cell or tenant whose id
/// is not (it stays this replica's own).
pub fn storable(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_ID
        && text.bytes().all(|b| b.is_ascii_graphic() && b != b',')
}

/// The longest id the store keeps.
const MAX_ID: usize = 1024;

/// A shard or tenant id as the store holds it ([`storable`]); anything
/// else was not written by a replica.
fn id(text: &str) -> Option<String> {
    storable(text).then(|| text.to_owned())
}

/// The members list of a verdict or a suspect.
fn members<'v>(items: impl Iterator<Item = &'v str>) -> Option<Vec<String>> {
    let members: Option<Vec<String>> = items.map(id).collect();
    members.filter(|members| members.len() <= 1024)
}

/// [`STRIKE`]'s reply.
fn verdict(reply: &Value) -> Option<Verdict> {
    let Value::Array(items) = reply else {
        return None;
    };
    let [suspect, new, left, rest @ ..] = items.as_slice() else {
        return None;
    };
    let (suspect, new) = match (count(suspect)?, count(new)?) {
        (0, 0) => (false, false),
        (1, 0) => (true, false),
        (1, 1) => (true, true),
        _ => return None,
    };
    let left = Duration::from_millis(count(left)?);
    let members = members(
        rest.iter()
            .map(text)
            .collect::<Option<Vec<_>>>()?
            .into_iter(),
    )?;
    Some(Verdict {
        suspect,
        new,
        left,
        members,
    })
}

/// One mark as [`MARK`] stores it.
fn mark(value: &str) -> Option<SharedMark> {
    let fields: Vec<&str> = value.split(TAB).collect();
    let (failed, drained, at, by, cell, shard, missing) = match fields.as_slice() {
        [failed, drained, at, by, cell, shard] => (failed, drained, at, by, cell, shard, &"0"),
        [failed, drained, at, by, cell, shard, missing] => {
            (failed, drained, at, by, cell, shard, missing)
        }
        _ => return None,
    };
    let flag = |text: &str| match text {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    };
    Some(SharedMark {
        cell: id(cell)?,
        id: id(shard)?,
        failed: flag(failed)?,
        drained: flag(drained)?,
        missing: flag(missing)?,
        at_ms: at.parse().ok()?,
        by: id(by)?,
    })
}

/// One suspect as [`STATE`] returns it (ms left in place of its end).
fn suspect(tenant: &str, value: &str) -> Option<SharedSuspect> {
    let fields: Vec<&str> = value.split(TAB).collect();
    let [left, cell, since, by, strikes, stops, list] = fields.as_slice() else {
        return None;
    };
    Some(SharedSuspect {
        tenant: id(tenant)?,
        cell: id(cell)?,
        members: members(list.split(',').filter(|m| !m.is_empty()))?,
        left: Duration::from_millis(left.parse::<f64>().ok().filter(|ms| *ms >= 0.0)? as u64),
        since_ms: since.parse::<f64>().ok().filter(|ms| *ms >= 0.0)? as u64,
        by: id(by)?,
        strikes: strikes.parse::<f64>().ok().filter(|n| *n >= 0.0)? as u64,
        stops: stops.parse::<f64>().ok().filter(|n| *n >= 0.0)? as u64,
    })
}

/// [`STATE`]'s reply.
fn state(reply: &Value) -> Option<Looked> {
    let Value::Array(items) = reply else {
        return None;
    };
    match items.as_slice() {
        [epoch, version] => {
            text(epoch)?;
            text(version)?;
            Some(Looked::Unchanged)
        }
        [epoch, version, marks, rest @ ..] => {
            let marks = usize::try_from(count(marks)?).ok()?;
            if rest.len() < 2 * marks || (rest.len() - 2 * marks) % 2 != 0 {
                return None;
            }
            let (held_marks, held_suspects) = rest.split_at(2 * marks);
            // An entry that does not read (not what a replica writes) is
            // left out, not the whole state: one bad entry must not stop a
            // fleet from sharing anything else.
            let marks = held_marks
                .chunks(2)
                .filter_map(|pair| mark(text(&pair[1])?))
                .collect();
            let suspects = held_suspects
                .chunks(2)
                .filter_map(|pair| suspect(text(&pair[0])?, text(&pair[1])?))
                .collect();
            Some(Looked::Changed(FleetState {
                epoch: text(epoch)?.to_owned(),
                version: text(version)?.to_owned(),
                marks,
                suspects,
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_verdict_is_read_only_from_the_scripts_shape() {
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Int(1),
            Value::Int(30_000),
            bulk("s1"),
            bulk("s4"),
        ]);
        assert_eq!(
            verdict(&reply),
            Some(Verdict {
                suspect: true,
                new: true,
                left: Duration::from_secs(30),
                members: vec!["s1".into(), "s4".into()],
            })
        );
        for forged in [
            Value::Nil,
            Value::Array(vec![Value::Int(2), Value::Int(0), Value::Int(0)]),
            Value::Array(vec![Value::Int(0), Value::Int(1), Value::Int(0)]),
            Value::Array(vec![Value::Int(1), Value::Int(0), Value::Int(-5)]),
            Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::Int(5),
                bulk("a b"),
            ]),
            Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::Int(5),
                Value::Int(3),
            ]),
        ] {
            assert_eq!(verdict(&forged), None, "{forged:?}");
        }
    }

    #[test]
    fn a_state_is_read_entry_by_entry_and_a_wrong_shape_is_refused() {
        let reply = Value::Array(vec![
            bulk("e1"),
            bulk("7"),
            Value::Int(1),
            bulk("main\ts0"),
            bulk("0\t1\t1700000000000\tgw-a:1\tmain\ts0"),
            bulk("acme"),
            bulk("1500\tmain\t1700000000000\tgw-b:2\t3\t1\ts1,s2"),
        ]);
        let Some(Looked::Changed(state)) = state(&reply) else {
            panic!("not read");
        };
        assert_eq!(state.epoch, "e1");
        assert_eq!(
            state.marks,
            [SharedMark {
                cell: "main".into(),
                id: "s0".into(),
                failed: false,
                drained: true,
                missing: false,
                at_ms: 1_700_000_000_000,
                by: "gw-a:1".into(),
            }]
        );
        // A mark written by this version carries discovery's mark last;
        // one written before it (six fields) reads as not missing.
        let written = mark("0\t0\t1700000000001\tgw-a:1\tmain\ts3\t1").unwrap();
        assert!(written.missing && !written.failed);
        assert_eq!(mark("0\t0\t1700000000001\tgw-a:1\tmain\ts3\t2"), None);
        assert_eq!(state.suspects[0].members, ["s1", "s2"]);
        assert_eq!(state.suspects[0].left, Duration::from_millis(1500));
        assert_eq!(
            super::state(&Value::Array(vec![bulk("e1"), bulk("7")])),
            Some(Looked::Unchanged)
        );
        // A count that promises more than is there is no state at all.
        let short = Value::Array(vec![
            bulk("e"),
            bulk("1"),
            Value::Int(2),
            bulk("x"),
            bulk("y"),
        ]);
        assert_eq!(super::state(&short), None);
        // A mark with a flag that is not 0 or 1, and a suspect missing a
        // field, are left out; the rest of the state is read.
        let odd = Value::Array(vec![
            bulk("e"),
            bulk("1"),
            Value::Int(2),
            bulk("k"),
            bulk("2\t0\t1\tr\tc\ts"),
            bulk("k2"),
            bulk("1\t0\t5\tr\tc\ts2"),
            bulk("t"),
            bulk("1\tc\t1\tr\t1\t1"),
        ]);
        let Some(Looked::Changed(state)) = super::state(&odd) else {
            panic!("not read");
        };
        assert_eq!(state.marks.len(), 1);
        assert_eq!(state.marks[0].id, "s2");
        assert!(state.suspects.is_empty());
        // Ids the store cannot keep.
        for id in ["", "a,b", "a b", "\u{e9}"] {
            assert!(!storable(id), "{id:?}");
        }
        assert!(storable("tenant-7:eu/1"));
    }
}
