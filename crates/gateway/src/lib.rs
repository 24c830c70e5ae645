//! The shuffle-shard gateway: an authenticated, cell-aware HTTP reverse
//! proxy that sends each tenant only to its own subset of shards and fails
//! over inside that subset.
//!
//! The folders are its layers, lowest first; a module imports only its own
//! folder and the folders above it in this list, never one below it (the
//! tidy test in `crates/tidy` checks it, and prints the folder graph:
//! see ARCHITECTURE.md, "How to check"):
//!
//! - [`syntax`]: the bytes' grammar, no I/O: header fields as written and
//!   gRPC's conventions.
//! - [`telemetry`]: metrics, sliding windows and the access log: what is
//!   counted, below everything that counts.
//! - [`config`]: the configuration file and the tenants file, validated.
//! - [`discovery`]: shards that come and go: the DNS and Kubernetes
//!   clients, each discovered cell's membership, and the guard every
//!   change passes (a shard that disappears is down for a grace before it
//!   leaves placement; never too much of a cell at once).
//! - [`tenants`]: the tenant registry: every tenant's entry checked
//!   against the configuration and kept compact, with its sources (TOML
//!   and JSON Lines files).
//! - [`cell`]: tenant → cell and each cell's placement, compiled from the
//!   configuration, and each cell's live blast-radius model.
//! - [`store`]: the Redis server replicas share (one connection that never
//!   holds a caller up while it is down).
//! - [`trust`]: the trust boundary: what of a client's request may reach a
//!   shard, who the client is, and where its target may go.
//! - [`protocol`]: HTTP/1.1 as bytes, no I/O: the client-facing half
//!   ([`protocol::client_wire`]) and the shard-facing half
//!   ([`protocol::wire`]), writing what the trust boundary lets through.
//! - [`upstream`]: each shard's pooled connections (HTTP/1.1 and HTTP/2)
//!   and the request bodies they carry.
//! - [`health`]: the health state machine, the quarantine and the retry
//!   budget.
//! - [`limit`]: per-tenant limits (in-flight requests, a token bucket,
//!   and the same bucket kept in Redis across replicas).
//! - [`state`]: the swappable snapshot and the per-shard state that
//!   survives reloads.
//! - [`fleet`]: a fleet of replicas as one gateway (`[fleet]`): poison
//!   containment's strikes and suspects and the operators' shard marks,
//!   shared through the fleet's store, the request path staying local.
//! - [`tenant_sync`]: tenants from the tenant store: read at start (or
//!   the snapshot file while the store is down), then kept current change
//!   by change without a reload.
//! - [`discovery_sync`]: discovered cells kept current: each source
//!   looked at (DNS) or watched (Kubernetes), each change applied as the
//!   guard decides, discovery's marks shared with the fleet.
//! - [`probe`]: the active health checks, which walk the snapshot's shards
//!   and drive their health.
//! - [`route`]: the request path: credential → tenant → cell and subset
//!   ([`cell`]) → member ([`route::member`]) → attempts
//!   ([`route::attempts`], each one a [`route::attempt`]) → outcome
//!   ([`route::proxy`], streaming back a [`route::response`]).
//! - [`ops`]: the operations side: admin API, status page and the views
//!   they share.
//! - [`listen`]: accepting clients and serving their connections.
//! - [`runtime`]: starting and stopping it all.

pub mod cell;
pub mod config;
pub mod discovery;
pub mod discovery_sync;
pub mod fleet;
pub mod health;
pub mod limit;
pub(crate) mod listen;
pub mod ops;
pub(crate) mod probe;
pub mod protocol;
pub mod route;
pub mod runtime;
pub mod state;
pub mod store;
pub mod syntax;
pub mod telemetry;
pub mod tenant_sync;
pub mod tenants;
pub mod trust;
pub mod upstream;

pub use config::{ConfigError, GatewayConfig};
pub use state::{Gateway, Snapshot};
