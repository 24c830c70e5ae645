//! Authentication: from a presented credential to the tenant it belongs to.
//!
//! Two kinds of credential are accepted. An API key is hashed with SHA-256
//! and looked up among the digests in the tenants file. A JWT is verified
//! against the one algorithm and key the configuration names, its
//! `exp`/`nbf`/`iss`/`aud` are checked, and a configured claim names the
//! tenant, which must be in the tenants file.
//!
//! Errors carry no part of the credential: they are built from fixed text,
//! so an error can be logged or shown without leaking what was presented.

use std::path::{Path, PathBuf};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

use crate::config::JwtSettings;
use crate::syntax::fields::Fields;
use crate::tenants::{Tenant, Tenants};
use crate::trust::client_cert::CertificateTenant;
pub use crate::trust::credential::AuthError;
use crate::trust::credential::{self, Credential, Presented};

/// The shortest HS256 secret accepted: the hash's own size (RFC 7518 §3.2
/// requires a key at least as long as the HMAC output).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// The smallest RSA modulus accepted for RS256 (RFC 7518 §3.3; NIST
/// SP 800-131A retired smaller keys).
pub const MIN_RSA_BITS: usize = 2048;

/// Clock skew tolerated on `exp` and `nbf`, in seconds. The issuer and the
/// gateway are expected to run NTP, which keeps hosts well within a second;
/// jsonwebtoken's default of 60 s would keep an expired token usable for a
/// whole minute, while 5 s only absorbs the skew that does happen.
pub const LEEWAY_SECONDS: u64 = 5;

/// Why JWT verification could not be set up. Messages name the key file,
/// never its contents.
#[derive(Debug, Error)]
pub enum AuthSetupError {
    /// The key file could not be read.
    #[error("{}: cannot read the JWT key file: {source}", path.display())]
    ReadKey {
        /// The key file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The HS256 secret is too short to resist guessing.
    #[error(
        "{}: the HS256 secret is {len} bytes; use at least {MIN_HS256_SECRET_BYTES} random bytes (head -c 32 /dev/urandom > {})",
        path.display(),
        path.display()
    )]
    SecretTooShort {
        /// The key file.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// The RSA key is too small.
    #[error(
        "{}: the RSA key is {bits} bits; use at least {MIN_RSA_BITS}",
        path.display()
    )]
    RsaKeyTooSmall {
        /// The key file.
        path: PathBuf,
        /// The modulus size.
        bits: usize,
    },
    /// The key file does not hold a usable key for the algorithm.
    #[error("{}: {problem}", path.display())]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong, in fixed words.
        problem: &'static str,
    },
    /// The configuration names an algorithm this gateway does not verify.
    #[error("JWT algorithm {0:?} is not supported; use HS256, RS256 or ES256")]
    UnsupportedAlgorithm(Algorithm),
}

/// Verifies credentials and finds their tenant. Built once at start (and on
/// reload), then shared by every request.
pub struct Authenticator {
    jwt: Option<JwtVerifier>,
}

struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
    tenant_claim: String,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("Authenticator");
        match &self.jwt {
            Some(jwt) => out
                .field("jwt_algorithms", &jwt.validation.algorithms)
                .field("jwt_issuer", &jwt.validation.iss)
                .field("jwt_audience", &jwt.validation.aud)
                .field("jwt_tenant_claim", &jwt.tenant_claim)
                .field("jwt_key", &"<redacted>"),
            None => out.field("jwt", &"disabled"),
        };
        out.finish()
    }
}

impl Authenticator {
    /// Builds the authenticator, reading and checking the JWT key file when
    /// JWT authentication is configured. API keys need no setup: their
    /// digests live in the tenants file.
    pub fn new(jwt: Option<&JwtSettings>) -> Result<Self, AuthSetupError> {
        let jwt = jwt.map(JwtVerifier::new).transpose()?;
        Ok(Self { jwt })
    }

    /// Whether JWTs are verified; pass this to [`credential::extract`].
    pub fn jwt_enabled(&self) -> bool {
        self.jwt.is_some()
    }

    /// Extracts the credential from request headers and authenticates it.
    pub fn authenticate_headers<'t>(
        &self,
        headers: &http::HeaderMap,
        tenants: &'t Tenants,
    ) -> Result<Tenant<'t>, AuthError> {
        let credential = credential::extract_from_map(headers, self.jwt_enabled())?;
        self.authenticate(&credential, tenants)
    }

    /// The tenant of a request that came with a verified client
    /// certificate: the one the certificate names, which must be in the
    /// tenants file. A credential sent as well must name the same tenant.
    pub fn authenticate_with_certificate<'t>(
        &self,
        certificate: &CertificateTenant,
        fields: &Fields,
        tenants: &'t Tenants,
    ) -> Result<Tenant<'t>, AuthError> {
        let CertificateTenant::Named(id) = certificate else {
            return Err(AuthError::CertificateNamesNoTenant);
        };
        let by_certificate = tenants
            .get(id)
            .ok_or_else(|| AuthError::UnknownCertificateTenant { tenant: id.clone() })?;
        match credential::extract(fields, self.jwt_enabled()) {
            Err(AuthError::Missing) => Ok(by_certificate),
            Err(error) => Err(error),
            Ok(credential) => {
                let by_credential = self.authenticate(&credential, tenants)?;
                if by_credential.slot() == by_certificate.slot() {
                    Ok(by_certificate)
                } else {
                    Err(AuthError::CertificateMismatch)
                }
            }
        }
    }

    /// The tenant a credential belongs to.
    pub fn authenticate<'t>(
        &self,
        credential: &Credential,
        tenants: &'t Tenants,
    ) -> Result<Tenant<'t>, AuthError> {
        self.authenticate_presented(credential.presented(), tenants)
    }

    /// The tenant a borrowed credential belongs to.
    pub fn authenticate_presented<'t>(
        &self,
        credential: Presented<'_>,
        tenants: &'t Tenants,
    ) -> Result<Tenant<'t>, AuthError> {
        match (credential, &self.jwt) {
            (Presented::Jwt(token), Some(jwt)) => jwt.verify(token, tenants),
            // Without JWT configuration a JWT-shaped bearer is just an
            // opaque key, as `extract` would have classified it.
            (Presented::Jwt(key), None) | (Presented::ApiKey(key), _) => by_api_key(key, tenants),
        }
    }
}

/// The tenant whose API key this is.
///
/// The map lookup is keyed by the SHA-256 of the presented key, so whatever
/// its timing reveals is about that digest, and an attacker cannot choose
/// digests: walking a stored digest byte by byte would need preimages of
/// SHA-256, and a known digest still does not give the key. (The map
/// hashes nothing itself: its buckets are chosen and sorted by bytes of
/// that digest, see `tenants::registry`.) The constant-time comparison after
/// the lookup is what authenticates: it makes the decision on the full
/// 32 bytes whatever index found the record.
fn by_api_key<'t>(key: &str, tenants: &'t Tenants) -> Result<Tenant<'t>, AuthError> {
    let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    let record = tenants
        .by_key_digest(&digest)
        .ok_or(AuthError::UnknownKey)?;
    let stored = record.api_key_sha256().ok_or(AuthError::UnknownKey)?;
    if bool::from(stored.ct_eq(&digest)) {
        Ok(record)
    } else {
        Err(AuthError::UnknownKey)
    }
}

impl JwtVerifier {
    fn new(settings: &JwtSettings) -> Result<Self, AuthSetupError> {
        let path = &settings.key_file;
        let bytes = std::fs::read(path).map_err(|source| AuthSetupError::ReadKey {
            path: path.clone(),
            source,
        })?;
        let bad = |problem: &'static str| AuthSetupError::BadKey {
            path: path.clone(),
            problem,
        };
        let key = match settings.algorithm {
            Algorithm::HS256 => hmac_key(path, &bytes)?,
            Algorithm::RS256 => {
                refuse_private(&bytes).map_err(bad)?;
                let key = DecodingKey::from_rsa_pem(&bytes).map_err(|_| {
                    bad("not an RSA public key in PEM (BEGIN PUBLIC KEY or BEGIN RSA PUBLIC KEY)")
                })?;
                check_rsa(path, &key)?;
                key
            }
            Algorithm::ES256 => {
                refuse_private(&bytes).map_err(bad)?;
                let key = DecodingKey::from_ec_pem(&bytes)
                    .map_err(|_| bad("not an EC public key in PEM (BEGIN PUBLIC KEY)"))?;
                // PEM parsing only unwraps the point; building a verifier
                // is what checks it is on P-256. Verifying a dummy signature
                // does that at start, so a wrong key is a startup error and
                // not a 401 on every request.
                jsonwebtoken::crypto::verify("", b"probe", &key, Algorithm::ES256)
                    .map_err(|_| bad("not a P-256 public key, as ES256 needs"))?;
                key
            }
            other => return Err(AuthSetupError::UnsupportedAlgorithm(other)),
        };

        // Only the configured algorithm is accepted: a token's `alg` header
        // chooses nothing, which is what defeats `alg: none` and
        // HS256-signed-with-the-RSA-public-key confusion.
        let mut validation = Validation::new(settings.algorithm);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        // jsonwebtoken checks `iss` and `aud` only when present, so a
        // configured issuer or audience must also be required, or a token
        // that simply leaves the claim out would pass.
        let mut required = vec!["exp"];
        if let Some(issuer) = &settings.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        match &settings.audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            // With no audience configured the gateway has no name to look
            // for, and identity providers commonly set `aud` anyway.
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);

        Ok(Self {
            key,
            validation,
            tenant_claim: settings.tenant_claim.clone(),
        })
    }

    fn verify<'t>(&self, token: &str, tenants: &'t Tenants) -> Result<Tenant<'t>, AuthError> {
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &self.key,
            &self.validation,
        )
        .map_err(|error| token_error(error.kind()))?;
        let tenant = match data.claims.get(&self.tenant_claim) {
            Some(serde_json::Value::String(tenant)) if !tenant.is_empty() => tenant,
            _ => {
                return Err(AuthError::MissingTenantClaim {
                    claim: self.tenant_claim.clone(),
                });
            }
        };
        tenants.get(tenant).ok_or_else(|| AuthError::UnknownTenant {
            tenant: tenant.clone(),
        })
    }
}

/// The HS256 key: the file's bytes exactly, with no newline trimmed (the
/// issuer signs with the same bytes).
fn hmac_key(path: &Path, bytes: &[u8]) -> Result<DecodingKey, AuthSetupError> {
    if bytes.len() < MIN_HS256_SECRET_BYTES {
        return Err(AuthSetupError::SecretTooShort {
            path: path.to_owned(),
            len: bytes.len(),
        });
    }
    DecodingKey::from_secret(bytes).map_err(|_| AuthSetupError::BadKey {
        path: path.to_owned(),
        problem: "not a usable HS256 secret",
    })
}

/// A verification key file must hold the public key. A private key there
/// means the signing key has been copied to the gateway, where it is not
/// needed and should not be.
fn refuse_private(bytes: &[u8]) -> Result<(), &'static str> {
    if bytes
        .windows(b"PRIVATE KEY".len())
        .any(|w| w == b"PRIVATE KEY")
    {
        Err("holds a private key; configure the issuer's public key instead")
    } else {
        Ok(())
    }
}

/// Parses the RSA key as the verifier will, and checks its size.
fn check_rsa(path: &Path, key: &DecodingKey) -> Result<(), AuthSetupError> {
    let bad = |problem: &'static str| AuthSetupError::BadKey {
        path: path.to_owned(),
        problem,
    };
    let provider = jsonwebtoken::crypto::CryptoProvider::try_get_default()
        .ok_or_else(|| bad("no JWT crypto provider is built in"))?;
    let der = key
        .try_get_as_bytes()
        .map_err(|_| bad("not an RSA public key"))?;
    let (modulus, _exponent) = (provider.key_utils.rsa_pub_components_from_public_key)(der)
        .map_err(|_| bad("not a valid RSA public key"))?;
    let bits = bit_length(&modulus);
    if bits < MIN_RSA_BITS {
        return Err(AuthSetupError::RsaKeyTooSmall {
            path: path.to_owned(),
            bits,
        });
    }
    Ok(())
}

/// The bit length of a big-endian unsigned integer.
fn bit_length(be: &[u8]) -> usize {
    match be.iter().position(|&b| b != 0) {
        Some(first) => (be.len() - first) * 8 - be[first].leading_zeros() as usize,
        None => 0,
    }
}

/// Maps jsonwebtoken's error to ours with fixed reasons: its own messages
/// can quote parts of the token (serde's "invalid type: string …").
fn token_error(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) => match claim.as_str() {
            "iss" => AuthError::WrongIssuer,
            "aud" => AuthError::WrongAudience,
            "exp" => AuthError::InvalidToken {
                reason: "the token has no exp claim",
            },
            _ => AuthError::InvalidToken {
                reason: "the token lacks a required claim",
            },
        },
        ErrorKind::InvalidSignature => AuthError::InvalidToken {
            reason: "the signature does not verify",
        },
        ErrorKind::InvalidAlgorithm => AuthError::InvalidToken {
            reason: "the token's algorithm is not the configured one",
        },
        ErrorKind::InvalidClaimFormat(_) => AuthError::InvalidToken {
            reason: "a registered claim has the wrong type",
        },
        ErrorKind::InvalidToken
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_) => AuthError::InvalidToken {
            reason: "not a well-formed JWT",
        },
        _ => AuthError::InvalidToken {
            reason: "the token could not be verified",
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;
    use std::time::{SystemTime, UNIX_EPOCH};

    use getrandom::SysRng;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::{Value, json};
    use text::hex;

    use super::*;
    use crate::config::GatewayConfig;
    use crate::trust::credential::Secret;

    const ACME_KEY: &str = "acme-api-key-0123456789abcdef";
    const INITECH_KEY: &str = "initech-api-key-0123456789";
    /// {"alg":"none","typ":"JWT"}, {"alg":"None","typ":"JWT"}, {"alg":"NONE"}
    const NONE_HEADERS: [&str; 3] = [
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0",
        "eyJhbGciOiJOb25lIiwidHlwIjoiSldUIn0",
        "eyJhbGciOiJOT05FIn0",
    ];

    fn random_bytes(n: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; n];
        getrandom::fill(&mut bytes).unwrap();
        bytes
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    /// A configuration in a temporary directory: a random placement key,
    /// three tenants (acme and initech with API keys, globex JWT-only), and
    /// the given `[auth.jwt]` section with its key file.
    struct Fixture {
        _dir: tempfile::TempDir,
        config: GatewayConfig,
        tenants: Tenants,
    }

    impl Fixture {
        fn new(jwt_section: &str, key_file: &[u8]) -> Self {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("placement.key"), random_bytes(32)).unwrap();
            std::fs::write(dir.path().join("jwt.key"), key_file).unwrap();
            let path = dir.path().join("gateway.toml");
            let text = format!(
                r#"
listen = "127.0.0.1:8080"
tenants_file = "tenants.toml"

[placement]
algorithm = "rendezvous"
k = 2
key_file = "placement.key"
key_version = "v1"

[[cells]]
name = "default"
shards = [
  {{ id = "s0", url = "http://127.0.0.1:9100", zone = "a" }},
  {{ id = "s1", url = "http://127.0.0.1:9101", zone = "b" }},
  {{ id = "s2", url = "http://127.0.0.1:9102", zone = "c" }},
]

{jwt_section}
"#
            );
            let config = GatewayConfig::parse(&path, &text).unwrap();
            let tenants_text = format!(
                r#"
[[tenants]]
id = "acme"
api_key_sha256 = "{}"

[[tenants]]
id = "globex"

[[tenants]]
id = "initech"
api_key_sha256 = "{}"
"#,
                hex(&Sha256::digest(ACME_KEY.as_bytes())),
                hex(&Sha256::digest(INITECH_KEY.as_bytes())),
            );
            let tenants = crate::tenants::load::from_toml(
                &dir.path().join("tenants.toml"),
                &tenants_text,
                &config,
            )
            .unwrap();
            Self {
                _dir: dir,
                config,
                tenants,
            }
        }

        fn no_jwt() -> Self {
            Self::new("", b"")
        }

        fn authenticator(&self) -> Authenticator {
            Authenticator::new(self.config.jwt.as_ref()).unwrap()
        }

        fn gate(&self) -> Gate<'_> {
            Gate {
                auth: self.authenticator(),
                tenants: &self.tenants,
            }
        }

        fn setup_error(&self) -> AuthSetupError {
            Authenticator::new(self.config.jwt.as_ref()).unwrap_err()
        }
    }

    /// An authenticator with the tenants it answers for, asked the way a
    /// request asks it: one bearer token or one API key at a time.
    struct Gate<'f> {
        auth: Authenticator,
        tenants: &'f Tenants,
    }

    impl<'f> Gate<'f> {
        fn token(&self, token: &str) -> Result<Tenant<'f>, AuthError> {
            self.auth.authenticate(&jwt(token), self.tenants)
        }

        fn key(&self, key: &str) -> Result<Tenant<'f>, AuthError> {
            self.auth.authenticate(&api_key(key), self.tenants)
        }
    }

    fn jwt_section(algorithm: &str, extra: &str) -> String {
        format!("[auth.jwt]\nalgorithm = \"{algorithm}\"\nkey_file = \"jwt.key\"\n{extra}\n")
    }

    fn hs256_fixture(extra: &str) -> (Fixture, Vec<u8>) {
        let secret = random_bytes(32);
        (Fixture::new(&jwt_section("HS256", extra), &secret), secret)
    }

    fn sign(alg: Algorithm, claims: &Value, key: &EncodingKey) -> String {
        jsonwebtoken::encode(&Header::new(alg), claims, key).unwrap()
    }

    fn hs256(claims: &Value, secret: &[u8]) -> String {
        sign(
            Algorithm::HS256,
            claims,
            &EncodingKey::from_secret(secret).unwrap(),
        )
    }

    fn rs256(claims: &Value, der: &[u8]) -> String {
        sign(Algorithm::RS256, claims, &EncodingKey::from_rsa_der(der))
    }

    fn es256(claims: &Value, der: &[u8]) -> String {
        sign(Algorithm::ES256, claims, &EncodingKey::from_ec_der(der))
    }

    fn valid_claims() -> Value {
        json!({ "sub": "globex", "exp": now() + 600, "iat": now() })
    }

    fn jwt(token: &str) -> Credential {
        Credential::Jwt(Secret::new(token))
    }

    fn api_key(key: &str) -> Credential {
        Credential::ApiKey(Secret::new(key))
    }

    /// A 2048-bit RSA key: (PKCS#1 DER private key for signing, SPKI PEM
    /// public key, PKCS#1 PEM public key).
    fn new_rsa_key() -> (Vec<u8>, String, String) {
        use rsa::pkcs1::{EncodeRsaPrivateKey, EncodeRsaPublicKey};
        use rsa::pkcs8::{EncodePublicKey, LineEnding};
        let private = rsa::PrivateKey::new(&mut SysRng, 2048).unwrap();
        let public = private.to_public_key();
        (
            private.to_pkcs1_der().unwrap().as_bytes().to_vec(),
            public.to_public_key_pem(LineEnding::LF).unwrap(),
            public.to_pkcs1_pem(LineEnding::LF).unwrap(),
        )
    }

    /// One RSA key shared by the tests: generating one takes a while in
    /// debug builds.
    fn rsa_key() -> &'static (Vec<u8>, String, String) {
        static KEY: OnceLock<(Vec<u8>, String, String)> = OnceLock::new();
        KEY.get_or_init(new_rsa_key)
    }

    /// A P-256 key: (PKCS#8 DER private key, SPKI PEM public key, PKCS#8
    /// PEM private key).
    fn ec_key() -> (Vec<u8>, String, String) {
        use p256::elliptic_curve::Generate;
        use p256::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
        let signing = p256::ecdsa::SigningKey::try_generate_from_rng(&mut SysRng).unwrap();
        (
            signing.to_pkcs8_der().unwrap().as_bytes().to_vec(),
            signing
                .verifying_key()
                .to_public_key_pem(LineEnding::LF)
                .unwrap(),
            signing.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
        )
    }

    // ---- API keys -------------------------------------------------------

    #[test]
    fn api_key_success() {
        let f = Fixture::no_jwt();
        let gate = f.gate();
        assert_eq!(gate.key(ACME_KEY).unwrap().id(), "acme");
        assert_eq!(gate.key(INITECH_KEY).unwrap().id(), "initech");
    }

    #[test]
    fn api_key_wrong() {
        let f = Fixture::no_jwt();
        let gate = f.gate();
        for key in [
            "",
            "acme",
            "acme-api-key-0123456789abcdeF",
            "acme-api-key-0123456789abcdef ",
        ] {
            assert_eq!(gate.key(key), Err(AuthError::UnknownKey), "{key:?}");
        }
    }

    #[test]
    fn tenant_without_api_key_cannot_be_reached_by_key() {
        let f = Fixture::no_jwt();
        let gate = f.gate();
        // globex has no api_key_sha256, so no key of any kind leads to it:
        // not its id, not an empty key, not a NUL byte.
        for key in ["globex", "", "\0"] {
            assert_eq!(gate.key(key), Err(AuthError::UnknownKey));
        }
        assert!(f.tenants.get("globex").unwrap().api_key_sha256().is_none());
    }

    #[test]
    fn api_keys_work_alongside_jwt() {
        let (f, _) = hs256_fixture("");
        let gate = f.gate();
        assert_eq!(gate.key(ACME_KEY).unwrap().id(), "acme");
    }

    #[test]
    fn jwt_shaped_bearer_without_jwt_config_is_an_api_key() {
        let (f, secret) = hs256_fixture("");
        let token = hs256(&valid_claims(), &secret);
        let plain = Fixture::no_jwt().authenticator();
        assert_eq!(
            plain.authenticate(&jwt(&token), &f.tenants),
            Err(AuthError::UnknownKey)
        );
    }

    #[test]
    fn authenticate_headers_end_to_end() {
        let (f, secret) = hs256_fixture("");
        let auth = f.authenticator();
        let mut headers = http::HeaderMap::new();
        let bearer = format!("Bearer {}", hs256(&valid_claims(), &secret));
        headers.insert("authorization", bearer.parse().unwrap());
        assert_eq!(
            auth.authenticate_headers(&headers, &f.tenants)
                .unwrap()
                .id(),
            "globex"
        );
        let mut headers = http::HeaderMap::new();
        headers.insert("x-api-key", ACME_KEY.parse().unwrap());
        assert_eq!(
            auth.authenticate_headers(&headers, &f.tenants)
                .unwrap()
                .id(),
            "acme"
        );
        assert_eq!(
            auth.authenticate_headers(&http::HeaderMap::new(), &f.tenants),
            Err(AuthError::Missing)
        );
    }

    // ---- JWT, HS256 ------------------------------------------------------

    #[test]
    fn hs256_success() {
        let (f, secret) = hs256_fixture("");
        let gate = f.gate();
        let token = hs256(&valid_claims(), &secret);
        assert_eq!(gate.token(&token).unwrap().id(), "globex");
        // A tenant with an API key may also come with a token.
        let token = hs256(&json!({ "sub": "acme", "exp": now() + 60 }), &secret);
        assert_eq!(gate.token(&token).unwrap().id(), "acme");
    }

    #[test]
    fn hs256_wrong_key() {
        let (f, _) = hs256_fixture("");
        let token = hs256(&valid_claims(), &random_bytes(32));
        assert_eq!(
            f.gate().token(&token),
            Err(AuthError::InvalidToken {
                reason: "the signature does not verify"
            })
        );
    }

    #[test]
    fn tampered_payload_is_rejected() {
        let (f, secret) = hs256_fixture("");
        let token = hs256(&valid_claims(), &secret);
        let other = hs256(
            &json!({ "sub": "acme", "exp": now() + 600 }),
            &random_bytes(32),
        );
        let parts: Vec<&str> = token.split('.').collect();
        let other_parts: Vec<&str> = other.split('.').collect();
        let forged = format!("{}.{}.{}", parts[0], other_parts[1], parts[2]);
        assert!(matches!(
            f.gate().token(&forged),
            Err(AuthError::InvalidToken { .. })
        ));
    }

    #[test]
    fn expired() {
        let (f, secret) = hs256_fixture("");
        let gate = f.gate();
        let token = hs256(&json!({ "sub": "globex", "exp": now() - 60 }), &secret);
        assert_eq!(gate.token(&token), Err(AuthError::Expired));
        // Within the leeway it still passes; that is the point of leeway.
        let token = hs256(&json!({ "sub": "globex", "exp": now() - 1 }), &secret);
        assert!(gate.token(&token).is_ok());
    }

    #[test]
    fn exp_is_required() {
        let (f, secret) = hs256_fixture("");
        let token = hs256(&json!({ "sub": "globex" }), &secret);
        assert_eq!(
            f.gate().token(&token),
            Err(AuthError::InvalidToken {
                reason: "the token has no exp claim"
            })
        );
        let token = hs256(&json!({ "sub": "globex", "exp": "tomorrow" }), &secret);
        assert!(matches!(
            f.gate().token(&token),
            Err(AuthError::InvalidToken { .. })
        ));
    }

    #[test]
    fn not_yet_valid() {
        let (f, secret) = hs256_fixture("");
        let gate = f.gate();
        let token = hs256(
            &json!({ "sub": "globex", "exp": now() + 600, "nbf": now() + 120 }),
            &secret,
        );
        assert_eq!(gate.token(&token), Err(AuthError::NotYetValid));
        let token = hs256(
            &json!({ "sub": "globex", "exp": now() + 600, "nbf": now() - 10 }),
            &secret,
        );
        assert!(gate.token(&token).is_ok());
    }

    #[test]
    fn audience() {
        let (f, secret) = hs256_fixture("audience = \"gateway\"");
        let gate = f.gate();
        let claims = |aud: Value| {
            let mut claims = valid_claims();
            claims["aud"] = aud;
            claims
        };
        for good in [json!("gateway"), json!(["other", "gateway"])] {
            let token = hs256(&claims(good), &secret);
            assert!(gate.token(&token).is_ok());
        }
        for wrong in [json!("other"), json!(["other"]), json!([])] {
            let token = hs256(&claims(wrong.clone()), &secret);
            assert_eq!(gate.token(&token), Err(AuthError::WrongAudience), "{wrong}");
        }
        // A configured audience must be present, not merely not wrong.
        let token = hs256(&valid_claims(), &secret);
        assert_eq!(gate.token(&token), Err(AuthError::WrongAudience));
    }

    #[test]
    fn no_audience_configured_accepts_any_audience() {
        let (f, secret) = hs256_fixture("");
        let mut claims = valid_claims();
        claims["aud"] = json!("someone-else");
        let token = hs256(&claims, &secret);
        assert!(f.gate().token(&token).is_ok());
    }

    #[test]
    fn issuer() {
        let (f, secret) = hs256_fixture("issuer = \"https://idp.example\"");
        let gate = f.gate();
        let with_iss = |iss: &str| {
            let mut claims = valid_claims();
            claims["iss"] = json!(iss);
            hs256(&claims, &secret)
        };
        assert!(gate.token(&with_iss("https://idp.example")).is_ok());
        assert_eq!(
            gate.token(&with_iss("https://evil.example")),
            Err(AuthError::WrongIssuer)
        );
        // A configured issuer must be present.
        let token = hs256(&valid_claims(), &secret);
        assert_eq!(gate.token(&token), Err(AuthError::WrongIssuer));
    }

    #[test]
    fn alg_none_is_rejected() {
        let (f, secret) = hs256_fixture("");
        let gate = f.gate();
        let signed = hs256(&valid_claims(), &secret);
        let parts: Vec<&str> = signed.split('.').collect();
        for header in NONE_HEADERS {
            // Unsigned, and unsigned header with the real signature kept.
            for signature in ["", parts[2]] {
                let token = format!("{header}.{}.{signature}", parts[1]);
                let error = gate.token(&token).unwrap_err();
                assert!(matches!(error, AuthError::InvalidToken { .. }), "{error:?}");
            }
        }
    }

    #[test]
    fn malformed_tokens_are_rejected_without_panicking() {
        let (f, _) = hs256_fixture("");
        let gate = f.gate();
        for token in [
            "",
            "a.b.c",
            "...",
            "eyJhbGciOiJIUzI1NiJ9..",
            "eyJhbGciOiJIUzI1NiJ9.e30.",
            "eyJhbGciOiJIUzI1NiJ9.!!!.abc",
            "e30.e30.e30",
            "bm90IGpzb24.bm90IGpzb24.bm90IGpzb24",
        ] {
            let error = gate.token(token).unwrap_err();
            assert!(
                matches!(error, AuthError::InvalidToken { .. }),
                "{token:?}: {error:?}"
            );
        }
    }

    #[test]
    fn missing_tenant_claim() {
        let (f, secret) = hs256_fixture("");
        let gate = f.gate();
        for claims in [
            json!({ "exp": now() + 600 }),
            json!({ "exp": now() + 600, "sub": 42 }),
            json!({ "exp": now() + 600, "sub": "" }),
            json!({ "exp": now() + 600, "sub": null }),
        ] {
            let token = hs256(&claims, &secret);
            assert_eq!(
                gate.token(&token),
                Err(AuthError::MissingTenantClaim {
                    claim: "sub".into()
                }),
                "{claims}"
            );
        }
        // jsonwebtoken itself refuses a `sub` that is neither string nor
        // number; either way the token is out.
        let token = hs256(&json!({ "exp": now() + 600, "sub": ["globex"] }), &secret);
        assert!(gate.token(&token).is_err());
    }

    #[test]
    fn configured_tenant_claim() {
        let (f, secret) = hs256_fixture("tenant_claim = \"org\"");
        let gate = f.gate();
        let token = hs256(
            &json!({ "sub": "user-7", "org": "initech", "exp": now() + 600 }),
            &secret,
        );
        assert_eq!(gate.token(&token).unwrap().id(), "initech");
        // `sub` naming a tenant does not count when the claim is `org`.
        let token = hs256(&valid_claims(), &secret);
        assert_eq!(
            gate.token(&token),
            Err(AuthError::MissingTenantClaim {
                claim: "org".into()
            })
        );
    }

    #[test]
    fn unknown_tenant() {
        let (f, secret) = hs256_fixture("");
        let token = hs256(&json!({ "sub": "hooli", "exp": now() + 600 }), &secret);
        let error = f.gate().token(&token).unwrap_err();
        assert_eq!(
            error,
            AuthError::UnknownTenant {
                tenant: "hooli".into()
            }
        );
        assert!(!error.public_message().contains("hooli"));
    }

    // ---- JWT, RS256 and ES256 -------------------------------------------

    #[test]
    fn rs256_success_spki_and_pkcs1_pem() {
        let (private, spki, pkcs1) = rsa_key();
        let token = rs256(&valid_claims(), private);
        for pem in [spki, pkcs1] {
            let f = Fixture::new(&jwt_section("RS256", ""), pem.as_bytes());
            assert_eq!(f.gate().token(&token).unwrap().id(), "globex");
        }
    }

    #[test]
    fn rs256_wrong_key() {
        let (_, spki, _) = rsa_key();
        let f = Fixture::new(&jwt_section("RS256", ""), spki.as_bytes());
        let gate = f.gate();
        let (other, _, _) = new_rsa_key();
        let token = rs256(&valid_claims(), &other);
        assert_eq!(
            gate.token(&token),
            Err(AuthError::InvalidToken {
                reason: "the signature does not verify"
            })
        );
        // A signature of the wrong length is refused the same way.
        let mut parts: Vec<&str> = token.split('.').collect();
        parts[2] = "c2hvcnQ";
        assert!(matches!(
            gate.token(&parts.join(".")),
            Err(AuthError::InvalidToken { .. })
        ));
    }

    #[test]
    fn hs256_token_rejected_when_rs256_configured() {
        let (_, spki, _) = rsa_key();
        let f = Fixture::new(&jwt_section("RS256", ""), spki.as_bytes());
        let gate = f.gate();
        // The classic confusion: HMAC keyed with the public key's bytes.
        for secret in [spki.as_bytes(), &random_bytes(32)[..]] {
            let token = hs256(&valid_claims(), secret);
            assert_eq!(
                gate.token(&token),
                Err(AuthError::InvalidToken {
                    reason: "the token's algorithm is not the configured one"
                })
            );
        }
        // And ES256 is not RS256 either.
        let (ec_private, _, _) = ec_key();
        let token = es256(&valid_claims(), &ec_private);
        assert!(matches!(
            gate.token(&token),
            Err(AuthError::InvalidToken { .. })
        ));
    }

    #[test]
    fn es256_success_and_wrong_key() {
        let (private, public_pem, _) = ec_key();
        let f = Fixture::new(&jwt_section("ES256", ""), public_pem.as_bytes());
        let gate = f.gate();
        let token = es256(&valid_claims(), &private);
        assert_eq!(gate.token(&token).unwrap().id(), "globex");
        let (other, _, _) = ec_key();
        let token = es256(&valid_claims(), &other);
        assert_eq!(
            gate.token(&token),
            Err(AuthError::InvalidToken {
                reason: "the signature does not verify"
            })
        );
        // HS256 keyed with the EC public key's bytes.
        let token = hs256(&valid_claims(), public_pem.as_bytes());
        assert!(matches!(
            gate.token(&token),
            Err(AuthError::InvalidToken { .. })
        ));
    }

    // ---- Setup ------------------------------------------------------------

    #[test]
    fn no_jwt_config_means_jwt_disabled() {
        let auth = Fixture::no_jwt().authenticator();
        assert!(!auth.jwt_enabled());
        let (f, _) = hs256_fixture("");
        assert!(f.authenticator().jwt_enabled());
    }

    #[test]
    fn hs256_secret_too_short() {
        let f = Fixture::new(&jwt_section("HS256", ""), &random_bytes(31));
        assert!(matches!(
            f.setup_error(),
            AuthSetupError::SecretTooShort { len: 31, .. }
        ));
        let f = Fixture::new(&jwt_section("HS256", ""), b"");
        assert!(matches!(
            f.setup_error(),
            AuthSetupError::SecretTooShort { len: 0, .. }
        ));
    }

    #[test]
    fn missing_key_file() {
        let f = Fixture::new(
            "[auth.jwt]\nalgorithm = \"HS256\"\nkey_file = \"nope.key\"\n",
            b"",
        );
        let error = f.setup_error();
        assert!(matches!(error, AuthSetupError::ReadKey { .. }));
        assert!(error.to_string().contains("nope.key"));
    }

    #[test]
    fn rs256_and_es256_refuse_bad_key_files() {
        let (_, rsa_spki, _) = rsa_key();
        let (_, ec_public, ec_private) = ec_key();
        for (algorithm, file) in [
            ("RS256", &b"not a pem"[..]),
            ("RS256", ec_public.as_bytes()),
            ("RS256", &random_bytes(64)),
            ("ES256", b"not a pem"),
            ("ES256", rsa_spki.as_bytes()),
            ("ES256", ec_private.as_bytes()),
        ] {
            let f = Fixture::new(&jwt_section(algorithm, ""), file);
            let error = f.setup_error();
            assert!(
                matches!(error, AuthSetupError::BadKey { .. }),
                "{algorithm}: {error:?}"
            );
        }
    }

    #[test]
    fn rs256_refuses_private_key_and_small_key() {
        use rsa::pkcs1::EncodeRsaPrivateKey;
        use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
        let small = rsa::PrivateKey::new(&mut SysRng, 1024).unwrap();
        let public = small
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        let f = Fixture::new(&jwt_section("RS256", ""), public.as_bytes());
        assert!(matches!(
            f.setup_error(),
            AuthSetupError::RsaKeyTooSmall { bits: 1024, .. }
        ));
        for private in [
            small.to_pkcs1_pem(LineEnding::LF).unwrap().to_string(),
            small.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
        ] {
            let f = Fixture::new(&jwt_section("RS256", ""), private.as_bytes());
            let error = f.setup_error();
            assert!(error.to_string().contains("private key"), "{error}");
            assert_no_pem_body(&format!("{error} {error:?}"), &private);
        }
    }

    #[test]
    fn bit_lengths() {
        assert_eq!(bit_length(&[]), 0);
        assert_eq!(bit_length(&[0, 0]), 0);
        assert_eq!(bit_length(&[1]), 1);
        assert_eq!(bit_length(&[0, 0x80, 0]), 16);
        assert_eq!(bit_length(&[0x7f, 0xff]), 15);
    }

    // ---- Nothing secret in any output -------------------------------------

    fn assert_no_pem_body(shown: &str, pem: &str) {
        for line in pem
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() > 16)
        {
            assert!(!shown.contains(line), "key material in {shown}");
        }
    }

    #[test]
    fn no_token_or_key_in_errors_or_debug() {
        // A printable secret so that any rendering of it is searchable.
        let secret = b"TOPSECRET-hmac-0123456789abcdefghij";
        let f = Fixture::new(
            &jwt_section("HS256", "audience = \"gw\"\nissuer = \"idp\""),
            secret,
        );
        let gate = f.gate();
        let auth = &gate.auth;
        let auth_debug = format!("{auth:?} {auth:#?}");
        assert!(!auth_debug.contains("TOPSECRET"), "{auth_debug}");
        // Nor the bytes as a list, the way a derived Debug of a Vec<u8> shows them.
        let list = format!("{:?}", &secret[..4]);
        assert!(
            !auth_debug.contains(&list[1..list.len() - 1]),
            "{auth_debug}"
        );

        let base = json!({ "sub": "globex", "exp": now() + 600, "aud": "gw", "iss": "idp" });
        let with = |change: &dyn Fn(&mut Value)| {
            let mut claims = base.clone();
            change(&mut claims);
            claims
        };
        let mut tokens = vec![
            hs256(&with(&|c| c["exp"] = json!(now() - 600)), secret),
            hs256(&with(&|c| c["nbf"] = json!(now() + 600)), secret),
            hs256(&with(&|c| c["aud"] = json!("x")), secret),
            hs256(&with(&|c| c["iss"] = json!("x")), secret),
            hs256(&with(&|c| c["sub"] = json!(7)), secret),
            hs256(&with(&|c| c["sub"] = json!("hooli")), secret),
            hs256(&with(&|c| c["exp"] = json!("TOPSECRET-claim")), secret),
            hs256(&base, &random_bytes(32)),
        ];
        let signed = hs256(&base, secret);
        let parts: Vec<&str> = signed.split('.').collect();
        tokens.push(format!("{}.{}.", NONE_HEADERS[0], parts[1]));
        tokens.push(format!("{}.e30K.{}", parts[0], parts[2]));
        let mut errors = Vec::new();
        for token in &tokens {
            errors.push(gate.token(token).unwrap_err());
            errors.push(gate.key(token).unwrap_err());
        }
        errors.push(gate.key("TOPSECRET-api-key").unwrap_err());
        let kinds: std::collections::HashSet<_> = errors.iter().map(AuthError::label).collect();
        for label in [
            "unknown_key",
            "invalid_token",
            "expired",
            "not_yet_valid",
            "wrong_issuer",
            "wrong_audience",
            "missing_tenant_claim",
            "unknown_tenant",
        ] {
            assert!(kinds.contains(label), "{label} not exercised");
        }
        for (token, error) in tokens.iter().flat_map(|t| [t, t]).zip(&errors) {
            let shown = format!("{error} {error:?} {error:#?} {}", error.public_message());
            assert!(!shown.contains("TOPSECRET"), "{shown}");
            for segment in token.split('.').filter(|s| s.len() > 4) {
                assert!(!shown.contains(segment), "token segment in {shown}");
            }
        }
        // The credential itself.
        let credential = jwt(&tokens[0]);
        assert!(!format!("{credential:?}").contains(parts[0]));

        // Setup errors name the file, never its contents.
        let (_, _, ec_private) = ec_key();
        let short = b"TOPSECRET-short";
        for (algorithm, file) in [
            ("HS256", &short[..]),
            ("ES256", ec_private.as_bytes()),
            ("RS256", b"TOPSECRET not a key"),
        ] {
            let f = Fixture::new(&jwt_section(algorithm, ""), file);
            let error = f.setup_error();
            let shown = format!("{error} {error:?} {error:#?}");
            assert!(!shown.contains("TOPSECRET"), "{shown}");
            assert_no_pem_body(&shown, &ec_private);
        }
    }
}
