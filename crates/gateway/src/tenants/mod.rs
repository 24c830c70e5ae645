//! The tenant registry: every tenant's entry, checked against the
//! configuration and kept compact, from a tenants file (TOML or JSON
//! Lines) or the tenant store.

pub mod entry;
pub mod files;
pub mod load;
pub mod registry;

pub use entry::{EntryError, TenantEntry, ValidEntry};
pub use registry::{Tenant, TenantSlot, Tenants, id_hash};

#[cfg(test)]
mod tests;
