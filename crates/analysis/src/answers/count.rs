//! A tenant count with its share of all tenants, as every answer reports one.

use serde::Serialize;

/// A tenant count and its share of all tenants.
#[derive(Debug, Serialize)]
pub struct Count {
    /// Tenants.
    pub count: u64,
    /// Their share of all tenants.
    pub fraction: f64,
}
