//! Prometheus metrics, names prefixed `shuffle_`.
//!
//! Counters and histograms are updated on the request path; gauges that
//! describe the present (shard health, in-flight, utilization variance,
//! tenant availability, the live blast radius) are computed when scraped, so
//! they are never stale and cost nothing between scrapes.
//!
//! Per-tenant availability is exported without one series per tenant: the
//! number of tenants at or below each success-ratio bound (a cumulative,
//! histogram-shaped gauge family) and the number below 99 % and 99.9 %.
//!
//! `/metrics` speaks both expositions: OpenMetrics (what `prometheus-client`
//! writes) and, for a scraper that asks for `text/plain`, Prometheus's
//! classic text format 0.0.4 ([`classic_text`]). They differ where it
//! matters: OpenMetrics names a counter family without `_total` and its
//! samples with it, and a classic parser takes the family's `# TYPE` for a
//! different metric, leaving the counter with no samples.
//!
//! Every series whose labels are known in advance (each cell's and each
//! shard's counters, every reload result) exists from the start at zero,
//! so that `rate()` and `increase()` see the first event.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

use super::registered::Registered;
use std::sync::atomic::AtomicU64;

use crate::syntax::grpc::Code;

// The label sets and label values moved to their own files; their paths
// through this module stay, for the callers that name them here.
pub(crate) use super::discovery::DiscoveryMetrics;
pub(crate) use super::fleet::FleetMetrics;
pub(crate) use super::labels::{
    AttemptLabels, BoundLabels, BuildLabels, CellLabels, DirectionLabels, EjectionLabels,
    FALLBACK_REASONS, FailoverLabels, FallbackLabels, GrpcLabels, LIMIT_KINDS, LISTENERS,
    LimitLabels, ListenerLabels, OutcomeLabels, REQUEST_OUTCOMES, RequestLabels, ResultLabels,
    ShardLabels, SideLabels, ThresholdLabels, request_outcome,
};
pub(crate) use super::model::ModelMetrics;
pub(crate) use super::tenant_store::TenantStoreMetrics;
pub(crate) use super::websocket::WebSocketMetrics;

/// Success-ratio bounds of the tenant availability distribution: `0` is
/// fully down (nothing served), told apart from a tenant at 50 %; the
/// fine bounds near 1 are where SLOs live.
pub const AVAILABILITY_BOUNDS: [f64; 9] = [0.0, 0.5, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1.0];

/// The two expositions `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0 (`application/openmetrics-text`).
    OpenMetrics,
    /// Prometheus's classic text format 0.0.4 (`text/plain`).
    Classic,
}

impl Format {
    /// The format an `Accept` header asks for: classic text when it
    /// prefers `text/plain` to OpenMetrics (by `q`, OpenMetrics winning a
    /// tie), OpenMetrics otherwise (no header, `*/*`, or anything else).
    pub fn negotiate(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return Format::OpenMetrics;
        };
        let (mut openmetrics, mut plain) = (None::<f64>, None::<f64>);
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|parameter| {
                    let (name, value) = parameter.split_once('=')?;
                    (name.trim().eq_ignore_ascii_case("q")).then(|| value.trim().parse().ok())?
                })
                .next()
                .unwrap_or(1.0_f64);
            let slot = match media.as_str() {
                "application/openmetrics-text" => &mut openmetrics,
                "text/plain" => &mut plain,
                _ => continue,
            };
            *slot = Some(slot.map_or(q, |seen| seen.max(q)));
        }
        match (plain, openmetrics) {
            (Some(plain), openmetrics) if plain > 0.0 && plain > openmetrics.unwrap_or(0.0) => {
                Format::Classic
            }
            _ => Format::OpenMetrics,
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Rewrites an OpenMetrics exposition as Prometheus's classic text format
/// 0.0.4: a counter's `# HELP` and `# TYPE` name the family with its
/// `_total` suffix (the name its samples carry, as a classic parser
/// requires), `# UNIT` and `# EOF` go, and `info`/`stateset` families
/// (which classic text lacks) become gauges. Samples are unchanged: both
/// formats write labels, escapes and values alike.
pub fn classic_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let metadata = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| Some((prefix, line.strip_prefix(prefix)?)));
        match metadata {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(match tail {
                    "info" | "stateset" | "gaugehistogram" | "unknown" if prefix == "# TYPE " => {
                        if tail == "gaugehistogram" {
                            "histogram"
                        } else if tail == "unknown" {
                            "untyped"
                        } else {
                            "gauge"
                        }
                    }
                    _ => tail,
                });
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// One cell's request counters (by outcome) and latency histogram, looked
/// up once per snapshot so the request path allocates no label strings.
#[derive(Debug, Clone)]
pub(crate) struct CellHandles {
    requests: [Counter; 8],
    seconds: Histogram,
    limited: [Counter; 2],
}

impl CellHandles {
    /// Counts a finished request with one of [`REQUEST_OUTCOMES`].
    pub(crate) fn request(&self, outcome: &str, elapsed: Duration) {
        let index = REQUEST_OUTCOMES
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(0);
        self.requests[index].inc();
        self.seconds.observe(elapsed.as_secs_f64());
    }

    /// Counts a request refused for one of [`LIMIT_KINDS`].
    pub(crate) fn limited(&self, limit: &str) {
        let index = LIMIT_KINDS.iter().position(|l| *l == limit).unwrap_or(0);
        self.limited[index].inc();
    }
}

/// Attempt outcomes, in the order of [`ShardHandles::attempts`].
pub(crate) const ATTEMPT_OUTCOMES: [&str; 5] = ["ok", "connect", "timeout", "reset", "status"];

/// One shard's attempt counters (by outcome) and latency histogram.
#[derive(Debug, Clone)]
pub(crate) struct ShardHandles {
    attempts: [Counter; 5],
    seconds: Histogram,
}

impl ShardHandles {
    /// Counts an attempt with one of [`ATTEMPT_OUTCOMES`].
    pub(crate) fn attempt(&self, outcome: &str, elapsed: Duration) {
        let index = ATTEMPT_OUTCOMES
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(0);
        self.attempts[index].inc();
        self.seconds.observe(elapsed.as_secs_f64());
    }
}

/// Every metric family.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Every sample name the registry's families may expose.
    names: Vec<String>,
    /// One scrape at a time: the scrape-time gauges are cleared, set and
    /// encoded as one step.
    scrape: Mutex<()>,
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) attempts: Family<AttemptLabels, Counter>,
    pub(crate) failovers: Family<FailoverLabels, Counter>,
    pub(crate) spills: Family<CellLabels, Counter>,
    /// `shuffle_lookback_attempts_total{cell}`: attempts at a member of a
    /// tenant's previous subset during a lookback window.
    pub(crate) lookback_attempts: Family<CellLabels, Counter>,
    pub(crate) budget_exhausted: Family<CellLabels, Counter>,
    /// `shuffle_shed_total{cell}`: requests shed because every member
    /// left was at its in-flight cap.
    pub(crate) shed: Family<CellLabels, Counter>,
    /// `shuffle_poison_stops_total{cell}`.
    pub(crate) poison_stops: Family<CellLabels, Counter>,
    /// `shuffle_tenants_suspected_total{cell}`.
    pub(crate) suspects_marked: Family<CellLabels, Counter>,
    /// `shuffle_suspect_tenants`, set when scraped.
    pub(crate) suspect_tenants: Gauge,
    pub(crate) ejections: Family<EjectionLabels, Counter>,
    /// `shuffle_ejections_skipped_total{cell,shard}`: ejections that were
    /// due and not made, as the cell was at `outlier.max_ejection_percent`.
    pub(crate) ejections_skipped: Family<ShardLabels, Counter>,
    pub(crate) request_seconds: Family<CellLabels, Histogram>,
    pub(crate) attempt_seconds: Family<ShardLabels, Histogram>,
    pub(crate) shard_healthy: Family<ShardLabels, Gauge>,
    pub(crate) shard_ejected: Family<ShardLabels, Gauge>,
    pub(crate) shard_in_flight: Family<ShardLabels, Gauge>,
    pub(crate) utilization_cv: Family<CellLabels, FloatGauge>,
    pub(crate) tenants_at_most: Family<BoundLabels, Gauge>,
    pub(crate) tenants_below: Family<ThresholdLabels, Gauge>,
    pub(crate) blast_fully_down: Family<CellLabels, Gauge>,
    pub(crate) blast_degraded: Family<CellLabels, Gauge>,
    /// `shuffle_stream_timeouts_total{side="backend"}`.
    pub(crate) backend_stalls: Counter,
    /// `shuffle_stream_timeouts_total{side="client"}`.
    pub(crate) client_stalls: Counter,
    /// `shuffle_tls_handshakes_total{outcome}`.
    pub(crate) tls_handshakes: Family<OutcomeLabels, Counter>,
    /// WebSocket upgrades and their tunnels.
    pub(crate) websockets: WebSocketMetrics,
    /// The fleet store's health (`[fleet]`).
    pub(crate) fleet: FleetMetrics,
    /// The tenant store's health and the changes applied (`[tenants] store`).
    pub(crate) tenant_store: TenantStoreMetrics,
    /// Discovered cells' looks and membership changes.
    pub(crate) discovery: DiscoveryMetrics,
    /// The standing blast-radius model.
    pub(crate) model: ModelMetrics,
    /// What became of finished spans (`[tracing]`).
    pub(crate) traces: crate::telemetry::traces::TraceMetrics,
    /// `shuffle_grpc_requests_total{cell,grpc_status}`.
    pub(crate) grpc_requests: Family<GrpcLabels, Counter>,
    /// `shuffle_tenant_limited_total{cell,limit}`.
    pub(crate) tenant_limited: Family<LimitLabels, Counter>,
    /// `shuffle_tenant_limit_store_fallbacks_total{reason}`, by
    /// [`FALLBACK_REASONS`].
    store_fallbacks: [Counter; 3],
    /// `shuffle_reloads_total{result}`: `[success, failure]`.
    reloads: [Counter; 2],
    /// `shuffle_last_reload_success_timestamp_seconds`.
    last_reload_success: FloatGauge,
    /// `shuffle_last_reload_successful`: 1 when the last reload took
    /// effect (or none was tried), 0 when it was refused.
    last_reload_successful: Gauge,
    /// `shuffle_client_connections_total{listener}`, by [`LISTENERS`].
    connections_accepted: [Counter; 2],
    /// `shuffle_client_connections_open{listener}`, by [`LISTENERS`].
    connections_open: [Gauge; 2],
    /// `shuffle_client_bytes_total{direction="in"}`.
    pub(crate) client_bytes_in: Counter,
    /// `shuffle_client_bytes_total{direction="out"}`.
    pub(crate) client_bytes_out: Counter,
}

/// One client connection counted as open on its listener until dropped.
#[derive(Debug)]
pub(crate) struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn latency_histogram() -> Histogram {
    // 0.5 ms to about 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The registry being filled by [`Metrics::new`]: each family registered
/// in call order (the order of the exposition) and handed back, and the
/// families whose series are known in advance, each created at zero in a
/// step of its own so that `rate()` and `increase()` see the first event.
struct Families(Registered);

impl Families {
    /// Registers `metric` as `name` with `help` and hands it back.
    fn add_metric<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        self.0.add_metric(name, help, metric)
    }

    /// Registers a new, empty `M` as `name` with `help`.
    fn add<M: Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        self.0.add(name, help)
    }

    /// `shuffle_stream_timeouts_total{side}`: the backend's and the
    /// client's series.
    fn stream_timeouts(&mut self) -> (Counter, Counter) {
        let stream_timeouts: Family<SideLabels, Counter> = self.add("stream_timeouts", "Streams cut off because one side stopped moving: side=backend sent nothing of a response body for limits.backend_idle_timeout_ms; side=client accepted nothing for limits.client_write_timeout_ms, or sent nothing of its HTTP/2 request body for limits.client_body_timeout_ms");
        // Each handle cloned before the next lookup: a lookup's guard holds
        // the family's lock, and a second lookup that must insert would
        // wait on it for ever.
        let backend = stream_timeouts
            .get_or_create(&SideLabels { side: "backend" })
            .clone();
        let client = stream_timeouts
            .get_or_create(&SideLabels { side: "client" })
            .clone();
        (backend, client)
    }

    /// `shuffle_tls_handshakes_total{outcome}`, every outcome at zero.
    fn tls_handshakes(&mut self) -> Family<OutcomeLabels, Counter> {
        let tls_handshakes: Family<OutcomeLabels, Counter> = self.add("tls_handshakes", "TLS handshakes on the TLS listener by outcome: ok, failed (refused by either side, or not TLS), timeout (not finished within tls.handshake_timeout_ms)");
        for outcome in ["ok", "failed", "timeout"] {
            drop(tls_handshakes.get_or_create(&OutcomeLabels { outcome }));
        }
        tls_handshakes
    }

    /// `shuffle_tenant_limit_store_fallbacks_total{reason}`, by
    /// [`FALLBACK_REASONS`].
    fn store_fallbacks(&mut self) -> [Counter; 3] {
        let fallbacks: Family<FallbackLabels, Counter> = self.add("tenant_limit_store_fallbacks", "Requests judged by this replica's own bucket because the global limits store (limits.tenant.store) gave no answer: unreachable (no connection), timeout (limits.tenant.store_timeout_ms), bad_reply (not the script's answer)");
        FALLBACK_REASONS.map(|reason| fallbacks.get_or_create(&FallbackLabels { reason }).clone())
    }

    /// `shuffle_build_info`, set once: nothing changes it later.
    fn build_info(&mut self) {
        let build_info: Family<BuildLabels, Gauge> = self.add(
            "build_info",
            "Always 1; the labels say which build is running",
        );
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                profile: if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "release"
                },
            })
            .set(1);
    }

    /// `shuffle_reloads_total{result}` (`[success, failure]`), and the
    /// last successful load's time and whether the last one took effect,
    /// both set for the start-up load.
    fn reloads(&mut self) -> ([Counter; 2], FloatGauge, Gauge) {
        let reload_results: Family<ResultLabels, Counter> = self.add("reloads", "Configuration reloads (SIGHUP or POST /admin/reload) by result: success (swapped in) or failure (refused; the previous configuration keeps serving)");
        let reloads = ["success", "failure"].map(|result| {
            reload_results
                .get_or_create(&ResultLabels { result })
                .clone()
        });
        let last_reload_success: FloatGauge = self.add(
            "last_reload_success_timestamp_seconds",
            "Unix time of the last configuration load that took effect (start-up counts)",
        );
        last_reload_success.set(unix_seconds());
        let last_reload_successful: Gauge = self.add("last_reload_successful", "1 when the last reload took effect (or none was tried since start), 0 when it was refused");
        last_reload_successful.set(1);
        (reloads, last_reload_success, last_reload_successful)
    }

    /// `shuffle_client_connections_total{listener}` and
    /// `shuffle_client_connections_open{listener}`, by [`LISTENERS`].
    fn connections(&mut self) -> ([Counter; 2], [Gauge; 2]) {
        let connections: Family<ListenerLabels, Counter> = self.add(
            "client_connections",
            "Client connections accepted by data listener (plain or tls)",
        );
        let accepted = LISTENERS.map(|listener| {
            connections
                .get_or_create(&ListenerLabels { listener })
                .clone()
        });
        let open: Family<ListenerLabels, Gauge> = self.add(
            "client_connections_open",
            "Client connections open now by data listener (plain or tls)",
        );
        let open =
            LISTENERS.map(|listener| open.get_or_create(&ListenerLabels { listener }).clone());
        (accepted, open)
    }

    /// `shuffle_client_bytes_total{direction}`: `(in, out)`.
    fn client_bytes(&mut self) -> (Counter, Counter) {
        let bytes: Family<DirectionLabels, Counter> = self.add("client_bytes", "Bytes read from (direction=in) and written to (direction=out) client connections, TLS records included; counted every 64 KiB and when a connection closes");
        // Cloned one at a time (see `stream_timeouts`).
        let into = bytes
            .get_or_create(&DirectionLabels { direction: "in" })
            .clone();
        let out = bytes
            .get_or_create(&DirectionLabels { direction: "out" })
            .clone();
        (into, out)
    }
}

impl Metrics {
    /// Every sample name the gateway's families may expose
    /// (`shuffle_requests_total`, `shuffle_request_duration_seconds_bucket`,
    /// ...), whether or not they have a series yet: what the alert rules
    /// and the dashboard may name.
    pub fn exported_names(&self) -> &[String] {
        &self.names
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family, in the order they are exposed: the request
    /// path's counters and latencies, the scrape-time gauges, then the
    /// families with series known in advance, each from its own step.
    pub fn new() -> Self {
        let mut families = Families(Registered::with_prefix("shuffle"));
        let requests = families.add("requests", "Client requests by cell and outcome");
        let attempts = families.add("attempts", "Attempts to shards by cell, shard and outcome");
        let failovers = families.add("failovers", "Requests that failed over inside the subset: kind=retry after a failed attempt, kind=reroute around a member out of rotation");
        let spills = families.add("spills", "Requests served outside the tenant's subset");
        let lookback_attempts = families.add("lookback_attempts", "Attempts at a member of a tenant's previous subset, after its current members were exhausted or answered 404, during a lookback window (reload.lookback_seconds)");
        let budget_exhausted = families.add(
            "retry_budget_exhausted",
            "Retries refused because the retry budget was spent",
        );
        let shed = families.add("shed", "Requests answered 503 because every member left was at its in-flight cap (max_in_flight); not counted as shard failures");
        let poison_stops = families.add(
            "poison_stops",
            "Requests stopped (502) after failing crash-like on routing.poison_after members",
        );
        let suspects_marked = families.add(
            "tenants_suspected",
            "Tenants made suspect by poison containment",
        );
        let suspect_tenants = families.add(
            "suspect_tenants",
            "Tenants suspect now (quarantined by poison containment)",
        );
        let ejections = families.add("ejections", "Shard ejections by passive outlier detection");
        let ejections_skipped = families.add(
            "ejections_skipped",
            "Ejections due but not made: the cell was at outlier.max_ejection_percent",
        );
        let request_seconds = families.add_metric(
            "request_duration_seconds",
            "Time to response headers, all attempts included",
            Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        );
        let attempt_seconds = families.add_metric(
            "attempt_duration_seconds",
            "Time to response headers of one attempt",
            Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        );
        let shard_healthy =
            families.add("shard_healthy", "1 when the shard is in rotation, else 0");
        let shard_ejected = families.add("shard_ejected", "1 while the shard is ejected");
        let shard_in_flight = families.add("shard_in_flight", "Requests in flight on the shard");
        let utilization_cv = families.add("shard_utilization_cv", "Coefficient of variation of per-shard request rates over the window (alarm on a rise: a whale has landed)");
        let tenants_at_most = families.add("tenants_availability_at_most", "Tenants whose success ratio over the window is at most le (cumulative, histogram-shaped)");
        let tenants_below = families.add(
            "tenants_below_availability",
            "Tenants whose success ratio over the window is below the threshold",
        );
        let blast_fully_down = families.add(
            "blast_fully_down_tenants",
            "Modeled tenants with every member out of rotation now",
        );
        let blast_degraded = families.add(
            "blast_degraded_tenants",
            "Modeled tenants with at least one member out of rotation now",
        );
        let (backend_stalls, client_stalls) = families.stream_timeouts();
        let tls_handshakes = families.tls_handshakes();
        let websockets = WebSocketMetrics::register(&mut families.0);
        let fleet = FleetMetrics::register(&mut families.0);
        let tenant_store = TenantStoreMetrics::register(&mut families.0);
        let discovery = DiscoveryMetrics::register(&mut families.0);
        let model = ModelMetrics::register(&mut families.0);
        let traces = crate::telemetry::traces::TraceMetrics::register(&mut families.0);
        let grpc_requests = families.add("grpc_requests", "gRPC calls by cell and the gRPC status their answer's head carried (the gateway's own errors and trailers-only answers), or unseen when it comes in trailers; each is also in shuffle_requests");
        let tenant_limited = families.add("tenant_limited", "Requests refused with 429 because their tenant was over a limit, by cell and limit (rate: limits.tenant.requests_per_second and burst; in_flight: limits.tenant.max_in_flight); no tenant label, see GET /admin/tenants?limited=N");
        let store_fallbacks = families.store_fallbacks();
        families.build_info();
        let (reloads, last_reload_success, last_reload_successful) = families.reloads();
        let (connections_accepted, connections_open) = families.connections();
        let (client_bytes_in, client_bytes_out) = families.client_bytes();
        let (registry, names) = families.0.into_parts();
        Self {
            reloads,
            last_reload_success,
            last_reload_successful,
            connections_accepted,
            connections_open,
            client_bytes_in,
            client_bytes_out,
            tenant_limited,
            store_fallbacks,
            grpc_requests,
            tls_handshakes,
            registry,
            names,
            scrape: Mutex::new(()),
            websockets,
            fleet,
            tenant_store,
            discovery,
            model,
            traces,
            backend_stalls,
            client_stalls,
            requests,
            attempts,
            failovers,
            spills,
            lookback_attempts,
            budget_exhausted,
            shed,
            poison_stops,
            suspects_marked,
            suspect_tenants,
            ejections,
            ejections_skipped,
            request_seconds,
            attempt_seconds,
            shard_healthy,
            shard_ejected,
            shard_in_flight,
            utilization_cv,
            tenants_at_most,
            tenants_below,
            blast_fully_down,
            blast_degraded,
        }
    }

    /// Handles for one cell's request series.
    pub(crate) fn cell_handles(&self, cell: &str) -> CellHandles {
        let requests = REQUEST_OUTCOMES.map(|outcome| {
            self.requests
                .get_or_create(&RequestLabels {
                    cell: cell.to_owned(),
                    outcome,
                })
                .clone()
        });
        let seconds = self
            .request_seconds
            .get_or_create(&CellLabels {
                cell: cell.to_owned(),
            })
            .clone();
        let limited = LIMIT_KINDS.map(|limit| {
            self.tenant_limited
                .get_or_create(&LimitLabels {
                    cell: cell.to_owned(),
                    limit,
                })
                .clone()
        });
        CellHandles {
            requests,
            seconds,
            limited,
        }
    }

    /// Creates the series of `cell` and its `shards` that count events
    /// (at zero, if they did not exist), so that they are exported before
    /// the first event: requests, limits, spills, the retry budget, shedding,
    /// poison containment and failovers per cell; attempts and each of
    /// `eject_reasons` per shard.
    pub(crate) fn know(&self, cell: &str, shards: &[&str], eject_reasons: &[&'static str]) {
        self.cell_handles(cell);
        for family in [
            &self.spills,
            &self.lookback_attempts,
            &self.budget_exhausted,
            &self.shed,
            &self.poison_stops,
            &self.suspects_marked,
        ] {
            drop(family.get_or_create(&CellLabels {
                cell: cell.to_owned(),
            }));
        }
        for kind in ["retry", "reroute"] {
            drop(self.failovers.get_or_create(&FailoverLabels {
                cell: cell.to_owned(),
                kind,
            }));
        }
        for shard in shards {
            self.shard_handles(cell, shard);
            drop(self.ejections_skipped.get_or_create(&ShardLabels {
                cell: cell.to_owned(),
                shard: (*shard).to_owned(),
            }));
            for &reason in eject_reasons {
                drop(self.ejections.get_or_create(&EjectionLabels {
                    cell: cell.to_owned(),
                    shard: (*shard).to_owned(),
                    reason,
                }));
            }
        }
    }

    /// Counts a reload: `Ok` when it took effect, `Err` when refused.
    pub(crate) fn reload(&self, succeeded: bool) {
        self.reloads[usize::from(!succeeded)].inc();
        self.last_reload_successful.set(i64::from(succeeded));
        if succeeded {
            self.last_reload_success.set(unix_seconds());
        }
    }

    /// Counts a client connection accepted on `listener` (one of
    /// [`LISTENERS`]), open until the guard is dropped.
    pub(crate) fn connection(&self, listener: &str) -> OpenConnection {
        let index = LISTENERS.iter().position(|l| *l == listener).unwrap_or(0);
        self.connections_accepted[index].inc();
        let open = self.connections_open[index].clone();
        open.inc();
        OpenConnection(open)
    }

    /// Counts a request judged locally because the global limits store
    /// gave no answer, for one of [`FALLBACK_REASONS`].
    pub(crate) fn store_fallback(&self, reason: &str) {
        let index = FALLBACK_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.store_fallbacks[index].inc();
    }

    /// Handles for one shard's attempt series, looked up once and kept with
    /// the shard so the request path neither allocates label strings nor
    /// hashes them.
    pub(crate) fn shard_handles(&self, cell: &str, shard: &str) -> ShardHandles {
        let attempts = ATTEMPT_OUTCOMES.map(|outcome| {
            self.attempts
                .get_or_create(&AttemptLabels {
                    cell: cell.to_owned(),
                    shard: shard.to_owned(),
                    outcome,
                })
                .clone()
        });
        let seconds = self
            .attempt_seconds
            .get_or_create(&ShardLabels {
                cell: cell.to_owned(),
                shard: shard.to_owned(),
            })
            .clone();
        ShardHandles { attempts, seconds }
    }

    /// Counts a finished client request.
    pub fn request(&self, cell: &str, outcome: &'static str, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                cell: cell.to_owned(),
                outcome,
            })
            .inc();
        self.request_seconds
            .get_or_create(&CellLabels {
                cell: cell.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a finished gRPC call in `cell` ("" before a tenant was
    /// known) whose answer's head showed `status`, if any.
    pub(crate) fn grpc_request(&self, cell: &str, status: Option<Code>) {
        self.grpc_requests
            .get_or_create(&GrpcLabels {
                cell: cell.to_owned(),
                grpc_status: status.map_or("unseen", Code::name),
            })
            .inc();
    }

    /// Counts a failover.
    pub(crate) fn failover(&self, cell: &str, kind: &'static str) {
        self.failovers
            .get_or_create(&FailoverLabels {
                cell: cell.to_owned(),
                kind,
            })
            .inc();
    }

    /// Counts an event per cell.
    pub(crate) fn cell_event(family: &Family<CellLabels, Counter>, cell: &str) {
        family
            .get_or_create(&CellLabels {
                cell: cell.to_owned(),
            })
            .inc();
    }

    /// Drops every series of the scrape-time gauges that describe shards
    /// and cells, so that a shard or cell a reload removed stops being
    /// reported instead of keeping its last value for ever.
    pub(crate) fn clear_present_gauges(&self) {
        self.shard_healthy.clear();
        self.shard_ejected.clear();
        self.shard_in_flight.clear();
        self.utilization_cv.clear();
        self.blast_fully_down.clear();
        self.blast_degraded.clear();
    }

    /// One scrape: `refresh` sets the scrape-time gauges, then everything
    /// is encoded, with no other scrape in between.
    pub fn scrape(&self, refresh: impl FnOnce(), format: Format) -> String {
        let _one_at_a_time = self.scrape.lock().unwrap_or_else(PoisonError::into_inner);
        refresh();
        match format {
            Format::OpenMetrics => self.encode(),
            Format::Classic => classic_text(&self.encode()),
        }
    }

    /// The text exposition (call [`crate::ops::admin::refresh_gauges`] first, or
    /// use [`Metrics::scrape`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Now as Unix time in seconds (0 if the clock is before 1970).
fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_header_chooses_the_exposition() {
        for (accept, format) in [
            (None, Format::OpenMetrics),
            (Some("*/*"), Format::OpenMetrics),
            (Some("text/plain"), Format::Classic),
            (Some("text/plain;version=0.0.4"), Format::Classic),
            (Some("TEXT/PLAIN; q=0.3, */*;q=0.1"), Format::Classic),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            // Prometheus's own header: OpenMetrics first.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                Format::OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.2, text/plain;q=0.9"),
                Format::Classic,
            ),
            // A tie, and text/plain refused outright.
            (
                Some("application/openmetrics-text, text/plain"),
                Format::OpenMetrics,
            ),
            (Some("text/plain;q=0"), Format::OpenMetrics),
            (Some("text/html"), Format::OpenMetrics),
        ] {
            assert_eq!(Format::negotiate(accept), format, "{accept:?}");
        }
    }

    #[test]
    fn classic_text_names_counters_by_their_samples_and_drops_openmetrics_only_lines() {
        let openmetrics = "# HELP a_requests Requests.\n# TYPE a_requests counter\n\
                           a_requests_total{cell=\"x\\\"y\"} 3\n\
                           # HELP a_seconds Time.\n# TYPE a_seconds histogram\n# UNIT a_seconds seconds\n\
                           a_seconds_sum 1.5\na_seconds_count 2\na_seconds_bucket{le=\"+Inf\"} 2\n\
                           # HELP a_build Build.\n# TYPE a_build info\na_build_info{version=\"1\"} 1\n\
                           # HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# EOF\n";
        assert_eq!(
            classic_text(openmetrics),
            "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\n\
             a_requests_total{cell=\"x\\\"y\"} 3\n\
             # HELP a_seconds Time.\n# TYPE a_seconds histogram\n\
             a_seconds_sum 1.5\na_seconds_count 2\na_seconds_bucket{le=\"+Inf\"} 2\n\
             # HELP a_build Build.\n# TYPE a_build gauge\na_build_info{version=\"1\"} 1\n\
             # HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n"
        );
    }

    #[test]
    fn the_whole_registry_reads_the_same_in_both_expositions() {
        let metrics = Metrics::new();
        metrics.know("c", &["s0", "s1"], &["consecutive_failures"]);
        let openmetrics = metrics.encode();
        let classic = classic_text(&openmetrics);
        let samples = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|line| !line.starts_with('#'))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(samples(&openmetrics), samples(&classic));
        // Each classic # TYPE names the samples that follow it.
        let mut family = String::new();
        for line in classic.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap().to_owned();
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let own = name == family
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| name == format!("{family}{suffix}"));
                assert!(own, "{name} outside {family}");
            }
        }
    }
}
