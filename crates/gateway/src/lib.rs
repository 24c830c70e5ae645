//! The shuffle-shard gateway: an authenticated, cell-aware HTTP reverse
//! proxy that sends each tenant only to its own subset of shards and fails
//! over inside that subset.
//!
//! The folders are its layers, lowest first; a module imports only its own
//! layer and those below (the tidy test in `crates/tidy` checks it):
//!
//! - [`protocol`]: HTTP/1.1 as bytes, no I/O: header fields as written, the
//!   client-facing half ([`protocol::client_wire`]) and the shard-facing
//!   half ([`protocol::wire`]).
//! - [`config`]: the configuration file and the tenants file, validated.
//! - [`store`]: the Redis server replicas share (one connection that never
//!   holds a caller up while it is down).
//! - [`trust`]: the trust boundary: what of a client's request may reach a
//!   shard, who the client is, and where its target may go.
//! - [`upstream`]: each shard's pooled connections and the request bodies
//!   they carry.
//! - [`health`]: the health state machine, the retry budget, and the active
//!   checks that drive the first.
//! - [`limit`]: per-tenant limits (in-flight requests, a token bucket,
//!   and the same bucket kept in Redis across replicas).
//! - [`state`]: the swappable snapshot and the per-shard state that
//!   survives reloads.
//! - [`route`]: the request path: credential → tenant → cell and subset
//!   ([`route::cell`]) → member ([`route::member`]) → attempt
//!   ([`route::attempt`]) → outcome ([`route::proxy`], streaming back a
//!   [`route::response`]).
//! - [`ops`]: the operations side: admin API, metrics, status page, the
//!   views they share, windows and the live blast radius.
//! - [`listen`]: accepting clients and serving their connections.
//! - [`runtime`]: starting and stopping it all.

pub mod config;
pub mod health;
pub mod limit;
pub(crate) mod listen;
pub mod ops;
pub mod protocol;
pub mod route;
pub mod runtime;
pub mod state;
pub mod store;
pub mod trust;
pub mod upstream;

pub use config::{ConfigError, GatewayConfig};
pub use state::{Gateway, Snapshot};
