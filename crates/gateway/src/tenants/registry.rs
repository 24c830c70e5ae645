//! The compact registry: every tenant in flat arrays, split into buckets by
//! a hash of its id, with the API-key digests in buckets of their own.
//!
//! Why buckets: a change to one tenant (an admin `PUT`, a row changed in
//! the tenant store) copies the one bucket it lands in and shares every
//! other bucket with the registry before it, so a change costs what a
//! bucket costs (a few hundred tenants), never what the population costs,
//! and requests in flight keep reading the version they started with.
//!
//! Why flat arrays: a tenant is one 56-byte record, its id a slice of one
//! string, its API-key digest 16 bytes more in a key bucket; the rare
//! tenant with its own `k`, shards or limits points at a boxed extra.
//! Lookups are two binary searches over a bucket's hashes, and allocate
//! nothing. A loaded population is three allocations (records sorted by
//! hash, ids, keys) that every bucket borrows a range of: nothing is
//! over-allocated per bucket, and nothing is left behind in the heap when
//! loading ends. A bucket a change touches gets arrays of its own.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};

use crate::config::{GatewayConfig, TenantLimits};

use super::entry::{TenantEntry, ValidEntry};

/// A tenant id hashed with a key drawn once per process: the same id gives
/// the same hash across reloads and changes, and ids (which only operators
/// write) cannot be picked to collide. What the registry's buckets and the
/// per-tenant tables of run-time state that outlive a reload are keyed by.
pub fn id_hash(id: &str) -> u64 {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new).hash_one(id)
}

/// Tenants per bucket the registry aims at: small enough that copying one
/// on a change is cheap, large enough that the bucket table is small.
const TENANTS_PER_BUCKET: usize = 128;

/// The most buckets: 2^20 (at 128 tenants each, 128 million tenants).
const MAX_BUCKET_BITS: u32 = 20;

/// A tenant's cell field: the cell index, with the top bit set when the
/// tenant has an API key; all low bits set when the entry names no cell.
const HAS_KEY: u16 = 1 << 15;
const NO_CELL: u16 = HAS_KEY - 1;

/// One tenant: 56 bytes.
#[derive(Clone)]
struct Record {
    hash: u64,
    /// The rare settings (own `k`, shards or limits).
    extra: Option<Box<Extra>>,
    /// SHA-256 of its API key (zeros without one: see `cell`).
    digest: [u8; 32],
    /// Where its id starts in its bucket's `ids`.
    id_start: u32,
    id_len: u16,
    cell: u16,
}

impl Record {
    fn new(hash: u64, entry: &ValidEntry, id_start: usize) -> Self {
        let extra = (entry.k.is_some()
            || entry.shards.is_some()
            || entry.limits != TenantLimits::default())
        .then(|| {
            Box::new(Extra {
                k: entry.k,
                shards: entry.shards.clone(),
                limits: entry.limits,
            })
        });
        let mut cell = entry.cell.unwrap_or(NO_CELL);
        if entry.api_key_sha256.is_some() {
            cell |= HAS_KEY;
        }
        Self {
            hash,
            extra,
            digest: entry.api_key_sha256.unwrap_or_default(),
            id_start: id_start as u32,
            id_len: entry.id.len() as u16,
            cell,
        }
    }
}

/// Bytes 0..8 of a digest: its key entry's sort key, whose top bits
/// choose the key bucket.
#[inline]
fn prefix_of(digest: &[u8; 32]) -> u64 {
    u64::from_le_bytes(digest[..8].try_into().expect("eight bytes"))
}

/// What few tenants have.
#[derive(Clone, Debug, PartialEq)]
struct Extra {
    k: Option<u32>,
    shards: Option<Box<[u32]>>,
    limits: TenantLimits,
}

/// A loaded population, each array allocated once at its size: what
/// buckets untouched since loading borrow ranges of.
struct Base {
    /// Every tenant, sorted by hash.
    records: Vec<Record>,
    /// Every id.
    ids: String,
    /// Every key entry, sorted.
    keys: Vec<(u64, u64)>,
}

/// One bucket: its tenants sorted by id hash, and their ids.
#[derive(Clone)]
enum Bucket {
    /// `records[start..end]` of the loaded population, ids in its `ids`.
    Base(Arc<Base>, u32, u32),
    /// Arrays of its own, since a change touched it.
    Own {
        records: Vec<Record>,
        ids: String,
        /// Bytes of `ids` no record points at any more.
        garbage: usize,
    },
}

/// One key bucket: (bytes 0..8 of a digest, the id hash of its tenant),
/// sorted; the top bits of the first choose the bucket.
#[derive(Clone)]
enum KeyBucket {
    /// `keys[start..end]` of the loaded population.
    Base(Arc<Base>, u32, u32),
    /// Its own, since a change touched it.
    Own(Vec<(u64, u64)>),
}

impl Bucket {
    #[inline]
    fn records(&self) -> &[Record] {
        match self {
            Self::Base(base, start, end) => &base.records[*start as usize..*end as usize],
            Self::Own { records, .. } => records,
        }
    }

    #[inline]
    fn ids(&self) -> &str {
        match self {
            Self::Base(base, ..) => &base.ids,
            Self::Own { ids, .. } => ids,
        }
    }

    #[inline]
    fn id(&self, record: &Record) -> &str {
        let start = record.id_start as usize;
        &self.ids()[start..start + usize::from(record.id_len)]
    }

    /// Its arrays, copied out of the base first if it still borrows them.
    fn own(&mut self) -> (&mut Vec<Record>, &mut String, &mut usize) {
        if let Self::Base(..) = self {
            let mut ids = String::new();
            let records = self
                .records()
                .iter()
                .map(|record| {
                    let mut own = record.clone();
                    own.id_start = ids.len() as u32;
                    ids.push_str(self.id(record));
                    own
                })
                .collect();
            *self = Self::Own {
                records,
                ids,
                garbage: 0,
            };
        }
        match self {
            Self::Own {
                records,
                ids,
                garbage,
            } => (records, ids, garbage),
            Self::Base(..) => unreachable!("made its own above"),
        }
    }
}

impl KeyBucket {
    #[inline]
    fn entries(&self) -> &[(u64, u64)] {
        match self {
            Self::Base(base, start, end) => &base.keys[*start as usize..*end as usize],
            Self::Own(entries) => entries,
        }
    }

    fn own(&mut self) -> &mut Vec<(u64, u64)> {
        if let Self::Base(..) = self {
            *self = Self::Own(self.entries().to_vec());
        }
        match self {
            Self::Own(entries) => entries,
            Self::Base(..) => unreachable!("made its own above"),
        }
    }
}

/// Where a tenant is in one version of the registry: its bucket and its
/// place there. Per-tenant caches of a snapshot are kept by it; a change
/// to the registry renumbers only the bucket it touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TenantSlot {
    /// The bucket.
    pub bucket: u32,
    /// The place in the bucket.
    pub index: u32,
}

/// Every tenant, by id and by API-key digest.
#[derive(Clone)]
pub struct Tenants {
    buckets: Vec<Arc<Bucket>>,
    keys: Vec<Arc<KeyBucket>>,
    /// 64 minus the bucket bits: a hash's top bits choose its bucket.
    shift: u32,
    len: usize,
}

impl Default for Tenants {
    fn default() -> Self {
        Self::loading(0)
            .finish()
            .expect("an empty registry has no duplicates")
    }
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Digests are credential verifiers: count them, never print them.
        f.debug_struct("Tenants")
            .field("tenants", &self.len)
            .field("buckets", &self.buckets.len())
            .field(
                "api_keys",
                &self.keys.iter().map(|k| k.entries().len()).sum::<usize>(),
            )
            .finish()
    }
}

/// One tenant of one registry version, borrowed from it.
#[derive(Clone, Copy)]
pub struct Tenant<'r> {
    bucket: &'r Bucket,
    record: &'r Record,
    slot: TenantSlot,
}

impl std::fmt::Debug for Tenant<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenant")
            .field("id", &self.id())
            .field("cell", &self.cell())
            .field("k", &self.k())
            .field("api_key", &self.has_api_key())
            .finish()
    }
}

impl PartialEq for Tenant<'_> {
    /// The same tenant of the same registry version.
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.record, other.record)
    }
}

static NO_LIMITS: TenantLimits = TenantLimits {
    max_in_flight: None,
    per_request: None,
    burst: None,
};

impl<'r> Tenant<'r> {
    /// The tenant id.
    #[inline]
    pub fn id(&self) -> &'r str {
        self.bucket.id(self.record)
    }

    /// [`id_hash`] of the id, worked out once when the tenant was added.
    #[inline]
    pub fn id_hash(&self) -> u64 {
        self.record.hash
    }

    /// Where it is in this registry version.
    #[inline]
    pub fn slot(&self) -> TenantSlot {
        self.slot
    }

    /// The cell its entry names, by index (`None`: the first cell).
    #[inline]
    pub fn cell(&self) -> Option<usize> {
        let cell = self.record.cell & !HAS_KEY;
        (cell != NO_CELL).then_some(usize::from(cell))
    }

    /// The cell it routes in.
    #[inline]
    pub fn cell_index(&self) -> usize {
        self.cell().unwrap_or(0)
    }

    /// Its own subset size.
    #[inline]
    pub fn k(&self) -> Option<u32> {
        self.record.extra.as_ref()?.k
    }

    /// Its dedicated shards, as indices into its cell's shards.
    #[inline]
    pub fn shards(&self) -> Option<&'r [u32]> {
        self.record.extra.as_ref()?.shards.as_deref()
    }

    /// Its own limits (none set for most tenants).
    #[inline]
    pub fn limits(&self) -> &'r TenantLimits {
        self.record.extra.as_ref().map_or(&NO_LIMITS, |e| &e.limits)
    }

    /// Whether it authenticates by API key.
    #[inline]
    pub fn has_api_key(&self) -> bool {
        self.record.cell & HAS_KEY != 0
    }

    /// SHA-256 of its API key, when it has one.
    #[inline]
    pub fn api_key_sha256(&self) -> Option<&'r [u8; 32]> {
        self.has_api_key().then_some(&self.record.digest)
    }

    /// Whether it is this registry version's record (not one of another
    /// version at the same slot).
    #[inline]
    pub fn is_in(&self, tenants: &Tenants) -> bool {
        tenants
            .buckets
            .get(self.slot.bucket as usize)
            .is_some_and(|bucket| std::ptr::eq(bucket.as_ref(), self.bucket))
    }

    /// The tenant as an entry in `config`'s terms (the configuration it
    /// was checked against): what a snapshot file or an export writes,
    /// and what a reload checks again against the next configuration.
    pub fn to_entry(&self, config: &GatewayConfig) -> TenantEntry {
        let cell = &config.cells()[self.cell_index()];
        let limits = self.limits();
        TenantEntry {
            id: self.id().to_owned(),
            api_key_sha256: self.api_key_sha256().map(|d| text::hex(d)),
            cell: self.cell().map(|_| cell.name.clone()),
            k: self.k(),
            shards: self.shards().map(|shards| {
                shards
                    .iter()
                    .map(|&s| cell.shards[s as usize].id.clone())
                    .collect()
            }),
            max_in_flight: limits.max_in_flight,
            requests_per_second: limits.per_request.map(|per| {
                if per.is_zero() {
                    0.0
                } else {
                    (1e6 / per.as_secs_f64()).round() / 1e6
                }
            }),
            burst: limits.burst,
        }
    }

    /// The tenant as the checked entry it came from.
    pub fn to_valid(&self) -> ValidEntry {
        ValidEntry {
            id: self.id().to_owned(),
            api_key_sha256: self.api_key_sha256().copied(),
            cell: self.cell().map(|c| c as u16),
            k: self.k(),
            shards: self.shards().map(Box::from),
            limits: *self.limits(),
        }
    }
}

/// Why a change to the registry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// The id is listed twice.
    #[error("tenant {0:?} is listed twice")]
    DuplicateId(String),
    /// The API key digest belongs to another tenant already.
    #[error("another tenant ({0:?}) has the same API key; every tenant needs its own")]
    DuplicateKey(String),
}

impl Tenants {
    /// A registry of about `expected` tenants to load with
    /// [`Loading::push`] (the estimate only sizes the arrays).
    pub fn loading(expected: usize) -> Loading {
        Loading {
            records: Vec::with_capacity(expected),
            ids: String::with_capacity(expected * 16),
            keys: Vec::with_capacity(expected),
        }
    }

    #[inline]
    fn bucket_of(&self, hash: u64) -> usize {
        // `checked_shr`: with one bucket the shift is 64.
        hash.checked_shr(self.shift).unwrap_or(0) as usize
    }

    #[inline]
    fn key_bucket_of(&self, digest: &[u8; 32]) -> usize {
        prefix_of(digest).checked_shr(self.shift).unwrap_or(0) as usize
    }

    /// Number of tenants.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of API keys (one per tenant that has one).
    pub fn api_keys(&self) -> usize {
        self.keys.iter().map(|k| k.entries().len()).sum()
    }

    /// The number of buckets (each a [`TenantSlot::bucket`]).
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// The number of tenants in one bucket.
    #[inline]
    pub fn bucket_len(&self, bucket: usize) -> usize {
        self.buckets.get(bucket).map_or(0, |b| b.records().len())
    }

    /// Whether a bucket is the same in both versions (shared, not copied).
    pub fn same_bucket(&self, other: &Tenants, bucket: usize) -> bool {
        match (self.buckets.get(bucket), other.buckets.get(bucket)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    #[inline]
    fn tenant(&self, bucket: usize, index: usize) -> Tenant<'_> {
        let b = &self.buckets[bucket];
        Tenant {
            bucket: b,
            record: &b.records()[index],
            slot: TenantSlot {
                bucket: bucket as u32,
                index: index as u32,
            },
        }
    }

    /// The tenant with this id.
    #[inline]
    pub fn get(&self, id: &str) -> Option<Tenant<'_>> {
        let hash = id_hash(id);
        let bucket = self.bucket_of(hash);
        let records = self.buckets[bucket].records();
        let start = records.partition_point(|r| r.hash < hash);
        (start..records.len())
            .take_while(|&i| records[i].hash == hash)
            .map(|i| self.tenant(bucket, i))
            .find(|tenant| tenant.id() == id)
    }

    /// The tenant at `slot`.
    #[inline]
    pub fn at(&self, slot: TenantSlot) -> Option<Tenant<'_>> {
        let bucket = slot.bucket as usize;
        (self.bucket_len(bucket) > slot.index as usize)
            .then(|| self.tenant(bucket, slot.index as usize))
    }

    /// The tenant whose API key has this SHA-256 digest. (Plain loops:
    /// this runs on every request with an API key.)
    #[inline]
    pub fn by_key_digest(&self, digest: &[u8; 32]) -> Option<Tenant<'_>> {
        let keys = self.keys[self.key_bucket_of(digest)].entries();
        let prefix = prefix_of(digest);
        let mut at = keys.partition_point(|&(p, _)| p < prefix);
        while let Some(&(p, hash)) = keys.get(at)
            && p == prefix
        {
            let bucket = self.bucket_of(hash);
            let records = self.buckets[bucket].records();
            let mut index = records.partition_point(|r| r.hash < hash);
            while let Some(record) = records.get(index)
                && record.hash == hash
            {
                if record.cell & HAS_KEY != 0 && record.digest == *digest {
                    return Some(self.tenant(bucket, index));
                }
                index += 1;
            }
            at += 1;
        }
        None
    }

    /// Every tenant, bucket by bucket (no particular order).
    pub fn iter(&self) -> impl Iterator<Item = Tenant<'_>> {
        self.buckets
            .iter()
            .enumerate()
            .flat_map(move |(bucket, b)| {
                (0..b.records().len()).map(move |index| self.tenant(bucket, index))
            })
    }

    /// Adds a tenant, or replaces the one with its id. A key digest that
    /// belongs to another tenant is refused and nothing changes.
    pub fn upsert(&mut self, entry: &ValidEntry) -> Result<(), Conflict> {
        if let Some(digest) = &entry.api_key_sha256
            && let Some(owner) = self.by_key_digest(digest)
            && owner.id() != entry.id
        {
            return Err(Conflict::DuplicateKey(owner.id().to_owned()));
        }
        self.remove(&entry.id);
        self.insert_new(entry);
        Ok(())
    }

    /// Inserts a tenant known to be absent, key and all.
    fn insert_new(&mut self, entry: &ValidEntry) {
        let hash = id_hash(&entry.id);
        let bucket = self.bucket_of(hash);
        let (records, ids, _) = Arc::make_mut(&mut self.buckets[bucket]).own();
        let at = records.partition_point(|r| r.hash <= hash);
        let record = Record::new(hash, entry, ids.len());
        ids.push_str(&entry.id);
        records.insert(at, record);
        if let Some(digest) = &entry.api_key_sha256 {
            let k = self.key_bucket_of(digest);
            let keys = Arc::make_mut(&mut self.keys[k]).own();
            let entry = (prefix_of(digest), hash);
            let at = keys.partition_point(|&e| e <= entry);
            keys.insert(at, entry);
        }
        self.len += 1;
    }

    /// Removes the tenant with this id; whether there was one.
    pub fn remove(&mut self, id: &str) -> bool {
        let Some(tenant) = self.get(id) else {
            return false;
        };
        let (slot, hash) = (tenant.slot, tenant.id_hash());
        let digest = tenant.api_key_sha256().copied();
        if let Some(digest) = digest {
            let bucket = self.key_bucket_of(&digest);
            let keys = Arc::make_mut(&mut self.keys[bucket]).own();
            if let Some(at) = keys.iter().position(|&e| e == (prefix_of(&digest), hash)) {
                keys.remove(at);
            }
        }
        let (records, ids, garbage) = Arc::make_mut(&mut self.buckets[slot.bucket as usize]).own();
        let record = records.remove(slot.index as usize);
        *garbage += usize::from(record.id_len);
        if *garbage > ids.len() / 2 {
            compact(records, ids);
            *garbage = 0;
        }
        self.len -= 1;
        true
    }
}

/// A registry being loaded: three arrays filled unsorted and unchecked,
/// then sorted and checked once by [`Loading::finish`] (sorted inserts one
/// by one would move records once per tenant).
pub struct Loading {
    records: Vec<Record>,
    ids: String,
    keys: Vec<(u64, u64)>,
}

impl Loading {
    /// Adds a tenant.
    pub fn push(&mut self, entry: &ValidEntry) {
        let hash = id_hash(&entry.id);
        self.records.push(Record::new(hash, entry, self.ids.len()));
        self.ids.push_str(&entry.id);
        if let Some(digest) = &entry.api_key_sha256 {
            self.keys.push((prefix_of(digest), hash));
        }
    }

    /// Sorts what was added and checks it: an id listed twice, or two
    /// tenants with one API key, is the first conflict found. The arrays
    /// are trimmed to their size (large allocations shrink in place).
    pub fn finish(mut self) -> Result<Tenants, Conflict> {
        self.records.sort_unstable_by_key(|r| r.hash);
        let id = |r: &Record| {
            &self.ids[r.id_start as usize..r.id_start as usize + usize::from(r.id_len)]
        };
        for pair in self.records.windows(2) {
            if pair[0].hash == pair[1].hash && id(&pair[0]) == id(&pair[1]) {
                return Err(Conflict::DuplicateId(id(&pair[0]).to_owned()));
            }
        }
        self.keys.sort_unstable();
        self.records.shrink_to_fit();
        self.ids.shrink_to_fit();
        self.keys.shrink_to_fit();
        let len = self.records.len();
        let buckets = (len / TENANTS_PER_BUCKET).max(1).next_power_of_two();
        let bits = buckets.trailing_zeros().min(MAX_BUCKET_BITS);
        let shift = 64 - bits;
        let base = Arc::new(Base {
            records: self.records,
            ids: self.ids,
            keys: self.keys,
        });
        let ranges = |hashes: &mut dyn Iterator<Item = u64>| -> Vec<(u32, u32)> {
            let mut ends = vec![0u32; 1 << bits];
            for hash in hashes {
                ends[hash.checked_shr(shift).unwrap_or(0) as usize] += 1;
            }
            let mut start = 0;
            ends.iter()
                .map(|&count| {
                    let range = (start, start + count);
                    start += count;
                    range
                })
                .collect()
        };
        let buckets = ranges(&mut base.records.iter().map(|r| r.hash))
            .into_iter()
            .map(|(start, end)| Arc::new(Bucket::Base(Arc::clone(&base), start, end)))
            .collect();
        let keys = ranges(&mut base.keys.iter().map(|k| k.0))
            .into_iter()
            .map(|(start, end)| Arc::new(KeyBucket::Base(Arc::clone(&base), start, end)))
            .collect();
        let tenants = Tenants {
            buckets,
            keys,
            shift,
            len,
        };
        tenants.check_keys()?;
        Ok(tenants)
    }
}

impl Tenants {
    /// Two tenants with one API key, if there are: their key entries share
    /// a prefix, and their records a digest.
    fn check_keys(&self) -> Result<(), Conflict> {
        for keys in &self.keys {
            for pair in keys
                .entries()
                .windows(2)
                .filter(|pair| pair[0].0 == pair[1].0)
            {
                let digests = |hash: u64| {
                    let records = self.buckets[self.bucket_of(hash)].records();
                    let at = records.partition_point(|r| r.hash < hash);
                    records[at..]
                        .iter()
                        .take_while(|r| r.hash == hash)
                        .filter(|r| r.cell & HAS_KEY != 0)
                        .map(|r| r.digest)
                        .collect::<Vec<_>>()
                };
                let first = digests(pair[0].1);
                if let Some(twice) = digests(pair[1].1).iter().find(|d| first.contains(d))
                    && let Some(owner) = self.by_key_digest(twice)
                {
                    return Err(Conflict::DuplicateKey(owner.id().to_owned()));
                }
            }
        }
        Ok(())
    }
}

/// Rewrites a bucket's ids without the bytes of removed tenants.
fn compact(records: &mut [Record], ids: &mut String) {
    let mut kept = String::with_capacity(ids.len());
    for record in records {
        let start = record.id_start as usize;
        let id = &ids[start..start + usize::from(record.id_len)];
        record.id_start = kept.len() as u32;
        kept.push_str(id);
    }
    *ids = kept;
}
