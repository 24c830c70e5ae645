//! HTTP/1.1 as bytes, with no I/O: header fields kept as they were written
//! ([`fields`]), the half that reads clients' requests and writes their
//! responses ([`client_wire`]), and the half that writes requests to shards
//! and reads their responses ([`wire`]); gRPC's conventions on top of
//! either ([`grpc`]: content type, status codes, `grpc-timeout`). Sockets are the listeners' and the
//! upstream pool's business; a second protocol (HTTP/2) is a sibling here.

pub mod client_wire;
pub mod fields;
pub mod grpc;
pub mod wire;
