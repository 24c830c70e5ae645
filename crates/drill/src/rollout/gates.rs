//! The rollout's gates, judged from what a wave's load and polls saw: a
//! pure function of the observations, so each rule is tested without a
//! gateway.
//!
//! While the wave is drained and deployed, only the tenants whose whole
//! subset is in the wave (the *fully exposed*, what `plan-waves` counts)
//! may see errors: anyone else has a member outside the wave to fail over
//! to. During the bake the new build serves, and it must hurt nobody
//! beyond the limits given, hurt no tenant outside the wave at all, and
//! keep its own shards clean: a shard of the wave that is ejected,
//! unhealthy or failing requests fails the gate even when failover hides
//! it from every tenant, because the next wave would take the survivors'
//! place and nothing would hide it then.

use std::collections::BTreeSet;

use serde::Serialize;

use super::waves::Wave;

/// A gate's name, as the report and the exit message say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Gate {
    /// Before the wave: every shard up on every replica, the baseline
    /// load without an error.
    Preconditions,
    /// The wave's requests in flight reached zero once it was drained.
    Drain,
    /// The deploy command exited 0 within its time.
    Deploy,
    /// The wave's shards passed their health checks on every replica
    /// once restored.
    Ready,
    /// While the wave was out, only its fully exposed tenants saw errors.
    Exposure,
    /// During the bake, no shard of the wave was ejected, unhealthy, or
    /// failed attempts.
    WaveShards,
    /// During the bake, no tenant without a member in the wave saw an
    /// error.
    OutsideWave,
    /// During the bake, no more tenants fully down than `--max-fully-down`.
    FullyDown,
    /// During the bake, no more tenants degraded than `--max-degraded`.
    Degraded,
}

impl Gate {
    /// The gate's name.
    pub fn name(self) -> &'static str {
        match self {
            Gate::Preconditions => "preconditions",
            Gate::Drain => "drain",
            Gate::Deploy => "deploy",
            Gate::Ready => "ready",
            Gate::Exposure => "exposure",
            Gate::WaveShards => "wave-shards",
            Gate::OutsideWave => "outside-wave",
            Gate::FullyDown => "fully-down",
            Gate::Degraded => "degraded",
        }
    }
}

/// A gate that did not hold, and why, in words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failed {
    /// The gate.
    pub gate: Gate,
    /// What was seen, and what to look at.
    pub why: String,
}

/// One tenant's load in a phase of the wave.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantLoad {
    /// The tenant.
    pub tenant: String,
    /// Its subset, `cell/id` each.
    pub subset: Vec<String>,
    /// Requests sent.
    pub requests: u64,
    /// Failed ones.
    pub errors: u64,
    /// How the wave relates to it: `fully-exposed` (every member in the
    /// wave), `touched` (some), `outside` (none).
    pub exposure: Exposure,
}

/// Where a tenant stands against a wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exposure {
    /// Every member in the wave.
    FullyExposed,
    /// Some member in the wave.
    Touched,
    /// No member in the wave.
    Outside,
}

impl TenantLoad {
    /// Fully down in the phase: half its requests or more failed.
    pub fn fully_down(&self) -> bool {
        self.requests > 0 && self.errors * 2 >= self.requests
    }
}

/// What the bake saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Bake {
    /// The most tenants any replica's live blast radius had degraded (a
    /// member out, not all) at one poll (over every cell).
    pub most_degraded: u64,
    /// The most it had fully down at one poll.
    pub most_fully_down: u64,
    /// Tenants some poll saw fully down.
    pub fully_down_seen: BTreeSet<String>,
    /// What was wrong with the wave's shards, one line each (`cell/id
    /// ejected on …`, `cell/id: 12 failed attempts`).
    pub shard_trouble: Vec<String>,
}

/// Limits of the bake's gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Tenants that may be degraded during the bake.
    pub max_degraded: u64,
    /// Tenants that may be fully down during the bake.
    pub max_fully_down: u64,
}

/// The exposure gate: while the wave was out, the tenants that saw errors
/// and were not fully exposed.
pub fn exposure(loads: &[TenantLoad]) -> Option<Failed> {
    let hurt: Vec<&TenantLoad> = loads
        .iter()
        .filter(|t| t.errors > 0 && t.exposure != Exposure::FullyExposed)
        .collect();
    (!hurt.is_empty()).then(|| Failed {
        gate: Gate::Exposure,
        why: format!(
            "while the wave was out, {} tenants with a member outside it saw errors ({}): they should have been failed over to that member; check the gateway's failover (routing) and its retry budget",
            hurt.len(),
            first(&hurt)
        ),
    })
}

/// The bake's gates, in the order they are reported.
pub fn bake(loads: &[TenantLoad], bake: &Bake, limits: Limits) -> Vec<Failed> {
    let mut failed = Vec::new();
    if !bake.shard_trouble.is_empty() {
        failed.push(Failed {
            gate: Gate::WaveShards,
            why: format!(
                "the wave's own shards misbehaved under the new build: {}; failover may hide it from tenants, but the next wave would take away the members that hid it",
                bake.shard_trouble.join("; ")
            ),
        });
    }
    let outside: Vec<&TenantLoad> = loads
        .iter()
        .filter(|t| t.errors > 0 && t.exposure == Exposure::Outside)
        .collect();
    if !outside.is_empty() {
        failed.push(Failed {
            gate: Gate::OutsideWave,
            why: format!(
                "{} tenants with no member in the wave saw errors during the bake ({}): the wave hurt tenants it does not serve",
                outside.len(),
                first(&outside)
            ),
        });
    }
    let measured_down: BTreeSet<&str> = loads
        .iter()
        .filter(|t| t.fully_down())
        .map(|t| t.tenant.as_str())
        .collect();
    let fully_down = (measured_down.len() as u64)
        .max(bake.most_fully_down)
        .max(bake.fully_down_seen.len() as u64);
    if fully_down > limits.max_fully_down {
        failed.push(Failed {
            gate: Gate::FullyDown,
            why: format!(
                "{fully_down} tenants were fully down during the bake (at most {} allowed by --max-fully-down)",
                limits.max_fully_down
            ),
        });
    }
    let measured_degraded = loads
        .iter()
        .filter(|t| t.errors > 0 && !t.fully_down())
        .count() as u64;
    let degraded = measured_degraded.max(bake.most_degraded);
    if degraded > limits.max_degraded {
        failed.push(Failed {
            gate: Gate::Degraded,
            why: format!(
                "{degraded} tenants were degraded during the bake ({measured_degraded} saw errors, the live blast radius had at most {} with a member out; at most {} allowed by --max-degraded)",
                bake.most_degraded, limits.max_degraded
            ),
        });
    }
    failed
}

/// The first few tenants of `loads`, with their errors.
fn first(loads: &[&TenantLoad]) -> String {
    let mut named: Vec<String> = loads
        .iter()
        .take(5)
        .map(|t| {
            format!(
                "{} on {}: {} of {} failed",
                t.tenant,
                t.subset.join(", "),
                t.errors,
                t.requests
            )
        })
        .collect();
    if loads.len() > 5 {
        named.push(format!("and {} more", loads.len() - 5));
    }
    named.join("; ")
}

/// Where a tenant of `cell` with `subset` stands against `wave`.
pub fn exposure_of(wave: &Wave, cell: &str, subset: &[String]) -> Exposure {
    let inside = subset.iter().filter(|id| wave.has(cell, id)).count();
    match inside {
        0 => Exposure::Outside,
        n if n == subset.len() => Exposure::FullyExposed,
        _ => Exposure::Touched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(tenant: &str, exposure: Exposure, requests: u64, errors: u64) -> TenantLoad {
        TenantLoad {
            tenant: tenant.into(),
            subset: vec!["c/s0".into(), "c/s1".into()],
            requests,
            errors,
            exposure,
        }
    }

    const NONE: Limits = Limits {
        max_degraded: 0,
        max_fully_down: 0,
    };

    #[test]
    fn a_clean_bake_passes_every_gate() {
        let loads = [
            load("a", Exposure::FullyExposed, 10, 0),
            load("b", Exposure::Touched, 10, 0),
            load("c", Exposure::Outside, 10, 0),
        ];
        assert_eq!(bake(&loads, &Bake::default(), NONE), []);
        assert_eq!(exposure(&loads), None);
    }

    #[test]
    fn only_fully_exposed_tenants_may_hurt_while_the_wave_is_out() {
        let mut loads = vec![load("a", Exposure::FullyExposed, 10, 10)];
        assert_eq!(exposure(&loads), None);
        loads.push(load("b", Exposure::Touched, 10, 1));
        let failed = exposure(&loads).unwrap();
        assert_eq!(failed.gate, Gate::Exposure);
        assert!(
            failed.why.contains("1 tenants") && failed.why.contains("b on c/s0, c/s1: 1 of 10"),
            "{}",
            failed.why
        );
    }

    #[test]
    fn a_shard_of_the_wave_in_trouble_fails_even_when_nobody_hurts() {
        let trouble = Bake {
            shard_trouble: vec!["c/s0: 12 failed attempts".into()],
            ..Bake::default()
        };
        let failed = bake(&[load("a", Exposure::Touched, 10, 0)], &trouble, NONE);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].gate, Gate::WaveShards);
        assert!(failed[0].why.contains("12 failed attempts"));
    }

    #[test]
    fn errors_outside_the_wave_fail_whatever_the_limits() {
        let generous = Limits {
            max_degraded: 100,
            max_fully_down: 100,
        };
        let failed = bake(
            &[load("c", Exposure::Outside, 10, 1)],
            &Bake::default(),
            generous,
        );
        let gates: Vec<Gate> = failed.iter().map(|f| f.gate).collect();
        assert_eq!(gates, [Gate::OutsideWave]);
    }

    #[test]
    fn the_limits_count_measured_and_live_tenants() {
        let loads = [
            load("a", Exposure::FullyExposed, 10, 6),
            load("b", Exposure::Touched, 10, 1),
        ];
        let gates = |bake_seen: &Bake, limits: Limits| -> Vec<Gate> {
            bake(&loads, bake_seen, limits)
                .iter()
                .map(|f| f.gate)
                .collect()
        };
        assert_eq!(
            gates(&Bake::default(), NONE),
            [Gate::FullyDown, Gate::Degraded]
        );
        let one_each = Limits {
            max_degraded: 1,
            max_fully_down: 1,
        };
        assert_eq!(gates(&Bake::default(), one_each), []);
        // The live blast radius saw more than the load did.
        let live = Bake {
            most_degraded: 3,
            most_fully_down: 2,
            ..Bake::default()
        };
        assert_eq!(gates(&live, one_each), [Gate::FullyDown, Gate::Degraded]);
    }
}
