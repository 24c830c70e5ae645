//! The drill's tenants file: each tenant with the API key the drill sends
//! as that tenant.
//!
//! One `TENANT<TAB>API_KEY` pair per line; blank lines and `#` comments are
//! skipped. The keys are credentials: they are never printed, and `Debug`
//! shows only the tenant.

use std::fmt;

use crate::error::DrillError;

/// A tenant and its API key.
#[derive(Clone)]
pub struct TenantCredential {
    /// The tenant id.
    pub tenant: String,
    api_key: String,
}

impl TenantCredential {
    /// A tenant with its API key.
    pub fn new(tenant: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            api_key: api_key.into(),
        }
    }

    /// The API key, for the `Authorization` header only.
    pub fn api_key(&self) -> &str {
        &self.api_key
    }
}

impl fmt::Debug for TenantCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantCredential")
            .field("tenant", &self.tenant)
            .field("api_key", &"<redacted>")
            .finish()
    }
}

/// Parses a drill tenants file.
pub fn parse(text: &str) -> Result<Vec<TenantCredential>, DrillError> {
    let mut tenants = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((tenant, key)) = line.split_once('\t') else {
            return Err(DrillError::Input(format!(
                "tenants file line {}: expected TENANT<TAB>API_KEY",
                number + 1
            )));
        };
        if tenant.is_empty() || key.is_empty() || key.contains('\t') {
            return Err(DrillError::Input(format!(
                "tenants file line {}: expected TENANT<TAB>API_KEY with both non-empty",
                number + 1
            )));
        }
        tenants.push(TenantCredential::new(tenant, key));
    }
    if tenants.is_empty() {
        return Err(DrillError::Input("the tenants file has no tenants".into()));
    }
    Ok(tenants)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_redacts() {
        let tenants = parse("# drill tenants\nacme\tsecret-1\n\nglobex\tsecret-2\r\n").unwrap();
        assert_eq!(tenants.len(), 2);
        assert_eq!(tenants[1].api_key(), "secret-2");
        assert!(!format!("{tenants:?}").contains("secret"));
        assert!(parse("acme").is_err());
        assert!(parse("").is_err());
        assert!(parse("acme\t").is_err());
    }
}
