//! The admin listener: Prometheus metrics, the JSON admin API, the status
//! page, and the operator's levers (fail, restore and drain a shard;
//! reload).
//!
//! Every endpoint is a row of [`ROUTES`]: method, path, who may call it,
//! handler. The router is built from that table alone, and one middleware,
//! `guard`, stands in front of every route with the row's [`Access`]; so
//! an endpoint cannot exist without an access rule, and no handler checks
//! the token itself. The token comes from `admin.token_file` and is
//! compared in constant time; `/metrics` and the status page can be opened
//! up separately, `/readyz` is always open. Without a token file the
//! guarded endpoints answer 401: an admin API nobody configured a secret
//! for stays shut. Tenant membership (which shards serve a tenant) is shown
//! here and nowhere else.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use serde::{Deserialize, Serialize};
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use crate::fleet;
use crate::health::Availability;
use crate::ops::error::AdminError;
use crate::ops::tenant_writes;
use crate::ops::views::{limited, live_blast, worst};
use crate::state::{Gateway, LoadError, ShardRuntime, Snapshot};
use crate::telemetry::metrics::{
    AVAILABILITY_BOUNDS, BoundLabels, CellLabels, Format, ShardLabels, ThresholdLabels,
};

/// Who may call an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone who reaches the listener.
    Open,
    /// Whoever presents the admin token.
    Token,
    /// The token, unless `admin.metrics_without_token`.
    TokenUnlessMetricsOpen,
    /// The token, unless `admin.status_page_without_token`.
    TokenUnlessStatusPageOpen,
}

/// One admin endpoint: a row of [`ROUTES`].
pub struct Route {
    /// The method it answers (a `GET` route answers `HEAD` too).
    pub method: Method,
    /// The path pattern, with `{name}` for a path parameter.
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
    /// Its handler, for the given method.
    handler: fn(MethodFilter) -> MethodRouter<Arc<Gateway>>,
}

impl Route {
    /// A row of [`ROUTES`].
    const fn new(
        method: Method,
        path: &'static str,
        access: Access,
        handler: fn(MethodFilter) -> MethodRouter<Arc<Gateway>>,
    ) -> Self {
        Self {
            method,
            path,
            access,
            handler,
        }
    }
}

/// Every endpoint of the admin listener, and the only place one is added.
#[rustfmt::skip]
pub const ROUTES: &[Route] = &[
    Route::new(Method::GET,  "/",                           Access::TokenUnlessStatusPageOpen, |m| on(m, status_page)),
    Route::new(Method::GET,  "/metrics",                    Access::TokenUnlessMetricsOpen,    |m| on(m, metrics)),
    Route::new(Method::GET,  "/readyz",                     Access::Open,                      |m| on(m, ready)),
    Route::new(Method::GET,  "/admin/shards",               Access::Token,                     |m| on(m, shards)),
    Route::new(Method::POST, "/admin/shards/{id}/{action}", Access::Token,                     |m| on(m, shard_action)),
    Route::new(Method::GET,  "/admin/tenants",              Access::Token,                     |m| on(m, worst_tenants)),
    Route::new(Method::GET,  "/admin/tenants/{id}",         Access::Token,                     |m| on(m, tenant)),
    Route::new(Method::PUT,  "/admin/tenants/{id}",         Access::Token,                     |m| on(m, tenant_writes::put_tenant)),
    Route::new(Method::DELETE, "/admin/tenants/{id}",       Access::Token,                     |m| on(m, tenant_writes::delete_tenant)),
    Route::new(Method::POST, "/admin/tenants/{id}/clear",   Access::Token,                     |m| on(m, clear_suspect)),
    Route::new(Method::GET,  "/admin/tenant-store",         Access::Token,                     |m| on(m, tenant_writes::store_view)),
    Route::new(Method::GET,  "/admin/blast",                Access::Token,                     |m| on(m, blast)),
    Route::new(Method::POST, "/admin/reload",               Access::Token,                     |m| on(m, reload)),
    Route::new(Method::GET,  "/admin/fleet",                Access::Token,                     |m| on(m, fleet_view)),
    Route::new(Method::GET,  "/admin/discovery",            Access::Token,                     |m| on(m, discovery_view)),
];

/// Builds the admin router from [`ROUTES`], each route behind `guard`
/// with its row's access. (A route layer per row rather than one
/// `Router::layer` looking the row up by matched path: axum's
/// `matched-path` feature is off, and this way a wrong method or an
/// unknown path still answers 405 or 404 as before, reaching no handler.)
pub fn router(gateway: Arc<Gateway>) -> Router {
    ROUTES
        .iter()
        .fold(Router::new(), |router, route| {
            let method = MethodFilter::try_from(route.method.clone())
                .expect("an admin route's method is one axum routes");
            let guard = middleware::from_fn_with_state((Arc::clone(&gateway), route.access), guard);
            router.route(route.path, (route.handler)(method).route_layer(guard))
        })
        .with_state(gateway)
}

/// The token check in front of every admin route: the request reaches the
/// handler only if [`authorize`] lets it.
async fn guard(
    State((gateway, access)): State<(Arc<Gateway>, Access)>,
    request: Request,
    next: Next,
) -> Response {
    match authorize(&gateway.snapshot(), request.headers(), access) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// `GET /readyz`: 200 once the gateway serves. Open without a token on
/// any address because it says nothing else: it is what a readiness probe
/// needs, where `/metrics` would need a token on a listener others can
/// reach.
async fn ready() -> &'static str {
    "ready\n"
}

/// Serves the admin router on `listener` until `shutdown` completes.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let app = router(gateway);
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(%error, "admin listener failed");
    }
}

fn authorize(snapshot: &Snapshot, headers: &HeaderMap, access: Access) -> Result<(), AdminError> {
    let admin = &snapshot.config.admin;
    let open = match access {
        Access::Open => true,
        Access::Token => false,
        Access::TokenUnlessMetricsOpen => admin.metrics_without_token,
        Access::TokenUnlessStatusPageOpen => admin.status_page_without_token,
    };
    if open {
        return Ok(());
    }
    let Some(expected) = &snapshot.admin_token else {
        return Err(AdminError(
            StatusCode::UNAUTHORIZED,
            "the admin API is disabled: set admin.token_file in the configuration".into(),
        ));
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
        })
        .unwrap_or("");
    // Constant time over equal lengths; a length mismatch reveals only the
    // token's length, which is not secret enough to matter.
    let matches = presented.len() == expected.expose().len()
        && bool::from(presented.as_bytes().ct_eq(expected.expose().as_bytes()));
    if matches {
        Ok(())
    } else {
        Err(AdminError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong admin token".into(),
        ))
    }
}

/// Sets every scrape-time gauge from the current state (series of shards
/// and cells that no longer exist are dropped).
pub fn refresh_gauges(gateway: &Gateway) {
    let snapshot = gateway.snapshot();
    let metrics = &gateway.metrics;
    metrics.clear_present_gauges();
    let now = Instant::now();
    let window_seconds = gateway.shard_windows.length().as_secs_f64();
    for (cell_index, cell) in snapshot.config.cells.iter().enumerate() {
        let mut rates = Vec::new();
        for shard in &snapshot.shards[cell_index] {
            let labels = ShardLabels {
                cell: cell.name.clone(),
                shard: shard.id.clone(),
            };
            let availability = shard.availability(&snapshot.config);
            metrics
                .shard_healthy
                .get_or_create(&labels)
                .set(i64::from(availability == Availability::Up));
            metrics
                .shard_ejected
                .get_or_create(&labels)
                .set(i64::from(availability == Availability::Ejected));
            metrics
                .shard_in_flight
                .get_or_create(&labels)
                .set(shard.in_flight() as i64);
            let tally = gateway.shard_windows.tally(shard.window_key(), now);
            rates.push(tally.total as f64 / window_seconds);
        }
        metrics
            .utilization_cv
            .get_or_create(&CellLabels {
                cell: cell.name.clone(),
            })
            .set(coefficient_of_variation(&rates));
        let live = live_blast(&snapshot, cell_index);
        metrics
            .blast_fully_down
            .get_or_create(&CellLabels {
                cell: cell.name.clone(),
            })
            .set(live.fully_down as i64);
        metrics
            .blast_degraded
            .get_or_create(&CellLabels {
                cell: cell.name.clone(),
            })
            .set(live.degraded as i64);
    }
    metrics
        .suspect_tenants
        .set(gateway.suspects.list(now).len() as i64);
    let ratios: Vec<f64> = gateway
        .tenant_windows
        .all(now)
        .into_iter()
        .filter_map(|(_, tally)| tally.ratio())
        .collect();
    for bound in AVAILABILITY_BOUNDS {
        metrics
            .tenants_at_most
            .get_or_create(&BoundLabels {
                le: bound.to_string(),
            })
            .set(ratios.iter().filter(|&&r| r <= bound).count() as i64);
    }
    for (threshold, value) in [("0.99", 0.99), ("0.999", 0.999)] {
        metrics
            .tenants_below
            .get_or_create(&ThresholdLabels { threshold })
            .set(ratios.iter().filter(|&&r| r < value).count() as i64);
    }
}

fn coefficient_of_variation(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if mean == 0.0 {
        return 0.0;
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
    variance.sqrt() / mean
}

async fn metrics(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    let format = Format::negotiate(accept);
    let text = gateway.metrics.scrape(|| refresh_gauges(&gateway), format);
    ([(header::CONTENT_TYPE, format.content_type())], text).into_response()
}

#[derive(Serialize)]
struct ShardView {
    cell: String,
    id: String,
    zone: Option<String>,
    health: &'static str,
    /// What active checks say (`presumed`, `healthy`, `unhealthy`),
    /// whatever ejections and operators say.
    active: &'static str,
    /// The last check's result (`pass`, `fail`), `None` before the first.
    last_check: Option<&'static str>,
    /// How long ago the last check completed, in milliseconds: a rollout
    /// tells a pass from after its deploy from one before it without
    /// comparing clocks.
    last_check_age_ms: Option<u64>,
    ejected: bool,
    ejections: u32,
    failed: bool,
    drained: bool,
    /// Who set the operator's marks last (`fleet.replica_id`, or "this
    /// replica" without `[fleet]`), and when (Unix seconds).
    marked_by: Option<String>,
    marked_at_unix: Option<f64>,
    in_flight: u64,
    request_rate: f64,
    /// Its base URL.
    url: String,
    /// Where it comes from: `config` (written in `shards`) or the cell's
    /// discovery source.
    source: String,
    /// When discovery first found it (Unix seconds; discovered shards).
    known_since_unix: Option<f64>,
    /// Whether its discovery source no longer lists it (down, still
    /// placed until its grace ends), since when and why.
    missing: bool,
    missing_since_unix: Option<f64>,
    missing_why: Option<&'static str>,
}

/// Unix seconds of a wall-clock time.
fn unix(at: std::time::SystemTime) -> f64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

fn shard_view(gateway: &Gateway, snapshot: &Snapshot, shard: &ShardRuntime) -> ShardView {
    let now = Instant::now();
    let availability = shard.availability(&snapshot.config);
    let health = shard.health.lock().expect("health lock").clone();
    let membership = snapshot
        .config
        .cell(&shard.cell)
        .filter(|cell| {
            cell.static_shards()
                .iter()
                .all(|written| written.id != shard.id)
        })
        .and_then(|_| snapshot.memberships.get(&shard.cell));
    let member = membership.and_then(|membership| membership.member(&shard.id));
    ShardView {
        cell: shard.cell.clone(),
        id: shard.id.clone(),
        zone: shard.zone.clone(),
        health: availability.name(),
        active: health.active().name(),
        last_check: health
            .last_check_passed()
            .map(|passed| if passed { "pass" } else { "fail" }),
        last_check_age_ms: health.last_check_at().map(|at| {
            u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX)
        }),
        ejected: health.is_ejected(now),
        ejections: health.ejections(),
        failed: health.failed,
        drained: health.drained,
        marked_by: health.mark_origin.as_ref().map(|origin| origin.by.clone()),
        marked_at_unix: health
            .mark_origin
            .as_ref()
            .map(|origin| origin.at_ms as f64 / 1000.0),
        in_flight: shard.in_flight(),
        request_rate: gateway.shard_windows.tally(shard.window_key(), now).total as f64
            / gateway.shard_windows.length().as_secs_f64(),
        url: shard.url.to_string(),
        source: membership.map_or_else(|| "config".to_owned(), |m| m.source.to_string()),
        known_since_unix: member.map(|member| unix(member.known_since)),
        missing: health.missing,
        missing_since_unix: member
            .and_then(|m| m.missing)
            .map(|missing| unix(missing.since)),
        missing_why: member.and_then(|m| m.missing).map(|missing| missing.why),
    }
}

/// `GET /admin/discovery`: each discovered cell's source, members, and
/// what its last look and last refused change were.
async fn discovery_view(State(gateway): State<Arc<Gateway>>) -> Json<serde_json::Value> {
    let snapshot = gateway.snapshot();
    let looks = gateway
        .discovery_looks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let settings = snapshot.config.discovery();
    let cells: Vec<serde_json::Value> = snapshot
        .memberships
        .iter()
        .map(|(cell, membership)| {
            let look = looks.get(cell).cloned().unwrap_or_default();
            let missing = membership
                .members
                .iter()
                .filter(|member| member.missing.is_some())
                .count();
            json!({
                "cell": cell,
                "source": membership.source.to_string(),
                "members": membership.members.len(),
                "missing": missing,
                "last_answer_unix": look.last_answer.map(unix),
                "last_problem": look.last_problem.as_ref().map(|(_, why)| why),
                "last_problem_unix": look.last_problem.as_ref().map(|(at, _)| unix(*at)),
                "last_refusal": look.last_refusal.as_ref().map(|(_, why)| why),
                "last_refusal_unix": look.last_refusal.as_ref().map(|(at, _)| unix(*at)),
            })
        })
        .collect();
    Json(json!({
        "refresh_seconds": settings.refresh.as_secs_f64(),
        "removal_grace_seconds": settings.removal_grace.as_secs_f64(),
        "max_removed_fraction": settings.max_removed_fraction,
        "allow_migration": settings.allow_migration,
        "cells": cells,
    }))
}

async fn shards(State(gateway): State<Arc<Gateway>>) -> Json<serde_json::Value> {
    let snapshot = gateway.snapshot();
    let shards: Vec<ShardView> = snapshot
        .all_shards()
        .map(|shard| shard_view(&gateway, &snapshot, shard))
        .collect();
    Json(json!({ "shards": shards }))
}

#[derive(Deserialize)]
struct CellQuery {
    cell: Option<String>,
}

/// Finds a shard by id (and cell, when ids repeat across cells).
fn find<'s>(
    snapshot: &'s Snapshot,
    id: &str,
    cell: Option<&str>,
) -> Result<&'s Arc<ShardRuntime>, AdminError> {
    let matches: Vec<&Arc<ShardRuntime>> = snapshot
        .all_shards()
        .filter(|shard| shard.id == id && cell.is_none_or(|c| shard.cell == c))
        .collect();
    match matches.as_slice() {
        [shard] => Ok(shard),
        [] => Err(AdminError(
            StatusCode::NOT_FOUND,
            format!(
                "no shard {id:?}{}",
                cell.map_or(String::new(), |c| format!(" in cell {c:?}"))
            ),
        )),
        _ => Err(AdminError(
            StatusCode::CONFLICT,
            format!("shard id {id:?} is in several cells; add ?cell=NAME"),
        )),
    }
}

/// `POST /admin/shards/{id}/fail|restore|drain`: the operator's levers.
/// `fail` makes the gateway treat the shard as down (how drills inject a
/// fault without touching a backend), `drain` stops new requests to it,
/// `restore` clears both.
async fn shard_action(
    State(gateway): State<Arc<Gateway>>,
    Path((id, action)): Path<(String, String)>,
    Query(query): Query<CellQuery>,
) -> Result<Json<serde_json::Value>, AdminError> {
    let snapshot = gateway.snapshot();
    if !matches!(action.as_str(), "fail" | "drain" | "restore") {
        return Err(AdminError(
            StatusCode::NOT_FOUND,
            format!("no shard action {action:?}: use fail, drain or restore"),
        ));
    }
    let shard = find(&snapshot, &id, query.cell.as_deref())?;
    let (failed, drained) = {
        let health = shard.health.lock().expect("health lock");
        match action.as_str() {
            "fail" => (true, health.drained),
            "drain" => (health.failed, true),
            _ => (false, false),
        }
    };
    // Here at once, and with `[fleet]` on every replica.
    let reach = fleet::mark(&gateway, shard, failed, drained).await;
    tracing::warn!(cell = %shard.cell, shard = %shard.id, action = %action, applied_on = reach.name(), "operator changed shard state");
    Ok(Json(
        json!({ "shard": shard_view(&gateway, &snapshot, shard), "applied_on": reach.name() }),
    ))
}

async fn tenant(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, AdminError> {
    let snapshot = gateway.snapshot();
    if snapshot.tenants.get(&id).is_none() {
        return Err(AdminError(
            StatusCode::NOT_FOUND,
            format!("no tenant {id:?}"),
        ));
    }
    let (cell, subset) = snapshot.route(&id);
    let members: Vec<serde_json::Value> = subset
        .iter()
        .map(|&index| {
            let shard = &snapshot.shards[cell][index as usize];
            json!({ "id": shard.id, "zone": shard.zone, "health": shard.availability(&snapshot.config).name() })
        })
        .collect();
    let now = Instant::now();
    let tally = gateway.tenant_windows.tally(&id, now);
    let open = super::views::lookback_window(&snapshot, now);
    Ok(Json(json!({
        "tenant": id,
        "cell": snapshot.config.cells[cell].name,
        "subset": subset.iter().map(|&i| snapshot.shards[cell][i as usize].id.clone()).collect::<Vec<_>>(),
        "members": members,
        "lookback_members": super::views::lookback_members(&snapshot, &id, now),
        "lookback_until_unix": open.as_ref().map(|window| window.until_unix),
        "lookback_seconds_left": open.as_ref().map(|window| window.seconds_left),
        "availability": { "ok": tally.ok, "total": tally.total, "ratio": tally.ratio(), "window_seconds": gateway.tenant_windows.length().as_secs() },
    })))
}

#[derive(Deserialize)]
struct WorstQuery {
    worst: Option<usize>,
    limited: Option<usize>,
    /// `suspects=1`: the suspect tenants instead ([`suspect_tenants`]).
    suspects: Option<u8>,
}

/// `GET /admin/tenants`: the worst tenants of the window (`?worst=N`), the
/// most-limited since start (`?limited=N`), or the suspect ones
/// (`?suspects=1`).
async fn worst_tenants(
    State(gateway): State<Arc<Gateway>>,
    Query(query): Query<WorstQuery>,
) -> Json<serde_json::Value> {
    if let Some(count) = query.limited {
        return limited_tenants(&gateway, count);
    }
    if query.suspects.is_some_and(|asked| asked != 0) {
        return suspect_tenants(&gateway);
    }
    let count = query.worst.unwrap_or(10).min(10_000);
    Json(
        json!({ "window_seconds": gateway.tenant_windows.length().as_secs(), "tenants": worst(&gateway, count) }),
    )
}

/// `GET /admin/tenants?limited=N`: the `N` tenants most often refused by
/// their limits since start, on this replica.
fn limited_tenants(gateway: &Gateway, count: usize) -> Json<serde_json::Value> {
    let snapshot = gateway.snapshot();
    Json(json!({ "tenants": limited(&snapshot, count.min(10_000)) }))
}

/// One suspect tenant as `GET /admin/tenants?suspects=1` shows it.
#[derive(Serialize)]
struct SuspectView {
    tenant: String,
    cell: String,
    /// The members its requests failed crash-like on: the only ones that
    /// serve it while it is suspect.
    shards: Vec<String>,
    /// Requests stopped by containment.
    stops: u64,
    /// Crash-like failures counted against it.
    strikes: u64,
    /// When it was first marked and last struck, in Unix seconds.
    since_unix: u64,
    last_unix: u64,
    /// Seconds until its quarantine ends (unless struck again).
    expires_in_seconds: u64,
    /// With `[fleet]`: the fleet's store holds it (`false`: marked here
    /// while the store was unreachable, written back when it answers),
    /// and the replica that marked it when another did.
    shared: bool,
    marked_by: Option<String>,
}

/// `GET /admin/tenants?suspects=1`: the tenants poison containment has
/// quarantined, with counts and times.
fn suspect_tenants(gateway: &Gateway) -> Json<serde_json::Value> {
    let now = Instant::now();
    let unix = |time: std::time::SystemTime| {
        time.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    };
    let suspects: Vec<SuspectView> = gateway
        .suspects
        .list(now)
        .into_iter()
        .map(|(tenant, suspect)| SuspectView {
            tenant,
            cell: suspect.cell,
            shards: suspect.shards,
            stops: suspect.stops,
            strikes: suspect.strikes,
            shared: suspect.shared,
            marked_by: suspect.by,
            since_unix: unix(suspect.since),
            last_unix: unix(suspect.last),
            expires_in_seconds: suspect.until.saturating_duration_since(now).as_secs(),
        })
        .collect();
    Json(json!({ "suspects": suspects }))
}

/// `POST /admin/tenants/{id}/clear`: lifts a suspect tenant's quarantine
/// (its requests fail over and use every member again at once). Clearing
/// a tenant that is not suspect changes nothing and says so
/// (`was_suspect: false`), so a retried call is harmless.
async fn clear_suspect(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, AdminError> {
    let (was_suspect, reach) = fleet::clear(&gateway, &id).await;
    if !was_suspect && gateway.snapshot().tenants.get(&id).is_none() {
        return Err(AdminError(
            StatusCode::NOT_FOUND,
            format!("no tenant {id:?}; GET /admin/tenants?suspects=1 lists the suspect tenants"),
        ));
    }
    if was_suspect {
        tracing::warn!(tenant = %id, "operator lifted a tenant's quarantine");
    }
    Ok(Json(
        json!({ "tenant": id, "was_suspect": was_suspect, "applied_on": reach.name() }),
    ))
}

/// `GET /admin/fleet`: whether this replica shares its containment and
/// marks through a fleet store (`[fleet]`), as which replica, and whether
/// the store answers now (`{"fleet": null}` without `[fleet]`). Drills
/// read it from every replica, so a replica left out of the fleet is
/// named before anything is tested.
async fn fleet_view(State(gateway): State<Arc<Gateway>>) -> Json<serde_json::Value> {
    let Some(store) = &gateway.fleet else {
        return Json(json!({ "fleet": null }));
    };
    let snapshot = gateway.snapshot();
    let settings = snapshot.config.fleet();
    let down_since = fleet::down_since(&gateway).map(|since| {
        since
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    });
    Json(json!({ "fleet": {
        "replica_id": store.replica(),
        // `host:port` only: the URL may carry a password.
        "store": store.address(),
        "up": store.is_up() && down_since.is_none(),
        "down_since_unix": down_since,
        "timeout_ms": settings.map(|s| s.store.timeout.as_millis() as u64),
        "sync_ms": settings.map(|s| s.sync_every.as_millis() as u64),
    }}))
}

async fn blast(State(gateway): State<Arc<Gateway>>) -> Json<serde_json::Value> {
    let snapshot = gateway.snapshot();
    let cells: Vec<crate::cell::live_blast::LiveBlast> = (0..snapshot.config.cells.len())
        .map(|c| live_blast(&snapshot, c))
        .collect();
    Json(json!({ "cells": cells }))
}

#[derive(Deserialize)]
struct ReloadQuery {
    allow_migration: Option<bool>,
}

async fn reload(
    State(gateway): State<Arc<Gateway>>,
    Query(query): Query<ReloadQuery>,
) -> Result<Json<serde_json::Value>, AdminError> {
    match gateway.reload(query.allow_migration.unwrap_or(false)) {
        Ok(reloaded) => {
            tracing::info!(
                changed = reloaded.changed,
                members_gained = reloaded.members_gained,
                members_lost = reloaded.members_lost,
                "configuration reloaded through the admin API"
            );
            Ok(Json(json!({
                "reloaded": true,
                "changed": reloaded.changed,
                "tenants": reloaded.tenants,
                "members_gained": reloaded.members_gained,
                "members_lost": reloaded.members_lost,
            })))
        }
        Err(error) => {
            // Logged as SIGHUP's failures are: whoever watches the logs
            // learns the reload did not happen, not only the caller.
            tracing::error!(
                %error,
                "reload through the admin API refused; the previous configuration keeps serving"
            );
            let status = match error {
                LoadError::Migration { .. } => StatusCode::CONFLICT,
                _ => StatusCode::BAD_REQUEST,
            };
            Err(AdminError(status, error.to_string()))
        }
    }
}

async fn status_page(State(gateway): State<Arc<Gateway>>) -> Html<String> {
    Html(crate::ops::status_page::render(&gateway))
}

/// Binds the admin listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
