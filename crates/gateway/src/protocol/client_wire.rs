//! HTTP/1.1 toward a client, as bytes: which request heads the connection's
//! own loop serves, and the response head and body framing it writes back.
//!
//! This module does no I/O; [`crate::listen::connection`] moves the bytes. The loop
//! serves only the plainest requests itself: a complete HTTP/1.1 head that
//! parses cleanly and carries no body (no `Transfer-Encoding`, no
//! `Content-Length` other than a single `0`), no `Expect` and no upgrade.
//! Everything else, including every malformed or oversized head, is
//! [`HeadRead::HandOff`]: hyper takes the connection, with the bytes read so
//! far, and answers it (400, 431, 100-continue, chunked uploads, HTTP/1.0)
//! as it always has. So the loop never has to judge a request body's
//! framing, where request smuggling lives, and its requests are exactly the
//! requests hyper would have parsed the same way: the same parser
//! (`httparse` with its default settings), the same header types.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Method, Request, StatusCode, Uri, Version};
use hyper::body::SizeHint;

/// Writes a chunk-size line (the one formatter both codecs share).
pub use crate::syntax::fields::encode_chunk_size;
use crate::syntax::fields::{FieldSpan, Fields, Spans};

/// The body of the gateway's own JSON errors: `{"error":…,"status":…}`.
pub fn json_error_body(status: StatusCode, message: &str) -> Bytes {
    serde_json::json!({ "error": message, "status": status.as_u16() })
        .to_string()
        .into()
}

/// The most header fields in a head the loop serves (hyper's default
/// limit; a head with more is handed to hyper, which refuses it).
pub const MAX_HEADERS: usize = 100;

/// What the bytes read so far hold.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per request, moved once: boxing would cost an allocation per request"
)]
pub enum HeadRead {
    /// The head has not ended yet (and is still within the size limit).
    Partial,
    /// A complete, bodiless HTTP/1.1 request the loop serves; its head has
    /// been taken off the front of the buffer.
    Simple(SimpleRequest),
    /// Anything else: hyper takes the connection and everything read.
    HandOff,
}

/// A request the connection loop serves.
#[derive(Debug)]
pub struct SimpleRequest {
    /// Method, target and version (its header map is empty: the fields
    /// are in `fields`).
    pub request: Request<()>,
    /// The request's header fields, as sent.
    pub fields: Fields,
    /// The client asked to close the connection after this request.
    pub close: bool,
}

/// Reads a request head from the front of `buf`. A head that does not end
/// within `max_head_bytes` is handed off (hyper answers it with 431).
pub fn read_head(buf: &mut BytesMut, max_head_bytes: usize) -> HeadRead {
    if buf.is_empty() {
        return HeadRead::Partial;
    }
    // Uninitialised slots: filling a hundred of them for every head would
    // cost more than parsing it.
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut []);
    let length = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut parsed,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(length)) if length <= max_head_bytes => length,
        Ok(httparse::Status::Partial) if buf.len() <= max_head_bytes => return HeadRead::Partial,
        // Too large, too many fields or malformed: hyper's to answer.
        _ => return HeadRead::HandOff,
    };
    if parsed.version != Some(1) {
        return HeadRead::HandOff;
    }
    let Some(method) = parsed
        .method
        .and_then(|method| Method::from_bytes(method.as_bytes()).ok())
        .filter(|method| *method != Method::CONNECT)
    else {
        return HeadRead::HandOff;
    };
    let base = buf.as_ptr() as usize;
    let span = |part: &[u8]| {
        let start = part.as_ptr() as usize - base;
        start..start + part.len()
    };
    let target = span(parsed.path.unwrap_or_default().as_bytes());
    let mut spans = Spans::new();
    let mut lengths = 0;
    let mut close = false;
    for field in parsed.headers.iter() {
        let name = field.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            // A single `0` is no body; anything else (even `0, 0`) is for
            // hyper to judge.
            lengths += 1;
            if field.value != b"0" || lengths > 1 {
                return HeadRead::HandOff;
            }
        }
        if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"upgrade")
        {
            return HeadRead::HandOff;
        }
        if name.eq_ignore_ascii_case(b"connection") {
            for token in field.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"upgrade") {
                    return HeadRead::HandOff;
                }
                close |= token.eq_ignore_ascii_case(b"close");
            }
        }
        let Some(field) = FieldSpan::new(span(name), span(field.value)) else {
            return HeadRead::HandOff;
        };
        spans.push(field);
    }
    // The head becomes shared bytes that the URI and the fields point into:
    // no copy per field, and no header map (httparse has checked the
    // fields' syntax, with the rules `http`'s types check).
    let head = buf.split_to(length).freeze();
    let Ok(uri) = Uri::from_maybe_shared(head.slice(target)) else {
        restore(buf, &head);
        return HeadRead::HandOff;
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    HeadRead::Simple(SimpleRequest {
        request,
        fields: Fields::new(head, spans),
        close,
    })
}

/// Puts a head taken off `buf` back in front of it.
fn restore(buf: &mut BytesMut, head: &Bytes) {
    let mut whole = BytesMut::with_capacity(head.len() + buf.len());
    whole.extend_from_slice(head);
    whole.extend_from_slice(buf);
    *buf = whole;
}

/// How a response body goes to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body is sent (a `HEAD` request, a 1xx, 204 or 304 status).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked: the length is not known up front.
    Chunked,
}

/// How a response is framed: no body for `HEAD`, 1xx, 204 and 304; else
/// the response's own single `Content-Length`, or the body's exact size,
/// or chunked.
pub fn response_framing(
    head_request: bool,
    status: StatusCode,
    headers: &HeaderMap,
    hint: &SizeHint,
) -> BodyFraming {
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return BodyFraming::None;
    }
    let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
    match (lengths.next(), lengths.next()) {
        (Some(value), None) => match value.to_str().ok().and_then(|v| v.parse().ok()) {
            Some(length) => BodyFraming::Length(length),
            None => BodyFraming::Chunked,
        },
        (None, _) => hint
            .exact()
            .map_or(BodyFraming::Chunked, BodyFraming::Length),
        // Several lengths (the upstream parser refuses them; a handler
        // could still add two): the body says how long it is.
        (Some(_), Some(_)) => hint
            .exact()
            .map_or(BodyFraming::Chunked, BodyFraming::Length),
    }
}

/// Writes a response head: the status line, the response's headers except
/// the framing and connection headers, which are the loop's to state
/// (`framing`, and `connection: close` when `close`), and a `date` when the
/// response has none.
pub fn encode_response_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    backend: Option<&Fields>,
    framing: BodyFraming,
    close: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        status
            .canonical_reason()
            .unwrap_or("<unknown status code>")
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    let mut has_date = false;
    // The gateway's own fields, then the backend's that may pass.
    let own = headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    let passed = backend
        .into_iter()
        .flat_map(crate::trust::headers::outbound);
    for (name, value) in own.chain(passed) {
        let skip = name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"connection")
            // A response without a body keeps its Content-Length (a HEAD
            // answer states the GET's); one with a body gets its own.
            || (framing != BodyFraming::None && name.eq_ignore_ascii_case(b"content-length"));
        if skip {
            continue;
        }
        has_date |= name.eq_ignore_ascii_case(b"date");
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        BodyFraming::None => {}
        BodyFraming::Length(length) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        BodyFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    if !has_date {
        out.extend_from_slice(b"date: ");
        with_date(|date| out.extend_from_slice(date));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

thread_local! {
    /// The `date` value, formatted once a second per thread.
    static DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
}

/// Calls `f` with the current `date` header value (IMF-fixdate).
fn with_date(f: impl FnOnce(&[u8])) {
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    DATE.with_borrow_mut(|(cached, text)| {
        if *cached != second {
            let formatted = httpdate::fmt_http_date(now);
            if formatted.len() == text.len() {
                text.copy_from_slice(formatted.as_bytes());
                *cached = second;
            }
        }
        f(text);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn parse(bytes: &[u8]) -> (HeadRead, BytesMut) {
        let mut buf = BytesMut::from(bytes);
        (read_head(&mut buf, 16 * 1024), buf)
    }

    #[test]
    fn a_plain_get_is_served_and_leaves_what_follows() {
        let (read, rest) =
            parse(b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\n\r\nGET /next");
        let HeadRead::Simple(simple) = read else {
            panic!("expected a simple request, got {read:?}");
        };
        assert_eq!(simple.request.uri(), "/a?b=1");
        assert_eq!(simple.fields.get("x-api-key"), Some(&b"k"[..]));
        assert!(!simple.close);
        assert_eq!(&rest[..], b"GET /next");
    }

    #[test]
    fn partial_heads_wait_and_oversized_ones_go_to_hyper() {
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost").0,
            HeadRead::Partial
        ));
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: xxxxxxxx"[..]);
        assert!(matches!(read_head(&mut buf, 16), HeadRead::HandOff));
    }

    #[test]
    fn anything_with_a_body_or_out_of_the_ordinary_goes_to_hyper_untouched() {
        for head in [
            &b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"[..],
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
            b"PUT / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"GET / HTTP/1.0\r\n\r\n",
            b"CONNECT example.com:443 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
        ] {
            let (read, rest) = parse(head);
            assert!(matches!(read, HeadRead::HandOff), "{head:?} gave {read:?}");
            assert_eq!(&rest[..], head, "hyper gets every byte");
        }
    }

    #[test]
    fn connection_close_is_seen_in_any_case_and_list_position() {
        let (read, _) = parse(b"GET / HTTP/1.1\r\nConnection: keep-alive, CLOSE\r\n\r\n");
        assert!(matches!(
            read,
            HeadRead::Simple(SimpleRequest { close: true, .. })
        ));
        let (read, _) = parse(b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(matches!(
            read,
            HeadRead::Simple(SimpleRequest { close: false, .. })
        ));
    }

    #[test]
    fn framing_follows_status_method_and_length() {
        let none = HeaderMap::new();
        let exact = SizeHint::with_exact(5);
        let unknown = SizeHint::new();
        assert_eq!(
            response_framing(false, StatusCode::OK, &none, &exact),
            BodyFraming::Length(5)
        );
        assert_eq!(
            response_framing(false, StatusCode::OK, &none, &unknown),
            BodyFraming::Chunked
        );
        assert_eq!(
            response_framing(true, StatusCode::OK, &none, &exact),
            BodyFraming::None
        );
        assert_eq!(
            response_framing(false, StatusCode::NO_CONTENT, &none, &unknown),
            BodyFraming::None
        );
        let mut stated = HeaderMap::new();
        stated.insert(header::CONTENT_LENGTH, HeaderValue::from_static("12"));
        assert_eq!(
            response_framing(false, StatusCode::OK, &stated, &unknown),
            BodyFraming::Length(12)
        );
    }

    #[test]
    fn response_heads_state_their_own_framing_and_a_date() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("99"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        headers.insert("x-a", HeaderValue::from_static("1"));
        let mut out = Vec::new();
        encode_response_head(
            &mut out,
            StatusCode::OK,
            &headers,
            None,
            BodyFraming::Length(3),
            true,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(
            "HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 3\r\nconnection: close\r\ndate: "
        ));
        assert!(text.ends_with(" GMT\r\n\r\n"), "{text}");
        assert_eq!(text.matches("content-length").count(), 1);
    }

    #[test]
    fn chunk_sizes_are_hexadecimal() {
        let mut out = Vec::new();
        encode_chunk_size(&mut out, 0x1A2B);
        encode_chunk_size(&mut out, 0);
        assert_eq!(out, b"1A2B\r\n0\r\n");
    }
}
