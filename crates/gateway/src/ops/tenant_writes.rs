//! `PUT` and `DELETE /admin/tenants/{id}`: onboarding, changing and removing
//! one tenant through the tenant store, and `GET /admin/tenant-store`, how
//! current this replica's registry is. A write is answered only once the
//! store has committed it (never 200 for a write it did not acknowledge);
//! every replica then applies it from the store, this one before it
//! answers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::error::AdminError;
use crate::state::{Gateway, Snapshot};
use crate::store::tenants::link::StoreLink;
use crate::store::tenants::{PutOutcome, TenantStoreError};
use crate::tenants::{TenantEntry, Tenants, ValidEntry};

/// How long a write waits for this replica to apply it before answering
/// (it is committed either way; the answer says whether it is served here
/// yet).
const APPLY_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Deserialize)]
pub(super) struct WriteQuery {
    allow_migration: Option<bool>,
}

/// The replica's store link, or why tenants cannot be written here.
fn link(gateway: &Gateway) -> Result<Arc<StoreLink>, AdminError> {
    gateway.tenant_store.get().cloned().ok_or_else(|| {
        AdminError(
            StatusCode::CONFLICT,
            "tenants come from tenants_file here: edit the file and POST /admin/reload, or keep them in the tenant store ([tenants] store) to change them one at a time".into(),
        )
    })
}

/// A store error as an answer: the store down is 503 (nothing was
/// written, try again), anything else 500 with what it said.
fn store_error(error: &TenantStoreError) -> AdminError {
    let status = if error.is_down() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    AdminError(
        status,
        format!("the tenant store did not take the change: {error}"),
    )
}

/// `PUT /admin/tenants/{id}`: the body is the tenant's entry as JSON (the
/// fields of a `[[tenants]]` entry; `id` may be left out). Idempotent. A
/// change that moves an existing tenant to other shards is refused with
/// 409 unless `?allow_migration=true` (or `reload.allow_migration`).
pub(super) async fn put_tenant(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Query(query): Query<WriteQuery>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, AdminError> {
    let link = link(&gateway)?;
    let bad = |problem: String| AdminError(StatusCode::BAD_REQUEST, problem);
    let not_an_entry = |error: serde_json::Error| {
        bad(format!(
            "the body must be one JSON object with the fields of a [[tenants]] entry ({error})"
        ))
    };
    // An entry's `id` is required wherever else it is written; here the
    // path names the tenant, so the body may leave it out.
    let mut object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&body).map_err(not_an_entry)?;
    object
        .entry("id")
        .or_insert_with(|| serde_json::Value::String(id.clone()));
    let mut entry: TenantEntry =
        serde_json::from_value(serde_json::Value::Object(object)).map_err(not_an_entry)?;
    if entry.id.is_empty() {
        entry.id.clone_from(&id);
    } else if entry.id != id {
        return Err(bad(format!(
            "the body's id {:?} is not the path's {id:?}",
            entry.id
        )));
    }
    let snapshot = gateway.snapshot();
    let valid = entry
        .validate(&snapshot.config)
        .map_err(|e| bad(e.to_string()))?;
    if let Some(digest) = &valid.api_key_sha256
        && let Some(owner) = snapshot.tenants.by_key_digest(digest)
        && owner.id() != id
    {
        return Err(AdminError(
            StatusCode::CONFLICT,
            format!(
                "api_key_sha256: another tenant ({:?}) has the same API key; every tenant needs its own",
                owner.id()
            ),
        ));
    }
    let allowed =
        query.allow_migration.unwrap_or(false) || snapshot.config.reload_allow_migration();
    if let Some((from, to)) = moves(&snapshot, &valid)
        && !allowed
    {
        gateway.metrics.tenant_store.changed("refused_migration", 1);
        return Err(AdminError(
            StatusCode::CONFLICT,
            format!(
                "the change moves tenant {id:?} from shards {from:?} to {to:?}, a migration; PUT again with ?allow_migration=true to apply it"
            ),
        ));
    }
    let outcome = link
        .store()
        .put(&entry)
        .await
        .map_err(|e| store_error(&e))?;
    tracing::info!(tenant = %id, ?outcome, "tenant written to the tenant store through the admin API");
    let applied_here = applied_here(&link).await;
    let outcome = match outcome {
        PutOutcome::Created => "created",
        PutOutcome::Updated => "updated",
        PutOutcome::Unchanged => "unchanged",
    };
    Ok(Json(
        json!({ "tenant": id, "outcome": outcome, "applied_here": applied_here }),
    ))
}

/// `DELETE /admin/tenants/{id}`: removes the tenant from the store (its
/// credentials stop working on every replica); 404 when there is none.
pub(super) async fn delete_tenant(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, AdminError> {
    let link = link(&gateway)?;
    if !link
        .store()
        .delete(&id)
        .await
        .map_err(|e| store_error(&e))?
    {
        return Err(AdminError(
            StatusCode::NOT_FOUND,
            format!("no tenant {id:?} in the tenant store"),
        ));
    }
    tracing::info!(tenant = %id, "tenant deleted from the tenant store through the admin API");
    let applied_here = applied_here(&link).await;
    Ok(Json(
        json!({ "tenant": id, "deleted": true, "applied_here": applied_here }),
    ))
}

/// Wakes the sync task and waits (a little) for it to apply the store's
/// latest change here.
async fn applied_here(link: &StoreLink) -> bool {
    let Ok(seq) = link.store().current_seq().await else {
        return false;
    };
    link.poke();
    link.wait_applied(seq, APPLY_WAIT).await
}

/// The shards an existing tenant would leave and join, when `valid`
/// moves it (its cell, `k` or shards changed its subset).
fn moves(snapshot: &Snapshot, valid: &ValidEntry) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let before = snapshot.tenants.get(&valid.id)?;
    let mut alone = Tenants::loading(1);
    alone.push(valid);
    let alone = alone.finish().ok()?;
    let after = alone.get(&valid.id)?;
    let (from, to) = (snapshot.members_of(before), snapshot.members_of(after));
    (before.cell_index() != after.cell_index() || from != to).then_some((from, to))
}

/// `GET /admin/tenant-store`: where this replica's tenants come from and
/// how current they are (`{"tenant_store": null}` with a tenants file).
pub(super) async fn store_view(State(gateway): State<Arc<Gateway>>) -> Json<serde_json::Value> {
    let Some(link) = gateway.tenant_store.get() else {
        return Json(json!({ "tenant_store": null }));
    };
    Json(json!({ "tenant_store": {
        // The URL without its password.
        "store": link.store().settings().url.to_string(),
        "up": link.is_up(),
        "origin": link.origin(),
        "applied_seq": link.applied(),
        "last_sync_unix": link.last_sync_unix(),
        "tenants": gateway.snapshot().tenants.len(),
    }}))
}
