//! A client for a test shard's control API (`shuffle-shard backend
//! --control`), through which the drill breaks a shard for real (kills it,
//! stalls its health checks, …) and heals it afterwards.
//!
//! The API is `PUT /mode` with a mode in the backend's `--mode` spelling as
//! the body, answered `204` (or `400` naming the valid modes).

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::error::DrillError;

/// The mode that heals a shard.
pub const HEALTHY: &str = "healthy";

/// One shard's control API.
#[derive(Clone)]
pub struct ShardControl {
    id: String,
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for ShardControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardControl")
            .field("id", &self.id)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl ShardControl {
    /// The control API of shard `id` at `base` (e.g. `http://127.0.0.1:9203`).
    pub fn new(id: &str, base: &Uri) -> Self {
        Self {
            id: id.to_owned(),
            base: base.to_string().trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The shard's id, as the gateway knows it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The control API's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Switches the shard to `mode` (the backend's `--mode` spelling).
    pub async fn set_mode(&self, mode: &str) -> Result<(), DrillError> {
        let flag = format!("--break {}={}", self.id, self.base);
        let request = Request::builder()
            .method(Method::PUT)
            .uri(format!("{}/mode", self.base))
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from(mode.to_owned())))
            .map_err(|e| DrillError::Input(format!("{flag}: not a URL: {e}")))?;
        let response = self.client.request(request).await.map_err(|e| {
            DrillError::Control(format!(
                "{flag}: the control API is unreachable ({e}); is `shuffle-shard backend --control` listening there?"
            ))
        })?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        if status == StatusCode::NO_CONTENT || status == StatusCode::OK {
            return Ok(());
        }
        Err(DrillError::Control(format!(
            "{flag}: setting mode {mode:?} answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use backend::{Backend, Mode};

    use super::*;

    async fn control_of(shard: &Backend) -> ShardControl {
        let addr = shard
            .serve_control("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        ShardControl::new(shard.id(), &format!("http://{addr}/").parse().unwrap())
    }

    #[tokio::test]
    async fn sets_the_mode_of_a_real_shard() {
        let shard = Backend::start("s3").await.unwrap();
        let control = control_of(&shard).await;
        control.set_mode("health-stall").await.unwrap();
        assert_eq!(shard.mode(), Mode::HealthStallBody);
        control.set_mode(HEALTHY).await.unwrap();
        assert_eq!(shard.mode(), Mode::Healthy);
    }

    #[tokio::test]
    async fn a_refused_mode_names_the_flag_and_the_shards_answer() {
        let shard = Backend::start("s3").await.unwrap();
        let control = control_of(&shard).await;
        let error = control.set_mode("sick").await.unwrap_err();
        assert!(matches!(error, DrillError::Control(_)), "{error:?}");
        let message = error.to_string();
        assert!(message.starts_with("--break s3=http://"), "{message}");
        assert!(
            message.contains("400") && message.contains("health-stall"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_control_api_says_what_to_run() {
        // A port that was free a moment ago, so nothing listens there.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let control = ShardControl::new("s3", &format!("http://{addr}").parse().unwrap());
        let message = control.set_mode("killed").await.unwrap_err().to_string();
        assert!(
            message.contains(&format!("--break s3=http://{addr}")),
            "{message}"
        );
        assert!(message.contains("--control"), "{message}");
    }
}
