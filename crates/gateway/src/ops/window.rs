//! Sliding-window success counters: per tenant (experienced availability)
//! and per shard (request rate, for the utilization variance).
//!
//! A window is a ring of fixed-length buckets. Recording touches only the
//! current bucket; reading sums the buckets still inside the window. Tenants
//! are spread over independently locked maps so that recording from many
//! connections at once rarely contends.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Buckets per window.
const BUCKETS: usize = 12;
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

#[derive(Debug, Clone)]
struct Ring {
    /// The bucket number (time / bucket length) of each slot's contents.
    epochs: [u64; BUCKETS],
    tallies: [Tally; BUCKETS],
}

impl Ring {
    fn new() -> Self {
        Self {
            epochs: [u64::MAX; BUCKETS],
            tallies: [Tally::default(); BUCKETS],
        }
    }

    fn record(&mut self, epoch: u64, ok: bool) {
        let slot = (epoch % BUCKETS as u64) as usize;
        if self.epochs[slot] != epoch {
            self.epochs[slot] = epoch;
            self.tallies[slot] = Tally::default();
        }
        self.tallies[slot].total += 1;
        self.tallies[slot].ok += u64::from(ok);
    }

    fn sum(&self, epoch: u64) -> Tally {
        let oldest = epoch.saturating_sub(BUCKETS as u64 - 1);
        self.epochs
            .iter()
            .zip(&self.tallies)
            .filter(|(e, _)| **e != u64::MAX && **e >= oldest && **e <= epoch)
            .fold(Tally::default(), |sum, (_, t)| Tally {
                ok: sum.ok + t.ok,
                total: sum.total + t.total,
            })
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

type Map = HashMap<String, Ring, BuildHasherDefault<Fnv>>;

/// Sliding windows keyed by name.
#[derive(Debug)]
pub struct Windows {
    origin: Instant,
    /// The configured length (`bucket × BUCKETS` can fall a few
    /// nanoseconds short of it, which would make a 10 s window read 9 s).
    length: Duration,
    /// A bucket's length in nanoseconds (at least a millisecond).
    bucket_nanos: u64,
    stripes: Vec<Mutex<Map>>,
}

impl Windows {
    /// Windows of `length`, measured from `origin`.
    pub fn new(length: Duration, origin: Instant) -> Self {
        let bucket = (length / BUCKETS as u32).max(Duration::from_millis(1));
        Self {
            origin,
            length: length.max(bucket * BUCKETS as u32),
            bucket_nanos: u64::try_from(bucket.as_nanos()).unwrap_or(u64::MAX),
            stripes: (0..STRIPES).map(|_| Mutex::new(Map::default())).collect(),
        }
    }

    /// The window's length.
    pub fn length(&self) -> Duration {
        self.length
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

    fn stripe(&self, key: &str) -> &Mutex<Map> {
        let mut hash = Fnv::default();
        hash.write(key.as_bytes());
        &self.stripes[(hash.finish() % STRIPES as u64) as usize]
    }

    /// Records one request.
    pub fn record(&self, key: &str, ok: bool, now: Instant) {
        let epoch = self.epoch(now);
        let mut map = self.stripe(key).lock().expect("window lock");
        match map.get_mut(key) {
            Some(ring) => ring.record(epoch, ok),
            None => {
                let mut ring = Ring::new();
                ring.record(epoch, ok);
                map.insert(key.to_owned(), ring);
            }
        }
    }

    /// One key's tally over the window.
    pub fn tally(&self, key: &str, now: Instant) -> Tally {
        let epoch = self.epoch(now);
        self.stripe(key)
            .lock()
            .expect("window lock")
            .get(key)
            .map_or_else(Tally::default, |ring| ring.sum(epoch))
    }

    /// Every key with requests in the window, and its tally. Keys whose
    /// window has emptied are dropped, so the map does not grow forever.
    pub fn all(&self, now: Instant) -> Vec<(String, Tally)> {
        let epoch = self.epoch(now);
        let mut out = Vec::new();
        for stripe in &self.stripes {
            let mut map = stripe.lock().expect("window lock");
            map.retain(|key, ring| {
                let tally = ring.sum(epoch);
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
        let windows = Windows::new(Duration::from_secs(60), Instant::now());
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
            let windows = Windows::new(Duration::from_secs(seconds), Instant::now());
            assert_eq!(windows.length().as_secs(), seconds);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn all_lists_every_active_key() {
        let windows = Windows::new(Duration::from_secs(60), Instant::now());
        for i in 0..100 {
            windows.record(&format!("t{i}"), i % 10 != 0, Instant::now());
        }
        let all = windows.all(Instant::now());
        assert_eq!(all.len(), 100);
        assert_eq!(all.iter().filter(|(_, t)| t.ok == 0).count(), 10);
    }
}
