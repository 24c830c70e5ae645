//! Placement from Python: Recipe 12.1 as the chapter's function, the
//! `Placer`, the versioned `KeyRing` and the migration diff.

use std::sync::Mutex;

use placement::{
    Algorithm, HmacModulo, KeyRing as RingInner, PlacementConfig, PlacementError, PlacementKey,
    Placer as PlacerInner, ShardIndex, TenantOverride, migration,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyInt, PyList, PyString};
use rayon::prelude::*;

use crate::args::{self, value_error};

/// Recipe 12.1: `k` distinct shard indices in `[0, n)` for this tenant, in
/// selection order, bit for bit the design chapter's `shuffle_shards`.
///
/// The recipe accepts any key, the empty one included, and so does this;
/// a `Placer` refuses keys that are no secret.
#[pyfunction]
#[pyo3(
    signature = (tenant_id, n = None, k = None, *, key = None),
    text_signature = "(tenant_id, n=64, k=3, *, key=b'shuffle-shard-v1')"
)]
pub fn shuffle_shards(
    tenant_id: &Bound<'_, PyAny>,
    n: Option<&Bound<'_, PyAny>>,
    k: Option<&Bound<'_, PyAny>>,
    key: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<ShardIndex>> {
    let tenant = args::text("tenant_id", tenant_id)?;
    let n = match n {
        Some(n) => args::int("n", n)?,
        None => 64,
    };
    let k = match k {
        Some(k) => args::int("k", k)?,
        None => 3,
    };
    let key = match key {
        Some(key) => args::key_bytes("key", key)?,
        None => placement::RECIPE_DEFAULT_KEY.to_vec(),
    };
    if n < 1 {
        return Err(value_error(PlacementError::EmptyFleet));
    }
    if n > i128::from(u32::MAX) {
        return Err(PyValueError::new_err(format!(
            "n = {n} is more than the {} shards Recipe 12.1 is implemented for; check the number",
            u32::MAX
        )));
    }
    if !(1..=n).contains(&k) {
        return Err(PyValueError::new_err(format!(
            "k = {k} is out of range for {n} shards: choose k between 1 and {n}"
        )));
    }
    // Keying HMAC costs four SHA-256 compressions, more than placing a
    // short tenant; callers loop over tenants with one key and `n`, so the
    // last keyed recipe is kept.
    let mut last = LAST_RECIPE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let reusable = matches!(&*last, Some((bytes, size, _)) if *size == n as u32 && *bytes == key);
    if !reusable {
        let recipe = HmacModulo::new(&PlacementKey::from_bytes(key.clone()), n as u32)
            .map_err(value_error)?;
        *last = Some((key, n as u32, recipe));
    }
    let (_, _, recipe) = last.as_ref().expect("set above");
    recipe.place(&tenant, k as u32).map_err(value_error)
}

/// The recipe keyed by the last `shuffle_shards` call: key bytes, `n`, and
/// the keyed state. Key bytes stay in this process's memory as they do in
/// the caller's; they are never printed.
static LAST_RECIPE: Mutex<Option<(Vec<u8>, u32, HmacModulo)>> = Mutex::new(None);

/// Named placement key versions, one of them active. Rotating the key is a
/// migration, so old versions stay addressable. Keys never appear in
/// `repr`.
#[pyclass(module = "shuffle_shard")]
pub struct KeyRing {
    pub(crate) inner: RingInner,
}

#[pymethods]
impl KeyRing {
    /// A ring holding one version, which is active.
    #[new]
    fn new(version: &Bound<'_, PyAny>, key: &Bound<'_, PyAny>) -> PyResult<Self> {
        let version = args::text("version", version)?;
        let key = args::secret_key("key", key)?;
        let inner = RingInner::new(version, key).map_err(value_error)?;
        Ok(Self { inner })
    }

    /// Adds a version; an existing version is never overwritten.
    fn insert(&mut self, version: &Bound<'_, PyAny>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let version = args::text("version", version)?;
        let key = args::secret_key("key", key)?;
        self.inner.insert(version, key).map_err(value_error)
    }

    /// Makes an existing version the active one.
    fn set_active(&mut self, version: &Bound<'_, PyAny>) -> PyResult<()> {
        let version = args::text("version", version)?;
        self.inner.set_active(&version).map_err(value_error)
    }

    /// The active version's name.
    #[getter]
    fn active_version(&self) -> String {
        self.inner.active_version().to_owned()
    }

    /// The version names, sorted.
    #[getter]
    fn versions(&self) -> Vec<String> {
        self.inner.versions().map(str::to_owned).collect()
    }

    fn __contains__(&self, version: &str) -> bool {
        self.inner.get(version).is_some()
    }

    fn __len__(&self) -> usize {
        self.inner.versions().count()
    }

    /// The versions and the active one; never a key.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "KeyRing(versions={}, active={})",
            PyList::new(py, self.versions())?.repr()?,
            PyString::new(py, self.inner.active_version()).repr()?
        ))
    }
}

impl KeyRing {
    /// The key of `version`, or the active one.
    pub(crate) fn key(&self, version: Option<&str>) -> PyResult<PlacementKey> {
        match version {
            None => Ok(self.inner.active().clone()),
            Some(version) => self.inner.get(version).cloned().ok_or_else(|| {
                PyValueError::new_err(format!(
                    "key version {version:?} is not in the key ring (it holds {:?}); insert it first",
                    self.versions()
                ))
            }),
        }
    }
}

/// A key from `bytes` or a `KeyRing` (its active version unless
/// `key_version` names another).
pub fn key_of(key: &Bound<'_, PyAny>, key_version: Option<&str>) -> PyResult<PlacementKey> {
    if let Ok(ring) = key.cast::<KeyRing>() {
        return ring.borrow().key(key_version);
    }
    if key_version.is_some() {
        return Err(PyTypeError::new_err(
            "key_version needs key to be a KeyRing; with raw key bytes, leave it out",
        ));
    }
    args::secret_key("key", key)
}

/// An algorithm by its command-line name.
pub fn algorithm(name: &Bound<'_, PyAny>) -> PyResult<Algorithm> {
    args::text("algorithm", name)?
        .parse::<Algorithm>()
        .map_err(value_error)
}

/// A placer from Python arguments, and how many overrides it holds.
/// `overrides` maps a tenant to its own `k` or to a list of shard ids.
pub fn build(
    shards: Option<&Bound<'_, PyAny>>,
    zones: Option<&Bound<'_, PyAny>>,
    k: &Bound<'_, PyAny>,
    key: &PlacementKey,
    algorithm: Algorithm,
    overrides: Option<&Bound<'_, PyAny>>,
) -> PyResult<(PlacerInner, usize)> {
    let fleet = args::fleet(shards, zones)?;
    let k = args::int("k", k)?;
    let n = fleet.len() as i128;
    if !(1..=n).contains(&k) {
        return Err(PyValueError::new_err(format!(
            "k = {k} is out of range for {n} shards: choose k between 1 and {n}"
        )));
    }
    let config = PlacementConfig {
        algorithm,
        k: k as u32,
        zone_aware: zones.is_some(),
    };
    let mut placer = PlacerInner::new(fleet, key, config).map_err(value_error)?;
    let mut count = 0;
    if let Some(overrides) = overrides {
        let overrides = overrides
            .cast::<PyDict>()
            .map_err(|_| args::wrong_type("overrides", "a dict", overrides))?;
        for (tenant, rule) in overrides.iter() {
            let tenant = args::text("an overridden tenant", &tenant)?;
            let rule = if rule.is_instance_of::<PyInt>() {
                let k = args::int_in(&format!("the k of tenant {tenant:?}"), &rule, 1, n)?;
                TenantOverride::K(k as u32)
            } else {
                let ids = args::tenant_ids(&rule).map_err(|_| {
                    args::wrong_type(
                        &format!("the override of tenant {tenant:?}"),
                        "a k or a list of shard ids",
                        &rule,
                    )
                })?;
                TenantOverride::Dedicated(ids)
            };
            placer.set_override(tenant, rule).map_err(value_error)?;
            count += 1;
        }
    }
    Ok((placer, count))
}

/// A validated placement: tenant → subset, as in the gateway.
#[pyclass(module = "shuffle_shard", frozen, subclass)]
pub struct Placer {
    pub(crate) inner: PlacerInner,
    overrides: usize,
}

#[pymethods]
impl Placer {
    /// Binds an algorithm, a fleet, a key, a default `k` and per-tenant
    /// overrides (`{tenant: k}` or `{tenant: [shard ids]}`), validated once.
    #[new]
    #[pyo3(
        signature = (shards, k, key, algorithm = None, zones = None, overrides = None, *, key_version = None),
        text_signature = "(shards, k, key, algorithm='rendezvous', zones=None, overrides=None, *, key_version=None)"
    )]
    fn new(
        shards: Option<&Bound<'_, PyAny>>,
        k: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        algorithm: Option<&Bound<'_, PyAny>>,
        zones: Option<&Bound<'_, PyAny>>,
        overrides: Option<&Bound<'_, PyAny>>,
        key_version: Option<&str>,
    ) -> PyResult<Self> {
        let algorithm = match algorithm {
            Some(name) => self::algorithm(name)?,
            None => Algorithm::Rendezvous,
        };
        let key = key_of(key, key_version)?;
        let (inner, overrides) = build(shards, zones, k, &key, algorithm, overrides)?;
        Ok(Self { inner, overrides })
    }

    /// The tenant's subset as shard indices, in selection order.
    fn subset(&self, tenant: &Bound<'_, PyAny>) -> PyResult<Vec<ShardIndex>> {
        Ok(self.inner.subset(&args::text("tenant", tenant)?))
    }

    /// The tenant's subset as shard ids, in selection order.
    fn subset_ids(&self, tenant: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let tenant = args::text("tenant", tenant)?;
        Ok(self
            .inner
            .subset_ids(&tenant)
            .into_iter()
            .map(str::to_owned)
            .collect())
    }

    /// The subset size this tenant gets.
    fn k_for(&self, tenant: &Bound<'_, PyAny>) -> PyResult<u32> {
        Ok(self.inner.k_for(&args::text("tenant", tenant)?))
    }

    /// Every tenant's subset (indices, selection order), computed in
    /// parallel with the GIL released.
    fn place<'py>(
        &self,
        py: Python<'py>,
        tenants: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let ids = args::tenant_ids(tenants)?;
        let subsets: Vec<Vec<ShardIndex>> = py.detach(|| {
            ids.par_iter()
                .map(|tenant| self.inner.subset(tenant))
                .collect()
        });
        // A million new lists would set off the cyclic collector every 700
        // allocations, each pass walking the young lists: that doubled the
        // time of a batch. Lists of ints hold no cycles, so it is paused
        // while they are built (the GIL is held, so no other thread runs).
        let gc = py.import("gc")?;
        let enabled = gc.call_method0("isenabled")?.is_truthy()?;
        if enabled {
            gc.call_method0("disable")?;
        }
        let built = PyList::new(py, subsets);
        if enabled {
            gc.call_method0("enable")?;
        }
        built
    }

    /// Every tenant's subset, row after row, as native-endian `uint32`s in
    /// a `bytearray` (for `place_array`, which wraps it in NumPy without a
    /// copy). Every tenant must have the same `k`.
    fn _place_flat<'py>(
        &self,
        py: Python<'py>,
        tenants: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyByteArray>> {
        let ids = args::tenant_ids(tenants)?;
        let k = self.inner.config().k as usize;
        if let Some(odd) = ids
            .iter()
            .find(|tenant| self.inner.k_for(tenant) as usize != k)
        {
            return Err(PyValueError::new_err(format!(
                "tenant {odd:?} has k = {} but the array has {k} columns: use place() for per-tenant k",
                self.inner.k_for(odd)
            )));
        }
        let row_bytes = k * size_of::<ShardIndex>();
        let flat: Vec<u8> = py.detach(|| {
            let mut flat = vec![0u8; ids.len() * row_bytes];
            flat.par_chunks_mut(row_bytes.max(1))
                .zip(ids.par_iter())
                .for_each_init(Vec::new, |subset, (row, tenant)| {
                    self.inner.subset_into(tenant, subset);
                    for (cell, index) in row.chunks_exact_mut(4).zip(subset.iter()) {
                        cell.copy_from_slice(&index.to_ne_bytes());
                    }
                });
            flat
        });
        Ok(PyByteArray::new(py, &flat))
    }

    /// The number of shards.
    #[getter]
    fn n(&self) -> usize {
        self.inner.fleet().len()
    }

    /// The default subset size.
    #[getter]
    fn k(&self) -> u32 {
        self.inner.config().k
    }

    /// The algorithm's name.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.config().algorithm.name()
    }

    /// Whether subsets are spread over zones.
    #[getter]
    fn zone_aware(&self) -> bool {
        self.inner.config().zone_aware
    }

    /// The shard ids, in index order.
    #[getter]
    fn shard_ids(&self) -> Vec<String> {
        self.inner
            .fleet()
            .shards()
            .iter()
            .map(|shard| shard.id.clone())
            .collect()
    }

    /// The placement's shape; the key is never shown.
    fn __repr__(&self) -> String {
        format!(
            "Placer(n={}, k={}, algorithm='{}', zone_aware={}, overrides={}, key=<redacted>)",
            self.n(),
            self.k(),
            self.algorithm(),
            if self.zone_aware() { "True" } else { "False" },
            self.overrides
        )
    }
}

/// What moving `tenants` from `before` to `after` costs: tenants compared
/// and changed, members gained and lost, and every changed tenant's move.
#[pyfunction]
pub fn migration_diff<'py>(
    py: Python<'py>,
    before: &Bound<'py, Placer>,
    after: &Bound<'py, Placer>,
    tenants: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let ids = args::tenant_ids(tenants)?;
    let (before, after) = (before.get(), after.get());
    let diff =
        py.detach(|| migration::diff(&before.inner, &after.inner, ids.iter().map(String::as_str)));
    let moves = PyList::empty(py);
    for change in diff.moves {
        let entry = PyDict::new(py);
        entry.set_item("tenant", PyString::new(py, &change.tenant))?;
        entry.set_item("added", change.added)?;
        entry.set_item("removed", change.removed)?;
        moves.append(entry)?;
    }
    let result = PyDict::new(py);
    result.set_item("tenants", diff.tenants)?;
    result.set_item("changed", diff.changed)?;
    result.set_item("members_moved", diff.members_moved)?;
    result.set_item("members_removed", diff.members_removed)?;
    result.set_item("moves", moves)?;
    Ok(result)
}
