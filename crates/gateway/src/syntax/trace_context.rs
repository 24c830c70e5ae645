//! W3C Trace Context's `traceparent` (<https://www.w3.org/TR/trace-context/>):
//! read from a client's fields, written for each attempt. Only the grammar
//! lives here; whether an incoming context is believed is the tracing
//! settings' call ([`crate::telemetry::traces`]).

use super::fields::Fields;

/// A trace id: 16 bytes, never all zero.
pub type TraceId = [u8; 16];
/// A span (parent) id: 8 bytes, never all zero.
pub type SpanId = [u8; 8];

/// The `traceparent` header's name.
pub const TRACEPARENT: &str = "traceparent";
/// The `tracestate` header's name.
pub const TRACESTATE: &str = "tracestate";

/// The longest `tracestate` passed on (and recorded): the specification
/// asks vendors to propagate at least 512 bytes and lets a longer one be
/// cut; a longer one is dropped whole rather than cut mid-member.
pub const MAX_TRACESTATE: usize = 512;

/// The length of a version-00 `traceparent` value.
pub const TRACEPARENT_LEN: usize = 55;

/// One `traceparent`: a trace, the span that is the parent of the next
/// one, and the sampled flag. Copied by value: it is what each attempt's
/// head carries ([`crate::trust::headers::Added::traceparent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace.
    pub trace_id: TraceId,
    /// The span that is the parent of the next one.
    pub span_id: SpanId,
    /// The trace flags; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceParent {
    /// Whether the sampled flag is set.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// Parses one `traceparent` value. Version `00` must be exactly 55
    /// bytes; a later version (not `ff`) is read by its first 55 bytes,
    /// which must be followed by `-` if anything follows, as the
    /// specification asks of a version-00 reader. Hex is lowercase only, and
    /// an all-zero trace or span id makes the value invalid.
    pub fn parse(value: &[u8]) -> Option<Self> {
        if value.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = hex_byte(&value[0..2])?;
        if version == 0xff
            || (version == 0 && value.len() != TRACEPARENT_LEN)
            || (value.len() > TRACEPARENT_LEN && value[TRACEPARENT_LEN] != b'-')
        {
            return None;
        }
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let mut trace_id = [0; 16];
        for (i, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(&value[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0; 8];
        for (i, byte) in span_id.iter_mut().enumerate() {
            *byte = hex_byte(&value[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&value[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The request's `traceparent`, if it carries exactly one valid one
    /// (two are ambiguous, and the specification says to drop both).
    pub fn of(fields: &Fields) -> Option<Self> {
        let mut values = fields
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(TRACEPARENT.as_bytes()))
            .map(|(_, value)| value);
        let first = values.next()?;
        if values.next().is_some() {
            return None;
        }
        Self::parse(first.trim_ascii())
    }

    /// The version-00 value for this parent.
    pub fn encode(&self) -> [u8; TRACEPARENT_LEN] {
        let mut out = [b'-'; TRACEPARENT_LEN];
        out[0] = b'0';
        out[1] = b'0';
        write_hex(&mut out[3..35], &self.trace_id);
        write_hex(&mut out[36..52], &self.span_id);
        // Only the sampled bit is known to version 00: the others are
        // passed as zero, as the specification asks.
        write_hex(&mut out[53..55], &[self.flags & 1]);
        out
    }
}

/// The request's `tracestate`, when it has exactly one no longer than
/// [`MAX_TRACESTATE`] and made of visible ASCII, commas and spaces.
pub fn tracestate(fields: &Fields) -> Option<&[u8]> {
    let mut values = fields
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(TRACESTATE.as_bytes()))
        .map(|(_, value)| value);
    let value = values.next()?;
    if values.next().is_some()
        || value.len() > MAX_TRACESTATE
        || !value.iter().all(|&b| (0x20..0x7f).contains(&b))
    {
        return None;
    }
    Some(value)
}

/// Lowercase hex of `bytes` into `out` (twice as long): each byte's two
/// digits looked up at once (a header is written for every attempt).
pub fn write_hex(out: &mut [u8], bytes: &[u8]) {
    const PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0; 2]; 256];
        let mut byte = 0;
        while byte < 256 {
            pairs[byte] = [DIGITS[byte >> 4], DIGITS[byte & 0xf]];
            byte += 1;
        }
        pairs
    };
    for (pair, &byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&PAIRS[byte as usize]);
    }
}

/// Two lowercase hex digits as a byte.
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EXAMPLE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_specifications_example_reads_and_writes_back() {
        let parent = TraceParent::parse(EXAMPLE.as_bytes()).unwrap();
        assert_eq!(
            parent.span_id,
            [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]
        );
        assert!(parent.sampled());
        assert_eq!(&parent.encode()[..], EXAMPLE.as_bytes());
    }

    #[test]
    fn invalid_values_are_refused() {
        let zero_trace = "00-00000000000000000000000000000000-b7ad6b7169203331-01";
        let zero_span = "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01";
        let upper = "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01";
        let version_ff = "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let long_00 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x";
        let short = &EXAMPLE[..54];
        let dashes = "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        for bad in [
            zero_trace, zero_span, upper, version_ff, long_00, short, dashes, "",
        ] {
            assert_eq!(TraceParent::parse(bad.as_bytes()), None, "{bad}");
        }
        // A later version is read by its version-00 prefix.
        let later = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-ever";
        assert!(TraceParent::parse(later.as_bytes()).is_some());
        let glued = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x";
        assert_eq!(TraceParent::parse(glued.as_bytes()), None);
    }

    #[test]
    fn flags_other_than_sampled_are_not_passed_on() {
        let parent = TraceParent::parse(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-ff".as_bytes(),
        )
        .unwrap();
        assert_eq!(&parent.encode()[53..], b"01");
    }

    /// The slow, obvious reader: split on `-`, check each part's length
    /// and digits, as the specification's grammar reads.
    fn reference(value: &str) -> Option<(String, String, u8)> {
        let parts: Vec<&str> = value.split('-').collect();
        if parts.len() < 4 {
            return None;
        }
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        };
        let (version, trace, span, flags) = (parts[0], parts[1], parts[2], parts[3]);
        if !(hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2)) {
            return None;
        }
        if version == "ff" || (version == "00" && parts.len() != 4) {
            return None;
        }
        if trace.chars().all(|c| c == '0') || span.chars().all(|c| c == '0') {
            return None;
        }
        Some((
            trace.into(),
            span.into(),
            u8::from_str_radix(flags, 16).unwrap(),
        ))
    }

    #[test]
    fn hex_is_lowercase_and_agrees_with_format_for_every_byte() {
        for byte in 0..=255u8 {
            let mut out = [0; 2];
            write_hex(&mut out, &[byte]);
            assert_eq!(std::str::from_utf8(&out).unwrap(), format!("{byte:02x}"));
        }
    }

    proptest! {
        #[test]
        fn parse_agrees_with_the_reference(
            value in "(0[0-2]|ff|0F|[0-9a-f]{2})-[0-9a-fA-F]{30,33}-[0-9a-f]{15,17}-[0-9a-f]{1,3}(-[a-z]{0,3})?"
        ) {
            let ours = TraceParent::parse(value.as_bytes())
                .map(|p| (text::hex(&p.trace_id), text::hex(&p.span_id), p.flags));
            prop_assert_eq!(ours, reference(&value));
        }

        #[test]
        fn encode_then_parse_is_the_identity(trace in any::<[u8; 16]>(), span in any::<[u8; 8]>(), sampled: bool) {
            prop_assume!(trace != [0; 16] && span != [0; 8]);
            let parent = TraceParent { trace_id: trace, span_id: span, flags: u8::from(sampled) };
            prop_assert_eq!(TraceParent::parse(&parent.encode()), Some(parent));
        }
    }
}
