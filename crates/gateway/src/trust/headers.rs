//! Header hygiene at the trust boundary: what the client sends is never
//! trusted to steer placement, and what the backend returns never reveals
//! it.
//!
//! Inbound, no header in the gateway's namespace (`x-shuffle-*`, also
//! spelled with underscores) and no hop-by-hop header passes, nor do the
//! client's credentials (the gateway has consumed them; backends get the
//! authenticated tenant instead). Outbound, the same namespace is stripped
//! from responses, since which shards serve a tenant is for the admin API
//! alone. Both directions work on header fields as they were written
//! ([`Fields`]), with one predicate, names compared in any case.

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use smallvec::SmallVec;

use crate::config::{ForwardedFor, ForwardingSettings};
use crate::syntax::fields::Fields;
use crate::syntax::grpc::PackedTimeout;
use crate::syntax::trace_context::{TRACEPARENT, TRACEPARENT_LEN, TRACESTATE};

/// The gateway's header namespace.
pub const NAMESPACE: &str = "x-shuffle-";

/// The authenticated tenant, added for the backend.
pub const TENANT: HeaderName = HeaderName::from_static("x-shuffle-tenant");

/// The shard chosen for this attempt, added for the backend.
pub const SHARD: HeaderName = HeaderName::from_static("x-shuffle-shard");

/// `x-request-id`: the request's id, sent to the shard when the access log
/// is on (the id the log shows).
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest client `x-request-id` taken as the request's id.
pub const MAX_REQUEST_ID: usize = 128;

/// The request's id: the client's `x-request-id` when it has exactly one
/// and it is valid (1 to [`MAX_REQUEST_ID`] bytes of printable ASCII
/// without spaces, so it can go into a log line and a header as it is),
/// else a new one (128 random bits in hex).
pub fn request_id(fields: &Fields) -> HeaderValue {
    let mut given = fields
        .iter()
        .filter(|(name, _)| spelled_like(name, b"x-request-id"))
        .map(|(_, value)| value);
    if let (Some(id), None) = (given.next(), given.next())
        && !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id.iter().all(|byte| (0x21..=0x7e).contains(byte))
        && let Ok(value) = HeaderValue::from_bytes(id)
    {
        return value;
    }
    let generated = format!("{:032x}", fastrand::u128(..));
    HeaderValue::from_str(&generated).expect("hex digits are a valid header value")
}

/// `Idempotency-Key`: the client says the request may be repeated.
const IDEMPOTENCY_KEY: &[u8] = b"idempotency-key";

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
    name.get(..NAMESPACE.len())
        .is_some_and(|prefix| spelled_like(prefix, NAMESPACE.as_bytes()))
}

/// Whether a header name (in any case) reads as `want` (lowercase) to a
/// backend that counts `_` as `-`, as CGI-style stacks do (see
/// [`in_namespace`]): `X_Forwarded_For` is `x-forwarded-for` to them.
fn spelled_like(name: &[u8], want: &[u8]) -> bool {
    name.len() == want.len()
        && name
            .iter()
            .zip(want)
            .all(|(&got, &want)| reads_as(got, want))
}

/// One byte of a header name against one of a lowercase name, with `_`
/// read as `-`.
fn reads_as(got: u8, want: u8) -> bool {
    got.to_ascii_lowercase() == want || (got == b'_' && want == b'-')
}

/// The fields through which a client, or a proxy in front of the gateway,
/// tells a backend who the client is and how it connected (besides
/// `x-forwarded-for` and `x-forwarded-host`, which are the gateway's own).
/// When the gateway does not keep the client's `x-forwarded-for` list
/// ([`ForwardedFor::Replace`] or [`ForwardedFor::Off`]), nothing in front
/// of it is trusted to vouch for the client, so none of these pass either
/// (in any spelling a CGI-style backend reads as theirs). With
/// [`ForwardedFor::Append`] they pass unchanged: the operator has said a
/// trusted proxy sits in front.
///
/// It is a list of what is known to be read that way, not a guarantee: a
/// backend that trusts some other field for the client's address should
/// stand behind `replace` only with that field dropped by a proxy of its
/// own.
const CLIENT_ORIGIN: [&[u8]; 24] = [
    b"forwarded",
    b"x-real-ip",
    b"true-client-ip",
    b"x-forwarded-proto",
    b"x-forwarded-port",
    b"x-forwarded-prefix",
    // What CDNs, load balancers and frameworks also read as the client's
    // address, scheme or host.
    b"x-client-ip",
    b"cf-connecting-ip",
    b"fastly-client-ip",
    b"x-cluster-client-ip",
    b"x-forwarded-scheme",
    b"x-forwarded-ssl",
    b"x-forwarded-server",
    b"x-forwarded-protocol",
    b"x-original-host",
    b"x-host",
    b"front-end-https",
    b"x-envoy-external-address",
    b"client-ip",
    b"x-original-forwarded-for",
    b"x-forwarded-uri",
    b"wl-proxy-client-ip",
    b"proxy-client-ip",
    b"x-azure-clientip",
];

/// Fields through which a TLS-terminating proxy tells a backend which
/// client certificate it verified: Envoy's `x-forwarded-client-cert`,
/// nginx and HAProxy recipes' `x-ssl-client-*` and `x-client-cert`,
/// Apache's `ssl-client-*`, IIS ARR's `x-arr-clientcert`, Traefik's
/// `x-forwarded-tls-client-cert(-info)`, AWS ALB's `x-amzn-mtls-clientcert*`,
/// and the `x-ssl-cert`, `x-ssl-subject`, `x-ssl-issuer`, `x-client-verify`
/// and `x-client-dn` of nginx and HAProxy recipes. A backend that
/// reads one believes a certificate was verified, so a client's own copy
/// never passes, whatever [`ForwardedFor`] says and whether or not the
/// client used mTLS (Envoy's default, `SANITIZE`, does the same): the
/// gateway vouches only for what it verified itself, which reaches the
/// shard as `x-shuffle-tenant`. Whole names, then prefixes (each also
/// spelled with `_`, in any case).
const CLIENT_CERTIFICATE: [&[u8]; 8] = [
    b"x-forwarded-client-cert",
    b"x-arr-clientcert",
    b"x-arr-ssl",
    b"x-ssl-cert",
    b"x-ssl-subject",
    b"x-ssl-issuer",
    b"x-client-verify",
    b"x-client-dn",
];

/// Prefixes of [`CLIENT_CERTIFICATE`] fields: `x-client-cert` covers
/// `x-client-cert-chain` and `x-client-certificate`.
const CLIENT_CERTIFICATE_PREFIXES: [&[u8]; 5] = [
    b"x-ssl-client-",
    b"ssl-client-",
    b"x-client-cert",
    b"x-forwarded-tls-client-cert",
    b"x-amzn-mtls-clientcert",
];

/// Whether a name reads (to a CGI-style backend) as one of
/// [`CLIENT_CERTIFICATE`] or starts like one of its prefixes. Every field
/// of every request passes here, so names that cannot be one (most: they
/// start with neither `x` nor `s`) cost one comparison.
#[inline]
fn describes_client_certificate(name: &[u8]) -> bool {
    if !matches!(name.first(), Some(b'x' | b'X' | b's' | b'S')) || name.len() < 9 {
        return false;
    }
    client_certificate_field(name)
}

#[inline(never)]
fn client_certificate_field(name: &[u8]) -> bool {
    CLIENT_CERTIFICATE
        .iter()
        .any(|field| spelled_like(name, field))
        || CLIENT_CERTIFICATE_PREFIXES.iter().any(|prefix| {
            name.get(..prefix.len())
                .is_some_and(|start| spelled_like(start, prefix))
        })
}

/// Fields through which IIS, Symfony and other frameworks let a proxy in
/// front override the request's path. Behind a shard's path prefix they
/// would undo it (`/api` + `X-Original-URL: /admin`), so there they never
/// pass; elsewhere they follow [`CLIENT_ORIGIN`]'s rule.
const PATH_OVERRIDES: [&[u8]; 2] = [b"x-original-url", b"x-rewrite-url"];

/// Whether a name reads (to a CGI-style backend) as one of
/// [`CLIENT_ORIGIN`], `x-forwarded-for` or `x-forwarded-host`.
fn describes_client_origin(name: &[u8]) -> bool {
    CLIENT_ORIGIN
        .iter()
        .chain(PATH_OVERRIDES.iter())
        .chain([&b"x-forwarded-for"[..], b"x-forwarded-host"].iter())
        .any(|origin| spelled_like(name, origin))
}

/// Whether a name reads as one of [`PATH_OVERRIDES`].
fn overrides_path(name: &[u8]) -> bool {
    PATH_OVERRIDES.iter().any(|over| spelled_like(name, over))
}

/// Fields that never pass in a trailer section, whichever way it goes,
/// beyond what the header rules already drop: a recipient that merges
/// trailers into the header section (RFC 9110 section 6.5.1 warns some
/// do) would take them as the message's own framing, routing or identity.
const NEVER_IN_TRAILERS: [&[u8]; 4] = [
    b"content-length",
    b"content-encoding",
    b"content-range",
    b"host",
];

/// Whether a request trailer (its name in any case) goes to the shard:
/// what [`Inbound::forwards`] lets through as a header, less the framing
/// fields, and less anything describing the client's origin even when the
/// client's `x-forwarded-for` is kept, since in a trailer the gateway's own
/// entry could not be the last one.
pub fn request_trailer_passes(inbound: &Inbound, name: &[u8]) -> bool {
    inbound.forwards(name)
        && !NEVER_IN_TRAILERS
            .iter()
            .any(|never| name.eq_ignore_ascii_case(never))
        && !describes_client_origin(name)
}

/// Whether a backend's response trailer (its name in any case) reaches the
/// client: what [`outbound`] lets through as a header, less the framing
/// fields.
pub fn response_trailer_passes(name: &[u8]) -> bool {
    !never_forwarded(name, &[] as &[&[u8]])
        && !NEVER_IN_TRAILERS
            .iter()
            .any(|never| name.eq_ignore_ascii_case(never))
}

/// Keeps the trailers `passes` allows (trailer sections are rare and small,
/// so a new map is fine).
pub fn filter_trailers(trailers: HeaderMap, passes: impl Fn(&[u8]) -> bool) -> HeaderMap {
    let mut kept = HeaderMap::new();
    let mut name = None;
    for (next, value) in trailers {
        // `into_iter` names a field only at its first value.
        if next.is_some() {
            name = next;
        }
        if let Some(name) = &name
            && passes(name.as_str().as_bytes())
        {
            kept.append(name.clone(), value);
        }
    }
    kept
}

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

/// Whether a header (its name in any case) never crosses the gateway in
/// either direction: hop-by-hop (by the standard list or by `Connection`)
/// or in the gateway's namespace.
fn never_forwarded(name: &[u8], connection_named: &[impl AsRef<[u8]>]) -> bool {
    HOP_BY_HOP.iter().any(|hop| name.eq_ignore_ascii_case(hop))
        || connection_named
            .iter()
            .any(|named| name.eq_ignore_ascii_case(named.as_ref()))
        || in_namespace(name)
}

/// The headers the gateway adds to every attempt of one request, written
/// on the wire after the client's own (by
/// [`crate::protocol::wire::encode_request_head`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Added<'a> {
    /// `x-forwarded-host`: the client's `Host`, as the client sent it.
    pub forwarded_host: Option<&'a [u8]>,
    /// `x-forwarded-for`: the client's address, after any the client sent.
    pub forwarded_for: Option<&'a HeaderValue>,
    /// `x-shuffle-tenant`: the authenticated tenant.
    pub tenant: Option<&'a HeaderValue>,
    /// `grpc-timeout`: for a gRPC call, the time left when this attempt
    /// was sent, in place of the client's own (set per attempt).
    pub grpc_timeout: Option<PackedTimeout>,
    /// `x-request-id`: the request's id ([`request_id`]), when the access
    /// log is on; the client's own then never passes beside it.
    pub request_id: Option<&'a HeaderValue>,
    /// `traceparent`: this attempt's span as the shard's parent, encoded,
    /// when `[tracing]` is on (set per attempt; borrowed, so that the head
    /// every attempt copies grows by a pointer); the client's own then
    /// never passes.
    pub traceparent: Option<&'a [u8; TRACEPARENT_LEN]>,
}

impl<'a> Added<'a> {
    /// What goes out beside a client's request `fields` under the
    /// `forwarding` settings: `client_address` is the peer's address as an
    /// `x-forwarded-for` value, `tenant` the authenticated tenant.
    pub fn new(
        forwarding: &ForwardingSettings,
        fields: &'a Fields,
        client_address: Option<&'a HeaderValue>,
        tenant: Option<&'a HeaderValue>,
    ) -> Self {
        Self {
            forwarded_host: if forwarding.x_forwarded_host {
                client_host(fields)
            } else {
                None
            },
            forwarded_for: match forwarding.x_forwarded_for {
                ForwardedFor::Append | ForwardedFor::Replace => client_address,
                ForwardedFor::Off => None,
            },
            tenant,
            grpc_timeout: None,
            request_id: None,
            traceparent: None,
        }
    }
}

impl Added<'_> {
    /// Whether a header of the client's (its name in any case) must not go
    /// out beside these: the gateway's own `x-forwarded-host` and
    /// namespace, and `Host`, which each attempt sets to its shard.
    pub fn replaces(name: &[u8]) -> bool {
        const OWN: [&[u8]; 4] = [
            b"host",
            b"x-forwarded-host",
            b"x-shuffle-tenant",
            b"x-shuffle-shard",
        ];
        OWN.iter().any(|own| name.eq_ignore_ascii_case(own))
    }
}

/// What of a client's request fields may go to a shard, decided once per
/// request and applied as the head is written
/// ([`crate::protocol::wire::encode_request_head`]): every field but the hop-by-hop
/// ones (by the standard list or named in the request's `Connection`), the
/// gateway's namespace, the client's credentials (consumed: backends get
/// the tenant instead), a client's own `x-forwarded-host` (the gateway's to
/// set), a client's own `x-forwarded-for` and the rest of
/// [`CLIENT_ORIGIN`] unless the gateway appends to it
/// ([`ForwardedFor::Append`]) (all also spelled with `_`), a
/// `Content-Length` beside `Transfer-Encoding`, and the fields each attempt
/// sets itself (`Host`).
#[derive(Debug, Clone, Default)]
pub struct Inbound {
    /// The names the request's `Connection` lists (rarely any).
    named: Vec<Vec<u8>>,
    /// A `Transfer-Encoding` framed the body (RFC 9112 section 6.3): a
    /// `Content-Length` beside it is a lie a backend might believe.
    chunked: bool,
    /// Nothing is filtered but the fields the gateway sets itself: for
    /// heads the gateway composes (health checks).
    open: bool,
    /// The request carries an `Idempotency-Key` (whether it passes is
    /// [`Inbound::idempotency_key`]'s to say).
    idempotency_key: bool,
    /// The client's own `x-forwarded-for` is dropped: the gateway replaces
    /// it, or sends none.
    drops_forwarded_for: bool,
    /// The request goes under a shard's path prefix: nothing may override
    /// its path.
    prefixed: bool,
    /// The gateway sends its own `x-request-id` ([`Added::request_id`]):
    /// the client's, in any spelling, does not pass.
    replaces_request_id: bool,
    /// The gateway sends its own `traceparent` ([`Added::traceparent`]),
    /// and the client's `tracestate` passes only beside a `traceparent`
    /// it continues ([`Inbound::trace`]).
    trace: TraceFields,
}

/// What of a client's trace context may pass, with `[tracing]` on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum TraceFields {
    /// Tracing is off: the client's fields pass as any other.
    #[default]
    Untouched,
    /// The gateway's `traceparent` replaces the client's, whose
    /// `tracestate` belongs to the same trace and passes with it.
    Continued,
    /// The gateway starts a trace of its own: neither passes.
    Replaced,
}

impl Inbound {
    /// The filter for a client's request `fields`, where the client's
    /// `x-forwarded-for` passes only if `forwarded_for` appends to it, and
    /// `prefixed` says the request goes under a shard's path prefix.
    pub fn new(fields: &Fields, forwarded_for: ForwardedFor, prefixed: bool) -> Self {
        // One look at the few names a request has: `Connection` and
        // `Transfer-Encoding` are rare.
        let (mut listed, mut chunked, mut idempotency_key) = (false, false, false);
        for (name, _) in fields.iter() {
            listed |= name.eq_ignore_ascii_case(b"connection");
            chunked |= name.eq_ignore_ascii_case(b"transfer-encoding");
            idempotency_key |= name.eq_ignore_ascii_case(IDEMPOTENCY_KEY);
        }
        let named = if listed {
            connection_named(
                fields
                    .iter()
                    .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"))
                    .map(|(_, value)| value),
            )
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect()
        } else {
            Vec::new()
        };
        Self {
            named,
            chunked,
            open: false,
            idempotency_key,
            drops_forwarded_for: forwarded_for != ForwardedFor::Append,
            prefixed,
            replaces_request_id: false,
            trace: TraceFields::Untouched,
        }
    }

    /// The gateway sends its own `x-request-id`: the client's, in every
    /// spelling a CGI-style backend reads alike, stays behind.
    pub fn replace_request_id(&mut self) {
        self.replaces_request_id = true;
    }

    /// The gateway sends its own `traceparent`: the client's never
    /// passes, nor its `tracestate` unless `keep_tracestate` (the client's
    /// trace is continued, `tracing.trust_incoming`, and its one
    /// `tracestate` is well formed).
    pub fn trace(&mut self, keep_tracestate: bool) {
        self.trace = if keep_tracestate {
            TraceFields::Continued
        } else {
            TraceFields::Replaced
        };
    }

    /// Whether the request carries an `Idempotency-Key` that reaches the
    /// shard: one the client named in `Connection` is hop-by-hop, so it
    /// cannot make the request safe to repeat either.
    pub fn idempotency_key(&self) -> bool {
        self.idempotency_key && self.forwards(IDEMPOTENCY_KEY)
    }

    /// No filtering but the fields the gateway sets itself.
    pub fn everything() -> Self {
        Self {
            open: true,
            ..Self::default()
        }
    }

    /// Whether a field (its name in any case) goes to the shard.
    pub fn forwards(&self, name: &[u8]) -> bool {
        if Added::replaces(name) {
            return false;
        }
        self.open
            || !(never_forwarded(name, &self.named)
                || name.eq_ignore_ascii_case(b"authorization")
                // In every spelling a CGI-style backend reads as it.
                || spelled_like(name, crate::trust::credential::API_KEY_HEADER.as_bytes())
                || spelled_like(name, b"x-forwarded-host")
                || describes_client_certificate(name)
                || (self.drops_forwarded_for && describes_client_origin(name))
                || (self.prefixed && overrides_path(name))
                || (self.replaces_request_id && spelled_like(name, b"x-request-id"))
                || (self.trace != TraceFields::Untouched && self.trace_field_stays(name))
                || (self.chunked && name.eq_ignore_ascii_case(b"content-length")))
    }
}

impl Inbound {
    /// Whether a client's trace context field stays behind (tracing on;
    /// out of line, so that `forwards` stays small while it is off).
    #[inline(never)]
    fn trace_field_stays(&self, name: &[u8]) -> bool {
        name.eq_ignore_ascii_case(TRACEPARENT.as_bytes())
            || (self.trace == TraceFields::Replaced
                && name.eq_ignore_ascii_case(TRACESTATE.as_bytes()))
    }
}

/// The client's `Host`, which goes out as `x-forwarded-host`.
pub fn client_host(fields: &Fields) -> Option<&[u8]> {
    fields.get("host")
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
pub fn outbound(fields: &Fields) -> impl Iterator<Item = (&[u8], &[u8])> {
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
    use http::HeaderMap;
    use http::header;

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
    fn client_certificate_fields_never_pass_in_any_spelling_or_mode() {
        let gone = [
            "x-forwarded-client-cert",
            "X-Forwarded-Client-Cert",
            "x_forwarded_client_cert",
            "x-client-cert",
            "X_Client_Cert",
            "x-client-cert-chain",
            "x-client-certificate",
            "ssl-client-cert",
            "SSL_CLIENT_CERT",
            "ssl-client-verify",
            "x-ssl-client-cert",
            "X-SSL-Client-Verify",
            "x_ssl_client_s_dn",
            "x-arr-clientcert",
            "X-ARR-ClientCert",
            "x-arr-ssl",
            "X-Forwarded-Tls-Client-Cert",
            "x-forwarded-tls-client-cert-info",
            "X-Amzn-Mtls-Clientcert",
            "x-amzn-mtls-clientcert-subject",
            "X-SSL-Cert",
            "x_ssl_subject",
            "x-ssl-issuer",
            "X-Client-Verify",
            "x-client-dn",
        ];
        for mode in [
            ForwardedFor::Append,
            ForwardedFor::Replace,
            ForwardedFor::Off,
        ] {
            let fields = Fields::default();
            let inbound = Inbound::new(&fields, mode, false);
            for name in gone {
                assert!(
                    !inbound.forwards(name.as_bytes()),
                    "{name} passed under {mode:?}"
                );
            }
            // Near misses are ordinary fields.
            for kept in [
                "x-ssl-client",
                "x-client",
                "ssl-client",
                "x-arr",
                "accept",
                "x-sslclient-cert",
            ] {
                assert!(inbound.forwards(kept.as_bytes()), "{kept} under {mode:?}");
            }
        }
    }

    #[test]
    fn a_clients_forwarded_host_never_passes_as_the_gateways() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-host", "victim.example".parse().unwrap());
        let headers = forwarded(headers, Some(&HeaderValue::from_static("acme")), None);
        assert!(headers.get("x-forwarded-host").is_none());
    }

    #[test]
    fn forwarding_settings_decide_what_a_shard_is_told_about_the_client() {
        let mut headers = HeaderMap::new();
        headers.insert("host", "gateway.example".parse().unwrap());
        headers.insert("x-forwarded-for", "6.6.6.6".parse().unwrap());
        let peer = forwarded_for("10.0.0.7".parse().unwrap());
        let told = |x_forwarded_for, x_forwarded_host| {
            let forwarding = ForwardingSettings {
                x_forwarded_for,
                x_forwarded_host,
            };
            let sent = forwarded_with(forwarding, headers.clone(), None, peer.as_ref());
            let list: Vec<_> = sent.get_all("x-forwarded-for").iter().cloned().collect();
            (list, sent.get("x-forwarded-host").cloned())
        };
        let (list, host) = told(ForwardedFor::Append, true);
        assert_eq!(list, ["6.6.6.6", "10.0.0.7"]);
        assert_eq!(host.unwrap(), "gateway.example");
        let (list, host) = told(ForwardedFor::Replace, false);
        assert_eq!(list, ["10.0.0.7"]);
        assert_eq!(host, None);
        let (list, host) = told(ForwardedFor::Off, true);
        assert!(list.is_empty(), "{list:?}");
        assert_eq!(host.unwrap(), "gateway.example");
    }

    /// A backend response head with these fields, parsed as the gateway
    /// reads one.
    fn backend_fields(fields: &[(&str, &str)]) -> Fields {
        let mut head = String::from("HTTP/1.1 200 OK\r\n");
        for (name, value) in fields {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut buf = bytes::BytesMut::from(head.as_bytes());
        // A HEAD answer: the fields' lengths, whatever they say, frame
        // nothing.
        crate::protocol::wire::parse_response_head(&mut buf, &http::Method::HEAD)
            .unwrap()
            .unwrap()
            .fields
    }

    /// What of a backend's fields reaches the client, as a header map.
    fn passed(fields: &Fields) -> HeaderMap {
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
        headers: HeaderMap,
        tenant: Option<&HeaderValue>,
        forwarded_for: Option<&HeaderValue>,
    ) -> HeaderMap {
        forwarded_with(DEFAULT_FORWARDING, headers, tenant, forwarded_for)
    }

    /// The forwarding settings a configuration without `[forwarding]` has.
    const DEFAULT_FORWARDING: ForwardingSettings = ForwardingSettings {
        x_forwarded_for: ForwardedFor::Append,
        x_forwarded_host: true,
    };

    /// [`forwarded`] under other forwarding settings.
    fn forwarded_with(
        forwarding: ForwardingSettings,
        headers: HeaderMap,
        tenant: Option<&HeaderValue>,
        client_address: Option<&HeaderValue>,
    ) -> HeaderMap {
        let fields = Fields::from_header_map(&headers);
        let inbound = Inbound::new(&fields, forwarding.x_forwarded_for, false);
        let head = crate::protocol::wire::RequestHead {
            method: &http::Method::GET,
            target: "/",
            fields: &fields,
            inbound: &inbound,
            stated: None,
            added: Added::new(&forwarding, &fields, client_address, tenant),
            host: None,
            shard: None,
        };
        let mut wire = Vec::new();
        crate::protocol::wire::encode_request_head(
            &mut wire,
            &head,
            crate::protocol::wire::RequestFraming::Length,
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
    fn inbound_reference(
        forwarding: ForwardingSettings,
        headers: &mut HeaderMap,
        tenant: &str,
        peer: &str,
    ) {
        if headers.contains_key(header::TRANSFER_ENCODING) {
            headers.remove(header::CONTENT_LENGTH);
        }
        outbound_reference(headers);
        headers.remove(header::AUTHORIZATION);
        let api_keys: Vec<HeaderName> = headers
            .keys()
            .filter(|name| name.as_str().replace('_', "-") == "x-api-key")
            .cloned()
            .collect();
        for name in api_keys {
            headers.remove(name);
        }
        // Every spelling a CGI-style backend reads as the gateway's own.
        let look_alikes: Vec<HeaderName> = headers
            .keys()
            .filter(|name| {
                let name = name.as_str().replace('_', "-");
                let origin = [
                    "x-forwarded-for",
                    "forwarded",
                    "x-real-ip",
                    "true-client-ip",
                    "x-forwarded-proto",
                    "x-forwarded-port",
                    "x-forwarded-prefix",
                    "x-client-ip",
                    "cf-connecting-ip",
                    "fastly-client-ip",
                    "x-cluster-client-ip",
                    "x-forwarded-scheme",
                    "x-forwarded-ssl",
                    "x-forwarded-server",
                    "x-forwarded-protocol",
                    "x-original-host",
                    "x-host",
                    "front-end-https",
                    "x-envoy-external-address",
                    "client-ip",
                    "x-original-forwarded-for",
                    "x-forwarded-uri",
                    "wl-proxy-client-ip",
                    "proxy-client-ip",
                    "x-azure-clientip",
                    "x-original-url",
                    "x-rewrite-url",
                ];
                let certificate = ["x-forwarded-client-cert", "x-arr-clientcert", "x-arr-ssl"];
                let certificate_prefixes = ["x-ssl-client-", "ssl-client-", "x-client-cert"];
                name == "x-forwarded-host"
                    || certificate.contains(&name.as_str())
                    || certificate_prefixes
                        .iter()
                        .any(|prefix| name.starts_with(prefix))
                    || (origin.contains(&name.as_str())
                        && forwarding.x_forwarded_for != ForwardedFor::Append)
            })
            .cloned()
            .collect();
        for name in look_alikes {
            headers.remove(name);
        }
        if let Some(host) = headers.remove(header::HOST)
            && forwarding.x_forwarded_host
        {
            headers.insert(FORWARDED_HOST, host);
        }
        match forwarding.x_forwarded_for {
            ForwardedFor::Append => {
                headers.append(FORWARDED_FOR, HeaderValue::from_str(peer).unwrap());
            }
            ForwardedFor::Replace => {
                headers.insert(FORWARDED_FOR, HeaderValue::from_str(peer).unwrap());
            }
            ForwardedFor::Off => {
                headers.remove(FORWARDED_FOR);
            }
        }
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
            Just("X_Api_Key".to_owned()),
            Just("connection".to_owned()),
            Just("keep-alive".to_owned()),
            Just("transfer-encoding".to_owned()),
            Just("content-length".to_owned()),
            Just("te".to_owned()),
            Just("upgrade".to_owned()),
            Just("x-forwarded-host".to_owned()),
            Just("x-forwarded-for".to_owned()),
            Just("X_Forwarded_Host".to_owned()),
            Just("x_forwarded-for".to_owned()),
            Just("Forwarded".to_owned()),
            Just("X_Real_IP".to_owned()),
            Just("true-client-ip".to_owned()),
            Just("x-forwarded-proto".to_owned()),
            Just("X-Forwarded_Port".to_owned()),
            Just("x-forwarded-prefix".to_owned()),
            Just("CF-Connecting-IP".to_owned()),
            Just("x_original_url".to_owned()),
            Just("X-Forwarded-Client-Cert".to_owned()),
            Just("x_ssl_client_s_dn".to_owned()),
            Just("SSL_CLIENT_CERT".to_owned()),
            Just("x-client-cert-chain".to_owned()),
            Just("X-ARR-ClientCert".to_owned()),
            Just("x-client-certs".to_owned()),
            Just("x-ssl-client".to_owned()),
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

    fn forwarding_settings() -> impl proptest::strategy::Strategy<Value = ForwardingSettings> {
        use proptest::prelude::*;
        let mode = prop_oneof![
            Just(ForwardedFor::Append),
            Just(ForwardedFor::Replace),
            Just(ForwardedFor::Off),
        ];
        (mode, any::<bool>()).prop_map(|(x_forwarded_for, x_forwarded_host)| ForwardingSettings {
            x_forwarded_for,
            x_forwarded_host,
        })
    }

    proptest::proptest! {
        #[test]
        fn one_pass_hygiene_equals_the_reference(
            list in header_list(),
            forwarding in forwarding_settings(),
        ) {
            let mut headers = HeaderMap::new();
            for (name, value) in &list {
                headers.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            let mut reference = headers.clone();
            let fast = forwarded_with(
                forwarding,
                headers.clone(),
                Some(&HeaderValue::from_static("acme")),
                forwarded_for("10.0.0.7".parse().unwrap()).as_ref(),
            );
            inbound_reference(forwarding, &mut reference, "acme", "10.0.0.7");
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

    #[test]
    fn a_clients_request_id_is_kept_only_when_valid() {
        let fields_with = |values: &[&[u8]]| {
            let values: Vec<(&str, &str)> = values
                .iter()
                .map(|value| ("X-Request-Id", std::str::from_utf8(value).unwrap()))
                .collect();
            backend_fields(&values)
        };
        let generated =
            |id: &HeaderValue| id.len() == 32 && id.as_bytes().iter().all(u8::is_ascii_hexdigit);
        let longest = vec![b'a'; MAX_REQUEST_ID];
        for kept in [&b"abc-123"[..], b"~!#$%&'*+.^_`|", &longest] {
            assert_eq!(request_id(&fields_with(&[kept])).as_bytes(), kept);
        }
        let too_long = vec![b'a'; MAX_REQUEST_ID + 1];
        for refused in [
            &[&b"has space"[..]][..],
            &[b"tab\there"],
            &[&too_long],
            &[b"a", b"b"],
            &[],
        ] {
            let id = request_id(&fields_with(refused));
            assert!(generated(&id), "{refused:?} gave {id:?}");
        }
        // Fresh ids differ.
        assert_ne!(request_id(&fields_with(&[])), request_id(&fields_with(&[])));
    }

    #[test]
    fn the_gateways_request_id_replaces_the_clients_in_every_spelling() {
        let fields = backend_fields(&[("x-request-id", "theirs"), ("X_Request_Id", "also")]);
        let mut inbound = Inbound::new(&fields, ForwardedFor::Append, false);
        assert!(inbound.forwards(b"x-request-id"));
        inbound.replace_request_id();
        for name in [&b"x-request-id"[..], b"X-REQUEST-ID", b"x_request_id"] {
            assert!(!inbound.forwards(name), "{name:?}");
        }
        assert!(inbound.forwards(b"x-request-ids"));
    }

    #[test]
    fn trailers_cross_the_same_boundary_as_headers() {
        let mut trailers = HeaderMap::new();
        for (name, value) in [
            ("x-shuffle-tenant", "victim"),
            ("x_shuffle_shard", "s9"),
            ("authorization", "Bearer stolen"),
            ("x-api-key", "k"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x_real_ip", "6.6.6.6"),
            ("content-length", "5"),
            ("host", "evil"),
            ("connection", "close"),
            ("x-checksum", "abc"),
        ] {
            trailers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        trailers.append("x-checksum", "def".parse().unwrap());
        let fields = Fields::default();
        // Even when the client's x-forwarded-for list is kept.
        let inbound = Inbound::new(&fields, ForwardedFor::Append, false);
        let kept = filter_trailers(trailers.clone(), |name| {
            request_trailer_passes(&inbound, name)
        });
        assert_eq!(
            kept.get_all("x-checksum").iter().collect::<Vec<_>>(),
            ["abc", "def"]
        );
        assert_eq!(kept.len(), 2, "{kept:?}");
        let kept = filter_trailers(trailers, response_trailer_passes);
        for gone in [
            "x-shuffle-tenant",
            "x_shuffle_shard",
            "content-length",
            "host",
            "connection",
        ] {
            assert!(!kept.contains_key(gone), "{gone} passed");
        }
        assert!(kept.contains_key("x-checksum"));
    }
}
