//! The typed errors of the analyser.

use thiserror::Error;

/// Why an analysis could not run. Messages name the bad input and say how to
/// fix it.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum AnalysisError {
    /// The tenants file held no tenants.
    #[error("the tenants file has no tenants: put one tenant id per line")]
    NoTenants,
    /// A tenants-file line had a weight that is not a positive number.
    #[error(
        "tenants file line {line}: weight {text:?} is not a positive number; write `TENANT<TAB>WEIGHT`, e.g. `acme\\t2.5`"
    )]
    BadWeight {
        /// One-based line number.
        line: usize,
        /// The weight as written.
        text: String,
    },
    /// A weight so small (subnormal) that loads and their spread lose all
    /// precision.
    #[error(
        "tenants file line {line}: weight {text} is below {min:e}, too small to compute loads with; only ratios matter, so scale every weight up",
        min = f64::MIN_POSITIVE
    )]
    WeightTooSmall {
        /// One-based line number.
        line: usize,
        /// The weight as written.
        text: String,
    },
    /// A listed weight (not from a tenants file) too small to compute with.
    #[error(
        "the weight of tenants[{position}] is {weight:e}, below {min:e}, too small to compute loads with; only ratios matter, so scale every weight up",
        min = f64::MIN_POSITIVE
    )]
    ListedWeightTooSmall {
        /// Its zero-based position in the list.
        position: usize,
        /// The weight.
        weight: f64,
    },
    /// The weights add up to more than a float can hold.
    #[error(
        "the tenant weights add up to more than 1.8e308; only ratios matter, so scale every weight down"
    )]
    WeightsOverflow,
    /// A line looked like `TENANT WEIGHT` with a space instead of a tab.
    #[error(
        "tenants file line {line}: {text:?} looks like a tenant and a weight separated by a space; separate them with a TAB (`TENANT<TAB>WEIGHT`)"
    )]
    WeightAfterSpace {
        /// One-based line number.
        line: usize,
        /// The line as written.
        text: String,
    },
    /// A tenants-file line had more than two tab-separated fields.
    #[error(
        "tenants file line {line}: expected `TENANT` or `TENANT<TAB>WEIGHT`, found {fields} tab-separated fields"
    )]
    TooManyFields {
        /// One-based line number.
        line: usize,
        /// How many fields there were.
        fields: usize,
    },
    /// A tenant id appeared twice.
    #[error(
        "tenants file line {line}: tenant {tenant:?} is listed twice; each tenant once, please"
    )]
    DuplicateTenant {
        /// One-based line number of the second occurrence.
        line: usize,
        /// The repeated tenant.
        tenant: String,
    },
    /// Some lines weighted, others not.
    #[error(
        "tenants file line {line}: this line has no weight but others do; give every tenant a weight or none"
    )]
    MixedWeights {
        /// One-based line number.
        line: usize,
    },
    /// A failure set named a shard that is not in the fleet.
    #[error("failure set names shard {shard:?}, which is not in the fleet of {n} shards")]
    UnknownShard {
        /// The shard as written.
        shard: String,
        /// The fleet size.
        n: usize,
    },
    /// A failure-set size larger than the fleet.
    #[error("cannot fail {failures} shards out of {n}: choose at most {n}")]
    TooManyFailures {
        /// The requested failure-set size.
        failures: usize,
        /// The fleet size.
        n: usize,
    },
    /// A failure-set size of zero.
    #[error("a failure set must have at least one shard")]
    EmptyFailureSet,
    /// A failure set named one shard twice.
    #[error("shard {shard:?} is listed twice; name each failed shard once")]
    ShardListedTwice {
        /// The repeated shard's id.
        shard: String,
    },
    /// A per-tenant `k` override named a tenant outside the population.
    #[error(
        "there is no tenant {tenant:?} among the {tenants} tenants analysed to give k={k}; override only tenants of the population (a typo?)"
    )]
    OverrideForAbsentTenant {
        /// The tenant named.
        tenant: String,
        /// The `k` it was given.
        k: u32,
        /// Tenants in the population.
        tenants: usize,
    },
    /// The fleet has no zones but a zone analysis was asked for.
    #[error(
        "the fleet has no zones: declare zones (e.g. --zones a:8,b:8) for a zone outage analysis"
    )]
    NoZones,
    /// A subset too large for the analyser's exact tables.
    #[error(
        "a tenant has {k} shards, more than the {max} the exact analysis supports for {n} shards; lower the per-tenant k"
    )]
    SubsetTooLarge {
        /// The largest subset size in the population.
        k: usize,
        /// The fleet size.
        n: usize,
        /// The largest supported subset size for this fleet.
        max: usize,
    },
    /// A wave file problem.
    #[error("waves: {0}")]
    Waves(String),
    /// A placement problem (k out of range, bad fleet, …).
    #[error(transparent)]
    Placement(#[from] placement::PlacementError),
}

/// Refuses a failure-set size outside `1..=n`, the same way for the plan,
/// the worst-case search and the sweep.
pub(crate) fn check_failures(failures: usize, n: usize) -> Result<(), AnalysisError> {
    if failures == 0 {
        return Err(AnalysisError::EmptyFailureSet);
    }
    if failures > n {
        return Err(AnalysisError::TooManyFailures { failures, n });
    }
    Ok(())
}
