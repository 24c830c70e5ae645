//! Python arguments into placement and analysis values, with the wrong type
//! a `TypeError` and a bad value a `ValueError` whose one line says what was
//! wrong and how to fix it.

use std::fmt::Display;

use analysis::Population;
use placement::{Fleet, KeyError, PlacementKey, Shard};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyString};

/// The largest fleet accepted, as on the command line.
pub const MAX_SHARDS: u64 = Fleet::MAX_SHARDS;

/// The most tenants an analysis takes, as on the command line.
pub const MAX_TENANTS: usize = 100_000_000;

/// A `ValueError` carrying a library error's message.
pub fn value_error(error: impl Display) -> PyErr {
    PyValueError::new_err(error.to_string())
}

/// The Python type name of `obj`, for `TypeError` messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}

/// A `TypeError` saying what `name` must be and what it was.
pub fn wrong_type(name: &str, expected: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("{name} must be {expected}, not {}", type_name(obj)))
}

/// A Python `int` (not a `bool`, which is an accident as a count), as an
/// `i128` so that any value a caller plausibly passes can be range-checked
/// rather than overflowing.
pub fn int(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<i128> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(wrong_type(name, "an int", obj));
    }
    obj.extract::<i128>()
        .map_err(|_| PyValueError::new_err(format!("{name} is far too large; check the number")))
}

/// An int in `min..=max`, or a `ValueError` naming the range.
pub fn int_in(name: &str, obj: &Bound<'_, PyAny>, min: i128, max: i128) -> PyResult<i128> {
    let value = int(name, obj)?;
    if !(min..=max).contains(&value) {
        return Err(PyValueError::new_err(format!(
            "{name} = {value} is out of range: give a whole number from {min} to {max}"
        )));
    }
    Ok(value)
}

/// A Python `str`.
pub fn text(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if !obj.is_instance_of::<PyString>() {
        return Err(wrong_type(name, "a str", obj));
    }
    obj.extract::<String>()
}

/// A float (or int) that is a positive, finite number.
pub fn positive(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    if obj.is_instance_of::<PyBool>() {
        return Err(wrong_type(name, "a number", obj));
    }
    let value: f64 = obj
        .extract()
        .map_err(|_| wrong_type(name, "a number", obj))?;
    if !(value.is_finite() && value > 0.0) {
        return Err(PyValueError::new_err(format!(
            "{name} = {value} is not a positive number; give a number greater than zero"
        )));
    }
    Ok(value)
}

/// Raw key bytes from `bytes` or `bytearray`. A `str` is refused: which
/// encoding a key's text means is not this package's guess to make.
pub fn key_bytes(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Ok(bytes) = obj.cast::<PyByteArray>() {
        return Ok(bytes.to_vec());
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be bytes, not str; pass the raw key bytes, e.g. bytes.fromhex(...) or os.urandom(32)"
        )));
    }
    Err(wrong_type(name, "bytes", obj))
}

/// A key that may serve placement: not empty and not all zero bytes, which
/// are no secret (see `PlacementKey::is_all_zero`).
pub fn secret_key(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<PlacementKey> {
    let key = PlacementKey::from_bytes(key_bytes(name, obj)?);
    if key.is_empty() {
        return Err(value_error(KeyError::Empty));
    }
    if key.is_all_zero() {
        return Err(PyValueError::new_err(format!(
            "{name} is all zero bytes, which is no secret: use random key material, e.g. os.urandom(32)"
        )));
    }
    Ok(key)
}

/// The fleet from `shards` (a count, a list of ids, or of `(id, weight)`
/// pairs) and `zones` (a spec such as `"a:8,b:8"`, or a dict from shard id
/// to zone).
pub fn fleet(
    shards: Option<&Bound<'_, PyAny>>,
    zones: Option<&Bound<'_, PyAny>>,
) -> PyResult<Fleet> {
    let spec = match zones {
        Some(zones) if zones.is_instance_of::<PyString>() => Some(zones.extract::<String>()?),
        _ => None,
    };
    if let Some(spec) = spec {
        let fleet = Fleet::from_zone_spec(&spec).map_err(value_error)?;
        if let Some(shards) = shards {
            let n = int("shards", shards)?;
            if n != fleet.len() as i128 {
                return Err(PyValueError::new_err(format!(
                    "shards={n} does not match zones={spec:?}, which declares {} shards; drop shards or make it equal the zone total",
                    fleet.len()
                )));
            }
        }
        return Ok(fleet);
    }
    let Some(shards) = shards else {
        return Err(PyValueError::new_err(
            "give the fleet with shards=N (or a list of shard ids) or zones=\"a:8,b:8\"",
        ));
    };
    let mut list = if shards.is_instance_of::<PyInt>() || shards.is_instance_of::<PyBool>() {
        let n = int("shards", shards)?;
        if n < 1 {
            return Err(PyValueError::new_err(format!(
                "shards={n} leaves nothing to place tenants on; pass shards=1 or more"
            )));
        }
        if n > i128::from(MAX_SHARDS) {
            return Err(PyValueError::new_err(format!(
                "shards={n} is more than the {MAX_SHARDS} shards supported; check the number"
            )));
        }
        if zones.is_none() {
            return Fleet::uniform(n as u32).map_err(value_error);
        }
        (0..n).map(|i| Shard::new(i.to_string())).collect()
    } else {
        shard_list(shards)?
    };
    if let Some(zones) = zones {
        let zones = zones.cast::<PyDict>().map_err(|_| {
            wrong_type(
                "zones",
                "a zone spec str or a dict from shard id to zone",
                zones,
            )
        })?;
        for shard in &mut list {
            let zone = zones.get_item(&shard.id)?.ok_or_else(|| {
                PyValueError::new_err(format!(
                    "zones has no zone for shard {:?}: zone-aware placement needs a zone for every shard",
                    shard.id
                ))
            })?;
            shard.zone = Some(text("a zone", &zone)?);
        }
        if zones.len() > list.len() {
            return Err(PyValueError::new_err(
                "zones names shards that are not in shards; list each shard's zone once",
            ));
        }
    }
    Fleet::new(list).map_err(value_error)
}

/// Shards listed as ids or `(id, weight)` pairs.
fn shard_list(shards: &Bound<'_, PyAny>) -> PyResult<Vec<Shard>> {
    if shards.is_instance_of::<PyString>() {
        return Err(wrong_type(
            "shards",
            "an int or a list of shard ids",
            shards,
        ));
    }
    let items = shards
        .try_iter()
        .map_err(|_| wrong_type("shards", "an int or a list of shard ids", shards))?;
    let mut list = Vec::new();
    for item in items {
        let item = item?;
        let shard = if item.is_instance_of::<PyString>() {
            Shard::new(item.extract::<String>()?)
        } else if let Ok((id, weight)) = item.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>() {
            Shard::new(text("a shard id", &id)?).with_weight(positive("a shard weight", &weight)?)
        } else {
            return Err(wrong_type(
                "each shard",
                "a str id or an (id, weight) pair",
                &item,
            ));
        };
        if list.len() as u64 >= MAX_SHARDS {
            return Err(PyValueError::new_err(format!(
                "shards lists more than the {MAX_SHARDS} shards supported"
            )));
        }
        list.push(shard);
    }
    Ok(list)
}

/// Tenant ids from any iterable of `str`.
pub fn tenant_ids(tenants: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if tenants.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "tenants must be a list of tenant ids, not str; wrap one id in a list",
        ));
    }
    let items = tenants
        .try_iter()
        .map_err(|_| wrong_type("tenants", "an iterable of str", tenants))?;
    let mut ids = Vec::with_capacity(tenants.len().unwrap_or(0));
    for item in items {
        let item = item?;
        if !item.is_instance_of::<PyString>() {
            return Err(wrong_type("each tenant", "a str", &item));
        }
        ids.push(item.extract::<String>()?);
    }
    Ok(ids)
}

/// The population an analysis runs over: a count of synthetic tenants
/// (`tenant-0` …), or ids with optional weights, as the Python layer
/// normalised them from a list, pairs or a DataFrame.
pub fn population(
    tenants: &Bound<'_, PyAny>,
    weights: Option<&Bound<'_, PyAny>>,
) -> PyResult<Population> {
    if tenants.is_instance_of::<PyInt>() || tenants.is_instance_of::<PyBool>() {
        let count = int("tenants", tenants)?;
        if count < 1 {
            return Err(PyValueError::new_err(format!(
                "tenants={count} leaves nothing to analyse; pass 1 or more"
            )));
        }
        if count > MAX_TENANTS as i128 {
            return Err(PyValueError::new_err(format!(
                "tenants={count} is more than the {MAX_TENANTS} tenants supported; check the number"
            )));
        }
        return Ok(Population::synthetic(count as usize));
    }
    let ids = tenant_ids(tenants)?;
    if ids.is_empty() {
        return Err(PyValueError::new_err(
            "tenants is empty: give at least one tenant id",
        ));
    }
    if ids.len() > MAX_TENANTS {
        return Err(PyValueError::new_err(format!(
            "tenants lists {} tenants, more than the {MAX_TENANTS} supported",
            ids.len()
        )));
    }
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    for (position, id) in ids.iter().enumerate() {
        if !seen.insert(id.as_str()) {
            return Err(PyValueError::new_err(format!(
                "tenants[{position}]: tenant {id:?} is listed twice; each tenant once, please"
            )));
        }
    }
    let weights = match weights {
        None => None,
        Some(weights) if weights.is_none() => None,
        Some(weights) => {
            let mut values = Vec::with_capacity(ids.len());
            for (position, weight) in weights.try_iter()?.enumerate() {
                values.push(positive(
                    &format!("the weight of tenants[{position}]"),
                    &weight?,
                )?);
            }
            if values.len() != ids.len() {
                return Err(PyValueError::new_err(format!(
                    "{} weights for {} tenants: give every tenant a weight or none",
                    values.len(),
                    ids.len()
                )));
            }
            Population::check_listed_weights(&values).map_err(value_error)?;
            Some(values)
        }
    };
    Ok(Population::listed(ids, weights))
}
