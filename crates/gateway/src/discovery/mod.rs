//! Shards that come and go: each discovered cell's membership found in DNS
//! (SRV or A/AAAA records, looked up every `discovery.refresh_seconds`) or
//! in Kubernetes (the service's EndpointSlices, watched), and every change
//! passed through the migration guard before it reaches placement.

pub mod dns;
pub mod found;
pub mod kubernetes;

pub use found::{Condition, DiscoveryError, Found, MAX_FOUND};
