//! A client for a test shard's control API (`shuffle-shard backend
//! --control`), through which the drill breaks a shard for real (kills it,
//! stalls its health checks, …) and heals it afterwards.
//!
//! The API is `PUT /mode` with a mode in the backend's `--mode` spelling as
//! the body, answered `204` (or `400` naming the valid modes).

use bytes::Bytes;
use http::{Method, StatusCode, Uri};

use crate::api::{Api, CallError};
use crate::error::DrillError;

/// The mode that heals a shard.
pub const HEALTHY: &str = "healthy";

/// One shard's control API.
#[derive(Clone, Debug)]
pub struct ShardControl {
    id: String,
    api: Api,
}

impl ShardControl {
    /// The control API of shard `id` at `base` (e.g. `http://127.0.0.1:9203`).
    pub fn new(id: &str, base: &Uri) -> Self {
        Self {
            id: id.to_owned(),
            api: Api::new(base),
        }
    }

    /// The shard's id, as the gateway knows it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The control API's base URL.
    pub fn base(&self) -> &str {
        self.api.base()
    }

    /// Switches the shard to `mode` (the backend's `--mode` spelling).
    pub async fn set_mode(&self, mode: &str) -> Result<(), DrillError> {
        let flag = format!("--break {}={}", self.id, self.base());
        let (status, body) = self
            .api
            .call(
                Method::PUT,
                "/mode",
                ("content-type", "text/plain"),
                Bytes::from(mode.to_owned()),
            )
            .await
            .map_err(|e| match e {
                CallError::Request(e) => DrillError::Input(format!("{flag}: not a URL: {e}")),
                CallError::Unreachable(e) => DrillError::Control(format!(
                    "{flag}: the control API is unreachable ({e}); is `shuffle-shard backend --control` listening there?"
                )),
                CallError::Body(e) => DrillError::Control(format!(
                    "{flag}: setting mode {mode:?}: the answer broke off ({e})"
                )),
                CallError::Timeout => DrillError::Control(format!(
                    "{flag}: setting mode {mode:?}: no answer within {} s",
                    crate::api::CALL_TIMEOUT.as_secs()
                )),
            })?;
        if status == StatusCode::NO_CONTENT || status == StatusCode::OK {
            return Ok(());
        }
        Err(DrillError::Control(format!(
            "{flag}: setting mode {mode:?} answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        )))
    }
}

impl ShardControl {
    /// How many times the poison marker has crashed the shard (`GET
    /// /crashes`, for shards in `crash-on-poison` mode).
    pub async fn crashes(&self) -> Result<u64, DrillError> {
        let flag = format!("--poison-control {}={}", self.id, self.base());
        let (status, body) = self
            .api
            .call(Method::GET, "/crashes", ("accept", "text/plain"), Bytes::new())
            .await
            .map_err(|e| {
                DrillError::Control(format!(
                    "{flag}: cannot read the crash count ({e:?}); is `shuffle-shard backend --control` listening there?"
                ))
            })?;
        if status != StatusCode::OK {
            return Err(DrillError::Control(format!(
                "{flag}: GET /crashes answered {status}"
            )));
        }
        String::from_utf8_lossy(&body).trim().parse().map_err(|_| {
            DrillError::Control(format!("{flag}: GET /crashes did not answer a number"))
        })
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
    async fn reads_the_crash_count_of_a_real_shard() {
        let shard = Backend::start("s3").await.unwrap();
        let control = control_of(&shard).await;
        assert_eq!(control.crashes().await.unwrap(), 0);
        assert_eq!(crate::load::POISON_HEADER, backend::POISON_HEADER);
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
