//! Accepting clients: the listener with its connection cap ([`server`]),
//! one client connection's loop and its hand-off to hyper
//! ([`connection`]), the client's socket under it with its write timeout,
//! byte counts and lingering close ([`lingering`]), the timers HTTP/2
//! connections need beside hyper ([`http2`]), and graceful shutdown
//! ([`shutdown`]).

pub(crate) mod connection;
pub(crate) mod http2;
pub(crate) mod lingering;
pub(crate) mod server;
pub(crate) mod shutdown;
pub(crate) mod tls;
