//! The analyser from Python: `blast`, `plan` and `migrate`, returning the
//! command line's `--json` answers as dicts and lists.
//!
//! The answers are built by `analysis::answers`, the same code the command
//! line prints, and handed to Python through `json.loads` of the same
//! serialisation, so the two are equal by construction; what is checked
//! here is only the input, with messages that name the Python argument
//! where the command line names its flag.

use analysis::answers::{self, BlastQuery, MigrationSpec, Quiet, Scenario, other_algorithm};
use analysis::plan::{Budget, PlanPlacement};
use analysis::waves::Waves;
use analysis::{AnalysisError, Population};
use placement::{Algorithm, Fleet, PlacementKey, Placer as PlacerInner};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString};
use serde::Serialize;

use crate::args::{self, value_error};
use crate::placing::{self, KeyRing};

/// The key version that means the public recipe key, as in `migrate`.
const RECIPE_VERSION: &str = "recipe";

/// An answer as Python dicts and lists, through the same JSON the command
/// line prints.
fn to_python<'py>(py: Python<'py>, answer: &impl Serialize) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_string(answer).map_err(value_error)?;
    py.import("json")?.call_method1("loads", (json,))
}

/// The placement options `blast` and `plan` share, as on the command line,
/// passed by the Python layer as one dict (absent or `None`: the default).
pub struct PlacementOptions<'py> {
    /// A shard count or a list of ids (or `(id, weight)` pairs).
    shards: Option<Bound<'py, PyAny>>,
    /// A zone spec such as `"a:8,b:8"`, or a dict from shard id to zone.
    zones: Option<Bound<'py, PyAny>>,
    /// `"hmac-modulo"` (the default, as on the command line) or `"rendezvous"`.
    algorithm: Option<Bound<'py, PyAny>>,
    /// Key bytes or a `KeyRing`; the recipe's public key when absent.
    key: Option<Bound<'py, PyAny>>,
    /// The `KeyRing` version to use instead of the active one.
    key_version: Option<String>,
    /// `{tenant: k}`.
    tenant_k: Option<Bound<'py, PyAny>>,
}

impl<'py> PlacementOptions<'py> {
    /// Reads the options from the dict the Python layer built.
    fn from_dict(dict: &Bound<'py, PyDict>) -> PyResult<Self> {
        let item = |name: &str| -> PyResult<Option<Bound<'py, PyAny>>> {
            Ok(dict.get_item(name)?.filter(|value| !value.is_none()))
        };
        Ok(Self {
            shards: item("shards")?,
            zones: item("zones")?,
            algorithm: item("algorithm")?,
            key: item("key")?,
            key_version: match item("key_version")? {
                Some(version) => Some(args::text("key_version", &version)?),
                None => None,
            },
            tenant_k: item("tenant_k")?,
        })
    }

    /// The key (the recipe's public key when none is given, as on the
    /// command line: fine for analysis, never for serving traffic).
    fn key(&self) -> PyResult<PlacementKey> {
        match &self.key {
            Some(key) => placing::key_of(key, self.key_version.as_deref()),
            None if self.key_version.is_some() => Err(PyTypeError::new_err(
                "key_version needs key to be a KeyRing",
            )),
            None => Ok(PlacementKey::recipe_default()),
        }
    }

    fn algorithm(&self) -> PyResult<Algorithm> {
        match &self.algorithm {
            Some(name) => placing::algorithm(name),
            None => Ok(Algorithm::HmacModulo),
        }
    }

    /// `tenant_k={tenant: k}` as overrides.
    fn tenant_k(&self) -> PyResult<Vec<(String, u32)>> {
        let Some(tenant_k) = &self.tenant_k else {
            return Ok(Vec::new());
        };
        let dict = tenant_k
            .cast::<PyDict>()
            .map_err(|_| args::wrong_type("tenant_k", "a dict from tenant to k", tenant_k))?;
        let mut overrides = Vec::with_capacity(dict.len());
        for (tenant, k) in dict.iter() {
            let tenant = args::text("a tenant_k tenant", &tenant)?;
            let k = args::int_in(
                &format!("tenant_k[{tenant:?}]"),
                &k,
                1,
                i128::from(u32::MAX),
            )?;
            overrides.push((tenant, k as u32));
        }
        Ok(overrides)
    }

    /// The placer for `blast`, `tenant_k` overrides included.
    fn placer(&self, k: &Bound<'_, PyAny>) -> PyResult<PlacerInner> {
        let key = self.key()?;
        let algorithm = self.algorithm()?;
        let overrides = self.tenant_k()?;
        let (mut placer, _) = placing::build(
            self.shards.as_ref(),
            self.zones.as_ref(),
            k,
            &key,
            algorithm,
            None,
        )?;
        for (tenant, k) in overrides {
            placer
                .set_override(tenant.clone(), placement::TenantOverride::K(k))
                .map_err(|error| PyValueError::new_err(format!("tenant_k[{tenant:?}]: {error}")))?;
        }
        Ok(placer)
    }
}

/// Refuses a `tenant_k` entry for a tenant not among `tenants`, naming the
/// entry as the command line names its `--tenant-k`.
fn check_overrides(overrides: &[(String, u32)], population: &Population) -> PyResult<()> {
    answers::check_overrides(overrides, population).map_err(|error| match &error {
        AnalysisError::OverrideForAbsentTenant { tenant, .. } => {
            PyValueError::new_err(format!("tenant_k[{tenant:?}]: {error}"))
        }
        _ => value_error(error),
    })
}

/// One failure set: `"3,17"` as on the command line, or a list of shard
/// ids (ints are read as the ids of a numbered fleet).
fn failure_set(fleet: &Fleet, item: &Bound<'_, PyAny>) -> PyResult<Scenario> {
    let parts: Vec<String> = if item.is_instance_of::<PyString>() {
        item.extract::<String>()?
            .split(',')
            .map(|part| part.trim().to_owned())
            .collect()
    } else {
        let mut parts = Vec::new();
        for id in item.try_iter().map_err(|_| {
            args::wrong_type(
                "each failure set",
                "a str such as \"3,17\" or a list of shard ids",
                item,
            )
        })? {
            let id = id?;
            if id.is_instance_of::<PyInt>() {
                parts.push(args::int("a shard", &id)?.to_string());
            } else {
                parts.push(args::text("a shard id", &id)?);
            }
        }
        parts
    };
    // A str is named as written, like `--fail`; a list by its ids.
    let name = if item.is_instance_of::<PyString>() {
        item.extract::<String>()?
    } else {
        parts.join(",")
    };
    let mut shards = Vec::with_capacity(parts.len());
    for id in &parts {
        if id.is_empty() {
            return Err(PyValueError::new_err(format!(
                "fail {name:?} has an empty entry; list shard ids separated by commas, e.g. fail=[\"3,17\"] or fail=[[3, 17]]"
            )));
        }
        let index = fleet.index_of(id).ok_or_else(|| {
            PyValueError::new_err(format!(
                "fail {name}: there is no shard {id:?} in this fleet of {} shards (ids 0 to {}); name shards that exist",
                fleet.len(),
                fleet.len() - 1
            ))
        })?;
        shards.push(index);
    }
    let listed = Scenario::listed(name.clone(), shards, fleet);
    listed.map_err(|error| PyValueError::new_err(format!("fail {name}: {error}")))
}

/// A waves file's text, or a dict from shard id to wave, as `Waves`.
fn waves(fleet: &Fleet, waves: &Bound<'_, PyAny>) -> PyResult<Waves> {
    let text = if waves.is_instance_of::<PyString>() {
        waves.extract::<String>()?
    } else {
        let waves = waves.cast::<PyDict>().map_err(|_| {
            args::wrong_type(
                "waves",
                "a dict from shard id to wave, or a waves file's text",
                waves,
            )
        })?;
        let mut text = String::new();
        for (shard, wave) in waves.iter() {
            let shard = if shard.is_instance_of::<PyInt>() {
                args::int("a shard", &shard)?.to_string()
            } else {
                args::text("a shard id", &shard)?
            };
            let wave = args::text("a wave", &wave)?;
            if shard.contains(char::is_whitespace) || wave.contains(char::is_whitespace) {
                return Err(PyValueError::new_err(format!(
                    "waves: shard {shard:?} or wave {wave:?} contains white space; name them without spaces"
                )));
            }
            text.push_str(&format!("{shard} {wave}\n"));
        }
        text
    };
    Waves::parse(&text, fleet).map_err(value_error)
}

fn optional_int(
    name: &str,
    obj: Option<&Bound<'_, PyAny>>,
    min: i128,
    max: i128,
    default: i128,
) -> PyResult<i128> {
    match obj {
        Some(obj) if !obj.is_none() => args::int_in(name, obj, min, max),
        _ => Ok(default),
    }
}

/// The blast radius of failures, poison tenants and deploy waves for a
/// placed population: the dict `shuffle-shard blast --json` prints.
#[pyfunction]
#[pyo3(signature = (*, tenants, weights = None, k, placement, fail = None, sweep = None, max_sets = None,
    seed = None, zone_outage = false, capacity = None, waves = None, poison = None,
    poison_sweep = false, poison_top = None, poison_after = None))]
#[allow(clippy::too_many_arguments)]
pub fn blast<'py>(
    py: Python<'py>,
    tenants: &Bound<'py, PyAny>,
    weights: Option<&Bound<'py, PyAny>>,
    k: &Bound<'py, PyAny>,
    placement: &Bound<'py, PyDict>,
    fail: Option<&Bound<'py, PyAny>>,
    sweep: Option<&Bound<'py, PyAny>>,
    max_sets: Option<&Bound<'py, PyAny>>,
    seed: Option<&Bound<'py, PyAny>>,
    zone_outage: bool,
    capacity: Option<&Bound<'py, PyAny>>,
    waves: Option<&Bound<'py, PyAny>>,
    poison: Option<&Bound<'py, PyAny>>,
    poison_sweep: bool,
    poison_top: Option<&Bound<'py, PyAny>>,
    poison_after: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    // The command line's order: placement, population, then the questions,
    // all before any work.
    let options = PlacementOptions::from_dict(placement)?;
    let placer = options.placer(k)?;
    let population = args::population(tenants, weights)?;
    check_overrides(&options.tenant_k()?, &population)?;
    let fleet = placer.fleet();
    let mut scenarios = Vec::new();
    if let Some(fail) = fail.filter(|obj| !obj.is_none()) {
        if fail.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "fail must be a list of failure sets, e.g. fail=[\"3,17\"] or fail=[[3, 17]], not str",
            ));
        }
        for item in fail
            .try_iter()
            .map_err(|_| args::wrong_type("fail", "a list of failure sets", fail))?
        {
            scenarios.push(failure_set(fleet, &item?)?);
        }
    }
    let max_sets = optional_int("max_sets", max_sets, 1, i128::from(u64::MAX), 1_000_000)? as u64;
    let seed = optional_int("seed", seed, 0, i128::from(u64::MAX), 0)? as u64;
    let sweep = match sweep.filter(|obj| !obj.is_none()) {
        Some(sweep) => {
            let failures = args::int("sweep", sweep)?;
            if failures < 1 {
                return Err(PyValueError::new_err(format!(
                    "sweep={failures}: {} (pass sweep=1 or more)",
                    AnalysisError::EmptyFailureSet
                )));
            }
            if failures > fleet.len() as i128 {
                return Err(PyValueError::new_err(format!(
                    "sweep={failures}: {}",
                    AnalysisError::TooManyFailures {
                        failures: failures as usize,
                        n: fleet.len()
                    }
                )));
            }
            Some(failures as usize)
        }
        None => None,
    };
    if zone_outage {
        scenarios.extend(
            Scenario::zone_outages(fleet)
                .map_err(|error| PyValueError::new_err(format!("zone_outage: {error}")))?,
        );
    }
    let capacity = match capacity.filter(|obj| !obj.is_none()) {
        Some(capacity) => {
            let capacity = args::positive("capacity", capacity)?;
            if population.weights().is_none() {
                return Err(PyValueError::new_err(
                    "capacity needs tenant weights to compare with; give tenants as (id, weight) pairs or a DataFrame with a weight column",
                ));
            }
            Some(capacity)
        }
        None => None,
    };
    let poison: Vec<String> = match poison.filter(|obj| !obj.is_none()) {
        Some(poison) => args::tenant_ids(poison)
            .map_err(|_| args::wrong_type("poison", "a list of tenant ids", poison))?,
        None => Vec::new(),
    };
    let poison_top = optional_int("poison_top", poison_top, 1, i128::from(u32::MAX), 10)? as usize;
    let poison_after = match poison_after.filter(|obj| !obj.is_none()) {
        Some(after) => Some(args::int_in("poison_after", after, 0, i128::from(u32::MAX))? as usize),
        None => None,
    };
    if poison_after.is_some() && poison.is_empty() && !poison_sweep {
        return Err(PyValueError::new_err(
            "poison_after models containment of a poison tenant; add poison=[TENANT] or poison_sweep=True",
        ));
    }
    if let Some(empty) = poison.iter().find(|tenant| tenant.is_empty()) {
        return Err(PyValueError::new_err(format!(
            "poison {empty:?} names no tenant; give a tenant id, e.g. poison=[\"acme\"]"
        )));
    }
    let waves = match waves.filter(|obj| !obj.is_none()) {
        Some(spec) => Some(self::waves(fleet, spec)?),
        None => None,
    };
    let query = BlastQuery {
        scenarios,
        sweep,
        max_sets,
        seed,
        waves,
        poison,
        poison_sweep,
        poison_top,
        poison_after,
        capacity,
    };
    let report = py
        .detach(|| answers::blast(&placer, &population, query, &Quiet))
        .map_err(value_error)?;
    to_python(py, &report)
}

/// A budget fraction in `[0, 1]`.
fn fraction(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    let value: f64 = obj
        .extract()
        .map_err(|_| args::wrong_type(name, "a number", obj))?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(PyValueError::new_err(format!(
            "{name}={value} is not a fraction of tenants; give a number from 0 to 1, e.g. 0.2 for 20%"
        )))
    }
}

/// Measures every candidate `k` against a budget and recommends the
/// smallest that meets it: the dict `shuffle-shard plan --json` prints.
#[pyfunction]
#[pyo3(signature = (*, tenants, max_degraded, max_fully_down, concurrent_failures, placement, weights = None))]
#[allow(clippy::too_many_arguments)]
pub fn plan<'py>(
    py: Python<'py>,
    tenants: &Bound<'py, PyAny>,
    max_degraded: &Bound<'py, PyAny>,
    max_fully_down: &Bound<'py, PyAny>,
    concurrent_failures: &Bound<'py, PyAny>,
    placement: &Bound<'py, PyDict>,
    weights: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let failures = args::int("concurrent_failures", concurrent_failures)?;
    if failures < 1 {
        return Err(PyValueError::new_err(format!(
            "concurrent_failures={failures} plans for no failure; pass 1 or more"
        )));
    }
    let budget = Budget {
        max_degraded: fraction("max_degraded", max_degraded)?,
        max_fully_down: fraction("max_fully_down", max_fully_down)?,
        concurrent_failures: failures.min(i128::from(u32::MAX)) as usize,
    };
    let placement = PlacementOptions::from_dict(placement)?;
    let overrides = placement.tenant_k()?;
    let algorithm = placement.algorithm()?;
    let fleet = args::fleet(placement.shards.as_ref(), placement.zones.as_ref())?;
    let key = placement.key()?;
    let population = args::population(tenants, weights)?;
    check_overrides(&overrides, &population)?;
    let n = fleet.len();
    if budget.concurrent_failures > n {
        return Err(PyValueError::new_err(format!(
            "concurrent_failures={} is more than the {n} shards in the fleet; choose at most {n}",
            budget.concurrent_failures
        )));
    }
    let plan_placement = PlanPlacement {
        fleet: &fleet,
        key: &key,
        algorithm,
        zone_aware: placement.zones.is_some(),
        overrides: &overrides,
    };
    let report = py
        .detach(|| answers::plan(&plan_placement, &population, budget, &Quiet))
        .map_err(value_error)?;
    to_python(py, &report)
}

/// One side of a migration from a dict such as
/// `{"shards": 20, "k": 3, "algorithm": "rendezvous", "key": "v1"}`.
fn spec<'py>(
    name: &str,
    obj: &Bound<'py, PyAny>,
) -> PyResult<(MigrationSpec, Option<Bound<'py, PyAny>>)> {
    let dict = obj.cast::<PyDict>().map_err(|_| {
        args::wrong_type(
            name,
            "a dict such as {\"shards\": 64, \"k\": 3, \"algorithm\": \"rendezvous\"}",
            obj,
        )
    })?;
    for item in dict.keys() {
        let item = args::text(&format!("a key of {name}"), &item)?;
        if !["shards", "k", "algorithm", "key", "zones"].contains(&item.as_str()) {
            return Err(PyValueError::new_err(format!(
                "{name}: unknown item {item:?}; use shards, k, algorithm, key and zones, e.g. {{\"shards\": 64, \"k\": 3}}"
            )));
        }
    }
    let k = dict
        .get_item("k")?
        .ok_or_else(|| PyValueError::new_err(format!("{name} has no k; add e.g. \"k\": 3")))?;
    let k = args::int_in(&format!("{name}[\"k\"]"), &k, 1, i128::from(u32::MAX))? as u32;
    let shards = dict.get_item("shards")?;
    let zones = dict.get_item("zones")?;
    if shards.is_none() && zones.is_none() {
        return Err(PyValueError::new_err(format!(
            "{name} has no fleet; add \"shards\": N or \"zones\": \"a:8,b:8\""
        )));
    }
    let shards_count = match &shards {
        Some(shards) => Some(args::int_in(
            &format!("{name}[\"shards\"]"),
            shards,
            1,
            i128::from(args::MAX_SHARDS),
        )? as u32),
        None => None,
    };
    let zones = match &zones {
        Some(zones) => Some(args::text(&format!("{name}[\"zones\"]"), zones)?),
        None => None,
    };
    let algorithm = match dict.get_item("algorithm")? {
        Some(name) => placing::algorithm(&name)?,
        None => Algorithm::HmacModulo,
    };
    let key = match dict.get_item("key")? {
        Some(version) => args::text(&format!("{name}[\"key\"]"), &version)?,
        None => RECIPE_VERSION.to_owned(),
    };
    Ok((
        MigrationSpec {
            shards: shards_count,
            k,
            algorithm,
            key,
            zones,
        },
        shards,
    ))
}

/// The key a spec's version names.
fn version_key(
    name: &str,
    version: &str,
    keys: Option<&Bound<'_, PyAny>>,
) -> PyResult<PlacementKey> {
    if version == RECIPE_VERSION {
        return Ok(PlacementKey::recipe_default());
    }
    let missing = || {
        PyValueError::new_err(format!(
            "{name}: key version {version:?} was not given; pass keys={{{version:?}: KEY_BYTES}} or a KeyRing holding it, or \"key\": \"recipe\" for the public recipe key"
        ))
    };
    let Some(keys) = keys.filter(|obj| !obj.is_none()) else {
        return Err(missing());
    };
    if let Ok(ring) = keys.cast::<KeyRing>() {
        let ring = ring.borrow();
        return ring.inner.get(version).cloned().ok_or_else(missing);
    }
    let dict = key_dict(keys)?;
    match dict.get_item(version)? {
        Some(key) => args::secret_key(&format!("keys[{version:?}]"), &key),
        None => Err(missing()),
    }
}

/// `keys` when it is not a `KeyRing`: a dict from version to key bytes.
fn key_dict<'a, 'py>(keys: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyDict>> {
    keys.cast::<PyDict>().map_err(|_| {
        args::wrong_type(
            "keys",
            "a KeyRing or a dict from version to key bytes",
            keys,
        )
    })
}

/// Checks every key given, used or not, as the command line loads every
/// `--key` before it builds a placer.
fn check_keys(keys: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let Some(keys) = keys.filter(|obj| !obj.is_none()) else {
        return Ok(());
    };
    let recipe_named = || {
        PyValueError::new_err(format!(
            "keys: the version name {RECIPE_VERSION:?} means the public recipe key; give your key another name"
        ))
    };
    if let Ok(ring) = keys.cast::<KeyRing>() {
        if ring.borrow().inner.get(RECIPE_VERSION).is_some() {
            return Err(recipe_named());
        }
        return Ok(());
    }
    let dict = key_dict(keys)?;
    for (version, key) in dict.iter() {
        let version = args::text("a key version", &version)?;
        if version.is_empty() {
            return Err(value_error(placement::KeyError::EmptyVersion));
        }
        if version == RECIPE_VERSION {
            return Err(recipe_named());
        }
        args::secret_key(&format!("keys[{version:?}]"), &key)?;
    }
    Ok(())
}

/// The placer a spec describes.
fn spec_placer<'py>(
    py: Python<'py>,
    name: &str,
    spec: &MigrationSpec,
    shards: Option<&Bound<'py, PyAny>>,
    keys: Option<&Bound<'py, PyAny>>,
) -> PyResult<PlacerInner> {
    let key = version_key(name, &spec.key, keys)?;
    let zones = spec
        .zones
        .as_deref()
        .map(|zones| PyString::new(py, zones).into_any());
    let k = spec.k.into_pyobject(py)?.into_any();
    placing::build(shards, zones.as_ref(), &k, &key, spec.algorithm, None)
        .map(|(placer, _)| placer)
        .map_err(|error| prefix(name, error, py))
}

/// Prefixes a `ValueError`'s message with the argument it is about.
fn prefix(name: &str, error: PyErr, py: Python<'_>) -> PyErr {
    if error.is_instance_of::<PyValueError>(py) {
        PyValueError::new_err(format!("{name}: {}", error.value(py)))
    } else {
        error
    }
}

/// What changing the placement costs across a population, next to the same
/// change under the other algorithm: the dict `shuffle-shard migrate
/// --json` prints.
#[pyfunction]
#[pyo3(signature = (before, after, *, tenants, weights = None, keys = None))]
pub fn migrate<'py>(
    py: Python<'py>,
    before: &Bound<'py, PyAny>,
    after: &Bound<'py, PyAny>,
    tenants: &Bound<'py, PyAny>,
    weights: Option<&Bound<'py, PyAny>>,
    keys: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (from, from_shards) = spec("before", before)?;
    let (to, to_shards) = spec("after", after)?;
    check_keys(keys)?;
    let before = spec_placer(py, "before", &from, from_shards.as_ref(), keys)?;
    let after = spec_placer(py, "after", &to, to_shards.as_ref(), keys)?;
    let population: Population = args::population(tenants, weights)?;
    let flipped = if from.algorithm == to.algorithm {
        let flip = |spec: &MigrationSpec| MigrationSpec {
            algorithm: other_algorithm(spec.algorithm),
            ..spec.clone()
        };
        Some((
            spec_placer(py, "before", &flip(&from), from_shards.as_ref(), keys)?,
            spec_placer(py, "after", &flip(&to), to_shards.as_ref(), keys)?,
        ))
    } else {
        None
    };
    let report = py.detach(|| {
        answers::migration(
            (&from, &before),
            (&to, &after),
            flipped.as_ref().map(|(before, after)| (before, after)),
            &population,
            &Quiet,
        )
    });
    to_python(py, &report)
}
