//! Finding the credential in a request: `Authorization: Bearer <credential>`
//! or `x-api-key: <key>`, and telling an API key from a JWT.
//!
//! Nothing here checks a credential; it only takes it out of the headers
//! without ever copying it into an error, a log line or `Debug` output.

use http::HeaderMap;

use thiserror::Error;

use crate::syntax::fields::Fields;

/// Why a request was not authenticated. Every variant answers 401.
///
/// No variant holds any part of the credential; reasons are fixed text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuthError {
    /// No `Authorization` or `x-api-key` header.
    #[error("no credential was sent")]
    Missing,
    /// The credential headers could not be read.
    #[error("malformed credential: {reason}")]
    Malformed {
        /// What is wrong, in words that never include the credential.
        reason: &'static str,
    },
    /// No tenant has this API key.
    #[error("unknown API key")]
    UnknownKey,
    /// The JWT is not well formed, its signature or algorithm is wrong, or a
    /// claim has the wrong type.
    #[error("invalid token: {reason}")]
    InvalidToken {
        /// What is wrong, in words that never include the token.
        reason: &'static str,
    },
    /// The JWT's `exp` has passed.
    #[error("the token has expired")]
    Expired,
    /// The JWT's `nbf` is in the future.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// The JWT's `iss` is missing or not the configured issuer.
    #[error("the token's issuer is missing or not accepted")]
    WrongIssuer,
    /// The JWT's `aud` is missing or does not include the configured
    /// audience.
    #[error("the token's audience is missing or not accepted")]
    WrongAudience,
    /// The JWT has no string in the configured tenant claim.
    #[error("the token has no string claim {claim:?} naming the tenant")]
    MissingTenantClaim {
        /// The configured claim name (from the configuration, not the token).
        claim: String,
    },
    /// The JWT names a tenant that is not in the tenants file.
    #[error("the token names tenant {tenant:?}, which is not in the tenants file")]
    UnknownTenant {
        /// The tenant id from the verified token: for the operator's log,
        /// never for the client (see [`AuthError::public_message`]).
        tenant: String,
    },
    /// The verified client certificate names no tenant by
    /// `auth.mtls.tenant_from`.
    #[error("the client certificate names no tenant by auth.mtls.tenant_from")]
    CertificateNamesNoTenant,
    /// The verified client certificate names a tenant that is not in the
    /// tenants file (removed, which revokes its certificates, or never
    /// added).
    #[error("the client certificate names tenant {tenant:?}, which is not in the tenants file")]
    UnknownCertificateTenant {
        /// The tenant id from the certificate: for the operator's log only.
        tenant: String,
    },
    /// The request's credential and its connection's client certificate
    /// name different tenants.
    #[error("the credential and the client certificate name different tenants")]
    CertificateMismatch,
}

impl AuthError {
    /// A short message that is safe to send in the 401 body: no credential,
    /// and no tenant id (so a client with a validly signed token cannot
    /// probe which tenants exist).
    pub fn public_message(&self) -> &'static str {
        match self {
            Self::Missing => {
                "missing credential: send Authorization: Bearer <credential> or x-api-key"
            }
            // The reasons are fixed text written for the client.
            Self::Malformed { reason } => reason,
            Self::UnknownKey => "invalid credential",
            Self::InvalidToken { .. } => "invalid token",
            Self::Expired => "token expired",
            Self::NotYetValid => "token not yet valid",
            Self::WrongIssuer => "token issuer not accepted",
            Self::WrongAudience => "token audience not accepted",
            Self::MissingTenantClaim { .. } => "token names no tenant",
            Self::UnknownTenant { .. } => "unknown tenant",
            Self::CertificateNamesNoTenant => "client certificate names no tenant",
            Self::UnknownCertificateTenant { .. } => "unknown tenant",
            Self::CertificateMismatch => {
                "the credential and the client certificate name different tenants"
            }
        }
    }

    /// A stable, low-cardinality name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed { .. } => "malformed",
            Self::UnknownKey => "unknown_key",
            Self::InvalidToken { .. } => "invalid_token",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::WrongIssuer => "wrong_issuer",
            Self::WrongAudience => "wrong_audience",
            Self::MissingTenantClaim { .. } => "missing_tenant_claim",
            Self::UnknownTenant { .. } => "unknown_tenant",
            Self::CertificateNamesNoTenant => "certificate_names_no_tenant",
            Self::UnknownCertificateTenant { .. } => "unknown_certificate_tenant",
            Self::CertificateMismatch => "certificate_mismatch",
        }
    }
}

/// The header an API key may come in instead of `Authorization`.
pub const API_KEY_HEADER: &str = "x-api-key";

/// A credential's text. It has no `Display`, and its `Debug` is redacted, so
/// formatting a request, a credential or an error cannot leak it; the only
/// way to the text is [`Secret::expose`], which is easy to search for.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential's text.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The credential's text, for the code that verifies it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A credential as presented, not yet verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// An opaque API key, looked up by its SHA-256 digest.
    ApiKey(Secret),
    /// A JSON Web Token, verified against the configured key.
    Jwt(Secret),
}

impl Credential {
    /// The credential, borrowed.
    pub fn presented(&self) -> Presented<'_> {
        match self {
            Credential::ApiKey(key) => Presented::ApiKey(key.expose()),
            Credential::Jwt(token) => Presented::Jwt(token.expose()),
        }
    }
}

/// A credential as presented, borrowed from the request's fields: what the
/// request path reads, with no copy of the secret per request. It has no
/// `Debug`, so it cannot be formatted into a log.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Presented<'a> {
    /// An opaque API key.
    ApiKey(&'a str),
    /// A JSON Web Token.
    Jwt(&'a str),
}

impl<'a> Presented<'a> {
    /// The API key this credential is, if it is one: an opaque key, or a
    /// JWT-shaped bearer when JWTs are not verified (`jwt_enabled` false),
    /// which is then an opaque key too.
    pub fn api_key(self, jwt_enabled: bool) -> Option<&'a str> {
        match self {
            Presented::ApiKey(key) => Some(key),
            Presented::Jwt(key) if !jwt_enabled => Some(key),
            Presented::Jwt(_) => None,
        }
    }

    /// An owned copy.
    pub fn to_credential(self) -> Credential {
        match self {
            Presented::ApiKey(key) => Credential::ApiKey(Secret::new(key)),
            Presented::Jwt(token) => Credential::Jwt(Secret::new(token)),
        }
    }
}

/// Takes the credential out of the request headers.
///
/// Exactly one credential must be sent: one `Authorization: Bearer …`
/// header or one `x-api-key` header. Two of anything is refused rather than
/// resolved, because proxies and servers disagree on which duplicate wins,
/// and a credential that means different things to different hops is how
/// request smuggling starts.
///
/// A bearer credential shaped like a JWT is a [`Credential::Jwt`] when
/// `jwt_enabled`, and an API key otherwise; `x-api-key` is always an API key
/// (so an API key that happens to look like a JWT can still be sent there).
pub fn extract(fields: &Fields, jwt_enabled: bool) -> Result<Credential, AuthError> {
    present(fields, jwt_enabled).map(Presented::to_credential)
}

/// [`extract`], borrowing the credential from `fields`.
pub fn present(fields: &Fields, jwt_enabled: bool) -> Result<Presented<'_>, AuthError> {
    // One pass over the few fields a request has; names in any case.
    let (mut authorization, mut api_key) = (None, None);
    for (name, value) in fields.iter() {
        if name.eq_ignore_ascii_case(b"authorization") {
            if authorization.replace(value).is_some() {
                return Err(malformed("send one Authorization header, not several"));
            }
        } else if name.eq_ignore_ascii_case(API_KEY_HEADER.as_bytes())
            && api_key.replace(value).is_some()
        {
            return Err(malformed("send one x-api-key header, not several"));
        }
    }
    match (authorization, api_key) {
        (None, None) => Err(AuthError::Missing),
        (Some(_), Some(_)) => Err(malformed(
            "send one credential: Authorization or x-api-key, not both",
        )),
        (Some(value), None) => {
            let token = bearer_token(value)?;
            if jwt_enabled && looks_like_jwt(token) {
                Ok(Presented::Jwt(token))
            } else {
                Ok(Presented::ApiKey(token))
            }
        }
        (None, Some(value)) => {
            let key = trim_ows(value);
            if key.is_empty() {
                return Err(malformed("the x-api-key header is empty"));
            }
            let key = visible_ascii(key)
                .ok_or_else(|| malformed("the x-api-key header must be visible ASCII"))?;
            Ok(Presented::ApiKey(key))
        }
    }
}

/// [`extract`] from a header map.
pub fn extract_from_map(headers: &HeaderMap, jwt_enabled: bool) -> Result<Credential, AuthError> {
    extract(&Fields::from_header_map(headers), jwt_enabled)
}

fn malformed(reason: &'static str) -> AuthError {
    AuthError::Malformed { reason }
}

/// The credential of an `Authorization: Bearer <credential>` value.
fn bearer_token(value: &[u8]) -> Result<&str, AuthError> {
    let value = trim_ows(value);
    // The scheme ends at the first space (RFC 9110 §11.4: credentials =
    // auth-scheme [ 1*SP token68 ]); the scheme name is case-insensitive.
    let (scheme, rest) = match value.iter().position(|&b| b == b' ') {
        Some(at) => (&value[..at], &value[at..]),
        None => (value, &[][..]),
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(malformed(
            "use the Bearer scheme: Authorization: Bearer <credential>",
        ));
    }
    let token = trim_ows(rest);
    if token.is_empty() {
        return Err(malformed("the Bearer credential is empty"));
    }
    // Visible ASCII only, so no space inside: `Bearer a b` is one
    // credential to one parser and two words to another.
    visible_ascii(token)
        .ok_or_else(|| malformed("the Bearer credential must be one word of visible ASCII"))
}

/// `bytes` as text when every byte is visible ASCII (`!` to `~`).
fn visible_ascii(bytes: &[u8]) -> Option<&str> {
    if bytes.iter().all(|b| (b'!'..=b'~').contains(b)) {
        // Visible ASCII is UTF-8, so this cannot fail.
        std::str::from_utf8(bytes).ok()
    } else {
        None
    }
}

/// Strips optional whitespace (spaces and tabs) from both ends.
fn trim_ows(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// Whether `token` has a JWS compact serialisation's shape: three base64url
/// segments joined by dots, header and payload non-empty. The signature may
/// be empty so that an unsigned (`alg: none`) token is still treated as a
/// JWT and refused as one, with the reason saying so.
fn looks_like_jwt(token: &str) -> bool {
    let mut segments = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) else {
        return false;
    };
    let base64url = |segment: &str| {
        segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    !header.is_empty()
        && !payload.is_empty()
        && base64url(header)
        && base64url(payload)
        && base64url(signature)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhY21lIn0.c2lnbmF0dXJl";

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    fn reason(result: Result<Credential, AuthError>) -> &'static str {
        match result {
            Err(AuthError::Malformed { reason }) => reason,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn bearer_api_key() {
        let h = headers(&[("authorization", b"Bearer sk_live_123")]);
        assert_eq!(
            extract_from_map(&h, true).unwrap(),
            Credential::ApiKey(Secret::new("sk_live_123"))
        );
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_whitespace_tolerant() {
        for value in [
            &b"bearer key1"[..],
            b"BEARER key1",
            b"BeArEr   key1",
            b"  Bearer key1\t",
        ] {
            let h = headers(&[("authorization", value)]);
            assert_eq!(
                extract_from_map(&h, false).unwrap(),
                Credential::ApiKey(Secret::new("key1")),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn x_api_key() {
        let h = headers(&[("x-api-key", b"key-2")]);
        assert_eq!(
            extract_from_map(&h, true).unwrap(),
            Credential::ApiKey(Secret::new("key-2"))
        );
    }

    #[test]
    fn jwt_shaped_bearer_is_a_jwt_only_when_enabled() {
        let value = format!("Bearer {JWT}");
        let h = headers(&[("authorization", value.as_bytes())]);
        assert_eq!(
            extract_from_map(&h, true).unwrap(),
            Credential::Jwt(Secret::new(JWT))
        );
        assert_eq!(
            extract_from_map(&h, false).unwrap(),
            Credential::ApiKey(Secret::new(JWT))
        );
    }

    #[test]
    fn x_api_key_is_never_a_jwt() {
        let h = headers(&[("x-api-key", JWT.as_bytes())]);
        assert_eq!(
            extract_from_map(&h, true).unwrap(),
            Credential::ApiKey(Secret::new(JWT))
        );
    }

    #[test]
    fn unsigned_token_is_still_a_jwt() {
        let h = headers(&[(
            "authorization",
            b"Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.",
        )]);
        assert!(matches!(
            extract_from_map(&h, true).unwrap(),
            Credential::Jwt(_)
        ));
    }

    #[test]
    fn jwt_shape() {
        assert!(looks_like_jwt(JWT));
        assert!(looks_like_jwt("a.b."));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt(".b.c"));
        assert!(!looks_like_jwt("a..c"));
        assert!(!looks_like_jwt("a+b.c.d"));
        assert!(!looks_like_jwt("a.b=.c"));
        assert!(!looks_like_jwt(""));
    }

    #[test]
    fn missing() {
        assert!(matches!(
            extract_from_map(&HeaderMap::new(), true),
            Err(AuthError::Missing)
        ));
        let h = headers(&[("cookie", b"session=1")]);
        assert!(matches!(
            extract_from_map(&h, true),
            Err(AuthError::Missing)
        ));
    }

    #[test]
    fn two_authorization_headers() {
        let h = headers(&[
            ("authorization", b"Bearer a"),
            ("authorization", b"Bearer a"),
        ]);
        assert!(reason(extract_from_map(&h, true)).contains("one Authorization"));
    }

    #[test]
    fn two_api_key_headers() {
        let h = headers(&[("x-api-key", b"a"), ("x-api-key", b"b")]);
        assert!(reason(extract_from_map(&h, true)).contains("one x-api-key"));
    }

    #[test]
    fn both_headers() {
        let h = headers(&[("authorization", b"Bearer a"), ("x-api-key", b"a")]);
        assert!(reason(extract_from_map(&h, true)).contains("send one credential"));
    }

    #[test]
    fn other_scheme() {
        for value in [
            &b"Basic dXNlcjpwYXNz"[..],
            b"Token abc",
            b"Bearerabc",
            b"abc",
        ] {
            let h = headers(&[("authorization", value)]);
            assert!(reason(extract_from_map(&h, true)).contains("Bearer scheme"));
        }
    }

    #[test]
    fn empty_credentials() {
        for value in [&b"Bearer"[..], b"Bearer ", b"Bearer \t ", b""] {
            let h = headers(&[("authorization", value)]);
            assert!(matches!(
                extract_from_map(&h, true),
                Err(AuthError::Malformed { .. })
            ));
        }
        let h = headers(&[("x-api-key", b"")]);
        assert!(reason(extract_from_map(&h, true)).contains("empty"));
        let h = headers(&[("x-api-key", b"   ")]);
        assert!(reason(extract_from_map(&h, true)).contains("empty"));
    }

    #[test]
    fn not_visible_ascii() {
        let secret = "s3cr3t-\u{e9}t\u{e9}";
        let bearer = format!("Bearer {secret}");
        for (name, value) in [
            ("authorization", bearer.as_bytes()),
            ("authorization", b"Bearer two words"),
            ("authorization", b"Bearer a\tb"),
            ("authorization", b"Bearer \xff\xfe"),
            ("x-api-key", secret.as_bytes()),
            ("x-api-key", b"two words"),
            ("x-api-key", b"\x80abc"),
        ] {
            let h = headers(&[(name, value)]);
            let error = extract_from_map(&h, true).unwrap_err();
            assert!(matches!(error, AuthError::Malformed { .. }), "{error:?}");
            let shown = format!("{error} {error:?} {}", error.public_message());
            assert!(!shown.contains("s3cr3t"), "{shown}");
            assert!(!shown.contains("words"), "{shown}");
        }
    }

    #[test]
    fn no_credential_in_any_output() {
        let secret = "sk_live_TOPSECRET_0123456789";
        let credential = Credential::ApiKey(Secret::new(secret));
        assert!(!format!("{credential:?}").contains("TOPSECRET"));
        assert!(!format!("{:?}", Credential::Jwt(Secret::new(secret))).contains("TOPSECRET"));
        assert!(!format!("{:#?}", Secret::new(secret)).contains("TOPSECRET"));
        // Every refusal, for a request that carries the secret somewhere.
        let bearer = format!("Bearer {secret}");
        let other = format!("Basic {secret}");
        let cases: [&[(&str, &[u8])]; 4] = [
            &[
                ("authorization", bearer.as_bytes()),
                ("authorization", bearer.as_bytes()),
            ],
            &[
                ("x-api-key", secret.as_bytes()),
                ("x-api-key", secret.as_bytes()),
            ],
            &[
                ("authorization", bearer.as_bytes()),
                ("x-api-key", secret.as_bytes()),
            ],
            &[("authorization", other.as_bytes())],
        ];
        for case in cases {
            let error = extract_from_map(&headers(case), true).unwrap_err();
            let shown = format!("{error} {error:?} {error:#?} {}", error.public_message());
            assert!(!shown.contains("TOPSECRET"), "{shown}");
        }
    }
}
