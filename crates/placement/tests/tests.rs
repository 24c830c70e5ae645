//! The placement crate's integration tests, gathered into one test binary
//! (as ripgrep does) so that they compile and link once.
//!
//! - `reference`: slow, obviously correct versions to check fast paths against.
//! - `vectors`: bit-for-bit compatibility with the chapter's Recipe 12.1.
//! - `properties`: property tests and population statistics.
//! - `golden`: frozen rendezvous placements; a change here is a migration.
//! - `zones`: zone-aware placement at its edges, and per-tenant overrides.
//! - `util`: fixed keys, tenant populations and fleet helpers they share.

mod golden;
mod properties;
mod reference;
mod util;
mod vectors;
mod zones;
