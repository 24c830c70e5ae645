//! Replicas need no coordination: two gateways started from the same
//! configuration files (each binds its own ports, as the file says port 0)
//! route every tenant to the same subset, because placement is a pure
//! function of (tenant, key, fleet). What they do not share is run-time
//! state: an operator's `fail` on one replica is that replica's alone.

use std::collections::{BTreeMap, BTreeSet};

use gateway::Snapshot;
use gateway::runtime;
use http::StatusCode;
use serde_json::Value;

use crate::admin::{TOKEN, options};
use crate::util::{Fixture, get_with_key, request_to};

/// The subset one gateway's admin API reports for a tenant.
async fn admin_subset(fixture: &Fixture, admin: std::net::SocketAddr, tenant: &str) -> Vec<String> {
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) = request_to(
        &fixture.client,
        admin,
        "GET",
        &format!("/admin/tenants/{tenant}"),
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let view: Value = serde_json::from_slice(&body).unwrap();
    view["subset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// Sends `count` GETs per tenant through the data listener at `addr` and
/// returns, per tenant, the shards the backends saw its requests on.
async fn served_through(
    fixture: &Fixture,
    addr: std::net::SocketAddr,
    count: usize,
) -> BTreeMap<String, BTreeSet<String>> {
    for backend in &fixture.backends {
        backend.clear_seen();
    }
    for (tenant, key) in &fixture.tenants {
        for _ in 0..count {
            let (status, _, _) = get_with_key(&fixture.client, addr, key).await;
            assert_eq!(status, StatusCode::OK, "{tenant} through {addr}");
        }
    }
    let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for backend in &fixture.backends {
        for seen in backend.seen() {
            assert_eq!(seen.header("x-shuffle-shard"), [backend.id()]);
            served
                .entry(seen.header("x-shuffle-tenant")[0].to_owned())
                .or_default()
                .insert(backend.id().to_owned());
        }
    }
    served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_from_one_configuration_route_every_tenant_alike() {
    let fixture = Fixture::start(options()).await;
    // The second replica: the same gateway.toml, tenants file, key file and
    // token file, loaded afresh, sharing nothing with the first.
    let second = runtime::start(Snapshot::load(&fixture.config_path(), None).unwrap())
        .await
        .unwrap();
    let first = &fixture.running;
    assert_ne!(first.addr, second.addr);
    assert_ne!(first.admin_addr, second.admin_addr);

    // Both admin APIs report the same subset for every tenant.
    let mut subsets = BTreeMap::new();
    for (tenant, _) in &fixture.tenants {
        let one = admin_subset(&fixture, first.admin_addr, tenant).await;
        let two = admin_subset(&fixture, second.admin_addr, tenant).await;
        assert_eq!(one, two, "{tenant}");
        assert_eq!(one.len(), 2);
        subsets.insert(
            tenant.clone(),
            one.into_iter().collect::<BTreeSet<String>>(),
        );
    }

    // And the data path agrees: through either replica, a tenant's requests
    // land only on that subset, and together they reach all of it.
    let through_first = served_through(&fixture, first.addr, 20).await;
    let through_second = served_through(&fixture, second.addr, 20).await;
    for (tenant, subset) in &subsets {
        let one = &through_first[tenant];
        let two = &through_second[tenant];
        assert!(
            one.is_subset(subset),
            "{tenant}: first replica used {one:?}, subset {subset:?}"
        );
        assert!(
            two.is_subset(subset),
            "{tenant}: second replica used {two:?}, subset {subset:?}"
        );
        let both: BTreeSet<String> = one.union(two).cloned().collect();
        assert_eq!(&both, subset, "{tenant}");
    }

    // Operator state is per replica: failing a shard on one leaves the
    // other's view (and routing) alone.
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, _) = request_to(
        &fixture.client,
        first.admin_addr,
        "POST",
        "/admin/shards/s0/fail",
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let view = |gateway: &gateway::Gateway| {
        gateway
            .snapshot()
            .find_shard("default", "s0")
            .unwrap()
            .health
            .lock()
            .unwrap()
            .failed
    };
    assert!(view(&first.gateway));
    assert!(!view(&second.gateway));

    second.shutdown().await;
}
