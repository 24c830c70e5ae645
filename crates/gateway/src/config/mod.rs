//! The gateway's configuration file: parsed from TOML, validated once, and
//! turned into typed settings. Every error names the file, the key and the
//! problem.
//!
//! Relative paths in the file (`tenants_file`, `key_file`, …) are resolved
//! against the directory the configuration file is in, so a configuration
//! means the same thing whatever directory the gateway is started from.
//!
//! This file holds the whole: [`GatewayConfig`], the file as written
//! (`RawConfig`), loading and [`ConfigError`]. Each section's raw form,
//! defaults and validation live together in a file of their own, and its
//! settings are re-exported here, so `crate::config::RoutingSettings` is
//! the one path to them.

// The tenants file, validated against this configuration.
// A shard's URL, parsed once into the address connected to.
pub mod shard_url;
// The TLS sections: the TLS listener, client certificates, TLS to shards.
pub mod tls;
// Writing a configuration (the demo's and the tests').
pub mod writer;

// The helpers every section's validation shares. They are a sibling, not
// this file, so that a section imports only its siblings and never its
// parent: this file imports every section, and the other way would be a
// circle.
mod check;
// One section each: its raw form, defaults and validation.
mod admin;
mod auth;
mod cells;
mod discovery;
mod fleet;
mod forwarding;
mod health;
mod http2;
mod limits;
mod logging;
mod model;
mod outlier;
mod retry_budget;
mod routing;
mod store;
mod tenant_source;
mod traces;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use admin::{RawAdmin, admin_settings};
use auth::{RawAuth, jwt_settings};
use cells::{RawCell, RawPlacement, cell_settings, shard_caps};
use check::{CellProblem, parse_addr};
use fleet::{RawFleet, fleet_settings};
use forwarding::{RawForwarding, forwarding_settings};
use health::{RawHealth, health_settings};
use http2::{RawHttp2, http2_settings};
use limits::{RawLimits, limit_settings};
use logging::{RawLogging, logging_settings};
use outlier::{RawOutlier, outlier_settings};
use retry_budget::{RawRetryBudget, retry_budget_settings};
use routing::{RawRouting, routing_settings};

pub use admin::AdminSettings;
pub use auth::JwtSettings;
pub use cells::{CellSettings, MIN_KEY_BYTES, ShardProtocol, ShardSettings};
pub use discovery::{DiscoverySettings, DiscoverySource, ZoneFrom};
pub use fleet::{FleetSettings, default_replica_id};
pub use forwarding::{ForwardedFor, ForwardingSettings};
pub use health::HealthSettings;
pub use http2::Http2Settings;
/// The JWT signature algorithms, re-exported so callers need not depend on
/// `jsonwebtoken` to configure one.
pub use jsonwebtoken::Algorithm as JwtAlgorithm;
pub use limits::{LimitSettings, TenantLimitSettings, TenantLimits};
pub(crate) use limits::{limit_count, per_request};
pub use logging::AccessLog;
pub use model::{MAX_MODEL_FAILURES, ModelSettings};
pub use outlier::OutlierSettings;
pub use retry_budget::RetryBudgetSettings;
pub use routing::{Exhausted, PoisonSpread, RoutingSettings};
pub use shard_url::{ShardUrl, ShardUrlError};
pub use store::{RedisUrl, StoreSettings, StoreTls};
pub use tenant_source::{PostgresUrl, TenantSource, TenantStoreSettings};
pub use tls::{ClientCertificate, MtlsSettings, TenantFrom, TlsSettings, UpstreamTlsSettings};

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
    /// Where the tenants come from: the tenants file or the tenant store.
    pub(crate) tenants: TenantSource,
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
    /// The Redis server replicas share containment and marks through,
    /// when there is a fleet.
    pub(crate) fleet: Option<FleetSettings>,
    /// The cells; the first is the default.
    pub(crate) cells: Vec<CellSettings>,
    /// How discovered cells' shards are found and changed.
    pub(crate) discovery: DiscoverySettings,
    /// The standing blast-radius model's sizes and budget.
    pub(crate) model: ModelSettings,
    /// Which load of a configuration file this is (each parse takes the
    /// next number; a copy made to change discovered shards keeps it):
    /// what tells a reload from a membership change.
    pub(crate) generation: u64,
    /// Apply reloads that move tenants without being asked to.
    pub(crate) reload_allow_migration: bool,
    /// Apply reloads that only add members (no tenant loses one).
    pub(crate) reload_allow_growth: bool,
    /// How long after an applied migration a tenant whose new members all
    /// fail (or miss its data) may be served by its previous members
    /// (`reload.lookback_seconds`; zero: never).
    pub(crate) lookback: std::time::Duration,
    /// The access log: off, text (a `tracing` event) or JSON lines.
    pub(crate) access_log: AccessLog,
    /// Where JSON access log lines go (stderr when `None`).
    pub(crate) access_log_file: Option<PathBuf>,
    /// Traces (`[tracing]`), when on.
    pub(crate) tracing: Option<crate::telemetry::traces::TraceSettings>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    tenants_file: Option<String>,
    tenants: Option<tenant_source::RawTenants>,
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
    fleet: Option<RawFleet>,
    discovery: Option<discovery::RawDiscovery>,
    model: Option<model::RawModel>,
    tracing: Option<traces::RawTracing>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReload {
    allow_migration: Option<bool>,
    allow_growth: Option<bool>,
    lookback_seconds: Option<f64>,
}

/// The longest lookback window: a week. A migration's data copy that
/// takes longer is better served by a second migration than by keeping
/// the old placement in memory for that long.
const MAX_LOOKBACK_SECONDS: f64 = 604_800.0;

/// `reload.lookback_seconds` as a duration: 0 (off) when absent; a
/// negative, NaN or over-long value is refused with the range to use.
fn lookback(seconds: Option<f64>) -> Result<std::time::Duration, check::KeyProblem> {
    let seconds = check::within(
        "reload.lookback_seconds",
        seconds.unwrap_or(0.0),
        0.0..=MAX_LOOKBACK_SECONDS,
    )
    .map_err(|(key, problem)| (key, format!("{problem} (seconds; 0 turns lookback off)")))?;
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// The next [`GatewayConfig::generation`].
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

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
        let mut limits = limit_settings(raw.limits).map_err(err)?;
        let fleet = fleet_settings(raw.fleet, &resolve).map_err(err)?;
        let tenants =
            tenant_source::tenant_source(raw.tenants_file.as_deref(), raw.tenants.take(), &resolve)
                .map_err(err)?;
        if let Some(fleet) = &fleet
            && limits.tenant.store.is_none()
        {
            // One store for the fleet: its global limits too.
            limits.tenant.store = Some(fleet.store.clone());
        }
        let mut cells = cells;
        shard_caps(&mut cells, limits.shard_max_in_flight);
        let discovery = discovery::discovery_settings(raw.discovery.unwrap_or_default(), &resolve)
            .map_err(err)?;
        let model = model::model_settings(raw.model.unwrap_or_default()).map_err(err)?;
        let http2 = http2_settings(raw.http2).map_err(err)?;
        let admin = admin_settings(raw.admin, &resolve).map_err(err)?;
        let (access_log, access_log_file) = logging_settings(raw.logging, &resolve).map_err(err)?;
        let lookback = lookback(raw.reload.lookback_seconds).map_err(err)?;
        let tracing = traces::tracing_settings(raw.tracing).map_err(err)?;

        Ok(Self {
            path: path.to_owned(),
            listen,
            tenants,
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
            fleet,
            admin,
            forwarding: forwarding_settings(raw.forwarding),
            cells,
            discovery,
            model,
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            reload_allow_migration: raw.reload.allow_migration.unwrap_or(false),
            reload_allow_growth: raw.reload.allow_growth.unwrap_or(false),
            lookback,
            access_log,
            access_log_file,
            tracing,
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

    /// Traces (`[tracing]`), when on.
    pub fn tracing(&self) -> Option<&crate::telemetry::traces::TraceSettings> {
        self.tracing.as_ref()
    }

    /// The fleet's shared store and this replica's id, when `[fleet]` is
    /// set.
    pub fn fleet(&self) -> Option<&FleetSettings> {
        self.fleet.as_ref()
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

    /// How long after an applied migration its tenants may be served by
    /// their previous members (`reload.lookback_seconds`; zero: off).
    pub fn lookback(&self) -> std::time::Duration {
        self.lookback
    }

    /// How discovered cells' shards are found and changed.
    pub fn discovery(&self) -> &DiscoverySettings {
        &self.discovery
    }

    /// The standing blast-radius model's sizes and budget (`[model]`).
    pub fn model(&self) -> &ModelSettings {
        &self.model
    }

    /// Whether any cell finds its shards by discovery.
    pub fn discovers(&self) -> bool {
        self.cells.iter().any(|cell| cell.discovery.is_some())
    }

    /// Where the tenants come from.
    pub fn tenants(&self) -> &TenantSource {
        &self.tenants
    }

    /// The cell with this name.
    pub fn cell(&self, name: &str) -> Option<&CellSettings> {
        self.cells.iter().find(|cell| cell.name == name)
    }
}

// Last, so that everything above it is production code to the tidy test.
#[cfg(test)]
mod tests;
