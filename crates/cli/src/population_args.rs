//! The tenant population an analyser runs over: `--tenants T` synthetic
//! tenants or `--tenants-file PATH`, exactly one of them.

use std::path::PathBuf;

use analysis::{AnalysisError, Placements, Population};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use placement::Placer;

use crate::progress::Bars;

/// The most tenants a command analyses.
///
/// The analysers keep every tenant's subset in memory (four bytes per
/// member), so an accidental `--tenants 10000000000000` would abort on a
/// failed allocation instead of answering. A hundred million tenants is ten
/// times the largest population the analyser is built for.
pub const MAX_TENANTS: usize = 100_000_000;

/// Where the tenants come from.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct PopulationArgs {
    /// Analyse T synthetic tenants with ids tenant-0 to tenant-{T-1}
    #[arg(long, value_name = "T")]
    pub tenants: Option<usize>,

    /// Analyse the tenants listed in a file: one id per line, optionally
    /// followed by a TAB and a weight
    ///
    /// A weight is that tenant's traffic share (any positive number; only
    /// ratios matter). Either every tenant has a weight or none does. Blank
    /// lines and lines starting with '#' are skipped.
    #[arg(long, value_name = "PATH")]
    pub tenants_file: Option<PathBuf>,
}

impl PopulationArgs {
    /// Builds the population, reading the tenants file if one was given.
    pub fn load(&self) -> Result<Population> {
        match (self.tenants, &self.tenants_file) {
            (Some(0), _) => {
                bail!("--tenants 0 leaves nothing to analyse; pass --tenants 1 or more")
            }
            (Some(count), _) if count > MAX_TENANTS => bail!(
                "--tenants {count} is more than the {MAX_TENANTS} tenants this command supports; check the number"
            ),
            (Some(count), _) => Ok(Population::synthetic(count)),
            (None, Some(path)) => {
                let bytes = std::fs::read(path).map_err(|error| {
                    anyhow!(
                        "cannot read tenants file {}: {error}; check the path",
                        path.display()
                    )
                })?;
                let text = String::from_utf8(bytes).map_err(|error| {
                    anyhow!(
                        "tenants file {} is not valid UTF-8 (at byte {}); tenant ids must be UTF-8",
                        path.display(),
                        error.utf8_error().valid_up_to()
                    )
                })?;
                let population = Population::parse(&text)
                    .with_context(|| format!("--tenants-file {}", path.display()))?;
                if population.len() > MAX_TENANTS {
                    bail!(
                        "tenants file {} lists {} tenants, more than the {MAX_TENANTS} this command supports",
                        path.display(),
                        population.len()
                    );
                }
                Ok(population)
            }
            // clap requires exactly one of the two; this keeps the function
            // total rather than trusting that.
            (None, None) => bail!("give the tenants with --tenants T or --tenants-file PATH"),
        }
    }
}

/// Refuses a `--tenant-k` for a tenant the population does not have (the
/// check lives in the analysis crate, so Python refuses it too).
pub fn check_overrides(overrides: &[(String, u32)], population: &Population) -> Result<()> {
    analysis::answers::check_overrides(overrides, population).map_err(|error| match &error {
        AnalysisError::OverrideForAbsentTenant { tenant, k, .. } => {
            anyhow!(
                "--tenant-k {tenant}={k}: {error}; name a tenant of --tenants or --tenants-file"
            )
        }
        _ => anyhow!(error),
    })
}

/// Places every tenant of `population`, with progress: the first step of
/// each command that analyses a placed population, labelled the same in all.
pub fn place_all(placer: &Placer, population: &Population) -> Placements {
    analysis::answers::place_all(placer, population, &Bars)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn file(contents: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(contents).unwrap();
        file.flush().unwrap();
        file
    }

    fn from_file(file: &tempfile::NamedTempFile) -> PopulationArgs {
        PopulationArgs {
            tenants: None,
            tenants_file: Some(file.path().to_owned()),
        }
    }

    #[test]
    fn synthetic_counts() {
        let args = PopulationArgs {
            tenants: Some(3),
            tenants_file: None,
        };
        assert_eq!(args.load().unwrap().len(), 3);
        for bad in [0, MAX_TENANTS + 1] {
            let args = PopulationArgs {
                tenants: Some(bad),
                tenants_file: None,
            };
            assert!(args.load().is_err(), "{bad}");
        }
    }

    #[test]
    fn files_parse_and_errors_name_the_problem() {
        let good = file(b"acme\t2\nglobex\t1\n");
        let population = from_file(&good).load().unwrap();
        assert_eq!(population.weights(), Some(&[2.0, 1.0][..]));

        let empty = file(b"\n# nobody\n");
        let error = format!("{:#}", from_file(&empty).load().unwrap_err());
        assert!(error.contains("has no tenants"), "{error}");

        let bad_weight = file(b"a\t1\nb\theavy\n");
        let error = format!("{:#}", from_file(&bad_weight).load().unwrap_err());
        assert!(error.contains("line 2"), "{error}");

        let binary = file(b"a\n\xff\n");
        let error = format!("{:#}", from_file(&binary).load().unwrap_err());
        assert!(error.contains("not valid UTF-8"), "{error}");

        let missing = PopulationArgs {
            tenants: None,
            tenants_file: Some("/nonexistent/shuffle-shard/tenants".into()),
        };
        let error = format!("{:#}", missing.load().unwrap_err());
        assert!(
            error.contains("/nonexistent/shuffle-shard/tenants"),
            "{error}"
        );
    }
}
