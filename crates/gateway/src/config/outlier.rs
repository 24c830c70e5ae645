//! `[outlier]`: passive outlier ejection.

use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, MAX_MS, millis, within};

/// Passive outlier ejection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OutlierSettings {
    /// Consecutive failed attempts that eject a shard.
    pub consecutive_failures: u32,
    /// First ejection's length; multiplied by the number of ejections.
    pub base_ejection: Duration,
    /// Longest ejection; also how long a shard must go without one for
    /// its multiplier to drop by one.
    pub max_ejection: Duration,
    /// The largest share of a cell's shards, in percent, that passive
    /// ejection holds out at once (shards out for other reasons count);
    /// one shard may always be ejected.
    pub max_ejection_percent: u8,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutlier {
    consecutive_failures: Option<u32>,
    base_ejection_ms: Option<u64>,
    max_ejection_ms: Option<u64>,
    // Wider than the 0-100 it takes (and signed), so 300 or -1 is refused
    // by name and range rather than by serde's type error.
    max_ejection_percent: Option<i64>,
}

pub(super) fn outlier_settings(o: RawOutlier) -> Result<OutlierSettings, KeyProblem> {
    let base_ejection = millis(
        "outlier.base_ejection_ms",
        o.base_ejection_ms,
        10_000,
        1..=24 * MAX_MS,
    )?;
    let max_ejection = millis(
        "outlier.max_ejection_ms",
        o.max_ejection_ms,
        300_000,
        1..=24 * MAX_MS,
    )?;
    if max_ejection < base_ejection {
        return Err((
            "outlier.max_ejection_ms",
            "must be at least outlier.base_ejection_ms".into(),
        ));
    }
    Ok(OutlierSettings {
        consecutive_failures: within(
            "outlier.consecutive_failures",
            o.consecutive_failures.unwrap_or(5),
            1..=1_000_000,
        )?,
        base_ejection,
        max_ejection,
        max_ejection_percent: u8::try_from(within(
            "outlier.max_ejection_percent",
            o.max_ejection_percent.unwrap_or(10),
            0..=100,
        )?)
        .unwrap_or(100),
    })
}
