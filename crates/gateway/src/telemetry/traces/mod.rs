//! Traces (`[tracing]`): what one request's trace holds as it goes
//! ([`Trace`]: its ids, the sampling decision, each attempt's span id and
//! outcome), the finished spans ([`spans`]) and their export over OTLP/HTTP
//! through a bounded queue that never makes a request wait ([`export`]).
//!
//! The request path keeps a trace only when `[tracing]` is set (otherwise
//! a branch at each step that would note something, and nothing else:
//! instructions per GET within 1 %, `bench/README.md`), and records spans
//! only for a sampled one: an unsampled
//! trace still gives each attempt its own `traceparent`, so that a shard's
//! own tracing joins the right trace, and costs two random numbers and one
//! small allocation.

pub mod export;
pub mod spans;
pub mod trace;

pub use export::{ExportSettings, TraceMetrics, Traces};
pub use spans::Finished;
pub use trace::{
    AttemptStart, MemberKind, RequestLine, RequestView, ShardView, Trace, TraceSettings,
    ratio_sampled,
};
