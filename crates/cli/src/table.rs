//! A small aligned text table and the number formats the analysers print.
//!
//! The analysers' default output is read by people at a terminal, so columns
//! line up; anything a program reads comes from `--json` instead, which is
//! why this formatter stays this small.

use std::fmt::Write as _;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left, so digits line up.
    Right,
}

/// Rows of cells under a header, rendered with two spaces between columns.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers and alignments.
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Self {
            headers: columns.iter().map(|(name, _)| (*name).to_owned()).collect(),
            align: columns.iter().map(|&(_, align)| align).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row. Missing cells render empty and extra cells are
    /// dropped, so a mistake shows up as a gap rather than a panic.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders the table, every line starting with `indent` spaces and
    /// ending in a newline, with no trailing spaces.
    pub fn render(&self, indent: usize) -> String {
        let cell = |row: &[String], column: usize| row.get(column).cloned().unwrap_or_default();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (column, slot) in widths.iter_mut().enumerate() {
                *slot = (*slot).max(width(&cell(row, column)));
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = " ".repeat(indent);
            for (column, (&width_of, &align)) in widths.iter().zip(&self.align).enumerate() {
                if column > 0 {
                    line.push_str("  ");
                }
                let text = cell(row, column);
                let pad = " ".repeat(width_of - width(&text));
                match align {
                    Align::Left => {
                        line.push_str(&text);
                        line.push_str(&pad);
                    }
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(&text);
                    }
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }
}

/// Display width, counting characters: the tables hold ASCII digits, tenant
/// ids and a few symbols such as '≤', each one column wide.
fn width(text: &str) -> usize {
    text.chars().count()
}

/// A fraction as a percentage with three decimals, e.g. `12.550%`, or with
/// two significant digits when it is smaller than 0.01%, e.g. `0.00055%`,
/// so that a handful of tenants in millions does not print as zero.
pub fn percent(fraction: f64) -> String {
    let value = fraction * 100.0;
    if value != 0.0 && value.is_finite() && value.abs() < 0.01 {
        let decimals = ((-value.abs().log10()).ceil() as usize + 1).min(12);
        return format!("{value:.decimals$}%");
    }
    format!("{value:.3}%")
}

/// A count with its fraction, e.g. `251 (12.550%)`.
pub fn count_of(count: u64, fraction: f64) -> String {
    format!("{count} ({})", percent(fraction))
}

/// A number with about four significant digits, for loads whose scale comes
/// from the user's weights: `12.35`, `0.001235`, `12346`, `1.235e9`.
pub fn number(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor();
    if !(-4.0..9.0).contains(&magnitude) {
        return format!("{value:.3e}");
    }
    let decimals = (3.0 - magnitude).max(0.0) as usize;
    format!("{value:.decimals$}")
}

/// Shard ids joined with commas, e.g. `3,17`.
pub fn shard_list<T: ToString>(shards: &[T]) -> String {
    shards
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let mut table = Table::new(&[("name", Align::Left), ("count", Align::Right)]);
        table.row(vec!["a".into(), "1".into()]);
        table.row(vec!["longer".into(), "1234".into()]);
        assert_eq!(
            table.render(2),
            "  name    count\n  a           1\n  longer   1234\n"
        );
    }

    #[test]
    fn ragged_rows_do_not_panic_and_lines_have_no_trailing_spaces() {
        let mut table = Table::new(&[("a", Align::Left), ("b", Align::Left)]);
        table.row(vec!["x".into()]);
        table.row(vec!["y".into(), "z".into(), "dropped".into()]);
        let text = table.render(0);
        assert_eq!(text, "a  b\nx\ny  z\n");
    }

    #[test]
    fn wide_characters_count_once() {
        let mut table = Table::new(&[("k", Align::Left), ("x", Align::Left)]);
        table.row(vec!["≤2".into(), "y".into()]);
        assert_eq!(table.render(0), "k   x\n≤2  y\n");
    }

    #[test]
    fn number_formats() {
        assert_eq!(number(12.345), "12.35");
        assert_eq!(number(0.001_234_6), "0.001235");
        assert_eq!(number(12_345.6), "12346");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(1.5e10), "1.500e10");
        assert_eq!(percent(0.1255), "12.550%");
        assert_eq!(percent(0.0), "0.000%");
        assert_eq!(percent(0.000_005_5), "0.00055%");
        assert_eq!(percent(0.000_05), "0.0050%");
        assert_eq!(count_of(3, 0.5), "3 (50.000%)");
        assert_eq!(shard_list(&[3, 17]), "3,17");
    }
}
