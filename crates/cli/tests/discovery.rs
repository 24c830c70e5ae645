//! A discovered cell through the real binary's analysers and the drill's
//! load: a shard added in DNS moves exactly the tenants `shuffle-shard
//! migrate` says it does; and a rolling restart of every shard (each in
//! turn stops, leaves DNS, comes back at a new address under the same name,
//! and only then is the next one restarted) costs no tenant an error,
//! since each always has a surviving member, and moves nobody, since every
//! shard returns inside its grace.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backend::Backend;
use drill::credentials::TenantCredential;
use drill::load::{LoadShape, Protocol, drive_until};
use gateway::Snapshot;
use gateway::config::writer::{GatewayToml, tenants, tenants_toml};
use gateway::runtime::{self, Running};
use serde_json::Value;
use testkit::dnsmasq::{self, Dnsmasq, Record};

use common::{run_json, shuffle_shard};

const SERVICE: &str = "_shards._tcp.shards.test";

/// The records that make `backends` the shards of [`SERVICE`], each named
/// by its backend's id.
fn records(backends: &[&Backend]) -> Vec<Record> {
    let shards: Vec<(&str, u16)> = backends.iter().map(|b| (b.id(), b.addr().port())).collect();
    dnsmasq::shards(SERVICE, &shards)
}

/// A gateway in `dir` whose one cell is found under [`SERVICE`] through
/// `dns` (looked at every tenth of a second), serving `tenants`, with
/// `tables` beside.
async fn discovered_gateway(
    dir: &std::path::Path,
    dns: &Dnsmasq,
    tenants: &[(String, String)],
    tables: Vec<(String, String)>,
) -> Running {
    let path = GatewayToml {
        tables,
        extra: format!(
            "[discovery]\nresolver = \"{}\"\nrefresh_seconds = 0.1\ntimeout_ms = 300\n",
            dns.addr()
        ),
        cell_lines: format!("discovery = \"dns+srv://{SERVICE}\"\n"),
        tenants: tenants_toml(tenants),
        ..GatewayToml::default()
    }
    .write(dir)
    .unwrap();
    runtime::start(Snapshot::load(&path, None).unwrap())
        .await
        .unwrap()
}

/// Each tenant's members, by shard id.
fn placed(running: &Running, tenants: &[(String, String)]) -> Vec<BTreeSet<String>> {
    let snapshot = running.gateway.snapshot();
    tenants
        .iter()
        .map(|(tenant, _)| {
            let (cell, subset) = snapshot.route(tenant);
            subset
                .iter()
                .map(|&i| snapshot.config.cells()[cell].shards[i as usize].id.clone())
                .collect()
        })
        .collect()
}

/// Where the shard `id` is reached now, and how it is.
fn shard_state(running: &Running, id: &str) -> Option<(String, &'static str)> {
    let snapshot = running.gateway.snapshot();
    let shard = snapshot.find_shard("default", id)?;
    Some((
        shard.url.to_string(),
        shard.availability(&snapshot.config).name(),
    ))
}

async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_at_new_addresses_costs_no_error_and_moves_nobody() {
    let mut backends = Vec::new();
    for i in 0..6 {
        backends.push(Backend::start(&format!("s{i}")).await.unwrap());
    }
    let Some(mut dns) = Dnsmasq::start(records(&backends.iter().collect::<Vec<_>>())).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tenants = tenants(120);
    let running = discovered_gateway(
        dir.path(),
        &dns,
        &tenants,
        vec![
            (
                "health".into(),
                "interval_ms = 100\ntimeout_ms = 200\nrise = 1\nfall = 2\n".into(),
            ),
            (
                "routing".into(),
                "per_try_timeout_ms = 500\nrequest_timeout_ms = 4000\n".into(),
            ),
        ],
    )
    .await;
    let before = placed(&running, &tenants);

    let stop = Arc::new(AtomicBool::new(false));
    let credentials: Vec<TenantCredential> = tenants
        .iter()
        .map(|(tenant, key)| TenantCredential::new(tenant, key))
        .collect();
    let gateways = vec![format!("http://{}", running.addr)];
    let shape = LoadShape {
        requests_per_tenant: 1,
        concurrency: 8,
        timeout: Duration::from_secs(5),
        protocol: Protocol::Http,
    };
    let stopping = Arc::clone(&stop);
    let load =
        tokio::spawn(async move { drive_until(&gateways, &credentials, shape, stopping).await });

    for i in 0..backends.len() {
        let id = format!("s{i}");
        // The pod stops and leaves DNS …
        let old = std::mem::replace(&mut backends[i], Backend::start(&id).await.unwrap());
        drop(old);
        let listed: Vec<&Backend> = backends.iter().filter(|b| b.id() != id).collect();
        dns.set_records(records(&listed)).await;
        until(&format!("{id} missing"), || {
            shard_state(&running, &id).is_some_and(|(_, health)| health == "missing")
        })
        .await;
        // … and comes back at a new address under the same name.
        dns.set_records(records(&backends.iter().collect::<Vec<_>>()))
            .await;
        let port = backends[i].addr().port().to_string();
        until(&format!("{id} back at :{port}"), || {
            shard_state(&running, &id)
                .is_some_and(|(url, health)| health == "up" && url.contains(&format!(":{port}")))
        })
        .await;
    }
    // Some load on the last one's new address before the end.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let samples = load.await.unwrap();

    assert_eq!(placed(&running, &tenants), before, "nobody moved");
    let total: u64 = samples.iter().map(|s| s.total).sum();
    assert!(total > 500, "the load ran: {total} requests");
    let failed: Vec<(&str, u64)> = tenants
        .iter()
        .zip(&samples)
        .filter(|(_, sample)| sample.errors() > 0)
        .map(|((tenant, _), sample)| (tenant.as_str(), sample.errors()))
        .collect();
    assert!(failed.is_empty(), "tenants with errors: {failed:?}");
    // Every restarted shard took requests at its new address.
    for backend in &backends {
        assert!(
            backend.requests() > 0,
            "{} at its new address",
            backend.id()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_target_moves_exactly_what_migrate_predicts() {
    // Shard ids 0…5, as the analysers number them.
    let mut backends = Vec::new();
    for i in 0..6 {
        backends.push(Backend::start(&i.to_string()).await.unwrap());
    }
    let five: Vec<&Backend> = backends.iter().take(5).collect();
    let Some(mut dns) = Dnsmasq::start(records(&five)).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tenants = tenants(300);
    let running = discovered_gateway(dir.path(), &dns, &tenants, Vec::new()).await;
    let before = placed(&running, &tenants);
    dns.set_records(records(&backends.iter().collect::<Vec<_>>()))
        .await;
    until("the sixth shard placed", || {
        running.gateway.snapshot().config.cells()[0].shards.len() == 6
    })
    .await;
    let after = placed(&running, &tenants);
    let moved: Vec<&str> = tenants
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (old, new))| old != new)
        .map(|((tenant, _), _)| tenant.as_str())
        .collect();
    let gained: usize = before
        .iter()
        .zip(&after)
        .map(|(old, new)| new.difference(old).count())
        .sum();

    let answer: Value = run_json(
        shuffle_shard()
            .current_dir(dir.path())
            .args(["migrate", "--tenants", "300", "--key", "v1=placement.key"])
            .args(["--from", "shards=5 k=2 algorithm=rendezvous key=v1"])
            .args(["--to", "shards=6 k=2 algorithm=rendezvous key=v1"]),
    );
    assert_eq!(answer["changed"], moved.len(), "{answer}");
    assert_eq!(answer["members_moved"], gained, "{answer}");
    for tenant in answer["changed_sample"].as_array().unwrap() {
        assert!(moved.contains(&tenant.as_str().unwrap()), "{tenant} moved");
    }
}
