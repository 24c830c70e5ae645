//! Between a row of `shuffle_shard_tenants` and a [`TenantEntry`]: what a
//! row holds that an entry cannot (a negative `k`, a NULL shard id) is a
//! [`BadRow`] naming the tenant and the column, never a failed load.

use tokio_postgres::Row;

use crate::tenants::TenantEntry;

/// A tenant row that does not convert to an entry, or an entry the store's
/// columns cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tenant {id:?}, column {column}: {problem}")]
pub struct BadRow {
    /// The tenant's id (as stored).
    pub id: String,
    /// The column at fault (`k`, `shards`, …).
    pub column: &'static str,
    /// What is wrong, and how to put it right.
    pub problem: String,
}

impl BadRow {
    fn new(id: &str, column: &'static str, problem: impl Into<String>) -> Self {
        Self {
            id: id.to_owned(),
            column,
            problem: problem.into(),
        }
    }
}

/// A row (columns as in `schema::COLUMNS`) as an entry.
pub(super) fn entry(row: &Row) -> Result<TenantEntry, BadRow> {
    let id: String = row
        .try_get(0)
        .map_err(|e| BadRow::new("<unreadable>", "id", e.to_string()))?;
    let text = |at: usize, column: &'static str| {
        row.try_get::<_, Option<String>>(at)
            .map_err(|e| BadRow::new(&id, column, e.to_string()))
    };
    let count = |at: usize, column: &'static str, what: &str| {
        let value = row
            .try_get::<_, Option<i32>>(at)
            .map_err(|e| BadRow::new(&id, column, e.to_string()))?;
        value
            .map(|n| {
                u32::try_from(n).map_err(|_| {
                    BadRow::new(&id, column, format!("is {n}; {what} cannot be negative"))
                })
            })
            .transpose()
    };
    let shards = row
        .try_get::<_, Option<Vec<Option<String>>>>(4)
        .map_err(|e| {
            BadRow::new(
                &id,
                "shards",
                format!("{e} (store a one-dimensional text array)"),
            )
        })?
        .map(|shards| {
            shards
                .into_iter()
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| {
                    BadRow::new(&id, "shards", "holds a NULL shard id; list shard ids only")
                })
        })
        .transpose()?;
    Ok(TenantEntry {
        api_key_sha256: text(1, "api_key_sha256")?,
        cell: text(2, "cell")?,
        k: count(3, "k", "a subset size")?,
        shards,
        max_in_flight: count(5, "max_in_flight", "a limit")?,
        requests_per_second: row
            .try_get(6)
            .map_err(|e| BadRow::new(&id, "requests_per_second", e.to_string()))?,
        burst: count(7, "burst", "a burst")?,
        id,
    })
}

/// An entry's numbers as the store's `int` columns hold them.
pub(super) struct Numbers {
    pub k: Option<i32>,
    pub max_in_flight: Option<i32>,
    pub burst: Option<i32>,
}

/// Checks that `entry` fits the store's columns: ints up to 2^31 - 1, and
/// a finite rate (JSON, which batches travel in, has no NaN).
pub(super) fn numbers(entry: &TenantEntry) -> Result<Numbers, BadRow> {
    let int = |value: Option<u32>, column: &'static str| {
        value
            .map(|n| {
                i32::try_from(n).map_err(|_| {
                    BadRow::new(
                        &entry.id,
                        column,
                        format!("is {n}, more than the store holds ({})", i32::MAX),
                    )
                })
            })
            .transpose()
    };
    if entry.requests_per_second.is_some_and(|r| !r.is_finite()) {
        return Err(BadRow::new(
            &entry.id,
            "requests_per_second",
            "must be a finite number",
        ));
    }
    Ok(Numbers {
        k: int(entry.k, "k")?,
        max_in_flight: int(entry.max_in_flight, "max_in_flight")?,
        burst: int(entry.burst, "burst")?,
    })
}
