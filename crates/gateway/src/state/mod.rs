//! The gateway's run-time state: an atomically swappable snapshot of
//! configuration, tenants and placement, plus per-shard state (health,
//! in-flight requests) that survives reloads.
//!
//! Requests load the current snapshot once and use it throughout, so a
//! reload never mixes two configurations within one request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use http::HeaderValue;
use thiserror::Error;
use tokio::time::Instant;

use crate::cell::{TenantRoute, Topology};
use crate::config::{ConfigError, GatewayConfig, ShardSettings, TenantSource};
use crate::health::retry_budget::RetryBudget;
use crate::health::{Availability, HealthState};
use crate::tenants::{Tenant, Tenants};
use crate::trust::authenticate::Authenticator;
use crate::upstream::transport::Connector;
use crate::upstream::{IDLE_TIMEOUT, Upstream};

pub mod discovered;
mod discovered_shards;
mod lookback;
mod migration;
mod reload;
mod standing;
pub mod tenant_changes;
mod token;

pub use lookback::Lookback;
pub use migration::Movement;

/// Why a configuration could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The configuration, a file it names, or the tenants file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A discovered cell of the new configuration has no first membership.
    #[error(transparent)]
    Discovery(#[from] crate::discovery::first_look::FirstLookError),
    /// The new configuration would move tenants to other shards.
    #[error(
        "the new configuration moves {} of {} tenants ({:.2}%) to other shards, a migration: {}; \
         reload with allow_migration (POST /admin/reload?allow_migration=true, or reload.allow_migration = true in the configuration) to apply it{}",
        .0.changed, .0.tenants, .0.percent(), .0.members(),
        if .0.is_growth() {
            " (it only adds members, so reload.allow_growth = true in the configuration lets it through)"
        } else {
            ""
        }
    )]
    Migration(Movement),
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
    /// Whether failed attempts may be counted in `health` since the last
    /// success: while it is clear, a success has nothing to reset and
    /// takes no lock (most responses, on a healthy shard).
    failing: AtomicBool,
    /// Requests currently being served by it (until the response ends).
    pub in_flight: AtomicU64,
    /// Attempts sent to it.
    pub attempts: AtomicU64,
    /// Attempts that failed (connect error, timeout, reset, retryable status).
    pub failures: AtomicU64,
    /// The key of this shard's request-rate window.
    pub(crate) window_key: String,
    /// Its id as an `x-shuffle-shard` value (`None` if the id cannot be
    /// one, in which case the header is left out).
    pub(crate) id_header: Option<HeaderValue>,
    /// Its authority as a `Host` value, so the backend sees its own name.
    pub(crate) host_header: Option<HeaderValue>,
    /// Its URL's path without the trailing `/`, put before request paths.
    pub(crate) path_prefix: String,
    /// Its keep-alive connections.
    pub(crate) upstream: Arc<Upstream>,
    /// This shard's metric series, looked up on first use.
    metrics: std::sync::OnceLock<crate::telemetry::metrics::ShardHandles>,
}

impl ShardRuntime {
    fn new(
        cell: &str,
        id: &str,
        url: &crate::config::ShardUrl,
        zone: Option<&str>,
        connector: Connector,
    ) -> Self {
        let url = url.uri();
        Self {
            cell: cell.to_owned(),
            id: id.to_owned(),
            url: url.clone(),
            zone: zone.map(str::to_owned),
            health: Mutex::new(HealthState::new()),
            failing: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            window_key: format!("{cell}\u{0}{id}"),
            id_header: HeaderValue::from_str(id).ok(),
            host_header: url
                .authority()
                .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok()),
            path_prefix: crate::trust::target::path_prefix(url).to_owned(),
            upstream: Arc::new(Upstream::with_connector(connector, IDLE_TIMEOUT)),
            metrics: std::sync::OnceLock::new(),
        }
    }

    /// This shard's attempt metrics.
    pub(crate) fn metrics(
        &self,
        metrics: &crate::telemetry::metrics::Metrics,
    ) -> &crate::telemetry::metrics::ShardHandles {
        self.metrics
            .get_or_init(|| metrics.shard_handles(&self.cell, &self.id))
    }

    /// Whether and why the shard is out of rotation now.
    pub fn availability(&self, config: &GatewayConfig) -> Availability {
        self.availability_at(config, Instant::now())
    }

    /// Whether and why the shard is out of rotation at `now` (one clock
    /// read serves every member a request looks at).
    pub fn availability_at(&self, config: &GatewayConfig, now: Instant) -> Availability {
        self.health
            .lock()
            .expect("health lock")
            .availability(now, &config.health)
    }

    /// The key its request-rate window is recorded under.
    pub(crate) fn window_key(&self) -> &str {
        &self.window_key
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// One registry bucket's routes, each computed on first use, the table
/// itself made when the bucket's first tenant is seen: a million tenants
/// of whom few send requests cost a pointer per bucket, not per tenant.
type RouteBucket = Arc<std::sync::OnceLock<Box<[std::sync::OnceLock<Box<TenantRoute>>]>>>;

/// Routes for a bucket, none computed yet.
fn fresh_routes() -> RouteBucket {
    Arc::new(std::sync::OnceLock::new())
}

/// Everything a request needs, swapped as one on reload.
#[derive(Debug)]
pub struct Snapshot {
    /// The configuration.
    pub config: Arc<GatewayConfig>,
    /// The tenants.
    pub tenants: Tenants,
    /// Cells and placement.
    pub topology: Arc<Topology>,
    /// Credential checking.
    pub authenticator: Arc<Authenticator>,
    /// Per cell, per shard index: the shard's run-time state.
    pub shards: Vec<Vec<Arc<ShardRuntime>>>,
    /// Per cell: the blast-radius model over the cell's tenants, built on
    /// first use ([`Snapshot::blast`]); the model thread starts building it as
    /// soon as the snapshot is served, so requests never wait for it.
    blast: std::sync::OnceLock<Vec<crate::cell::live_blast::CellModel>>,
    /// Per cell: some shard's URL has a path prefix, so request targets
    /// must stay under it ([`crate::trust::target::stays_under_prefix`]).
    pub(crate) prefixed: Vec<bool>,
    /// The admin bearer token, when one is configured.
    pub admin_token: Option<crate::trust::credential::Secret>,
    /// Per tenant: its limits, if it has any (their counts carry over
    /// from the snapshot before).
    pub limits: crate::limit::Limits,
    /// Per cell: its request metric series, looked up on first use.
    cell_metrics: Vec<std::sync::OnceLock<crate::telemetry::metrics::CellHandles>>,
    /// Per tenant (by slot: per registry bucket, per place in it): its
    /// route, computed on first use. Boxed so that tenants never seen cost
    /// one pointer each; by bucket so that a change to a few tenants
    /// starts afresh only the buckets it touched.
    routes: Vec<RouteBucket>,
    /// Each discovered cell's membership (its shards are in `config`,
    /// after the written ones).
    pub memberships: Arc<crate::discovery::Memberships>,
    /// Per cell, when any of its shards has an in-flight cap: each shard's
    /// cap by index (`u64::MAX` for none). `None` for a cell without caps,
    /// whose requests take the member step's uncapped path.
    pub(crate) caps: Vec<Option<Box<[u64]>>>,
    /// The placement before the last applied migration, while its
    /// lookback window may be open (`reload.lookback_seconds`); set when
    /// the snapshot is installed ([`Lookback::after`]).
    pub lookback: Option<Arc<Lookback>>,
}

impl Snapshot {
    /// Loads the configuration at `path` and everything it names. Shards
    /// that keep their cell, id and URL keep their run-time state from
    /// `previous`, so a reload neither forgets an ejection nor resets health
    /// (their pooled connections follow [`Gateway::reload`]'s rule).
    pub fn load(path: &std::path::Path, previous: Option<&Snapshot>) -> Result<Self, LoadError> {
        let mut config = GatewayConfig::load(path)?;
        let memberships =
            discovered_shards::memberships(&config, previous.map(|p| &*p.memberships))?;
        discovered_shards::fill(&mut config, &memberships)?;
        let tenants = match config.tenants() {
            TenantSource::File(file) => {
                let began = std::time::Instant::now();
                let tenants = crate::tenants::load::from_file(file, &config)?;
                tracing::info!(
                    tenants = tenants.len(),
                    file = %file.display(),
                    elapsed_ms = began.elapsed().as_millis() as u64,
                    "tenants loaded"
                );
                tenants
            }
            TenantSource::Store(_) => match previous {
                // A reload: the tenants the store gave, checked again
                // against the new configuration (the store is read by
                // the sync task, not here).
                Some(previous) => previous.tenants_for(&config)?,
                // A start: none yet. `tenant_sync::start` reads the store
                // (or, while it is down, the snapshot file) before the
                // first request.
                None => Tenants::default(),
            },
        };
        Self::build_with(config, tenants, previous, memberships)
    }

    /// Builds a snapshot from an already validated configuration, its
    /// discovered cells' memberships those of `previous`.
    pub fn build(
        config: GatewayConfig,
        tenants: Tenants,
        previous: Option<&Snapshot>,
    ) -> Result<Self, LoadError> {
        let memberships = previous.map_or_else(Default::default, |p| (*p.memberships).clone());
        Self::build_with(config, tenants, previous, memberships)
    }

    /// Builds a snapshot from an already validated configuration whose
    /// discovered cells hold `memberships`' shards.
    pub(crate) fn build_with(
        config: GatewayConfig,
        tenants: Tenants,
        previous: Option<&Snapshot>,
        memberships: crate::discovery::Memberships,
    ) -> Result<Self, LoadError> {
        let topology = Topology::build(&config)?;
        // A copy of the served configuration (other tenants, other
        // discovered shards) keeps what its load read; only a load reads
        // the JWT key and the admin token files again.
        let same_load = previous.filter(|p| p.config.generation == config.generation);
        // The key file is read here, once per load; its problems are
        // reported against the configuration key that names it.
        let authenticator =
            match same_load {
                Some(previous) => Arc::clone(&previous.authenticator),
                None => Arc::new(Authenticator::new(config.jwt.as_ref()).map_err(|e| {
                    ConfigError::new(&config.path, "auth.jwt.key_file", e.to_string())
                })?),
            };
        let shards: Vec<Vec<Arc<ShardRuntime>>> = config
            .cells
            .iter()
            .map(|cell| {
                cell.shards
                    .iter()
                    .map(|shard| {
                        previous
                            .and_then(|p| p.find_shard(&cell.name, &shard.id))
                            .filter(|old| old.url == *shard.url.uri())
                            .cloned()
                            .unwrap_or_else(|| {
                                let runtime = ShardRuntime::new(
                                    &cell.name,
                                    &shard.id,
                                    &shard.url,
                                    shard.zone.as_deref(),
                                    connector(shard, &config),
                                );
                                let before =
                                    previous.and_then(|p| p.find_shard(&cell.name, &shard.id));
                                discovered_shards::carry_marks(
                                    &mut runtime.health.lock().expect("health lock"),
                                    before.map(|b| b.health.lock().expect("health lock").clone()),
                                    memberships
                                        .get(&cell.name)
                                        .and_then(|m| m.member(&shard.id))
                                        .is_some_and(|member| member.missing.is_some()),
                                );
                                Arc::new(runtime)
                            })
                    })
                    .collect()
            })
            .collect();
        let prefixed = shards
            .iter()
            .map(|cell| cell.iter().any(|shard| !shard.path_prefix.is_empty()))
            .collect();
        let cell_count = config.cells.len();
        let caps = config
            .cells
            .iter()
            .map(|cell| {
                cell.shards
                    .iter()
                    .any(|shard| shard.max_in_flight.is_some())
                    .then(|| {
                        cell.shards
                            .iter()
                            .map(|shard| shard.max_in_flight.unwrap_or(u64::MAX))
                            .collect()
                    })
            })
            .collect();
        let routes = (0..tenants.bucket_count())
            .map(|_| fresh_routes())
            .collect();
        let admin_token =
            match (&config.admin.token_file, same_load) {
                (_, Some(previous)) => previous.admin_token.clone(),
                (Some(path), None) => Some(token::read_token(path).map_err(|problem| {
                    ConfigError::new(&config.path, "admin.token_file", problem)
                })?),
                (None, None) => None,
            };
        let limits = crate::limit::Limits::build(
            &config.limits.tenant,
            &tenants,
            previous.map(|p| (&p.limits, &p.tenants)),
        );
        Ok(Self {
            limits,
            config: Arc::new(config),
            tenants,
            topology: Arc::new(topology),
            authenticator,
            shards,
            blast: std::sync::OnceLock::new(),
            prefixed,
            admin_token,
            cell_metrics: (0..cell_count)
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            routes,
            caps,
            memberships: Arc::new(memberships),
            lookback: None,
        })
    }

    /// A registered tenant's route (cell and subset), computed the first
    /// time the tenant is seen in this snapshot. `None` only for a tenant
    /// of another registry version (another snapshot's).
    pub fn tenant_route(&self, tenant: Tenant<'_>) -> Option<&TenantRoute> {
        if !tenant.is_in(&self.tenants) {
            return None;
        }
        let slot = tenant.slot();
        let bucket = slot.bucket as usize;
        let routes = self.routes.get(bucket)?.get_or_init(|| {
            (0..self.tenants.bucket_len(bucket))
                .map(|_| std::sync::OnceLock::new())
                .collect()
        });
        let route = routes.get(slot.index as usize)?;
        Some(route.get_or_init(|| {
            let mut route = self.topology.route(tenant);
            if let Some(lookback) = &self.lookback {
                route.lookback = lookback.members(tenant, &self.config, &route);
            }
            Box::new(route)
        }))
    }

    /// Per cell: the blast-radius model over its tenants (built by the
    /// first caller: placing every tenant takes a while at millions).
    pub fn blast(&self) -> &[crate::cell::live_blast::CellModel] {
        self.blast
            .get_or_init(|| crate::cell::live_blast::build(&self.topology, &self.tenants))
    }

    /// A cell's request metrics.
    pub(crate) fn cell_metrics(
        &self,
        cell: usize,
        metrics: &crate::telemetry::metrics::Metrics,
    ) -> &crate::telemetry::metrics::CellHandles {
        self.cell_metrics[cell].get_or_init(|| metrics.cell_handles(&self.config.cells[cell].name))
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

    /// A tenant's cell index and subset (shard indices): a registered
    /// tenant's route, or where an unregistered id would go in the first
    /// cell.
    pub fn route(&self, tenant: &str) -> (usize, Vec<placement::ShardIndex>) {
        match self.tenants.get(tenant) {
            Some(registered) => (
                registered.cell_index(),
                self.topology.tenant_subset(registered),
            ),
            None => (0, self.topology.subset(0, tenant)),
        }
    }

    /// What `next` changes in the subsets of the tenants configured in
    /// both snapshots: members gained and lost per tenant, by shard id (a
    /// tenant in another cell has lost every member and gained the new
    /// ones). A tenant whose entry and cell placement are the same in both
    /// is not placed again: it cannot have moved.
    pub fn migration_to(&self, next: &Snapshot) -> Movement {
        let same_cell = |old: usize, new: usize| {
            let (a, b) = (&self.config.cells[old], &next.config.cells[new]);
            a.name == b.name && a.placer_settings_equal(b)
        };
        let mut movement = Movement::default();
        for tenant in self.tenants.iter() {
            let Some(after) = next.tenants.get(tenant.id()) else {
                continue;
            };
            movement.tenants += 1;
            if same_cell(tenant.cell_index(), after.cell_index())
                && tenant.k() == after.k()
                && tenant.shards() == after.shards()
            {
                continue;
            }
            movement.add(&self.members_of(tenant), &next.members_of(after), {
                self.config.cells[tenant.cell_index()].name
                    == next.config.cells[after.cell_index()].name
            });
        }
        movement
    }

    /// A registered tenant's members, by shard id.
    pub(crate) fn members_of(&self, tenant: Tenant<'_>) -> std::collections::BTreeSet<String> {
        let cell = &self.config.cells[tenant.cell_index()];
        self.topology
            .tenant_subset(tenant)
            .iter()
            .map(|&i| cell.shards[i as usize].id.clone())
            .collect()
    }
    /// Creates every series of this snapshot's cells and shards that
    /// counts events, at zero ([`crate::telemetry::metrics::Metrics::know`]).
    fn know_series(&self, metrics: &crate::telemetry::metrics::Metrics) {
        // Every reason an ejection can have.
        let reasons = [crate::health::EjectReason::ConsecutiveFailures.name()];
        for (cell, shards) in self.config.cells.iter().zip(&self.shards) {
            let ids: Vec<&str> = shards.iter().map(|shard| shard.id.as_str()).collect();
            metrics.know(&cell.name, &ids, &reasons);
        }
        discovered_shards::know_series(&self.memberships, metrics);
    }
}

/// How `config` says `shard` is reached.
fn connector(shard: &ShardSettings, config: &GatewayConfig) -> Connector {
    Connector::for_shard(
        &shard.url,
        shard.server_name.as_ref(),
        config.upstream_tls(),
        shard.protocol,
    )
}

/// The whole gateway.
#[derive(Debug)]
pub struct Gateway {
    snapshot: ArcSwap<Snapshot>,
    /// The retry budget, shared by all requests.
    pub budget: RetryBudget,
    /// Where the JSON access log goes (`logging.access_log_file`, or
    /// stderr).
    pub access_log: crate::telemetry::access_log::AccessLog,
    /// Prometheus metrics.
    pub metrics: crate::telemetry::metrics::Metrics,
    /// Per-tenant success over the availability window.
    pub tenant_windows: crate::telemetry::window::Windows,
    /// Per-shard attempts over the availability window (for utilization,
    /// and the status page's sparklines, errors and latency).
    pub shard_windows: crate::telemetry::window::ShardWindows,
    /// Tenants quarantined by poison containment; they survive reloads.
    pub suspects: crate::health::quarantine::Suspects,
    /// Each tenant's attempts in flight by member, for poison containment
    /// before any strike (`routing.poison_spread`); keyed by tenant id, so
    /// they survive reloads.
    pub spread: crate::health::spread::Spread,
    /// The store a fleet of replicas shares containment and marks through
    /// (`[fleet]`, read at start: a reload does not change it).
    pub fleet: Option<Arc<crate::store::fleet::FleetStore>>,
    /// Where finished spans go (`[tracing]`; pointed at its collector at
    /// start and by every reload).
    pub traces: crate::telemetry::traces::Traces,
    /// Bumped by every reload that took effect, so that what schedules
    /// itself by the configuration (the health checkers) looks again at
    /// once instead of after its old interval.
    reloads: tokio::sync::watch::Sender<u64>,
    /// Held while an ejection is judged against its cell's cap
    /// (`outlier.max_ejection_percent`).
    ejecting: Mutex<()>,
    /// The replica's link to the tenant store, when tenants come from one
    /// (set once, at start).
    pub tenant_store: std::sync::OnceLock<Arc<crate::store::tenants::link::StoreLink>>,
    /// Held while a new snapshot is made from the current one (a reload,
    /// a change to some tenants), so two never build on the same one and
    /// the second undo the first.
    changing: Mutex<()>,
    /// Whether a thread is building the blast-radius model of the latest
    /// snapshot ([`Gateway::model_latest`]).
    modeling: AtomicBool,
    /// Per discovered cell: what the last look at its source gave.
    pub discovery_looks: Mutex<std::collections::BTreeMap<String, crate::discovery::LookStatus>>,
}

impl Gateway {
    /// A gateway serving `snapshot`.
    pub fn new(snapshot: Snapshot) -> Arc<Self> {
        let budget = RetryBudget::new(&snapshot.config.retry_budget, Instant::now());
        let window = snapshot.config.admin.availability_window;
        let metrics = crate::telemetry::metrics::Metrics::new();
        snapshot.know_series(&metrics);
        let access_log = crate::telemetry::access_log::AccessLog::new(
            snapshot.config.access_log_file.as_deref(),
        );
        // The replica's name, taken once: the fleet's, and its traces'
        // instance (tracing may be turned on by a reload).
        let replica = snapshot
            .config
            .fleet
            .as_ref()
            .and_then(|fleet| fleet.replica_id.clone())
            .unwrap_or_else(crate::config::default_replica_id);
        let fleet =
            snapshot.config.fleet.as_ref().map(|fleet| {
                Arc::new(crate::store::fleet::FleetStore::new(&fleet.store, &replica))
            });
        let traces = crate::telemetry::traces::Traces::new(metrics.traces.clone(), replica);
        let snapshot = Arc::new(snapshot);
        let gateway = Arc::new(Self {
            access_log,
            snapshot: ArcSwap::new(snapshot),
            budget,
            metrics,
            tenant_windows: crate::telemetry::window::Windows::new(window, Instant::now()),
            shard_windows: crate::telemetry::window::ShardWindows::new(window, Instant::now()),
            suspects: crate::health::quarantine::Suspects::new(),
            spread: crate::health::spread::Spread::new(),
            fleet,
            traces,
            reloads: tokio::sync::watch::Sender::new(0),
            ejecting: Mutex::new(()),
            tenant_store: std::sync::OnceLock::new(),
            changing: Mutex::new(()),
            modeling: AtomicBool::new(false),
            discovery_looks: Mutex::new(std::collections::BTreeMap::new()),
        });
        // The live blast radius and the standing model, off the request
        // path, from the start.
        gateway.model_latest();
        gateway
    }

    /// Points trace export at `config`'s collector (or nowhere), warning
    /// if the exporter cannot be set up: tracing never stops a start or a
    /// reload, and spans it cannot send are counted as dropped.
    pub fn trace_to(&self, config: &GatewayConfig) {
        let settings = config.tracing.as_ref().map(|tracing| &tracing.export);
        if let Err(error) = self.traces.point_at(settings) {
            tracing::warn!(%error, "traces are not exported");
        }
    }

    /// Changes whenever a reload takes effect.
    pub fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Feeds a failed attempt to passive outlier detection (and counts the
    /// ejection it causes, if it does).
    pub(crate) fn record_failure(
        &self,
        outlier: &crate::config::OutlierSettings,
        shard: &ShardRuntime,
        now: Instant,
    ) {
        shard.failures.fetch_add(1, Ordering::Relaxed);
        let due = {
            let mut health = shard.health.lock().expect("health lock");
            shard.failing.store(true, Ordering::Relaxed);
            health.record_failure(now, outlier)
        };
        let Some(due) = due else {
            return;
        };
        // An ejection is due (rare): judged against the whole cell, one
        // decision at a time, so two shards due together cannot both fit
        // under the cap. No shard's lock is held while another's is taken.
        let _one_at_a_time = self.ejecting.lock().expect("ejection lock");
        let snapshot = self.snapshot();
        let (shards, others_out) = snapshot
            .shards
            .iter()
            .find(|cell| cell.iter().any(|other| std::ptr::eq(&**other, shard)))
            .map_or((1, 0), |cell| {
                let out = cell
                    .iter()
                    .filter(|other| !std::ptr::eq(&***other, shard))
                    .filter(|other| {
                        other.availability_at(&snapshot.config, now) != Availability::Up
                    })
                    .count();
                (cell.len(), out)
            });
        let allowed = crate::health::ejection_allowed(others_out, shards, outlier);
        let ejected = {
            let mut health = shard.health.lock().expect("health lock");
            if allowed {
                health.eject(due, now, outlier)
            } else {
                health.skip_ejection();
                None
            }
        };
        if !allowed {
            self.metrics
                .ejections_skipped
                .get_or_create(&crate::telemetry::metrics::ShardLabels {
                    cell: shard.cell.clone(),
                    shard: shard.id.clone(),
                })
                .inc();
            tracing::warn!(cell = %shard.cell, shard = %shard.id, others_out, shards, "shard not ejected: the cell is at outlier.max_ejection_percent");
            return;
        }
        if let Some(reason) = ejected {
            self.metrics
                .ejections
                .get_or_create(&crate::telemetry::metrics::EjectionLabels {
                    cell: shard.cell.clone(),
                    shard: shard.id.clone(),
                    reason: reason.name(),
                })
                .inc();
            tracing::warn!(cell = %shard.cell, shard = %shard.id, ?reason, "shard ejected");
        }
    }

    /// Feeds a successful attempt (its response ended cleanly) to passive
    /// outlier detection: the run of failures is broken.
    pub(crate) fn record_success(shard: &ShardRuntime) {
        // Set and cleared under the lock; read outside it, a success that
        // races a failure may leave that failure counted, as it might
        // have been had they come in the other order.
        if !shard.failing.load(Ordering::Relaxed) {
            return;
        }
        let mut health = shard.health.lock().expect("health lock");
        health.record_success();
        shard.failing.store(false, Ordering::Relaxed);
    }
}

/// What a reload changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Reloaded {
    /// Tenants whose subset changed (0 unless the migration was allowed).
    pub changed: u64,
    /// Tenants compared.
    pub tenants: u64,
    /// Members gained over every tenant (0 unless a change was allowed).
    pub members_gained: u64,
    /// Members lost over every tenant (0 unless a migration was allowed).
    pub members_lost: u64,
}
