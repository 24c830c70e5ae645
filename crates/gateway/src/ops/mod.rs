//! The operations side: the admin API ([`admin`]), the status page
//! ([`status_page`]) and the typed views the admin API's JSON and the page
//! share ([`views`]). What they show is counted below them, in
//! [`crate::telemetry`] and [`crate::cell::live_blast`].
//! It reads the gateway's state and never the request path's internals.

pub mod admin;
mod error;
pub(crate) mod status_page;
mod tenant_writes;
pub(crate) mod views;
