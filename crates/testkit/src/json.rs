//! Reading JSON answers in assertions.

use std::collections::BTreeSet;

use serde_json::Value;

/// The keys of a JSON object, for asserting that an answer has exactly the
/// documented fields. Panics, naming the value, on anything but an object.
pub fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect()
}
