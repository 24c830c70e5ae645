//! The shuffle-shard gateway: an authenticated, cell-aware HTTP reverse
//! proxy that sends each tenant only to its own subset of shards and fails
//! over inside that subset.
//!
//! A request flows through one module per step: credential
//! ([`credential`]) → tenant ([`authenticate`]) → cell and subset ([`cell`])
//! → member ([`member`]) → attempt ([`attempt`], over the shard's pooled
//! connections in [`upstream`], speaking
//! [`wire`]) → outcome ([`proxy`]).
//! [`health`] and [`retry_budget`] are the state machines that decide which
//! members are up and whether a retry is allowed; [`state`] holds the
//! swappable snapshot and per-shard state; [`server`] is the listener and
//! [`connection`] serves one client connection (speaking [`client_wire`]
//! for plain requests, handing the rest to hyper).

pub mod admin;
pub mod attempt;
pub mod authenticate;
pub mod body;
pub mod cell;
pub mod client_wire;
pub mod config;
pub mod connection;
pub mod credential;
pub mod fields;
pub mod headers;
pub mod health;
pub mod health_check;
pub mod idle;
pub mod live_blast;
pub mod member;
pub mod metrics;
pub mod proxy;
pub mod response;
pub mod retry_budget;
pub mod runtime;
pub mod server;
pub mod shutdown;
pub mod state;
pub mod status_page;
pub mod target;
pub mod tenants;
pub mod upstream;
pub mod views;
pub mod window;
pub mod wire;

pub use config::{ConfigError, GatewayConfig};
pub use state::{Gateway, Snapshot};
