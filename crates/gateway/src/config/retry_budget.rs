//! `[retry_budget]`: how many retries the gateway may add to the requests
//! it is sent.

use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, within};

/// The retry budget (tower's `TpsBudget` semantics).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryBudgetSettings {
    /// Retries allowed as a fraction of requests.
    pub ratio: f64,
    /// Retries always allowed per second, whatever the request rate.
    pub min_per_second: u32,
    /// The window requests and retries are counted over.
    pub window: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetryBudget {
    ratio: Option<f64>,
    min_per_second: Option<u32>,
    window_seconds: Option<u64>,
}

pub(super) fn retry_budget_settings(b: RawRetryBudget) -> Result<RetryBudgetSettings, KeyProblem> {
    let ratio = b.ratio.unwrap_or(0.2);
    // NaN is in no range: `within` refuses it too.
    Ok(RetryBudgetSettings {
        ratio: within("retry_budget.ratio", ratio, 0.0..=1000.0)?,
        min_per_second: within(
            "retry_budget.min_per_second",
            b.min_per_second.unwrap_or(10),
            0..=1_000_000,
        )?,
        window: Duration::from_secs(within(
            "retry_budget.window_seconds",
            b.window_seconds.unwrap_or(10),
            1..=60,
        )?),
    })
}
