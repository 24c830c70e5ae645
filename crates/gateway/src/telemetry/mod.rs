//! What the gateway counts and records, below everything that counts:
//! Prometheus metrics ([`metrics`]), the sliding windows of availability
//! and request rates ([`window`]), the JSON access log ([`access_log`]) and
//! traces exported over OTLP ([`traces`]).
//! The request path and the snapshot write to them and the operations side
//! reads them, so they import nothing of either (only gRPC's status codes
//! and the `traceparent` grammar from [`crate::syntax`]).

pub mod access_log;
pub mod discovery;
pub mod fleet;
pub mod labels;
pub mod metrics;
pub mod model;
mod registered;
pub mod tenant_store;
pub mod traces;
pub mod websocket;
pub mod window;
