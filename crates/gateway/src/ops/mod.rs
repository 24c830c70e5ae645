//! The operations side: the admin API ([`admin`]), Prometheus metrics
//! ([`metrics`]), the status page ([`status_page`]) and the typed views the
//! last two share ([`views`]); the sliding windows of availability and
//! request rates ([`window`]) and the live blast radius ([`live_blast`]).
//! The JSON access log's writer is here too ([`access_log`]).
//! It reads the gateway's state and never the request path's internals.

pub mod access_log;
pub mod admin;
pub mod live_blast;
pub mod metrics;
pub(crate) mod status_page;
pub(crate) mod views;
pub mod window;
