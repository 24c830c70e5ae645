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
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Whether a header is in the gateway's namespace, counting `_` as `-`.
///
/// Many backend stacks cannot tell the two apart: CGI, WSGI, Rack and PHP
/// turn both `x-shuffle-tenant` and `x_shuffle_tenant` into
/// `HTTP_X_SHUFFLE_TENANT`, so a look-alike that got through would sit
/// beside (or replace) the tenant the gateway sets.
fn in_namespace(name: &HeaderName) -> bool {
    // Header names are lowercase in `http`, so a byte comparison is exact.
    let name = name.as_str().as_bytes();
    name.len() >= NAMESPACE.len()
        && name
            .iter()
            .zip(NAMESPACE.as_bytes())
            .all(|(&got, &want)| got == want || (got == b'_' && want == b'-'))
}

/// Removes hop-by-hop headers, including any the `Connection` header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// Prepares a client request's headers for a backend: strips what must not
/// pass and adds the authenticated tenant. `Host` is removed so the client
/// library sets the backend's; the original goes in `x-forwarded-host`.
pub fn inbound(headers: &mut HeaderMap, tenant: &str, peer: Option<std::net::IpAddr>) {
    strip_hop_by_hop(headers);
    let namespaced: Vec<HeaderName> = headers
        .keys()
        .filter(|name| in_namespace(name))
        .cloned()
        .collect();
    for name in namespaced {
        headers.remove(name);
    }
    headers.remove(header::AUTHORIZATION);
    headers.remove(API_KEY);
    // `x-forwarded-host` is the gateway's to set: a client's own (sent
    // without a `Host`, which HTTP/1.0 allows) would otherwise pass as ours.
    let forwarded_host = HeaderName::from_static("x-forwarded-host");
    headers.remove(&forwarded_host);
    if let Some(host) = headers.remove(header::HOST) {
        headers.insert(forwarded_host, host);
    }
    if let Some(peer) = peer
        && let Ok(value) = HeaderValue::from_str(&peer.to_string())
    {
        headers.append(HeaderName::from_static("x-forwarded-for"), value);
    }
    // Tenant ids are validated UTF-8 from our own configuration; one that
    // cannot be a header value is refused by the caller before this point.
    if let Ok(value) = HeaderValue::from_str(tenant) {
        headers.insert(TENANT, value);
    }
}

/// Sets the shard header for one attempt.
pub fn set_shard(headers: &mut HeaderMap, shard_id: &str) {
    match HeaderValue::from_str(shard_id) {
        Ok(value) => {
            headers.insert(SHARD, value);
        }
        Err(_) => {
            headers.remove(SHARD);
        }
    }
}

/// Cleans a backend response's headers before they reach the client.
pub fn outbound(headers: &mut HeaderMap) {
    strip_hop_by_hop(headers);
    let namespaced: Vec<HeaderName> = headers
        .keys()
        .filter(|name| in_namespace(name))
        .cloned()
        .collect();
    for name in namespaced {
        headers.remove(name);
    }
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
        inbound(&mut headers, "acme", Some("127.0.0.1".parse().unwrap()));
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
        inbound(&mut headers, "acme", None);
        assert!(headers.get("x-forwarded-host").is_none());
    }

    #[test]
    fn responses_never_reveal_placement() {
        let mut headers = HeaderMap::new();
        headers.insert("x-shuffle-shard", "s3".parse().unwrap());
        headers.insert("x_shuffle_shard", "s3".parse().unwrap());
        headers.insert("keep-alive", "timeout=5".parse().unwrap());
        headers.insert("content-type", "text/plain".parse().unwrap());
        outbound(&mut headers);
        assert_eq!(headers.len(), 1);
    }
}
