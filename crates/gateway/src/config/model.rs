//! `[model]`: the standing blast-radius model the gateway keeps over its
//! own population (the worst single and double shard failure, and one
//! more size if asked), and the budget its alert compares with.

use serde::Deserialize;

use super::check::KeyProblem;

/// The largest failure size the standing model sweeps: beyond it the sets
/// are too many to sweep after every change.
pub const MAX_MODEL_FAILURES: usize = 5;

/// `[model]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelSettings {
    /// The most tenants the worst double failure may take fully down
    /// (`max_fully_down_on_two_failures`): exported as a gauge for the
    /// alert rule to compare with; `None`: no budget.
    pub max_fully_down_on_two_failures: Option<u64>,
    /// One more failure size to sweep beside 1 and 2 (`failures`, 3 to 5).
    pub failures: Option<usize>,
}

impl ModelSettings {
    /// The failure sizes swept: 1, 2, and the configured one.
    pub fn sizes(&self) -> Vec<usize> {
        let mut sizes = vec![1, 2];
        if let Some(f) = self.failures {
            sizes.push(f);
        }
        sizes
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    max_fully_down_on_two_failures: Option<u64>,
    failures: Option<usize>,
}

pub(super) fn model_settings(raw: RawModel) -> Result<ModelSettings, KeyProblem> {
    if let Some(f) = raw.failures
        && !(3..=MAX_MODEL_FAILURES).contains(&f)
    {
        return Err((
            "model.failures",
            format!(
                "{f} is out of range; use 3 to {MAX_MODEL_FAILURES} (sizes 1 and 2 are always swept)"
            ),
        ));
    }
    Ok(ModelSettings {
        max_fully_down_on_two_failures: raw.max_fully_down_on_two_failures,
        failures: raw.failures,
    })
}
