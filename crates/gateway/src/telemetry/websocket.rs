//! WebSocket upgrades and the tunnels they open, counted per cell: the
//! `shuffle_websocket_*` families, registered with the rest by
//! [`super::metrics::Metrics::new`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::registered::Registered;

use super::labels::{CellLabels, request_outcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct UpgradeLabels {
    pub(crate) cell: String,
    /// `switched`: a shard answered 101 and the tunnel was opened;
    /// `declined`: a shard answered with another 2xx or 3xx, passed back;
    /// otherwise the outcome of `shuffle_requests_total`'s that the client
    /// got (`unauthorized`, `client_error`, `bad_gateway`, ...).
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TunnelCloseLabels {
    pub(crate) cell: String,
    /// `closed`: both sides ended (each half-close passed on); `idle`: no
    /// byte either way for `limits.tunnel_idle_timeout_ms`; `error`: a
    /// side failed (a reset, or a client that accepted nothing for
    /// `limits.client_write_timeout_ms`); `revoked`: a reload removed the
    /// tenant that opened it.
    pub(crate) reason: &'static str,
}

/// WebSocket upgrades and the tunnels they open, per cell. Gateway
/// shutdown ends tunnels still open after its grace period without
/// counting them as closed.
#[derive(Debug)]
pub(crate) struct WebSocketMetrics {
    upgrades: Family<UpgradeLabels, Counter>,
    open: Family<CellLabels, Gauge>,
    closed: Family<TunnelCloseLabels, Counter>,
}

/// One tunnel counted as open in its cell until dropped.
#[derive(Debug)]
pub(crate) struct OpenTunnel(Gauge);

impl Drop for OpenTunnel {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl WebSocketMetrics {
    pub(super) fn register(registry: &mut Registered) -> Self {
        let upgrades = Family::<UpgradeLabels, Counter>::default();
        registry.add_metric(
            "websocket_upgrades",
            "WebSocket upgrade requests by cell and outcome: switched (tunnel opened), declined (the shard answered 2xx/3xx), else the request outcome the client got",
            upgrades.clone(),
        );
        let open = Family::<CellLabels, Gauge>::default();
        registry.add_metric(
            "websocket_tunnels_open",
            "WebSocket tunnels open now",
            open.clone(),
        );
        let closed = Family::<TunnelCloseLabels, Counter>::default();
        registry.add_metric(
            "websocket_tunnels_closed",
            "WebSocket tunnels closed by cell and reason: closed (both sides ended), idle (limits.tunnel_idle_timeout_ms), error (a side failed), revoked (a reload removed its tenant)",
            closed.clone(),
        );
        Self {
            upgrades,
            open,
            closed,
        }
    }

    /// Counts an upgrade request in `cell` ("" before a tenant was known)
    /// answered with `status`.
    pub(crate) fn upgrade(&self, cell: &str, status: http::StatusCode) {
        let outcome = if status == http::StatusCode::SWITCHING_PROTOCOLS {
            "switched"
        } else if status.is_success() || status.is_redirection() {
            "declined"
        } else {
            request_outcome(status)
        };
        self.upgrades
            .get_or_create(&UpgradeLabels {
                cell: cell.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts a tunnel open in `cell` until the guard is dropped.
    pub(crate) fn open(&self, cell: &str) -> OpenTunnel {
        let gauge = self
            .open
            .get_or_create(&CellLabels {
                cell: cell.to_owned(),
            })
            .clone();
        gauge.inc();
        OpenTunnel(gauge)
    }

    /// Counts a tunnel in `cell` that ended for `reason`.
    pub(crate) fn closed(&self, cell: &str, reason: &'static str) {
        self.closed
            .get_or_create(&TunnelCloseLabels {
                cell: cell.to_owned(),
                reason,
            })
            .inc();
    }
}
