//! The configuration's unit tests: each loads a whole file through
//! `GatewayConfig::load`, so they share one fixture and live together
//! rather than beside the section each one tests.

use std::time::Duration;

use super::*;
use crate::syntax::grpc::{Code, CodeSet};

/// The error a configuration with `extra` is refused with.
fn refused(extra: &str) -> String {
    load_with(extra).unwrap_err().to_string()
}

/// A minimal valid configuration with `extra` appended, in a fresh
/// directory with its key and tenants files.
fn load_with(extra: &str) -> Result<GatewayConfig, ConfigError> {
    load_shards("{ id = \"s0\", url = \"http://127.0.0.1:9\" }", extra)
}

/// A configuration of the shards written as `shards` (the inside of
/// the list) with `extra` tables.
fn load_shards(shards: &str, extra: &str) -> Result<GatewayConfig, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("placement.key"), [7_u8; 32]).unwrap();
    std::fs::write(dir.path().join("tenants.toml"), "").unwrap();
    let path = dir.path().join("gateway.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\ntenants_file = \"tenants.toml\"\n\
         [placement]\nalgorithm = \"rendezvous\"\nk = 1\nkey_file = \"placement.key\"\nkey_version = \"v1\"\n\
         {extra}\n[[cells]]\nname = \"default\"\nshards = [{shards}]\n"
    );
    std::fs::write(&path, text).unwrap();
    GatewayConfig::load(&path)
}

#[test]
fn a_shard_url_that_would_reach_somewhere_unwritten_is_refused_by_its_key() {
    let good = "{ id = \"a\", url = \"http://127.0.0.1:9\" }";
    for (url, says) in [
        ("http://127.0.0.1:99999", "1 to 65535"),
        ("http://127.0.0.1:notaport", "1 to 65535"),
        ("https://127.0.0.1:0", "1 to 65535"),
        ("http://ops:s3cret@127.0.0.1:9100", "user information"),
        ("http://:9100", "host"),
        ("http://127.0.0.1:9100/api#frag", "fragment"),
    ] {
        let shards = format!("{good}, {{ id = \"b\", url = \"{url}\" }}");
        let error = load_shards(&shards, "").unwrap_err();
        assert_eq!(error.key, "cells[0].shards[1].url", "{url}: {error}");
        assert!(error.problem.contains(says), "{url}: {error}");
        let line = error.to_string();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(!line.contains("s3cret") && !line.contains("ops:"), "{line}");
    }
    // The port a shard is reached on is the one written, or the scheme's.
    let config = load_shards(
        "{ id = \"a\", url = \"http://127.0.0.1:9\" }, { id = \"b\", url = \"http://127.0.0.1\" }",
        "",
    )
    .unwrap();
    let ports: Vec<u16> = config.cells[0]
        .shards
        .iter()
        .map(|shard| shard.url.port())
        .collect();
    assert_eq!(ports, [9, 80]);
}

#[test]
fn a_shards_own_cap_wins_over_the_default_and_zero_exempts_it() {
    let shards = "{ id = \"a\", url = \"http://127.0.0.1:9\" }, \
                  { id = \"b\", url = \"http://127.0.0.1:9\", max_in_flight = 5 }, \
                  { id = \"c\", url = \"http://127.0.0.1:9\", max_in_flight = 0 }";
    let caps = |config: GatewayConfig| -> Vec<Option<u64>> {
        config.cells[0]
            .shards
            .iter()
            .map(|shard| shard.max_in_flight)
            .collect()
    };
    assert_eq!(
        caps(load_shards(shards, "").unwrap()),
        [None, Some(5), None]
    );
    assert_eq!(
        caps(load_shards(shards, "[limits.shard]\nmax_in_flight = 9").unwrap()),
        [Some(9), Some(5), None]
    );
    let error = load_shards(
        "{ id = \"a\", url = \"http://127.0.0.1:9\", max_in_flight = 2000000 }",
        "",
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("cells[0].shards[0].max_in_flight"),
        "{error}"
    );
    assert!(error.contains("0 for no cap"), "{error}");
}

#[test]
fn poison_containment_defaults_to_two_members_and_a_minute() {
    let routing = load_with("").unwrap().routing;
    assert_eq!(routing.poison_after, 2);
    assert_eq!(routing.quarantine, Duration::from_secs(60));
    let routing = load_with("[routing]\npoison_after = 0\nquarantine_seconds = 5")
        .unwrap()
        .routing;
    assert_eq!(routing.poison_after, 0);
    assert_eq!(routing.quarantine, Duration::from_secs(5));
}

#[test]
fn poison_spread_is_contained_unless_set_free_and_a_bad_one_is_refused_by_its_key() {
    assert_eq!(
        load_with("").unwrap().routing.poison_spread,
        PoisonSpread::Contained
    );
    for (written, spread) in [
        ("contained", PoisonSpread::Contained),
        ("free", PoisonSpread::Free),
    ] {
        let routing = load_with(&format!("[routing]\npoison_spread = \"{written}\""))
            .unwrap()
            .routing;
        assert_eq!(routing.poison_spread, spread);
    }
    for bad in ["\"loose\"", "\"Contained\"", "2"] {
        let error = refused(&format!("[routing]\npoison_spread = {bad}"));
        assert!(error.contains("routing.poison_spread"), "{error}");
        assert!(!error.contains('\n'), "one line: {error}");
    }
    let error = refused("[routing]\npoison_spread = \"loose\"");
    assert!(
        error.contains("\"contained\"") && error.contains("\"free\""),
        "{error}"
    );
}

#[test]
fn the_access_log_takes_a_format_or_the_old_switch_and_a_file_only_for_json() {
    for (written, format) in [
        ("", AccessLog::Off),
        ("access_log = false", AccessLog::Off),
        ("access_log = \"off\"", AccessLog::Off),
        ("access_log = true", AccessLog::Text),
        ("access_log = \"text\"", AccessLog::Text),
        ("access_log = \"json\"", AccessLog::Json),
    ] {
        let config = load_with(&format!("[logging]\n{written}")).unwrap();
        assert_eq!(config.access_log, format, "{written}");
        assert_eq!(config.access_log_file, None);
    }
    let config =
        load_with("[logging]\naccess_log = \"json\"\naccess_log_file = \"access.log\"").unwrap();
    assert!(config.access_log_file.unwrap().ends_with("access.log"));
    let error = refused("[logging]\naccess_log = \"xml\"");
    assert!(error.contains("logging.access_log"), "{error}");
    assert!(error.contains("\"json\", \"text\" or false"), "{error}");
    let error = refused("[logging]\naccess_log = \"text\"\naccess_log_file = \"a.log\"");
    assert!(error.contains("logging.access_log_file"), "{error}");
    assert!(error.contains("access_log = \"json\""), "{error}");
    let error =
        refused("[logging]\naccess_log = \"json\"\naccess_log_file = \"no/such/dir/access.log\"");
    assert!(error.contains("logging.access_log_file"), "{error}");
    assert!(error.contains("cannot open"), "{error}");
}

#[test]
fn reload_growth_is_off_unless_asked_for() {
    assert!(!load_with("").unwrap().reload_allow_growth);
    assert!(
        load_with("[reload]\nallow_growth = true")
            .unwrap()
            .reload_allow_growth
    );
}

#[test]
fn lookback_is_off_unless_asked_for_and_refuses_what_is_no_duration() {
    use std::time::Duration;
    assert_eq!(load_with("").unwrap().lookback(), Duration::ZERO);
    assert_eq!(
        load_with("[reload]\nlookback_seconds = 300")
            .unwrap()
            .lookback(),
        Duration::from_secs(300)
    );
    assert_eq!(
        load_with("[reload]\nlookback_seconds = 0.5")
            .unwrap()
            .lookback(),
        Duration::from_millis(500)
    );
    for bad in ["-1", "nan", "1e9"] {
        let error = refused(&format!("[reload]\nlookback_seconds = {bad}"));
        assert!(error.contains("reload.lookback_seconds"), "{error}");
        assert!(error.contains("use a value from 0 to"), "{error}");
        assert!(error.contains("0 turns lookback off"), "{error}");
    }
}

#[test]
fn the_connection_cap_defaults_high_and_refuses_zero_by_name() {
    assert_eq!(load_with("").unwrap().limits.max_connections, 10_000);
    assert_eq!(
        load_with("[limits]\nmax_connections = 2")
            .unwrap()
            .limits()
            .max_connections,
        2
    );
    let error = refused("[limits]\nmax_connections = 0");
    assert!(error.contains("gateway.toml"), "{error}");
    assert!(error.contains("limits.max_connections"), "{error}");
}

#[test]
fn max_ejection_percent_defaults_to_10_and_refuses_over_100_by_name() {
    assert_eq!(load_with("").unwrap().outlier.max_ejection_percent, 10);
    for (value, expected) in [(0, 0), (100, 100), (35, 35)] {
        let outlier = load_with(&format!("[outlier]\nmax_ejection_percent = {value}"))
            .unwrap()
            .outlier;
        assert_eq!(outlier.max_ejection_percent, expected);
    }
    for bad in ["101", "300", "-1"] {
        let error = refused(&format!("[outlier]\nmax_ejection_percent = {bad}"));
        assert!(error.contains("outlier.max_ejection_percent"), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
    }
}

#[test]
fn staleness_must_outlast_a_whole_check_cycle() {
    let error = refused("[health]\ninterval_ms = 100\ntimeout_ms = 500\nstaleness_ms = 600");
    assert!(error.contains("health.staleness_ms"), "{error}");
    assert!(error.contains("600 ms"), "{error}");
    // The default allows for three intervals and a slow check.
    let health = load_with("[health]\ninterval_ms = 100\ntimeout_ms = 500")
        .unwrap()
        .health;
    assert_eq!(health.staleness, Duration::from_millis(800));
}

#[test]
fn a_health_path_that_is_not_a_path_is_refused() {
    let error = refused("[health]\npath = \"/a b\"");
    assert!(error.contains("health.path"), "{error}");
}

#[test]
fn tokenless_pages_are_refused_on_mapped_addresses_too() {
    let error =
        refused("[admin]\nlisten = \"[::ffff:10.0.0.1]:9901\"\nmetrics_without_token = true");
    assert!(error.contains("admin.metrics_without_token"), "{error}");
    load_with("[admin]\nlisten = \"[::ffff:127.0.0.1]:9901\"\nmetrics_without_token = true")
        .unwrap();
}

#[test]
fn grpc_retry_settings_default_validate_and_name_their_key() {
    let routing = load_with("").unwrap().routing;
    assert!(routing.grpc_idempotent_methods.is_empty());
    assert_eq!(
        routing.retry_on_grpc_status,
        CodeSet::of([Code::Unavailable])
    );
    let routing = load_with(
        "[routing]\ngrpc_idempotent_methods = [\"/pkg.Service/Get*\", \"/pkg.Service/List\"]\n\
         retry_on_grpc_status = [\"UNAVAILABLE\", 10, \"resource_exhausted\"]",
    )
    .unwrap()
    .routing;
    assert_eq!(routing.grpc_idempotent_methods.len(), 2);
    assert!(routing.grpc_idempotent_methods[0].matches("/pkg.Service/GetUser"));
    assert_eq!(
        routing.retry_on_grpc_status,
        CodeSet::of([Code::Unavailable, Code::Aborted, Code::ResourceExhausted])
    );
    for (lines, key, says) in [
        (
            "grpc_idempotent_methods = [\"pkg.Service/Get\"]",
            "routing.grpc_idempotent_methods",
            "pkg.Service/Get",
        ),
        (
            "grpc_idempotent_methods = [\"/pkg.Service/G*t\"]",
            "routing.grpc_idempotent_methods",
            "trailing",
        ),
        (
            "retry_on_grpc_status = [\"UNAVAILABLE\", \"SOMETIMES\"]",
            "routing.retry_on_grpc_status",
            "SOMETIMES",
        ),
        (
            "retry_on_grpc_status = [17]",
            "routing.retry_on_grpc_status",
            "0 to 16",
        ),
        (
            "retry_on_grpc_status = [-1]",
            "routing.retry_on_grpc_status",
            "0 to 16",
        ),
        (
            "retry_on_grpc_status = [\"OK\"]",
            "routing.retry_on_grpc_status",
            "never retried",
        ),
    ] {
        let error = refused(&format!("[routing]\n{lines}"));
        assert!(
            error.contains(key) && error.contains(says),
            "{lines}: {error}"
        );
    }
}

#[test]
fn tenant_limits_are_unset_by_default_and_read_with_their_ranges() {
    let unset = load_with("").unwrap();
    assert_eq!(unset.limits.tenant, TenantLimitSettings::default());
    let set = load_with(
        "[limits.tenant]\nmax_in_flight = 64\nrequests_per_second = 250\nburst = 500\n\
         store = \"redis://127.0.0.1:6379\"\nstore_timeout_ms = 7",
    )
    .unwrap();
    let tenant = &set.limits.tenant;
    assert_eq!(tenant.defaults.max_in_flight, Some(64));
    assert_eq!(tenant.defaults.per_request, Some(Duration::from_millis(4)));
    assert_eq!(tenant.defaults.burst, Some(500));
    let store = tenant.store.as_ref().unwrap();
    assert_eq!(
        (store.url.host.as_str(), store.url.port),
        ("127.0.0.1", 6379)
    );
    assert_eq!(store.timeout, Duration::from_millis(7));
    assert_eq!(
        load_with("[limits.tenant]\nrequests_per_second = 0.5")
            .unwrap()
            .limits()
            .tenant
            .defaults
            .per_request,
        Some(Duration::from_secs(2))
    );
    for (line, key) in [
        ("max_in_flight = 0", "limits.tenant.max_in_flight"),
        (
            "requests_per_second = 0",
            "limits.tenant.requests_per_second",
        ),
        (
            "requests_per_second = -3",
            "limits.tenant.requests_per_second",
        ),
        (
            "requests_per_second = nan",
            "limits.tenant.requests_per_second",
        ),
        (
            "requests_per_second = 2e6",
            "limits.tenant.requests_per_second",
        ),
        ("burst = 0", "limits.tenant.burst"),
        ("store = \"http://127.0.0.1:6379\"", "limits.tenant.store"),
        ("store_timeout_ms = 0", "limits.tenant.store_timeout_ms"),
    ] {
        let error = refused(&format!("[limits.tenant]\n{line}"));
        assert!(error.contains(key), "{line}: {error}");
    }
    let error = refused("[limits.tenant]\nrate = 5");
    assert!(error.contains("rate"), "{error}");
}

#[test]
fn a_store_password_is_never_in_debug_or_errors() {
    let config = load_with(
        "[limits.tenant]\nrequests_per_second = 5\nstore = \"redis://:hunter2-secret@127.0.0.1:6379\"",
    )
    .unwrap();
    assert!(!format!("{config:?}").contains("hunter2"));
    assert_eq!(
        config.limits.tenant.store.as_ref().unwrap().url.password(),
        Some("hunter2-secret")
    );
    let error = load_with(
        "[limits.tenant]\nrequests_per_second = 5\nstore = \"redis://:hunter2-secret@127.0.0.1\"",
    )
    .unwrap_err();
    assert!(!error.to_string().contains("hunter2"), "{error}");
    assert!(!format!("{error:?}").contains("hunter2"), "{error:?}");
}

#[test]
fn the_tunnel_idle_timeout_defaults_validates_and_reads_its_old_name() {
    let idle = |extra: &str| load_with(extra).unwrap().limits.tunnel_idle_timeout;
    assert_eq!(idle(""), Duration::from_secs(300));
    assert_eq!(
        idle("[limits]\ntunnel_idle_timeout_ms = 250"),
        Duration::from_millis(250)
    );
    // Configurations written before the rename keep working.
    assert_eq!(
        idle("[limits]\nwebsocket_idle_timeout_ms = 400"),
        Duration::from_millis(400)
    );
    for (extra, key) in [
        (
            "tunnel_idle_timeout_ms = 0",
            "limits.tunnel_idle_timeout_ms",
        ),
        (
            "tunnel_idle_timeout_ms = 86400001",
            "limits.tunnel_idle_timeout_ms",
        ),
        (
            "websocket_idle_timeout_ms = 0",
            "limits.websocket_idle_timeout_ms",
        ),
    ] {
        let error = refused(&format!("[limits]\n{extra}"));
        assert!(error.contains(key), "{extra}: {error}");
        assert!(error.contains("use a value from 1 to 86400000"), "{error}");
        assert!(!error.contains('\n'), "one line: {error}");
    }
    let error =
        refused("[limits]\ntunnel_idle_timeout_ms = 1000\nwebsocket_idle_timeout_ms = 1000");
    assert!(
        error.contains("limits.tunnel_idle_timeout_ms")
            && error.contains("remove limits.websocket_idle_timeout_ms"),
        "{error}"
    );
    assert!(!error.contains('\n'), "one line: {error}");
}
