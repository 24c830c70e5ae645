//! Global rate limits: a tenant's token bucket kept in Redis, shared by
//! every replica, taken by one atomic GCRA script per request.
//!
//! The connection is [`crate::store::Redis`]'s (the `redis` crate's
//! multiplexed connection, kept by a task of its own): a request never
//! waits on Redis longer than `limits.tenant.store_timeout_ms`, and never
//! at all while there is no working connection: the caller then judges it
//! by the replica's own bucket ([`Fault`]). Redis's answer is trusted for
//! nothing but allowed-or-not: a reply that is not what the script returns
//! is a fault like any other, and ends the connection.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use redis::{ErrorKind, Script, ServerErrorKind, Value};

use crate::config::StoreSettings;
use crate::limit::bucket::Rate;
pub use crate::store::Fault;
use crate::store::{Redis, RedisSettings};

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

/// The Redis store of one configuration (kept across reloads while
/// `limits.tenant.store` and its timeout stay the same).
#[derive(Debug)]
pub struct Store {
    settings: StoreSettings,
    redis: Redis,
    /// The script, for its digest (computed once).
    script: Script,
    /// A fallback has been logged and the store has not answered since:
    /// one warning per outage.
    pub(crate) warned: AtomicBool,
}

impl Store {
    /// A store for `settings`; it connects at the first call.
    pub fn new(settings: StoreSettings) -> Self {
        let redis = Redis::new(RedisSettings {
            url: settings.url.clone(),
            timeout: settings.timeout,
            scripts: &[SCRIPT],
            key: "limits.tenant.store",
            reply_bytes: crate::store::REPLY_BYTES,
            tls: settings.tls.as_ref().map(|tls| Arc::clone(&tls.client)),
        });
        Self {
            settings,
            redis,
            script: Script::new(SCRIPT),
            warned: AtomicBool::new(false),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    /// Whether there is a working connection now (the script loaded):
    /// while there is not, every call is judged locally at once.
    pub fn is_up(&self) -> bool {
        self.redis.is_up()
    }

    /// `host:port`, for logs (never the URL, which may carry a password).
    pub fn address(&self) -> String {
        self.redis.address()
    }

    /// Starts the connection task, once; the first call finds the store
    /// still connecting and is judged locally.
    pub fn start(&self) {
        self.redis.start();
    }

    /// Takes a token from `tenant`'s global bucket: `Ok(Ok(()))` when
    /// taken, `Ok(Err(wait))` when empty, `Err(fault)` when Redis could
    /// not say within the timeout.
    pub async fn take(&self, tenant: &str, rate: Rate) -> Result<Result<(), Duration>, Fault> {
        let digest = self.script.get_hash();
        let key = format!("{KEY_PREFIX}{tenant}");
        let per_request = rate.per_request_nanos().div_ceil(1000);
        let tolerance = rate.tolerance_nanos() / 1000;
        self.redis
            .call(
                |mut connection| async move {
                    // By digest; with the script's text when Redis has
                    // forgotten it (`NOSCRIPT`, after a restart with the
                    // connection kept, or `SCRIPT FLUSH`). Not the crate's
                    // `Script::invoke_async`, which copies the arguments
                    // into a second command and, on `NOSCRIPT`, takes two
                    // more round trips (`SCRIPT LOAD`, `EVALSHA`).
                    let mut evalsha = redis::cmd("EVALSHA");
                    evalsha
                        .arg(digest)
                        .arg(1)
                        .arg(&key)
                        .arg(per_request)
                        .arg(tolerance);
                    match evalsha.query_async::<Value>(&mut connection).await {
                        Err(error)
                            if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                        {
                            let mut eval = redis::cmd("EVAL");
                            eval.arg(SCRIPT)
                                .arg(1)
                                .arg(&key)
                                .arg(per_request)
                                .arg(tolerance);
                            eval.query_async::<Value>(&mut connection).await
                        }
                        answer => answer,
                    }
                },
                |reply| verdict(&reply),
            )
            .await
    }
}

/// The script's answer: a token taken, or the wait.
fn verdict(reply: &Value) -> Option<Result<(), Duration>> {
    let Value::Array(items) = reply else {
        return None;
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(_)] => Some(Ok(())),
        [Value::Int(0), Value::Int(wait)] if *wait >= 0 => {
            Some(Err(Duration::from_micros(*wait as u64)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RedisUrl;

    #[test]
    fn only_the_scripts_answers_are_verdicts() {
        assert_eq!(
            verdict(&Value::Array(vec![Value::Int(1), Value::Int(0)])),
            Some(Ok(()))
        );
        assert_eq!(
            verdict(&Value::Array(vec![Value::Int(0), Value::Int(2500)])),
            Some(Err(Duration::from_micros(2500)))
        );
        for other in [
            Value::Okay,
            Value::SimpleString("OK".into()),
            Value::Nil,
            Value::BulkString(b"1".to_vec()),
            Value::Array(vec![Value::Int(0), Value::Int(-1)]),
            Value::Array(vec![Value::Int(2), Value::Int(0)]),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::BulkString(b"1".to_vec()), Value::Int(0)]),
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
            tls: None,
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
