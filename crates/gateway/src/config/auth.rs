//! `[auth.jwt]`: JWT authentication (`[auth.mtls]`, client certificates,
//! is read in `tls.rs`).

use std::path::PathBuf;

use serde::Deserialize;

use super::check::KeyProblem;
use super::tls;

/// JWT authentication.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// Accepted algorithm.
    pub algorithm: jsonwebtoken::Algorithm,
    /// The verification key file (HS256: raw secret bytes; RS256/ES256: PEM).
    pub key_file: PathBuf,
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Required `aud`, when set.
    pub audience: Option<String>,
    /// The claim that names the tenant.
    pub tenant_claim: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    jwt: Option<RawJwt>,
    pub(super) mtls: Option<tls::RawMtls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    algorithm: String,
    key_file: String,
    issuer: Option<String>,
    audience: Option<String>,
    tenant_claim: Option<String>,
}

/// `[auth.jwt]`, when configured: a supported algorithm, and no key set
/// to an empty string.
pub(super) fn jwt_settings(
    auth: RawAuth,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<Option<JwtSettings>, KeyProblem> {
    let Some(jwt) = auth.jwt else {
        return Ok(None);
    };
    let algorithm = match jwt.algorithm.as_str() {
        "HS256" => jsonwebtoken::Algorithm::HS256,
        "RS256" => jsonwebtoken::Algorithm::RS256,
        "ES256" => jsonwebtoken::Algorithm::ES256,
        other => {
            return Err((
                "auth.jwt.algorithm",
                format!("{other:?} is not supported; use HS256, RS256 or ES256"),
            ));
        }
    };
    for (key, value) in [
        ("auth.jwt.issuer", &jwt.issuer),
        ("auth.jwt.audience", &jwt.audience),
        ("auth.jwt.tenant_claim", &jwt.tenant_claim),
    ] {
        if value.as_deref() == Some("") {
            return Err((
                key,
                "must not be empty; remove the key to use the default".into(),
            ));
        }
    }
    Ok(Some(JwtSettings {
        algorithm,
        key_file: resolve(&jwt.key_file),
        issuer: jwt.issuer,
        audience: jwt.audience,
        tenant_claim: jwt.tenant_claim.unwrap_or_else(|| "sub".into()),
    }))
}
