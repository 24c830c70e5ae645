//! Header fields as they were written: a head's bytes and where each
//! field's name and value lie in them. The lowest layer of the request
//! path: the codecs ([`crate::protocol::wire`], [`crate::protocol::client_wire`]) produce them
//! and the trust boundary ([`crate::trust::headers`]) filters them, so neither
//! needs the other to talk about fields. Also the one chunk-size formatter
//! both codecs write chunked bodies with.

use std::ops::Range;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

/// A field `http` refuses (httparse had accepted it): a head that cannot be
/// passed on as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a header field's name or value is not valid HTTP")]
pub struct InvalidField;

/// Where a head's fields lie in it, compact because the fields travel
/// with the request or response and are moved with it.
pub(crate) type Spans = SmallVec<[FieldSpan; 12]>;

/// One field's name and value, as offsets into the head: 12 bytes, so
/// that a head's twelve inline spans keep [`Fields`] (carried by every
/// request and response, and moved with them) at 192 bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FieldSpan {
    name_start: u32,
    value_end: u32,
    name_len: u16,
    /// From the name's end to the value's start (the colon and any
    /// whitespace).
    gap: u16,
}

impl FieldSpan {
    /// `None` for offsets past 4 GiB, a name over 64 KiB (more than `http`
    /// allows a name) or 64 KiB of whitespace before a value, which no head
    /// the gateway accepts has.
    pub(crate) fn new(name: Range<usize>, value: Range<usize>) -> Option<Self> {
        Some(Self {
            name_start: u32::try_from(name.start).ok()?,
            value_end: u32::try_from(value.end).ok()?,
            name_len: u16::try_from(name.len()).ok()?,
            gap: u16::try_from(value.start.checked_sub(name.end)?).ok()?,
        })
    }

    fn name(self) -> Range<usize> {
        let start = self.name_start as usize;
        start..start + usize::from(self.name_len)
    }

    fn value(self) -> Range<usize> {
        let start = self.name_start as usize + usize::from(self.name_len) + usize::from(self.gap);
        start..self.value_end as usize
    }
}

/// A head's header fields as they were written (by a client or a backend):
/// the head's bytes and where each field's name and value lie in them.
/// The gateway reads, filters and writes them from here, without a header
/// map in between: a client's towards a shard (filtered by
/// [`crate::trust::headers::Inbound`]), a backend's towards the client (filtered
/// by [`crate::trust::headers::outbound`]). Where hyper is involved, a header map
/// is turned into fields ([`Fields::from_header_map`]) or built from them
/// ([`Fields::to_header_map`]).
#[derive(Debug, Clone, Default)]
pub struct Fields {
    head: Bytes,
    spans: Spans,
}

impl Fields {
    /// The fields of a head whose bytes are `head`.
    pub(crate) fn new(head: Bytes, spans: Spans) -> Self {
        Self { head, spans }
    }

    /// The same fields less `Content-Length` (a coding framed the body).
    // Its spans are dropped here, once, rather than flagged: a flag was
    // tested for every field on every walk over them (credential, inbound
    // filter, request head, framing), ~200 instructions per proxied GET
    // under callgrind; it also made every `Fields` 8 bytes larger.
    pub(crate) fn without_length(mut self) -> Self {
        let head = &self.head;
        self.spans
            .retain(|span| !head[span.name()].eq_ignore_ascii_case(b"content-length"));
        self
    }

    /// A header map's fields, written out once as a head would carry them.
    pub fn from_header_map(headers: &HeaderMap) -> Self {
        let mut head = Vec::new();
        let mut spans = Spans::new();
        for (name, value) in headers {
            let name_at = head.len();
            head.extend_from_slice(name.as_str().as_bytes());
            let value_at = head.len() + 2;
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            if let Some(span) = FieldSpan::new(name_at..value_at - 2, value_at..head.len()) {
                spans.push(span);
            }
            head.extend_from_slice(b"\r\n");
        }
        Self::new(Bytes::from(head), spans)
    }

    /// The size of these fields as an HTTP/2 header list counts them
    /// (RFC 9113 §6.5.2: each field's name and value and 32 bytes).
    pub fn list_size(&self) -> usize {
        self.iter()
            .map(|(name, value)| name.len() + value.len() + 32)
            .sum()
    }

    /// Every field's name and value, in order, as sent.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans
            .iter()
            .map(|span| (&self.head[span.name()], &self.head[span.value()]))
    }

    /// The first value of the field `name` (any case).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, value)| value)
    }

    /// The fields `keep` lets through, as a header map sharing the head's
    /// bytes. httparse has checked the syntax already, so a field `http`
    /// refuses cannot happen; it would be an error, not dropped silently.
    pub fn to_header_map<'a>(
        &'a self,
        keep: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<HeaderMap, InvalidField> {
        let mut headers = HeaderMap::with_capacity(self.spans.len());
        let base = self.head.as_ptr() as usize;
        for (name, value) in keep {
            let name = HeaderName::from_bytes(name).map_err(|_| InvalidField)?;
            // The value is a slice of the head: share it, do not copy it.
            let start = value.as_ptr() as usize - base;
            let value = HeaderValue::from_maybe_shared(self.head.slice(start..start + value.len()))
                .map_err(|_| InvalidField)?;
            headers.append(name, value);
        }
        Ok(headers)
    }
}

/// Writes a chunk-size line: `size` in upper-case hexadecimal, then CRLF.
/// Both codecs' chunked bodies go through here.
pub fn encode_chunk_size(out: &mut Vec<u8>, size: usize) {
    // 16 hex digits cover a 64-bit `usize`; the CRLF sits after them.
    let mut line = [0_u8; 18];
    line[16..].copy_from_slice(b"\r\n");
    let mut at = 16;
    let mut rest = size;
    loop {
        at -= 1;
        line[at] = b"0123456789ABCDEF"[rest & 0xF];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&line[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_upper_case_hex_as_the_format_macro_writes_them() {
        for size in [
            0,
            1,
            9,
            0xA,
            0xF,
            0x10,
            0x1A2B,
            65_536,
            0xFFFF_FFFF,
            usize::MAX,
        ] {
            let mut out = Vec::new();
            encode_chunk_size(&mut out, size);
            assert_eq!(out, format!("{size:X}\r\n").into_bytes());
        }
    }
}
