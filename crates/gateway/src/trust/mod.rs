//! The trust boundary: what of a client's request may reach a shard
//! ([`headers`], both ways), who the client is ([`credential`] finds the
//! credential, [`authenticate`] turns it into a tenant), and where its
//! request target may go ([`target`]). Nothing a client or a backend can
//! forge gets past these without being checked here.

pub mod authenticate;
pub mod credential;
pub mod headers;
pub mod target;
