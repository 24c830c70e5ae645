//! Header hygiene at the trust boundary: what the client sends is never
//! trusted to steer placement, and what the backend returns never reveals
//! it.
//!
//! Inbound, every header in the gateway's namespace (`x-shuffle-*`, also
//! spelled with underscores) and every hop-by-hop header is removed, as are
//! the client's credentials (the gateway has consumed them; backends get the
//! authenticated tenant instead). Outbound, the same namespace is stripped
//! from responses, since which shards serve a tenant is for the admin API
//! alone.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

use crate::wire::BackendFields;

/// The gateway's header namespace.
pub const NAMESPACE: &str = "x-shuffle-";

/// The authenticated tenant, added for the backend.
pub const TENANT: HeaderName = HeaderName::from_static("x-shuffle-tenant");

/// The shard chosen for this attempt, added for the backend.
pub const SHARD: HeaderName = HeaderName::from_static("x-shuffle-shard");

/// The client's API key header.
pub const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// Hop-by-hop headers (RFC 9110 section 7.6.1 and the usual legacy ones):
/// they describe one connection and must not be forwarded.
const HOP_BY_HOP: [&[u8]; 8] = [
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
];

/// Whether a header name (in any case) is in the gateway's namespace,
/// counting `_` as `-`.
///
/// Many backend stacks cannot tell the two apart: CGI, WSGI, Rack and PHP
/// turn both `x-shuffle-tenant` and `x_shuffle_tenant` into
/// `HTTP_X_SHUFFLE_TENANT`, so a look-alike that got through would sit
/// beside (or replace) the tenant the gateway sets.
fn in_namespace(name: &[u8]) -> bool {
    name.len() >= NAMESPACE.len()
        && name
            .iter()
            .zip(NAMESPACE.as_bytes())
            .all(|(&got, &want)| got.to_ascii_lowercase() == want || (got == b'_' && want == b'-'))
}

/// `Idempotency-Key`: the client says the request may be repeated.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// `x-forwarded-host`: the client's `Host`, set by the gateway alone.
pub const FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// `x-forwarded-for`: the client's address, appended by the gateway.
pub const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The header names the `Connection` fields list (`values`): hop-by-hop by
/// the client's (or backend's) own declaration. Compared in any case.
fn connection_named<'a>(values: impl Iterator<Item = &'a [u8]>) -> SmallVec<[&'a [u8]; 4]> {
    values
        .flat_map(|value| value.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|name| !name.is_empty())
        .collect()
}

/// The headers `doomed` says must go, found in one pass over the names (a
/// request usually carries a handful of headers, and looking each forbidden
/// name up in turn costs more than reading them all once).
fn doomed(headers: &HeaderMap, doomed: impl Fn(&HeaderName) -> bool) -> SmallVec<[HeaderName; 8]> {
    headers
        .keys()
        .filter(|name| doomed(name))
        .cloned()
        .collect()
}

/// Whether a header (its name in any case) never crosses the gateway in
/// either direction: hop-by-hop (by the standard list or by `Connection`)
/// or in the gateway's namespace.
fn never_forwarded(name: &[u8], connection_named: &[&[u8]]) -> bool {
    HOP_BY_HOP.iter().any(|hop| name.eq_ignore_ascii_case(hop))
        || connection_named
            .iter()
            .any(|named| name.eq_ignore_ascii_case(named))
        || in_namespace(name)
}

/// The headers the gateway adds to every attempt of one request. They are
/// written on the wire after the client's own (by
/// [`crate::wire::encode_request_head`]) rather than inserted into the
/// client's header map, which hyper sized for what the client sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Added<'a> {
    /// `x-forwarded-host`: the client's `Host`.
    pub forwarded_host: Option<&'a HeaderValue>,
    /// `x-forwarded-for`: the client's address, after any the client sent.
    pub forwarded_for: Option<&'a HeaderValue>,
    /// `x-shuffle-tenant`: the authenticated tenant.
    pub tenant: Option<&'a HeaderValue>,
}

impl Added<'_> {
    /// Whether a header of the client's must not go out beside these: the
    /// gateway's own `x-forwarded-host` and namespace, and `Host`, which
    /// each attempt sets to its shard. ([`inbound`] has removed them
    /// already; the wire checks again.)
    pub fn replaces(name: &HeaderName) -> bool {
        name == header::HOST || name == FORWARDED_HOST || name == TENANT || name == SHARD
    }
}

/// Prepares a client request's headers for a backend: strips what must not
/// pass and returns the client's `Host`, which goes out as
/// `x-forwarded-host`. The client's `Host` itself is left in place for the
/// wire to skip ([`Added::replaces`]: each attempt names its own backend),
/// which is cheaper than removing it. The tenant and the client's address
/// are added on the wire (see [`Added`]).
pub fn inbound(headers: &mut HeaderMap) -> Option<HeaderValue> {
    // One look at the few names a request has, rather than a lookup by
    // name for each rule: `Connection` and `Transfer-Encoding` are rare.
    let (mut listed, mut chunked) = (false, false);
    for name in headers.keys() {
        listed |= name == header::CONNECTION;
        // A body framed by Transfer-Encoding was decoded by that (RFC 9112
        // section 6.3), so a Content-Length beside it is a lie a backend
        // might believe: it goes (the body is then sent chunked).
        chunked |= name == header::TRANSFER_ENCODING;
    }
    let doomed = {
        let named = if listed {
            connection_named(
                headers
                    .get_all(header::CONNECTION)
                    .iter()
                    .map(HeaderValue::as_bytes),
            )
        } else {
            SmallVec::new()
        };
        // The credentials have been consumed (backends get the tenant instead),
        // and `x-forwarded-host` is the gateway's to set: a client's own (sent
        // without a `Host`, which HTTP/1.0 allows) would otherwise pass as ours.
        doomed(headers, |name| {
            never_forwarded(name.as_str().as_bytes(), &named)
                || name == header::AUTHORIZATION
                || name == API_KEY
                || name == FORWARDED_HOST
                || (chunked && name == header::CONTENT_LENGTH)
        })
    };
    for name in doomed {
        headers.remove(name);
    }
    headers.get(header::HOST).cloned()
}

/// The `x-forwarded-for` value for a client address.
pub fn forwarded_for(peer: std::net::IpAddr) -> Option<HeaderValue> {
    HeaderValue::from_str(&peer.to_string()).ok()
}

/// The fields of a backend response that may reach the client, as the
/// backend wrote them: all but the hop-by-hop ones (by the standard list or
/// named in the response's own `Connection`) and the gateway's namespace.
/// Every way a backend response reaches a client (the connection loop's
/// writer, hyper's header map) goes through here.
pub fn outbound(fields: &BackendFields) -> impl Iterator<Item = (&[u8], &[u8])> {
    let named = connection_named(
        fields
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"))
            .map(|(_, value)| value),
    );
    fields
        .iter()
        .filter(move |(name, _)| !never_forwarded(name, &named))
}

/// Whether a request method may be replayed on another shard without an
/// idempotency key.
pub fn is_idempotent(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET
            | http::Method::HEAD
            | http::Method::OPTIONS
            | http::Method::PUT
            | http::Method::DELETE
            | http::Method::TRACE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_namespace_hop_by_hop_and_credentials() {
        let mut headers = HeaderMap::new();
        headers.insert("x-shuffle-tenant", "victim".parse().unwrap());
        headers.insert("X-Shuffle-Shard", "s9".parse().unwrap());
        headers.append("x-shuffle-anything", "1".parse().unwrap());
        headers.insert("x_shuffle_tenant", "victim".parse().unwrap());
        headers.insert("X-Shuffle_Shard", "s9".parse().unwrap());
        headers.insert("x-shuffle_", "1".parse().unwrap());
        headers.insert("x-shufflers", "kept".parse().unwrap());
        headers.insert("connection", "keep-alive, x-secret-hop".parse().unwrap());
        headers.insert("x-secret-hop", "1".parse().unwrap());
        headers.insert("transfer-encoding", "chunked".parse().unwrap());
        headers.insert("authorization", "Bearer token".parse().unwrap());
        headers.insert("x-api-key", "key".parse().unwrap());
        headers.insert("host", "gateway.example".parse().unwrap());
        headers.insert("accept", "*/*".parse().unwrap());
        let headers = forwarded(
            headers,
            Some(&HeaderValue::from_static("acme")),
            forwarded_for("127.0.0.1".parse().unwrap()).as_ref(),
        );
        assert_eq!(
            headers
                .get_all("x-shuffle-tenant")
                .iter()
                .collect::<Vec<_>>(),
            ["acme"]
        );
        for gone in [
            "x-shuffle-shard",
            "x-shuffle-anything",
            "x_shuffle_tenant",
            "x-shuffle_shard",
            "x-shuffle_",
            "connection",
            "x-secret-hop",
            "transfer-encoding",
            "authorization",
            "x-api-key",
            "host",
        ] {
            assert!(headers.get(gone).is_none(), "{gone} survived");
        }
        assert_eq!(headers["x-forwarded-host"], "gateway.example");
        assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
        assert_eq!(headers["accept"], "*/*");
        assert_eq!(headers["x-shufflers"], "kept");
    }

    #[test]
    fn a_clients_forwarded_host_never_passes_as_the_gateways() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-host", "victim.example".parse().unwrap());
        let headers = forwarded(headers, Some(&HeaderValue::from_static("acme")), None);
        assert!(headers.get("x-forwarded-host").is_none());
    }

    /// A backend response head with these fields, parsed as the gateway
    /// reads one.
    fn backend_fields(fields: &[(&str, &str)]) -> BackendFields {
        let mut head = String::from("HTTP/1.1 200 OK\r\n");
        for (name, value) in fields {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut buf = bytes::BytesMut::from(head.as_bytes());
        // A HEAD answer: the fields' lengths, whatever they say, frame
        // nothing.
        crate::wire::parse_response_head(&mut buf, &http::Method::HEAD)
            .unwrap()
            .unwrap()
            .fields
    }

    /// What of a backend's fields reaches the client, as a header map.
    fn passed(fields: &BackendFields) -> HeaderMap {
        fields.to_header_map(outbound(fields)).unwrap()
    }

    #[test]
    fn responses_never_reveal_placement() {
        let fields = backend_fields(&[
            ("X-Shuffle-Shard", "s3"),
            ("x_shuffle_shard", "s3"),
            ("Keep-Alive", "timeout=5"),
            ("Connection", "X-Secret"),
            ("x-secret", "1"),
            ("Content-Type", "text/plain"),
        ]);
        let passed = passed(&fields);
        assert_eq!(passed.len(), 1, "{passed:?}");
        assert_eq!(passed["content-type"], "text/plain");
    }

    /// What a backend receives of `headers`: [`inbound`], then the head as
    /// the wire writes it (no `Host` or shard: those are the attempt's),
    /// parsed back.
    fn forwarded(
        mut headers: HeaderMap,
        tenant: Option<&HeaderValue>,
        forwarded_for: Option<&HeaderValue>,
    ) -> HeaderMap {
        let forwarded_host = inbound(&mut headers);
        let head = crate::wire::RequestHead {
            method: &http::Method::GET,
            target: "/",
            headers: &headers,
            added: Added {
                forwarded_host: forwarded_host.as_ref(),
                forwarded_for,
                tenant,
            },
            host: None,
            shard: None,
        };
        let mut wire = Vec::new();
        crate::wire::encode_request_head(
            &mut wire,
            &head,
            crate::wire::RequestFraming::Length,
            None,
        );
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut fields);
        assert!(request.parse(&wire).unwrap().is_complete());
        let mut parsed = HeaderMap::new();
        for field in request.headers.iter() {
            parsed.append(
                HeaderName::from_bytes(field.name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(field.value).unwrap(),
            );
        }
        parsed
    }

    /// The obvious version of `inbound` and the additions, kept as the
    /// reference: remove each forbidden name in turn, then insert.
    fn inbound_reference(headers: &mut HeaderMap, tenant: &str, peer: &str) {
        if headers.contains_key(header::TRANSFER_ENCODING) {
            headers.remove(header::CONTENT_LENGTH);
        }
        outbound_reference(headers);
        headers.remove(header::AUTHORIZATION);
        headers.remove(API_KEY);
        headers.remove(FORWARDED_HOST);
        if let Some(host) = headers.remove(header::HOST) {
            headers.insert(FORWARDED_HOST, host);
        }
        headers.append(FORWARDED_FOR, HeaderValue::from_str(peer).unwrap());
        headers.insert(TENANT, HeaderValue::from_str(tenant).unwrap());
    }

    /// The obvious version of `outbound`, on a header map: remove each
    /// hop-by-hop name in turn, then the namespace.
    fn outbound_reference(headers: &mut HeaderMap) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        let standard = HOP_BY_HOP.map(|name| HeaderName::from_bytes(name).unwrap());
        for name in named.iter().chain(standard.iter()) {
            headers.remove(name);
        }
        let namespaced: Vec<HeaderName> = headers
            .keys()
            .filter(|name| {
                let name = name.as_str().replace('_', "-");
                name.starts_with(NAMESPACE)
            })
            .cloned()
            .collect();
        for name in namespaced {
            headers.remove(name);
        }
    }

    /// Every name with its values in order, without the surrounding
    /// whitespace that HTTP/1.1 does not carry. (The order of different
    /// names depends on the order of removals, which the two versions need
    /// not share; the order of one name's values is what a backend would
    /// see.)
    fn pairs(headers: &HeaderMap) -> std::collections::BTreeMap<String, Vec<Vec<u8>>> {
        headers
            .keys()
            .map(|name| {
                let values = headers.get_all(name).iter();
                (
                    name.as_str().to_owned(),
                    values
                        .map(|value| value.as_bytes().trim_ascii().to_vec())
                        .collect(),
                )
            })
            .collect()
    }

    fn header_list() -> impl proptest::strategy::Strategy<Value = Vec<(String, String)>> {
        use proptest::prelude::*;
        // Names drawn mostly from the ones the rules are about, so that most
        // cases exercise a rule; values sometimes list names for `Connection`.
        let name = prop_oneof![
            Just("host".to_owned()),
            Just("authorization".to_owned()),
            Just("x-api-key".to_owned()),
            Just("connection".to_owned()),
            Just("keep-alive".to_owned()),
            Just("transfer-encoding".to_owned()),
            Just("content-length".to_owned()),
            Just("te".to_owned()),
            Just("upgrade".to_owned()),
            Just("x-forwarded-host".to_owned()),
            Just("x-forwarded-for".to_owned()),
            Just("accept".to_owned()),
            "x[-_]shuffle[-_][a-z]{0,6}",
            "x-[a-z]{1,8}",
        ];
        let value = prop_oneof![
            "[a-z0-9 ]{0,12}",
            Just("x-secret, keep-alive".to_owned()),
            Just("x-shuffle-tenant".to_owned()),
            Just("accept,,x-custom".to_owned()),
        ];
        proptest::collection::vec((name, value), 0..12)
    }

    proptest::proptest! {
        #[test]
        fn one_pass_hygiene_equals_the_reference(list in header_list()) {
            let mut headers = HeaderMap::new();
            for (name, value) in &list {
                headers.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            let mut reference = headers.clone();
            let fast = forwarded(
                headers.clone(),
                Some(&HeaderValue::from_static("acme")),
                forwarded_for("10.0.0.7".parse().unwrap()).as_ref(),
            );
            inbound_reference(&mut reference, "acme", "10.0.0.7");
            proptest::prop_assert_eq!(pairs(&fast), pairs(&reference));

            // Outbound, on a backend response head carrying the same
            // fields; the reading side drops a length beside a coding
            // first, as the wire does.
            let pairs_list: Vec<(&str, &str)> =
                list.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
            let fast = passed(&backend_fields(&pairs_list));
            let mut reference = headers;
            if reference.contains_key(header::TRANSFER_ENCODING) {
                reference.remove(header::CONTENT_LENGTH);
            }
            outbound_reference(&mut reference);
            proptest::prop_assert_eq!(pairs(&fast), pairs(&reference));
        }
    }
}
