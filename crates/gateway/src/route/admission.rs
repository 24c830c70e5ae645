//! The limits step: right after the tenant is known and before any shard
//! is chosen, a tenant over one of its limits is refused with `429` and
//! `Retry-After` (`RESOURCE_EXHAUSTED` for a gRPC call), counted by cell
//! and limit. In-flight first (it takes nothing from the bucket), then the
//! rate: the global bucket in Redis when `limits.tenant.store` is set,
//! else, or whenever Redis gives no answer in time, this replica's own.

use tokio::time::Instant;

use crate::limit::store::Store;
use crate::limit::{Refusal, TenantInFlight, TenantLimit};
use crate::state::{Gateway, Snapshot};

/// Admits a request of `tenant`, which has `limit`, in `cell` at `now`:
/// by the global bucket when the store is set and the tenant has a rate
/// (boxed, so that requests without it do not carry its state), else by
/// this replica's own.
pub(crate) async fn admit_tenant(
    gateway: &Gateway,
    snapshot: &Snapshot,
    limit: &TenantLimit,
    tenant: &str,
    cell: usize,
    now: Instant,
) -> Result<Option<TenantInFlight>, Refusal> {
    match snapshot.limits.store() {
        Some(store) if limit.rate.is_some() => {
            Box::pin(admit_global(
                gateway, snapshot, store, limit, tenant, cell, now,
            ))
            .await
        }
        _ => admit(gateway, snapshot, limit, cell, now),
    }
}

/// Admits a request of a tenant with `limit` in `cell` on this replica's
/// bucket, at `now`; the tenant's in-flight count, when it is limited,
/// until the guard is dropped.
pub(crate) fn admit(
    gateway: &Gateway,
    snapshot: &Snapshot,
    limit: &TenantLimit,
    cell: usize,
    now: Instant,
) -> Result<Option<TenantInFlight>, Refusal> {
    let judged = limit.enter().and_then(|guard| {
        if let Some(rate) = limit.rate {
            limit.take_local(rate, now)?;
        }
        Ok(guard)
    });
    counted(gateway, snapshot, cell, judged)
}

/// As [`admit`], with the rate judged by the global bucket in `store`
/// (this replica's own when the store gives no answer).
pub(crate) async fn admit_global(
    gateway: &Gateway,
    snapshot: &Snapshot,
    store: &Store,
    limit: &TenantLimit,
    tenant: &str,
    cell: usize,
    now: Instant,
) -> Result<Option<TenantInFlight>, Refusal> {
    let guard = match limit.enter() {
        Ok(guard) => guard,
        Err(refusal) => return counted(gateway, snapshot, cell, Err(refusal)),
    };
    let Some(rate) = limit.rate else {
        return Ok(guard);
    };
    let judged = match store.take(tenant, rate.rate).await {
        Ok(verdict) => {
            if store
                .warned
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::info!(store = %store.address(), "the global limits store answers again; tenants' rates are global again");
            }
            verdict.map_err(|retry_after| limit.refused(rate, retry_after))
        }
        Err(fault) => {
            gateway.metrics.store_fallback(fault.name());
            if !store
                .warned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    store = %store.address(),
                    reason = fault.name(),
                    "the global limits store gave no answer; each replica enforces tenants' rates on its own until it does (shuffle_tenant_limit_store_fallbacks_total counts the requests)"
                );
            }
            limit.take_local(rate, now)
        }
    };
    counted(gateway, snapshot, cell, judged.map(|()| guard))
}

/// Counts a refusal in the cell's metrics.
fn counted(
    gateway: &Gateway,
    snapshot: &Snapshot,
    cell: usize,
    judged: Result<Option<TenantInFlight>, Refusal>,
) -> Result<Option<TenantInFlight>, Refusal> {
    if let Err(refusal) = &judged {
        snapshot
            .cell_metrics(cell, &gateway.metrics)
            .limited(refusal.kind());
    }
    judged
}
