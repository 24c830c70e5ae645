//! The helpers every section's validation shares: the problem types a
//! section returns (turned into a `ConfigError` by `mod.rs`, which knows
//! the file), ranges, durations and addresses.

use std::net::SocketAddr;
use std::time::Duration;

/// A problem with one key: the key's dotted name and what is wrong.
pub(super) type KeyProblem = (&'static str, String);

/// The longest timeout, interval or grace period any key accepts: an hour.
/// Longer values are typos, and unbounded ones overflow the clock.
pub(super) const MAX_MS: u64 = 3_600_000;

/// `value` if it lies in `range`, else an error naming the range.
pub(super) fn within<T: PartialOrd + std::fmt::Display + Copy>(
    key: &'static str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, KeyProblem> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err((
            key,
            format!(
                "{value} is out of range; use a value from {} to {}",
                range.start(),
                range.end()
            ),
        ))
    }
}

/// A duration in milliseconds from `key`, `default` when absent, within
/// `range`.
pub(super) fn millis(
    key: &'static str,
    value: Option<u64>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Duration, KeyProblem> {
    within(key, value.unwrap_or(default), range).map(Duration::from_millis)
}

/// A problem with a key whose name is built (`cells[2].shards[0].url`):
/// the key and what is wrong.
pub(super) type CellProblem = (String, String);

pub(super) fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an address; write IP:PORT, e.g. \"127.0.0.1:8080\""))
}
