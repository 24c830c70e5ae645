//! gRPC's conventions on the wire, as bytes and no I/O: which requests are
//! gRPC, its status codes by number and name, `grpc-timeout` read and
//! written, a `grpc-message` percent-encoded, and the method patterns the
//! retry rules name.
//!
//! It sits beside [`crate::syntax::fields`] in the lowest layer because
//! the configuration validates its settings with it
//! (`routing.retry_on_grpc_status`, `routing.grpc_idempotent_methods`).

use std::time::Duration;

/// A gRPC status code (the `grpc-status` field), as the gRPC spec numbers
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Code {
    /// Not an error.
    Ok = 0,
    /// The call was cancelled, typically by the caller.
    Cancelled = 1,
    /// An error nothing else describes.
    Unknown = 2,
    /// The caller's arguments are invalid.
    InvalidArgument = 3,
    /// The deadline expired before the call could complete.
    DeadlineExceeded = 4,
    /// Something requested was not found.
    NotFound = 5,
    /// Something the caller tried to create exists already.
    AlreadyExists = 6,
    /// The caller may not do this.
    PermissionDenied = 7,
    /// A resource (a quota, a size limit) is exhausted.
    ResourceExhausted = 8,
    /// The system is not in a state the call needs.
    FailedPrecondition = 9,
    /// The call was aborted (a concurrency conflict).
    Aborted = 10,
    /// Past the valid range.
    OutOfRange = 11,
    /// Not implemented or not supported.
    Unimplemented = 12,
    /// An invariant broke, or an internal error.
    Internal = 13,
    /// The service is unavailable for now; the call may be retried.
    Unavailable = 14,
    /// Data was lost or corrupted.
    DataLoss = 15,
    /// The caller has no valid credential.
    Unauthenticated = 16,
}

/// Every code, in the order of their numbers.
const CODES: [Code; 17] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
    Code::DataLoss,
    Code::Unauthenticated,
];

/// The spec's names, in the order of the numbers.
const NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The numbers as `grpc-status` values, so writing one allocates nothing.
const NUMBERS: [&str; 17] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
];

impl Code {
    /// The code numbered `number`, if there is one.
    pub fn from_number(number: u32) -> Option<Code> {
        CODES.get(usize::try_from(number).ok()?).copied()
    }

    /// The code named `name` as the spec spells it (`UNAVAILABLE`), in any
    /// case.
    pub fn from_name(name: &str) -> Option<Code> {
        NAMES
            .iter()
            .position(|known| known.eq_ignore_ascii_case(name))
            .map(|at| CODES[at])
    }

    /// A `grpc-status` value: decimal digits only, as the spec writes it.
    /// Anything else (a sign, spaces, a number past 16) is `None`: not a
    /// status the gateway can act on.
    pub fn from_field(value: &[u8]) -> Option<Code> {
        if value.is_empty() || value.len() > 2 || !value.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let number = value
            .iter()
            .fold(0_u32, |number, digit| number * 10 + u32::from(digit - b'0'));
        Code::from_number(number)
    }

    /// Its number.
    pub fn number(self) -> u8 {
        self as u8
    }

    /// Its name as the spec spells it (also the metrics' label value).
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }

    /// Its number as a `grpc-status` value.
    pub fn field_value(self) -> &'static str {
        NUMBERS[self as usize]
    }

    /// Whether a call that ended with it counts against its tenant's
    /// availability: the service failed it, not the caller.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Code::Unavailable | Code::DeadlineExceeded | Code::Internal | Code::Unknown
        )
    }
}

/// A set of codes (every code fits a bit of a `u32`), as
/// `routing.retry_on_grpc_status` holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CodeSet(u32);

impl CodeSet {
    /// No code.
    pub const EMPTY: CodeSet = CodeSet(0);

    /// The set of `codes`.
    pub fn of(codes: impl IntoIterator<Item = Code>) -> Self {
        codes
            .into_iter()
            .fold(Self::EMPTY, |set, code| CodeSet(set.0 | 1 << code.number()))
    }

    /// Whether `code` is in the set.
    pub fn contains(self, code: Code) -> bool {
        self.0 & (1 << code.number()) != 0
    }

    /// The codes in the set, by number.
    pub fn iter(self) -> impl Iterator<Item = Code> {
        CODES.into_iter().filter(move |code| self.contains(*code))
    }
}

/// Whether a `content-type` value says gRPC: `application/grpc` itself, or
/// followed by `+` (a message format, `application/grpc+proto`) or `;`
/// (parameters), the type compared in any case as media types are.
pub fn is_grpc_content_type(value: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    value.len() >= GRPC.len()
        && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(value.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// The most digits a `grpc-timeout` value may have (the spec's
/// `TimeoutValue`).
pub const MAX_TIMEOUT_DIGITS: usize = 8;

/// The largest `grpc-timeout` number.
const MAX_TIMEOUT_VALUE: u64 = 99_999_999;

/// What is wrong with a `grpc-timeout` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimeoutError {
    /// No digits before the unit (or nothing at all).
    #[error("grpc-timeout has no digits; write a number and a unit, such as 100m")]
    NoDigits,
    /// More than eight digits.
    #[error("grpc-timeout has more than 8 digits")]
    TooManyDigits,
    /// Something other than a digit before the unit.
    #[error("grpc-timeout's value is not a decimal number")]
    NotDecimal,
    /// The unit is not one of `H M S m u n`.
    #[error("grpc-timeout's unit is not one of H, M, S, m, u, n")]
    Unit,
}

/// One unit's letter and length, coarsest last.
const UNITS: [(u8, Duration); 6] = [
    (b'n', Duration::from_nanos(1)),
    (b'u', Duration::from_micros(1)),
    (b'm', Duration::from_millis(1)),
    (b'S', Duration::from_secs(1)),
    (b'M', Duration::from_secs(60)),
    (b'H', Duration::from_secs(3600)),
];

/// Reads a `grpc-timeout` value: one to eight ASCII digits and a unit
/// (`H` hours, `M` minutes, `S` seconds, `m` milliseconds, `u`
/// microseconds, `n` nanoseconds), nothing else, not even spaces (HTTP has
/// trimmed the field's own).
pub fn parse_timeout(value: &[u8]) -> Result<Duration, TimeoutError> {
    let Some((&unit, digits)) = value.split_last() else {
        return Err(TimeoutError::NoDigits);
    };
    let Some(&(_, length)) = UNITS.iter().find(|(letter, _)| *letter == unit) else {
        return Err(TimeoutError::Unit);
    };
    if digits.is_empty() {
        return Err(TimeoutError::NoDigits);
    }
    if digits.len() > MAX_TIMEOUT_DIGITS {
        return Err(TimeoutError::TooManyDigits);
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(TimeoutError::NotDecimal);
    }
    let number = digits
        .iter()
        .fold(0_u32, |number, digit| number * 10 + u32::from(digit - b'0'));
    // At most 99,999,999 hours: about 360 billion seconds, well inside a
    // `Duration`.
    Ok(length * number)
}

/// A `grpc-timeout` value as the gateway writes it: at most eight digits
/// and a unit, kept inline so a request head can carry it by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedTimeout {
    bytes: [u8; MAX_TIMEOUT_DIGITS + 1],
    len: u8,
}

impl EncodedTimeout {
    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// A `grpc-timeout` value as a request head carries it: its count and
/// unit in eight bytes (`Option` of it too), written out only as the head
/// is ([`PackedTimeout::encoded`]), so that the head every attempt copies
/// stays small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedTimeout {
    count: u32,
    unit: TimeoutUnit,
}

/// A `grpc-timeout` unit (its letter is its value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum TimeoutUnit {
    Nanos = b'n',
    Micros = b'u',
    Millis = b'm',
    Seconds = b'S',
    Minutes = b'M',
    Hours = b'H',
}

impl PackedTimeout {
    /// The value as written.
    pub fn encoded(self) -> EncodedTimeout {
        let mut bytes = [0; MAX_TIMEOUT_DIGITS + 1];
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(self.count).as_bytes();
        bytes[..digits.len()].copy_from_slice(digits);
        bytes[digits.len()] = self.unit as u8;
        EncodedTimeout {
            bytes,
            // At most nine bytes.
            len: (digits.len() + 1) as u8,
        }
    }
}

/// `remaining` as a `grpc-timeout` value in the finest unit whose count
/// fits eight digits, rounded down: what a shard is told never exceeds what
/// is left (a shard that believes it has longer works on after the gateway
/// stopped waiting). Nothing left is `0n`.
pub fn pack_timeout(remaining: Duration) -> PackedTimeout {
    const LETTERS: [TimeoutUnit; 6] = [
        TimeoutUnit::Nanos,
        TimeoutUnit::Micros,
        TimeoutUnit::Millis,
        TimeoutUnit::Seconds,
        TimeoutUnit::Minutes,
        TimeoutUnit::Hours,
    ];
    let (unit, count) = UNITS
        .iter()
        .zip(LETTERS)
        .map(|(&(_, length), unit)| (unit, remaining.as_nanos() / length.as_nanos()))
        .find(|&(_, count)| count <= u128::from(MAX_TIMEOUT_VALUE))
        // Past 99,999,999 hours (11,000 years): the most the field says.
        .unwrap_or((TimeoutUnit::Hours, u128::from(MAX_TIMEOUT_VALUE)));
    PackedTimeout {
        // At most 99,999,999.
        count: count as u32,
        unit,
    }
}

/// `remaining` written as a `grpc-timeout` value ([`pack_timeout`]).
pub fn encode_timeout(remaining: Duration) -> EncodedTimeout {
    pack_timeout(remaining).encoded()
}

/// A `grpc-message` value: the spec's percent-encoding of the UTF-8
/// message, where every byte outside printable ASCII, and `%` itself, is
/// written `%XX`, so that any message is a valid field value (no CR, LF or
/// NUL can reach the head).
pub fn percent_encode_message(message: &str) -> String {
    let mut encoded = String::with_capacity(message.len());
    for &byte in message.as_bytes() {
        if (0x20..=0x7E).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push('%');
            encoded.push(char::from(b"0123456789ABCDEF"[usize::from(byte >> 4)]));
            encoded.push(char::from(b"0123456789ABCDEF"[usize::from(byte & 0xF)]));
        }
    }
    encoded
}

/// What is wrong with a method pattern in `routing.grpc_idempotent_methods`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Not `/package.Service/Method`.
    #[error(
        "{0:?} is not a gRPC method path; write \"/package.Service/Method\", or \"/package.Service/Prefix*\" for every method whose name starts so"
    )]
    Shape(String),
    /// A `*` somewhere other than at the end.
    #[error("{0:?} has a '*' before its end; only a trailing '*' (a prefix) is supported")]
    Glob(String),
}

/// One entry of `routing.grpc_idempotent_methods`: an exact method path, or
/// a prefix written with a trailing `*`. Compared byte for byte, as gRPC
/// method names are case-sensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodPattern {
    /// The path, or the prefix without its `*`.
    path: String,
    prefix: bool,
}

impl MethodPattern {
    /// Reads a pattern: `/service/method` (the service non-empty), the
    /// method part possibly ending in `*` (`/pkg.Svc/*` is every method of
    /// the service); visible ASCII only.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let shape = || PatternError::Shape(text.to_owned());
        let (path, prefix) = match text.strip_suffix('*') {
            Some(path) => (path, true),
            None => (text, false),
        };
        if path.contains('*') {
            return Err(PatternError::Glob(text.to_owned()));
        }
        if !path.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(shape());
        }
        let Some(rest) = path.strip_prefix('/') else {
            return Err(shape());
        };
        let Some((service, method)) = rest.split_once('/') else {
            return Err(shape());
        };
        if service.is_empty() || method.contains('/') || (method.is_empty() && !prefix) {
            return Err(shape());
        }
        Ok(Self {
            path: path.to_owned(),
            prefix,
        })
    }

    /// Whether a request's path is this method, or one it names by prefix.
    pub fn matches(&self, path: &str) -> bool {
        if self.prefix {
            path.starts_with(&self.path)
        } else {
            path == self.path
        }
    }
}

impl std::fmt::Display for MethodPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.path)?;
        if self.prefix {
            f.write_str("*")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn content_types_that_are_grpc() {
        // gRPC-Web is a different protocol (its trailers travel in the
        // body), so it must not take the gRPC rules.
        let cases: [(&[u8], bool); 12] = [
            (b"application/grpc", true),
            (b"application/grpc+proto", true),
            (b"application/grpc+json", true),
            (b"application/grpc;charset=utf-8", true),
            (b"Application/GRPC", true),
            (b"", false),
            (b"application/json", false),
            (b"application/grpc-web", false),
            (b"application/grpc-web+proto", false),
            (b"application/grpcx", false),
            (b"application/grp", false),
            (b" application/grpc", false),
        ];
        for (value, grpc) in cases {
            assert_eq!(is_grpc_content_type(value), grpc, "{value:?}");
        }
    }

    #[test]
    fn codes_by_number_name_and_field() {
        for (number, code) in CODES.iter().enumerate() {
            assert_eq!(usize::from(code.number()), number);
            assert_eq!(Code::from_number(number as u32), Some(*code));
            assert_eq!(Code::from_name(code.name()), Some(*code));
            assert_eq!(Code::from_field(code.field_value().as_bytes()), Some(*code));
        }
        assert_eq!(Code::from_name("unavailable"), Some(Code::Unavailable));
        assert_eq!(Code::from_name("NOPE"), None);
        assert_eq!(Code::from_number(17), None);
        for bad in [&b""[..], b"17", b"+1", b" 1", b"1 ", b"014", b"-1", b"x"] {
            assert_eq!(Code::from_field(bad), None, "{bad:?}");
        }
        assert_eq!(Code::from_field(b"01"), Some(Code::Cancelled));
    }

    #[test]
    fn the_failures_that_count_against_availability() {
        let failing: Vec<_> = CODES.into_iter().filter(|c| c.is_failure()).collect();
        assert_eq!(
            failing,
            [
                Code::Unknown,
                Code::DeadlineExceeded,
                Code::Internal,
                Code::Unavailable
            ]
        );
    }

    #[test]
    fn code_sets_hold_what_they_were_given() {
        let set = CodeSet::of([Code::Unavailable, Code::Aborted]);
        assert!(set.contains(Code::Unavailable) && set.contains(Code::Aborted));
        assert!(!set.contains(Code::Ok) && !set.contains(Code::Internal));
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Code::Aborted, Code::Unavailable]
        );
        assert!(!CodeSet::EMPTY.contains(Code::Ok));
    }

    #[test]
    fn timeouts_in_every_unit() {
        // Expected lengths in nanoseconds, written out rather than built
        // from the units table under test.
        let cases: [(&[u8], u128); 8] = [
            (b"100m", 100_000_000),
            (b"5S", 5_000_000_000),
            (b"1H", 3_600_000_000_000),
            (b"2M", 120_000_000_000),
            (b"250u", 250_000),
            (b"7n", 7),
            (b"0m", 0),
            (b"99999999H", 99_999_999 * 3_600_000_000_000),
        ];
        for (value, nanos) in cases {
            let parsed = parse_timeout(value).map(|timeout| timeout.as_nanos());
            assert_eq!(parsed, Ok(nanos), "{value:?}");
        }
    }

    #[test]
    fn malformed_timeouts_are_refused() {
        let cases: [(&[u8], TimeoutError); 10] = [
            (b"", TimeoutError::NoDigits),
            (b"m", TimeoutError::NoDigits),
            (b"100", TimeoutError::Unit),
            (b"100s", TimeoutError::Unit),
            (b"100ms", TimeoutError::Unit),
            (b"123456789m", TimeoutError::TooManyDigits),
            (b"-1m", TimeoutError::NotDecimal),
            (b"1 m", TimeoutError::NotDecimal),
            (b" 1m", TimeoutError::NotDecimal),
            (b"1.5S", TimeoutError::NotDecimal),
        ];
        for (value, want) in cases {
            assert_eq!(parse_timeout(value), Err(want), "{value:?}");
        }
    }

    #[test]
    fn timeouts_are_written_in_the_finest_unit_that_fits() {
        let cases = [
            (Duration::ZERO, "0n"),
            (Duration::from_nanos(99_999_999), "99999999n"),
            (Duration::from_millis(100), "100000u"),
            (Duration::from_millis(200), "200000u"),
            (Duration::from_secs(5), "5000000u"),
            (Duration::from_secs(100), "100000m"),
            (Duration::from_secs(86_400 * 365), "31536000S"),
            (Duration::MAX, "99999999H"),
        ];
        for (remaining, want) in cases {
            assert_eq!(
                std::str::from_utf8(encode_timeout(remaining).as_bytes()).unwrap(),
                want
            );
        }
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode_message("plain text"), "plain text");
        assert_eq!(percent_encode_message("100%"), "100%25");
        assert_eq!(percent_encode_message("a\r\nb\0"), "a%0D%0Ab%00");
        assert_eq!(percent_encode_message("é"), "%C3%A9");
    }

    #[test]
    fn method_patterns() {
        let exact = MethodPattern::parse("/pkg.Service/List").unwrap();
        assert!(exact.matches("/pkg.Service/List"));
        assert!(!exact.matches("/pkg.Service/ListAll"));
        assert!(!exact.matches("/pkg.Service/list"));
        let prefix = MethodPattern::parse("/pkg.Service/Get*").unwrap();
        assert!(prefix.matches("/pkg.Service/Get"));
        assert!(prefix.matches("/pkg.Service/GetUser"));
        assert!(!prefix.matches("/pkg.Service/Put"));
        assert!(!prefix.matches("/pkg.Other/GetUser"));
        let service = MethodPattern::parse("/pkg.Service/*").unwrap();
        assert!(service.matches("/pkg.Service/Anything"));
        assert_eq!(prefix.to_string(), "/pkg.Service/Get*");
        for bad in [
            "",
            "*",
            "pkg.Service/Get",
            "/pkg.Service",
            "/pkg.Service/",
            "//Get",
            "/pkg.Service/Get/More",
            "/pkg.Service/G*t",
            "/pkg.*/Get",
            "/pkg.Service/Get it",
        ] {
            assert!(MethodPattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused_without_panicking(value in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = parse_timeout(&value);
            let _ = Code::from_field(&value);
            let _ = is_grpc_content_type(&value);
        }

        #[test]
        fn what_is_written_reads_back_no_larger_and_nearly_equal(nanos in any::<u64>()) {
            let remaining = Duration::from_nanos(nanos);
            let encoded = encode_timeout(remaining);
            let bytes = encoded.as_bytes();
            prop_assert!(bytes.len() <= MAX_TIMEOUT_DIGITS + 1);
            let read = parse_timeout(bytes).unwrap();
            prop_assert!(read <= remaining);
            // Rounded down by less than one unit of the finest that fits:
            // a coarser unit is used only past 10^8 of a finer one, at most
            // 1000 times smaller, so less than a hundred-thousandth is lost.
            let lost = remaining - read;
            prop_assert!(lost.as_nanos() * 100_000 <= remaining.as_nanos(),
                "{remaining:?} written as {:?}", std::str::from_utf8(bytes));
        }

        #[test]
        fn every_valid_value_reads_as_its_number_of_units(number in 0_u32..=99_999_999, unit in 0_usize..6) {
            let (letter, length) = UNITS[unit];
            let value = format!("{number}{}", char::from(letter));
            prop_assert_eq!(parse_timeout(value.as_bytes()), Ok(length * number));
        }
    }
}
