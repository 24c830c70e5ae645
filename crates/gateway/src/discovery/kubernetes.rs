//! Kubernetes discovery: a service's EndpointSlices listed and watched
//! through kube's client and watcher.

use super::found::{DiscoveryError, Found};
use crate::config::{DiscoverySettings, DiscoverySource};

/// A client for the API server (stand-in).
pub async fn client(_settings: &DiscoverySettings) -> Result<kube::Client, DiscoveryError> {
    Err(DiscoveryError::Unreachable("not built yet".into()))
}

/// One list of the service's endpoints (stand-in).
pub async fn list_once(
    _client: &kube::Client,
    _source: &DiscoverySource,
    _settings: &DiscoverySettings,
) -> Result<Vec<Found>, DiscoveryError> {
    Err(DiscoveryError::Unreachable("not built yet".into()))
}

/// Watches the service's endpoints, reporting every set (stand-in).
pub async fn watch(
    _client: kube::Client,
    _source: DiscoverySource,
    _settings: DiscoverySettings,
    _report: tokio::sync::mpsc::Sender<Result<Vec<Found>, DiscoveryError>>,
) {
}
