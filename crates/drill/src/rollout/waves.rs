//! The rollout's waves file, read against the gateway's shards: one
//! `SHARD_ID WAVE` line per shard (the file `plan-waves --out` writes, or
//! one written by hand), waves in the order they first appear.
//!
//! A shard id alone names the shard when exactly one cell has it;
//! `CELL/ID` names it in a gateway whose cells reuse ids. Every shard of a
//! cell the file names must be in some wave: a shard left out would never
//! get the new build, and the rollout would report success over a fleet
//! that still runs the old one.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::error::DrillError;
use crate::session::ShardRef;

/// One wave: its name and its shards, in file order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wave {
    /// The wave's name (the file's second column).
    pub name: String,
    /// Its shards, `(cell, id)`.
    pub shards: Vec<ShardRef>,
}

impl Wave {
    /// The shards' ids, comma-separated: `SHUFFLE_SHARD_SHARDS`.
    pub fn ids(&self) -> String {
        self.shards
            .iter()
            .map(|(_, id)| id.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Each shard's cell, comma-separated in the order of [`Wave::ids`]:
    /// `SHUFFLE_SHARD_CELLS`, for gateways whose cells reuse ids.
    pub fn cells(&self) -> String {
        self.shards
            .iter()
            .map(|(cell, _)| cell.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The shards as `cell/id`, for people.
    pub fn names(&self) -> Vec<String> {
        self.shards
            .iter()
            .map(|(cell, id)| format!("{cell}/{id}"))
            .collect()
    }

    /// Whether `(cell, id)` is in this wave.
    pub fn has(&self, cell: &str, id: &str) -> bool {
        self.shards.iter().any(|(c, i)| c == cell && i == id)
    }
}

/// Parses a waves file against the gateway's cells (each cell's shard
/// ids): the waves in order, or an error naming the line and the fix.
pub fn parse(text: &str, cells: &BTreeMap<String, Vec<String>>) -> Result<Vec<Wave>, DrillError> {
    let bad = |line: usize, what: String| DrillError::Input(format!("--waves line {line}: {what}"));
    let mut waves: Vec<Wave> = Vec::new();
    let mut placed: BTreeMap<ShardRef, usize> = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let number = number + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(shard), Some(wave), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(bad(
                number,
                "expected `SHARD_ID WAVE` (e.g. `s3 wave-1`), as `plan-waves --out` writes".into(),
            ));
        };
        let shard = resolve(shard, cells).map_err(|what| bad(number, what))?;
        if shard.0.contains(',') || shard.1.contains(',') {
            return Err(bad(
                number,
                format!(
                    "shard {}/{} has a `,` in its name, which the deploy command could not tell from the separator of SHUFFLE_SHARD_SHARDS; rename it",
                    shard.0, shard.1
                ),
            ));
        }
        if let Some(first) = placed.get(&shard) {
            return Err(bad(
                number,
                format!(
                    "shard {}/{} is already in wave {:?}; put each shard in one wave",
                    shard.0, shard.1, waves[*first].name
                ),
            ));
        }
        let position = match waves.iter().position(|w| w.name == wave) {
            Some(position) => position,
            None => {
                waves.push(Wave {
                    name: wave.to_owned(),
                    shards: Vec::new(),
                });
                waves.len() - 1
            }
        };
        placed.insert(shard.clone(), position);
        waves[position].shards.push(shard);
    }
    if waves.is_empty() {
        return Err(DrillError::Input(
            "--waves names no shard; give one `SHARD_ID WAVE` line per shard (e.g. from `shuffle-shard plan-waves --out`)".into(),
        ));
    }
    let named: BTreeSet<&String> = placed.keys().map(|(cell, _)| cell).collect();
    for cell in named {
        let left_out: Vec<&String> = cells[cell]
            .iter()
            .filter(|id| !placed.contains_key(&(cell.clone(), (*id).clone())))
            .collect();
        if !left_out.is_empty() {
            return Err(DrillError::Input(format!(
                "--waves leaves out {} of cell {cell:?}: every shard of a cell must be in some wave, or it never gets the new build; add a line for each",
                left_out
                    .iter()
                    .map(|id| id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(waves)
}

/// `ID` or `CELL/ID` as a shard of `cells`.
fn resolve(shard: &str, cells: &BTreeMap<String, Vec<String>>) -> Result<ShardRef, String> {
    if let Some((cell, id)) = shard.split_once('/')
        && cells
            .get(cell)
            .is_some_and(|ids| ids.iter().any(|i| i == id))
    {
        return Ok((cell.to_owned(), id.to_owned()));
    }
    let found: Vec<&String> = cells
        .iter()
        .filter(|(_, ids)| ids.iter().any(|id| id == shard))
        .map(|(cell, _)| cell)
        .collect();
    match found.as_slice() {
        [cell] => Ok(((*cell).clone(), shard.to_owned())),
        [] => Err(format!(
            "the gateway has no shard {shard:?} (GET /admin/shards lists them; write CELL/ID for a shard of one cell)"
        )),
        several => Err(format!(
            "shard id {shard:?} is in cells {}; write CELL/ID",
            several
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells() -> BTreeMap<String, Vec<String>> {
        [
            ("a".to_owned(), vec!["s0".into(), "s1".into(), "s2".into()]),
            ("b".to_owned(), vec!["s0".into(), "t1".into()]),
        ]
        .into()
    }

    #[test]
    fn waves_come_in_the_order_they_first_appear() {
        let waves = parse(
            "# canary first\na/s1 canary\na/s0 rest\ns2 rest\nb/s0 b\nt1 b\n",
            &cells(),
        )
        .unwrap();
        let names: Vec<&str> = waves.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["canary", "rest", "b"]);
        assert_eq!(waves[0].shards, [("a".to_owned(), "s1".to_owned())]);
        assert_eq!(waves[1].ids(), "s0,s2");
        assert!(waves[2].has("b", "s0") && !waves[2].has("a", "s0"));
    }

    #[test]
    fn bad_files_name_the_line_and_the_fix() {
        let error = |text: &str| parse(text, &cells()).unwrap_err().to_string();
        assert!(error("s1\n").contains("line 1: expected `SHARD_ID WAVE`"));
        assert!(error("s1 w x\n").contains("line 1"));
        assert!(error("s9 w\n").contains("no shard \"s9\""));
        assert!(error("s0 w\n").contains("in cells a, b; write CELL/ID"));
        let twice = error("a/s0 w\na/s1 w\na/s1 v\na/s2 v\n");
        assert!(
            twice.contains("line 3") && twice.contains("already in wave \"w\""),
            "{twice}"
        );
        let left = error("a/s0 w\na/s1 w\n");
        assert!(left.contains("leaves out s2 of cell \"a\""), "{left}");
        assert!(error("# nothing\n").contains("names no shard"));
    }
}
