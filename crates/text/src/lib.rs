//! Plain-text forms that more than one crate writes, each rule in one place:
//! dates in UTC from Unix time ([`UtcTime`]) and lower-case hex ([`hex`]).
//!
//! The crate is pure and has no dependencies, so any crate may use it: it
//! reads no clock (callers pass the seconds) and does no I/O.
//!
//! # Example
//! ```
//! let time = text::UtcTime::from_unix(951_782_400);
//! assert_eq!((time.year, time.month, time.day), (2000, 2, 29));
//! assert_eq!(text::hex(&[0x0f, 0xa0]), "0fa0");
//! ```

use std::fmt::Write as _;

/// A moment in UTC to the second, in the proleptic Gregorian calendar (no
/// leap seconds, no time zone data). Callers lay the fields out in their
/// own format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    /// The year, e.g. 2026.
    pub year: i64,
    /// The month, 1 to 12.
    pub month: u32,
    /// The day of the month, 1 to 31.
    pub day: u32,
    /// The hour, 0 to 23.
    pub hour: u32,
    /// The minute, 0 to 59.
    pub minute: u32,
    /// The second, 0 to 59.
    pub second: u32,
}

impl UtcTime {
    /// The moment `seconds` after 1970-01-01T00:00:00Z.
    pub fn from_unix(seconds: u64) -> Self {
        let (days, of_day) = (seconds / 86_400, (seconds % 86_400) as u32);
        let (year, month, day) = civil_from_days(days as i64);
        Self {
            year,
            month,
            day,
            hour: of_day / 3600,
            minute: of_day / 60 % 60,
            second: of_day % 60,
        }
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`: exact for every day, no table, no loop).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `bytes` in lower-case hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The date the slow way: count days forward from 1970, year by year
    /// and month by month.
    fn civil_reference(mut days: i64) -> (i64, u32, u32) {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let mut year = 1970;
        loop {
            let length = if leap(year) { 366 } else { 365 };
            if days < length {
                break;
            }
            days -= length;
            year += 1;
        }
        let february = if leap(year) { 29 } else { 28 };
        let lengths = [31, february, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        let mut month = 1;
        for length in lengths {
            if days < length {
                break;
            }
            days -= length;
            month += 1;
        }
        (year, month, days as u32 + 1)
    }

    #[test]
    fn dates_agree_with_counting_days() {
        for days in (0..200_000)
            .step_by(7)
            .chain([0, 59, 60, 365, 10_957, 11_016, 20_791])
        {
            assert_eq!(civil_from_days(days), civil_reference(days), "day {days}");
        }
    }

    #[test]
    fn times_of_day_split_the_seconds() {
        let at = |seconds| {
            let t = UtcTime::from_unix(seconds);
            (t.year, t.month, t.day, t.hour, t.minute, t.second)
        };
        assert_eq!(at(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(at(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(at(1_796_392_509), (2026, 12, 4, 13, 55, 9));
        assert_eq!(at(1_796_392_985), (2026, 12, 4, 14, 3, 5));
        assert_eq!(at(86_399), (1970, 1, 1, 23, 59, 59));
    }

    #[test]
    fn hex_is_lower_case_two_digits_a_byte() {
        assert_eq!(hex(&[]), "");
        assert_eq!(hex(&[0, 9, 10, 255]), "00090aff");
    }
}
