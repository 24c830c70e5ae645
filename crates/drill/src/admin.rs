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
    /// How long ago the last active check completed, in milliseconds
    /// (`None` before the first, or from a gateway that does not say).
    pub last_check_age_ms: Option<u64>,
    /// Requests in flight to it from this replica now.
    pub in_flight: u64,
    /// Whether outlier detection has it ejected now.
    pub ejected: bool,
    /// Whether an operator (or a rollout) drained it.
    pub drained: bool,
}

/// The gateway's live blast radius of one cell (`GET /admin/blast`): what
/// the shards out of rotation right now do to its tenants.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LiveBlast {
    /// The cell.
    pub cell: String,
    /// Tenants whose whole subset is out.
    pub fully_down: u64,
    /// Tenants with at least one member out.
    pub degraded: u64,
    /// The fully-down tenants, by id.
    pub fully_down_tenants: Vec<String>,
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
                CallError::Timeout => DrillError::Gateway(format!(
                    "admin API at {base} gave no whole answer to {path} within {} s",
                    crate::api::CALL_TIMEOUT.as_secs()
                )),
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

    /// Drains shard `id` of `cell` (no new requests; those in flight
    /// finish), or with `drain` false restores it.
    pub async fn set_drained(&self, cell: &str, id: &str, drain: bool) -> Result<(), DrillError> {
        let action = if drain { "drain" } else { "restore" };
        self.json(
            Method::POST,
            &format!(
                "/admin/shards/{}/{action}?cell={}",
                path_segment(id),
                path_segment(cell)
            ),
        )
        .await
        .map(drop)
    }

    /// The live blast radius of every cell.
    pub async fn blast(&self) -> Result<Vec<LiveBlast>, DrillError> {
        let value = self.json(Method::GET, "/admin/blast").await?;
        Ok(value["cells"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|cell| LiveBlast {
                cell: cell["cell"].as_str().unwrap_or("").to_owned(),
                fully_down: cell["fully_down"].as_u64().unwrap_or(0),
                degraded: cell["degraded"].as_u64().unwrap_or(0),
                fully_down_tenants: cell["fully_down_tenants"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect(),
            })
            .collect())
    }

    /// Failed attempts per shard (`cell/id`) so far: the sum of
    /// `shuffle_attempts_total` with an outcome other than `ok`. A failed
    /// attempt the gateway failed over from hurts no tenant, and still
    /// says the shard is bad.
    pub async fn failed_attempts(
        &self,
    ) -> Result<std::collections::BTreeMap<String, f64>, DrillError> {
        let text = self.metrics().await?;
        Ok(failed_attempts(&text))
    }

    /// The text of `/metrics`.
    async fn metrics(&self) -> Result<String, DrillError> {
        let (status, body) = self.call(Method::GET, "/metrics").await?;
        if !status.is_success() {
            return Err(DrillError::Gateway(format!("/metrics answered {status}")));
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
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
                last_check_age_ms: shard["last_check_age_ms"].as_u64(),
                in_flight: shard["in_flight"].as_u64().unwrap_or(0),
                ejected: shard["ejected"].as_bool() == Some(true),
                drained: shard["drained"].as_bool() == Some(true),
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
        let text = self.metrics().await?;
        Ok(text
            .lines()
            .filter(|line| line.starts_with("shuffle_failovers_total"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }
}

/// `text` for one segment of a URL path: what is not unreserved is
/// percent-encoded, so an id with `/` or `?` names that shard and nothing
/// else.
fn path_segment(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The sum of `shuffle_attempts_total` with an outcome other than `ok`, per
/// shard (`cell/id`), from a Prometheus text exposition.
pub(crate) fn failed_attempts(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut failed = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("shuffle_attempts_total{") else {
            continue;
        };
        let Some((labels, value)) = labels_and_value(rest) else {
            continue;
        };
        let label = |name: &str| {
            labels
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        };
        let (Some(cell), Some(shard), Some(outcome)) =
            (label("cell"), label("shard"), label("outcome"))
        else {
            continue;
        };
        if outcome == "ok" {
            continue;
        }
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        *failed.entry(format!("{cell}/{shard}")).or_insert(0.0) += value;
    }
    failed
}

/// The labels of a sample line after its `{` (names and unescaped values)
/// and what follows the closing `}`: label values are quoted, with `\`,
/// `\"` and `\n` escaped, so that a `,`, `}` or `"` in a shard id is part
/// of its value and never ends it.
fn labels_and_value(mut rest: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (name, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, other) => value.push(other),
            }
        };
        labels.push((name.trim().to_owned(), value));
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_attempts_read_escaped_label_values_whole() {
        let text = r#"# TYPE shuffle_attempts counter
shuffle_attempts_total{cell="c",shard="s1",outcome="ok"} 10
shuffle_attempts_total{cell="c",shard="s1",outcome="status"} 3
shuffle_attempts_total{outcome="reset",shard="s1",cell="c"} 2
shuffle_attempts_total{cell="c",shard="a,b",outcome="connect"} 4
shuffle_attempts_total{cell="c",shard="q\"x\\y}",outcome="timeout"} 5
shuffle_attempts_created{cell="c",shard="s1",outcome="status"} 1700000000
"#;
        let failed = failed_attempts(text);
        assert_eq!(failed.get("c/s1"), Some(&5.0));
        assert_eq!(failed.get("c/a,b"), Some(&4.0));
        assert_eq!(failed.get("c/q\"x\\y}"), Some(&5.0));
        assert_eq!(failed.len(), 3, "{failed:?}");
    }
}
