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
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&inputs(target), |input| {
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
        if let Ok(tenants) = gateway::tenants::Tenants::parse(&path, &text, &config) {
            // Whatever was accepted must also be placeable.
            let _ = gateway::cell::Topology::build(&config, &tenants);
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
    let tenants = gateway::tenants::Tenants::parse(
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
    let authenticator = gateway::authenticate::Authenticator::new(Some(&jwt)).unwrap();
    fuzz("credentials", |input| {
        for name in ["authorization", "x-api-key"] {
            let Ok(value) = http::HeaderValue::from_bytes(input) else {
                return;
            };
            let mut headers = http::HeaderMap::new();
            headers.insert(http::HeaderName::from_static(name), value);
            for jwt_enabled in [false, true] {
                if let Ok(credential) = gateway::credential::extract_from_map(&headers, jwt_enabled)
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
        let fields = gateway::wire::Fields::from_header_map(&headers);
        let inbound =
            gateway::headers::Inbound::new(&fields, gateway::config::ForwardedFor::Append, false);
        let head = gateway::wire::RequestHead {
            method: &http::Method::GET,
            target: "/",
            fields: &fields,
            inbound: &inbound,
            stated: None,
            added: gateway::headers::Added {
                forwarded_host: gateway::headers::client_host(&fields),
                forwarded_for: None,
                tenant: Some(&tenant),
            },
            host: Some(&host),
            shard: Some(&shard),
        };
        let mut wire = Vec::new();
        gateway::wire::encode_request_head(
            &mut wire,
            &head,
            gateway::wire::RequestFraming::Length,
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
    use gateway::wire::{ChunkedDecoder, Decoded};
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
        match gateway::client_wire::read_head(&mut buf, 16 * 1024) {
            gateway::client_wire::HeadRead::Simple(simple) => {
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
            gateway::client_wire::HeadRead::HandOff | gateway::client_wire::HeadRead::Partial => {
                assert_eq!(&buf[..], input);
            }
        }
    });
}

#[test]
fn backend_responses() {
    fuzz("responses", |input| {
        for method in [http::Method::GET, http::Method::HEAD] {
            let mut buf = bytes::BytesMut::from(input);
            match gateway::wire::parse_response_head(&mut buf, &method) {
                Ok(Some(head)) => {
                    assert!(buf.len() < input.len(), "a head was parsed from nothing");
                    assert!(!head.status.is_informational());
                    if head.framing == gateway::wire::ResponseFraming::Chunked {
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
