//! The tenant registry: every tenant's entry, checked against the
//! configuration and kept compact, from a tenants file or the tenant store.

pub mod entry;

pub use entry::{EntryError, TenantEntry, ValidEntry};
