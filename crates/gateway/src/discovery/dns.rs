//! DNS discovery through hickory's resolver: SRV targets or A/AAAA
//! addresses, each lookup bounded, nothing cached.

use super::found::{DiscoveryError, Found};
use crate::config::{DiscoverySettings, DiscoverySource, ZoneFrom};

/// A resolver (stand-in until the hickory client lands).
#[derive(Debug)]
pub struct DnsResolver;

impl DnsResolver {
    /// A resolver asking `settings.resolver`, or the system's.
    pub fn new(_settings: &DiscoverySettings) -> Result<Self, DiscoveryError> {
        Ok(Self)
    }

    /// One look at `source`.
    pub async fn look(
        &self,
        _source: &DiscoverySource,
        _zone_from: ZoneFrom,
    ) -> Result<Vec<Found>, DiscoveryError> {
        Err(DiscoveryError::Unreachable("not built yet".into()))
    }
}
