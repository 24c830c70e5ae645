//! HTTP/1.1 as bytes, with no I/O: the half that reads clients' requests
//! and writes their responses ([`client_wire`]), and the half that writes
//! requests to shards and reads their responses ([`wire`]), over the header
//! fields of [`crate::syntax`]. They sit above [`crate::trust`] because
//! they write what its header rules let through. Sockets are the listeners'
//! and the upstream pool's business.

pub mod client_wire;
pub mod wire;
