//! Sliding-window success counters: per tenant (experienced availability)
//! and per shard (request rate, for the utilization variance, and errors
//! and latency, for the status page).
//!
//! A window is a ring of fixed-length buckets. Recording touches only the
//! current bucket; reading sums the buckets still inside the window, or
//! lists them one by one (the status page's sparklines). Tenants are spread
//! over independently locked maps so that recording from many connections
//! at once rarely contends.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Buckets per window of a tenant: a ring per active tenant, so few.
pub const TENANT_BUCKETS: usize = 12;
/// Buckets per window of a shard: enough points for a sparkline.
pub const SHARD_BUCKETS: usize = 30;
/// Independently locked parts of a [`Windows`] map.
const STRIPES: usize = 16;

/// Successes and totals over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Successful requests.
    pub ok: u64,
    /// All requests.
    pub total: u64,
}

impl Tally {
    /// The success ratio, `None` with no requests.
    pub fn ratio(self) -> Option<f64> {
        (self.total > 0).then(|| self.ok as f64 / self.total as f64)
    }
}

/// What one bucket of a window holds.
pub trait Bucket: Copy + Default {
    /// What one request records.
    type Sample: Copy;
    /// Records one request.
    fn add(&mut self, sample: Self::Sample);
    /// Adds another bucket's counts.
    fn merge(&mut self, other: &Self);
    /// Its successes and requests.
    fn tally(&self) -> Tally;
}

impl Bucket for Tally {
    /// Whether the request succeeded.
    type Sample = bool;

    fn add(&mut self, ok: bool) {
        self.total += 1;
        self.ok += u64::from(ok);
    }

    fn merge(&mut self, other: &Self) {
        self.ok += other.ok;
        self.total += other.total;
    }

    fn tally(&self) -> Tally {
        *self
    }
}

/// Latency classes: class 0 is up to [`LATENCY_FLOOR`], class `i` reaches
/// up to `LATENCY_FLOOR × 2^(i/4)` (about 19 % wide), the last one is open.
const LATENCY_CLASSES: usize = 80;
/// The upper bound of latency class 0.
const LATENCY_FLOOR: Duration = Duration::from_micros(100);

/// 2^(1/4), 2^(2/4), 2^(3/4): where each quarter-octave class ends.
const QUARTERS: [f64; 3] = [
    1.189_207_115_002_721,
    std::f64::consts::SQRT_2,
    1.681_792_830_507_429,
];

/// The latency class of `elapsed`: the smallest `i` with
/// `elapsed ≤ LATENCY_FLOOR × 2^(i/4)`. It runs on every attempt, so it
/// reads the octave from the float's exponent and the quarter from three
/// comparisons of its mantissa, with no logarithm.
fn latency_class(elapsed: Duration) -> usize {
    if elapsed <= LATENCY_FLOOR {
        return 0;
    }
    let ratio = elapsed.as_secs_f64() / LATENCY_FLOOR.as_secs_f64();
    let bits = ratio.to_bits();
    // ratio = mantissa × 2^octave, mantissa in [1, 2), octave ≥ 0 here.
    let octave = ((bits >> 52) & 0x7ff) as usize - 1023;
    let mantissa = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    let quarter = if mantissa == 1.0 {
        0
    } else {
        1 + QUARTERS.iter().filter(|&&q| mantissa > q).count()
    };
    (octave * 4 + quarter).min(LATENCY_CLASSES - 1)
}

fn class_bound_ratio(class: usize) -> f64 {
    2f64.powf(class as f64 / 4.0)
}

/// The upper bound of latency class `class` (the last class has none; its
/// lower bound is given).
fn class_bound(class: usize) -> Duration {
    LATENCY_FLOOR.mul_f64(class_bound_ratio(class.min(LATENCY_CLASSES - 2)))
}

/// A shard's bucket: successes and requests, and the attempts' latencies
/// (time to the response head) by class.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    tally: Tally,
    latencies: [u32; LATENCY_CLASSES],
}

impl Default for Timed {
    fn default() -> Self {
        Self {
            tally: Tally::default(),
            latencies: [0; LATENCY_CLASSES],
        }
    }
}

impl Bucket for Timed {
    /// Whether the attempt succeeded, and how long it took.
    type Sample = (bool, Duration);

    fn add(&mut self, (ok, elapsed): (bool, Duration)) {
        self.tally.add(ok);
        let class = &mut self.latencies[latency_class(elapsed)];
        *class = class.saturating_add(1);
    }

    fn merge(&mut self, other: &Self) {
        self.tally.merge(&other.tally);
        for (mine, theirs) in self.latencies.iter_mut().zip(&other.latencies) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    fn tally(&self) -> Tally {
        self.tally
    }
}

impl Timed {
    /// The `q` quantile (0 < q ≤ 1) of the latencies by nearest rank, as
    /// the upper bound of its class: at most about 19 % above the true one
    /// (and at most [`LATENCY_FLOOR`] for anything faster). `None` without
    /// requests.
    pub fn latency_quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.latencies.iter().map(|&c| u64::from(c)).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (class, &count) in self.latencies.iter().enumerate() {
            seen += u64::from(count);
            if seen >= rank {
                return Some(class_bound(class));
            }
        }
        None
    }
}

#[derive(Debug, Clone)]
struct Ring<B, const N: usize> {
    /// The bucket number (time / bucket length) of each slot's contents.
    epochs: [u64; N],
    buckets: [B; N],
}

impl<B: Bucket, const N: usize> Ring<B, N> {
    fn new() -> Self {
        Self {
            epochs: [u64::MAX; N],
            buckets: [B::default(); N],
        }
    }

    fn record(&mut self, epoch: u64, sample: B::Sample) {
        let slot = (epoch % N as u64) as usize;
        if self.epochs[slot] != epoch {
            self.epochs[slot] = epoch;
            self.buckets[slot] = B::default();
        }
        self.buckets[slot].add(sample);
    }

    /// The bucket of `epoch`, if it is still held.
    fn at(&self, epoch: u64) -> Option<&B> {
        let slot = (epoch % N as u64) as usize;
        (self.epochs[slot] == epoch).then_some(&self.buckets[slot])
    }

    /// The buckets of the window ending in `epoch`, oldest first (empty
    /// ones for times without requests).
    fn history(&self, epoch: u64) -> [B; N] {
        let oldest = epoch.saturating_sub(N as u64 - 1);
        let mut out = [B::default(); N];
        // Before the window has run for its whole length, the first
        // buckets are times before the origin: empty.
        let skip = (N as u64 - 1).saturating_sub(epoch) as usize;
        for (offset, slot) in out.iter_mut().enumerate().skip(skip) {
            if let Some(bucket) = self.at(oldest + (offset - skip) as u64) {
                *slot = *bucket;
            }
        }
        out
    }

    fn sum(&self, epoch: u64) -> B {
        let mut sum = B::default();
        for bucket in &self.history(epoch) {
            sum.merge(bucket);
        }
        sum
    }
}

/// FNV-1a, for keys the operator chose (tenant ids, shard names): a
/// client cannot pick them, so the flooding that SipHash guards against is
/// not a risk here, and FNV costs a fraction of it per request.
#[derive(Debug, Clone, Copy)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type Map<B, const N: usize> = HashMap<String, Ring<B, N>, BuildHasherDefault<Fnv>>;

/// Sliding windows keyed by name, of `N` buckets of `B`: per tenant,
/// [`Tally`]s; per shard, [`Timed`] ones ([`ShardWindows`]).
#[derive(Debug)]
pub struct Windows<B: Bucket = Tally, const N: usize = TENANT_BUCKETS> {
    origin: Instant,
    /// The configured length (`bucket × N` can fall a few
    /// nanoseconds short of it, which would make a 10 s window read 9 s).
    length: Duration,
    /// A bucket's length in nanoseconds (at least a millisecond).
    bucket_nanos: u64,
    stripes: Vec<Mutex<Map<B, N>>>,
}

/// A shard's windows: requests, errors and latencies.
pub type ShardWindows = Windows<Timed, SHARD_BUCKETS>;

impl<B: Bucket, const N: usize> Windows<B, N> {
    /// Windows of `length`, measured from `origin`.
    pub fn new(length: Duration, origin: Instant) -> Self {
        let bucket = (length / N as u32).max(Duration::from_millis(1));
        Self {
            origin,
            length: length.max(bucket * N as u32),
            bucket_nanos: u64::try_from(bucket.as_nanos()).unwrap_or(u64::MAX),
            stripes: (0..STRIPES).map(|_| Mutex::new(Map::default())).collect(),
        }
    }

    /// The window's length.
    pub fn length(&self) -> Duration {
        self.length
    }

    /// One bucket's length: the window's resolution.
    pub fn bucket_length(&self) -> Duration {
        Duration::from_nanos(self.bucket_nanos)
    }

    /// How far into its bucket `now` is.
    pub fn into_bucket(&self, now: Instant) -> Duration {
        let since = now.saturating_duration_since(self.origin);
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(nanos % self.bucket_nanos)
    }

    fn epoch(&self, now: Instant) -> u64 {
        // In u64 nanoseconds (good for five centuries of uptime): a u128
        // division on every request costs more than the rest of recording.
        let since = now.saturating_duration_since(self.origin);
        let nanos = since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()));
        nanos / self.bucket_nanos
    }

    fn stripe(&self, key: &str) -> &Mutex<Map<B, N>> {
        let mut hash = Fnv::default();
        hash.write(key.as_bytes());
        &self.stripes[(hash.finish() % STRIPES as u64) as usize]
    }

    /// Records one request.
    pub fn record(&self, key: &str, sample: B::Sample, now: Instant) {
        let epoch = self.epoch(now);
        let mut map = self.stripe(key).lock().expect("window lock");
        match map.get_mut(key) {
            Some(ring) => ring.record(epoch, sample),
            None => {
                let mut ring = Ring::new();
                ring.record(epoch, sample);
                map.insert(key.to_owned(), ring);
            }
        }
    }

    /// One key's tally over the window.
    pub fn tally(&self, key: &str, now: Instant) -> Tally {
        self.sum(key, now).tally()
    }

    /// One key's buckets over the window, summed.
    pub fn sum(&self, key: &str, now: Instant) -> B {
        let epoch = self.epoch(now);
        self.stripe(key)
            .lock()
            .expect("window lock")
            .get(key)
            .map_or_else(B::default, |ring| ring.sum(epoch))
    }

    /// One key's buckets over the window, oldest first; the last is the
    /// bucket `now` is in, still filling.
    pub fn history(&self, key: &str, now: Instant) -> [B; N] {
        let epoch = self.epoch(now);
        self.stripe(key)
            .lock()
            .expect("window lock")
            .get(key)
            .map_or_else(|| [B::default(); N], |ring| ring.history(epoch))
    }

    /// Every key with requests in the window, and its tally. Keys whose
    /// window has emptied are dropped, so the map does not grow forever.
    pub fn all(&self, now: Instant) -> Vec<(String, Tally)> {
        let epoch = self.epoch(now);
        let mut out = Vec::new();
        for stripe in &self.stripes {
            let mut map = stripe.lock().expect("window lock");
            map.retain(|key, ring| {
                let tally = ring.sum(epoch).tally();
                if tally.total > 0 {
                    out.push((key.clone(), tally));
                }
                tally.total > 0
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn counts_slide_out_of_the_window() {
        let windows: Windows = Windows::new(Duration::from_secs(60), Instant::now());
        windows.record("acme", true, Instant::now());
        windows.record("acme", false, Instant::now());
        tokio::time::advance(Duration::from_secs(30)).await;
        windows.record("acme", true, Instant::now());
        assert_eq!(
            windows.tally("acme", Instant::now()),
            Tally { ok: 2, total: 3 }
        );
        tokio::time::advance(Duration::from_secs(35)).await;
        // The first two fell out; the third is still inside.
        assert_eq!(
            windows.tally("acme", Instant::now()),
            Tally { ok: 1, total: 1 }
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(windows.tally("acme", Instant::now()), Tally::default());
        assert!(windows.all(Instant::now()).is_empty());
    }

    #[test]
    fn the_length_is_the_configured_one() {
        for seconds in [10, 60, 3600] {
            let windows: Windows = Windows::new(Duration::from_secs(seconds), Instant::now());
            assert_eq!(windows.length().as_secs(), seconds);
            let shards = ShardWindows::new(Duration::from_secs(seconds), Instant::now());
            assert_eq!(shards.length().as_secs(), seconds);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn history_lists_each_bucket_oldest_first() {
        let windows = ShardWindows::new(Duration::from_secs(60), Instant::now());
        assert_eq!(windows.bucket_length(), Duration::from_secs(2));
        let ms = Duration::from_millis;
        // Two requests in the first bucket (one failed), one 10 s later.
        windows.record("s1", (true, ms(3)), Instant::now());
        windows.record("s1", (false, ms(30)), Instant::now());
        tokio::time::advance(Duration::from_secs(10)).await;
        windows.record("s1", (true, ms(3)), Instant::now());
        let history = windows.history("s1", Instant::now());
        let totals: Vec<u64> = history.iter().map(|b| b.tally().total).collect();
        let mut expected = vec![0; SHARD_BUCKETS];
        expected[SHARD_BUCKETS - 6] = 2;
        expected[SHARD_BUCKETS - 1] = 1;
        assert_eq!(totals, expected);
        assert_eq!(
            history[SHARD_BUCKETS - 6].tally(),
            Tally { ok: 1, total: 2 }
        );
        // The sum is the history's.
        let sum = windows.sum("s1", Instant::now());
        assert_eq!(sum.tally(), Tally { ok: 2, total: 3 });
        assert_eq!(
            sum.latency_quantile(0.5),
            Some(class_bound(latency_class(ms(3))))
        );
        assert_eq!(
            sum.latency_quantile(1.0),
            Some(class_bound(latency_class(ms(30))))
        );
        // A minute on, the first bucket has slid out.
        tokio::time::advance(Duration::from_secs(55)).await;
        let history = windows.history("s1", Instant::now());
        assert_eq!(history.iter().map(|b| b.tally().total).sum::<u64>(), 1);
        assert_eq!(history[SHARD_BUCKETS - 28].tally().total, 1);
        assert_eq!(
            windows.history("nobody", Instant::now()).len(),
            SHARD_BUCKETS
        );
    }

    proptest::proptest! {
        /// The class is the smallest whose bound is at least the latency,
        /// against the definition computed with logarithms.
        #[test]
        fn latency_classes_are_the_smallest_that_hold(nanos in 0u64..200_000_000_000) {
            let elapsed = Duration::from_nanos(nanos);
            let class = latency_class(elapsed);
            let bound = |i: usize| LATENCY_FLOOR.as_secs_f64() * class_bound_ratio(i);
            let seconds = elapsed.as_secs_f64();
            if class < LATENCY_CLASSES - 1 {
                proptest::prop_assert!(seconds <= bound(class) * (1.0 + 1e-12), "{elapsed:?} above class {class}");
            }
            if class > 0 {
                proptest::prop_assert!(seconds > bound(class - 1) * (1.0 - 1e-12), "{elapsed:?} fits class {}", class - 1);
            }
        }


        /// The class bound is the nearest-rank quantile rounded up by at
        /// most one class (about 19 %), against sorting every sample.
        #[test]
        fn latency_quantiles_bound_the_sorted_ones(
            micros in proptest::collection::vec(0u64..20_000_000, 1..200),
            q in 0.01f64..=1.0,
        ) {
            let mut bucket = Timed::default();
            for &m in &micros {
                bucket.add((true, Duration::from_micros(m)));
            }
            let mut sorted = micros.clone();
            sorted.sort_unstable();
            let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            let exact = Duration::from_micros(sorted[rank - 1]);
            let estimate = bucket.latency_quantile(q).unwrap();
            let open = class_bound(LATENCY_CLASSES - 1);
            if exact <= open {
                proptest::prop_assert!(estimate >= exact, "{estimate:?} < {exact:?}");
                proptest::prop_assert!(
                    estimate <= (exact.mul_f64(1.19)).max(LATENCY_FLOOR) + Duration::from_nanos(1),
                    "{estimate:?} is far above {exact:?}"
                );
            } else {
                proptest::prop_assert_eq!(estimate, open);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn all_lists_every_active_key() {
        let windows: Windows = Windows::new(Duration::from_secs(60), Instant::now());
        for i in 0..100 {
            windows.record(&format!("t{i}"), i % 10 != 0, Instant::now());
        }
        let all = windows.all(Instant::now());
        assert_eq!(all.len(), 100);
        assert_eq!(all.iter().filter(|(_, t)| t.ok == 0).count(), 10);
    }
}
