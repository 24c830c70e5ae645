//! The active health checker: every interval, GET the health path on every
//! shard of every cell, concurrently, and feed the results to each shard's
//! health state.

use std::sync::Arc;

use http::{Method, StatusCode};
use tokio::time::Instant;

use crate::attempt::backend_target;
use crate::body::AttemptBody;
use crate::headers::{Added, Inbound};
use crate::state::{Gateway, ShardRuntime};
use crate::wire::{Fields, RequestHead};

/// Runs checks until the task is dropped. The snapshot is re-read every
/// round, so reloads take effect at the next round.
pub async fn run(gateway: Arc<Gateway>) {
    loop {
        let snapshot = gateway.snapshot();
        let settings = snapshot.config.health.clone();
        let checks = snapshot.all_shards().map(|shard| {
            let shard = Arc::clone(shard);
            let settings = settings.clone();
            tokio::spawn(async move {
                let passed = check(&shard, &settings.path, settings.timeout).await;
                let changed = shard
                    .health
                    .lock()
                    .expect("health lock")
                    .record_check(passed, Instant::now(), &settings);
                if changed {
                    tracing::info!(cell = %shard.cell, shard = %shard.id, passed, "active health changed");
                }
            })
        });
        let handles: Vec<_> = checks.collect();
        for handle in handles {
            let _ = handle.await;
        }
        tokio::time::sleep(settings.interval).await;
    }
}

/// One check: a 2xx answer within the timeout passes. It goes over the
/// shard's pooled connections, like the traffic it vouches for.
async fn check(shard: &ShardRuntime, path: &str, timeout: std::time::Duration) -> bool {
    let uri = path.parse().unwrap_or_default();
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
    let send = shard
        .upstream
        .send(request, AttemptBody::Done, timeout, Instant::now());
    match tokio::time::timeout(timeout, send).await {
        Ok(Ok(response)) => {
            let status = response.status();
            // Drain the body so the connection can be reused.
            let _ = http_body_util::BodyExt::collect(response.into_body()).await;
            status.is_success() || status == StatusCode::NO_CONTENT
        }
        _ => false,
    }
}
