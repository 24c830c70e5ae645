//! Shard health: active checks with rise/fall thresholds, passive outlier
//! ejection, and staleness.
//!
//! A shard is routable when it is not ejected, not failed or drained by an
//! operator, and its active health is *known healthy*. Active results flip
//! state only after `rise` consecutive passes or `fall` consecutive failures
//! (one blip does not move traffic), and a result older than the staleness
//! bound counts as unknown: a health checker that stopped running must not
//! leave a dead shard marked healthy forever. Before the first check
//! completes a shard is *presumed* healthy, so a gateway can serve as soon as
//! it starts; passive ejection protects it from a shard that is in fact down.
//!
//! Passive ejection counts consecutive failed attempts from real traffic;
//! at the threshold the shard is ejected for `base × ejections` (capped,
//! jittered), and readmitted when the ejection runs out. A passing active
//! check never forgives failed attempts: a shard whose `/healthz` answers
//! while its real traffic fails is still ejected by that traffic.
//!
//! Ejections heal, as Envoy's do, so that a restarted shard is not held out
//! after it is back (in a rolling restart the next shard would go down
//! while it is still out, and tenants on exactly those two would be fully
//! down):
//! - a passing check ends an ejection when the checks saw the shard fail
//!   just before it (Envoy's `successful_active_health_check_uneject_host`).
//!   Only then: a check that never failed says nothing about the failures
//!   that ejected the shard, and a gray failure (`/healthz` fine, traffic
//!   failing) must stay ejected;
//! - the multiplier drops by one for every `max_ejection` the shard goes
//!   without an ejection;
//! - a cell lets passive ejection hold out at most `max_ejection_percent`
//!   of its shards, counting those out for other reasons, and at least one
//!   ([`ejection_allowed`]); [`HealthState::record_failure`] says when an
//!   ejection is due, and the caller, who sees the whole cell, either
//!   [`HealthState::eject`]s or [`HealthState::skip_ejection`]s.
//!
//! Every transition takes `now` explicitly, so the state machine is tested
//! with a paused tokio clock and no sleeps.

// The quarantine, the retry budget and the spread of failures; the active
// checks that drive this state machine are in `crate::probe`, above the
// snapshot whose shards they walk.
pub mod quarantine;
pub mod retry_budget;
pub mod spread;

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{HealthSettings, OutlierSettings};

/// What active checks currently say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Active {
    /// No check has completed yet: presumed healthy.
    Presumed,
    /// `rise` consecutive passes (or the initial presumption not yet
    /// contradicted `fall` times).
    Healthy,
    /// `fall` consecutive failures.
    Unhealthy,
}

impl Active {
    /// A short lowercase name for the admin API.
    pub fn name(self) -> &'static str {
        match self {
            Active::Presumed => "presumed",
            Active::Healthy => "healthy",
            Active::Unhealthy => "unhealthy",
        }
    }
}

/// Why a shard is out of rotation (or that it is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// Routable.
    Up,
    /// Active checks failed.
    Unhealthy,
    /// The last check result is older than the staleness bound.
    Stale,
    /// Ejected by passive outlier detection until the given time.
    Ejected,
    /// Marked failed by an operator (drills).
    Failed,
    /// Drained by an operator: no new requests.
    Drained,
    /// Its discovery source no longer lists it (or lists it not ready):
    /// kept in placement, down, for `discovery.removal_grace_seconds`.
    Missing,
}

impl Availability {
    /// A short lowercase name for metrics and the admin API.
    pub fn name(self) -> &'static str {
        match self {
            Availability::Up => "up",
            Availability::Unhealthy => "unhealthy",
            Availability::Stale => "stale",
            Availability::Ejected => "ejected",
            Availability::Failed => "failed",
            Availability::Drained => "drained",
            Availability::Missing => "missing",
        }
    }

    /// Who took the shard out, for people: `None` when it is up.
    pub fn cause(self) -> Option<&'static str> {
        match self {
            Availability::Up => None,
            Availability::Unhealthy => Some("health check"),
            Availability::Stale => Some("stale health check"),
            Availability::Ejected => Some("ejection"),
            Availability::Failed | Availability::Drained => Some("admin"),
            Availability::Missing => Some("discovery"),
        }
    }
}

/// Why a shard was ejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EjectReason {
    /// Consecutive failed attempts (connect errors, timeouts, resets,
    /// retryable statuses).
    ConsecutiveFailures,
}

impl EjectReason {
    /// A short lowercase name for metrics.
    pub fn name(self) -> &'static str {
        match self {
            EjectReason::ConsecutiveFailures => "consecutive_failures",
        }
    }
}

/// The health of one shard.
#[derive(Debug, Clone)]
pub struct HealthState {
    active: Active,
    passes: u32,
    failures: u32,
    last_check: Option<Instant>,
    consecutive_errors: u32,
    ejections: u32,
    ejected_until: Option<Instant>,
    /// When the last ejection began.
    ejected_at: Option<Instant>,
    /// When active checks last turned the shard unhealthy.
    unhealthy_at: Option<Instant>,
    /// When an operator last failed or drained a shard that was neither.
    marked_at: Option<Instant>,
    /// When the last ejection ended (or is due to end): the multiplier
    /// decays from there.
    ejection_ended: Option<Instant>,
    /// Whether the last check passed (`None` before the first).
    last_passed: Option<bool>,
    /// Set by an operator.
    pub failed: bool,
    /// Set by an operator.
    pub drained: bool,
    /// Set by discovery: the source no longer lists the shard.
    pub missing: bool,
    /// When discovery last found it missing.
    missing_at: Option<Instant>,
    /// Who set the operator's marks (or restored them) last, and when:
    /// with `[fleet]`, the latest mark of any replica wins.
    pub mark_origin: Option<MarkOrigin>,
}

/// Who set a shard's marks, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkOrigin {
    /// The replica (`fleet.replica_id`).
    pub by: String,
    /// On its wall clock, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

impl Default for HealthState {
    fn default() -> Self {
        Self::new()
    }
}

impl HealthState {
    /// A shard no check has looked at yet.
    pub fn new() -> Self {
        Self {
            active: Active::Presumed,
            passes: 0,
            failures: 0,
            last_check: None,
            consecutive_errors: 0,
            ejections: 0,
            ejected_until: None,
            ejected_at: None,
            unhealthy_at: None,
            marked_at: None,
            ejection_ended: None,
            last_passed: None,
            failed: false,
            drained: false,
            missing: false,
            missing_at: None,
            mark_origin: None,
        }
    }

    /// What active checks say.
    pub fn active(&self) -> Active {
        self.active
    }

    /// How many times the shard has been ejected, before decay (see
    /// [`HealthState::multiplier`]).
    pub fn ejections(&self) -> u32 {
        self.ejections
    }

    /// The ejection count at `now` after decay: one less for every whole
    /// `max_ejection` since the last ejection ended. The next ejection
    /// lasts `base × (this + 1)`.
    pub fn multiplier(&self, now: Instant, settings: &OutlierSettings) -> u32 {
        let Some(ended) = self.ejection_ended else {
            return self.ejections;
        };
        if settings.max_ejection.is_zero() {
            return self.ejections;
        }
        let healthy = now.saturating_duration_since(ended);
        let periods = healthy.as_nanos() / settings.max_ejection.as_nanos();
        let periods = u32::try_from(periods).unwrap_or(u32::MAX);
        self.ejections.saturating_sub(periods)
    }

    /// Whether the last active check passed (`None` before the first one
    /// completed).
    pub fn last_check_passed(&self) -> Option<bool> {
        self.last_passed
    }

    /// When the last active check completed (`None` before the first).
    pub fn last_check_at(&self) -> Option<Instant> {
        self.last_check
    }

    /// Whether the shard is ejected at `now`.
    pub fn is_ejected(&self, now: Instant) -> bool {
        self.ejected_until.is_some_and(|until| now < until)
    }

    /// Records an active check result. Returns true when the active state
    /// changed.
    pub fn record_check(&mut self, passed: bool, now: Instant, settings: &HealthSettings) -> bool {
        self.last_check = Some(now);
        self.last_passed = Some(passed);
        let before = self.active;
        if passed {
            // Checks failed right before this pass: the shard was down as
            // its checks see it, and is back. If it is ejected, that
            // ejection was for the same outage, and it ends now.
            let recovered = self.failures > 0;
            self.failures = 0;
            self.passes = self.passes.saturating_add(1);
            if self.passes >= settings.rise || self.active == Active::Presumed {
                self.active = Active::Healthy;
            }
            // A passing check says the health endpoint is fine, not that
            // real traffic is: it forgives no failed attempts, or a shard
            // whose data path fails while its `/healthz` answers (a gray
            // failure) would never be ejected as long as its failures came
            // further apart than the check interval. For the same reason
            // only a pass after failed checks ends an ejection early. An
            // ejection that has run out is simply over.
            if recovered && self.is_ejected(now) {
                self.ejected_until = None;
                self.ejection_ended = Some(now);
            }
            if !self.is_ejected(now) {
                self.ejected_until = None;
            }
        } else {
            self.passes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.failures >= settings.fall && self.active != Active::Unhealthy {
                self.active = Active::Unhealthy;
                self.unhealthy_at = Some(now);
            }
        }
        before != self.active
    }

    /// Records a real request's attempt that succeeded: its response ended
    /// cleanly. (No clock is needed to forgive.)
    pub fn record_success(&mut self) {
        self.consecutive_errors = 0;
    }

    /// Records the outcome of a real request's attempt. Returns the ejection
    /// reason when this failure ejected the shard.
    pub fn record_attempt(
        &mut self,
        success: bool,
        now: Instant,
        settings: &OutlierSettings,
    ) -> Option<EjectReason> {
        if success {
            self.consecutive_errors = 0;
            return None;
        }
        let due = self.record_failure(now, settings)?;
        self.eject(due, now, settings)
    }

    /// Records a real request's failed attempt, without ejecting: returns
    /// the reason when an ejection is due, which the caller, who sees the
    /// shard's cell, carries out ([`HealthState::eject`]) or skips
    /// ([`HealthState::skip_ejection`]) by [`ejection_allowed`].
    pub fn record_failure(
        &mut self,
        now: Instant,
        settings: &OutlierSettings,
    ) -> Option<EjectReason> {
        self.consecutive_errors = self.consecutive_errors.saturating_add(1);
        if self.consecutive_errors < settings.consecutive_failures || self.is_ejected(now) {
            return None;
        }
        Some(EjectReason::ConsecutiveFailures)
    }

    /// Ejects the shard for `base × (multiplier + 1)`, when it is due
    /// ([`HealthState::record_failure`]) and not ejected already (a
    /// concurrent failure may have ejected it first). Returns the reason
    /// when it did.
    pub fn eject(
        &mut self,
        reason: EjectReason,
        now: Instant,
        settings: &OutlierSettings,
    ) -> Option<EjectReason> {
        if self.consecutive_errors < settings.consecutive_failures || self.is_ejected(now) {
            return None;
        }
        self.ejections = self.multiplier(now, settings).saturating_add(1);
        let length = ejection_length(self.ejections, settings);
        let until = now + length;
        self.ejected_until = Some(until);
        self.ejected_at = Some(now);
        // Decay starts when the ejection runs out, unless a passing check
        // ends it sooner (see `record_check`).
        self.ejection_ended = Some(until);
        self.consecutive_errors = 0;
        Some(reason)
    }

    /// Gives up a due ejection that the cell's cap does not allow: the run
    /// of failures is spent, so the next `consecutive_failures` in a row
    /// ask again (when the cell may have room).
    pub fn skip_ejection(&mut self) {
        self.consecutive_errors = 0;
    }

    /// An operator's marks: `failed` (treated as down) and `drained` (no
    /// new requests). The time a shard went from neither to either is kept
    /// for [`HealthState::out_since`].
    pub fn mark(&mut self, failed: bool, drained: bool, now: Instant) {
        if (failed || drained) && !(self.failed || self.drained) {
            self.marked_at = Some(now);
        }
        self.failed = failed;
        self.drained = drained;
    }

    /// Discovery's mark: the shard's source no longer lists it (treated
    /// as down), or lists it again.
    pub fn set_missing(&mut self, missing: bool, now: Instant) {
        if missing && !self.missing {
            self.missing_at = Some(now);
        }
        self.missing = missing;
    }

    /// Since when the shard has been out for the reason
    /// [`HealthState::availability`] gives at `now`; `None` while it is up
    /// (or for a mark set without [`HealthState::mark`]).
    pub fn out_since(&self, now: Instant, settings: &HealthSettings) -> Option<Instant> {
        match self.availability(now, settings) {
            Availability::Up => None,
            Availability::Failed | Availability::Drained => self.marked_at,
            Availability::Missing => self.missing_at,
            Availability::Ejected => self.ejected_at,
            Availability::Unhealthy => self.unhealthy_at,
            Availability::Stale => self.last_check.map(|at| at + settings.staleness),
        }
    }

    /// Whether and why the shard is out of rotation at `now`.
    pub fn availability(&self, now: Instant, settings: &HealthSettings) -> Availability {
        if self.failed {
            return Availability::Failed;
        }
        if self.drained {
            return Availability::Drained;
        }
        if self.missing {
            return Availability::Missing;
        }
        if self.is_ejected(now) {
            return Availability::Ejected;
        }
        match self.active {
            Active::Unhealthy => Availability::Unhealthy,
            Active::Presumed => Availability::Up,
            Active::Healthy => match self.last_check {
                Some(at) if now.saturating_duration_since(at) > settings.staleness => {
                    Availability::Stale
                }
                _ => Availability::Up,
            },
        }
    }
}

/// Whether a cell of `shards` shards, `others_out` of which (not counting
/// the one due) are out of rotation for any reason, may eject one more:
/// while fewer than `max_ejection_percent` of its shards are out, and
/// always when none is (Envoy's `max_ejection_percent`, which likewise
/// lets one host go in a small cluster).
pub fn ejection_allowed(others_out: usize, shards: usize, settings: &OutlierSettings) -> bool {
    others_out < ejection_cap(shards, settings.max_ejection_percent)
}

/// How many of a cell's `shards` passive ejection may hold out at once:
/// `percent` of them, rounded down, and at least one.
pub fn ejection_cap(shards: usize, percent: u8) -> usize {
    (shards.saturating_mul(usize::from(percent)) / 100).max(1)
}

/// `base × ejections`, capped at `max`, with up to 10 % jitter taken off so
/// that shards ejected together do not all return at the same instant.
fn ejection_length(ejections: u32, settings: &OutlierSettings) -> Duration {
    let nominal = settings
        .base_ejection
        .saturating_mul(ejections)
        .min(settings.max_ejection);
    let jitter = nominal.mul_f64(fastrand::f64() * 0.1);
    nominal - jitter
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> HealthSettings {
        HealthSettings {
            path: "/healthz".into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            rise: 2,
            fall: 3,
            staleness: Duration::from_secs(3),
            grpc: false,
        }
    }

    fn outlier() -> OutlierSettings {
        OutlierSettings {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(25),
            max_ejection_percent: 10,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn flips_only_after_fall_and_rise() {
        let (settings, mut state) = (health(), HealthState::new());
        let now = Instant::now();
        assert_eq!(state.availability(now, &settings), Availability::Up);
        assert!(!state.record_check(false, now, &settings));
        assert!(!state.record_check(false, now, &settings));
        assert_eq!(state.availability(now, &settings), Availability::Up);
        assert!(state.record_check(false, now, &settings));
        assert_eq!(state.availability(now, &settings), Availability::Unhealthy);
        assert!(!state.record_check(true, now, &settings));
        assert_eq!(state.availability(now, &settings), Availability::Unhealthy);
        assert!(state.record_check(true, now, &settings));
        assert_eq!(state.availability(now, &settings), Availability::Up);
    }

    #[tokio::test(start_paused = true)]
    async fn old_results_go_stale() {
        let (settings, mut state) = (health(), HealthState::new());
        state.record_check(true, Instant::now(), &settings);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Up
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Stale
        );
        state.record_check(true, Instant::now(), &settings);
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Up
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ejection_grows_with_each_ejection_and_is_capped() {
        let (settings, outliers, mut state) = (health(), outlier(), HealthState::new());
        let eject = |state: &mut HealthState| {
            let now = Instant::now();
            assert_eq!(state.record_attempt(false, now, &outliers), None);
            assert_eq!(state.record_attempt(false, now, &outliers), None);
            assert_eq!(
                state.record_attempt(false, now, &outliers),
                Some(EjectReason::ConsecutiveFailures)
            );
        };
        // A success in between resets the count.
        let now = Instant::now();
        state.record_attempt(false, now, &outliers);
        state.record_attempt(false, now, &outliers);
        state.record_attempt(true, now, &outliers);
        assert_eq!(state.record_attempt(false, now, &outliers), None);
        state.record_attempt(true, now, &outliers);

        for (ejection, nominal) in [(1, 10), (2, 20), (3, 25), (4, 25)] {
            eject(&mut state);
            assert_eq!(state.ejections(), ejection);
            assert_eq!(
                state.availability(Instant::now(), &settings),
                Availability::Ejected
            );
            // Jitter takes at most 10 % off the nominal length.
            tokio::time::advance(Duration::from_secs(nominal) * 9 / 10 - Duration::from_millis(1))
                .await;
            assert_eq!(
                state.availability(Instant::now(), &settings),
                Availability::Ejected
            );
            tokio::time::advance(Duration::from_secs(nominal) / 10 + Duration::from_millis(2))
                .await;
            assert_eq!(
                state.availability(Instant::now(), &settings),
                Availability::Up
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn passing_checks_do_not_forgive_failed_attempts() {
        let (settings, outliers, mut state) = (health(), outlier(), HealthState::new());
        let now = Instant::now();
        state.record_attempt(false, now, &outliers);
        state.record_attempt(false, now, &outliers);
        // The health endpoint answers, again and again, between failures.
        state.record_check(true, now, &settings);
        state.record_check(true, now, &settings);
        assert_eq!(
            state.record_attempt(false, now, &outliers),
            Some(EjectReason::ConsecutiveFailures)
        );
    }

    /// Ejects `state` at `now` with `consecutive_failures` failures.
    fn eject_now(state: &mut HealthState, outliers: &OutlierSettings) {
        let now = Instant::now();
        for _ in 1..outliers.consecutive_failures {
            assert_eq!(state.record_attempt(false, now, outliers), None);
        }
        assert_eq!(
            state.record_attempt(false, now, outliers),
            Some(EjectReason::ConsecutiveFailures)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_after_failed_checks_ends_an_ejection_at_once() {
        let (settings, outliers, mut state) = (health(), outlier(), HealthState::new());
        state.record_check(true, Instant::now(), &settings);
        // The shard goes down: traffic ejects it, and a check fails.
        eject_now(&mut state, &outliers);
        state.record_check(false, Instant::now(), &settings);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Ejected
        );
        // It is back: the first passing check readmits it, 1 s into a
        // 9-10 s ejection.
        state.record_check(true, Instant::now(), &settings);
        assert!(!state.is_ejected(Instant::now()));
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Up
        );
        assert_eq!(state.last_check_passed(), Some(true));
        // The same after active checks had turned it unhealthy: readmitted
        // from the ejection at once, routable after `rise` passes.
        eject_now(&mut state, &outliers);
        for _ in 0..settings.fall {
            state.record_check(false, Instant::now(), &settings);
        }
        state.record_check(true, Instant::now(), &settings);
        assert!(!state.is_ejected(Instant::now()));
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Unhealthy
        );
        state.record_check(true, Instant::now(), &settings);
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Up
        );
    }

    #[tokio::test(start_paused = true)]
    async fn checks_that_never_failed_do_not_end_an_ejection() {
        // A gray failure: `/healthz` passes throughout while traffic fails.
        let (settings, outliers, mut state) = (health(), outlier(), HealthState::new());
        state.record_check(true, Instant::now(), &settings);
        eject_now(&mut state, &outliers);
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(1)).await;
            state.record_check(true, Instant::now(), &settings);
            assert_eq!(
                state.availability(Instant::now(), &settings),
                Availability::Ejected
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_multiplier_decays_by_one_per_max_ejection_without_one() {
        let (settings, outliers, mut state) = (health(), outlier(), HealthState::new());
        // Three ejections back to back: 10 s, 20 s, 25 s (capped).
        for _ in 0..3 {
            eject_now(&mut state, &outliers);
            tokio::time::advance(Duration::from_secs(25)).await;
        }
        assert_eq!(state.ejections(), 3);
        // The last one ended at most 25 s ago (jitter takes some off).
        let ended = state.ejection_ended.unwrap();
        let at = |offset: u64| ended + Duration::from_secs(offset);
        assert_eq!(state.multiplier(at(0), &outliers), 3);
        assert_eq!(state.multiplier(at(24), &outliers), 3);
        assert_eq!(state.multiplier(at(25), &outliers), 2);
        assert_eq!(state.multiplier(at(49), &outliers), 2);
        assert_eq!(state.multiplier(at(50), &outliers), 1);
        assert_eq!(state.multiplier(at(75), &outliers), 0);
        assert_eq!(state.multiplier(at(1000), &outliers), 0);
        // The next ejection after 50 s healthy is the second's length
        // (20 s), not the fourth's (capped 25 s).
        tokio::time::advance(at(50) - Instant::now()).await;
        eject_now(&mut state, &outliers);
        assert_eq!(state.ejections(), 2);
        tokio::time::advance(Duration::from_secs(20) * 9 / 10 - Duration::from_millis(1)).await;
        assert!(state.is_ejected(Instant::now()));
        tokio::time::advance(Duration::from_secs(2) + Duration::from_millis(2)).await;
        assert!(!state.is_ejected(Instant::now()));
        // An ejection ended early by a check decays from that check.
        state.record_check(false, Instant::now(), &settings);
        eject_now(&mut state, &outliers);
        assert_eq!(state.ejections(), 3);
        state.record_check(true, Instant::now(), &settings);
        let readmitted = Instant::now();
        assert_eq!(
            state.multiplier(readmitted + Duration::from_secs(25), &outliers),
            2
        );
    }

    #[test]
    fn the_cap_is_a_share_of_the_cell_and_at_least_one() {
        let with = |percent| OutlierSettings {
            max_ejection_percent: percent,
            ..outlier()
        };
        // 10 % of 8 is 0, rounded down: one shard may still go.
        assert_eq!(ejection_cap(8, 10), 1);
        assert!(ejection_allowed(0, 8, &with(10)));
        assert!(!ejection_allowed(1, 8, &with(10)));
        assert!(!ejection_allowed(3, 8, &with(10)));
        assert_eq!(ejection_cap(8, 0), 1);
        assert!(ejection_allowed(0, 8, &with(0)));
        assert!(!ejection_allowed(1, 8, &with(0)));
        assert_eq!(ejection_cap(8, 50), 4);
        assert!(ejection_allowed(3, 8, &with(50)));
        assert!(!ejection_allowed(4, 8, &with(50)));
        assert_eq!(ejection_cap(8, 100), 8);
        assert!(ejection_allowed(7, 8, &with(100)));
        assert_eq!(ejection_cap(20, 10), 2);
        assert_eq!(ejection_cap(1, 10), 1);
        assert_eq!(ejection_cap(usize::MAX, 100), usize::MAX / 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_skipped_ejection_spends_the_run_of_failures() {
        let (settings, outliers, mut state) = (health(), outlier(), HealthState::new());
        let now = Instant::now();
        assert_eq!(state.record_failure(now, &outliers), None);
        assert_eq!(state.record_failure(now, &outliers), None);
        let due = state.record_failure(now, &outliers).unwrap();
        state.skip_ejection();
        assert_eq!(state.availability(now, &settings), Availability::Up);
        assert_eq!(state.ejections(), 0);
        // A skipped run cannot be ejected late, and the next full run is
        // due again.
        assert_eq!(state.eject(due, now, &outliers), None);
        assert_eq!(state.record_failure(now, &outliers), None);
        assert_eq!(state.record_failure(now, &outliers), None);
        let due = state.record_failure(now, &outliers).unwrap();
        assert_eq!(state.eject(due, now, &outliers), Some(due));
        assert_eq!(state.availability(now, &settings), Availability::Ejected);
    }

    #[tokio::test(start_paused = true)]
    async fn out_since_is_when_the_current_cause_began() {
        let (settings, outliers, mut state) = (health(), outlier(), HealthState::new());
        let start = Instant::now();
        let since = |state: &HealthState| state.out_since(Instant::now(), &settings);
        assert_eq!(since(&state), None);
        // Unhealthy at the third failed check, and a fourth moves nothing.
        for _ in 0..3 {
            state.record_check(false, Instant::now(), &settings);
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        state.record_check(false, Instant::now(), &settings);
        assert_eq!(since(&state), Some(start + Duration::from_secs(2)));
        state.record_check(true, Instant::now(), &settings);
        state.record_check(true, Instant::now(), &settings);
        assert_eq!(since(&state), None);
        // Ejected: since the failure that ejected it.
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..3 {
            state.record_attempt(false, Instant::now(), &outliers);
        }
        assert_eq!(since(&state), Some(start + Duration::from_secs(4)));
        // An operator's mark wins, since it was set; draining a failed
        // shard keeps that time.
        tokio::time::advance(Duration::from_secs(1)).await;
        state.mark(true, false, Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        state.mark(true, true, Instant::now());
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Failed
        );
        assert_eq!(since(&state), Some(start + Duration::from_secs(5)));
        state.mark(false, false, Instant::now());
        // Stale: since the last check went past the bound.
        tokio::time::advance(Duration::from_secs(30)).await;
        state.record_check(true, Instant::now(), &settings);
        let checked = Instant::now();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Stale
        );
        assert_eq!(since(&state), Some(checked + settings.staleness));
    }

    #[tokio::test(start_paused = true)]
    async fn operator_states_win() {
        let (settings, mut state) = (health(), HealthState::new());
        state.failed = true;
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Failed
        );
        state.failed = false;
        state.drained = true;
        assert_eq!(
            state.availability(Instant::now(), &settings),
            Availability::Drained
        );
    }
}
