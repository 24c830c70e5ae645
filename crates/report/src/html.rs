//! Text helpers for the HTML document: escaping and number formatting.
//!
//! Everything that reaches the page from outside (the title, the verdict,
//! the algorithm name) goes through [`escape`]; numbers are formatted here so
//! that the header, the tables and the captions agree on precision.

/// Escapes text for use in HTML element content and in double- or
/// single-quoted attribute values.
///
/// Public so that every HTML page of the product escapes by this one rule.
///
/// ```
/// assert_eq!(report::escape("<b>O'Neil & co</b>"), "&lt;b&gt;O&#39;Neil &amp; co&lt;/b&gt;");
/// ```
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// A fraction as a percentage. Small fractions keep more decimals because
/// the budgets that matter (a 0.1 % fully-down budget) live there.
pub(crate) fn percent(fraction: f64) -> String {
    let value = fraction * 100.0;
    if value == 0.0 {
        "0%".to_owned()
    } else if value.abs() >= 10.0 {
        format!("{value:.1}%")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}%")
    } else {
        format!("{value:.3}%")
    }
}

/// A count with thousands separators, so 2000000 reads as 2,000,000.
pub(crate) fn count(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A failure set as the shard indices the analysis uses.
pub(crate) fn shard_set(shards: &[u32]) -> String {
    if shards.is_empty() {
        return "—".to_owned();
    }
    let list: Vec<String> = shards.iter().map(u32::to_string).collect();
    format!("shards {}", list.join(", "))
}

/// A load figure: enough significant digits to compare shards.
pub(crate) fn load(value: f64) -> String {
    if value == 0.0 || value.abs() >= 100.0 {
        format!("{value:.1}")
    } else if value.abs() >= 1.0 {
        format!("{value:.3}")
    } else {
        format!("{value:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x">O'Neil & co</a>"#),
            "&lt;a href=&quot;x&quot;&gt;O&#39;Neil &amp; co&lt;/a&gt;"
        );
    }

    #[test]
    fn percentages_keep_precision_where_budgets_live() {
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(0.001), "0.100%");
        assert_eq!(percent(0.0625), "6.25%");
        assert_eq!(percent(0.5), "50.0%");
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(2_000_000), "2,000,000");
    }

    #[test]
    fn failure_sets_name_their_shards() {
        assert_eq!(shard_set(&[3, 17]), "shards 3, 17");
        assert_eq!(shard_set(&[]), "—");
    }
}
