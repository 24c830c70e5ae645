//! The three properties a drill proves, each reported as held, violated or
//! not exercised, and the tenant-by-tenant comparison of a measured set with
//! the model's: the vocabulary every drill's verdict shares, so that no
//! drill can call a property held that its fault never put to the test.

use std::collections::BTreeSet;

use serde::Serialize;

/// How many tenants a set comparison names when it differs.
const NAMED: usize = 5;

/// What became of one property in a drill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The fault put the property to the test and it held.
    Held,
    /// The fault put the property to the test and it did not hold.
    Violated,
    /// The fault did not put the property to the test (e.g. no tenant kept
    /// a member, so nobody could fail over): it proves nothing either way.
    NotExercised,
}

/// One property's outcome and the figures behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Property {
    /// Held, violated or not exercised.
    pub status: Status,
    /// The figures, in words.
    pub detail: String,
}

impl Property {
    /// A property the fault did not test, and why.
    pub fn not_exercised(why: impl Into<String>) -> Self {
        Self {
            status: Status::NotExercised,
            detail: why.into(),
        }
    }

    /// A property that was tested: held when `held`.
    pub fn tested(held: bool, detail: impl Into<String>) -> Self {
        Self {
            status: if held { Status::Held } else { Status::Violated },
            detail: detail.into(),
        }
    }

    /// Whether the property was put to the test.
    pub fn exercised(&self) -> bool {
        self.status != Status::NotExercised
    }
}

/// The three properties, by name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Properties {
    /// 1. Tenants with some members failed keep being served (at least the
    ///    minimum success ratio) rather than going down.
    pub degrade_not_drop: Property,
    /// 2. Tenants with no failed member see no errors and no latency beyond
    ///    the bound.
    pub unaffected_see_nothing: Property,
    /// 3. The gateway really failed over inside the subsets (its failover
    ///    counter rose).
    pub failover_happened: Property,
}

impl Properties {
    /// The properties in order, each with its name as the drills print it.
    pub fn named(&self) -> [(&'static str, &Property); 3] {
        [
            (
                "affected tenants degrade rather than drop",
                &self.degrade_not_drop,
            ),
            (
                "unaffected tenants see nothing",
                &self.unaffected_see_nothing,
            ),
            ("failover really happened", &self.failover_happened),
        ]
    }
}

/// One measured set of tenants beside the model's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetCheck {
    /// Tenants measured in the set.
    pub measured: usize,
    /// Tenants the analyser's model puts in the set.
    pub modeled: u64,
    /// Whether the measured tenants are the modeled ones, tenant by tenant
    /// (and as many as the model counts).
    pub matches: bool,
    /// The first tenants measured in the set that the model puts elsewhere.
    pub unexpected: Vec<String>,
    /// The first tenants the model puts in the set that were measured
    /// elsewhere.
    pub missing: Vec<String>,
}

impl SetCheck {
    /// Compares `measured` with `predicted` (tenant positions) and with
    /// the model's count, naming tenants by `name`.
    pub fn compare(
        measured: &BTreeSet<usize>,
        predicted: &BTreeSet<usize>,
        modeled: u64,
        name: impl Fn(usize) -> String,
    ) -> Self {
        let names = |a: &BTreeSet<usize>, b: &BTreeSet<usize>| -> Vec<String> {
            a.difference(b).take(NAMED).map(|&t| name(t)).collect()
        };
        Self {
            measured: measured.len(),
            modeled,
            matches: measured == predicted && measured.len() as u64 == modeled,
            unexpected: names(measured, predicted),
            missing: names(predicted, measured),
        }
    }

    /// The difference in words, as a violation: `what` names the set
    /// ("measured fully down").
    pub fn violation(&self, what: &str) -> Option<String> {
        if self.matches {
            return None;
        }
        let mut text = format!(
            "{} tenants were {what}, the model predicts {}",
            self.measured, self.modeled
        );
        if !self.unexpected.is_empty() {
            text.push_str(&format!("; not predicted: {}", self.unexpected.join(", ")));
        }
        if !self.missing.is_empty() {
            text.push_str(&format!(
                "; predicted but not seen: {}",
                self.missing.join(", ")
            ));
        }
        Some(text)
    }
}

/// The tenants fully down in words: as the model predicts, or not.
pub fn fully_down_sentence(check: &SetCheck, cause: &str) -> String {
    match (check.matches, check.measured) {
        (true, 0) => "No tenant fully down, as the model predicts.".to_owned(),
        (true, n) => format!("{n} tenants fully down, as the model predicts ({cause})."),
        (false, n) => format!(
            "{n} tenants fully down, but the model predicts {}: unexpected.",
            check.modeled
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[usize]) -> BTreeSet<usize> {
        items.iter().copied().collect()
    }

    #[test]
    fn a_set_matches_only_tenant_by_tenant_and_by_the_models_count() {
        let name = |t: usize| format!("t{t}");
        let same = SetCheck::compare(&set(&[1, 2]), &set(&[1, 2]), 2, name);
        assert!(same.matches && same.violation("x").is_none());
        // As many tenants, but not the same ones.
        let swapped = SetCheck::compare(&set(&[1, 3]), &set(&[1, 2]), 2, name);
        assert!(!swapped.matches);
        let text = swapped.violation("measured fully down").unwrap();
        assert_eq!(
            text,
            "2 tenants were measured fully down, the model predicts 2; not predicted: t3; predicted but not seen: t2"
        );
        // The same tenants, but the model counts differently.
        assert!(!SetCheck::compare(&set(&[1]), &set(&[1]), 2, name).matches);
    }

    #[test]
    fn fully_down_tenants_the_model_predicts_are_called_predicted() {
        let name = |t: usize| format!("t{t}");
        let predicted = SetCheck::compare(&set(&[1, 2]), &set(&[1, 2]), 2, name);
        assert_eq!(
            fully_down_sentence(&predicted, "every member failed"),
            "2 tenants fully down, as the model predicts (every member failed)."
        );
        let more = SetCheck::compare(&set(&[1, 2, 3]), &set(&[1, 2]), 2, name);
        assert!(fully_down_sentence(&more, "").contains("unexpected"));
    }
}
