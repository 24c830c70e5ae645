//! The registry's tests: entries checked against one configuration, files
//! read, duplicates refused where they are, and a registry changed one
//! tenant at a time always equal to one built from scratch.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;

use super::entry::{TenantEntry, ValidEntry};
use super::registry::Tenants;
use super::{files, load};
use crate::config::{GatewayConfig, TenantLimits};

/// A configuration of two cells (`a`: s0–s3, `b`: t0–t1) whose tenants
/// come from `tenants.jsonl` in `dir`.
fn config(dir: &Path) -> GatewayConfig {
    std::fs::write(dir.join("placement.key"), [7_u8; 32]).unwrap();
    let path = dir.join("gateway.toml");
    let text = "listen = \"127.0.0.1:0\"\ntenants_file = \"tenants.jsonl\"\n\
         [placement]\nalgorithm = \"rendezvous\"\nk = 2\nkey_file = \"placement.key\"\nkey_version = \"v1\"\n\
         [[cells]]\nname = \"a\"\nshards = [{ id = \"s0\", url = \"http://127.0.0.1:9\" }, { id = \"s1\", url = \"http://127.0.0.1:9\" }, \
         { id = \"s2\", url = \"http://127.0.0.1:9\" }, { id = \"s3\", url = \"http://127.0.0.1:9\" }]\n\
         [[cells]]\nname = \"b\"\nshards = [{ id = \"t0\", url = \"http://127.0.0.1:9\" }, { id = \"t1\", url = \"http://127.0.0.1:9\" }]\n";
    std::fs::write(&path, text).unwrap();
    GatewayConfig::load(&path).unwrap()
}

fn digest_hex(n: u8) -> String {
    text::hex(&[n; 32])
}

/// Everything a registry says about each of its tenants, by id.
fn contents(tenants: &Tenants) -> BTreeMap<String, ValidEntry> {
    tenants
        .iter()
        .map(|t| (t.id().to_owned(), t.to_valid()))
        .collect()
}

#[test]
fn a_tenants_own_limits_override_and_zero_lifts_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let parse = |text: &str| load::from_toml(Path::new("tenants.toml"), text, &config);
    let tenants = parse(
        "[[tenants]]\nid = \"whale\"\nrequests_per_second = 2000\nburst = 4000\nmax_in_flight = 0\n\
         [[tenants]]\nid = \"small\"\n",
    )
    .unwrap();
    assert_eq!(
        *tenants.get("whale").unwrap().limits(),
        TenantLimits {
            max_in_flight: Some(0),
            per_request: Some(Duration::from_micros(500)),
            burst: Some(4000),
        }
    );
    assert_eq!(
        *tenants.get("small").unwrap().limits(),
        TenantLimits::default()
    );
    for (line, key) in [
        ("requests_per_second = -1", "tenants[0].requests_per_second"),
        ("burst = 0", "tenants[0].burst"),
        ("max_in_flight = 2000000", "tenants[0].max_in_flight"),
    ] {
        let error = parse(&format!("[[tenants]]\nid = \"a\"\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(error.contains(key), "{line}: {error}");
    }
}

#[test]
fn json_lines_load_and_every_problem_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let path = dir.path().join("tenants.jsonl");
    let load = |text: &str| {
        std::fs::write(&path, text).unwrap();
        load::from_file(&path, &config).map_err(|e| e.to_string())
    };
    let key = digest_hex(1);
    let tenants = load(&format!(
        "{{\"id\":\"acme\",\"api_key_sha256\":\"{key}\"}}\n\n{{\"id\":\"vip\",\"cell\":\"b\",\"shards\":[\"t1\"]}}\n{{\"id\":\"big\",\"k\":3}}"
    ))
    .unwrap();
    assert_eq!(tenants.len(), 3);
    assert_eq!(tenants.by_key_digest(&[1; 32]).unwrap().id(), "acme");
    let vip = tenants.get("vip").unwrap();
    assert_eq!((vip.cell(), vip.shards()), (Some(1), Some(&[1_u32][..])));
    assert_eq!(tenants.get("big").unwrap().k(), Some(3));
    for (text, wanted) in [
        (
            "{\"id\":\"a\"}\n{\"id\":\"b\",\"k\":9}\n",
            "line 2: k: k = 9 is out of range",
        ),
        (
            "{\"id\":\"a\"}\n{\"id\":\"a\"}\n",
            "line 2: id: tenant \"a\" is listed twice",
        ),
        (
            &format!(
                "{{\"id\":\"a\",\"api_key_sha256\":\"{key}\"}}\n{{\"id\":\"b\"}}\n{{\"id\":\"c\",\"api_key_sha256\":\"{}\"}}\n",
                key.to_uppercase()
            ),
            "line 3: api_key_sha256: another tenant (\"a\") has the same API key",
        ),
        (
            "{\"id\":\"a\"}\n{\"id\":\"b\",\"colour\":1}\n",
            "line 2: unknown field `colour`",
        ),
        ("{\"id\":\"a\"}\nnot json\n", "line 2: expected"),
        (
            "{\"id\":\"a b\"}\n",
            "line 1: id: tenant id \"a b\" must be visible ASCII",
        ),
        (
            "{\"id\":\"a\",\"cell\":\"z\"}\n",
            "line 1: cell: there is no cell named \"z\"",
        ),
    ] {
        let error = load(text).unwrap_err();
        assert!(error.contains(wanted), "{text:?}: {error}");
    }
}

#[test]
fn toml_and_json_lines_convert_both_ways_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let entries = vec![
        TenantEntry {
            id: "acme".into(),
            api_key_sha256: Some(digest_hex(3)),
            ..TenantEntry::default()
        },
        TenantEntry {
            id: "whale".into(),
            cell: Some("b".into()),
            k: Some(2),
            requests_per_second: Some(12.5),
            burst: Some(30),
            max_in_flight: Some(0),
            ..TenantEntry::default()
        },
    ];
    let jsonl = dir.path().join("t.jsonl");
    let toml = dir.path().join("t.toml");
    files::write_entries(&jsonl, entries.clone()).unwrap();
    let mut read = Vec::new();
    files::read_entries(&jsonl, |e| {
        read.push(e);
        Ok(())
    })
    .unwrap();
    files::write_entries(&toml, read).unwrap();
    let mut back = Vec::new();
    files::read_entries(&toml, |e| {
        back.push(e);
        Ok(())
    })
    .unwrap();
    assert_eq!(back, entries);
}

/// One change to a registry: put an entry (id, key, cell, k) or delete an id.
#[derive(Debug, Clone)]
enum Change {
    Put(u8, Option<u8>, bool, Option<u32>),
    Delete(u8),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0..40_u8, proptest::option::of(0..30_u8), any::<bool>(), proptest::option::of(1..=2_u32))
            .prop_map(|(id, key, in_b, k)| Change::Put(id, key, in_b, k)),
        1 => (0..40_u8).prop_map(Change::Delete),
    ]
}

fn entry(id: u8, key: Option<u8>, in_b: bool, k: Option<u32>) -> TenantEntry {
    TenantEntry {
        id: format!("tenant-{id}"),
        api_key_sha256: key.map(digest_hex),
        cell: in_b.then(|| "b".into()),
        k,
        ..TenantEntry::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Starting from a loaded population (its buckets borrowing the loaded
    /// arrays), any sequence of puts and deletes leaves a registry equal
    /// to one built from scratch from the final table: the same tenants,
    /// each found by id and by key; a put whose key another tenant holds
    /// is refused and changes nothing, in both.
    #[test]
    fn a_registry_changed_one_tenant_at_a_time_equals_one_built_from_scratch(
        initial in proptest::collection::vec((0..40_u8, 0..30_u8), 0..30),
        changes in proptest::collection::vec(change(), 0..80),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        // The table: what a store would hold (ids unique, keys unique).
        let mut table: BTreeMap<String, TenantEntry> = BTreeMap::new();
        for (id, key) in initial {
            let e = entry(id, Some(key), false, None);
            if !table.values().any(|t| t.api_key_sha256 == e.api_key_sha256) {
                table.insert(e.id.clone(), e);
            }
        }
        let mut tenants = load::from_entries(table.values().cloned(), table.len(), &config, Path::new("t")).unwrap();
        for change in changes {
            match change {
                Change::Put(id, key, in_b, k) => {
                    let e = entry(id, key, in_b, k);
                    let taken = table.values().any(|t| t.id != e.id && e.api_key_sha256.is_some() && t.api_key_sha256 == e.api_key_sha256);
                    let result = tenants.upsert(&e.validate(&config).unwrap());
                    prop_assert_eq!(result.is_err(), taken);
                    if !taken {
                        table.insert(e.id.clone(), e);
                    }
                }
                Change::Delete(id) => {
                    let id = format!("tenant-{id}");
                    prop_assert_eq!(tenants.remove(&id), table.remove(&id).is_some());
                }
            }
        }
        let scratch = load::from_entries(table.values().cloned(), table.len(), &config, Path::new("t")).unwrap();
        prop_assert_eq!(tenants.len(), table.len());
        prop_assert_eq!(contents(&tenants), contents(&scratch));
        prop_assert_eq!(tenants.api_keys(), scratch.api_keys());
        for key in 0..30_u8 {
            let by = |t: &Tenants| t.by_key_digest(&[key; 32]).map(|t| t.id().to_owned());
            prop_assert_eq!(by(&tenants), by(&scratch));
        }
        for id in 0..40_u8 {
            let id = format!("tenant-{id}");
            prop_assert_eq!(tenants.get(&id).is_some(), table.contains_key(&id));
        }
    }
}
