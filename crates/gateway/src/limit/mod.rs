//! Per-tenant limits: how many requests a tenant may have in flight and
//! how fast it may send them (a token bucket), per replica, or across
//! replicas through Redis ([`store`]).
//!
//! Each snapshot holds every tenant's limits by the tenant's position in
//! the tenants file, `None` for a tenant without any (and no table at all
//! when no tenant has one), so the request path pays one branch for a
//! tenant without limits. What the limits count (the bucket, the requests
//! in flight, how often the tenant was refused) lives in a [`LimitState`]
//! that a reload hands on to the next snapshot for every tenant that still
//! has limits, so a reload neither refills a bucket nor forgets a request.

// The token bucket's arithmetic, pure.
pub mod bucket;
// The global bucket in Redis.
pub mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use tokio::time::Instant;

use crate::config::{TenantLimitSettings, TenantLimits};
use crate::protocol::client_wire::json_error_body;
use crate::tenants::{Tenant, TenantSlot, Tenants};
use bucket::{Bucket, Rate};
use store::Store;

/// A tenant's request rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// The bucket's rate.
    pub rate: Rate,
    /// `requests_per_second`, as configured (for messages and views).
    pub requests_per_second: f64,
    /// `burst`, as configured or defaulted (one second's worth).
    pub burst: u32,
}

/// One tenant's limits in one snapshot, and the state they count in.
#[derive(Debug)]
pub struct TenantLimit {
    /// Requests in flight at once, when limited.
    pub max_in_flight: Option<u32>,
    /// The request rate, when limited.
    pub rate: Option<RateLimit>,
    /// What the limits count, shared with the snapshots before and after.
    pub state: Arc<LimitState>,
    /// The JSON bodies of its 429s, by limit (empty for a limit it does
    /// not have), written with the snapshot.
    bodies: [Bytes; 2],
}

/// What a tenant's limits count, kept across reloads.
#[derive(Debug)]
pub struct LimitState {
    bucket: Bucket,
    in_flight: AtomicU64,
    limited_rate: AtomicU64,
    limited_in_flight: AtomicU64,
}

impl LimitState {
    fn new() -> Self {
        Self {
            bucket: Bucket::new(Instant::now()),
            in_flight: AtomicU64::new(0),
            limited_rate: AtomicU64::new(0),
            limited_in_flight: AtomicU64::new(0),
        }
    }

    /// The tenant's requests in flight now (counted only while it has a
    /// limit).
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Requests refused for the rate, and for the in-flight limit, since
    /// the gateway started (or since the tenant last had no limits).
    pub fn limited(&self) -> (u64, u64) {
        (
            self.limited_rate.load(Ordering::Relaxed),
            self.limited_in_flight.load(Ordering::Relaxed),
        )
    }
}

/// One of a tenant's requests in flight, counted until dropped (with the
/// response body it moves into, when a backend answered, or the WebSocket
/// tunnel, until both its directions end).
#[derive(Debug)]
pub struct TenantInFlight(Arc<LimitState>);

impl Drop for TenantInFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// The tenant already has `max` requests in flight.
    InFlight {
        /// Its `max_in_flight`.
        max: u32,
    },
    /// The tenant's bucket is empty.
    Rate {
        /// Its rate.
        limit: RateLimit,
        /// How long until a token is back.
        retry_after: Duration,
    },
}

impl Refusal {
    /// The limit's metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::InFlight { .. } => "in_flight",
            Refusal::Rate { .. } => "rate",
        }
    }

    /// `Retry-After`, in whole seconds (at least one).
    pub fn retry_after_seconds(&self) -> u64 {
        match self {
            // Requests in flight end at their own pace: a second is a
            // guess, and a short one.
            Refusal::InFlight { .. } => 1,
            Refusal::Rate { retry_after, .. } => retry_after.as_secs_f64().ceil().max(1.0) as u64,
        }
    }

    /// What the client is told: which limit, and what to do.
    pub fn message(&self) -> String {
        match self {
            Refusal::InFlight { max } => format!(
                "too many requests in flight for this tenant (its limit is {max} at once); wait for one to finish and retry after Retry-After seconds, or ask the operator to raise the tenant's max_in_flight"
            ),
            Refusal::Rate { limit, .. } => format!(
                "this tenant is over its request rate ({} requests per second, burst {}); retry after Retry-After seconds, or ask the operator to raise the tenant's requests_per_second",
                limit.requests_per_second, limit.burst
            ),
        }
    }
}

impl TenantLimit {
    /// A tenant's limits, counting in `state`.
    pub fn new(
        max_in_flight: Option<u32>,
        rate: Option<RateLimit>,
        state: Arc<LimitState>,
    ) -> Self {
        let body = |refusal: Option<Refusal>| {
            refusal.map_or_else(Bytes::new, |refusal| {
                json_error_body(StatusCode::TOO_MANY_REQUESTS, &refusal.message())
            })
        };
        let bodies = [
            body(max_in_flight.map(|max| Refusal::InFlight { max })),
            body(rate.map(|limit| Refusal::Rate {
                limit,
                retry_after: Duration::ZERO,
            })),
        ];
        Self {
            max_in_flight,
            rate,
            state,
            bodies,
        }
    }

    /// The JSON body of a 429 for `refusal`, one of this tenant's:
    /// `{"error": its message, "status": 429}`, written once (a flood is
    /// mostly refusals, and formatting each one was about a sixth of what
    /// a refusal cost).
    pub fn refusal_body(&self, refusal: &Refusal) -> Bytes {
        match refusal {
            Refusal::InFlight { .. } => self.bodies[0].clone(),
            Refusal::Rate { .. } => self.bodies[1].clone(),
        }
    }

    /// The in-flight step: counts the request in flight, unless the tenant
    /// is at its limit. `None` when the tenant's in-flight requests are
    /// not limited (nor counted).
    pub fn enter(&self) -> Result<Option<TenantInFlight>, Refusal> {
        let Some(max) = self.max_in_flight else {
            return Ok(None);
        };
        let state = &self.state;
        let before = state.in_flight.fetch_add(1, Ordering::Relaxed);
        // Counted first, so that no two requests both see room for one.
        let guard = TenantInFlight(Arc::clone(state));
        if before >= u64::from(max) {
            state.limited_in_flight.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::InFlight { max });
        }
        Ok(Some(guard))
    }

    /// The rate step on this replica's own bucket.
    pub fn take_local(&self, limit: RateLimit, now: Instant) -> Result<(), Refusal> {
        self.state
            .bucket
            .take(limit.rate, now)
            .map_err(|retry_after| self.refused(limit, retry_after))
    }

    /// Counts a refusal for the rate.
    pub fn refused(&self, limit: RateLimit, retry_after: Duration) -> Refusal {
        self.state.limited_rate.fetch_add(1, Ordering::Relaxed);
        Refusal::Rate { limit, retry_after }
    }
}

/// One registry bucket's limits, by place in the bucket.
type LimitBucket = Arc<[Option<Box<TenantLimit>>]>;

/// Every tenant's limits in one snapshot, and the global store if any.
#[derive(Debug, Default)]
pub struct Limits {
    /// By tenant slot (bucket, then place); empty when no tenant has a
    /// limit.
    per_tenant: Vec<LimitBucket>,
    store: Option<Arc<Store>>,
}

impl Limits {
    /// The limits `settings` and each tenant's own entry give, with the
    /// state of `previous` (the snapshot before, with its tenants) for
    /// tenants that had limits there too, and its store when the store's
    /// settings did not change.
    pub fn build(
        settings: &TenantLimitSettings,
        tenants: &Tenants,
        previous: Option<(&Limits, &Tenants)>,
    ) -> Self {
        let store = settings.store.as_ref().map(|wanted| {
            previous
                .and_then(|(limits, _)| limits.store.as_ref())
                .filter(|store| store.settings() == wanted)
                .cloned()
                .unwrap_or_else(|| Arc::new(Store::new(wanted.clone())))
        });
        let any = settings.defaults != TenantLimits::default()
            || tenants
                .iter()
                .any(|t| *t.limits() != TenantLimits::default());
        let per_tenant = if any {
            (0..tenants.bucket_count())
                .map(|bucket| Self::bucket(settings, tenants, bucket, previous))
                .collect()
        } else {
            Vec::new()
        };
        Self { per_tenant, store }
    }

    /// The same limits with the buckets `touched` of `tenants` (a registry
    /// changed from the one these were built for) worked out again, every
    /// other bucket shared; state carries over by tenant id.
    pub fn patched(
        &self,
        settings: &TenantLimitSettings,
        tenants: &Tenants,
        before: &Tenants,
        touched: &[usize],
    ) -> Self {
        if self.per_tenant.is_empty() {
            // No tenant had limits: rebuilt whole only if one has now.
            return Self::build(settings, tenants, Some((self, before)));
        }
        let mut per_tenant = self.per_tenant.clone();
        for &bucket in touched {
            per_tenant[bucket] = Self::bucket(settings, tenants, bucket, Some((self, before)));
        }
        Self {
            per_tenant,
            store: self.store.clone(),
        }
    }

    /// One bucket's limits.
    fn bucket(
        settings: &TenantLimitSettings,
        tenants: &Tenants,
        bucket: usize,
        previous: Option<(&Limits, &Tenants)>,
    ) -> LimitBucket {
        (0..tenants.bucket_len(bucket))
            .map(|index| {
                let slot = TenantSlot {
                    bucket: bucket as u32,
                    index: index as u32,
                };
                let tenant = tenants.at(slot).expect("a slot of this bucket");
                Self::one(settings, tenant, previous)
            })
            .collect()
    }

    fn one(
        settings: &TenantLimitSettings,
        tenant: Tenant<'_>,
        previous: Option<(&Limits, &Tenants)>,
    ) -> Option<Box<TenantLimit>> {
        let (max_in_flight, rate) = effective(&settings.defaults, tenant.limits())?;
        let state = previous
            .and_then(|(limits, tenants)| limits.of(tenants.get(tenant.id())?.slot()))
            .map_or_else(|| Arc::new(LimitState::new()), |old| Arc::clone(&old.state));
        Some(Box::new(TenantLimit::new(max_in_flight, rate, state)))
    }

    /// The limits of the tenant at `slot`, if it has any.
    #[inline]
    pub fn of(&self, slot: TenantSlot) -> Option<&TenantLimit> {
        self.per_tenant
            .get(slot.bucket as usize)?
            .get(slot.index as usize)?
            .as_deref()
    }

    /// The global store, when `limits.tenant.store` is set.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// Every tenant with limits: its slot and limits.
    pub fn iter(&self) -> impl Iterator<Item = (TenantSlot, &TenantLimit)> {
        self.per_tenant
            .iter()
            .enumerate()
            .flat_map(|(bucket, limits)| {
                limits.iter().enumerate().filter_map(move |(index, limit)| {
                    let slot = TenantSlot {
                        bucket: bucket as u32,
                        index: index as u32,
                    };
                    Some((slot, limit.as_deref()?))
                })
            })
    }
}

/// A tenant's limits: its own entry's, else `[limits.tenant]`'s; `None`
/// when it has none. A zero in its own entry lifts the default.
fn effective(
    defaults: &TenantLimits,
    own: &TenantLimits,
) -> Option<(Option<u32>, Option<RateLimit>)> {
    let max_in_flight = own
        .max_in_flight
        .or(defaults.max_in_flight)
        .filter(|&max| max > 0);
    let rate = own
        .per_request
        .or(defaults.per_request)
        .filter(|per_request| !per_request.is_zero())
        .map(|per_request| {
            let burst = own
                .burst
                .or(defaults.burst)
                .unwrap_or_else(|| one_seconds_worth(per_request));
            RateLimit {
                rate: Rate::new(per_request, burst),
                requests_per_second: (1.0 / per_request.as_secs_f64() * 1000.0).round() / 1000.0,
                burst,
            }
        });
    (max_in_flight.is_some() || rate.is_some()).then_some((max_in_flight, rate))
}

/// The default burst: a second's worth of requests, at least one.
fn one_seconds_worth(per_request: Duration) -> u32 {
    (1.0 / per_request.as_secs_f64())
        .ceil()
        .clamp(1.0, 1_000_000.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_in_flight: Option<u32>, rate: Option<f64>, burst: Option<u32>) -> TenantLimits {
        TenantLimits {
            max_in_flight,
            per_request: rate.map(|rate| crate::config::per_request(rate, true).unwrap()),
            burst,
        }
    }

    #[test]
    fn a_tenants_own_entry_wins_and_zero_lifts_the_default() {
        let defaults = limits(Some(10), Some(100.0), None);
        let (max, rate) = effective(&defaults, &TenantLimits::default()).unwrap();
        assert_eq!(max, Some(10));
        let rate = rate.unwrap();
        assert_eq!((rate.requests_per_second, rate.burst), (100.0, 100));
        let (max, rate) = effective(&defaults, &limits(Some(3), Some(2.5), Some(7))).unwrap();
        assert_eq!(max, Some(3));
        assert_eq!(
            rate.map(|r| (r.requests_per_second, r.burst)),
            Some((2.5, 7))
        );
        assert_eq!(
            effective(&defaults, &limits(Some(0), Some(0.0), None)),
            None
        );
        let (max, rate) = effective(&defaults, &limits(Some(0), None, Some(1))).unwrap();
        assert_eq!(max, None);
        assert_eq!(rate.map(|r| r.burst), Some(1));
        assert_eq!(
            effective(&TenantLimits::default(), &TenantLimits::default()),
            None
        );
        // Half a request a second still allows one at once.
        let (_, rate) =
            effective(&TenantLimits::default(), &limits(None, Some(0.5), None)).unwrap();
        assert_eq!(rate.map(|r| r.burst), Some(1));
    }

    #[test]
    fn a_refusals_body_written_with_the_snapshot_is_the_one_it_would_format() {
        let rate = RateLimit {
            rate: Rate::new(Duration::from_millis(400), 7),
            requests_per_second: 2.5,
            burst: 7,
        };
        let limit = TenantLimit::new(Some(3), Some(rate), Arc::new(LimitState::new()));
        for refusal in [
            Refusal::InFlight { max: 3 },
            Refusal::Rate {
                limit: rate,
                retry_after: Duration::from_millis(400),
            },
        ] {
            let body = limit.refusal_body(&refusal);
            assert_eq!(
                body,
                json_error_body(StatusCode::TOO_MANY_REQUESTS, &refusal.message())
            );
            let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(parsed["status"], 429);
            assert!(parsed["error"].as_str().unwrap().contains(match refusal {
                Refusal::InFlight { .. } => "3 at once",
                Refusal::Rate { .. } => "2.5 requests per second, burst 7",
            }));
        }
    }

    #[test]
    fn the_in_flight_limit_counts_until_each_request_is_dropped() {
        let limit = TenantLimit::new(Some(2), None, Arc::new(LimitState::new()));
        let one = limit.enter().unwrap();
        let two = limit.enter().unwrap();
        assert_eq!(limit.enter().unwrap_err(), Refusal::InFlight { max: 2 });
        assert_eq!(limit.state.in_flight(), 2);
        drop(one);
        let three = limit.enter().unwrap();
        assert!(limit.enter().is_err());
        drop((two, three));
        assert_eq!(limit.state.in_flight(), 0);
        assert_eq!(limit.state.limited(), (0, 2));
    }
}
