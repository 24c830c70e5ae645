//! The bytes' grammar, with no I/O and no policy: header fields kept as
//! they were written ([`fields`]), gRPC's conventions ([`grpc`]: content
//! type, status codes, `grpc-timeout`) and W3C Trace Context's
//! `traceparent` ([`trace_context`]). The lowest layer: the configuration
//! validates gRPC settings with it, the trust boundary filters [`fields`],
//! and the codecs in [`crate::protocol`] produce them.

pub mod fields;
pub mod grpc;
pub mod trace_context;
