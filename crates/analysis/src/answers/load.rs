//! Where a weighted population's load lands, its tenants named, for the
//! `blast` answer: the analyser's own [`LoadReport`], so the two cannot
//! drift apart.

use crate::load::{Contributor, LoadReport};

/// Where a weighted population's load lands, the dominant tenants named:
/// what `blast --json` prints as `load`.
pub type LoadJson = LoadReport<String>;

/// A tenant carrying part of the hottest shard's load, by id.
pub type DominantJson = Contributor<String>;
