//! The tenant population an analysis runs over: ids and optional weights.
//!
//! Synthetic populations (`tenant-0` … `tenant-{T-1}`) are never
//! materialised as strings; listed ones come from a tenants file, parsed here
//! from text so that this crate stays free of I/O.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::error::AnalysisError;

/// Tenant ids.
#[derive(Debug, Clone, PartialEq)]
enum Ids {
    /// `tenant-0` … `tenant-{T-1}`.
    Synthetic(usize),
    /// Ids as listed.
    Listed(Vec<String>),
}

/// The tenants to analyse, with an optional traffic weight each.
#[derive(Debug, Clone, PartialEq)]
pub struct Population {
    ids: Ids,
    weights: Option<Vec<f64>>,
}

impl Population {
    /// `count` synthetic tenants `tenant-0` … `tenant-{count-1}`, unweighted.
    pub fn synthetic(count: usize) -> Self {
        Self {
            ids: Ids::Synthetic(count),
            weights: None,
        }
    }

    /// Listed tenants, optionally weighted (one weight per tenant).
    pub fn listed(ids: Vec<String>, weights: Option<Vec<f64>>) -> Self {
        debug_assert!(weights.as_ref().is_none_or(|w| w.len() == ids.len()));
        Self {
            ids: Ids::Listed(ids),
            weights,
        }
    }

    /// Checks weights given as a list rather than a tenants file (the
    /// Python package's): each large enough to compute loads with, as the
    /// tenants file's are, and their sum finite.
    pub fn check_listed_weights(weights: &[f64]) -> Result<(), AnalysisError> {
        if let Some(position) = weights.iter().position(|&w| w < f64::MIN_POSITIVE) {
            return Err(AnalysisError::ListedWeightTooSmall {
                position,
                weight: weights[position],
            });
        }
        check_weight_sum(weights)
    }

    /// Parses a tenants file: one tenant id per line, optionally followed by
    /// a tab and a positive weight (that tenant's traffic share). Blank lines
    /// and lines starting with `#` are skipped; a trailing `\r` is dropped.
    /// Either every tenant has a weight or none does.
    pub fn parse(text: &str) -> Result<Self, AnalysisError> {
        let mut ids = Vec::new();
        let mut weights: Vec<f64> = Vec::new();
        let mut weighted: Option<bool> = None;
        let mut seen: HashSet<&str> = HashSet::new();
        for (number, line) in text.lines().enumerate() {
            let line_no = number + 1;
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let (id, weight) = match fields.as_slice() {
                [id] => {
                    // `acme 2.5` is almost always a weight typed with a
                    // space; taking it as the id "acme 2.5" would silently
                    // drop the weight.
                    if let Some((_, last)) = id.trim_end().rsplit_once([' ', '\t'])
                        && last.parse::<f64>().is_ok()
                    {
                        return Err(AnalysisError::WeightAfterSpace {
                            line: line_no,
                            text: (*id).to_owned(),
                        });
                    }
                    (*id, None)
                }
                [id, weight] => {
                    let text = weight.trim();
                    let value: f64 = text.parse().map_err(|_| AnalysisError::BadWeight {
                        line: line_no,
                        text: text.to_owned(),
                    })?;
                    if !(value.is_finite() && value > 0.0) {
                        return Err(AnalysisError::BadWeight {
                            line: line_no,
                            text: text.to_owned(),
                        });
                    }
                    if value < f64::MIN_POSITIVE {
                        return Err(AnalysisError::WeightTooSmall {
                            line: line_no,
                            text: text.to_owned(),
                        });
                    }
                    (*id, Some(value))
                }
                _ => {
                    return Err(AnalysisError::TooManyFields {
                        line: line_no,
                        fields: fields.len(),
                    });
                }
            };
            match (weighted, weight.is_some()) {
                (None, has) => weighted = Some(has),
                (Some(expected), has) if expected != has => {
                    return Err(AnalysisError::MixedWeights { line: line_no });
                }
                _ => {}
            }
            if !seen.insert(id) {
                return Err(AnalysisError::DuplicateTenant {
                    line: line_no,
                    tenant: id.to_owned(),
                });
            }
            ids.push(id.to_owned());
            if let Some(weight) = weight {
                weights.push(weight);
            }
        }
        if ids.is_empty() {
            return Err(AnalysisError::NoTenants);
        }
        check_weight_sum(&weights)?;
        let weights = (weighted == Some(true)).then_some(weights);
        Ok(Self::listed(ids, weights))
    }

    /// Number of tenants.
    pub fn len(&self) -> usize {
        match &self.ids {
            Ids::Synthetic(count) => *count,
            Ids::Listed(ids) => ids.len(),
        }
    }

    /// Whether there are no tenants.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of tenant `index`.
    pub fn id(&self, index: usize) -> Cow<'_, str> {
        match &self.ids {
            Ids::Synthetic(_) => Cow::Owned(format!("tenant-{index}")),
            Ids::Listed(ids) => Cow::Borrowed(&ids[index]),
        }
    }

    /// The index of the tenant with this id, if it is in the population:
    /// `tenant-N` for a synthetic one, a scan of the ids for a listed one
    /// (asked once per named tenant, so no index is kept).
    pub fn position(&self, id: &str) -> Option<usize> {
        match &self.ids {
            Ids::Synthetic(count) => id
                .strip_prefix("tenant-")
                .filter(|digits| {
                    !digits.starts_with('+') && (digits == &"0" || !digits.starts_with('0'))
                })
                .and_then(|digits| digits.parse::<usize>().ok())
                .filter(|index| index < count),
            Ids::Listed(ids) => ids.iter().position(|listed| listed == id),
        }
    }

    /// The weights, if the population is weighted.
    pub fn weights(&self) -> Option<&[f64]> {
        self.weights.as_deref()
    }

    /// The weight of tenant `index` (1 when unweighted).
    pub fn weight(&self, index: usize) -> f64 {
        self.weights.as_ref().map_or(1.0, |weights| weights[index])
    }
}

/// Refuses weights whose sum overflows: every share would be zero or NaN.
fn check_weight_sum(weights: &[f64]) -> Result<(), AnalysisError> {
    if weights.iter().sum::<f64>().is_finite() {
        Ok(())
    } else {
        Err(AnalysisError::WeightsOverflow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ids_and_weights() {
        let population = Population::parse("# comment\nacme\t2.5\r\n\nglobex\t1\n").unwrap();
        assert_eq!(population.len(), 2);
        assert_eq!(population.id(1), "globex");
        assert_eq!(population.weights(), Some(&[2.5, 1.0][..]));
        let plain = Population::parse("a\nb\n").unwrap();
        assert_eq!(plain.weights(), None);
        assert_eq!(plain.weight(0), 1.0);
    }

    #[test]
    fn rejects_bad_files() {
        assert_eq!(
            Population::parse("\n\n").unwrap_err(),
            AnalysisError::NoTenants
        );
        assert!(matches!(
            Population::parse("a\tx"),
            Err(AnalysisError::BadWeight { line: 1, .. })
        ));
        for bad in ["a\t-1", "a\t0", "a\tNaN", "a\tinf"] {
            assert!(
                matches!(Population::parse(bad), Err(AnalysisError::BadWeight { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            Population::parse("a\t1\nb 2.5\n"),
            Err(AnalysisError::WeightAfterSpace { line: 2, .. })
        ));
        assert!(Population::parse("a b\nc\n").is_ok(), "an id with a space");
        assert!(matches!(
            Population::parse("a\t1e308\nb\t1e308\n"),
            Err(AnalysisError::WeightsOverflow)
        ));
        assert!(matches!(
            Population::parse("a\t1e-320\nb\t1\n"),
            Err(AnalysisError::WeightTooSmall { line: 1, .. })
        ));
        assert!(matches!(
            Population::check_listed_weights(&[1.0, 1e-320]),
            Err(AnalysisError::ListedWeightTooSmall { position: 1, .. })
        ));
        assert!(matches!(
            Population::check_listed_weights(&[1e308, 1e308]),
            Err(AnalysisError::WeightsOverflow)
        ));
        assert!(Population::check_listed_weights(&[1e-300, 1e300]).is_ok());
        assert!(matches!(
            Population::parse("a\t1\t2"),
            Err(AnalysisError::TooManyFields { line: 1, fields: 3 })
        ));
        assert!(matches!(
            Population::parse("a\t1\nb"),
            Err(AnalysisError::MixedWeights { line: 2 })
        ));
        assert!(matches!(
            Population::parse("a\nb\na"),
            Err(AnalysisError::DuplicateTenant { line: 3, .. })
        ));
    }

    #[test]
    fn synthetic_ids() {
        let population = Population::synthetic(3);
        assert_eq!(population.id(2), "tenant-2");
        assert_eq!(population.len(), 3);
        assert_eq!(population.position("tenant-2"), Some(2));
        for absent in ["tenant-3", "tenant-02", "tenant-+1", "tenant-", "acme"] {
            assert_eq!(population.position(absent), None, "{absent}");
        }
        let listed = Population::parse("acme\nglobex\n").unwrap();
        assert_eq!(listed.position("globex"), Some(1));
        assert_eq!(listed.position("tenant-0"), None);
    }
}
