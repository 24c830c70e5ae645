//! Shards that come and go, below the snapshot: the clients that find a
//! discovered cell's shards (DNS SRV or A/AAAA records through
//! [`dns`], a service's EndpointSlices through [`kubernetes`]), each
//! cell's [`membership`], and the [`guard`] every look passes before it
//! changes one. Keeping them current is `discovery_sync`'s job.

pub mod dns;
pub mod first_look;
pub mod found;
pub mod guard;
pub mod kubernetes;
pub mod membership;

pub use found::{Condition, DiscoveryError, Found, MAX_FOUND};
pub use membership::{LookStatus, Member, Membership, Memberships, Missing};

use crate::config::{DiscoverySettings, DiscoverySource};

/// One look at `source`: the shards it lists now.
pub async fn look_once(
    source: &DiscoverySource,
    settings: &DiscoverySettings,
) -> Result<Vec<Found>, DiscoveryError> {
    match source {
        DiscoverySource::Kubernetes { .. } => {
            let client = kubernetes::client(settings).await?;
            kubernetes::list_once(&client, source, settings).await
        }
        _ => {
            dns::DnsResolver::new(settings)?
                .look(source, settings.zone_from)
                .await
        }
    }
}
