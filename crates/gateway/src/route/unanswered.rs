//! The answer to a request no member answered (`Attempts::unanswered`):
//! the last shard's answer when there was one, else the gateway's own,
//! saying why (a poison stop, a shed, a quarantine, the deadline, an
//! unavailable subset), and what the request's trace says of it.

use http::{HeaderValue, Response, StatusCode, header};

use crate::route::attempt::Failure;
use crate::route::attempts::Attempts;
use crate::route::grpc::Kind;
use crate::route::refusal::refuse;
use crate::route::response::ResponseBody;
use crate::syntax::grpc::Code;
use crate::telemetry::metrics::Metrics;

impl Attempts<'_> {
    /// The outcome when nothing (more) may be tried: the last backend
    /// response if there was one, else why there is none.
    pub(super) fn unanswered(mut self) -> Response<ResponseBody> {
        let kind = self.kind;
        if let Some(trace) = self.trace.take()
            && let Some(outcome) = self.unanswered_outcome()
        {
            trace.note_outcome(outcome);
        }
        if self.containment.as_ref().is_some_and(|c| c.stopped) {
            return refuse(
                kind,
                StatusCode::BAD_GATEWAY,
                Code::Unavailable,
                "the request failed as if it crashed the shards it reached (routing.poison_after); \
                 no further shard is tried and the tenant is quarantined for a while; \
                 do not resend this request, and ask the operator if it is a valid one",
            );
        }
        // Every member left missed, or failed without an answer: the last
        // `404` is the answer (a backend's other answer wins over it).
        if !matches!(self.last_failure, Some((_, Some(_))))
            && let Some(response) = self.missed.as_mut().and_then(|m| m.response.take())
        {
            let (head, body) = response.into_parts();
            return Response::from_parts(head, ResponseBody::backend(body, None));
        }
        match self.last_failure {
            Some((_, Some(response))) => {
                let (head, body) = response.into_parts();
                Response::from_parts(head, ResponseBody::backend(body, None))
            }
            Some((Failure::Timeout, None)) => refuse(
                kind,
                StatusCode::GATEWAY_TIMEOUT,
                Code::DeadlineExceeded,
                "the backend did not answer in time",
            ),
            Some((Failure::Reset | Failure::Status(_) | Failure::GrpcStatus(_), None)) => refuse(
                kind,
                StatusCode::BAD_GATEWAY,
                Code::Unavailable,
                "the backend failed",
            ),
            // A gRPC call's deadline (often its own, short `grpc-timeout`)
            // ran out before a member could be tried: that is what its
            // client asked to be told.
            None | Some((Failure::Connect | Failure::Vanished, None))
                if kind == Kind::Grpc && self.out_of_time =>
            {
                refuse(
                    kind,
                    StatusCode::GATEWAY_TIMEOUT,
                    Code::DeadlineExceeded,
                    "the deadline passed before a shard could be tried",
                )
            }
            // Nothing was tried, or every member refused the connection:
            // the subset is out, and the client should come back later.
            None | Some((Failure::Connect | Failure::Vanished, None)) => {
                let message = if self.shed {
                    Metrics::cell_event(&self.gateway.metrics.shed, self.cell_name());
                    "every shard serving this tenant is at its in-flight limit; retry after the time in Retry-After"
                } else if self
                    .containment
                    .as_ref()
                    .is_some_and(|containment| containment.suspect)
                {
                    "this tenant is quarantined after its requests crashed shards, and the shards it may use now are unavailable; retry later"
                } else if self.spread_full {
                    "this tenant's requests in flight already use routing.poison_after shards of its subset and none of those could take this one; retry after the time in Retry-After, or ask the operator about routing.poison_spread"
                } else {
                    "no healthy shard is available for this tenant"
                };
                let mut response = refuse(
                    kind,
                    StatusCode::SERVICE_UNAVAILABLE,
                    Code::Unavailable,
                    message,
                );
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(self.config.routing.retry_after_seconds),
                );
                response
            }
        }
    }
}

impl Attempts<'_> {
    /// What a trace says of a request no member answered, by the same
    /// rules [`Attempts::unanswered`] answers it by; none when the answer
    /// is a shard's after all (its last failing status, or a miss).
    #[cold]
    #[inline(never)]
    fn unanswered_outcome(&self) -> Option<&'static str> {
        let suspect = self.containment.as_ref().is_some_and(|c| c.suspect);
        if self.containment.as_ref().is_some_and(|c| c.stopped) {
            return Some("contained");
        }
        Some(match &self.last_failure {
            Some((_, Some(_))) => return None,
            _ if self.missed.is_some() => return None,
            Some((Failure::Timeout, None)) => "timeout",
            Some((Failure::Reset | Failure::Status(_) | Failure::GrpcStatus(_), None)) => {
                "backend_failed"
            }
            _ if self.kind == Kind::Grpc && self.out_of_time => "deadline",
            _ if self.shed => "shed",
            _ if suspect => "quarantined",
            _ if self.spread_full => "spread_full",
            _ => "unavailable",
        })
    }
}
