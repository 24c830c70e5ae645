//! The fuzz targets: every parser of untrusted input, fed its corpus, then
//! mutations of it and arbitrary bytes, must return a value or a typed
//! error and never panic.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Cases per target; CI's default keeps the whole suite near a minute.
fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// Every file of a target's corpus.
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .unwrap_or_else(|e| panic!("fuzz corpus for {target} missing: {e}"))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    let files: Vec<Vec<u8>> = entries.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!files.is_empty(), "the {target} corpus is empty");
    files
}

/// One edit to an input.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Duplicate(usize, usize),
    Splice(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that matter to the formats being fuzzed, plus anything at all.
    let interesting = prop_oneof![
        Just(b'\n'),
        Just(b'\t'),
        Just(b'='),
        Just(b'"'),
        Just(b'['),
        Just(b']'),
        Just(b','),
        Just(b':'),
        Just(b'.'),
        Just(b'0'),
        Just(0u8),
        Just(0xff),
        any::<u8>(),
    ];
    prop_oneof![
        (any::<usize>(), interesting).prop_map(|(at, byte)| Edit::Flip(at, byte)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(at, bytes)| Edit::Insert(at, bytes)),
        (any::<usize>(), 1usize..32).prop_map(|(at, len)| Edit::Delete(at, len)),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Edit::Duplicate(at, len)),
        (any::<usize>(), any::<usize>()).prop_map(|(at, from)| Edit::Splice(at, from)),
    ]
}

fn apply(mut data: Vec<u8>, edits: &[Edit], other: &[u8]) -> Vec<u8> {
    for edit in edits {
        let len = data.len();
        match edit {
            Edit::Flip(at, byte) if len > 0 => data[at % len] = *byte,
            Edit::Insert(at, bytes) => {
                let at = at % (len + 1);
                data.splice(at..at, bytes.iter().copied());
            }
            Edit::Delete(at, n) if len > 0 => {
                let at = at % len;
                data.drain(at..(at + n).min(len));
            }
            Edit::Duplicate(at, n) if len > 0 => {
                let at = at % len;
                let piece: Vec<u8> = data[at..(at + n).min(len)].to_vec();
                data.splice(at..at, piece);
            }
            Edit::Splice(at, from) if !other.is_empty() => {
                let at = at % (len + 1);
                let from = from % other.len();
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    data
}

/// One named corpus file, as text.
fn seed(target: &str, name: &str) -> String {
    std::fs::read_to_string(corpus_dir(target).join(name)).unwrap()
}

/// The corpus, its mutations and arbitrary bytes.
fn inputs(target: &str) -> BoxedStrategy<Vec<u8>> {
    let seeds = corpus(target);
    let mutated = (
        proptest::sample::select(seeds.clone()),
        proptest::sample::select(seeds),
        proptest::collection::vec(edit(), 1..8),
    )
        .prop_map(|(seed, other, edits)| apply(seed, &edits, &other));
    prop_oneof![4 => mutated, 1 => proptest::collection::vec(any::<u8>(), 0..512)].boxed()
}

/// Replays the corpus, then fuzzes, calling `check` on every input.
fn fuzz(target: &str, check: impl Fn(&[u8])) {
    for seed in corpus(target) {
        check(&seed);
    }
    fuzz_with(target, inputs(target), check);
}

/// Calls `check` on `cases()` inputs drawn from `strategy`: [`inputs`] for
/// every target, and a generator of its own for a target whose interesting
/// inputs are too structured for byte mutations to reach often.
fn fuzz_with(target: &str, strategy: BoxedStrategy<Vec<u8>>, check: impl Fn(&[u8])) {
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |input| {
        check(&input);
        Ok(())
    });
    if let Err(failure) = result {
        panic!(
            "{target}: {failure}\nAdd the minimal input to fuzz/corpus/{target}/ as a regression seed once fixed."
        );
    }
}

/// A directory with a valid placement key, for configuration targets.
fn key_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("placement.key"),
        b"fuzzing key, 32 bytes long......",
    )
    .unwrap();
    dir
}

#[test]
fn gateway_configuration() {
    let dir = key_dir();
    let path = dir.path().join("gateway.toml");
    fuzz("config", |input| {
        let text = String::from_utf8_lossy(input);
        let _ = gateway::GatewayConfig::parse(&path, &text);
    });
}

#[test]
fn gateway_tenants_file() {
    let dir = key_dir();
    let config = gateway::GatewayConfig::parse(
        &dir.path().join("gateway.toml"),
        &seed("config", "minimal.toml"),
    )
    .expect("the minimal corpus configuration is valid");
    let path = dir.path().join("tenants.toml");
    fuzz("tenants", |input| {
        let text = String::from_utf8_lossy(input);
        if let Ok(tenants) = gateway::tenants::load::from_toml(&path, &text, &config) {
            // Whatever was accepted must also be placeable.
            let topology = gateway::cell::Topology::build(&config).unwrap();
            for tenant in tenants.iter() {
                let _ = topology.route(tenant);
            }
        }
    });
}

#[test]
fn credentials() {
    let dir = key_dir();
    let config = gateway::GatewayConfig::parse(
        &dir.path().join("gateway.toml"),
        &seed("config", "full.toml"),
    )
    .expect("the full corpus configuration is valid");
    let tenants = gateway::tenants::load::from_toml(
        &dir.path().join("tenants.toml"),
        "[[tenants]]\nid = \"acme\"\napi_key_sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n",
        &config,
    )
    .unwrap();
    std::fs::write(dir.path().join("jwt.key"), [7u8; 32]).unwrap();
    let jwt = gateway::config::JwtSettings {
        algorithm: jsonwebtoken_algorithm(),
        key_file: dir.path().join("jwt.key"),
        issuer: Some("fuzz".into()),
        audience: None,
        tenant_claim: "sub".into(),
    };
    let authenticator = gateway::trust::authenticate::Authenticator::new(Some(&jwt)).unwrap();
    fuzz("credentials", |input| {
        for name in ["authorization", "x-api-key"] {
            let Ok(value) = http::HeaderValue::from_bytes(input) else {
                return;
            };
            let mut headers = http::HeaderMap::new();
            headers.insert(http::HeaderName::from_static(name), value);
            for jwt_enabled in [false, true] {
                if let Ok(credential) =
                    gateway::trust::credential::extract_from_map(&headers, jwt_enabled)
                {
                    let result = authenticator.authenticate(&credential, &tenants);
                    // Only the one real key may authenticate, and nothing
                    // fuzzed can be that key's preimage by accident.
                    assert!(result.is_err() || input.ends_with(b"test"));
                }
            }
        }
    });
}

fn jsonwebtoken_algorithm() -> gateway::config::JwtAlgorithm {
    gateway::config::JwtAlgorithm::HS256
}

#[test]
fn inbound_header_filter() {
    fuzz("headers", |input| {
        let mut headers = http::HeaderMap::new();
        for line in input.split(|&b| b == b'\n') {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(line[..colon].trim_ascii()),
                http::HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
            ) else {
                continue;
            };
            headers.append(name, value);
        }
        let tenant = http::HeaderValue::from_static("tenant-a");
        let host = http::HeaderValue::from_static("s0:9100");
        let shard = http::HeaderValue::from_static("s0");
        let fields = gateway::syntax::fields::Fields::from_header_map(&headers);
        let inbound = gateway::trust::headers::Inbound::new(
            &fields,
            gateway::config::ForwardedFor::Append,
            false,
        );
        let head = gateway::protocol::wire::RequestHead {
            method: &http::Method::GET,
            target: "/",
            fields: &fields,
            inbound: &inbound,
            stated: None,
            added: gateway::trust::headers::Added {
                forwarded_host: gateway::trust::headers::client_host(&fields),
                forwarded_for: None,
                tenant: Some(&tenant),
                grpc_timeout: None,
                request_id: None,
                traceparent: None,
            },
            host: Some(&host),
            shard: Some(&shard),
        };
        let mut wire = Vec::new();
        gateway::protocol::wire::encode_request_head(
            &mut wire,
            &head,
            gateway::protocol::wire::RequestFraming::Length,
            None,
        );
        // The invariant, on what a backend receives: nothing in the
        // gateway's namespace but the tenant and shard the gateway set (once
        // each), one Host (the shard's), and no credential or hop-by-hop
        // header.
        let text = String::from_utf8_lossy(&wire);
        let fields: Vec<(String, &str)> = text
            .split("\r\n")
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.to_ascii_lowercase(), value.trim()))
            .collect();
        for (name, _) in &fields {
            assert!(
                !name.replace('_', "-").starts_with("x-shuffle-")
                    || name == "x-shuffle-tenant"
                    || name == "x-shuffle-shard",
                "{name} survived"
            );
            assert!(
                ![
                    "authorization",
                    "x-api-key",
                    "connection",
                    "transfer-encoding",
                    "te",
                    "upgrade"
                ]
                .contains(&name.as_str()),
                "{name} survived"
            );
        }
        let values = |wanted: &str| -> Vec<&str> {
            fields
                .iter()
                .filter(|(name, _)| name == wanted)
                .map(|(_, value)| *value)
                .collect()
        };
        assert_eq!(values("x-shuffle-tenant"), ["tenant-a"]);
        assert_eq!(values("x-shuffle-shard"), ["s0"]);
        assert_eq!(values("host"), ["s0:9100"]);
    });
}

#[test]
fn analyser_tenants_file() {
    fuzz("population", |input| {
        let text = String::from_utf8_lossy(input);
        if let Ok(population) = analysis::Population::parse(&text) {
            assert!(!population.is_empty());
            if let Some(weights) = population.weights() {
                assert!(weights.iter().all(|w| w.is_finite() && *w > 0.0));
            }
        }
        let _ = drill::credentials::parse(&text);
    });
}

#[test]
fn zone_specs_and_hex_keys() {
    fuzz("zone_spec", |input| {
        let text = String::from_utf8_lossy(input);
        // Building a fleet of millions of shards is legitimate but slow in a
        // debug build; the size limit itself has its own unit test, so the
        // fuzzer keeps to specs whose counts it can afford.
        let affordable = text
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|digits| digits.parse::<u64>().ok())
            .sum::<u64>()
            <= 100_000;
        if affordable && let Ok(fleet) = placement::Fleet::from_zone_spec(&text) {
            assert!(!fleet.is_empty());
        }
        let _ = placement::PlacementKey::from_hex(&text);
    });
}

/// Feeds `buf` to a chunked decoder until it ends, fails or asks for more,
/// and checks that every step made progress (no input can make it spin).
fn decode_chunked(buf: &mut bytes::BytesMut) {
    use gateway::protocol::wire::{ChunkedDecoder, Decoded};
    let mut decoder = ChunkedDecoder::default();
    // Every step but the last takes at least one byte or ends the body.
    for _ in 0..=buf.len() + 2 {
        match decoder.decode(buf) {
            Ok(Decoded::Data(data)) => assert!(!data.is_empty(), "an empty data frame"),
            Ok(Decoded::Trailers(_)) => {}
            Ok(Decoded::End | Decoded::NeedMore) | Err(_) => return,
        }
    }
    panic!("the chunked decoder stopped making progress");
}

#[test]
fn client_request_heads() {
    fuzz("requests", |input| {
        let mut buf = bytes::BytesMut::from(input);
        match gateway::protocol::client_wire::read_head(&mut buf, 16 * 1024) {
            gateway::protocol::client_wire::HeadRead::Simple(simple) => {
                // Exactly the head was taken; what follows stays for the
                // next request, byte for byte.
                assert!(buf.len() < input.len(), "a head was parsed from nothing");
                assert!(input.ends_with(&buf));
                assert_eq!(simple.request.version(), http::Version::HTTP_11);
                for name in ["transfer-encoding", "expect", "upgrade"] {
                    assert!(simple.fields.get(name).is_none(), "{name} was served");
                }
            }
            // hyper gets every byte the loop read, untouched.
            gateway::protocol::client_wire::HeadRead::HandOff
            | gateway::protocol::client_wire::HeadRead::Partial => {
                assert_eq!(&buf[..], input);
            }
        }
    });
}

/// A header name a client might write for `base`: each letter in either
/// case (by the bits of `upper`), each `-` perhaps as `_` (by `under`).
fn respelled(base: &str, upper: u64, under: u64) -> String {
    base.chars()
        .enumerate()
        .map(|(i, c)| match c {
            '-' if under >> (i % 64) & 1 == 1 => '_',
            c if upper >> (i % 64) & 1 == 1 => c.to_ascii_uppercase(),
            c => c,
        })
        .collect()
}

/// Request heads as a careless or hostile client writes them: the names
/// the gateway cares about in any case and with `_` for `-`, repeated,
/// with odd spacing and tabs around the colon and values, bare LFs for
/// CRLFs, obs-fold continuation lines, and perhaps bytes after the head.
fn request_heads() -> BoxedStrategy<Vec<u8>> {
    const NAMES: [&str; 20] = [
        "host",
        "authorization",
        "x-api-key",
        "x-shuffle-tenant",
        "x-shuffle-shard",
        "x-shuffle-anything",
        "x-forwarded-host",
        "x-forwarded-for",
        "x-real-ip",
        "forwarded",
        "x-original-url",
        "x-rewrite-url",
        "connection",
        "keep-alive",
        "te",
        "proxy-authorization",
        "content-length",
        "idempotency-key",
        "x-secret",
        "accept",
    ];
    // Weighted by repetition: mostly what httparse serves, now and then
    // what it refuses (space before the colon, obs-fold), which goes to
    // hyper instead. (Byte mutations of the corpus make the rest of the
    // malformed heads.)
    const SEPARATORS: [&str; 12] = [
        ": ", ": ", ": ", ": ", ": ", ":", ":", ":\t", ":  \t ", ":\t ", ":\t\t", " :",
    ];
    const VALUES: [&[u8]; 12] = [
        b"tenant-b",
        b"Bearer k",
        b"0",
        b"close",
        b"keep-alive, X-Secret , x_shuffle_tenant",
        b"x-shuffle-shard",
        b"",
        b" spaced ",
        b"\ttabbed\t",
        b"10.0.0.1, 10.0.0.2",
        b"/admin",
        b"obs-text \xe9\xff",
    ];
    const ENDINGS: [&str; 4] = ["\r\n", "\r\n", "\r\n", "\n"];
    // What may follow the head: nothing, a pipelined request, a body.
    const AFTER: [&[u8]; 3] = [b"", b"GET /smuggled HTTP/1.1\r\n\r\n", b"0\r\n\r\n"];
    let line = (
        proptest::sample::select(&NAMES[..]),
        any::<u64>(),
        any::<u64>(),
        proptest::sample::select(&SEPARATORS[..]),
        proptest::sample::select(&VALUES[..]),
        proptest::sample::select(&ENDINGS[..]),
        proptest::option::weighted(0.03, prop_oneof![Just(" folded"), Just("\tfolded")]),
    );
    (
        proptest::sample::select(
            &[
                "GET", "get", "GeT", "POST", "PUT", "DELETE", "HEAD", "OPTIONS",
            ][..],
        ),
        proptest::sample::select(&["/", "/a?b=1", "/x/../y", "*", "http://h/p?q", "/%2e%2e/z"][..]),
        proptest::sample::select(&ENDINGS[..]),
        proptest::collection::vec(line, 0..10),
        proptest::sample::select(&ENDINGS[..]),
        proptest::sample::select(&AFTER[..]),
    )
        .prop_map(|(method, target, first_end, lines, last_end, after)| {
            let mut head = format!("{method} {target} HTTP/1.1{first_end}").into_bytes();
            for (name, upper, under, separator, value, end, fold) in lines {
                head.extend_from_slice(respelled(name, upper, under).as_bytes());
                head.extend_from_slice(separator.as_bytes());
                head.extend_from_slice(value);
                head.extend_from_slice(end.as_bytes());
                if let Some(fold) = fold {
                    head.extend_from_slice(fold.as_bytes());
                    head.extend_from_slice(end.as_bytes());
                }
            }
            head.extend_from_slice(last_end.as_bytes());
            head.extend_from_slice(after);
            head
        })
        .boxed()
}

/// Where a request head read from the front of `input` ends, as httparse
/// (the connection loop's parser) reads one: after any empty lines before
/// the request line, at the first empty line, CRLF or bare LF alike.
fn head_length(input: &[u8]) -> Option<usize> {
    let mut start = 0;
    loop {
        match input.get(start..) {
            Some([b'\r', b'\n', ..]) => start += 2,
            Some([b'\n', ..]) => start += 1,
            _ => break,
        }
    }
    (start..input.len()).find_map(|at| match &input[at..] {
        [b'\n', b'\n', ..] => Some(at + 2),
        [b'\n', b'\r', b'\n', ..] => Some(at + 3),
        _ => None,
    })
}

/// Lowercase, with `_` read as `-`: how a CGI-style backend (CGI, WSGI,
/// Rack, PHP) reads a header name.
fn as_backend_reads(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

/// The values of the fields of a request head that a backend reads as
/// `wanted` (see [`as_backend_reads`]), with the names as written.
fn read_as<'a>(fields: &'a [(&'a str, &'a str)], wanted: &str) -> Vec<(&'a str, &'a str)> {
    fields
        .iter()
        .filter(|(name, _)| as_backend_reads(name) == wanted)
        .copied()
        .collect()
}

/// Checks a head the gateway wrote for a shard, for a client head whose
/// fields were `client`: well-formed HTTP/1.1 with nothing a shard could
/// read as a second request, and only the gateway's own word on who the
/// tenant is, which shard it reached and where the client came from.
fn check_encoded_head(
    wire: &[u8],
    request_line: &str,
    client: &gateway::syntax::fields::Fields,
    forwarded_for: gateway::config::ForwardedFor,
    prefixed: bool,
) {
    use gateway::config::ForwardedFor;
    // Every line ends in CRLF, no CR or LF stands alone, and the first
    // empty line is the end. (Checked on the bytes: values may hold
    // obs-text, which is not UTF-8.)
    let text = String::from_utf8_lossy(wire);
    let crlf = wire.windows(2).filter(|pair| pair == b"\r\n").count();
    assert_eq!(
        wire.iter().filter(|&&b| b == b'\r').count(),
        crlf,
        "a lone CR: {text:?}"
    );
    assert_eq!(
        wire.iter().filter(|&&b| b == b'\n').count(),
        crlf,
        "a lone LF: {text:?}"
    );
    let end = wire.windows(4).position(|four| four == b"\r\n\r\n");
    assert_eq!(end, wire.len().checked_sub(4), "{text:?}");
    let mut lines = text
        .strip_suffix("\r\n\r\n")
        .unwrap_or_default()
        .split("\r\n");
    assert_eq!(lines.next(), Some(request_line));
    let fields: Vec<(&str, &str)> = lines
        .map(|line| {
            let (name, value) = line.split_once(": ").expect("a field line");
            assert!(
                !name.is_empty() && !name.contains([' ', '\t', ':']),
                "{line:?}"
            );
            (name, value)
        })
        .collect();

    // The gateway's namespace: its two fields once each, spelled its way,
    // and nothing a backend reads as either, nor as any other name in it.
    for (name, _) in &fields {
        assert!(
            !as_backend_reads(name).starts_with("x-shuffle-")
                || *name == "x-shuffle-tenant"
                || *name == "x-shuffle-shard",
            "{name} survived: {text:?}"
        );
    }
    assert_eq!(
        read_as(&fields, "x-shuffle-tenant"),
        [("x-shuffle-tenant", "tenant-a")]
    );
    assert_eq!(
        read_as(&fields, "x-shuffle-shard"),
        [("x-shuffle-shard", "s0")]
    );
    // The gateway consumed the credentials; hop-by-hop fields describe the
    // client's connection, not the shard's, and so do the fields the
    // client's `Connection` names (except those the gateway sets itself:
    // the client's own never passed).
    const SET_BY_GATEWAY: [&str; 6] = [
        "host",
        "x-forwarded-host",
        "x-forwarded-for",
        "x-shuffle-tenant",
        "x-shuffle-shard",
        "content-length",
    ];
    let named: Vec<String> = client
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, value)| value.split(|&b| b == b','))
        .map(|token| String::from_utf8_lossy(token.trim_ascii()).to_ascii_lowercase())
        .filter(|token| !token.is_empty())
        .collect();
    for (name, _) in &fields {
        let lower = name.to_ascii_lowercase();
        assert!(
            ![
                "authorization",
                "x-api-key",
                "proxy-authorization",
                "connection",
                "keep-alive",
                "te",
                "trailer",
                "transfer-encoding",
                "upgrade",
            ]
            .contains(&lower.as_str())
                && (!named.contains(&lower) || SET_BY_GATEWAY.contains(name)),
            "{name} survived: {text:?}"
        );
    }
    // One Host, the shard's; one x-forwarded-host, the client's Host as
    // the gateway read it, in no other spelling.
    assert_eq!(read_as(&fields, "host"), [("host", "s0:9100")]);
    let client_host = gateway::trust::headers::client_host(client).map(String::from_utf8_lossy);
    let forwarded_host = read_as(&fields, "x-forwarded-host");
    match &client_host {
        Some(host) => assert_eq!(forwarded_host, [("x-forwarded-host", host.as_ref())]),
        None => assert_eq!(forwarded_host, []),
    }
    // The client's address, last, and the client's own list only when the
    // gateway appends to it.
    let forwarded = read_as(&fields, "x-forwarded-for");
    match forwarded_for {
        ForwardedFor::Off => assert_eq!(forwarded, [], "{text:?}"),
        ForwardedFor::Replace => {
            assert_eq!(forwarded, [("x-forwarded-for", "192.0.2.1")], "{text:?}");
        }
        ForwardedFor::Append => {
            assert_eq!(forwarded.last(), Some(&("x-forwarded-for", "192.0.2.1")));
        }
    }
    // Nothing else speaks for the client's origin unless a trusted proxy
    // in front of the gateway may (append), and nothing overrides the path
    // under a shard's prefix. (Some of the names the gateway drops; a
    // backend reads them in any spelling.)
    for (name, _) in &fields {
        let read = as_backend_reads(name);
        let origin = [
            "forwarded",
            "x-real-ip",
            "true-client-ip",
            "x-client-ip",
            "x-forwarded-proto",
            "x-original-host",
        ];
        let path = ["x-original-url", "x-rewrite-url"];
        if forwarded_for != ForwardedFor::Append {
            assert!(
                !origin.contains(&read.as_str()) && !path.contains(&read.as_str()),
                "{name} survived: {text:?}"
            );
        }
        if prefixed {
            assert!(!path.contains(&read.as_str()), "{name} survived: {text:?}");
        }
    }
    // A bodiless request says so at most once. (Exact names: to HTTP,
    // `content_length` is just another field.)
    let lengths: Vec<_> = fields
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .collect();
    assert!(
        lengths.len() <= 1 && lengths.iter().all(|(_, v)| *v == "0"),
        "{text:?}"
    );

    // And the connection loop's own reader, httparse underneath as in a
    // shard, takes the whole head as one request (when it has few enough
    // fields to read it at all).
    if fields.len() <= gateway::protocol::client_wire::MAX_HEADERS {
        let mut again = bytes::BytesMut::from(wire);
        match gateway::protocol::client_wire::read_head(&mut again, usize::MAX) {
            gateway::protocol::client_wire::HeadRead::Simple(simple) => {
                assert!(again.is_empty(), "{text:?}");
                let line = format!(
                    "{} {} HTTP/1.1",
                    simple.request.method(),
                    simple.request.uri()
                );
                assert_eq!(line, request_line);
            }
            other => panic!("the encoded head did not read back: {other:?}: {text:?}"),
        }
    }
}

/// Raw request heads through the connection loop's fast path, as a client
/// can write them (any case, odd spacing, tabs, repeated and look-alike
/// fields, bare LFs, obs-fold): every head it serves took exactly its own
/// bytes, and what it then sends a shard, under every forwarding setting,
/// passes [`check_encoded_head`].
#[test]
fn fast_path_request_heads() {
    use gateway::config::{ForwardedFor, ForwardingSettings};
    use gateway::trust::headers::{Added, Inbound};
    let tenant = http::HeaderValue::from_static("tenant-a");
    let host = http::HeaderValue::from_static("s0:9100");
    let shard = http::HeaderValue::from_static("s0");
    let client_address = http::HeaderValue::from_static("192.0.2.1");
    let (inputs, served) = (std::cell::Cell::new(0_u32), std::cell::Cell::new(0_u32));
    let check = |input: &[u8]| {
        inputs.set(inputs.get() + 1);
        let mut buf = bytes::BytesMut::from(input);
        let gateway::protocol::client_wire::HeadRead::Simple(simple) =
            gateway::protocol::client_wire::read_head(&mut buf, 16 * 1024)
        else {
            // `client_request_heads` checks that hyper then gets every byte.
            return;
        };
        served.set(served.get() + 1);
        assert_eq!(
            Some(input.len() - buf.len()),
            head_length(input),
            "the served head did not take exactly its own bytes"
        );
        let fields = &simple.fields;
        let (method, uri) = (simple.request.method(), simple.request.uri());
        for (x_forwarded_for, prefix) in [
            (ForwardedFor::Append, ""),
            (ForwardedFor::Append, "/api"),
            (ForwardedFor::Replace, "/api"),
            (ForwardedFor::Off, ""),
        ] {
            // The gateway refuses (400) a target that would leave a prefix.
            if !prefix.is_empty() && !gateway::trust::target::stays_under_prefix(uri) {
                continue;
            }
            let forwarding = ForwardingSettings {
                x_forwarded_for,
                x_forwarded_host: true,
            };
            let inbound = Inbound::new(fields, x_forwarded_for, !prefix.is_empty());
            let target = gateway::trust::target::backend_target(prefix, uri);
            let head = gateway::protocol::wire::RequestHead {
                method,
                target: &target,
                fields,
                inbound: &inbound,
                stated: None,
                added: Added::new(&forwarding, fields, Some(&client_address), Some(&tenant)),
                host: Some(&host),
                shard: Some(&shard),
            };
            // As the shard's pool frames a bodiless request: the client's
            // `Content-Length: 0` if it passes, else one of the gateway's
            // for the methods that expect a body.
            let forwards_length = fields.iter().any(|(name, _)| {
                name.eq_ignore_ascii_case(b"content-length") && inbound.forwards(name)
            });
            let says_length = matches!(
                *method,
                http::Method::POST | http::Method::PUT | http::Method::PATCH
            );
            let mut wire = Vec::new();
            gateway::protocol::wire::encode_request_head(
                &mut wire,
                &head,
                gateway::protocol::wire::RequestFraming::Length,
                (!forwards_length && says_length).then_some(0),
            );
            let request_line = format!("{method} {target} HTTP/1.1");
            check_encoded_head(
                &wire,
                &request_line,
                fields,
                x_forwarded_for,
                !prefix.is_empty(),
            );
        }
    };
    fuzz("request_heads", check);
    fuzz_with("request_heads", request_heads(), check);
    // Over a third of these heads are served; if hardly any are, the loop
    // has changed what it serves and the checks above no longer run.
    assert!(
        served.get() * 10 >= inputs.get(),
        "the fast path served only {} of {} heads: the encoder went untested",
        served.get(),
        inputs.get()
    );
}

#[test]
fn backend_responses() {
    fuzz("responses", |input| {
        for method in [http::Method::GET, http::Method::HEAD] {
            let mut buf = bytes::BytesMut::from(input);
            match gateway::protocol::wire::parse_response_head(&mut buf, &method) {
                Ok(Some(head)) => {
                    assert!(buf.len() < input.len(), "a head was parsed from nothing");
                    assert!(!head.status.is_informational());
                    if head.framing == gateway::protocol::wire::ResponseFraming::Chunked {
                        decode_chunked(&mut buf);
                    }
                }
                // Only skipped informational heads are taken off an
                // incomplete one.
                Ok(None) => assert!(buf.len() <= input.len()),
                Err(_) => {}
            }
        }
        decode_chunked(&mut bytes::BytesMut::from(input));
    });
}
