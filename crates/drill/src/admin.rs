//! A small client for the gateway's admin API: inject and clear faults,
//! read tenants' subsets and shard health, and read the failover counter.

use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use serde_json::Value;

use crate::api::{Api, CallError};
use crate::error::DrillError;

/// The admin API of one gateway.
#[derive(Clone)]
pub struct AdminClient {
    api: Api,
    token: String,
}

// By hand, so that the token never reaches a log.
impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient")
            .field("base", &self.api.base())
            .finish_non_exhaustive()
    }
}

/// A shard as the admin API reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardState {
    /// The cell.
    pub cell: String,
    /// The id.
    pub id: String,
    /// `up`, `failed`, `ejected`, …
    pub health: String,
    /// What the gateway's active checks say (`presumed`, `healthy`,
    /// `unhealthy`), whatever ejections say; `None` from a gateway that
    /// does not report it.
    pub active: Option<String>,
    /// The last active check's result (`pass` or `fail`); `None` before
    /// the first, or from a gateway that does not report it.
    pub last_check: Option<String>,
}

impl AdminClient {
    /// A client for the admin API at `base` (e.g. `http://127.0.0.1:9901`).
    pub fn new(base: &Uri, token: &str) -> Self {
        Self {
            api: Api::new(base),
            token: token.to_owned(),
        }
    }

    async fn call(&self, method: Method, path: &str) -> Result<(StatusCode, Bytes), DrillError> {
        let base = self.api.base();
        let (status, body) = self
            .api
            .call(
                method,
                path,
                ("authorization", &format!("Bearer {}", self.token)),
                Bytes::new(),
            )
            .await
            .map_err(|e| match e {
                CallError::Request(e) => DrillError::Input(format!("bad admin URL {base}: {e}")),
                CallError::Unreachable(e) => {
                    DrillError::Gateway(format!("admin API at {base} unreachable: {e}"))
                }
                CallError::Body(e) => DrillError::Gateway(format!("admin API {path}: {e}")),
            })?;
        if status == StatusCode::UNAUTHORIZED {
            return Err(DrillError::Input(
                "the admin API refused the token (401); check --admin-token-file".into(),
            ));
        }
        Ok((status, body))
    }

    async fn json(&self, method: Method, path: &str) -> Result<Value, DrillError> {
        let (status, body) = self.call(method, path).await?;
        if !status.is_success() {
            return Err(DrillError::Gateway(format!(
                "admin API {path} answered {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        serde_json::from_slice(&body)
            .map_err(|e| DrillError::Gateway(format!("admin API {path}: not JSON: {e}")))
    }

    /// Makes the gateway treat a shard as down.
    pub async fn fail(&self, shard: &str) -> Result<(), DrillError> {
        self.json(Method::POST, &format!("/admin/shards/{shard}/fail"))
            .await
            .map(drop)
    }

    /// Clears a fail or drain.
    pub async fn restore(&self, shard: &str) -> Result<(), DrillError> {
        self.json(Method::POST, &format!("/admin/shards/{shard}/restore"))
            .await
            .map(drop)
    }

    /// Every shard and its health.
    pub async fn shards(&self) -> Result<Vec<ShardState>, DrillError> {
        let value = self.json(Method::GET, "/admin/shards").await?;
        Ok(value["shards"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|shard| ShardState {
                cell: shard["cell"].as_str().unwrap_or("").to_owned(),
                id: shard["id"].as_str().unwrap_or("").to_owned(),
                health: shard["health"].as_str().unwrap_or("").to_owned(),
                active: shard["active"].as_str().map(str::to_owned),
                last_check: shard["last_check"].as_str().map(str::to_owned),
            })
            .collect())
    }

    /// A tenant's cell and subset (shard ids).
    pub async fn subset(&self, tenant: &str) -> Result<(String, Vec<String>), DrillError> {
        let value = self
            .json(Method::GET, &format!("/admin/tenants/{tenant}"))
            .await?;
        let subset = value["subset"]
            .as_array()
            .ok_or_else(|| {
                DrillError::Gateway(format!("admin API has no subset for tenant {tenant:?}"))
            })?
            .iter()
            .filter_map(|id| id.as_str().map(str::to_owned))
            .collect();
        Ok((value["cell"].as_str().unwrap_or("").to_owned(), subset))
    }

    /// Whether the gateway reports any member of a tenant's subset out of
    /// rotation right now.
    pub async fn has_member_out(&self, tenant: &str) -> Result<bool, DrillError> {
        let value = self
            .json(Method::GET, &format!("/admin/tenants/{tenant}"))
            .await?;
        Ok(value["members"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|member| member["health"].as_str() != Some("up")))
    }

    /// Where the admin API is, for messages.
    pub fn base(&self) -> String {
        self.api.base().to_string()
    }

    /// Whether the gateway shares its containment and marks through a
    /// fleet store (`[fleet]`): `None` without one (or from a gateway too
    /// old to say), else whether the store answers now.
    pub async fn fleet(&self) -> Result<Option<bool>, DrillError> {
        let (status, body) = self.call(Method::GET, "/admin/fleet").await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(DrillError::Gateway(format!(
                "admin API /admin/fleet answered {status}"
            )));
        }
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| DrillError::Gateway(format!("admin API /admin/fleet: not JSON: {e}")))?;
        Ok(value["fleet"]
            .is_object()
            .then(|| value["fleet"]["up"].as_bool() == Some(true)))
    }

    /// The sum of `shuffle_failovers_total` over every cell and kind.
    pub async fn failovers(&self) -> Result<f64, DrillError> {
        let (status, body) = self.call(Method::GET, "/metrics").await?;
        if !status.is_success() {
            return Err(DrillError::Gateway(format!("/metrics answered {status}")));
        }
        let text = String::from_utf8_lossy(&body);
        Ok(text
            .lines()
            .filter(|line| line.starts_with("shuffle_failovers_total"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }
}
