//! Accepting clients: the listener with its connection cap ([`server`]),
//! one client connection's loop and its hand-off to hyper
//! ([`connection`]), and graceful shutdown ([`shutdown`]).

pub(crate) mod connection;
pub(crate) mod server;
pub(crate) mod shutdown;
pub(crate) mod tls;
