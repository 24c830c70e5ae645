//! What a rollout reports: each wave's steps, load and failed gates, and
//! where the rollout stopped.

use serde::Serialize;

use super::gates::{Bake, Exposure, Failed, TenantLoad, exposure_of};
use super::waves::Wave;
use crate::session::Session;

/// What a deploy of one wave came to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Deployed {
    /// It succeeded (the command exited 0 within its time).
    pub ok: bool,
    /// What it said or why it failed (the exit status and the last lines
    /// of its output).
    pub detail: String,
}

/// What became of one wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaveStatus {
    /// Before `resume_from`: deployed by an earlier run.
    Skipped,
    /// Every gate held; its shards serve the new build.
    Done,
    /// A gate failed; the rollout stopped here.
    Failed,
    /// After the wave that failed: untouched.
    NotStarted,
}

/// Load in one phase of a wave.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseLoad {
    /// Requests sent.
    pub requests: u64,
    /// Failed ones.
    pub errors: u64,
    /// The tenants that saw errors.
    pub hurt: Vec<TenantLoad>,
}

/// The bake of one wave.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BakeReport {
    /// How long it baked.
    pub seconds: f64,
    /// Its load.
    pub load: PhaseLoad,
    /// What the polls saw.
    pub observed: Bake,
}

/// One wave, as the rollout saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaveReport {
    /// The wave's name.
    pub wave: String,
    /// Its shards, `cell/id`.
    pub shards: Vec<String>,
    /// What became of it.
    pub status: WaveStatus,
    /// Tenants (of those driven) whose whole subset is in the wave: fully
    /// down while it is drained, as `plan-waves` counts them.
    pub fully_exposed: Vec<String>,
    /// Tenants with some member in the wave.
    pub touched: u64,
    /// Requests of the baseline load (`None`: not reached).
    pub baseline_requests: Option<u64>,
    /// Seconds until every replica had the wave drained.
    pub drained_after_s: Option<f64>,
    /// Seconds until its requests in flight reached zero on every replica.
    pub idle_after_s: Option<f64>,
    /// The deploy, and how long it took.
    pub deploy: Option<Deployed>,
    /// Seconds the deploy took.
    pub deploy_seconds: Option<f64>,
    /// Seconds from restoring the wave until its health checks passed on
    /// every replica.
    pub ready_after_s: Option<f64>,
    /// Load while the wave was out (drained, idle, deployed).
    pub while_out: Option<PhaseLoad>,
    /// The bake, from the moment its checks passed; its load also counts
    /// the errors of every tenant but the fully exposed while the wave
    /// came back (the new build took requests then already). Present
    /// when the wave came back, ready or not.
    pub bake: Option<BakeReport>,
    /// The gates that failed (empty when it passed).
    pub failed: Vec<Failed>,
    /// Whether the rollout drained it (a wave stopped by its
    /// preconditions was not).
    pub drained_by_rollout: bool,
    /// How its shards were left: `in rotation`, `drained`, `restored`,
    /// `untouched` (or a replica that did not take the mark, in words).
    pub left: Option<String>,
}

impl WaveReport {
    pub(super) fn new(session: &Session, wave: &Wave, status: WaveStatus) -> Self {
        let mut fully_exposed = Vec::new();
        let mut touched = 0;
        for (t, (cell, subset)) in session.subsets().iter().enumerate() {
            match exposure_of(wave, cell, subset) {
                Exposure::FullyExposed => {
                    fully_exposed.push(session.credential(t).tenant.clone());
                    touched += 1;
                }
                Exposure::Touched => touched += 1,
                Exposure::Outside => {}
            }
        }
        Self {
            wave: wave.name.clone(),
            shards: wave.names(),
            status,
            fully_exposed,
            touched,
            baseline_requests: None,
            drained_after_s: None,
            idle_after_s: None,
            deploy: None,
            deploy_seconds: None,
            ready_after_s: None,
            while_out: None,
            bake: None,
            failed: Vec::new(),
            drained_by_rollout: false,
            left: None,
        }
    }
}

/// Where the rollout stopped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stopped {
    /// The wave.
    pub wave: String,
    /// Its failed gates, by name.
    pub gates: Vec<&'static str>,
    /// The tenants the wave hurt beyond what placement predicts for any
    /// deploy of it: errors during the bake (or while coming back), fully
    /// down in the live blast radius, or errors while it was out without
    /// being fully exposed.
    pub tenants_hurt: Vec<String>,
    /// How its shards were left.
    pub left: String,
    /// How to continue once the build is fixed.
    pub resume: String,
}

/// Everything a rollout did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RolloutReport {
    /// Tenants driven.
    pub tenants: usize,
    /// Gateway replicas watched.
    pub replicas: usize,
    /// Every wave, in order.
    pub waves: Vec<WaveReport>,
    /// Where it stopped, if a gate failed.
    pub stopped: Option<Stopped>,
    /// Every wave from the first run to the last was done.
    pub passed: bool,
}
