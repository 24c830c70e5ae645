//! Synthetic load: a fixed number of GETs per tenant through the gateway,
//! with bounded concurrency, recording each tenant's successes and
//! latencies.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::credentials::TenantCredential;

/// One tenant's results in one phase.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantSample {
    /// Successful (2xx/3xx/4xx other than 401/429) answers.
    pub ok: u64,
    /// Requests sent.
    pub total: u64,
    /// Latencies of every request, microseconds.
    pub latencies_us: Vec<u32>,
}

impl TenantSample {
    /// The success ratio (1 with no requests).
    pub fn ratio(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            self.ok as f64 / self.total as f64
        }
    }

    /// Failed requests.
    pub fn errors(&self) -> u64 {
        self.total - self.ok
    }
}

/// How much load to drive.
#[derive(Debug, Clone, Copy)]
pub struct LoadShape {
    /// Requests per tenant per phase.
    pub requests_per_tenant: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Per-request timeout (a timed-out request is an error).
    pub timeout: Duration,
}

/// Sends `requests_per_tenant` GETs for every tenant, interleaved (round
/// after round over all tenants) so that each tenant's requests spread over
/// the whole phase.
pub async fn drive(
    gateway: &str,
    tenants: &[TenantCredential],
    shape: LoadShape,
) -> Vec<TenantSample> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let total = tenants.len() * shape.requests_per_tenant;
    let next = Arc::new(AtomicUsize::new(0));
    let tenants: Arc<Vec<TenantCredential>> = Arc::new(tenants.to_vec());
    let url = format!("{}/drill", gateway.trim_end_matches('/'));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..shape.concurrency.max(1) {
        let (client, next, tenants, url) = (
            client.clone(),
            Arc::clone(&next),
            Arc::clone(&tenants),
            url.clone(),
        );
        workers.spawn(async move {
            let mut results: Vec<(usize, bool, u32)> = Vec::new();
            loop {
                let job = next.fetch_add(1, Ordering::Relaxed);
                if job >= total {
                    return results;
                }
                let tenant = job % tenants.len();
                let started = Instant::now();
                let ok = send(&client, &url, tenants[tenant].api_key(), shape.timeout).await;
                let micros = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                results.push((tenant, ok, micros));
            }
        });
    }
    let mut samples = vec![TenantSample::default(); tenants.len()];
    while let Some(joined) = workers.join_next().await {
        for (tenant, ok, micros) in joined.unwrap_or_default() {
            let sample = &mut samples[tenant];
            sample.total += 1;
            sample.ok += u64::from(ok);
            sample.latencies_us.push(micros);
        }
    }
    samples
}

/// One request; true when the gateway served it (not a 5xx, not a 401 or
/// 429, not a transport error or timeout).
async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    api_key: &str,
    timeout: Duration,
) -> bool {
    let Ok(request) = Request::get(url)
        .header("authorization", format!("Bearer {api_key}"))
        .body(Full::new(Bytes::new()))
    else {
        return false;
    };
    let exchange = async {
        let response = client.request(request).await.ok()?;
        let status = response.status();
        response.into_body().collect().await.ok()?;
        Some(!(status.is_server_error() || status.as_u16() == 401 || status.as_u16() == 429))
    };
    matches!(
        tokio::time::timeout(timeout, exchange).await,
        Ok(Some(true))
    )
}

/// The header that marks a request as poison for a test shard in
/// `crash-on-poison` mode (the backend's `POISON_HEADER`).
pub const POISON_HEADER: &str = "x-poison";

/// Sends one poison request (a GET carrying [`POISON_HEADER`]) as
/// `tenant`: the status the gateway answered, or `None` when no answer
/// came (a transport error or the timeout).
pub async fn poison(gateway: &str, tenant: &TenantCredential, timeout: Duration) -> Option<u16> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let request = Request::get(format!("{}/drill/poison", gateway.trim_end_matches('/')))
        .header("authorization", format!("Bearer {}", tenant.api_key()))
        .header(POISON_HEADER, "1")
        .body(Full::new(Bytes::new()))
        .ok()?;
    let exchange = async {
        let response = client.request(request).await.ok()?;
        let status = response.status().as_u16();
        response.into_body().collect().await.ok()?;
        Some(status)
    };
    tokio::time::timeout(timeout, exchange).await.ok().flatten()
}

/// The `q` quantile (nearest rank, the analyser's definition) of latencies,
/// in milliseconds; 0 when there are none.
pub fn quantile_ms(latencies_us: &mut [u32], q: f64) -> f64 {
    latencies_us.sort_unstable();
    analysis::nearest_rank(latencies_us, q).map_or(0.0, |us| f64::from(us) / 1000.0)
}
