//! The active health checks: each shard's checker ([`check`], over HTTP/1.1
//! or HTTP/2) and the standard gRPC health check ([`grpc`]). They sit above
//! the snapshot because they walk its shards and write their results into
//! each shard's [`crate::health`] state machine, which they drive; the
//! request path never calls them.

pub(crate) mod check;
pub(crate) mod grpc;
