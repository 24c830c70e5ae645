//! WebSockets: an HTTP/1.1 upgrade, authenticated and routed like any
//! request, that ends in a tunnel between the client and one shard.
//!
//! The request path ([`crate::route::proxy`]) does the routing: it asks
//! [`requested`] whether a request is a WebSocket upgrade (a `GET` whose
//! `Connection` lists `upgrade` and whose `Upgrade` is `websocket`; only
//! hyper can upgrade a connection, so only its requests are looked at),
//! refuses one with a body, and sends it to one member of the tenant's
//! subset with [`crate::route::attempt::upgrade`], failing over only when a
//! connection could not be made. A shard's 101 comes here ([`open`]): the
//! client gets a 101 of the gateway's own, and the response carries the
//! [`Tunnel`] it opens. The connection takes it ([`Slot`]) and runs it once
//! hyper has written the 101 and handed the connection over, in the
//! connection's own task: the connection keeps its place under
//! `limits.max_connections`, and gateway shutdown ends the tunnel after its
//! grace period as it ends any request still running.
//!
//! While open, a tunnel counts in its shard's in-flight requests and in its
//! tenant's (the attempt's guard and the limits step's move into it, so a
//! tenant's tunnels take places under its `max_in_flight` and the shard's
//! cap until they end, and each place is given back once, when the
//! [`Tunnel`] is dropped, however it ends), and in its cell's
//! `shuffle_websocket_tunnels_open`; it ends when both sides have closed
//! (each half-close passed on), when one fails, or when no byte has moved
//! either way for `limits.tunnel_idle_timeout_ms` ([`splice`]), and when a
//! reload removes its tenant from the tenants file (how an operator
//! revokes a tenant: what its credential opened must not outlive it).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

use crate::limit::TenantInFlight;
use crate::route::response::{InFlight, ResponseBody, full};
use crate::route::splice::{Ended, splice};
use crate::state::{Gateway, ShardRuntime};
use crate::syntax::fields::Fields;
use crate::trust::headers;
use crate::upstream::UpstreamBody;
use crate::upstream::upgrade::Switched;

/// A client's request to upgrade to WebSocket, holding what completes once
/// hyper hands the client's connection over.
#[derive(Debug)]
pub struct Requested {
    client: OnUpgrade,
}

/// Whether `request` asks to upgrade to WebSocket: a `GET` whose
/// `Connection` lists `upgrade` and whose `Upgrade` lists `websocket` (in
/// any case) on a connection hyper can upgrade. Any other upgrade (`h2c`,
/// ...) is not one: its upgrade fields are hop-by-hop and dropped, and the
/// request is served as usual.
///
/// Only hyper marks the requests it could upgrade (the connection loop
/// hands every head with an upgrade to hyper), so an ordinary request costs
/// one look at its empty extensions.
pub fn requested<B>(request: &mut Request<B>, fields: &Fields) -> Option<Requested> {
    request.extensions().get::<OnUpgrade>()?;
    if request.method() != Method::GET || !asks_for_websocket(fields) {
        return None;
    }
    let client = request.extensions_mut().remove::<OnUpgrade>()?;
    Some(Requested { client })
}

/// Whether a request's fields ask to upgrade to WebSocket.
fn asks_for_websocket(fields: &Fields) -> bool {
    let (mut connection, mut upgrade) = (false, false);
    for (name, value) in fields.iter() {
        if name.eq_ignore_ascii_case(b"connection") {
            connection |= lists(value, b"upgrade");
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade |= lists(value, b"websocket");
        }
    }
    connection && upgrade
}

/// Whether a comma-separated field value lists `token` (any case).
fn lists(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|listed| listed.trim_ascii().eq_ignore_ascii_case(token))
}

/// The client's 101 for a shard's 101 (`answer`, to the upgrade the client
/// `requested`), carrying the tunnel between them; `None` when the shard's
/// connection or fields cannot be passed on (a bad gateway).
///
/// The client gets the shard's fields that pass the response rules
/// ([`headers::outbound`]: never `x-shuffle-*`, nothing hop-by-hop), which
/// keeps `Sec-WebSocket-Accept`, `-Protocol` and `-Extensions`, and the
/// gateway's own `Connection: upgrade` and `Upgrade: websocket`. The shard
/// answered the handshake as asked, which counts as a success for outlier
/// detection; `in_flight` (the shard's place, and the tenant's when its
/// in-flight requests are limited) keeps both busy until the tunnel closes,
/// which a reload that removes `tenant` brings about.
pub(crate) fn open(
    answer: Response<UpstreamBody>,
    requested: Requested,
    (in_flight, tenant_in_flight): (InFlight, Option<TenantInFlight>),
    gateway: &Arc<Gateway>,
    (cell, tenant): (&str, &str),
    shard: &ShardRuntime,
) -> Option<Response<ResponseBody>> {
    let (_, body) = answer.into_parts();
    let fields = body.fields();
    let passed =
        headers::outbound(fields).filter(|(name, _)| !name.eq_ignore_ascii_case(b"content-length"));
    let mut client_headers = fields.to_header_map(passed).ok()?;
    let switched = body.into_switched()?;
    Gateway::record_success(shard);
    client_headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    client_headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    // Watched from now on; seen as changed at once, so that a reload since
    // the request was admitted is looked at too.
    let mut reloads = gateway.reloads();
    reloads.mark_changed();
    let tunnel = Tunnel {
        client: requested.client,
        shard: switched,
        idle: gateway.snapshot().config.limits.tunnel_idle_timeout,
        in_flight,
        tenant_in_flight,
        gateway: Arc::clone(gateway),
        cell: cell.to_owned(),
        shard_id: shard.id.clone(),
        tenant: tenant.to_owned(),
        reloads,
    };
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *response.headers_mut() = client_headers;
    response
        .extensions_mut()
        .insert(Opening(Arc::new(Mutex::new(Some(tunnel)))));
    Some(response)
}

/// A tunnel between a client and a shard that both switched to WebSocket,
/// waiting for hyper to hand over the client's connection.
#[derive(Debug)]
pub struct Tunnel {
    client: OnUpgrade,
    shard: Switched,
    /// `limits.tunnel_idle_timeout_ms`, as it was when the tunnel opened.
    idle: Duration,
    /// Keeps the shard busy while the tunnel is open.
    in_flight: InFlight,
    /// Keeps the tenant's place under its `max_in_flight`, when it has one.
    tenant_in_flight: Option<TenantInFlight>,
    gateway: Arc<Gateway>,
    cell: String,
    shard_id: String,
    /// The tenant that opened it.
    tenant: String,
    /// Reloads, to close the tunnel once one removes its tenant.
    reloads: watch::Receiver<u64>,
}

impl Tunnel {
    /// Waits for the client's connection, then carries bytes both ways
    /// until the tunnel ends (the shard's first bytes, read with its 101,
    /// go to the client first); both connections are closed as it returns.
    pub async fn run(self) {
        let Tunnel {
            client,
            shard: Switched { mut stream, early },
            idle,
            in_flight,
            tenant_in_flight,
            gateway,
            cell,
            shard_id,
            tenant,
            reloads,
        } = self;
        // The client hung up before its 101 was written: nothing opened.
        let Ok(client) = client.await else {
            return;
        };
        let websockets = &gateway.metrics.websockets;
        let open = websockets.open(&cell);
        let mut client = TokioIo::new(client);
        let ended = tokio::select! {
            ended = splice(&mut client, &mut stream, &early, idle) => ended,
            () = revoked(&gateway, &tenant, reloads) => Ended::Revoked,
        };
        websockets.closed(&cell, ended.name());
        match &ended {
            Ended::Failed(error) => {
                tracing::debug!(cell = %cell, shard = %shard_id, %error, "websocket tunnel failed");
            }
            _ => {
                tracing::debug!(cell = %cell, shard = %shard_id, ended = ended.name(), "websocket tunnel closed");
            }
        }
        // Closed here, before the counts that say they are open.
        drop((client, stream));
        drop((open, in_flight, tenant_in_flight));
    }
}

/// Completes once a reload has removed `tenant` from the tenants file (its
/// credential names nobody any more); pending for as long as it is there.
async fn revoked(gateway: &Gateway, tenant: &str, mut reloads: watch::Receiver<u64>) {
    // An error: the gateway, which holds the sender, is gone; the tunnel
    // ends with its connection's task.
    while reloads.changed().await.is_ok() {
        if gateway.snapshot().tenants.get(tenant).is_none() {
            return;
        }
    }
    std::future::pending().await
}

/// How a 101 carries its tunnel to the connection (a response's extensions
/// hold only what can be cloned and shared).
#[derive(Clone, Debug)]
struct Opening(Arc<Mutex<Option<Tunnel>>>);

/// Where a client connection keeps the tunnel one of its responses opened,
/// until hyper has written that response and handed the connection over.
#[derive(Clone, Debug, Default)]
pub struct Slot(Arc<Mutex<Option<Tunnel>>>);

impl Slot {
    /// Keeps the tunnel `response` carries, if it opens one.
    pub fn keep(&self, response: &mut Response<ResponseBody>) {
        let Some(Opening(opening)) = response.extensions_mut().remove::<Opening>() else {
            return;
        };
        let tunnel = lock(&opening).take();
        *lock(&self.0) = tunnel;
    }

    /// The tunnel kept, if any.
    pub fn take(&self) -> Option<Tunnel> {
        lock(&self.0).take()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned one holds a
    // tunnel as good as any.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn fields(lines: &[&str]) -> Fields {
        let mut headers = HeaderMap::new();
        for line in lines {
            let (name, value) = line.split_once(": ").unwrap();
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        Fields::from_header_map(&headers)
    }

    #[test]
    fn only_connection_upgrade_with_upgrade_websocket_asks_for_websocket() {
        assert!(asks_for_websocket(&fields(&[
            "connection: Upgrade",
            "upgrade: websocket"
        ])));
        assert!(asks_for_websocket(&fields(&[
            "connection: keep-alive, UPGRADE",
            "upgrade: WebSocket"
        ])));
        assert!(!asks_for_websocket(&fields(&["upgrade: websocket"])));
        assert!(!asks_for_websocket(&fields(&["connection: upgrade"])));
        assert!(!asks_for_websocket(&fields(&[
            "connection: upgrade",
            "upgrade: h2c"
        ])));
        assert!(!asks_for_websocket(&fields(&[
            "connection: upgraded",
            "upgrade: websocket"
        ])));
    }

    #[test]
    fn requests_hyper_cannot_upgrade_are_never_upgrades() {
        // What the connection loop serves: no `OnUpgrade` in sight.
        let mut request = Request::new(());
        let asking = fields(&["connection: upgrade", "upgrade: websocket"]);
        assert!(requested(&mut request, &asking).is_none());
    }
}
