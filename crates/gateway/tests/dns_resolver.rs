//! DNS discovery's client against real servers on 127.0.0.1: a `dnsmasq`
//! of the test's own for the records (SRV targets, their zones, A records,
//! a name that does not exist, records changed between two looks, a server
//! that is gone) and a server that misbehaves on purpose for what dnsmasq
//! will not do (silence, SERVFAIL, REFUSED, replies that are not DNS).

use std::net::SocketAddr;
use std::time::Duration;

use gateway::config::{DiscoverySettings, DiscoverySource, ZoneFrom};
use gateway::discovery::dns::DnsResolver;
use gateway::discovery::{Condition, DiscoveryError, Found};
use testkit::dns_fault::{DnsFault, Fault};
use testkit::dnsmasq::{Dnsmasq, Record};

/// The SRV name every test asks for.
const SERVICE: &str = "_shards._tcp.example.internal";

/// The bound of a look that must succeed: far above what one takes, so a
/// busy machine does not fail it.
const GENEROUS: Duration = Duration::from_secs(5);

/// The bound of a look that must time out: short, so the tests stay quick.
const SHORT: Duration = Duration::from_millis(300);

fn settings(server: SocketAddr, timeout: Duration) -> DiscoverySettings {
    let mut settings = DiscoverySettings::default();
    settings.resolver = Some(server);
    settings.timeout = timeout;
    settings
}

fn srv() -> DiscoverySource {
    DiscoverySource::parse(&format!("dns+srv://{SERVICE}")).unwrap()
}

/// Three shards in two zones, each target with its A record.
fn three_shards() -> Vec<Record> {
    vec![
        Record::srv(SERVICE, "shard-1.zone-a.example.internal", 8001),
        Record::srv(SERVICE, "shard-2.zone-a.example.internal", 8002),
        Record::srv(SERVICE, "shard-3.zone-b.example.internal", 8003),
        Record::a("shard-1.zone-a.example.internal", "127.0.0.11"),
        Record::a("shard-2.zone-a.example.internal", "127.0.0.12"),
        Record::a("shard-3.zone-b.example.internal", "127.0.0.13"),
    ]
}

/// Each shard as `(id, address, zone)`.
fn shards(found: &[Found]) -> Vec<(String, String, Option<String>)> {
    assert!(found.iter().all(|f| f.condition == Condition::Ready));
    found
        .iter()
        .map(|f| (f.id.clone(), f.address.to_string(), f.zone.clone()))
        .collect()
}

fn ids(found: &[Found]) -> Vec<&str> {
    found.iter().map(|f| f.id.as_str()).collect()
}

#[tokio::test]
async fn dns_resolver_srv_targets_are_shards() {
    let Some(dnsmasq) = Dnsmasq::start(three_shards()).await else {
        return;
    };
    let resolver = DnsResolver::new(&settings(dnsmasq.addr(), GENEROUS)).unwrap();
    let found = resolver.look(&srv(), ZoneFrom::None).await.unwrap();
    assert_eq!(
        shards(&found),
        [
            ("shard-1".into(), "127.0.0.11:8001".into(), None),
            ("shard-2".into(), "127.0.0.12:8002".into(), None),
            ("shard-3".into(), "127.0.0.13:8003".into(), None),
        ]
    );
}

/// Nothing is cached: records with a TTL of five minutes, changed between
/// two looks, are seen changed on the second.
#[tokio::test]
async fn dns_resolver_sees_each_change_on_the_next_look() {
    let Some(mut dnsmasq) = Dnsmasq::start_with_ttl(three_shards(), 300).await else {
        return;
    };
    let resolver = DnsResolver::new(&settings(dnsmasq.addr(), GENEROUS)).unwrap();
    let found = resolver.look(&srv(), ZoneFrom::None).await.unwrap();
    assert_eq!(ids(&found), ["shard-1", "shard-2", "shard-3"]);

    let mut records = three_shards();
    records.push(Record::srv(
        SERVICE,
        "shard-4.zone-b.example.internal",
        8004,
    ));
    records.push(Record::a("shard-4.zone-b.example.internal", "127.0.0.14"));
    dnsmasq.set_records(records).await;
    let found = resolver.look(&srv(), ZoneFrom::None).await.unwrap();
    assert_eq!(ids(&found), ["shard-1", "shard-2", "shard-3", "shard-4"]);
    assert_eq!(found[3].address.to_string(), "127.0.0.14:8004");

    let records = three_shards()
        .into_iter()
        .filter(|r| !format!("{r:?}").contains("shard-2"))
        .collect();
    dnsmasq.set_records(records).await;
    let found = resolver.look(&srv(), ZoneFrom::None).await.unwrap();
    assert_eq!(ids(&found), ["shard-1", "shard-3"]);
}

#[tokio::test]
async fn dns_resolver_zone_from_a_label_or_a_txt_record() {
    let mut records = three_shards();
    records.push(Record::txt("shard-1.zone-a.example.internal", "zone=eu-1"));
    records.push(Record::txt("shard-3.zone-b.example.internal", "zone=eu-2"));
    // shard-2 has no TXT record: no zone.
    let Some(dnsmasq) = Dnsmasq::start(records).await else {
        return;
    };
    let resolver = DnsResolver::new(&settings(dnsmasq.addr(), GENEROUS)).unwrap();

    let found = resolver.look(&srv(), ZoneFrom::Label(2)).await.unwrap();
    let zones: Vec<_> = found.iter().map(|f| f.zone.as_deref()).collect();
    assert_eq!(zones, [Some("zone-a"), Some("zone-a"), Some("zone-b")]);

    let found = resolver.look(&srv(), ZoneFrom::Txt).await.unwrap();
    let zones: Vec<_> = found.iter().map(|f| f.zone.as_deref()).collect();
    assert_eq!(zones, [Some("eu-1"), None, Some("eu-2")]);

    // shard-1.zone-a.example.internal has four labels.
    let error = resolver.look(&srv(), ZoneFrom::Label(5)).await.unwrap_err();
    assert!(
        matches!(&error, DiscoveryError::Malformed { problem, .. } if problem.contains("shard-1.zone-a.example.internal")),
        "{error:?}"
    );
}

#[tokio::test]
async fn dns_resolver_a_records_are_shards_named_by_address() {
    let Some(dnsmasq) = Dnsmasq::start(vec![
        Record::a("shards.example.internal", "127.0.0.2"),
        Record::a("shards.example.internal", "127.0.0.1"),
        Record::a("shards.example.internal", "::1"),
    ])
    .await
    else {
        return;
    };
    let resolver = DnsResolver::new(&settings(dnsmasq.addr(), GENEROUS)).unwrap();
    let source = DiscoverySource::parse("dns+a://shards.example.internal:8080").unwrap();
    let found = resolver.look(&source, ZoneFrom::Label(1)).await.unwrap();
    assert_eq!(
        shards(&found),
        [
            ("127.0.0.1:8080".into(), "127.0.0.1:8080".into(), None),
            ("127.0.0.2:8080".into(), "127.0.0.2:8080".into(), None),
            ("[::1]:8080".into(), "[::1]:8080".into(), None),
        ]
    );
}

#[tokio::test]
async fn dns_resolver_a_name_without_records_is_no_records() {
    let Some(dnsmasq) = Dnsmasq::start(three_shards()).await else {
        return;
    };
    let resolver = DnsResolver::new(&settings(dnsmasq.addr(), GENEROUS)).unwrap();
    let source = DiscoverySource::parse("dns+srv://_missing._tcp.example.internal").unwrap();
    assert_eq!(
        resolver.look(&source, ZoneFrom::None).await,
        Err(DiscoveryError::NoRecords {
            name: "_missing._tcp.example.internal".into(),
            kind: "SRV",
        })
    );
    let source = DiscoverySource::parse("dns+a://missing.example.internal:80").unwrap();
    assert_eq!(
        resolver.look(&source, ZoneFrom::None).await,
        Err(DiscoveryError::NoRecords {
            name: "missing.example.internal".into(),
            kind: "A/AAAA",
        })
    );
    // A name with A records but no SRV (NODATA).
    let source = DiscoverySource::parse("dns+srv://shard-1.zone-a.example.internal").unwrap();
    assert!(
        matches!(
            resolver.look(&source, ZoneFrom::None).await,
            Err(DiscoveryError::NoRecords { kind: "SRV", .. })
        ),
        "NODATA"
    );
}

/// RFC 2782: an SRV record whose target is `.` says the service is
/// decidedly not available.
#[tokio::test]
async fn dns_resolver_a_root_target_is_no_records() {
    let Some(dnsmasq) = Dnsmasq::start(vec![Record::srv(SERVICE, "", 0)]).await else {
        return;
    };
    let resolver = DnsResolver::new(&settings(dnsmasq.addr(), GENEROUS)).unwrap();
    assert!(
        matches!(
            resolver.look(&srv(), ZoneFrom::None).await,
            Err(DiscoveryError::NoRecords { kind: "SRV", .. })
        ),
        "service not available"
    );
}

#[tokio::test]
async fn dns_resolver_two_targets_with_one_id_are_malformed() {
    let mut records = three_shards();
    records.push(Record::srv(
        SERVICE,
        "shard-1.zone-b.example.internal",
        8001,
    ));
    records.push(Record::a("shard-1.zone-b.example.internal", "127.0.0.21"));
    let Some(dnsmasq) = Dnsmasq::start(records).await else {
        return;
    };
    let resolver = DnsResolver::new(&settings(dnsmasq.addr(), GENEROUS)).unwrap();
    let error = resolver.look(&srv(), ZoneFrom::None).await.unwrap_err();
    assert!(
        matches!(&error, DiscoveryError::Malformed { problem, .. } if problem.contains("two targets share the id shard-1")),
        "{error:?}"
    );
}

/// A server that is gone: UDP queries go unanswered, so the look ends at
/// its bound; then it is back and the next look succeeds.
#[tokio::test]
async fn dns_resolver_a_stopped_server_times_out() {
    let Some(mut dnsmasq) = Dnsmasq::start(three_shards()).await else {
        return;
    };
    let resolver = DnsResolver::new(&settings(dnsmasq.addr(), SHORT)).unwrap();
    dnsmasq.stop();
    let error = resolver.look(&srv(), ZoneFrom::None).await.unwrap_err();
    assert_eq!(
        error,
        DiscoveryError::Timeout {
            ms: 300,
            server: dnsmasq.addr().to_string(),
        }
    );
    dnsmasq.restart().await;
    let found = resolver.look(&srv(), ZoneFrom::None).await.unwrap();
    assert_eq!(found.len(), 3);
}

#[tokio::test]
async fn dns_resolver_a_silent_server_times_out() {
    let server = DnsFault::start(Fault::Silent).await;
    let resolver = DnsResolver::new(&settings(server.addr(), SHORT)).unwrap();
    let error = resolver.look(&srv(), ZoneFrom::None).await.unwrap_err();
    assert_eq!(
        error,
        DiscoveryError::Timeout {
            ms: 300,
            server: server.addr().to_string(),
        }
    );
    assert!(server.queries() >= 1);
}

#[tokio::test]
async fn dns_resolver_error_codes_are_server_errors() {
    let server = DnsFault::start(Fault::ServFail).await;
    let resolver = DnsResolver::new(&settings(server.addr(), GENEROUS)).unwrap();
    for source in [
        srv(),
        DiscoverySource::parse("dns+a://shards.example.internal:80").unwrap(),
    ] {
        for (fault, says) in [(Fault::ServFail, "SERVFAIL"), (Fault::Refused, "REFUSED")] {
            server.set(fault);
            let error = resolver.look(&source, ZoneFrom::None).await.unwrap_err();
            assert!(
                matches!(&error, DiscoveryError::Server { server: who, code } if code.contains(says) && *who == server.addr().to_string()),
                "{source} {fault:?}: {error:?}"
            );
        }
    }
}

/// Replies that are not DNS. Observed with hickory 0.26: 40 random bytes
/// are dropped (their first two bytes are not the query's id, so hickory
/// takes them for a stray or spoofed datagram and waits on for the real
/// reply) and the look ends at its bound, Timeout; a reply with the right
/// id and a body that breaks off is reported as a decoding error,
/// Malformed.
#[tokio::test]
async fn dns_resolver_replies_that_are_not_dns_fail_the_look() {
    let server = DnsFault::start(Fault::Junk).await;
    let resolver = DnsResolver::new(&settings(server.addr(), SHORT)).unwrap();
    let error = resolver.look(&srv(), ZoneFrom::None).await.unwrap_err();
    // Junk whose first two bytes happen to be the id (1 in 65536) would
    // be read, and fail as Malformed.
    assert!(
        matches!(
            error,
            DiscoveryError::Timeout { .. } | DiscoveryError::Malformed { .. }
        ),
        "junk: {error:?}"
    );
    assert!(server.queries() >= 1);

    server.set(Fault::Garbled);
    let error = resolver.look(&srv(), ZoneFrom::None).await.unwrap_err();
    assert!(
        matches!(&error, DiscoveryError::Malformed { server: who, .. } if *who == server.addr().to_string()),
        "garbled: {error:?}"
    );
}
