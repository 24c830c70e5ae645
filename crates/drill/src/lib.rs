//! Drills: fail shards under synthetic load and prove that affected tenants
//! degrade rather than drop, unaffected tenants feel nothing, and the
//! gateway really failed over, tenant by tenant against the analyser's
//! prediction for the same failure set. The poison drill ([`poison`]) has
//! one tenant crash the shards that serve it and compares what went down
//! with the analyser's poison model. The rolling-restart drill
//! ([`rolling`]) restarts every shard in turn under load and passes when
//! no tenant with two or more members saw an error. A rollout
//! ([`rollout`]) deploys a new build one wave of shards at a time and stops
//! at the first wave whose gates fail.
//!
//! The crate talks to a running gateway over HTTP only (its data listener
//! and its admin API), and to test shards' control APIs when it breaks them
//! itself, so the same drill runs against a gateway in this process (the
//! demo, the tests) or in production.

pub mod admin;
mod api;
pub mod control;
pub mod credentials;
mod error;
pub mod load;
pub mod poison;
pub mod preconditions;
pub mod properties;
pub mod rolling;
pub mod rollout;
pub mod run;
pub mod session;

pub use admin::AdminClient;
pub use control::ShardControl;
pub use credentials::TenantCredential;
pub use error::DrillError;
pub use load::LoadShape;
pub use properties::{Properties, Property, SetCheck, Status};
pub use session::{Phase, Session, ShardRef, Thresholds, Verdict};
