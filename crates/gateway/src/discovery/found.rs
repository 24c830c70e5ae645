//! What a discovery source reports: the shards it found, each with the
//! address it is reached on, and why a look found nothing usable.

use std::net::SocketAddr;

use thiserror::Error;

/// The most shards one source may report: beyond it an answer is a
/// misconfiguration or an attack, not a fleet (placement's own limit is
/// far above any real cell).
pub const MAX_FOUND: usize = 4096;

/// One shard a source found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its id: the SRV target's first label, `address:port` for A/AAAA
    /// records, the pod's name for Kubernetes.
    pub id: String,
    /// Where it is reached.
    pub address: SocketAddr,
    /// Its failure domain, when the source says.
    pub zone: Option<String>,
    /// Whether it may take requests.
    pub condition: Condition,
}

/// Whether a found shard may take requests (Kubernetes' endpoint
/// conditions; DNS reports only [`Condition::Ready`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Ready: in rotation.
    Ready,
    /// Listed but not ready (starting, or failing its readiness probe):
    /// treated as missing.
    NotReady,
    /// Being shut down: treated as missing at once.
    Terminating,
}

impl Condition {
    /// A short lowercase name for the admin API.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::NotReady => "not ready",
            Self::Terminating => "terminating",
        }
    }
}

/// Why a look at a source gave no membership. Every one keeps the last
/// good membership in place.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// No answer within `discovery.timeout_ms` (or the watch stalled).
    #[error("no answer within {ms} ms from {server}")]
    Timeout {
        /// The bound waited for.
        ms: u64,
        /// Who was asked.
        server: String,
    },
    /// The server answered with an error code (SERVFAIL, REFUSED, …; or an
    /// HTTP status from the Kubernetes API).
    #[error("{server} answered {code}")]
    Server {
        /// Who answered.
        server: String,
        /// What it answered.
        code: String,
    },
    /// The name does not exist, or holds no records of the kind asked.
    #[error("{name} has no {kind} records")]
    NoRecords {
        /// The name asked.
        name: String,
        /// SRV, A/AAAA, EndpointSlice.
        kind: &'static str,
    },
    /// The answer could not be read, or holds what a fleet cannot be
    /// (more than [`MAX_FOUND`] shards, an id twice, a target without an
    /// address).
    #[error("unusable answer from {server}: {problem}")]
    Malformed {
        /// Who answered.
        server: String,
        /// What was wrong with it.
        problem: String,
    },
    /// The source cannot be reached at all (no kubeconfig, a socket
    /// error).
    #[error("{0}")]
    Unreachable(String),
}
