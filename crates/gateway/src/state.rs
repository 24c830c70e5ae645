//! The gateway's run-time state: an atomically swappable snapshot of
//! configuration, tenants and placement, plus per-shard state (health,
//! in-flight requests) that survives reloads.
//!
//! Requests load the current snapshot once and use it throughout, so a
//! reload never mixes two configurations within one request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use thiserror::Error;
use tokio::time::Instant;

use crate::authenticate::Authenticator;
use crate::body::AttemptBody;
use crate::cell::Topology;
use crate::config::{ConfigError, GatewayConfig};
use crate::health::{Availability, HealthState};
use crate::retry_budget::RetryBudget;
use crate::tenants::Tenants;

/// Why a configuration could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The configuration, a file it names, or the tenants file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// One backend shard at run time.
#[derive(Debug)]
pub struct ShardRuntime {
    /// The cell it belongs to.
    pub cell: String,
    /// Its id.
    pub id: String,
    /// Its base URL.
    pub url: http::Uri,
    /// Its zone.
    pub zone: Option<String>,
    /// Health and ejection state.
    pub health: Mutex<HealthState>,
    /// Requests currently being served by it (until the response ends).
    pub in_flight: AtomicU64,
    /// Attempts sent to it.
    pub attempts: AtomicU64,
    /// Attempts that failed (connect error, timeout, reset, retryable status).
    pub failures: AtomicU64,
}

impl ShardRuntime {
    fn new(cell: &str, id: &str, url: &http::Uri, zone: Option<&str>) -> Self {
        Self {
            cell: cell.to_owned(),
            id: id.to_owned(),
            url: url.clone(),
            zone: zone.map(str::to_owned),
            health: Mutex::new(HealthState::new()),
            in_flight: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// Whether and why the shard is out of rotation now.
    pub fn availability(&self, config: &GatewayConfig) -> Availability {
        self.health
            .lock()
            .expect("health lock")
            .availability(Instant::now(), &config.health)
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// Everything a request needs, swapped as one on reload.
#[derive(Debug)]
pub struct Snapshot {
    /// The configuration.
    pub config: Arc<GatewayConfig>,
    /// The tenants.
    pub tenants: Tenants,
    /// Cells and placement.
    pub topology: Topology,
    /// Credential checking.
    pub authenticator: Authenticator,
    /// Per cell, per shard index: the shard's run-time state.
    pub shards: Vec<Vec<Arc<ShardRuntime>>>,
}

impl Snapshot {
    /// Loads the configuration at `path` and everything it names. Shards
    /// that keep their cell, id and URL keep their run-time state from
    /// `previous`, so a reload neither forgets an ejection nor resets health.
    pub fn load(path: &std::path::Path, previous: Option<&Snapshot>) -> Result<Self, LoadError> {
        let config = GatewayConfig::load(path)?;
        let tenants = Tenants::load(&config)?;
        Self::build(config, tenants, previous)
    }

    /// Builds a snapshot from an already validated configuration.
    pub fn build(
        config: GatewayConfig,
        tenants: Tenants,
        previous: Option<&Snapshot>,
    ) -> Result<Self, LoadError> {
        let topology = Topology::build(&config, &tenants)?;
        // The key file is read here, once per load; its problems are
        // reported against the configuration key that names it.
        let authenticator = Authenticator::new(config.jwt.as_ref())
            .map_err(|e| ConfigError::new(&config.path, "auth.jwt.key_file", e.to_string()))?;
        let shards = config
            .cells
            .iter()
            .map(|cell| {
                cell.shards
                    .iter()
                    .map(|shard| {
                        previous
                            .and_then(|p| p.find_shard(&cell.name, &shard.id))
                            .filter(|old| old.url == shard.url)
                            .cloned()
                            .unwrap_or_else(|| {
                                Arc::new(ShardRuntime::new(
                                    &cell.name,
                                    &shard.id,
                                    &shard.url,
                                    shard.zone.as_deref(),
                                ))
                            })
                    })
                    .collect()
            })
            .collect();
        Ok(Self {
            config: Arc::new(config),
            tenants,
            topology,
            authenticator,
            shards,
        })
    }

    /// A shard by cell name and id.
    pub fn find_shard(&self, cell: &str, id: &str) -> Option<&Arc<ShardRuntime>> {
        self.shards
            .iter()
            .flatten()
            .find(|shard| shard.cell == cell && shard.id == id)
    }

    /// Every shard of every cell.
    pub fn all_shards(&self) -> impl Iterator<Item = &Arc<ShardRuntime>> {
        self.shards.iter().flatten()
    }
}

/// Counters of what the gateway did, read by tests, drills and metrics.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests received on the data listener.
    pub requests: AtomicU64,
    /// Requests rejected for a missing or bad credential.
    pub unauthorized: AtomicU64,
    /// Attempts after the first, within one request.
    pub failovers: AtomicU64,
    /// Requests served by a shard outside the tenant's subset.
    pub spills: AtomicU64,
    /// Retries refused because the retry budget was spent.
    pub budget_exhausted: AtomicU64,
    /// Requests answered 503 because the whole subset was out.
    pub exhausted: AtomicU64,
    /// Shard ejections by passive outlier detection.
    pub ejections: AtomicU64,
}

impl Stats {
    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// The HTTP client used for backends and health checks: pooled HTTP/1.1
/// keep-alive connections.
pub type BackendClient = Client<HttpConnector, AttemptBody>;

/// The whole gateway.
#[derive(Debug)]
pub struct Gateway {
    snapshot: ArcSwap<Snapshot>,
    /// Backend connections.
    pub client: BackendClient,
    /// The retry budget, shared by all requests.
    pub budget: RetryBudget,
    /// Counters.
    pub stats: Stats,
}

impl Gateway {
    /// A gateway serving `snapshot`.
    pub fn new(snapshot: Snapshot) -> Arc<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(snapshot.config.routing.per_try_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(std::time::Duration::from_secs(30))
            .build(connector);
        let budget = RetryBudget::new(&snapshot.config.retry_budget, Instant::now());
        Arc::new(Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            client,
            budget,
            stats: Stats::default(),
        })
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Reloads from the configuration file. On error the old snapshot keeps
    /// serving and the error is returned.
    pub fn reload(&self) -> Result<(), LoadError> {
        let current = self.snapshot();
        let next = Snapshot::load(&current.config.path, Some(&current))?;
        self.snapshot.store(Arc::new(next));
        Ok(())
    }
}
