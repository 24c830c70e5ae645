//! Synthetic load: a fixed number of GETs (or gRPC unary calls, [`Protocol`])
//! per tenant through the gateway, with bounded concurrency, recording each
//! tenant's successes and latencies.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// What the load is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// HTTP GETs of `/drill` (HTTP/1.1).
    #[default]
    Http,
    /// gRPC unary calls of [`GRPC_METHOD`] with an empty message, over h2c
    /// (HTTP/2 with prior knowledge), judged by their gRPC status
    /// ([`grpc_served`]).
    Grpc,
}

/// The method the gRPC load calls: the unary method of the test backend's
/// demo service (`shuffle-shard backend --protocol grpc`). Its message is
/// sent empty, which every proto3 message type decodes (as all defaults),
/// and its answer is read as a message with no fields, so any other
/// service's answer would do as well.
pub const GRPC_METHOD: &str = "/shuffle.demo.Echo/Unary";

/// How much load to drive.
#[derive(Debug, Clone, Copy)]
pub struct LoadShape {
    /// Requests per tenant per phase.
    pub requests_per_tenant: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Per-request timeout (a timed-out request is an error).
    pub timeout: Duration,
    /// HTTP requests or gRPC calls.
    pub protocol: Protocol,
}

/// Sends `requests_per_tenant` GETs for every tenant, interleaved (round
/// after round over all tenants) so that each tenant's requests spread over
/// the whole phase.
///
/// With several gateways (the replicas of a fleet), the requests take them
/// in turn.
pub async fn drive(
    gateways: &[String],
    tenants: &[TenantCredential],
    shape: LoadShape,
) -> Vec<TenantSample> {
    let total = tenants.len() * shape.requests_per_tenant;
    drive_while(gateways, tenants, shape, total, None).await
}

/// Sends requests round after round over every tenant, without a pause,
/// until `stop` is set (the requests in flight then finish): the load under
/// a rolling restart, which lasts as long as the restarts do.
pub async fn drive_until(
    gateways: &[String],
    tenants: &[TenantCredential],
    shape: LoadShape,
    stop: Arc<AtomicBool>,
) -> Vec<TenantSample> {
    drive_while(gateways, tenants, shape, usize::MAX, Some(stop)).await
}

/// Sends up to `total` requests, interleaved over the tenants, until
/// `stop` (if any) is set.
async fn drive_while(
    gateways: &[String],
    tenants: &[TenantCredential],
    shape: LoadShape,
    total: usize,
    stop: Option<Arc<AtomicBool>>,
) -> Vec<TenantSample> {
    let sender = match shape.protocol {
        Protocol::Http => Sender::Http(Client::builder(TokioExecutor::new()).build_http()),
        Protocol::Grpc => match gateways
            .iter()
            .map(|gateway| grpc_channel(gateway))
            .collect::<Option<Vec<_>>>()
        {
            Some(channels) => Sender::Grpc(channels),
            // Not a URL a channel can be made for: every call fails, as
            // every request would with an HTTP client.
            None => return failed(tenants.len(), shape.requests_per_tenant),
        },
    };
    if tenants.is_empty() || gateways.is_empty() {
        return Vec::new();
    }
    let next = Arc::new(AtomicUsize::new(0));
    let tenants: Arc<Vec<TenantCredential>> = Arc::new(tenants.to_vec());
    let urls: Arc<Vec<String>> = Arc::new(
        gateways
            .iter()
            .map(|gateway| format!("{}/drill", gateway.trim_end_matches('/')))
            .collect(),
    );
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..shape.concurrency.max(1) {
        let (sender, next, tenants, urls, stop) = (
            sender.clone(),
            Arc::clone(&next),
            Arc::clone(&tenants),
            Arc::clone(&urls),
            stop.clone(),
        );
        workers.spawn(async move {
            let mut results: Vec<(usize, bool, u32)> = Vec::new();
            loop {
                if stop
                    .as_ref()
                    .is_some_and(|stop| stop.load(Ordering::Relaxed))
                {
                    return results;
                }
                let job = next.fetch_add(1, Ordering::Relaxed);
                if job >= total {
                    return results;
                }
                let tenant = job % tenants.len();
                // Replicas in turn, shifted each round so that every tenant
                // goes through every replica.
                let replica = (job + job / tenants.len()) % urls.len();
                let started = Instant::now();
                let api_key = tenants[tenant].api_key();
                let ok = match &sender {
                    Sender::Http(client) => {
                        send(client, &urls[replica], api_key, shape.timeout).await
                    }
                    Sender::Grpc(channels) => {
                        call(&channels[replica], api_key, shape.timeout).await
                    }
                };
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

/// What sends the load: a pooled HTTP/1.1 client, or one gRPC channel (one
/// HTTP/2 connection, a stream per call).
#[derive(Clone)]
// One per phase, cloned once per worker: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Sender {
    Http(Client<HttpConnector, Full<Bytes>>),
    /// One channel per gateway.
    Grpc(Vec<tonic::transport::Channel>),
}

/// Every tenant's sample with every request failed.
fn failed(tenants: usize, requests_per_tenant: usize) -> Vec<TenantSample> {
    let sample = TenantSample {
        ok: 0,
        total: requests_per_tenant as u64,
        latencies_us: vec![0; requests_per_tenant],
    };
    vec![sample; tenants]
}

/// A lazily connecting h2c channel to the gateway's data URL.
fn grpc_channel(gateway: &str) -> Option<tonic::transport::Channel> {
    let endpoint =
        tonic::transport::Endpoint::from_shared(gateway.trim_end_matches('/').to_owned()).ok()?;
    Some(endpoint.connect_lazy())
}

/// A message with no fields: what the gRPC load sends, and how it reads
/// any answer (prost skips fields it does not know).
#[derive(Clone, Copy, PartialEq, prost::Message)]
struct Empty {}

/// Whether a call that ended with `code` was served, as per-tenant
/// availability counts it: the statuses a sick shard or an overloaded
/// gateway produce (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, `INTERNAL`,
/// `UNKNOWN`, and `CANCELLED` for a call cut off) are failures, and so are
/// `UNAUTHENTICATED` and `RESOURCE_EXHAUSTED`, which stand for the HTTP load's
/// 401 and 429; the rest are the service's own answers.
pub fn grpc_served(code: tonic::Code) -> bool {
    use tonic::Code;
    !matches!(
        code,
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Internal
            | Code::Unknown
            | Code::Cancelled
            | Code::Unauthenticated
            | Code::ResourceExhausted
    )
}

/// One gRPC unary call of [`GRPC_METHOD`]; true when it was served
/// ([`grpc_served`]) within `timeout` (which is also sent as `grpc-timeout`).
async fn call(channel: &tonic::transport::Channel, api_key: &str, timeout: Duration) -> bool {
    let Ok(bearer) = format!("Bearer {api_key}").parse() else {
        return false;
    };
    let mut request = tonic::Request::new(Empty {});
    request.metadata_mut().insert("authorization", bearer);
    request.set_timeout(timeout);
    let exchange = async {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.ok()?;
        let answer = grpc
            .unary(
                request,
                http::uri::PathAndQuery::from_static(GRPC_METHOD),
                tonic_prost::ProstCodec::<Empty, Empty>::default(),
            )
            .await;
        Some(match answer {
            Ok(_) => true,
            Err(status) => grpc_served(status.code()),
        })
    };
    matches!(
        tokio::time::timeout(timeout, exchange).await,
        Ok(Some(true))
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_statuses_count_as_http_statuses_do() {
        use tonic::Code;
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Internal,
            Code::Unknown,
            Code::Cancelled,
            Code::Unauthenticated,
            Code::ResourceExhausted,
        ] {
            assert!(!grpc_served(code), "{code:?}");
        }
        for code in [
            Code::Ok,
            Code::NotFound,
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::PermissionDenied,
            Code::Unimplemented,
        ] {
            assert!(grpc_served(code), "{code:?}");
        }
    }
}
