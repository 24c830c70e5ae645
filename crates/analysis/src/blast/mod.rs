//! Blast radius under failure sets: who is fully down, who is degraded, and
//! how much capacity the degraded lose, for declared sets and exhaustive (or
//! sampled) sweeps.
//!
//! A tenant is *fully down* when its whole subset is inside the failed set
//! and *degraded* when at least one of its members is. Both are answered
//! from [`SubsetTables`](crate::tables::SubsetTables) rather than by looping over tenants: fully down is a
//! sum of exact-subset counts over the subsets of `F`, degraded an
//! inclusion–exclusion over containment counts. A large failure set is
//! answered the same way from its complement, the survivors (a tenant is
//! fully down when its subset avoids every survivor, degraded when its
//! subset is not inside the survivors), and a set for which both are dear
//! by one scan over the distinct subsets. Which of the three ([`Strategy`])
//! is cheapest depends only on the set's size, so a sweep decides once and
//! its cost per set is bounded by the population's distinct subsets, never
//! by C(|F|, k).

mod model;
mod sweep;
mod traffic;
mod worst;

pub use model::{BlastModel, Impact, Strategy};
pub use sweep::{Sweep, SweepFigure};
pub use traffic::TrafficModel;
