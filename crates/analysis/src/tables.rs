//! Count tables over subsets: how many tenants have exactly a given subset,
//! and how many have a subset containing a given set of shards.
//!
//! These replace Recipe 12.2's loops over tenants. A tenant population of
//! millions collapses to its distinct subsets, and every question about a
//! failure set `F` becomes a handful of lookups over the subsets of `F`
//! (fully down: tenants whose subset is inside `F`; degraded: inclusion–
//! exclusion over the containment counts).
//!
//! Sets of shard indices are packed into a `u128`, `bits` bits per index,
//! smallest first; tables are sorted vectors searched by binary search.

use placement::ShardIndex;
use rayon::prelude::*;

use crate::combinatorics::{binomial, for_each_combination};
use crate::error::AnalysisError;
use crate::placements::Placements;

/// Packs sorted shard-index sets into `u128` keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Packer {
    bits: u32,
}

impl Packer {
    pub(crate) fn new(n: usize) -> Self {
        let bits = (usize::BITS - n.saturating_sub(1).leading_zeros()).max(1);
        Self { bits }
    }

    /// The largest set size that fits one key.
    pub(crate) fn capacity(self) -> usize {
        (128 / self.bits) as usize
    }

    #[inline]
    pub(crate) fn pack(self, sorted: &[ShardIndex]) -> u128 {
        sorted
            .iter()
            .rev()
            .fold(0u128, |key, &index| (key << self.bits) | u128::from(index))
    }

    pub(crate) fn unpack(self, mut key: u128, len: usize, out: &mut Vec<ShardIndex>) {
        out.clear();
        let mask = (1u128 << self.bits) - 1;
        for _ in 0..len {
            out.push((key & mask) as ShardIndex);
            key >>= self.bits;
        }
    }
}

/// One row of a count table. The key is split into two words so a row
/// takes 24 bytes rather than the 32 a 16-byte-aligned `u128` would force:
/// tables at ten million tenants hold tens of millions of rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Row {
    key: [u64; 2],
    pub(crate) tenants: u64,
}

impl Row {
    fn new(key: u128, tenants: u64) -> Self {
        Self {
            key: [(key >> 64) as u64, key as u64],
            tenants,
        }
    }

    pub(crate) fn key(&self) -> u128 {
        (u128::from(self.key[0]) << 64) | u128::from(self.key[1])
    }
}

/// Sorted rows keyed by packed set, with counts merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    rows: Vec<Row>,
}

impl Table {
    fn from_unsorted(mut rows: Vec<Row>) -> Self {
        rows.par_sort_unstable_by_key(|row| row.key);
        // Merge equal keys in place, so no second vector is needed.
        let mut kept = 0;
        for i in 0..rows.len() {
            if kept > 0 && rows[kept - 1].key == rows[i].key {
                rows[kept - 1].tenants += rows[i].tenants;
            } else {
                rows[kept] = rows[i];
                kept += 1;
            }
        }
        rows.truncate(kept);
        rows.shrink_to_fit();
        Self { rows }
    }

    pub(crate) fn get(&self, key: u128) -> Option<&Row> {
        self.rows
            .binary_search_by_key(&key, Row::key)
            .ok()
            .map(|at| &self.rows[at])
    }

    /// Where the row with `key` sits in [`rows`](Self::rows), if present.
    pub(crate) fn position(&self, key: u128) -> Option<usize> {
        self.rows.binary_search_by_key(&key, Row::key).ok()
    }

    pub(crate) fn rows(&self) -> &[Row] {
        &self.rows
    }
}

/// The distinct subsets of a population, by size, with their tenant counts.
#[derive(Debug, Clone)]
pub(crate) struct SubsetTables {
    pub(crate) packer: Packer,
    /// `exact[s]`: distinct subsets of size `s`.
    pub(crate) exact: Vec<Table>,
}

impl SubsetTables {
    pub(crate) fn build(placements: &Placements) -> Result<Self, AnalysisError> {
        let packer = Packer::new(placements.shards());
        let max_k = placements.max_k();
        if max_k > packer.capacity() {
            return Err(AnalysisError::SubsetTooLarge {
                k: max_k,
                n: placements.shards(),
                max: packer.capacity(),
            });
        }
        let mut by_size: Vec<Vec<Row>> = vec![Vec::new(); max_k + 1];
        for subset in placements.iter() {
            by_size[subset.len()].push(Row::new(packer.pack(subset), 1));
        }
        let exact = by_size.into_iter().map(Table::from_unsorted).collect();
        Ok(Self { packer, exact })
    }

    /// The containment table for sets of size `m ≥ 1`: for each `m`-set, the
    /// tenants whose subset contains it.
    pub(crate) fn containment(&self, m: usize) -> Table {
        let packer = self.packer;
        // Every row of size `s` contributes exactly C(s, m) sets, so the
        // output is allocated once and each row fills its own slice: no
        // intermediate vectors, which at ten million tenants would double
        // the peak memory.
        let per_row = |size: usize| binomial(size as u64, m as u64) as usize;
        let total: usize = self
            .exact
            .iter()
            .enumerate()
            .filter(|(size, _)| *size >= m)
            .map(|(size, table)| table.rows().len() * per_row(size))
            .sum();
        let mut rows = vec![Row::new(0, 0); total];
        let mut rest = rows.as_mut_slice();
        for (size, table) in self.exact.iter().enumerate().filter(|(size, _)| *size >= m) {
            let width = per_row(size);
            let (mine, others) = rest.split_at_mut(table.rows().len() * width);
            rest = others;
            mine.par_chunks_mut(width)
                .zip(table.rows().par_iter())
                .for_each_init(Vec::new, |members, (out, row)| {
                    packer.unpack(row.key(), size, members);
                    let mut slot = out.iter_mut();
                    for_each_combination(members, m, |combination| {
                        *slot.next().expect("C(size, m) slots") =
                            Row::new(packer.pack(combination), row.tenants);
                    });
                });
        }
        Table::from_unsorted(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        let packer = Packer::new(1000);
        assert_eq!(packer.capacity(), 12);
        let mut out = Vec::new();
        packer.unpack(packer.pack(&[3, 500, 999]), 3, &mut out);
        assert_eq!(out, [3, 500, 999]);
        assert_eq!(Packer::new(1).capacity(), 128);
        assert_eq!(Packer::new(2).capacity(), 128);
        assert_eq!(Packer::new(3).capacity(), 64);
    }
}
