//! The attempts of one request, below the request path that runs them
//! ([`crate::route::proxy`]): which member the next attempt goes to
//! (`Attempts::member`), starting it and sending its exchange
//! (`Attempts::start`, `send`), judging its result against the failover
//! rules (`Attempts::judge`), poison containment's strikes and probes, and
//! the answer when no attempt answered (`Attempts::unanswered`). The rules
//! themselves are written in [`crate::route::proxy`]'s documentation.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Response, Uri};
use placement::ShardIndex;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::config::{Exhausted, GatewayConfig, PoisonSpread};
use crate::health::quarantine::{Marked, Suspects};
use crate::health::spread::Flight;
use crate::protocol::wire::RequestHead;
use crate::route::attempt::{self, Failure};
use crate::route::grpc::{self, Kind};
use crate::route::member::{self, Narrowed, Pick};
use crate::route::refusal::client_fault_response;
use crate::route::response::{InFlight, ResponseBody};
use crate::state::{Gateway, Lookback, ShardRuntime};
use crate::syntax::grpc::Code;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::traces::{AttemptStart, MemberKind, Trace};
use crate::upstream::UpstreamBody;
use crate::upstream::body::{ClientFault, RequestBody};

/// The attempts of one request: what each of them sends and may take, and
/// what the earlier ones left.
pub(super) struct Attempts<'a> {
    pub(super) gateway: &'a Arc<Gateway>,
    pub(super) config: &'a GatewayConfig,
    /// The tenant's cell and its shards.
    pub(super) cell: usize,
    pub(super) shards: &'a [Arc<ShardRuntime>],
    /// The tenant's subset.
    pub(super) subset: &'a [ShardIndex],
    /// The tenant's lookback members (empty for almost every tenant), and
    /// the window they belong to, when one is kept.
    pub(super) lookback: &'a [ShardIndex],
    pub(super) lookback_window: Option<&'a Lookback>,
    /// A `404` a member answered during the tenant's lookback window,
    /// kept as the answer should every member left miss too (boxed: rare).
    pub(super) missed: Option<Box<Missed>>,
    /// The tenant's id.
    pub(super) tenant: &'a str,
    /// Its [`TenantRecord::id_hash`](crate::tenants::Tenant::id_hash).
    pub(super) tenant_hash: u64,
    /// The client's head, the target and the body every attempt sends.
    pub(super) client: RequestHead<'a>,
    pub(super) uri: &'a Uri,
    pub(super) body: &'a RequestBody,
    /// Whether the request may reach a backend more than once.
    pub(super) safe_to_repeat: bool,
    /// The request's overall deadline.
    pub(super) deadline: Instant,
    /// The last clock reading.
    pub(super) now: Instant,
    /// The shards tried so far.
    pub(super) tried: SmallVec<[ShardIndex; 8]>,
    /// How the last attempt failed, with the backend's response when it
    /// answered with a retryable status.
    pub(super) last_failure: Option<(Failure, Option<Response<UpstreamBody>>)>,
    /// A gRPC call or any other request.
    pub(super) kind: Kind,
    /// The deadline passed before another attempt could start.
    pub(super) out_of_time: bool,
    /// Each shard's in-flight cap by index, when the cell has any.
    pub(super) caps: Option<&'a [u64]>,
    /// Poison containment's state for this request, once it has any (a
    /// crash-like failure, or a tenant with strikes or suspect): boxed, so
    /// that the request's future does not grow by what it rarely needs.
    pub(super) containment: Option<Box<Containment>>,
    /// Every member left was at its in-flight cap.
    pub(super) shed: bool,
    /// The tenant's attempts in flight were on `routing.poison_after`
    /// members, none of which this request could use
    /// (`routing.poison_spread = "contained"`).
    pub(super) spread_full: bool,
    /// Where the access log notes the shards tried, when it is on.
    pub(super) logged_tried: Option<&'a mut SmallVec<[ShardIndex; 8]>>,
    /// The request's trace, when `[tracing]` is on: each attempt's span.
    pub(super) trace: Option<&'a mut Trace>,
}

/// What poison containment knows about one request.
#[derive(Debug, Default)]
pub(super) struct Containment {
    /// The tenant is suspect.
    pub(super) suspect: bool,
    /// The only members the next attempt may go to (in the subset), when
    /// the tenant is narrowed: a suspect's struck members (none of them in
    /// the subset now: not narrowed), or those a tenant with strikes has
    /// struck or is being tried on once they number `poison_after`.
    pub(super) pinned: Option<SmallVec<[ShardIndex; 8]>>,
    /// The members this request failed crash-like on, as the tenant's own.
    pub(super) crashed: SmallVec<[ShardIndex; 8]>,
    /// The token naming this request's strikes (0: none asked for yet).
    pub(super) request: u64,
    /// The request was stopped: no member more is tried.
    pub(super) stopped: bool,
    /// With `[fleet]`: the next attempt would leave the tenant's first
    /// members, and the fleet's word on it is wanted first
    /// (`Attempts::consult_fleet`); `consulted` once it was had.
    pub(super) consult: bool,
    pub(super) consulted: bool,
    /// The strike the last attempt recorded here (its member, whether
    /// the request is at `poison_after` members of its own, what it did to
    /// the tenant), until `Attempts::crashed` takes it.
    pub(super) struck: Option<(ShardIndex, bool, Option<Marked>)>,
}

/// A `404` taken as a miss ([`Attempts::may_miss`]): the last such answer,
/// the client's if no other member answers otherwise. Dropped unanswered,
/// its body is read to the end if it is here already, so that its
/// connection goes back to the pool; else the connection is closed.
pub(super) struct Missed {
    pub(super) response: Option<Response<UpstreamBody>>,
}

impl Drop for Missed {
    fn drop(&mut self) {
        if let Some(response) = self.response.take() {
            discard(response.into_body());
        }
    }
}

/// Reads what of `body` has arrived already, without waiting: a small
/// body that came with its head (most `404`s) ends here and its
/// connection goes back to the pool; a body still on its way, or a large
/// one, is dropped with its connection (closed: never reused half read).
fn discard(mut body: UpstreamBody) {
    use hyper::body::Body as _;
    /// Beyond this much, a body is not worth reading to keep a connection.
    const MAX_DISCARDED: usize = 64 * 1024;
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let mut read = 0;
    while read <= MAX_DISCARDED {
        match Pin::new(&mut body).poll_frame(&mut context) {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                read += frame.data_ref().map_or(0, bytes::Bytes::len);
            }
            // Its end: the connection is back (if it may carry another).
            std::task::Poll::Ready(None | Some(Err(_))) | std::task::Poll::Pending => return,
        }
    }
}

/// An attempt's probe of a member its tenant has not struck, while the
/// tenant has strikes ([`Suspects::begin`]); ends with the attempt, however
/// it ends (a client that hangs up drops it too).
pub(super) struct Probe<'a> {
    pub(super) suspects: &'a Suspects,
    pub(super) tenant: &'a str,
    pub(super) shard: &'a str,
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        self.suspects.end(self.tenant, self.shard, Instant::now());
    }
}

/// What an attempt holds for poison containment until it ends.
enum Hold<'a> {
    /// A probe in the tenant's strikes (`routing.poison_spread = "free"`).
    Probe(#[allow(dead_code)] Probe<'a>),
    /// Its place among the members the tenant is on (`"contained"`).
    Flight(#[allow(dead_code)] Flight<'a>),
}

/// A member as [`crate::health::spread`] names it: its run-time state's
/// address, which the request holds while its attempt is counted there.
#[inline]
pub(super) fn member_key(shard: &Arc<ShardRuntime>) -> usize {
    Arc::as_ptr(shard) as usize
}

/// How many times one attempt's member is chosen again because racing
/// requests of its tenant took the last member it could try first: each
/// time the tenant's standing is read afresh and narrows the choice, so a
/// second pick almost always stands.
const PROBE_RACES: usize = 4;

/// The member the next attempt goes to.
pub(super) struct Member<'a> {
    index: ShardIndex,
    /// It is outside the subset.
    spill: bool,
    /// It is one of the tenant's lookback members.
    lookback: bool,
    /// A member of the subset not yet tried was out of rotation.
    steered: bool,
    /// How long to wait before the attempt (after a failed one).
    pub(super) backoff: Option<Duration>,
    /// The attempt draws on the retry budget.
    drew_budget: bool,
    /// Its in-flight place, taken already under its cap.
    reserved: Option<InFlight>,
    /// Its probe, when the tenant has strikes and had not struck it, or its
    /// place among the members the tenant is on.
    hold: Option<Hold<'a>>,
}

/// One attempt under way.
pub(super) struct Attempt<'a> {
    pub(super) shard: &'a Arc<ShardRuntime>,
    /// The shard's index in its cell.
    pub(super) shard_index: usize,
    pub(super) started: Instant,
    /// Counted until the response has been sent, or until this request is
    /// dropped (a client that hangs up cancels it mid-attempt).
    pub(super) in_flight: InFlight,
    /// Poison containment's hold on the member, if any.
    _hold: Option<Hold<'a>>,
}

impl<'a> Attempts<'a> {
    /// The cell's name, for metrics and logs.
    pub(super) fn cell_name(&self) -> &'a str {
        &self.config.cells[self.cell].name
    }

    /// The member step: the shard the next attempt goes to, if another
    /// attempt may be made.
    #[inline]
    pub(super) fn member(&mut self) -> Option<Member<'a>> {
        // Poison containment reads the tenant's strikes before every
        // attempt: one load while no tenant has any (almost always), and
        // no lock for a tenant without any while others have some.
        if self.gateway.suspects.any() || self.containment.is_some() {
            self.contain();
        }
        let routing = &self.config.routing;
        // A cap of at least k cannot bind while attempts stay in the
        // subset (struck members are in it too): such tenants, k = 2 with
        // the default `poison_after = 2` among them, skip the bookkeeping.
        let binds = (routing.poison_after as usize) < self.subset.len()
            || routing.exhausted == Exhausted::Spill;
        let contained =
            routing.poison_after != 0 && routing.poison_spread == PoisonSpread::Contained && binds;
        let mut races = 0;
        // The members the tenant is on or struck, once an attempt found it
        // at `poison_after` of them (`"contained"`): the next pick is among
        // them.
        let mut reached: Option<SmallVec<[ShardIndex; 8]>> = None;
        // With `[fleet]`, such a tenant's attempts on every replica go to
        // the same members first (`home`).
        let home = (contained && self.config.fleet.is_some()).then(|| self.home());
        if let Some(home) = &home
            && self.leaves_first_members(home)
        {
            return None;
        }
        let (choice, index, spill, hold) = loop {
            let mut narrowed = Narrowed {
                caps: self.caps,
                pinned: None,
            };
            if let Some(containment) = &self.containment {
                if containment.stopped {
                    return None;
                }
                narrowed.pinned = containment.pinned.as_deref();
            }
            if let Some(reached) = &reached {
                narrowed.pinned = Some(reached);
            }
            if narrowed.pinned.is_none()
                && let Some(home) = home.as_deref().filter(|home| !home.is_empty())
            {
                narrowed.pinned = Some(home);
            }
            let choice = member::pick(
                self.subset,
                self.open_lookback(),
                &self.tried,
                self.shards,
                self.config,
                self.now,
                narrowed,
            );
            let (index, spill) = match choice.pick {
                Pick::Member(index) | Pick::Lookback(index) => (index, false),
                Pick::Spill(index) => (index, true),
                Pick::Exhausted => {
                    self.shed |= choice.full;
                    self.spread_full |= reached.is_some();
                    return None;
                }
            };
            if contained {
                match self.flight(index) {
                    Ok(flight) => break (choice, index, spill, Some(Hold::Flight(flight))),
                    // The tenant is on `poison_after` members already (or
                    // racing requests got it there): join one of them.
                    Err(full) if races < PROBE_RACES => {
                        races += 1;
                        reached = Some(self.among(&full.reached));
                    }
                    Err(_) => {
                        self.spread_full = true;
                        return None;
                    }
                }
                continue;
            }
            if self.containment.is_none() {
                break (choice, index, spill, None);
            }
            match self.probe(index) {
                Ok(probe) => break (choice, index, spill, probe.map(Hold::Probe)),
                // Racing requests of the tenant took the last member it
                // could try first: read its standing again.
                Err(()) if races < PROBE_RACES => {
                    races += 1;
                    self.contain();
                }
                Err(()) => return None,
            }
        };
        let (backoff, drew_budget) = if self.tried.is_empty() {
            (None, false)
        } else {
            let (backoff, drew_budget) = self.failover()?;
            (Some(backoff), drew_budget)
        };
        Some(Member {
            index,
            spill,
            lookback: matches!(choice.pick, Pick::Lookback(_)),
            steered: choice.steered,
            backoff,
            drew_budget,
            reserved: choice.reserved,
            hold,
        })
    }

    /// The tenant's lookback members while its window is open, else none:
    /// one branch on an empty slice for every tenant that did not move.
    #[inline]
    fn open_lookback(&self) -> &'a [ShardIndex] {
        if self.lookback.is_empty() {
            return &[];
        }
        self.lookback_if_open()
    }

    #[cold]
    #[inline(never)]
    fn lookback_if_open(&self) -> &'a [ShardIndex] {
        match self.lookback_window {
            Some(window) if window.is_open(Instant::now()) => self.lookback,
            _ => &[],
        }
    }

    /// Whether a `404` from a member is a miss rather than the answer: the
    /// tenant moved, its window is open (a new member may not hold its
    /// data yet), and the request is a `GET` or `HEAD` that may be sent
    /// again (not a WebSocket upgrade, not gRPC).
    #[cold]
    #[inline(never)]
    pub(super) fn may_miss(&self) -> bool {
        self.kind == Kind::Http
            && self.safe_to_repeat
            && self.config.routing.failover
            && matches!(*self.client.method, http::Method::GET | http::Method::HEAD)
            && self.body.replayable()
            && !self.open_lookback().is_empty()
    }

    /// Keeps `response`, a `404` [`Self::may_miss`] allowed, as the answer
    /// should every member left miss too (a miss before it is let go), and
    /// lets the next attempt go at once: a miss is no failure, so it is
    /// neither a shard's failure nor a strike, and draws no retry budget.
    #[cold]
    #[inline(never)]
    pub(super) fn missed(&mut self, response: Response<UpstreamBody>) {
        if let Some(trace) = &mut self.trace {
            trace.attempt_missed();
        }
        self.last_failure = None;
        self.missed = Some(Box::new(Missed {
            response: Some(response),
        }));
    }

    /// Whether the request may fail over after a failed attempt, the
    /// backoff before it does, and whether it draws on the retry budget
    /// (the rules are the module's).
    fn failover(&mut self) -> Option<(Duration, bool)> {
        let (gateway, routing) = (self.gateway, &self.config.routing);
        // Without failover (a drill's control experiment) one attempt is
        // all a request gets.
        if !routing.failover {
            return None;
        }
        // The last attempt missed (`missed` leaves no failure): the next
        // member is asked at once, within the deadline.
        if self.last_failure.is_none() && self.missed.is_some() {
            if Instant::now() >= self.deadline {
                return None;
            }
            gateway.metrics.failover(self.cell_name(), "retry");
            return Some((Duration::ZERO, false));
        }
        let may_have_reached = self
            .last_failure
            .as_ref()
            .is_some_and(|(failure, _)| failure.maybe_sent());
        // A suspect tenant's request that may have reached a shard stays
        // there: the next member could be its next victim.
        if let Some(containment) = &self.containment
            && containment.suspect
            && self
                .last_failure
                .as_ref()
                .is_some_and(|(failure, _)| failure.maybe_sent() || failure.crash_like())
        {
            return None;
        }
        if self.kind == Kind::Grpc {
            // What a gRPC client would have seen: a connection that broke
            // is `UNAVAILABLE` to it, a per-try timeout `DEADLINE_EXCEEDED`
            // (as gRPC's own retry policy sees transport failures).
            let answer = match &self.last_failure {
                Some((Failure::GrpcStatus(status), _)) => Some(*status),
                Some((Failure::Reset, _)) => Some(Code::Unavailable),
                Some((Failure::Timeout, _)) => Some(Code::DeadlineExceeded),
                _ => None,
            };
            let retry = grpc::Retry {
                sent: may_have_reached,
                repeat_safe: self.safe_to_repeat,
                body_replayable: self.body.replayable(),
                answer,
                retry_on: routing.retry_on_grpc_status,
            };
            if !grpc::may_fail_over(retry) {
                return None;
            }
        }
        if may_have_reached {
            if !(self.safe_to_repeat && self.body.replayable()) {
                return None;
            }
            if !gateway.budget.try_withdraw(Instant::now()) {
                Metrics::cell_event(&gateway.metrics.budget_exhausted, self.cell_name());
                if let Some(trace) = &mut self.trace {
                    trace.note_budget_exhausted();
                }
                return None;
            }
        } else if !self.body.replayable() {
            return None;
        }
        gateway.metrics.failover(self.cell_name(), "retry");
        let backoff = backoff(self.tried.len(), routing.backoff_base, routing.backoff_max);
        if Instant::now() + backoff >= self.deadline {
            return None;
        }
        Some((backoff, may_have_reached))
    }

    /// The attempt step begins: counts the attempt on `member` and starts
    /// its clock, unless the deadline has passed.
    #[inline]
    pub(super) fn start(
        &mut self,
        member: Member<'a>,
        attempts: &mut usize,
    ) -> Option<Attempt<'a>> {
        let gateway = self.gateway;
        if self.tried.is_empty() && member.steered {
            // The tenant is being steered around a member that is out: a
            // failover that happens before any attempt fails.
            gateway.metrics.failover(self.cell_name(), "reroute");
        }
        if member.spill {
            // Counted only now that the attempt will really be made.
            Metrics::cell_event(&gateway.metrics.spills, self.cell_name());
        }
        if member.lookback {
            self.count_lookback();
        }
        self.tried.push(member.index);
        if let Some(tried) = &mut self.logged_tried {
            tried.push(member.index);
        }
        let started = if *attempts == 0 {
            self.now
        } else {
            Instant::now()
        };
        if started >= self.deadline {
            return None;
        }
        if let Some(trace) = &mut self.trace {
            trace.begin_attempt(
                AttemptStart {
                    shard: member.index,
                    member: if member.spill {
                        MemberKind::Spill
                    } else if member.lookback {
                        MemberKind::Lookback
                    } else {
                        MemberKind::Subset
                    },
                    steered: member.steered && *attempts == 0,
                    drew_budget: member.drew_budget,
                },
                started,
            );
        }
        let shard = &self.shards[member.index as usize];
        shard.attempts.fetch_add(1, Ordering::Relaxed);
        let in_flight = match member.reserved {
            Some(place) => place,
            None => InFlight::start(Arc::clone(shard)),
        };
        *attempts += 1;
        Some(Attempt {
            shard,
            shard_index: member.index as usize,
            started,
            in_flight,
            _hold: member.hold,
        })
    }

    /// The attempt's exchange with its shard. (A plain function returning
    /// the exchange, inlined so that `route` builds the exchange's future
    /// in place, a few kilobytes not copied, and awaits it with no layer
    /// between.)
    #[inline(always)]
    pub(super) fn send<'s>(
        &'s self,
        attempt: &Attempt<'a>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, Failure>> + use<'a, 's> {
        let mut client: RequestHead<'s> = match self.kind {
            Kind::Grpc => self.grpc_head(attempt),
            Kind::Http => self.client,
        };
        if let Some(trace) = &self.trace {
            client.added.traceparent = Some(trace.header());
        }
        attempt::send(
            attempt.shard,
            client,
            self.uri,
            self.body,
            self.timing(attempt),
            self.safe_to_repeat,
        )
    }

    /// The head a gRPC call's attempt sends: the shard is told what is left
    /// when the attempt goes out, until the per-try timeout when it already
    /// runs (a buffered body), else until the request's deadline.
    #[inline(never)]
    fn grpc_head(&self, attempt: &Attempt<'a>) -> RequestHead<'a> {
        let mut client = self.client;
        let timing = self.timing(attempt);
        let per_try = self.body.is_buffered().then_some(timing.per_try);
        let until = grpc::attempt_limit(timing.deadline, timing.started, per_try);
        client.added.grpc_timeout = Some(grpc::remaining(until, Instant::now()));
        client
    }

    /// The attempt's exchange for a WebSocket upgrade; boxed, so that the
    /// futures of ordinary requests do not grow by it.
    pub(super) fn upgrade<'s>(
        &'s self,
        attempt: &Attempt<'a>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, Failure>> + Send + 's>> {
        let mut client: RequestHead<'s> = self.client;
        if let Some(trace) = &self.trace {
            client.added.traceparent = Some(trace.header());
        }
        Box::pin(attempt::upgrade(
            attempt.shard,
            client,
            self.uri,
            self.timing(attempt),
        ))
    }

    /// When the attempt started and how long it may run.
    fn timing(&self, attempt: &Attempt<'a>) -> attempt::Timing {
        let limits = &self.config.limits;
        attempt::Timing {
            started: attempt.started,
            per_try: self.config.routing.per_try_timeout,
            deadline: self.deadline,
            body_idle: limits.backend_idle_timeout,
            body_total: limits.backend_body_timeout,
        }
    }

    /// The outcome of an attempt the client's body did not end: how it
    /// failed, if it did (a retryable status is a failure too), recorded
    /// for the shard.
    #[inline]
    pub(super) fn judge(
        &mut self,
        attempt: &Attempt<'a>,
        result: &Result<Response<UpstreamBody>, Failure>,
    ) -> Option<Failure> {
        let (gateway, config, shard) = (self.gateway, self.config, attempt.shard);
        let failure = match result {
            Err(failure) => Some(*failure),
            Ok(response)
                if config
                    .routing
                    .retry_on_status
                    .contains(&response.status().as_u16()) =>
            {
                Some(Failure::Status(response.status().as_u16()))
            }
            Ok(response) if self.kind == Kind::Grpc => {
                grpc::status_in_fields(response.status(), response.body().fields())
                    .filter(|status| config.routing.retry_on_grpc_status.contains(*status))
                    .map(Failure::GrpcStatus)
            }
            Ok(_) => None,
        };
        let now = Instant::now();
        self.now = now;
        if let Some(trace) = &mut self.trace {
            let status = result
                .as_ref()
                .ok()
                .map(|response| response.status().as_u16());
            let outcome = match failure {
                None => "ok",
                // A gRPC status the call may be retried on, in a 200.
                Some(Failure::GrpcStatus(_)) => "grpc_status",
                Some(failure) => failure.name(),
            };
            trace.end_attempt(now, outcome, status);
        }
        let elapsed = now.saturating_duration_since(attempt.started);
        shard
            .metrics(&gateway.metrics)
            .attempt(failure.map_or("ok", Failure::name), elapsed);
        gateway
            .shard_windows
            .record(shard.window_key(), (failure.is_none(), elapsed), now);
        // A failure counts now; a success only once its body has ended
        // cleanly (see `body::BackendBody`): a shard that answers heads and
        // then stalls must not have each head forgive its last stall.
        if let Some(failure) = failure {
            // The tenant's strike first: a request that then finds the
            // member ejected also finds why.
            if failure.crash_like() {
                self.strike_here(attempt.shard_index, failure, attempt.started);
            }
            gateway.record_failure(&config.outlier, shard, now);
        }
        failure
    }

    /// The client's body ended the attempt under way: its span says so,
    /// and the request's.
    pub(super) fn trace_client_fault(&mut self) {
        if let Some(trace) = &mut self.trace {
            trace.end_attempt(Instant::now(), "client_fault", None);
            trace.note_outcome("client_fault");
        }
    }

    /// Counts an attempt at a lookback member.
    #[cold]
    #[inline(never)]
    fn count_lookback(&self) {
        Metrics::cell_event(&self.gateway.metrics.lookback_attempts, self.cell_name());
        if let Some(window) = self.lookback_window {
            window.count_attempt();
        }
    }
}

impl Attempt<'_> {
    /// Whether an operator failed the shard.
    #[inline]
    pub(super) fn operator_failed(&self) -> bool {
        self.shard.health.lock().expect("health lock").failed
    }

    /// The outcome when the client's body ended the attempt.
    pub(super) fn client_fault(
        self,
        kind: Kind,
        fault: ClientFault,
        cell_name: &str,
    ) -> Response<ResponseBody> {
        drop(self.in_flight);
        tracing::debug!(cell = %cell_name, shard = %self.shard.id, ?fault, "the client's request body ended the attempt");
        client_fault_response(kind, fault)
    }
}

/// Exponential backoff with full jitter: a random wait up to
/// `base × 2^(attempt−1)`, capped.
fn backoff(attempt: usize, base: Duration, max: Duration) -> Duration {
    let nominal = base
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(max);
    nominal.mul_f64(fastrand::f64())
}
