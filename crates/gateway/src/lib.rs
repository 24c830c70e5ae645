//! The shuffle-shard gateway: an authenticated, cell-aware HTTP reverse
//! proxy that sends each tenant only to its own subset of shards and fails
//! over inside that subset.
//!
//! A request flows through one module per step:
//! credential → tenant ([`authenticate`]) → cell and subset ([`cell`]) →
//! member ([`member`]) → attempt ([`attempt`]) → outcome.

pub mod cell;
pub mod config;
pub mod health;
pub mod retry_budget;
pub mod tenants;

pub use config::{ConfigError, GatewayConfig};
