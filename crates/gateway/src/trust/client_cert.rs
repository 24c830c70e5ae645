//! Client certificates as tenant identity: which tenant a certificate the
//! TLS handshake already verified (against `auth.mtls.ca_file`, within its
//! validity period) names, by the configured [`TenantFrom`] rule.
//!
//! The handshake decides whether a certificate is genuine; this decides
//! only what it says. Whether that tenant exists is decided per request
//! against the tenants file in force, so removing a tenant from the file
//! (and reloading) revokes its certificates.

use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::config::TenantFrom;

/// What a verified client certificate says about its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateTenant {
    /// The certificate names this tenant (by the configured rule).
    Named(String),
    /// The certificate is genuine but names no tenant by the configured
    /// rule: no URI SAN under the prefix, no DNS SAN, no CN, or a value
    /// that is not a tenant id.
    Unnamed,
}

/// The tenant the leaf certificate `der` names by `rule`.
pub fn tenant_named(der: &CertificateDer<'_>, rule: &TenantFrom) -> CertificateTenant {
    let Ok((_, certificate)) = X509Certificate::from_der(der.as_ref()) else {
        // The handshake parsed it; a parser that disagrees names nobody.
        return CertificateTenant::Unnamed;
    };
    let sans = || {
        certificate
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| san.value.general_names.clone())
            .unwrap_or_default()
    };
    let named = match rule {
        TenantFrom::UriPrefix(prefix) => sans().into_iter().find_map(|name| match name {
            GeneralName::URI(uri) => uri.strip_prefix(prefix.as_str()).map(str::to_owned),
            _ => None,
        }),
        TenantFrom::DnsSan => sans().into_iter().find_map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_owned()),
            _ => None,
        }),
        TenantFrom::SubjectCn => certificate
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_owned),
    };
    match named {
        Some(tenant) if is_tenant_id(&tenant) => CertificateTenant::Named(tenant),
        _ => CertificateTenant::Unnamed,
    }
}

/// Whether `text` can be a tenant id: non-empty, printable ASCII, no
/// path separator or space (a URI SAN's rest must be the id itself, not
/// `id/more`).
fn is_tenant_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 256
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b'?' && b != b'#')
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    use super::*;

    fn certificate(cn: Option<&str>, sans: Vec<SanType>) -> CertificateDer<'static> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.subject_alt_names = sans;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    fn uri(text: &str) -> SanType {
        SanType::URI(text.try_into().unwrap())
    }

    #[test]
    fn each_rule_reads_its_own_field() {
        let cert = certificate(
            Some("cn-tenant"),
            vec![
                SanType::DnsName("dns-tenant".try_into().unwrap()),
                uri("spiffe://other.org/tenant/wrong"),
                uri("spiffe://example.org/tenant/uri-tenant"),
            ],
        );
        let named = |rule| tenant_named(&cert, &rule);
        assert_eq!(
            named(TenantFrom::UriPrefix("spiffe://example.org/tenant/".into())),
            CertificateTenant::Named("uri-tenant".into())
        );
        assert_eq!(
            named(TenantFrom::DnsSan),
            CertificateTenant::Named("dns-tenant".into())
        );
        assert_eq!(
            named(TenantFrom::SubjectCn),
            CertificateTenant::Named("cn-tenant".into())
        );
    }

    #[test]
    fn a_certificate_without_the_field_names_nobody() {
        let bare = certificate(None, vec![]);
        for rule in [
            TenantFrom::UriPrefix("spiffe://example.org/tenant/".into()),
            TenantFrom::DnsSan,
            TenantFrom::SubjectCn,
        ] {
            assert_eq!(tenant_named(&bare, &rule), CertificateTenant::Unnamed);
        }
        // A URI under the prefix whose rest is not an id alone.
        let nested = certificate(None, vec![uri("spiffe://example.org/tenant/a/b")]);
        let rule = TenantFrom::UriPrefix("spiffe://example.org/tenant/".into());
        assert_eq!(tenant_named(&nested, &rule), CertificateTenant::Unnamed);
        let empty = certificate(None, vec![uri("spiffe://example.org/tenant/")]);
        assert_eq!(tenant_named(&empty, &rule), CertificateTenant::Unnamed);
        // Not a certificate at all.
        let garbage = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
        assert_eq!(
            tenant_named(&garbage, &TenantFrom::SubjectCn),
            CertificateTenant::Unnamed
        );
    }
}
