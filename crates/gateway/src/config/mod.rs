//! The gateway's configuration file: parsed from TOML, validated once, and
//! turned into typed settings. Every error names the file, the key and the
//! problem.
//!
//! Relative paths in the file (`tenants_file`, `key_file`, …) are resolved
//! against the directory the configuration file is in, so a configuration
//! means the same thing whatever directory the gateway is started from.

// The tenants file, validated against this configuration.
pub mod tenants;
// A shard's URL, parsed once into the address connected to.
pub mod shard_url;
// The TLS sections: the TLS listener, client certificates, TLS to shards.
pub mod tls;
// Writing a configuration (the demo's and the tests').
pub mod writer;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use placement::{Algorithm, PlacementKey};
use rustls_pki_types::ServerName;
use serde::Deserialize;
use thiserror::Error;

use crate::protocol::grpc::{Code, CodeSet, MethodPattern};

/// The JWT signature algorithms, re-exported so callers need not depend on
/// `jsonwebtoken` to configure one.
pub use jsonwebtoken::Algorithm as JwtAlgorithm;
pub use shard_url::{ShardUrl, ShardUrlError};
pub use tls::{ClientCertificate, MtlsSettings, TenantFrom, TlsSettings, UpstreamTlsSettings};

/// The shortest placement key the gateway serves with. Shorter keys can be
/// guessed, and a guessed key makes every tenant's shards public.
pub const MIN_KEY_BYTES: usize = 16;

/// Why the configuration was refused.
#[derive(Debug, Error)]
#[error("{file}: {key}: {problem}")]
pub struct ConfigError {
    /// The file with the problem.
    pub file: String,
    /// The key (dotted path) with the problem, or `-` for the whole file.
    pub key: String,
    /// What is wrong and how to fix it.
    pub problem: String,
}

impl ConfigError {
    pub(crate) fn new(file: &Path, key: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            file: file.display().to_string(),
            key: key.into(),
            problem: problem.into(),
        }
    }
}

/// What to do when every member of a tenant's subset is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exhausted {
    /// Answer 503 with `Retry-After`: the tenant's blast radius stays its own.
    Strict,
    /// Use a healthy shard outside the subset, and count it.
    Spill,
}

/// What the gateway tells a shard about the client's address in
/// `x-forwarded-for`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForwardedFor {
    /// Keep the list the client sent and add the client's address after
    /// it (nginx's `$proxy_add_x_forwarded_for`, HAProxy's `option
    /// forwardfor`): right for a gateway behind a load balancer that adds
    /// its own. Only the last entry is the gateway's; the rest is the
    /// client's word.
    Append,
    /// Drop the client's list and send only the client's address: for a
    /// gateway at the edge, where nothing in front of it can vouch for a
    /// list.
    Replace,
    /// Send no `x-forwarded-for` at all, the client's included.
    Off,
}

/// The forwarding headers the gateway adds for shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardingSettings {
    /// `x-forwarded-for`.
    pub x_forwarded_for: ForwardedFor,
    /// Send `x-forwarded-host` (the client's `Host`). A client's own
    /// `x-forwarded-host` never passes either way.
    pub x_forwarded_host: bool,
}

/// One backend shard.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ShardSettings {
    /// Stable id, unique within the cell.
    pub id: String,
    /// Base URL, `http://host:port` or `https://host:port` (an optional
    /// path prefix is kept), with the port it is reached on.
    pub url: ShardUrl,
    /// For an `https://` shard: the name its certificate must carry and the
    /// SNI sent, when not the URL's host.
    pub server_name: Option<ServerName<'static>>,
    /// Failure-domain label.
    pub zone: Option<String>,
    /// Relative capacity (rendezvous only).
    pub weight: f64,
    /// What the gateway speaks to it (`protocol`).
    pub protocol: ShardProtocol,
    /// Requests it may have in flight at once (`max_in_flight` on the
    /// shard, else `limits.shard.max_in_flight`); `None`: no cap.
    pub max_in_flight: Option<u64>,
}

/// What the gateway speaks to a shard: `protocol = "http1" | "h2c" | "h2"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardProtocol {
    /// HTTP/1.1, plain or TLS (the default).
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge over plain TCP (`http://` only).
    H2c,
    /// HTTP/2 over TLS, negotiated by ALPN (`https://` only).
    H2,
}

impl ShardProtocol {
    /// Whether it is HTTP/2 (`h2c` or `h2`).
    pub fn is_http2(self) -> bool {
        !matches!(self, ShardProtocol::Http1)
    }
}

/// A cell: a fleet of shards and how tenants are placed on it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CellSettings {
    /// The cell's name.
    pub name: String,
    /// Placement algorithm.
    pub algorithm: Algorithm,
    /// Default subset size.
    pub k: u32,
    /// Spread subsets over zones.
    pub zone_aware: bool,
    /// The placement key's version name (for operators; never the bytes).
    pub key_version: String,
    /// The placement key.
    pub key: PlacementKey,
    /// The shards.
    pub shards: Vec<ShardSettings>,
}

/// JWT authentication.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// Accepted algorithm.
    pub algorithm: jsonwebtoken::Algorithm,
    /// The verification key file (HS256: raw secret bytes; RS256/ES256: PEM).
    pub key_file: PathBuf,
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Required `aud`, when set.
    pub audience: Option<String>,
    /// The claim that names the tenant.
    pub tenant_claim: String,
}

/// Retry and failover behaviour.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RoutingSettings {
    /// When the whole subset is out.
    pub exhausted: Exhausted,
    /// Timeout for one attempt (until response headers arrive).
    pub per_try_timeout: Duration,
    /// Deadline for the whole request, all attempts included.
    pub request_timeout: Duration,
    /// Statuses that count as a failed attempt and may be retried.
    pub retry_on_status: Vec<u16>,
    /// Largest request body buffered so it can be replayed on another shard.
    pub max_replay_body_bytes: usize,
    /// Backoff before the second attempt; doubles per attempt, jittered.
    pub backoff_base: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// `Retry-After` seconds on a 503 when the subset is exhausted.
    pub retry_after_seconds: u32,
    /// Route around unavailable members and retry on another member. Off
    /// only to show, in a drill, what happens without failover.
    pub failover: bool,
    /// gRPC methods that may be sent to another member after one may have
    /// received them (`routing.grpc_idempotent_methods`).
    pub grpc_idempotent_methods: Vec<MethodPattern>,
    /// The `grpc-status` values, seen in a trailers-only answer, on which
    /// such a call goes to another member (`routing.retry_on_grpc_status`).
    pub retry_on_grpc_status: CodeSet,
    /// Crash-like failures (reset, closed before a complete answer, or a
    /// per-try timeout) on this many distinct members stop a request and
    /// make its tenant suspect (`routing.poison_after`); 0: never.
    pub poison_after: u32,
    /// How long a tenant stays suspect (`routing.quarantine_seconds`).
    pub quarantine: Duration,
}

/// The retry budget (tower's `TpsBudget` semantics).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryBudgetSettings {
    /// Retries allowed as a fraction of requests.
    pub ratio: f64,
    /// Retries always allowed per second, whatever the request rate.
    pub min_per_second: u32,
    /// The window requests and retries are counted over.
    pub window: Duration,
}

/// Active health checks.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HealthSettings {
    /// The path to GET on every shard.
    pub path: String,
    /// Time between checks.
    pub interval: Duration,
    /// Timeout of one check.
    pub timeout: Duration,
    /// Consecutive passes that make a shard healthy.
    pub rise: u32,
    /// Consecutive failures that make a shard unhealthy.
    pub fall: u32,
    /// Health older than this is unknown, not healthy.
    pub staleness: Duration,
    /// HTTP/2 shards are checked with the gRPC health protocol
    /// (`grpc.health.v1.Health/Check`, empty service name) instead of a
    /// GET of `path`.
    pub grpc: bool,
}

/// Passive outlier ejection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OutlierSettings {
    /// Consecutive failed attempts that eject a shard.
    pub consecutive_failures: u32,
    /// First ejection's length; multiplied by the number of ejections.
    pub base_ejection: Duration,
    /// Longest ejection; also how long a shard must go without one for
    /// its multiplier to drop by one.
    pub max_ejection: Duration,
    /// The largest share of a cell's shards, in percent, that passive
    /// ejection holds out at once (shards out for other reasons count);
    /// one shard may always be ejected.
    pub max_ejection_percent: u8,
}

/// Connection and size limits.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LimitSettings {
    /// Largest request head (request line and headers).
    pub max_header_bytes: usize,
    /// Largest request body.
    pub max_body_bytes: u64,
    /// Time a client has to send its request head (slowloris guard).
    pub header_read_timeout: Duration,
    /// Time in-flight requests get to finish on shutdown.
    pub shutdown_grace: Duration,
    /// Client connections served at once; more wait in the listen queue.
    /// A closing connection that still drains what its client sends
    /// (lingering) holds its place until it is gone.
    pub max_connections: usize,
    /// How long a response body may wait for bytes from its backend before
    /// both sides are closed (and the shard charged with a failure).
    pub backend_idle_timeout: Duration,
    /// How long a response may wait for its client to accept bytes before
    /// both sides are closed.
    pub client_write_timeout: Duration,
    /// How long a response body may wait on its backend in all (time its
    /// client takes to read does not count) before both sides are closed
    /// and the shard charged with a failure; `None` (0 in the file, the
    /// default) for no limit, as in nginx: set it to catch a shard that
    /// trickles.
    pub backend_body_timeout: Option<Duration>,
    /// How long a tunnel (a WebSocket: an upgraded connection) may carry no
    /// byte in either direction before both sides are closed
    /// (`limits.tunnel_idle_timeout_ms`, once `websocket_idle_timeout_ms`).
    pub tunnel_idle_timeout: Duration,
    /// How long an HTTP/2 connection may have no open stream before it is
    /// closed, whatever PINGs or SETTINGS it exchanges.
    pub http2_idle_timeout: Duration,
    /// The in-flight cap of shards that set none of their own
    /// (`limits.shard.max_in_flight`); `None`: no cap.
    pub shard_max_in_flight: Option<u64>,
    /// `[limits.tenant]`: every tenant's limits unless the tenants file
    /// says otherwise, and where global limits are kept.
    pub tenant: TenantLimitSettings,
}

/// One tenant's limits as a file states them: `[limits.tenant]` for every
/// tenant, or a tenant's own entry in the tenants file. `None` leaves the
/// key to the level below (the default, then no limit); in the tenants
/// file a zero lifts the default for that tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TenantLimits {
    /// Requests of the tenant in flight at once (`max_in_flight`).
    pub max_in_flight: Option<u32>,
    /// The time one request's token takes to come back: one second over
    /// `requests_per_second` (`Duration::ZERO` for no rate limit).
    pub per_request: Option<Duration>,
    /// Requests the tenant may send at once after a quiet spell (`burst`).
    pub burst: Option<u32>,
}

/// `[limits.tenant]`.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct TenantLimitSettings {
    /// The limits of a tenant whose entry sets none.
    pub defaults: TenantLimits,
    /// Where request rates are kept across replicas (`store`), when they are.
    pub store: Option<StoreSettings>,
}

/// `limits.tenant.store`: a Redis server shared by every replica.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoreSettings {
    /// Where it is, and how to log in.
    pub url: RedisUrl,
    /// The longest one call may take before the request is judged by the
    /// local limiter instead (`store_timeout_ms`).
    pub timeout: Duration,
}

/// A `redis://[[user]:password@]host:port[/db]` URL. The password is a
/// secret: `Debug` shows only whether there is one, and nothing prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The ACL user, when the URL names one.
    pub username: Option<String>,
    /// The database number (`SELECT`), when not 0.
    pub db: u32,
    password: Option<String>,
}

impl RedisUrl {
    /// Parses a `redis://` URL. Errors never repeat the URL: it may carry a
    /// password.
    pub fn parse(text: &str) -> Result<Self, String> {
        let rest = text.strip_prefix("redis://").ok_or_else(|| {
            "must start with redis:// (e.g. \"redis://127.0.0.1:6379\"); TLS (rediss://) and Unix sockets are not supported".to_owned()
        })?;
        let (login, rest) = match rest.rsplit_once('@') {
            Some((login, rest)) => (Some(login), rest),
            None => (None, rest),
        };
        let (address, db) = match rest.split_once('/') {
            Some((address, "")) => (address, 0),
            Some((address, db)) => (
                address,
                db.parse::<u32>().map_err(|_| {
                    "the path must be a database number (redis://host:port/0)".to_owned()
                })?,
            ),
            None => (rest, 0),
        };
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| "name the port too (redis://host:6379)".to_owned())?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| "the port must be a number from 1 to 65535".to_owned())?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err("name the host (redis://127.0.0.1:6379)".into());
        }
        let (username, password) = match login {
            None => (None, None),
            Some(login) => match login.split_once(':') {
                Some((user, password)) => (
                    (!user.is_empty()).then(|| user.to_owned()),
                    (!password.is_empty()).then(|| password.to_owned()),
                ),
                None => (None, (!login.is_empty()).then(|| login.to_owned())),
            },
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            username,
            db,
            password,
        })
    }

    /// The password, for the `AUTH` command only.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisUrl")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("db", &self.db)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// HTTP/2 from clients: h2 by ALPN on the TLS listener, h2c with prior
/// knowledge on the plaintext one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Http2Settings {
    /// Serve HTTP/2 at all.
    pub enabled: bool,
    /// Streams a client may have open at once on one connection.
    pub max_concurrent_streams: u32,
    /// A PING is sent after a connection has been idle this long; `None`
    /// for never.
    pub keep_alive_interval: Option<Duration>,
    /// A PING not answered within this closes the connection.
    pub keep_alive_timeout: Duration,
    /// The flow-control window of one stream, in bytes.
    pub initial_stream_window: u32,
    /// The flow-control window of a whole connection, in bytes.
    pub initial_connection_window: u32,
}

/// The admin listener (operations API, metrics, status page).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdminSettings {
    /// Where the admin listener binds.
    pub listen: SocketAddr,
    /// File holding the admin bearer token.
    pub token_file: Option<PathBuf>,
    /// Serve `/metrics` without a token.
    pub metrics_without_token: bool,
    /// Serve the status page (`GET /`) without a token.
    pub status_page_without_token: bool,
    /// The window per-tenant availability and shard utilization cover.
    pub availability_window: Duration,
}

/// The validated gateway configuration. It can only be had from
/// [`GatewayConfig::parse`] or [`GatewayConfig::load`], and other crates
/// read it only through the accessors below (its fields are the crate's),
/// so it always has at least one cell, every cell at least one shard, and
/// every number in its range.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// The file this came from.
    pub(crate) path: PathBuf,
    /// Where the plaintext data listener binds, when there is one (a
    /// gateway may serve TLS only).
    pub(crate) listen: Option<SocketAddr>,
    /// The tenants file.
    pub(crate) tenants_file: PathBuf,
    /// JWT authentication, when configured.
    pub(crate) jwt: Option<JwtSettings>,
    /// Client certificates as tenant identity, when configured.
    pub(crate) mtls: Option<MtlsSettings>,
    /// The TLS listener, when configured.
    pub(crate) tls: Option<TlsSettings>,
    /// TLS toward shards, when any shard is `https://`.
    pub(crate) upstream_tls: Option<UpstreamTlsSettings>,
    /// Retry and failover behaviour.
    pub(crate) routing: RoutingSettings,
    /// The retry budget.
    pub(crate) retry_budget: RetryBudgetSettings,
    /// Active health checks.
    pub(crate) health: HealthSettings,
    /// Passive outlier ejection.
    pub(crate) outlier: OutlierSettings,
    /// Connection and size limits.
    pub(crate) limits: LimitSettings,
    /// HTTP/2 from clients.
    pub(crate) http2: Http2Settings,
    /// The admin listener.
    pub(crate) admin: AdminSettings,
    /// The forwarding headers added for shards.
    pub(crate) forwarding: ForwardingSettings,
    /// The cells; the first is the default.
    pub(crate) cells: Vec<CellSettings>,
    /// Apply reloads that move tenants without being asked to.
    pub(crate) reload_allow_migration: bool,
    /// Apply reloads that only add members (no tenant loses one).
    pub(crate) reload_allow_growth: bool,
    /// The access log: off, text (a `tracing` event) or JSON lines.
    pub(crate) access_log: AccessLog,
    /// Where JSON access log lines go (stderr when `None`).
    pub(crate) access_log_file: Option<PathBuf>,
}

/// `logging.access_log`: one record per request, or none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AccessLog {
    /// No access log (`false`, the default).
    #[default]
    Off,
    /// One `info` event per request through `tracing` (`"text"`, or `true`).
    Text,
    /// One JSON object per line (`"json"`), to stderr or
    /// `logging.access_log_file`.
    Json,
}

// ---- The file as written -------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    tenants_file: String,
    placement: RawPlacement,
    cells: Vec<RawCell>,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    routing: RawRouting,
    #[serde(default)]
    retry_budget: RawRetryBudget,
    #[serde(default)]
    health: RawHealth,
    #[serde(default)]
    outlier: RawOutlier,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    http2: RawHttp2,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(default)]
    forwarding: RawForwarding,
    #[serde(default)]
    reload: RawReload,
    #[serde(default)]
    logging: RawLogging,
    tls: Option<tls::RawTls>,
    #[serde(default)]
    upstream: tls::RawUpstream,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForwarding {
    x_forwarded_for: Option<ForwardedFor>,
    x_forwarded_host: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReload {
    allow_migration: Option<bool>,
    allow_growth: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLogging {
    access_log: Option<RawAccessLog>,
    access_log_file: Option<String>,
}

/// `logging.access_log` as written: `true`/`false` (from before it had
/// formats) or a format's name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawAccessLog {
    Switch(bool),
    Format(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlacement {
    algorithm: String,
    k: u32,
    key_file: String,
    key_version: String,
    #[serde(default)]
    zone_aware: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCell {
    name: String,
    shards: Vec<RawShard>,
    algorithm: Option<String>,
    k: Option<u32>,
    key_file: Option<String>,
    key_version: Option<String>,
    zone_aware: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShard {
    id: String,
    url: String,
    zone: Option<String>,
    weight: Option<f64>,
    server_name: Option<String>,
    protocol: Option<ShardProtocol>,
    max_in_flight: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    jwt: Option<RawJwt>,
    mtls: Option<tls::RawMtls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    algorithm: String,
    key_file: String,
    issuer: Option<String>,
    audience: Option<String>,
    tenant_claim: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouting {
    exhausted: Option<Exhausted>,
    per_try_timeout_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    retry_on_status: Option<Vec<u16>>,
    max_replay_body_bytes: Option<usize>,
    backoff_base_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
    retry_after_seconds: Option<u32>,
    failover: Option<bool>,
    grpc_idempotent_methods: Option<Vec<String>>,
    retry_on_grpc_status: Option<Vec<GrpcStatusSetting>>,
    poison_after: Option<u32>,
    quarantine_seconds: Option<u64>,
}

/// A gRPC status as the configuration names it: by number or by name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum GrpcStatusSetting {
    Number(i64),
    Name(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetryBudget {
    ratio: Option<f64>,
    min_per_second: Option<u32>,
    window_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    path: Option<String>,
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    rise: Option<u32>,
    fall: Option<u32>,
    staleness_ms: Option<u64>,
    grpc: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutlier {
    consecutive_failures: Option<u32>,
    base_ejection_ms: Option<u64>,
    max_ejection_ms: Option<u64>,
    // Wider than the 0-100 it takes (and signed), so 300 or -1 is refused
    // by name and range rather than by serde's type error.
    max_ejection_percent: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_header_bytes: Option<usize>,
    max_body_bytes: Option<u64>,
    header_read_timeout_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
    max_connections: Option<usize>,
    backend_idle_timeout_ms: Option<u64>,
    client_write_timeout_ms: Option<u64>,
    backend_body_timeout_ms: Option<u64>,
    tunnel_idle_timeout_ms: Option<u64>,
    /// `tunnel_idle_timeout_ms`'s old name, still read.
    websocket_idle_timeout_ms: Option<u64>,
    http2_idle_timeout_ms: Option<u64>,
    #[serde(default)]
    tenant: RawTenantLimits,
    #[serde(default)]
    shard: RawShardLimits,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenantLimits {
    max_in_flight: Option<u32>,
    requests_per_second: Option<f64>,
    burst: Option<u32>,
    store: Option<Redacted>,
    store_timeout_ms: Option<u64>,
}

/// A string that may hold a secret (a URL with a password): read from the
/// file like any other, but never shown by `Debug`.
#[derive(Deserialize)]
#[serde(transparent)]
struct Redacted(String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShardLimits {
    max_in_flight: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp2 {
    enabled: Option<bool>,
    max_concurrent_streams: Option<u32>,
    keep_alive_interval_ms: Option<u64>,
    keep_alive_timeout_ms: Option<u64>,
    initial_stream_window_bytes: Option<u32>,
    initial_connection_window_bytes: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    listen: Option<String>,
    token_file: Option<String>,
    metrics_without_token: Option<bool>,
    status_page_without_token: Option<bool>,
    availability_window_seconds: Option<u64>,
}

// ---- Loading and validation ---------------------------------------------

impl CellSettings {
    /// The placer these settings describe (without tenant overrides).
    pub fn placer(&self) -> Result<placement::Placer, placement::PlacementError> {
        let shards = self
            .shards
            .iter()
            .map(|shard| placement::Shard {
                id: shard.id.clone(),
                zone: shard.zone.clone(),
                weight: shard.weight,
            })
            .collect();
        let config = placement::PlacementConfig {
            algorithm: self.algorithm,
            k: self.k,
            zone_aware: self.zone_aware,
        };
        placement::Placer::new(placement::Fleet::new(shards)?, &self.key, config)
    }
}

impl GatewayConfig {
    /// Reads and validates a configuration file, including the key files it
    /// names. (The tenants file is read separately, see `tenants`.)
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            ConfigError::new(path, "-", format!("cannot read the configuration: {error}"))
        })?;
        Self::parse(path, &text)
    }

    /// Validates configuration text as if read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let mut raw: RawConfig = toml::from_str(text).map_err(|error| {
            let message = error.message().to_owned();
            let location = error
                .span()
                .map(|span| {
                    let line = text[..span.start].matches('\n').count() + 1;
                    format!("line {line}")
                })
                .unwrap_or_else(|| "-".into());
            ConfigError::new(path, location, message)
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |file: &str| -> PathBuf {
            let file = Path::new(file);
            if file.is_absolute() {
                file.to_owned()
            } else {
                base.join(file)
            }
        };
        let err = |(key, problem): (&str, String)| ConfigError::new(path, key, problem);
        let cell_err = |(key, problem): CellProblem| ConfigError::new(path, key, problem);

        let listen = raw
            .listen
            .as_deref()
            .map(parse_addr)
            .transpose()
            .map_err(|p| err(("listen", p)))?;
        let cells = cell_settings(raw.placement, raw.cells, &resolve).map_err(cell_err)?;
        let tls_err = |(key, problem): tls::Problem| ConfigError::new(path, key, problem);
        let mtls = raw
            .auth
            .mtls
            .take()
            .map(|mtls| tls::mtls_settings(mtls, &resolve))
            .transpose()
            .map_err(tls_err)?;
        let http2_enabled = raw.http2.enabled.unwrap_or(true);
        let tls = raw
            .tls
            .map(|raw| tls::tls_settings(raw, mtls.as_ref(), http2_enabled, &resolve))
            .transpose()
            .map_err(tls_err)?;
        if let Some(mtls) = &mtls
            && tls.is_none()
            && mtls.client_certificate != ClientCertificate::Off
        {
            return Err(ConfigError::new(
                path,
                "auth.mtls",
                "client certificates arrive on the TLS listener, and none is configured; \
                 add a [tls] section or remove [auth.mtls]",
            ));
        }
        if listen.is_none() && tls.is_none() {
            return Err(ConfigError::new(
                path,
                "listen",
                "no data listener: set listen = \"IP:PORT\" (plaintext HTTP), a [tls] section, or both",
            ));
        }
        let any_https = cells
            .iter()
            .flat_map(|cell| &cell.shards)
            .any(|shard| shard.url.is_https());
        let upstream_tls =
            tls::upstream_tls_settings(raw.upstream, any_https, &resolve).map_err(tls_err)?;
        let jwt = jwt_settings(raw.auth, &resolve).map_err(err)?;
        let routing = routing_settings(raw.routing).map_err(err)?;
        let retry_budget = retry_budget_settings(raw.retry_budget).map_err(err)?;
        let health = health_settings(raw.health).map_err(err)?;
        let outlier = outlier_settings(raw.outlier).map_err(err)?;
        let limits = limit_settings(raw.limits).map_err(err)?;
        let mut cells = cells;
        shard_caps(&mut cells, limits.shard_max_in_flight);
        let http2 = http2_settings(raw.http2).map_err(err)?;
        let admin = admin_settings(raw.admin, &resolve).map_err(err)?;
        let (access_log, access_log_file) = logging_settings(raw.logging, &resolve).map_err(err)?;

        Ok(Self {
            path: path.to_owned(),
            listen,
            tenants_file: resolve(&raw.tenants_file),
            jwt,
            mtls,
            tls,
            upstream_tls,
            routing,
            retry_budget,
            health,
            outlier,
            limits,
            http2,
            admin,
            forwarding: ForwardingSettings {
                x_forwarded_for: raw
                    .forwarding
                    .x_forwarded_for
                    .unwrap_or(ForwardedFor::Append),
                x_forwarded_host: raw.forwarding.x_forwarded_host.unwrap_or(true),
            },
            cells,
            reload_allow_migration: raw.reload.allow_migration.unwrap_or(false),
            reload_allow_growth: raw.reload.allow_growth.unwrap_or(false),
            access_log,
            access_log_file,
        })
    }

    /// Where the plaintext data listener binds, when there is one.
    pub fn listen(&self) -> Option<SocketAddr> {
        self.listen
    }

    /// The admin listener's settings.
    pub fn admin(&self) -> &AdminSettings {
        &self.admin
    }

    /// Connection and size limits.
    pub fn limits(&self) -> &LimitSettings {
        &self.limits
    }

    /// Retry and failover behaviour.
    pub fn routing(&self) -> &RoutingSettings {
        &self.routing
    }

    /// Active health checks.
    pub fn health(&self) -> &HealthSettings {
        &self.health
    }

    /// The TLS listener, when configured.
    pub fn tls(&self) -> Option<&TlsSettings> {
        self.tls.as_ref()
    }

    /// Client certificates as tenant identity, when configured.
    pub fn mtls(&self) -> Option<&MtlsSettings> {
        self.mtls.as_ref()
    }

    /// TLS toward shards, when any shard is `https://`.
    pub fn upstream_tls(&self) -> Option<&UpstreamTlsSettings> {
        self.upstream_tls.as_ref()
    }

    /// The cells, at least one; the first is the default.
    pub fn cells(&self) -> &[CellSettings] {
        &self.cells
    }

    /// Whether reloads that move tenants apply without being asked to.
    pub fn reload_allow_migration(&self) -> bool {
        self.reload_allow_migration
    }

    /// The cell with this name.
    pub fn cell(&self, name: &str) -> Option<&CellSettings> {
        self.cells.iter().find(|cell| cell.name == name)
    }
}

/// A problem with one key: the key's dotted name and what is wrong.
type KeyProblem = (&'static str, String);

/// The longest timeout, interval or grace period any key accepts: an hour.
/// Longer values are typos, and unbounded ones overflow the clock.
const MAX_MS: u64 = 3_600_000;

/// `value` if it lies in `range`, else an error naming the range.
fn within<T: PartialOrd + std::fmt::Display + Copy>(
    key: &'static str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, KeyProblem> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err((
            key,
            format!(
                "{value} is out of range; use a value from {} to {}",
                range.start(),
                range.end()
            ),
        ))
    }
}

/// A duration in milliseconds from `key`, `default` when absent, within
/// `range`.
fn millis(
    key: &'static str,
    value: Option<u64>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Duration, KeyProblem> {
    within(key, value.unwrap_or(default), range).map(Duration::from_millis)
}

/// A problem with a key whose name is built (`cells[2].shards[0].url`):
/// the key and what is wrong.
type CellProblem = (String, String);

/// The `[placement]` defaults and the `[[cells]]` that inherit them: at
/// least one cell, names unique, each with its shards, and each cell's
/// placer built once to prove its k, zones and weights consistent.
fn cell_settings(
    placement: RawPlacement,
    raw_cells: Vec<RawCell>,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<Vec<CellSettings>, CellProblem> {
    let default_algorithm: Algorithm = placement
        .algorithm
        .parse()
        .map_err(|e| ("placement.algorithm".into(), format!("{e}")))?;
    if placement.key_version.is_empty() {
        return Err((
            "placement.key_version".into(),
            "name the key version, e.g. \"v1\"".into(),
        ));
    }
    let default_key =
        load_key(&resolve(&placement.key_file)).map_err(|p| ("placement.key_file".into(), p))?;

    if raw_cells.is_empty() {
        return Err((
            "cells".into(),
            "declare at least one [[cells]] with its shards".into(),
        ));
    }
    let mut cell_names = HashSet::new();
    let mut cells = Vec::with_capacity(raw_cells.len());
    for (position, cell) in raw_cells.into_iter().enumerate() {
        let at = |key: &str| format!("cells[{position}].{key}");
        if cell.name.is_empty() {
            return Err((at("name"), "give the cell a name".into()));
        }
        if !cell_names.insert(cell.name.clone()) {
            return Err((
                at("name"),
                format!("cell {:?} is declared twice", cell.name),
            ));
        }
        let algorithm = match &cell.algorithm {
            Some(name) => name
                .parse()
                .map_err(|e| (at("algorithm"), format!("{e}")))?,
            None => default_algorithm,
        };
        let key = match &cell.key_file {
            Some(file) => load_key(&resolve(file)).map_err(|p| (at("key_file"), p))?,
            None => default_key.clone(),
        };
        if cell.key_file.is_some() && cell.key_version.is_none() {
            return Err((
                at("key_version"),
                "a cell with its own key_file needs its own key_version".into(),
            ));
        }
        if cell.shards.is_empty() {
            return Err((at("shards"), "list at least one shard".into()));
        }
        // Where each placement value was written, so a placer error names
        // that key (`placement.k`, not the cell it was inherited by).
        let written = Written {
            k: if cell.k.is_some() {
                at("k")
            } else {
                "placement.k".into()
            },
            algorithm: if cell.algorithm.is_some() {
                at("algorithm")
            } else {
                "placement.algorithm".into()
            },
        };
        let settings = CellSettings {
            shards: shard_settings(position, cell.shards)?,
            name: cell.name,
            algorithm,
            k: cell.k.unwrap_or(placement.k),
            zone_aware: cell.zone_aware.unwrap_or(placement.zone_aware),
            key_version: cell
                .key_version
                .unwrap_or_else(|| placement.key_version.clone()),
            key,
        };
        // Building the placer here proves k, zones and weights are
        // consistent before anything listens.
        settings.placer().map_err(|e| {
            let mut problem = e.to_string();
            if matches!(e, placement::PlacementError::KOutOfRange { .. })
                && written.k == "placement.k"
            {
                // The value sits in [placement]; the cell only inherits
                // it, so say which cell, and the other way out.
                problem.push_str(&format!(
                    " (cell {:?} inherits placement.k; or give that cell its own k)",
                    settings.name
                ));
            }
            (written.key_of(&e, position, &settings), problem)
        })?;
        cells.push(settings);
    }
    Ok(cells)
}

/// The keys a cell's `k` and `algorithm` were read from: its own, or the
/// `[placement]` defaults it inherited.
struct Written {
    k: String,
    algorithm: String,
}

impl Written {
    /// The key to name for a placer error of the cell at `position`: the
    /// one whose value the operator must change.
    fn key_of(
        &self,
        error: &placement::PlacementError,
        position: usize,
        cell: &CellSettings,
    ) -> String {
        use placement::PlacementError as E;
        let shard = |id: &str, key: &str| match cell.shards.iter().position(|s| s.id == id) {
            Some(index) => format!("cells[{position}].shards[{index}].{key}"),
            None => format!("cells[{position}].shards"),
        };
        match error {
            E::KOutOfRange { .. } => self.k.clone(),
            E::WeightsNeedRendezvous => self.algorithm.clone(),
            E::InvalidWeight { id, .. } => shard(id, "weight"),
            E::MissingZone { id } => shard(id, "zone"),
            E::EmptyZoneName => match cell
                .shards
                .iter()
                .position(|s| s.zone.as_deref() == Some(""))
            {
                Some(index) => format!("cells[{position}].shards[{index}].zone"),
                None => format!("cells[{position}].shards"),
            },
            E::FleetTooLarge { .. } | E::EmptyFleet => format!("cells[{position}].shards"),
            _ => format!("cells[{position}]"),
        }
    }
}

/// The shards of the cell at `position`: ids non-empty and unique within
/// the cell, URLs `http://` or `https://` backends (the latter with a name
/// a certificate can carry).
fn shard_settings(position: usize, raw: Vec<RawShard>) -> Result<Vec<ShardSettings>, CellProblem> {
    let mut shard_ids = HashSet::new();
    let mut shards = Vec::with_capacity(raw.len());
    for (index, shard) in raw.into_iter().enumerate() {
        let key = format!("cells[{position}].shards[{index}]");
        if shard.id.is_empty() {
            return Err((format!("{key}.id"), "give the shard a non-empty id".into()));
        }
        if !shard_ids.insert(shard.id.clone()) {
            return Err((
                format!("{key}.id"),
                format!("shard id {:?} is used twice in this cell", shard.id),
            ));
        }
        let url = ShardUrl::parse(&shard.url).map_err(|p| (format!("{key}.url"), p.to_string()))?;
        let server_name = match shard.server_name {
            None if url.is_https() => {
                // The URL's host is then the name: one a certificate cannot
                // carry would fail every handshake, so it is refused here.
                let host = url.host();
                let bare = host
                    .strip_prefix('[')
                    .and_then(|host| host.strip_suffix(']'))
                    .unwrap_or(host);
                tls::server_name(bare).map_err(|p| {
                    (
                        format!("{key}.url"),
                        format!("the host {p}; set server_name to the name the shard's certificate carries"),
                    )
                })?;
                None
            }
            None => None,
            Some(_) if !url.is_https() => {
                return Err((
                    format!("{key}.server_name"),
                    "applies to https:// shards only; remove it or use an https:// url".into(),
                ));
            }
            Some(name) => {
                Some(tls::server_name(&name).map_err(|p| (format!("{key}.server_name"), p))?)
            }
        };
        let protocol = shard.protocol.unwrap_or_default();
        // h2 is negotiated by ALPN inside TLS, h2c has no TLS to negotiate
        // in: either on the other scheme is a shard no connection reaches.
        let https = url.is_https();
        match protocol {
            ShardProtocol::H2 if !https => {
                return Err((
                    format!("{key}.protocol"),
                    "\"h2\" is HTTP/2 over TLS and needs an https:// url; use \"h2c\" for HTTP/2 over plain TCP".into(),
                ));
            }
            ShardProtocol::H2c if https => {
                return Err((
                    format!("{key}.protocol"),
                    "\"h2c\" is HTTP/2 over plain TCP and needs an http:// url; use \"h2\" for HTTP/2 over TLS".into(),
                ));
            }
            _ => {}
        }
        let weight = shard.weight.unwrap_or(1.0);
        if let Some(cap) = shard.max_in_flight
            && cap > MAX_SHARD_IN_FLIGHT
        {
            return Err((
                format!("{key}.max_in_flight"),
                format!(
                    "{cap} is out of range; use a value from 1 to {MAX_SHARD_IN_FLIGHT}, or 0 for no cap"
                ),
            ));
        }
        shards.push(ShardSettings {
            max_in_flight: shard.max_in_flight,
            id: shard.id,
            url,
            server_name,
            zone: shard.zone,
            weight,
            protocol,
        });
    }
    Ok(shards)
}

/// `[auth.jwt]`, when configured: a supported algorithm, and no key set
/// to an empty string.
fn jwt_settings(
    auth: RawAuth,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<Option<JwtSettings>, KeyProblem> {
    let Some(jwt) = auth.jwt else {
        return Ok(None);
    };
    let algorithm = match jwt.algorithm.as_str() {
        "HS256" => jsonwebtoken::Algorithm::HS256,
        "RS256" => jsonwebtoken::Algorithm::RS256,
        "ES256" => jsonwebtoken::Algorithm::ES256,
        other => {
            return Err((
                "auth.jwt.algorithm",
                format!("{other:?} is not supported; use HS256, RS256 or ES256"),
            ));
        }
    };
    for (key, value) in [
        ("auth.jwt.issuer", &jwt.issuer),
        ("auth.jwt.audience", &jwt.audience),
        ("auth.jwt.tenant_claim", &jwt.tenant_claim),
    ] {
        if value.as_deref() == Some("") {
            return Err((
                key,
                "must not be empty; remove the key to use the default".into(),
            ));
        }
    }
    Ok(Some(JwtSettings {
        algorithm,
        key_file: resolve(&jwt.key_file),
        issuer: jwt.issuer,
        audience: jwt.audience,
        tenant_claim: jwt.tenant_claim.unwrap_or_else(|| "sub".into()),
    }))
}

fn routing_settings(r: RawRouting) -> Result<RoutingSettings, KeyProblem> {
    let per_try_timeout = millis(
        "routing.per_try_timeout_ms",
        r.per_try_timeout_ms,
        2_000,
        1..=MAX_MS,
    )?;
    let request_timeout = millis(
        "routing.request_timeout_ms",
        r.request_timeout_ms,
        10_000,
        1..=MAX_MS,
    )?;
    if request_timeout < per_try_timeout {
        return Err((
            "routing.request_timeout_ms",
            "must be at least routing.per_try_timeout_ms".into(),
        ));
    }
    let retry_on_status = r.retry_on_status.unwrap_or_else(|| vec![502, 503, 504]);
    if let Some(bad) = retry_on_status.iter().find(|s| !(100..=599).contains(*s)) {
        return Err((
            "routing.retry_on_status",
            format!("{bad} is not an HTTP status (100 to 599)"),
        ));
    }
    let backoff_base = millis("routing.backoff_base_ms", r.backoff_base_ms, 2, 0..=60_000)?;
    let backoff_max = millis("routing.backoff_max_ms", r.backoff_max_ms, 50, 0..=60_000)?;
    if backoff_max < backoff_base {
        return Err((
            "routing.backoff_max_ms",
            "must be at least routing.backoff_base_ms".into(),
        ));
    }
    Ok(RoutingSettings {
        exhausted: r.exhausted.unwrap_or(Exhausted::Strict),
        per_try_timeout,
        request_timeout,
        retry_on_status,
        max_replay_body_bytes: within(
            "routing.max_replay_body_bytes",
            r.max_replay_body_bytes.unwrap_or(64 * 1024),
            0..=64 * 1024 * 1024,
        )?,
        backoff_base,
        backoff_max,
        retry_after_seconds: within(
            "routing.retry_after_seconds",
            r.retry_after_seconds.unwrap_or(1),
            0..=86_400,
        )?,
        failover: r.failover.unwrap_or(true),
        grpc_idempotent_methods: grpc_methods(r.grpc_idempotent_methods.unwrap_or_default())?,
        retry_on_grpc_status: grpc_statuses(r.retry_on_grpc_status)?,
        // Two: one crash may be the shard's own bad luck; a second member
        // failing the same request the same way points at the request.
        poison_after: within("routing.poison_after", r.poison_after.unwrap_or(2), 0..=64)?,
        quarantine: Duration::from_secs(within(
            "routing.quarantine_seconds",
            r.quarantine_seconds.unwrap_or(60),
            1..=86_400,
        )?),
    })
}

/// `routing.grpc_idempotent_methods`, each entry a method path or a prefix.
fn grpc_methods(methods: Vec<String>) -> Result<Vec<MethodPattern>, KeyProblem> {
    methods
        .iter()
        .map(|method| MethodPattern::parse(method))
        .collect::<Result<_, _>>()
        .map_err(|error| ("routing.grpc_idempotent_methods", error.to_string()))
}

/// `routing.retry_on_grpc_status`, by name or number; `UNAVAILABLE` unless
/// set. `OK` makes no sense there: a call that succeeded is never repeated.
fn grpc_statuses(statuses: Option<Vec<GrpcStatusSetting>>) -> Result<CodeSet, KeyProblem> {
    const KEY: &str = "routing.retry_on_grpc_status";
    let Some(statuses) = statuses else {
        return Ok(CodeSet::of([Code::Unavailable]));
    };
    let mut codes = Vec::with_capacity(statuses.len());
    for status in statuses {
        let code = match &status {
            GrpcStatusSetting::Number(number) => u32::try_from(*number)
                .ok()
                .and_then(Code::from_number)
                .ok_or_else(|| (KEY, format!("{number} is not a gRPC status (0 to 16)")))?,
            GrpcStatusSetting::Name(name) => Code::from_name(name).ok_or_else(|| {
                (
                    KEY,
                    format!("{name:?} is not a gRPC status name; write one such as \"UNAVAILABLE\", or its number"),
                )
            })?,
        };
        if code == Code::Ok {
            return Err((
                KEY,
                "OK is a success and is never retried; remove it".into(),
            ));
        }
        codes.push(code);
    }
    Ok(CodeSet::of(codes))
}

fn retry_budget_settings(b: RawRetryBudget) -> Result<RetryBudgetSettings, KeyProblem> {
    let ratio = b.ratio.unwrap_or(0.2);
    // NaN is in no range: `within` refuses it too.
    Ok(RetryBudgetSettings {
        ratio: within("retry_budget.ratio", ratio, 0.0..=1000.0)?,
        min_per_second: within(
            "retry_budget.min_per_second",
            b.min_per_second.unwrap_or(10),
            0..=1_000_000,
        )?,
        window: Duration::from_secs(within(
            "retry_budget.window_seconds",
            b.window_seconds.unwrap_or(10),
            1..=60,
        )?),
    })
}

fn health_settings(h: RawHealth) -> Result<HealthSettings, KeyProblem> {
    let interval = millis("health.interval_ms", h.interval_ms, 1_000, 1..=MAX_MS)?;
    let timeout = millis("health.timeout_ms", h.timeout_ms, 500, 1..=MAX_MS)?;
    let path = h.path.unwrap_or_else(|| "/healthz".into());
    if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
        return Err((
            "health.path",
            format!("{path:?} is not a path; write an absolute path such as \"/healthz\""),
        ));
    }
    // A shard's checks start one interval after the last one ended, and a
    // check may take up to its timeout: results are that far apart when all
    // is well, so staleness must allow for both, or a shard that answers
    // its checks slowly but well would flap stale.
    let cycle = interval + timeout;
    let staleness = match h.staleness_ms {
        Some(staleness) => millis("health.staleness_ms", Some(staleness), 0, 1..=24 * MAX_MS)?,
        None => interval * 3 + timeout,
    };
    if staleness <= cycle {
        return Err((
            "health.staleness_ms",
            format!(
                "must be longer than health.interval_ms + health.timeout_ms ({} ms), or a shard whose checks pass slowly would go stale between them",
                cycle.as_millis()
            ),
        ));
    }
    Ok(HealthSettings {
        path,
        interval,
        timeout,
        rise: within("health.rise", h.rise.unwrap_or(2), 1..=1000)?,
        fall: within("health.fall", h.fall.unwrap_or(3), 1..=1000)?,
        staleness,
        grpc: h.grpc.unwrap_or(false),
    })
}

fn outlier_settings(o: RawOutlier) -> Result<OutlierSettings, KeyProblem> {
    let base_ejection = millis(
        "outlier.base_ejection_ms",
        o.base_ejection_ms,
        10_000,
        1..=24 * MAX_MS,
    )?;
    let max_ejection = millis(
        "outlier.max_ejection_ms",
        o.max_ejection_ms,
        300_000,
        1..=24 * MAX_MS,
    )?;
    if max_ejection < base_ejection {
        return Err((
            "outlier.max_ejection_ms",
            "must be at least outlier.base_ejection_ms".into(),
        ));
    }
    Ok(OutlierSettings {
        consecutive_failures: within(
            "outlier.consecutive_failures",
            o.consecutive_failures.unwrap_or(5),
            1..=1_000_000,
        )?,
        base_ejection,
        max_ejection,
        max_ejection_percent: u8::try_from(within(
            "outlier.max_ejection_percent",
            o.max_ejection_percent.unwrap_or(10),
            0..=100,
        )?)
        .unwrap_or(100),
    })
}

/// The most requests per second, in-flight requests or burst a tenant
/// limit accepts: more is no limit, and a typo.
const MAX_TENANT_LIMIT: u32 = 1_000_000;

/// `requests_per_second` as the time between requests; `allow_zero` (the
/// tenants file) makes 0 mean "no rate limit".
pub(crate) fn per_request(rate: f64, allow_zero: bool) -> Result<Duration, String> {
    if allow_zero && rate == 0.0 {
        return Ok(Duration::ZERO);
    }
    if !(rate.is_finite() && rate >= 0.001 && rate <= f64::from(MAX_TENANT_LIMIT)) {
        return Err(format!(
            "{rate} is out of range; use a rate from 0.001 to {MAX_TENANT_LIMIT} requests per second{}",
            if allow_zero {
                ", or 0 for no rate limit for this tenant"
            } else {
                ""
            }
        ));
    }
    Ok(Duration::from_nanos((1e9 / rate).round() as u64))
}

/// A tenant limit count (`max_in_flight`, `burst`) within its range; 0 is
/// allowed only where it means "no limit" (`max_in_flight` in the tenants
/// file).
pub(crate) fn limit_count(value: u32, allow_zero: bool) -> Result<u32, String> {
    let least = u32::from(!allow_zero);
    if (least..=MAX_TENANT_LIMIT).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{value} is out of range; use a value from {least} to {MAX_TENANT_LIMIT}"
        ))
    }
}

fn tenant_limit_settings(t: RawTenantLimits) -> Result<TenantLimitSettings, KeyProblem> {
    let defaults = TenantLimits {
        max_in_flight: t
            .max_in_flight
            .map(|n| limit_count(n, false))
            .transpose()
            .map_err(|p| ("limits.tenant.max_in_flight", p))?,
        per_request: t
            .requests_per_second
            .map(|rate| per_request(rate, false))
            .transpose()
            .map_err(|p| ("limits.tenant.requests_per_second", p))?,
        burst: t
            .burst
            .map(|n| limit_count(n, false))
            .transpose()
            .map_err(|p| ("limits.tenant.burst", p))?,
    };
    let timeout = millis(
        "limits.tenant.store_timeout_ms",
        t.store_timeout_ms,
        5,
        1..=1_000,
    )?;
    let store = t
        .store
        .map(|Redacted(url)| RedisUrl::parse(&url).map(|url| StoreSettings { url, timeout }))
        .transpose()
        .map_err(|p| ("limits.tenant.store", p))?;
    Ok(TenantLimitSettings { defaults, store })
}

fn limit_settings(l: RawLimits) -> Result<LimitSettings, KeyProblem> {
    Ok(LimitSettings {
        tenant: tenant_limit_settings(l.tenant)?,
        max_header_bytes: within(
            "limits.max_header_bytes",
            l.max_header_bytes.unwrap_or(16 * 1024),
            1024..=1024 * 1024,
        )?,
        max_body_bytes: within(
            "limits.max_body_bytes",
            l.max_body_bytes.unwrap_or(10 * 1024 * 1024),
            0..=1 << 40,
        )?,
        header_read_timeout: millis(
            "limits.header_read_timeout_ms",
            l.header_read_timeout_ms,
            10_000,
            1..=MAX_MS,
        )?,
        shutdown_grace: millis(
            "limits.shutdown_grace_ms",
            l.shutdown_grace_ms,
            10_000,
            0..=MAX_MS,
        )?,
        // It caps the client connections served at once: zero would serve
        // nobody, and the semaphore behind it has a ceiling of its own.
        max_connections: within(
            "limits.max_connections",
            l.max_connections.unwrap_or(10_000),
            1..=1_000_000,
        )?,
        backend_idle_timeout: millis(
            "limits.backend_idle_timeout_ms",
            l.backend_idle_timeout_ms,
            60_000,
            1..=MAX_MS,
        )?,
        client_write_timeout: millis(
            "limits.client_write_timeout_ms",
            l.client_write_timeout_ms,
            60_000,
            1..=MAX_MS,
        )?,
        backend_body_timeout: Some(millis(
            "limits.backend_body_timeout_ms",
            l.backend_body_timeout_ms,
            0,
            0..=24 * MAX_MS,
        )?)
        .filter(|limit| !limit.is_zero()),
        tunnel_idle_timeout: tunnel_idle_timeout(
            l.tunnel_idle_timeout_ms,
            l.websocket_idle_timeout_ms,
        )?,
        // Envoy's `idle_timeout`, nginx's keep-alive timeout on HTTP/2.
        http2_idle_timeout: millis(
            "limits.http2_idle_timeout_ms",
            l.http2_idle_timeout_ms,
            60_000,
            1..=MAX_MS,
        )?,
        shard_max_in_flight: l
            .shard
            .max_in_flight
            .map(|cap| within("limits.shard.max_in_flight", cap, 1..=MAX_SHARD_IN_FLIGHT))
            .transpose()?,
    })
}

/// `limits.tunnel_idle_timeout_ms`, or its old name
/// `limits.websocket_idle_timeout_ms` (configurations written before the
/// rename keep working); both at once is refused, since which one wins
/// would be a guess.
fn tunnel_idle_timeout(current: Option<u64>, old: Option<u64>) -> Result<Duration, KeyProblem> {
    const RANGE: std::ops::RangeInclusive<u64> = 1..=24 * MAX_MS;
    match (current, old) {
        (Some(_), Some(_)) => Err((
            "limits.tunnel_idle_timeout_ms",
            "set twice, also by its old name limits.websocket_idle_timeout_ms; remove limits.websocket_idle_timeout_ms".into(),
        )),
        (None, Some(old)) => millis("limits.websocket_idle_timeout_ms", Some(old), 0, RANGE),
        (current, None) => millis("limits.tunnel_idle_timeout_ms", current, 300_000, RANGE),
    }
}

/// The largest in-flight cap a shard may be given: beyond it a cap is a
/// typo, not a limit.
const MAX_SHARD_IN_FLIGHT: u64 = 1_000_000;

/// Each shard's in-flight cap: its own `max_in_flight` (0 for none, to
/// exempt it from the default), else `limits.shard.max_in_flight`.
fn shard_caps(cells: &mut [CellSettings], default: Option<u64>) {
    for shard in cells.iter_mut().flat_map(|cell| cell.shards.iter_mut()) {
        shard.max_in_flight = match shard.max_in_flight {
            Some(0) => None,
            Some(cap) => Some(cap),
            None => default,
        };
    }
}

/// The largest flow-control window HTTP/2 allows (RFC 9113 §6.9.1).
const MAX_WINDOW: u32 = (1 << 31) - 1;

fn http2_settings(h: RawHttp2) -> Result<Http2Settings, KeyProblem> {
    Ok(Http2Settings {
        enabled: h.enabled.unwrap_or(true),
        // nginx's http2_max_concurrent_streams.
        max_concurrent_streams: within(
            "http2.max_concurrent_streams",
            h.max_concurrent_streams.unwrap_or(128),
            1..=10_000,
        )?,
        // Zero turns the ping off.
        keep_alive_interval: Some(millis(
            "http2.keep_alive_interval_ms",
            h.keep_alive_interval_ms,
            30_000,
            0..=MAX_MS,
        )?)
        .filter(|interval| !interval.is_zero()),
        keep_alive_timeout: millis(
            "http2.keep_alive_timeout_ms",
            h.keep_alive_timeout_ms,
            20_000,
            1..=MAX_MS,
        )?,
        initial_stream_window: within(
            "http2.initial_stream_window_bytes",
            h.initial_stream_window_bytes.unwrap_or(1 << 20),
            65_535..=MAX_WINDOW,
        )?,
        initial_connection_window: within(
            "http2.initial_connection_window_bytes",
            h.initial_connection_window_bytes.unwrap_or(2 << 20),
            65_535..=MAX_WINDOW,
        )?,
    })
}

/// `[logging]`: the access log's format, and its file (JSON only; opened
/// here, created if need be, so that a path nobody can write is refused at
/// load, `serve --check` included, rather than lost at the first request).
fn logging_settings(
    l: RawLogging,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<(AccessLog, Option<PathBuf>), KeyProblem> {
    let access_log = match l.access_log {
        None | Some(RawAccessLog::Switch(false)) => AccessLog::Off,
        Some(RawAccessLog::Switch(true)) => AccessLog::Text,
        Some(RawAccessLog::Format(format)) => match format.as_str() {
            "off" => AccessLog::Off,
            "text" => AccessLog::Text,
            "json" => AccessLog::Json,
            other => {
                return Err((
                    "logging.access_log",
                    format!("unknown format {other:?}; use \"json\", \"text\" or false"),
                ));
            }
        },
    };
    let Some(file) = l.access_log_file else {
        return Ok((access_log, None));
    };
    if access_log != AccessLog::Json {
        return Err((
            "logging.access_log_file",
            "is for the JSON access log; set logging.access_log = \"json\", or remove access_log_file (the text log goes to stderr with the other logs)".into(),
        ));
    }
    let file = resolve(&file);
    crate::ops::access_log::open_for_append(&file).map_err(|e| {
        (
            "logging.access_log_file",
            format!(
                "cannot open {} for appending: {e}; create its directory or let the gateway's user write there",
                file.display()
            ),
        )
    })?;
    Ok((access_log, Some(file)))
}

fn admin_settings(
    a: RawAdmin,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<AdminSettings, KeyProblem> {
    let listen = parse_addr(a.listen.as_deref().unwrap_or("127.0.0.1:9901"))
        .map_err(|problem| ("admin.listen", problem))?;
    let admin = AdminSettings {
        listen,
        token_file: a.token_file.as_deref().map(resolve),
        metrics_without_token: a.metrics_without_token.unwrap_or(false),
        status_page_without_token: a.status_page_without_token.unwrap_or(false),
        availability_window: Duration::from_secs(within(
            "admin.availability_window_seconds",
            a.availability_window_seconds.unwrap_or(60),
            10..=3600,
        )?),
    };
    // What is served without a token on a listener others can reach is
    // served to anyone: the status page lists every fully-down tenant's
    // subset. Refused rather than warned about.
    if !admin.listen.ip().to_canonical().is_loopback() {
        let open: Vec<&str> = [
            ("admin.metrics_without_token", admin.metrics_without_token),
            (
                "admin.status_page_without_token",
                admin.status_page_without_token,
            ),
        ]
        .into_iter()
        .filter_map(|(key, on)| on.then_some(key))
        .collect();
        if !open.is_empty() {
            return Err((
                "admin.listen",
                format!(
                    "{} is not a loopback address, and {} = true would serve it to anyone who can reach it; \
                     bind admin.listen to 127.0.0.1 (or ::1), or set {} = false and use admin.token_file",
                    admin.listen,
                    open.join(" and "),
                    open.join(" and ")
                ),
            ));
        }
    }
    Ok(admin)
}

fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an address; write IP:PORT, e.g. \"127.0.0.1:8080\""))
}

/// Loads a serving key: raw bytes, at least [`MIN_KEY_BYTES`], not the
/// recipe's public default.
fn load_key(path: &Path) -> Result<PlacementKey, String> {
    let key = keys::from_file(path).map_err(|e| e.to_string())?;
    if key.is_recipe_default() {
        return Err(format!(
            "{} holds the recipe's public default key; anyone could compute every tenant's shards. Generate a secret: head -c 32 /dev/urandom > {}",
            path.display(),
            path.display()
        ));
    }
    if key.len() < MIN_KEY_BYTES {
        return Err(format!(
            "{} holds a {}-byte key; use at least {MIN_KEY_BYTES} random bytes (head -c 32 /dev/urandom > {})",
            path.display(),
            key.len(),
            path.display()
        ));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a configuration with `extra` is refused with.
    fn refused(extra: &str) -> String {
        load_with(extra).unwrap_err().to_string()
    }

    /// A minimal valid configuration with `extra` appended, in a fresh
    /// directory with its key and tenants files.
    fn load_with(extra: &str) -> Result<GatewayConfig, ConfigError> {
        load_shards("{ id = \"s0\", url = \"http://127.0.0.1:9\" }", extra)
    }

    /// A configuration of the shards written as `shards` (the inside of
    /// the list) with `extra` tables.
    fn load_shards(shards: &str, extra: &str) -> Result<GatewayConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("placement.key"), [7_u8; 32]).unwrap();
        std::fs::write(dir.path().join("tenants.toml"), "").unwrap();
        let path = dir.path().join("gateway.toml");
        let text = format!(
            "listen = \"127.0.0.1:0\"\ntenants_file = \"tenants.toml\"\n\
             [placement]\nalgorithm = \"rendezvous\"\nk = 1\nkey_file = \"placement.key\"\nkey_version = \"v1\"\n\
             {extra}\n[[cells]]\nname = \"default\"\nshards = [{shards}]\n"
        );
        std::fs::write(&path, text).unwrap();
        GatewayConfig::load(&path)
    }

    #[test]
    fn a_shard_url_that_would_reach_somewhere_unwritten_is_refused_by_its_key() {
        let good = "{ id = \"a\", url = \"http://127.0.0.1:9\" }";
        for (url, says) in [
            ("http://127.0.0.1:99999", "1 to 65535"),
            ("http://127.0.0.1:notaport", "1 to 65535"),
            ("https://127.0.0.1:0", "1 to 65535"),
            ("http://ops:s3cret@127.0.0.1:9100", "user information"),
            ("http://:9100", "host"),
            ("http://127.0.0.1:9100/api#frag", "fragment"),
        ] {
            let shards = format!("{good}, {{ id = \"b\", url = \"{url}\" }}");
            let error = load_shards(&shards, "").unwrap_err();
            assert_eq!(error.key, "cells[0].shards[1].url", "{url}: {error}");
            assert!(error.problem.contains(says), "{url}: {error}");
            let line = error.to_string();
            assert_eq!(line.lines().count(), 1, "{line}");
            assert!(!line.contains("s3cret") && !line.contains("ops:"), "{line}");
        }
        // The port a shard is reached on is the one written, or the scheme's.
        let config = load_shards("{ id = \"a\", url = \"http://127.0.0.1:9\" }, { id = \"b\", url = \"http://127.0.0.1\" }", "").unwrap();
        let ports: Vec<u16> = config.cells[0]
            .shards
            .iter()
            .map(|shard| shard.url.port())
            .collect();
        assert_eq!(ports, [9, 80]);
    }

    #[test]
    fn a_shards_own_cap_wins_over_the_default_and_zero_exempts_it() {
        let shards = "{ id = \"a\", url = \"http://127.0.0.1:9\" }, \
                      { id = \"b\", url = \"http://127.0.0.1:9\", max_in_flight = 5 }, \
                      { id = \"c\", url = \"http://127.0.0.1:9\", max_in_flight = 0 }";
        let caps = |config: GatewayConfig| -> Vec<Option<u64>> {
            config.cells[0]
                .shards
                .iter()
                .map(|shard| shard.max_in_flight)
                .collect()
        };
        assert_eq!(
            caps(load_shards(shards, "").unwrap()),
            [None, Some(5), None]
        );
        assert_eq!(
            caps(load_shards(shards, "[limits.shard]\nmax_in_flight = 9").unwrap()),
            [Some(9), Some(5), None]
        );
        let error = load_shards(
            "{ id = \"a\", url = \"http://127.0.0.1:9\", max_in_flight = 2000000 }",
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("cells[0].shards[0].max_in_flight"),
            "{error}"
        );
        assert!(error.contains("0 for no cap"), "{error}");
    }

    #[test]
    fn poison_containment_defaults_to_two_members_and_a_minute() {
        let routing = load_with("").unwrap().routing;
        assert_eq!(routing.poison_after, 2);
        assert_eq!(routing.quarantine, Duration::from_secs(60));
        let routing = load_with("[routing]\npoison_after = 0\nquarantine_seconds = 5")
            .unwrap()
            .routing;
        assert_eq!(routing.poison_after, 0);
        assert_eq!(routing.quarantine, Duration::from_secs(5));
    }

    #[test]
    fn the_access_log_takes_a_format_or_the_old_switch_and_a_file_only_for_json() {
        for (written, format) in [
            ("", AccessLog::Off),
            ("access_log = false", AccessLog::Off),
            ("access_log = \"off\"", AccessLog::Off),
            ("access_log = true", AccessLog::Text),
            ("access_log = \"text\"", AccessLog::Text),
            ("access_log = \"json\"", AccessLog::Json),
        ] {
            let config = load_with(&format!("[logging]\n{written}")).unwrap();
            assert_eq!(config.access_log, format, "{written}");
            assert_eq!(config.access_log_file, None);
        }
        let config =
            load_with("[logging]\naccess_log = \"json\"\naccess_log_file = \"access.log\"")
                .unwrap();
        assert!(config.access_log_file.unwrap().ends_with("access.log"));
        let error = refused("[logging]\naccess_log = \"xml\"");
        assert!(error.contains("logging.access_log"), "{error}");
        assert!(error.contains("\"json\", \"text\" or false"), "{error}");
        let error = refused("[logging]\naccess_log = \"text\"\naccess_log_file = \"a.log\"");
        assert!(error.contains("logging.access_log_file"), "{error}");
        assert!(error.contains("access_log = \"json\""), "{error}");
        let error = refused(
            "[logging]\naccess_log = \"json\"\naccess_log_file = \"no/such/dir/access.log\"",
        );
        assert!(error.contains("logging.access_log_file"), "{error}");
        assert!(error.contains("cannot open"), "{error}");
    }

    #[test]
    fn reload_growth_is_off_unless_asked_for() {
        assert!(!load_with("").unwrap().reload_allow_growth);
        assert!(
            load_with("[reload]\nallow_growth = true")
                .unwrap()
                .reload_allow_growth
        );
    }

    #[test]
    fn the_connection_cap_defaults_high_and_refuses_zero_by_name() {
        assert_eq!(load_with("").unwrap().limits.max_connections, 10_000);
        assert_eq!(
            load_with("[limits]\nmax_connections = 2")
                .unwrap()
                .limits
                .max_connections,
            2
        );
        let error = refused("[limits]\nmax_connections = 0");
        assert!(error.contains("gateway.toml"), "{error}");
        assert!(error.contains("limits.max_connections"), "{error}");
    }

    #[test]
    fn max_ejection_percent_defaults_to_10_and_refuses_over_100_by_name() {
        assert_eq!(load_with("").unwrap().outlier.max_ejection_percent, 10);
        for (value, expected) in [(0, 0), (100, 100), (35, 35)] {
            let outlier = load_with(&format!("[outlier]\nmax_ejection_percent = {value}"))
                .unwrap()
                .outlier;
            assert_eq!(outlier.max_ejection_percent, expected);
        }
        for bad in ["101", "300", "-1"] {
            let error = refused(&format!("[outlier]\nmax_ejection_percent = {bad}"));
            assert!(error.contains("outlier.max_ejection_percent"), "{error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }

    #[test]
    fn staleness_must_outlast_a_whole_check_cycle() {
        let error = refused("[health]\ninterval_ms = 100\ntimeout_ms = 500\nstaleness_ms = 600");
        assert!(error.contains("health.staleness_ms"), "{error}");
        assert!(error.contains("600 ms"), "{error}");
        // The default allows for three intervals and a slow check.
        let health = load_with("[health]\ninterval_ms = 100\ntimeout_ms = 500")
            .unwrap()
            .health;
        assert_eq!(health.staleness, Duration::from_millis(800));
    }

    #[test]
    fn a_health_path_that_is_not_a_path_is_refused() {
        let error = refused("[health]\npath = \"/a b\"");
        assert!(error.contains("health.path"), "{error}");
    }

    #[test]
    fn tokenless_pages_are_refused_on_mapped_addresses_too() {
        let error =
            refused("[admin]\nlisten = \"[::ffff:10.0.0.1]:9901\"\nmetrics_without_token = true");
        assert!(error.contains("admin.metrics_without_token"), "{error}");
        load_with("[admin]\nlisten = \"[::ffff:127.0.0.1]:9901\"\nmetrics_without_token = true")
            .unwrap();
    }

    #[test]
    fn grpc_retry_settings_default_validate_and_name_their_key() {
        let routing = load_with("").unwrap().routing;
        assert!(routing.grpc_idempotent_methods.is_empty());
        assert_eq!(
            routing.retry_on_grpc_status,
            CodeSet::of([Code::Unavailable])
        );
        let routing = load_with(
            "[routing]\ngrpc_idempotent_methods = [\"/pkg.Service/Get*\", \"/pkg.Service/List\"]\n\
             retry_on_grpc_status = [\"UNAVAILABLE\", 10, \"resource_exhausted\"]",
        )
        .unwrap()
        .routing;
        assert_eq!(routing.grpc_idempotent_methods.len(), 2);
        assert!(routing.grpc_idempotent_methods[0].matches("/pkg.Service/GetUser"));
        assert_eq!(
            routing.retry_on_grpc_status,
            CodeSet::of([Code::Unavailable, Code::Aborted, Code::ResourceExhausted])
        );
        for (lines, key, says) in [
            (
                "grpc_idempotent_methods = [\"pkg.Service/Get\"]",
                "routing.grpc_idempotent_methods",
                "pkg.Service/Get",
            ),
            (
                "grpc_idempotent_methods = [\"/pkg.Service/G*t\"]",
                "routing.grpc_idempotent_methods",
                "trailing",
            ),
            (
                "retry_on_grpc_status = [\"UNAVAILABLE\", \"SOMETIMES\"]",
                "routing.retry_on_grpc_status",
                "SOMETIMES",
            ),
            (
                "retry_on_grpc_status = [17]",
                "routing.retry_on_grpc_status",
                "0 to 16",
            ),
            (
                "retry_on_grpc_status = [-1]",
                "routing.retry_on_grpc_status",
                "0 to 16",
            ),
            (
                "retry_on_grpc_status = [\"OK\"]",
                "routing.retry_on_grpc_status",
                "never retried",
            ),
        ] {
            let error = refused(&format!("[routing]\n{lines}"));
            assert!(
                error.contains(key) && error.contains(says),
                "{lines}: {error}"
            );
        }
    }

    #[test]
    fn tenant_limits_are_unset_by_default_and_read_with_their_ranges() {
        let unset = load_with("").unwrap();
        assert_eq!(unset.limits.tenant, TenantLimitSettings::default());
        let set = load_with(
            "[limits.tenant]\nmax_in_flight = 64\nrequests_per_second = 250\nburst = 500\n\
             store = \"redis://127.0.0.1:6379\"\nstore_timeout_ms = 7",
        )
        .unwrap();
        let tenant = &set.limits.tenant;
        assert_eq!(tenant.defaults.max_in_flight, Some(64));
        assert_eq!(tenant.defaults.per_request, Some(Duration::from_millis(4)));
        assert_eq!(tenant.defaults.burst, Some(500));
        let store = tenant.store.as_ref().unwrap();
        assert_eq!(
            (store.url.host.as_str(), store.url.port),
            ("127.0.0.1", 6379)
        );
        assert_eq!(store.timeout, Duration::from_millis(7));
        assert_eq!(
            load_with("[limits.tenant]\nrequests_per_second = 0.5")
                .unwrap()
                .limits
                .tenant
                .defaults
                .per_request,
            Some(Duration::from_secs(2))
        );
        for (line, key) in [
            ("max_in_flight = 0", "limits.tenant.max_in_flight"),
            (
                "requests_per_second = 0",
                "limits.tenant.requests_per_second",
            ),
            (
                "requests_per_second = -3",
                "limits.tenant.requests_per_second",
            ),
            (
                "requests_per_second = nan",
                "limits.tenant.requests_per_second",
            ),
            (
                "requests_per_second = 2e6",
                "limits.tenant.requests_per_second",
            ),
            ("burst = 0", "limits.tenant.burst"),
            ("store = \"http://127.0.0.1:6379\"", "limits.tenant.store"),
            ("store_timeout_ms = 0", "limits.tenant.store_timeout_ms"),
        ] {
            let error = refused(&format!("[limits.tenant]\n{line}"));
            assert!(error.contains(key), "{line}: {error}");
        }
        let error = refused("[limits.tenant]\nrate = 5");
        assert!(error.contains("rate"), "{error}");
    }

    #[test]
    fn a_store_password_is_never_in_debug_or_errors() {
        let config = load_with(
            "[limits.tenant]\nrequests_per_second = 5\nstore = \"redis://:hunter2-secret@127.0.0.1:6379\"",
        )
        .unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
        assert_eq!(
            config.limits.tenant.store.as_ref().unwrap().url.password(),
            Some("hunter2-secret")
        );
        let error = load_with(
            "[limits.tenant]\nrequests_per_second = 5\nstore = \"redis://:hunter2-secret@127.0.0.1\"",
        )
        .unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
        assert!(!format!("{error:?}").contains("hunter2"), "{error:?}");
    }

    #[test]
    fn the_tenants_file_overrides_limits_and_zero_lifts_them() {
        let config = load_with("").unwrap();
        let parse = |text: &str| tenants::Tenants::parse(Path::new("tenants.toml"), text, &config);
        let tenants = parse(
            "[[tenants]]\nid = \"whale\"\nrequests_per_second = 2000\nburst = 4000\nmax_in_flight = 0\n\
             [[tenants]]\nid = \"small\"\n",
        )
        .unwrap();
        let whale = tenants.get("whale").unwrap();
        assert_eq!(
            whale.limits,
            TenantLimits {
                max_in_flight: Some(0),
                per_request: Some(Duration::from_micros(500)),
                burst: Some(4000),
            }
        );
        assert_eq!(
            tenants.get("small").unwrap().limits,
            TenantLimits::default()
        );
        assert_eq!(
            parse("[[tenants]]\nid = \"a\"\nrequests_per_second = 0\n")
                .unwrap()
                .get("a")
                .unwrap()
                .limits
                .per_request,
            Some(Duration::ZERO)
        );
        for (line, key) in [
            ("requests_per_second = -1", "tenants[0].requests_per_second"),
            ("burst = 0", "tenants[0].burst"),
            ("max_in_flight = 2000000", "tenants[0].max_in_flight"),
        ] {
            let error = parse(&format!("[[tenants]]\nid = \"a\"\n{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(error.contains(key), "{line}: {error}");
        }
    }

    #[test]
    fn the_tunnel_idle_timeout_defaults_validates_and_reads_its_old_name() {
        let idle = |extra: &str| load_with(extra).unwrap().limits.tunnel_idle_timeout;
        assert_eq!(idle(""), Duration::from_secs(300));
        assert_eq!(
            idle("[limits]\ntunnel_idle_timeout_ms = 250"),
            Duration::from_millis(250)
        );
        // Configurations written before the rename keep working.
        assert_eq!(
            idle("[limits]\nwebsocket_idle_timeout_ms = 400"),
            Duration::from_millis(400)
        );
        for (extra, key) in [
            (
                "tunnel_idle_timeout_ms = 0",
                "limits.tunnel_idle_timeout_ms",
            ),
            (
                "tunnel_idle_timeout_ms = 86400001",
                "limits.tunnel_idle_timeout_ms",
            ),
            (
                "websocket_idle_timeout_ms = 0",
                "limits.websocket_idle_timeout_ms",
            ),
        ] {
            let error = refused(&format!("[limits]\n{extra}"));
            assert!(error.contains(key), "{extra}: {error}");
            assert!(error.contains("use a value from 1 to 86400000"), "{error}");
            assert!(!error.contains('\n'), "one line: {error}");
        }
        let error =
            refused("[limits]\ntunnel_idle_timeout_ms = 1000\nwebsocket_idle_timeout_ms = 1000");
        assert!(
            error.contains("limits.tunnel_idle_timeout_ms")
                && error.contains("remove limits.websocket_idle_timeout_ms"),
            "{error}"
        );
        assert!(!error.contains('\n'), "one line: {error}");
    }
}
