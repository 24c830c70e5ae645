//! The active health checker: each shard is checked on its own schedule,
//! one deadline per check, so one sick shard can never delay, stale or fail
//! another's health.
//!
//! An earlier version checked every shard concurrently but waited for all
//! of them before the next round, and drained each answer's body without a
//! limit: one shard whose `/healthz` sent a head and then stalled its body
//! froze every check, every other shard went stale, and every tenant got
//! 503, the shared-fate outage shuffle sharding exists to prevent. Now a
//! shard's checker is its own task; a check that does not finish within
//! `health.timeout_ms` (connect, head and body together) fails, and the
//! body is read only up to [`MAX_BODY`].

use std::collections::HashMap;
use std::sync::Arc;

use http::Method;
use http_body_util::BodyExt;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use crate::config::HealthSettings;
use crate::probe::grpc;
use crate::protocol::wire::{Fields, RequestHead};
use crate::state::{Gateway, ShardRuntime};
use crate::trust::headers::{Added, Inbound};
use crate::trust::target::backend_target;
use crate::upstream::Timeouts;
use crate::upstream::body::AttemptBody;

/// The most of a health answer's body that is read. A longer body is not
/// read further (its connection is closed instead of reused) and the
/// status alone decides: a shard is not unhealthy for being talkative, but
/// the checker never spends unbounded time or memory on one.
pub const MAX_BODY: usize = 64 * 1024;

/// Runs every shard's checks until the task is dropped (which stops them
/// all). Shards that appear on a reload get a checker of their own; shards
/// a reload removed lose theirs; a checker that ended on its own (it
/// panicked) is started again, and said so. Checkers re-read their
/// settings before every check and start afresh on every reload, so a
/// shorter interval or a new shard takes effect at once, not after the old
/// interval (which staleness, judged by the new settings, would not wait
/// for).
pub async fn run(gateway: Arc<Gateway>) {
    let mut checkers = JoinSet::new();
    let mut running: HashMap<usize, AbortHandle> = HashMap::new();
    let mut reloads = gateway.reloads();
    loop {
        let snapshot = gateway.snapshot();
        let current: HashMap<usize, &Arc<ShardRuntime>> = snapshot
            .all_shards()
            .map(|shard| (shard_key(shard), shard))
            .collect();
        running.retain(|key, checker| {
            let keep = current.contains_key(key) && !checker.is_finished();
            if !keep {
                checker.abort();
            }
            keep
        });
        for (key, shard) in current {
            running.entry(key).or_insert_with(|| {
                checkers.spawn(check_forever(Arc::clone(&gateway), Arc::clone(shard)))
            });
        }
        let interval = snapshot.config.health.interval;
        drop(snapshot);
        // Look again once per interval, at once on a reload, and at once
        // when a checker ends on its own.
        let pause = tokio::time::sleep(interval);
        tokio::pin!(pause);
        loop {
            tokio::select! {
                () = &mut pause => break,
                changed = reloads.changed() => {
                    if changed.is_err() {
                        // The gateway is gone.
                        return;
                    }
                    break;
                }
                Some(ended) = checkers.join_next(), if !checkers.is_empty() => {
                    if let Err(error) = ended && error.is_panic() {
                        tracing::error!(%error, "a shard's health checker panicked; starting it again");
                        break;
                    }
                }
            }
        }
    }
}

/// A shard's identity for the checker: its run-time state, which a reload
/// keeps for a shard whose cell, id and URL stay the same.
fn shard_key(shard: &Arc<ShardRuntime>) -> usize {
    Arc::as_ptr(shard) as usize
}

/// Checks one shard every interval, for ever; a reload cuts the wait
/// short, so the new settings apply from the next check on.
async fn check_forever(gateway: Arc<Gateway>, shard: Arc<ShardRuntime>) {
    let mut reloads = gateway.reloads();
    loop {
        let settings = gateway.snapshot().config.health.clone();
        let passed = check(&shard, &settings).await;
        let changed = shard.health.lock().expect("health lock").record_check(
            passed,
            Instant::now(),
            &settings,
        );
        if changed {
            tracing::info!(cell = %shard.cell, shard = %shard.id, passed, "active health changed");
        }
        tokio::select! {
            () = tokio::time::sleep(settings.interval) => {}
            _ = reloads.changed() => {}
        }
    }
}

/// One check: a 2xx answer, head and body (to [`MAX_BODY`]) within
/// `health.timeout_ms` of the start, passes. It goes over the shard's
/// pooled connections, like the traffic it vouches for.
pub async fn check(shard: &ShardRuntime, settings: &HealthSettings) -> bool {
    let started = Instant::now();
    let deadline = started + settings.timeout;
    tokio::time::timeout_at(deadline, exchange(shard, settings, started))
        .await
        .unwrap_or(false)
}

/// The check's exchange, without its deadline: over the shard's own
/// protocol, and for an HTTP/2 shard under `health.grpc` the gRPC health
/// check instead of a GET.
async fn exchange(shard: &ShardRuntime, settings: &HealthSettings, started: Instant) -> bool {
    if settings.grpc && shard.upstream.speaks_http2() {
        return grpc::exchange(shard, settings, started).await;
    }
    let uri = settings.path.parse().unwrap_or_default();
    let target = backend_target(&shard.path_prefix, &uri);
    let request = RequestHead {
        method: &Method::GET,
        target: &target,
        fields: &Fields::default(),
        inbound: &Inbound::everything(),
        stated: None,
        added: Added::default(),
        host: shard.host_header.as_ref(),
        shard: None,
    };
    let Ok(response) = shard
        .upstream
        .send(
            request,
            AttemptBody::Done,
            Timeouts {
                connect: settings.timeout,
                body_idle: settings.timeout,
                // The check's own deadline bounds it all.
                body_total: None,
            },
            started,
        )
        .await
    else {
        return false;
    };
    let passed = response.status().is_success();
    let mut body = response.into_body();
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            // A body that breaks off is a shard that is not well.
            return false;
        };
        read += frame.data_ref().map_or(0, bytes::Bytes::len);
        if read > MAX_BODY {
            // Dropping the body closes the connection.
            break;
        }
    }
    passed
}
