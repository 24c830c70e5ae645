//! Property tests of the HTTP/1.1 codec toward the shards (`gateway::protocol::wire`)
//! against slow, plainly written references: a hand-written chunked encoder
//! for the chunked decoder, the RFC 9112 framing rules for the response head
//! parser, and httparse reading back what the request head encoder wrote.
//!
//! The decoding properties feed the codec its input in pieces split at
//! random points, because that is how bytes arrive from a socket.

use std::collections::BTreeMap;

use bytes::BytesMut;
use gateway::protocol::wire::{
    ChunkedDecoder, Decoded, Fields, RequestFraming, RequestHead, ResponseFraming, WireError,
    encode_chunk, encode_last_chunk, encode_request_head, parse_response_head,
};
use gateway::trust::headers::{Added, Inbound};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

// ---------------------------------------------------------------------------
// Shared strategies and helpers.

/// A header field name: any RFC 9110 token, in any case.
fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
}

/// A header field value: visible ASCII with inner spaces, no surrounding
/// whitespace (which is not part of a field value), possibly empty.
fn field_value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[!-~]", "[!-~][ !-~]{0,16}[!-~]"]
}

/// Bytes that follow a message on the connection (the next response, or
/// junk), possibly none.
fn suffix() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"HTTP/1.1 200 OK\r\n\r\n".to_vec()),
        vec(any::<u8>(), 1..16),
    ]
}

/// `wire` cut into pieces at the given points (sorted, duplicates allowed,
/// so some pieces are empty).
fn pieces(wire: &[u8], cuts: &[Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|cut| cut.index(wire.len() + 1)).collect();
    at.sort_unstable();
    let mut pieces = Vec::with_capacity(at.len() + 1);
    let mut start = 0;
    for end in at {
        pieces.push(wire[start..end].to_vec());
        start = end;
    }
    pieces.push(wire[start..].to_vec());
    pieces
}

/// A header map as name → values in order, to compare with a reference
/// that lists fields as text.
fn multimap(headers: &HeaderMap) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut map: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for (name, value) in headers {
        map.entry(name.as_str().to_owned())
            .or_default()
            .push(value.as_bytes().to_vec());
    }
    map
}

/// The same for fields as sent: names compared case-insensitively, values
/// in the order they were sent.
fn reference_multimap(fields: &[(String, String)]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut map: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for (name, value) in fields {
        map.entry(name.to_ascii_lowercase())
            .or_default()
            .push(value.as_bytes().to_vec());
    }
    map
}

// ---------------------------------------------------------------------------
// a. The chunked decoder against a hand-written chunked encoder.

/// One chunk-extension: `;name`, `;name=token` or `;name="quoted"`,
/// optionally with whitespace before the `;` (RFC 9112 allows BWS there).
#[derive(Debug, Clone)]
struct Extension {
    space_before: bool,
    name: String,
    value: Option<String>,
}

fn extension() -> impl Strategy<Value = Extension> {
    let value = prop_oneof![
        "[a-z0-9]{1,6}",
        // A quoted string may hold what would otherwise end the extension.
        "\"[a-z ;=,]{0,8}\"",
    ];
    (
        any::<bool>(),
        "[a-z][a-z0-9-]{0,6}",
        proptest::option::of(value),
    )
        .prop_map(|(space_before, name, value)| Extension {
            space_before,
            name,
            value,
        })
}

/// How one chunk-size line is spelled: leading zeros, the case of the hex
/// digits, and its extensions.
#[derive(Debug, Clone)]
struct SizeLine {
    zeros: usize,
    upper: bool,
    extensions: Vec<Extension>,
}

fn size_line() -> impl Strategy<Value = SizeLine> {
    (0_usize..3, any::<bool>(), vec(extension(), 0..3)).prop_map(|(zeros, upper, extensions)| {
        SizeLine {
            zeros,
            upper,
            extensions,
        }
    })
}

/// `len` bytes that run through every byte value (CR, LF and hex digits
/// included), starting at `seed`: large chunks without a large strategy.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 256) as u8))
        .collect()
}

/// A chunk's data: mostly small and random, sometimes a few kilobytes,
/// now and then larger than any read buffer.
fn chunk_data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => vec(any::<u8>(), 1..48),
        3 => (48_usize..5_000, any::<u8>()).prop_map(|(len, seed)| pattern(len, seed)),
        1 => (60_000_usize..150_000, any::<u8>()).prop_map(|(len, seed)| pattern(len, seed)),
    ]
}

/// A chunked body as the test builds it.
#[derive(Debug, Clone)]
struct ChunkedCase {
    chunks: Vec<(Vec<u8>, SizeLine)>,
    last: SizeLine,
    trailers: Vec<(String, String)>,
    suffix: Vec<u8>,
}

fn chunked_case() -> impl Strategy<Value = ChunkedCase> {
    (
        vec((chunk_data(), size_line()), 0..8),
        size_line(),
        prop_oneof![Just(Vec::new()), vec((token(), field_value()), 1..5)],
        suffix(),
    )
        .prop_map(|(chunks, last, trailers, suffix)| ChunkedCase {
            chunks,
            last,
            trailers,
            suffix,
        })
}

/// The reference encoder: RFC 9112 section 7.1, written out plainly.
fn encode_reference(case: &ChunkedCase) -> Vec<u8> {
    fn size_line(wire: &mut Vec<u8>, size: usize, line: &SizeLine) {
        let mut hex = format!("{size:x}");
        if line.upper {
            hex = hex.to_uppercase();
        }
        wire.extend_from_slice("0".repeat(line.zeros).as_bytes());
        wire.extend_from_slice(hex.as_bytes());
        for extension in &line.extensions {
            if extension.space_before {
                wire.push(b' ');
            }
            wire.push(b';');
            wire.extend_from_slice(extension.name.as_bytes());
            if let Some(value) = &extension.value {
                wire.push(b'=');
                wire.extend_from_slice(value.as_bytes());
            }
        }
        wire.extend_from_slice(b"\r\n");
    }
    let mut wire = Vec::new();
    for (data, line) in &case.chunks {
        size_line(&mut wire, data.len(), line);
        wire.extend_from_slice(data);
        wire.extend_from_slice(b"\r\n");
    }
    size_line(&mut wire, 0, &case.last);
    for (name, value) in &case.trailers {
        wire.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    wire.extend_from_slice(b"\r\n");
    wire
}

/// What decoding a chunked body gave.
#[derive(Debug)]
struct DecodedBody {
    body: Vec<u8>,
    trailers: Option<HeaderMap>,
    /// What was left after the end: the rest of the buffer and the pieces
    /// never fed.
    left: Vec<u8>,
}

/// Feeds `pieces` to a fresh decoder, one more piece only when it asks for
/// more, until it reports the end. Panics when the decoder breaks its own
/// contract: it asks for more after the whole body, reports data after the
/// trailers or an empty frame, or does not stay at its end.
fn decode_in_pieces(pieces: &[Vec<u8>]) -> Result<DecodedBody, WireError> {
    let mut decoder = ChunkedDecoder::default();
    let mut pieces = pieces.iter();
    let mut buf = BytesMut::from(&pieces.next().unwrap()[..]);
    let mut body = Vec::new();
    let mut trailers = None;
    loop {
        match decoder.decode(&mut buf)? {
            Decoded::Data(data) => {
                assert!(trailers.is_none(), "data after the trailers");
                assert!(!data.is_empty(), "an empty data frame");
                body.extend_from_slice(&data);
            }
            Decoded::Trailers(map) => {
                assert!(trailers.is_none(), "two trailer sections");
                assert!(!map.is_empty(), "an empty trailer section was reported");
                trailers = Some(map);
            }
            Decoded::End => break,
            Decoded::NeedMore => {
                let more = pieces
                    .next()
                    .expect("the decoder asked for more after the whole body");
                buf.extend_from_slice(more);
            }
        }
    }
    assert!(decoder.is_done());
    // The end is sticky and takes nothing more.
    let before = buf.clone();
    assert_eq!(decoder.decode(&mut buf), Ok(Decoded::End));
    assert_eq!(buf, before);
    let mut left = buf.to_vec();
    for piece in pieces {
        left.extend_from_slice(piece);
    }
    Ok(DecodedBody {
        body,
        trailers,
        left,
    })
}

/// The trailers a case should decode to, if any.
fn expected_trailers(fields: &[(String, String)]) -> Option<BTreeMap<String, Vec<Vec<u8>>>> {
    (!fields.is_empty()).then(|| reference_multimap(fields))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_chunked_body_decodes_to_what_was_encoded_however_it_arrives(
        case in chunked_case(),
        splits in vec(vec(any::<Index>(), 0..10), 1..4),
    ) {
        let body: Vec<u8> = case.chunks.iter().flat_map(|(data, _)| data.clone()).collect();
        let mut wire = encode_reference(&case);
        wire.extend_from_slice(&case.suffix);
        for cuts in &splits {
            let decoded = decode_in_pieces(&pieces(&wire, cuts)).unwrap();
            prop_assert!(decoded.body == body, "the body differs (cuts {:?})", cuts);
            prop_assert_eq!(
                decoded.trailers.as_ref().map(multimap),
                expected_trailers(&case.trailers)
            );
            prop_assert_eq!(&decoded.left, &case.suffix);
        }
    }

    #[test]
    fn what_encode_chunk_writes_decodes_back(
        chunks in vec(chunk_data(), 0..6),
        trailers in proptest::option::of(vec((token(), field_value()), 0..4)),
        cuts in vec(any::<Index>(), 0..6),
    ) {
        let trailer_map = trailers.as_ref().map(|fields| {
            let mut map = HeaderMap::new();
            for (name, value) in fields {
                map.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            map
        });
        let mut wire = Vec::new();
        for data in &chunks {
            encode_chunk(&mut wire, data);
        }
        encode_last_chunk(&mut wire, trailer_map.as_ref());

        // Byte for byte what the reference encoder writes for the same
        // chunks (upper-case hex, no extensions) and the map's fields.
        let plain = SizeLine { zeros: 0, upper: true, extensions: Vec::new() };
        let reference = encode_reference(&ChunkedCase {
            chunks: chunks.iter().map(|data| (data.clone(), plain.clone())).collect(),
            last: plain.clone(),
            trailers: trailer_map
                .iter()
                .flatten()
                .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
                .collect(),
            suffix: Vec::new(),
        });
        prop_assert!(wire == reference, "encode_chunk differs from the reference");

        let decoded = decode_in_pieces(&pieces(&wire, &cuts)).unwrap();
        prop_assert!(decoded.body == chunks.concat());
        let sent = trailer_map.as_ref().filter(|map| !map.is_empty()).map(multimap);
        prop_assert_eq!(decoded.trailers.as_ref().map(multimap), sent);
        prop_assert!(decoded.left.is_empty());
    }
}

/// A chunk-size line must have at least one hex digit (RFC 9112 section
/// 7.1: `chunk-size = 1*HEXDIG`). A line without one is a malformed body,
/// which the module promises to treat as an error rather than a guess.
#[test]
fn a_chunk_size_line_without_digits_is_an_error() {
    let cases = [
        &b"\r\n\r\n"[..],
        b";ext=1\r\n\r\n",
        // A backend that wrote one CRLF too many after a chunk's data: the
        // body would end after "abc", as if complete, instead of failing.
        b"3\r\nabc\r\n\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ];
    let outcomes: Vec<(String, Result<Decoded, WireError>)> = cases
        .iter()
        .map(|wire| {
            let mut decoder = ChunkedDecoder::default();
            let mut buf = BytesMut::from(*wire);
            let outcome = loop {
                match decoder.decode(&mut buf) {
                    Ok(Decoded::Data(_)) => {}
                    other => break other,
                }
            };
            (String::from_utf8_lossy(wire).into_owned(), outcome)
        })
        .collect();
    assert!(
        outcomes
            .iter()
            .all(|(_, outcome)| *outcome == Err(WireError::BadChunk)),
        "{outcomes:#?}"
    );
}

// ---------------------------------------------------------------------------
// b. The response head parser against the RFC 9112 section 6.3 rules.

/// How a generated response head delimits its body.
#[derive(Debug, Clone)]
enum Framing {
    /// Neither `Content-Length` nor `Transfer-Encoding`.
    Neither,
    /// `Content-Length`, said `fields` times, each field listing the value
    /// `per_field` times (`5, 5`).
    Length {
        length: u64,
        fields: usize,
        per_field: usize,
    },
    /// Two `Content-Length` fields that disagree.
    Conflict(u64, u64),
    /// `Transfer-Encoding` fields with these codings each, perhaps with a
    /// `Content-Length` too.
    Coded {
        fields: Vec<Vec<&'static str>>,
        length: Option<u64>,
    },
}

fn framing() -> impl Strategy<Value = Framing> {
    let length = prop_oneof![0_u64..100_000, Just(u64::MAX)];
    let coding = prop_oneof![
        Just("chunked"),
        Just("Chunked"),
        Just("gzip"),
        Just("deflate"),
        Just("identity"),
        // An empty list element, which recipients ignore (RFC 9110
        // section 5.6.1).
        Just(""),
    ];
    prop_oneof![
        Just(Framing::Neither),
        (length.clone(), 1_usize..3, 1_usize..3).prop_map(|(length, fields, per_field)| {
            Framing::Length {
                length,
                fields,
                per_field,
            }
        }),
        (0_u64..1000, 0_u64..1000)
            .prop_filter("different lengths", |(a, b)| a != b)
            .prop_map(|(a, b)| Framing::Conflict(a, b)),
        (vec(vec(coding, 1..3), 1..3), proptest::option::of(length))
            .prop_map(|(fields, length)| Framing::Coded { fields, length }),
    ]
}

impl Framing {
    /// The fields that say it, spelled in varying case.
    fn fields(&self, upper: bool) -> Vec<(String, String)> {
        let (length_name, coding_name) = if upper {
            ("Content-Length", "Transfer-Encoding")
        } else {
            ("content-length", "transfer-encoding")
        };
        let lengths = |length: u64, fields: usize, per_field: usize| {
            let value = vec![length.to_string(); per_field].join(", ");
            vec![(length_name.to_owned(), value); fields]
        };
        match self {
            Framing::Neither => Vec::new(),
            Framing::Length {
                length,
                fields,
                per_field,
            } => lengths(*length, *fields, *per_field),
            Framing::Conflict(a, b) => vec![
                (length_name.to_owned(), a.to_string()),
                (length_name.to_owned(), b.to_string()),
            ],
            Framing::Coded { fields, length } => {
                let mut out: Vec<(String, String)> = fields
                    .iter()
                    // Trimmed: whitespace around a value is not part of it.
                    .map(|codings| (coding_name.to_owned(), codings.join(", ").trim().to_owned()))
                    .collect();
                if let Some(length) = length {
                    out.push((length_name.to_owned(), length.to_string()));
                }
                out
            }
        }
    }
}

/// A generated response head.
#[derive(Debug, Clone)]
struct HeadCase {
    http_10: bool,
    status: u16,
    reason: String,
    method: Method,
    others: Vec<(String, String)>,
    framing: Framing,
    connection: Option<&'static str>,
    upper: bool,
    /// Where among the other fields each framing field goes.
    positions: Vec<Index>,
    /// Whitespace around each value on the wire (not part of the value).
    padding: (&'static str, &'static str),
    suffix: Vec<u8>,
}

/// Names of other fields, in the cases the codec must keep as sent.
fn other_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Server".to_owned()),
        Just("set-cookie".to_owned()),
        Just("Content-Type".to_owned()),
        Just("trailer".to_owned()),
        "[xX]-[A-Za-z0-9!#$%&'*+.^_`|~-]{1,10}",
    ]
}

fn connection() -> impl Strategy<Value = Option<&'static str>> {
    proptest::option::of(prop_oneof![
        Just("close"),
        Just("Close"),
        Just("keep-alive"),
        Just("Keep-Alive"),
        Just("upgrade, close"),
        Just(", close"),
        Just("keep-alive,,"),
        Just("x-hop"),
    ])
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just(Method::GET),
        Just(Method::HEAD),
        Just(Method::POST),
        Just(Method::DELETE),
    ]
}

fn padding() -> impl Strategy<Value = (&'static str, &'static str)> {
    prop_oneof![
        Just(("", "")),
        Just((" ", "")),
        Just(("  ", " ")),
        Just(("\t", "\t ")),
    ]
}

// `prop_compose!` names each part once beside its strategy, where a tuple
// of strategies mapped into the struct would list every name twice.
prop_compose! {
    fn head_case()(
        http_10 in any::<bool>(),
        status in 200_u16..600,
        reason in "[A-Za-z ]{0,12}",
        method in method(),
        others in vec((other_name(), field_value()), 0..8),
        framing in framing(),
        connection in connection(),
        upper in any::<bool>(),
        positions in vec(any::<Index>(), 6),
        padding in padding(),
        suffix in suffix(),
    ) -> HeadCase {
        HeadCase {
            http_10,
            status,
            reason,
            method,
            others,
            framing,
            connection,
            upper,
            positions,
            padding,
            suffix,
        }
    }
}

impl HeadCase {
    /// The head's fields in order: the others, with the framing and
    /// `Connection` fields slotted in at the generated positions.
    fn fields(&self) -> Vec<(String, String)> {
        let mut fields = self.others.clone();
        let mut special = self.framing.fields(self.upper);
        if let Some(connection) = self.connection {
            special.push(("Connection".to_owned(), connection.to_owned()));
        }
        for (field, position) in special.into_iter().zip(self.positions.iter().cycle()) {
            let at = position.index(fields.len() + 1);
            fields.insert(at, field);
        }
        fields
    }

    /// The head as bytes.
    fn wire(&self) -> Vec<u8> {
        let version = if self.http_10 { "1.0" } else { "1.1" };
        let mut wire = format!("HTTP/{version} {} {}\r\n", self.status, self.reason).into_bytes();
        let (before, after) = self.padding;
        for (name, value) in self.fields() {
            wire.extend_from_slice(format!("{name}:{before}{value}{after}\r\n").as_bytes());
        }
        wire.extend_from_slice(b"\r\n");
        wire
    }
}

/// The comma-separated list elements of every field named `name`.
fn list(fields: &[(String, String)], name: &str) -> Vec<String> {
    fields
        .iter()
        .filter(|(field, _)| field.eq_ignore_ascii_case(name))
        .flat_map(|(_, value)| value.split(','))
        .map(|element| element.trim().to_owned())
        .filter(|element| !element.is_empty())
        .collect()
}

fn has(fields: &[(String, String)], name: &str) -> bool {
    fields
        .iter()
        .any(|(field, _)| field.eq_ignore_ascii_case(name))
}

/// RFC 9112 section 6.3, for a response, written out rule by rule.
fn reference_framing(
    method: &Method,
    status: u16,
    fields: &[(String, String)],
) -> Result<ResponseFraming, WireError> {
    // Rule 1: a response to HEAD, a 1xx, 204 or 304 has no body.
    if *method == Method::HEAD || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(ResponseFraming::Length(0));
    }
    // Rules 3 and 4: Transfer-Encoding wins; chunked last frames the body,
    // anything else runs until the connection closes.
    if has(fields, "transfer-encoding") {
        let codings = list(fields, "transfer-encoding");
        let chunked = codings
            .last()
            .is_some_and(|last| last.eq_ignore_ascii_case("chunked"));
        return Ok(if chunked {
            ResponseFraming::Chunked
        } else {
            ResponseFraming::UntilClose
        });
    }
    // Rules 5 and 6: every Content-Length element must be the same number.
    let lengths = list(fields, "content-length");
    let mut length = None;
    for element in &lengths {
        let parsed: u64 = element.parse().map_err(|_| WireError::BadContentLength)?;
        if length.is_some_and(|seen| seen != parsed) {
            return Err(WireError::BadContentLength);
        }
        length = Some(parsed);
    }
    // Rule 8: otherwise, until the connection closes.
    Ok(length.map_or(ResponseFraming::UntilClose, ResponseFraming::Length))
}

/// Whether the connection may carry another exchange: the version's
/// default, `Connection` tokens, a body that does not end at a close, not
/// both lengths, and no transfer coding in HTTP/1.0 (which has none: RFC
/// 9112 section 6.1 says to close after such a response).
fn reference_keep_alive(
    http_10: bool,
    fields: &[(String, String)],
    framing: ResponseFraming,
) -> bool {
    let tokens = list(fields, "connection");
    let says = |token: &str| tokens.iter().any(|t| t.eq_ignore_ascii_case(token));
    let by_version = if http_10 {
        says("keep-alive") && !has(fields, "transfer-encoding")
    } else {
        !says("close")
    };
    by_version
        && framing != ResponseFraming::UntilClose
        && !(has(fields, "transfer-encoding") && has(fields, "content-length"))
}

/// The headers the parser should hand on: every field as sent, except a
/// `Content-Length` beside a `Transfer-Encoding`.
fn reference_headers(fields: &[(String, String)]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let coded = has(fields, "transfer-encoding");
    let kept: Vec<(String, String)> = fields
        .iter()
        .filter(|(name, _)| !(coded && name.eq_ignore_ascii_case("content-length")))
        .cloned()
        .collect();
    reference_multimap(&kept)
}

/// An informational response to put before the real one.
fn informational() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()),
        Just(b"HTTP/1.1 102 Processing\r\n\r\n".to_vec()),
        Just(
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nLink: </a.js>\r\n\r\n"
                .to_vec()
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_response_head_parses_as_the_rfc_says(case in head_case(), split in any::<Index>()) {
        let head = case.wire();
        let fields = case.fields();

        // Any proper prefix is "not yet", and is left alone.
        let prefix = &head[..split.index(head.len())];
        let mut buf = BytesMut::from(prefix);
        prop_assert!(matches!(parse_response_head(&mut buf, &case.method), Ok(None)));
        prop_assert_eq!(&buf[..], prefix);

        let mut buf = BytesMut::from(&head[..]);
        buf.extend_from_slice(&case.suffix);
        let parsed = parse_response_head(&mut buf, &case.method);
        match reference_framing(&case.method, case.status, &fields) {
            Err(expected) => {
                prop_assert_eq!(parsed.unwrap_err(), expected);
            }
            Ok(framing) => {
                let parsed = parsed.unwrap().expect("a whole head");
                prop_assert_eq!(parsed.status, StatusCode::from_u16(case.status).unwrap());
                let version = if case.http_10 { Version::HTTP_10 } else { Version::HTTP_11 };
                prop_assert_eq!(parsed.version, version);
                prop_assert_eq!(parsed.framing, framing);
                prop_assert_eq!(
                    parsed.keep_alive,
                    reference_keep_alive(case.http_10, &fields, framing)
                );
                prop_assert_eq!(multimap(&parsed.fields.to_header_map(parsed.fields.iter()).unwrap()), reference_headers(&fields));
                // Exactly the bytes after the head stay.
                prop_assert_eq!(&buf[..], &case.suffix[..]);
            }
        }
    }

    #[test]
    fn informational_responses_before_the_head_are_skipped_however_they_arrive(
        case in head_case(),
        before in vec(informational(), 1..3),
        cuts in vec(any::<Index>(), 0..8),
    ) {
        let fields = case.fields();
        let Ok(framing) = reference_framing(&case.method, case.status, &fields) else {
            return Ok(());
        };
        let mut wire = before.concat();
        wire.extend_from_slice(&case.wire());
        wire.extend_from_slice(&case.suffix);
        // Fed as a socket would: parse what is there, read more on "not yet".
        let mut pieces = pieces(&wire, &cuts).into_iter();
        let mut buf = BytesMut::new();
        let parsed = loop {
            if let Some(head) = parse_response_head(&mut buf, &case.method).unwrap() {
                break head;
            }
            buf.extend_from_slice(&pieces.next().expect("the whole head was given"));
        };
        prop_assert_eq!(parsed.status.as_u16(), case.status);
        prop_assert_eq!(parsed.framing, framing);
        prop_assert_eq!(multimap(&parsed.fields.to_header_map(parsed.fields.iter()).unwrap()), reference_headers(&fields));
        let mut left = buf.to_vec();
        left.extend(pieces.flatten());
        prop_assert_eq!(left, case.suffix);
    }
}

/// RFC 9112 section 6.1: a client that receives an HTTP/1.0 message with
/// `Transfer-Encoding` "MUST treat the message as if the framing is faulty
/// ... and close the connection after processing the message".
#[test]
fn an_http_1_0_response_with_transfer_encoding_is_not_kept_alive() {
    let mut buf = BytesMut::from(
        "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    let head = parse_response_head(&mut buf, &Method::GET)
        .unwrap()
        .unwrap();
    assert_eq!(head.framing, ResponseFraming::Chunked);
    assert!(!head.keep_alive);
}

// ---------------------------------------------------------------------------
// c. The request head encoder, read back with httparse.

/// How the request's body is framed, as the proxy would call the encoder.
#[derive(Debug, Clone)]
enum BodyFraming {
    /// No body, and no length said (a GET).
    None,
    /// The gateway adds `Content-Length` (a buffered body).
    Added(u64),
    /// The client's `Content-Length` is among the headers.
    InHeaders(u64),
    /// Chunked, with the proxy's `Transfer-Encoding: chunked` among the
    /// headers.
    ChunkedInHeaders,
    /// Chunked, and the encoder says so.
    ChunkedAdded,
}

/// A generated request head.
#[derive(Debug, Clone)]
struct RequestCase {
    method: Method,
    target: String,
    fields: Vec<(&'static str, String)>,
    host: Option<String>,
    shard: Option<String>,
    /// What the gateway adds: `x-forwarded-host`, `x-forwarded-for` and
    /// `x-shuffle-tenant`.
    added: [Option<String>; 3],
    body: BodyFraming,
}

fn request_case() -> impl Strategy<Value = RequestCase> {
    let method = prop_oneof![
        Just(Method::GET),
        Just(Method::HEAD),
        Just(Method::POST),
        Just(Method::PUT),
        Just(Method::PATCH),
        Just(Method::DELETE),
        Just(Method::OPTIONS),
        "[A-Z][A-Z_-]{0,9}".prop_map(|name| Method::from_bytes(name.as_bytes()).unwrap()),
    ];
    let target = "/[A-Za-z0-9._~%!$&'()*+,;=:@/-]{0,24}(\\?[A-Za-z0-9=&%/?._-]{0,16})?";
    // Stale values of what the gateway sets itself (`Host`,
    // `x-forwarded-host`, `x-shuffle-tenant`, `x-shuffle-shard`) never go
    // out beside its own; the client's `x-forwarded-for` goes before the
    // gateway's.
    let name = prop_oneof![
        Just("host"),
        Just("x-shuffle-shard"),
        Just("x-shuffle-tenant"),
        Just("x-forwarded-for"),
        Just("x-forwarded-host"),
        Just("accept"),
        Just("content-type"),
        Just("x-custom"),
        Just("x-other"),
    ];
    let body = prop_oneof![
        Just(BodyFraming::None),
        prop_oneof![0_u64..100_000, Just(u64::MAX)].prop_map(BodyFraming::Added),
        (0_u64..100_000).prop_map(BodyFraming::InHeaders),
        Just(BodyFraming::ChunkedInHeaders),
        Just(BodyFraming::ChunkedAdded),
    ];
    (
        method,
        target,
        vec((name, field_value()), 0..10),
        proptest::option::of("[a-z0-9.-]{1,16}(:[0-9]{1,5})?"),
        proptest::option::of("s[0-9]{1,3}"),
        [
            proptest::option::of("[a-z0-9.-]{1,16}"),
            proptest::option::of("10\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}"),
            proptest::option::of("[a-z0-9-]{1,12}"),
        ],
        body,
    )
        .prop_map(
            |(method, target, fields, host, shard, added, body)| RequestCase {
                method,
                target,
                fields,
                host,
                shard,
                added,
                body,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_request_head_reads_back_as_what_was_asked(case in request_case()) {
        let mut headers = HeaderMap::new();
        for (name, value) in &case.fields {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        let (framing, add_length) = match case.body {
            BodyFraming::None => (RequestFraming::Length, None),
            BodyFraming::Added(length) => (RequestFraming::Length, Some(length)),
            BodyFraming::InHeaders(length) => {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
                (RequestFraming::Length, None)
            }
            BodyFraming::ChunkedInHeaders => {
                headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
                (RequestFraming::Chunked, None)
            }
            BodyFraming::ChunkedAdded => (RequestFraming::Chunked, None),
        };
        let host = case.host.as_deref().map(|host| HeaderValue::from_str(host).unwrap());
        let shard = case.shard.as_deref().map(|shard| HeaderValue::from_str(shard).unwrap());
        let [forwarded_host, forwarded_for, tenant] = case
            .added
            .clone()
            .map(|value| value.map(|value| HeaderValue::from_str(&value).unwrap()));
        let fields = Fields::from_header_map(&headers);
        let head = RequestHead {
            method: &case.method,
            target: &case.target,
            fields: &fields,
            inbound: &Inbound::everything(),
            stated: None,
            added: Added {
                forwarded_host: forwarded_host.as_ref().map(HeaderValue::as_bytes),
                forwarded_for: forwarded_for.as_ref(),
                tenant: tenant.as_ref(),
                grpc_timeout: None,
                request_id: None,
                traceparent: None,
            },
            host: host.as_ref(),
            shard: shard.as_ref(),
        };
        let mut out = Vec::new();
        encode_request_head(&mut out, &head, framing, add_length);

        let mut storage = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut storage);
        let used = request.parse(&out);
        prop_assert_eq!(used, Ok(httparse::Status::Complete(out.len())));
        prop_assert_eq!(request.method, Some(case.method.as_str()));
        prop_assert_eq!(request.path, Some(case.target.as_str()));
        prop_assert_eq!(request.version, Some(1));
        let sent: Vec<(String, Vec<u8>)> = request
            .headers
            .iter()
            .map(|field| (field.name.to_owned(), field.value.to_vec()))
            .collect();

        // The reference: Host, the map's own fields in its order (without
        // those the gateway sets itself), the gateway's additions,
        // x-shuffle-shard, then the framing the encoder adds.
        const GATEWAYS: [&str; 4] =
            ["host", "x-forwarded-host", "x-shuffle-tenant", "x-shuffle-shard"];
        let mut expected: Vec<(String, Vec<u8>)> = Vec::new();
        if let Some(host) = &case.host {
            expected.push(("host".to_owned(), host.clone().into_bytes()));
        }
        for (name, value) in &headers {
            if !GATEWAYS.contains(&name.as_str()) {
                expected.push((name.to_string(), value.as_bytes().to_vec()));
            }
        }
        for (name, value) in ["x-forwarded-host", "x-forwarded-for", "x-shuffle-tenant"]
            .into_iter()
            .zip(&case.added)
        {
            if let Some(value) = value {
                expected.push((name.to_owned(), value.clone().into_bytes()));
            }
        }
        if let Some(shard) = &case.shard {
            expected.push(("x-shuffle-shard".to_owned(), shard.clone().into_bytes()));
        }
        if let Some(length) = add_length {
            expected.push(("content-length".to_owned(), length.to_string().into_bytes()));
        }
        if matches!(case.body, BodyFraming::ChunkedAdded) {
            expected.push(("transfer-encoding".to_owned(), b"chunked".to_vec()));
        }
        prop_assert_eq!(&sent, &expected);

        // And the properties a backend relies on, stated directly.
        let count = |name: &str| {
            sent.iter().filter(|(field, _)| field.eq_ignore_ascii_case(name)).count()
        };
        prop_assert_eq!(count("host"), usize::from(case.host.is_some()));
        if case.host.is_some() {
            prop_assert_eq!(sent[0].0.as_str(), "host");
        }
        prop_assert_eq!(count("x-shuffle-shard"), usize::from(case.shard.is_some()));
        prop_assert_eq!(count("x-forwarded-host"), usize::from(case.added[0].is_some()));
        prop_assert_eq!(count("x-shuffle-tenant"), usize::from(case.added[2].is_some()));
        let (lengths, codings) = (count("content-length"), count("transfer-encoding"));
        match case.body {
            BodyFraming::None => prop_assert_eq!((lengths, codings), (0, 0)),
            BodyFraming::Added(_) | BodyFraming::InHeaders(_) => {
                prop_assert_eq!((lengths, codings), (1, 0));
            }
            BodyFraming::ChunkedInHeaders | BodyFraming::ChunkedAdded => {
                prop_assert_eq!((lengths, codings), (0, 1));
                let coding = sent.iter().find(|(name, _)| name == "transfer-encoding").unwrap();
                prop_assert_eq!(&coding.1[..], b"chunked");
            }
        }
    }
}
