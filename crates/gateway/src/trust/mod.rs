//! The trust boundary: what of a client's request may reach a shard
//! ([`headers`], both ways), who the client is ([`credential`] finds the
//! credential, [`client_cert`] reads a verified client certificate,
//! [`authenticate`] turns them into a tenant, [`memo`] remembers a
//! connection's API key), and where its
//! request target may go ([`target`]). Nothing a client or a backend can
//! forge gets past these without being checked here.

pub mod authenticate;
pub mod client_cert;
pub mod credential;
pub mod headers;
pub mod memo;
pub mod target;
