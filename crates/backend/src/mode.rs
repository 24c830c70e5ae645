//! How a backend behaves, and the text spelling of each behaviour that the
//! `--mode` flag and the control API share (`slow:50`, `health-stall`, …).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

/// How the backend behaves.
///
/// The data path is every path but the health path (`/healthz`). Modes
/// named `Health…` touch the health path only and leave the data path
/// healthy; `Blackhole`, `Slow` and `Errors` touch both.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Answers every request.
    Healthy,
    /// Not listening: connections are refused.
    Killed,
    /// Accepts connections and never answers.
    Blackhole,
    /// Answers after a delay.
    Slow(Duration),
    /// Answers this status to a share of requests (and health checks).
    Errors {
        /// The status to answer.
        status: u16,
        /// The share of requests that get it, 0.0–1.0.
        rate: f64,
    },
    /// Alternates between healthy and killed every period.
    Flapping(Duration),
    /// Sends response headers, part of the body, then resets the connection.
    ResetMidResponse,
    /// Data path: a `200` head with `Content-Length: 1024` and 16 body
    /// bytes, then nothing more; the connection stays open.
    StallBody,
    /// Data path: a `200` head with `Transfer-Encoding: chunked`, then a
    /// 1-byte chunk every period, never ending.
    Trickle(Duration),
    /// Data path: a `200` head with `Content-Length: 1024`, then the
    /// connection is closed (FIN, no body).
    CloseAfterHead,
    /// Health path: reads the health request and never answers it; the
    /// connection stays open.
    HealthNoHead,
    /// Health path: a `200` head with `Content-Length: 1024` and 16 body
    /// bytes, then nothing more; the connection stays open.
    HealthStallBody,
    /// Health path: a `200` head, chunked, then a 1-byte chunk every
    /// period, forever.
    HealthTrickle(Duration),
    /// Health path: `200` with `Content-Length: N` and N bytes, written as
    /// fast as the reader takes them.
    HealthHuge(u64),
    /// Health path: answers with bytes that are not HTTP, then closes.
    HealthGarbage,
    /// Accepts connections and never reads from them nor answers, holding
    /// them open.
    Unread,
    /// Data path: healthy, until a request carries the poison marker
    /// ([`POISON_HEADER`]); then the shard crashes as a process would: it
    /// drops every open connection (that request's included, unanswered)
    /// and refuses new ones for this long, then comes back.
    CrashOnPoison(Duration),
    /// Data path: answers every request; one that carries the late-bytes
    /// marker ([`LATE_BYTES_HEADER`]) is followed, this long after its
    /// answer (at 0, at once, in a write of its own), by a second copy of
    /// that answer nobody asked for, on the
    /// same kept-alive connection (a shard whose responses run past their
    /// end). A pool that reused the connection would read the copy as the
    /// next request's answer.
    LateBytes(Duration),
    /// Data path: a store, per tenant (`x-shuffle-tenant`) and path:
    /// `PUT`/`POST` keep the body, `GET`/`HEAD` answer it, or `404` for
    /// data this shard never received (a stateful shard a migration just
    /// moved a tenant onto), `DELETE` forgets it. What it received is kept
    /// across mode switches.
    DataStore,
}

/// The request header that crashes a shard in [`Mode::CrashOnPoison`]
/// (with any value, e.g. `x-poison: 1`). Outside the gateway's
/// `x-shuffle-` namespace, so the gateway forwards it like any other.
pub const POISON_HEADER: &str = "x-poison";

/// The request header that makes a [`Mode::LateBytes`] shard send its
/// answer twice (with any value, e.g. `x-late-bytes: 1`).
pub const LATE_BYTES_HEADER: &str = "x-late-bytes";

/// How long a `crash-on-poison` shard stays down when no period is given.
pub const DEFAULT_CRASH: Duration = Duration::from_millis(1000);

/// Every mode's spelling, for help texts and error messages.
pub const MODE_SYNTAX: &str = "healthy, killed, blackhole, slow:MS, errors:STATUS:RATE, \
flapping:MS, reset, stall-body, trickle:MS, close-after-head, health-no-head, health-stall, \
health-trickle:MS, health-huge:BYTES, health-garbage, unread, crash-on-poison[:MS], late-bytes:MS, \
data-store";

impl Mode {
    /// Whether hyper cannot act this mode out, so connections are served by
    /// the hand-written loop in `raw.rs` (or, for `Unread`, not at all).
    pub(crate) fn is_raw(&self) -> bool {
        matches!(
            self,
            Self::StallBody
                | Self::Trickle(_)
                | Self::CloseAfterHead
                | Self::HealthNoHead
                | Self::HealthStallBody
                | Self::HealthTrickle(_)
                | Self::HealthHuge(_)
                | Self::HealthGarbage
                | Self::Unread
                | Self::LateBytes(_)
        )
    }
}

/// Why a mode's text does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseModeError {
    /// Not the name of any mode (or the wrong number of `:` parts).
    #[error("{text:?} is not a mode; use {MODE_SYNTAX}")]
    Unknown {
        /// The text given.
        text: String,
    },
    /// A period is not a whole number of milliseconds.
    #[error("{text:?}: {value:?} is not a whole number of milliseconds")]
    Millis {
        /// The whole mode text.
        text: String,
        /// The bad part.
        value: String,
    },
    /// A period that must be above zero is zero.
    #[error("{text:?}: the period must be above 0 milliseconds")]
    ZeroPeriod {
        /// The whole mode text.
        text: String,
    },
    /// An `errors:` status is not an HTTP status.
    #[error("{text:?}: {value:?} is not an HTTP status (100-599)")]
    Status {
        /// The whole mode text.
        text: String,
        /// The bad part.
        value: String,
    },
    /// An `errors:` rate is not a share from 0 to 1.
    #[error("{text:?}: {value:?} is not a rate from 0.0 to 1.0")]
    Rate {
        /// The whole mode text.
        text: String,
        /// The bad part.
        value: String,
    },
    /// A `health-huge:` size is not a whole number of bytes.
    #[error("{text:?}: {value:?} is not a whole number of bytes")]
    Bytes {
        /// The whole mode text.
        text: String,
        /// The bad part.
        value: String,
    },
}

impl FromStr for Mode {
    type Err = ParseModeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let owned = || text.to_owned();
        let millis = |value: &str| {
            value
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| ParseModeError::Millis {
                    text: owned(),
                    value: value.to_owned(),
                })
        };
        // A period of 0 would make a flapping backend spin and a trickling
        // one a flood, which is neither behaviour.
        let period = |value: &str| {
            let period = millis(value)?;
            if period.is_zero() {
                return Err(ParseModeError::ZeroPeriod { text: owned() });
            }
            Ok(period)
        };
        let mode = match text.split(':').collect::<Vec<_>>().as_slice() {
            ["healthy"] => Self::Healthy,
            ["killed"] => Self::Killed,
            ["blackhole"] => Self::Blackhole,
            ["reset"] => Self::ResetMidResponse,
            ["slow", ms] => Self::Slow(millis(ms)?),
            ["flapping", ms] => Self::Flapping(period(ms)?),
            ["errors", status, rate] => {
                let status = status
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (100..=599).contains(s))
                    .ok_or_else(|| ParseModeError::Status {
                        text: owned(),
                        value: (*status).to_owned(),
                    })?;
                let rate = rate
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| ParseModeError::Rate {
                        text: owned(),
                        value: (*rate).to_owned(),
                    })?;
                Self::Errors { status, rate }
            }
            ["stall-body"] => Self::StallBody,
            ["trickle", ms] => Self::Trickle(period(ms)?),
            ["close-after-head"] => Self::CloseAfterHead,
            ["health-no-head"] => Self::HealthNoHead,
            ["health-stall"] => Self::HealthStallBody,
            ["health-trickle", ms] => Self::HealthTrickle(period(ms)?),
            ["health-huge", bytes] => {
                Self::HealthHuge(bytes.parse().map_err(|_| ParseModeError::Bytes {
                    text: owned(),
                    value: (*bytes).to_owned(),
                })?)
            }
            ["health-garbage"] => Self::HealthGarbage,
            ["unread"] => Self::Unread,
            ["crash-on-poison"] => Self::CrashOnPoison(DEFAULT_CRASH),
            ["crash-on-poison", ms] => Self::CrashOnPoison(period(ms)?),
            ["late-bytes", ms] => Self::LateBytes(millis(ms)?),
            ["data-store"] => Self::DataStore,
            _ => return Err(ParseModeError::Unknown { text: owned() }),
        };
        Ok(mode)
    }
}

/// The `--mode` spelling, which parses back to the same mode (durations are
/// whole milliseconds in that spelling, so finer ones are truncated).
impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Healthy => f.write_str("healthy"),
            Self::Killed => f.write_str("killed"),
            Self::Blackhole => f.write_str("blackhole"),
            Self::Slow(delay) => write!(f, "slow:{}", delay.as_millis()),
            Self::Errors { status, rate } => write!(f, "errors:{status}:{rate}"),
            Self::Flapping(period) => write!(f, "flapping:{}", period.as_millis()),
            Self::ResetMidResponse => f.write_str("reset"),
            Self::StallBody => f.write_str("stall-body"),
            Self::Trickle(period) => write!(f, "trickle:{}", period.as_millis()),
            Self::CloseAfterHead => f.write_str("close-after-head"),
            Self::HealthNoHead => f.write_str("health-no-head"),
            Self::HealthStallBody => f.write_str("health-stall"),
            Self::HealthTrickle(period) => write!(f, "health-trickle:{}", period.as_millis()),
            Self::HealthHuge(bytes) => write!(f, "health-huge:{bytes}"),
            Self::HealthGarbage => f.write_str("health-garbage"),
            Self::Unread => f.write_str("unread"),
            Self::CrashOnPoison(down) => write!(f, "crash-on-poison:{}", down.as_millis()),
            Self::LateBytes(after) => write!(f, "late-bytes:{}", after.as_millis()),
            Self::DataStore => f.write_str("data-store"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn every_mode_round_trips_through_its_spelling() {
        let modes = [
            Mode::Healthy,
            Mode::Killed,
            Mode::Blackhole,
            Mode::Slow(ms(0)),
            Mode::Slow(ms(50)),
            Mode::Errors {
                status: 503,
                rate: 0.25,
            },
            Mode::Errors {
                status: 500,
                rate: 1.0,
            },
            Mode::Flapping(ms(200)),
            Mode::ResetMidResponse,
            Mode::StallBody,
            Mode::Trickle(ms(100)),
            Mode::CloseAfterHead,
            Mode::HealthNoHead,
            Mode::HealthStallBody,
            Mode::HealthTrickle(ms(7)),
            Mode::HealthHuge(0),
            Mode::HealthHuge(10_000_000),
            Mode::HealthGarbage,
            Mode::Unread,
            Mode::CrashOnPoison(ms(1)),
            Mode::CrashOnPoison(ms(2500)),
            Mode::LateBytes(ms(0)),
            Mode::LateBytes(ms(1)),
            Mode::DataStore,
        ];
        for mode in modes {
            let text = mode.to_string();
            assert_eq!(text.parse::<Mode>(), Ok(mode.clone()), "{text}");
            // Every spelling is listed where users read the valid ones.
            let name = text.split(':').next().unwrap();
            assert!(MODE_SYNTAX.contains(name), "{name} missing");
        }
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        // Each bad text with the variant (by its `Debug` name) it must give.
        let cases = [
            ("sick", "Unknown"),
            ("trickle", "Unknown"),
            ("healthy:1", "Unknown"),
            ("trickle:0", "ZeroPeriod"),
            ("health-trickle:0", "ZeroPeriod"),
            ("flapping:0", "ZeroPeriod"),
            ("health-trickle:x", "Millis"),
            ("slow:-1", "Millis"),
            ("health-huge:x", "Bytes"),
            ("health-huge:-1", "Bytes"),
            ("errors:99:0.5", "Status"),
            ("errors:503:2", "Rate"),
            ("crash-on-poison:0", "ZeroPeriod"),
            ("crash-on-poison:x", "Millis"),
            ("crash-on-poison:1:2", "Unknown"),
            ("late-bytes", "Unknown"),
            ("late-bytes:x", "Millis"),
            ("data-store:1", "Unknown"),
        ];
        for (text, variant) in cases {
            let error = text.parse::<Mode>().unwrap_err();
            assert!(
                format!("{error:?}").starts_with(variant),
                "{text}: {error:?}"
            );
            assert!(error.to_string().contains(text), "{error}");
        }
        assert_eq!(
            "crash-on-poison".parse::<Mode>(),
            Ok(Mode::CrashOnPoison(DEFAULT_CRASH))
        );
        let unknown = "sick".parse::<Mode>().unwrap_err().to_string();
        assert!(unknown.contains("health-stall"), "{unknown}");
    }
}
