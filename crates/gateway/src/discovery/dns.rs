//! DNS discovery through hickory's resolver: SRV targets or A/AAAA
//! addresses, each lookup bounded, nothing cached.
//!
//! One [`DnsResolver`] serves every DNS-discovered cell. Each
//! [`DnsResolver::look`] asks the server again (the resolver keeps no
//! cache: a shard added or removed in DNS is seen on the next look, not
//! when a TTL runs out) and is bounded as a whole by
//! `discovery.timeout_ms`, however many queries it takes.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::{StreamExt as _, TryStreamExt as _};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::lookup::Lookup;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{Name, RData, RecordType};

use super::found::{Condition, DiscoveryError, Found, MAX_FOUND};
use crate::config::{DiscoverySettings, DiscoverySource, ZoneFrom};

/// How many SRV targets' addresses (and TXT zones) are asked for at once:
/// enough that a large cell's look fits in its timeout, few enough not to
/// flood the server.
const PARALLEL_TARGET_LOOKUPS: usize = 16;

/// The record kind named in [`DiscoveryError::NoRecords`] for SRV sources.
const SRV: &str = "SRV";
/// The record kind named in [`DiscoveryError::NoRecords`] for A/AAAA
/// sources.
const A_AAAA: &str = "A/AAAA";

/// A DNS client for discovery: one server (`discovery.resolver`) or the
/// system's, no cache, every look bounded by `discovery.timeout_ms`.
pub struct DnsResolver {
    resolver: TokioResolver,
    /// The bound on one whole look.
    timeout: Duration,
    /// Who is asked, for errors: `127.0.0.1:53` or "the system resolver".
    server: String,
}

impl fmt::Debug for DnsResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DnsResolver")
            .field("server", &self.server)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What one SRV record asks for, before its address is known.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// The shard's id: the target's first label.
    id: String,
    /// The target name as written (lowercase, no trailing dot), for
    /// errors and zone labels.
    text: String,
    /// The target as hickory looks it up.
    name: Name,
    port: u16,
}

impl DnsResolver {
    /// A resolver asking `settings.resolver` (UDP, then TCP when an answer
    /// is truncated), or the system's servers from `/etc/resolv.conf` when
    /// it is `None`.
    pub fn new(settings: &DiscoverySettings) -> Result<Self, DiscoveryError> {
        let provider = TokioRuntimeProvider::default();
        let (mut builder, server) = match settings.resolver {
            Some(addr) => {
                let mut name_server = NameServerConfig::udp_and_tcp(addr.ip());
                for connection in &mut name_server.connections {
                    connection.port = addr.port();
                }
                let config = ResolverConfig::from_name_servers(vec![name_server]);
                (
                    TokioResolver::builder_with_config(config, provider),
                    addr.to_string(),
                )
            }
            None => {
                let builder = TokioResolver::builder(provider).map_err(|e| {
                    DiscoveryError::Unreachable(format!(
                        "the system resolver's configuration (/etc/resolv.conf) could not be read ({e}); set discovery.resolver to a DNS server's address, e.g. \"10.0.0.2:53\""
                    ))
                })?;
                (builder, "the system resolver".to_owned())
            }
        };
        let options = builder.options_mut();
        tune(options, settings.timeout);
        let resolver = builder.build().map_err(|e| {
            DiscoveryError::Unreachable(format!("a DNS client for {server} could not be made: {e}"))
        })?;
        Ok(Self {
            resolver,
            timeout: settings.timeout,
            server,
        })
    }

    /// Who is asked, as errors name it.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The shards `source` names now, sorted by id, each
    /// [`Condition::Ready`]; their zones per `zone_from` (SRV only).
    pub async fn look(
        &self,
        source: &DiscoverySource,
        zone_from: ZoneFrom,
    ) -> Result<Vec<Found>, DiscoveryError> {
        // One bound for the whole look: hickory's own timeout is per query,
        // and an SRV look is one query plus one or two per target.
        let look = async {
            match source {
                DiscoverySource::DnsSrv { name } => self.look_srv(name, zone_from).await,
                DiscoverySource::DnsA { host, port } => self.look_a(host, *port).await,
                DiscoverySource::Kubernetes { .. } => Err(DiscoveryError::Unreachable(format!(
                    "{source} is not a DNS source"
                ))),
            }
        };
        match tokio::time::timeout(self.timeout, look).await {
            Ok(result) => result,
            Err(_elapsed) => Err(self.timed_out()),
        }
    }

    fn timed_out(&self) -> DiscoveryError {
        DiscoveryError::Timeout {
            ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            server: self.server.clone(),
        }
    }

    fn malformed(&self, problem: String) -> DiscoveryError {
        DiscoveryError::Malformed {
            server: self.server.clone(),
            problem,
        }
    }

    /// `name` as a fully qualified name: no search domains apply to a
    /// discovery source.
    fn fqdn(&self, name: &str) -> Result<Name, DiscoveryError> {
        let mut parsed = Name::from_ascii(name)
            .map_err(|e| self.malformed(format!("{name:?} is not a DNS name: {e}")))?;
        parsed.set_fqdn(true);
        Ok(parsed)
    }

    async fn look_srv(
        &self,
        name: &str,
        zone_from: ZoneFrom,
    ) -> Result<Vec<Found>, DiscoveryError> {
        let query = self.fqdn(name)?;
        let lookup = self
            .resolver
            .lookup(query, RecordType::SRV)
            .await
            .map_err(|e| self.error(e, name, SRV))?;
        let mut records = Vec::new();
        for record in lookup.answers() {
            if let RData::SRV(srv) = &record.data {
                records.push((srv.target.clone(), srv.port));
            }
        }
        let targets = srv_targets(records).map_err(|problem| match problem {
            TargetProblem::NotAvailable => DiscoveryError::NoRecords {
                name: name.to_owned(),
                kind: SRV,
            },
            TargetProblem::Malformed(problem) => self.malformed(problem),
        })?;
        if targets.is_empty() {
            return Err(DiscoveryError::NoRecords {
                name: name.to_owned(),
                kind: SRV,
            });
        }
        if targets.len() > MAX_FOUND {
            return Err(self.malformed(format!(
                "{name} names {} targets, more than the {MAX_FOUND} one source may report",
                targets.len()
            )));
        }
        // The zone label is checked before any address is asked for: a
        // target too short for `label:N` is a configuration mistake however
        // its addresses answer.
        if let ZoneFrom::Label(n) = zone_from {
            for target in &targets {
                zone_label(&target.text, n).map_err(|problem| self.malformed(problem))?;
            }
        }
        let lookup = &lookup;
        let mut found: Vec<Found> = futures_util::stream::iter(targets)
            .map(|target| async move {
                let ip = self.target_address(lookup, &target).await?;
                let zone = match zone_from {
                    ZoneFrom::None => None,
                    ZoneFrom::Label(n) => {
                        Some(zone_label(&target.text, n).map_err(|p| self.malformed(p))?)
                    }
                    ZoneFrom::Txt => self.txt_zone(&target).await?,
                };
                Ok::<_, DiscoveryError>(Found {
                    id: target.id,
                    address: SocketAddr::new(ip, target.port),
                    zone,
                    condition: Condition::Ready,
                })
            })
            .buffer_unordered(PARALLEL_TARGET_LOOKUPS)
            .try_collect()
            .await?;
        found.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(found)
    }

    /// The target's address: from the SRV answer's additional section when
    /// the server put it there, else asked for (A first, AAAA when it has
    /// none); the lowest when there are several, so every look picks the
    /// same one (IPv4 sorts before IPv6).
    async fn target_address(
        &self,
        lookup: &Lookup,
        target: &Target,
    ) -> Result<IpAddr, DiscoveryError> {
        let additional = lookup
            .additionals()
            .iter()
            // Name equality ignores case, as DNS does.
            .filter(|record| record.name == target.name)
            .filter_map(|record| address_of(&record.data))
            .min();
        if let Some(ip) = additional {
            return Ok(ip);
        }
        for kind in [RecordType::A, RecordType::AAAA] {
            match self.resolver.lookup(target.name.clone(), kind).await {
                Ok(lookup) => {
                    if let Some(ip) = lookup
                        .answers()
                        .iter()
                        .filter_map(|record| address_of(&record.data))
                        .min()
                    {
                        return Ok(ip);
                    }
                }
                Err(e) if e.is_no_records_found() => {}
                Err(e) => return Err(self.error(e, &target.text, A_AAAA)),
            }
        }
        Err(self.malformed(format!(
            "the SRV target {} has no A or AAAA record",
            target.text
        )))
    }

    /// The target's zone from its TXT record `zone=NAME`; `None` when it
    /// has none.
    async fn txt_zone(&self, target: &Target) -> Result<Option<String>, DiscoveryError> {
        let lookup = match self
            .resolver
            .lookup(target.name.clone(), RecordType::TXT)
            .await
        {
            Ok(lookup) => lookup,
            Err(e) if e.is_no_records_found() => return Ok(None),
            Err(e) => return Err(self.error(e, &target.text, "TXT")),
        };
        let texts = lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::TXT(txt) => Some(
                    txt.txt_data
                        .iter()
                        .map(|part| String::from_utf8_lossy(part).into_owned())
                        .collect::<String>(),
                ),
                _ => None,
            });
        txt_zone(&target.text, texts).map_err(|problem| self.malformed(problem))
    }

    async fn look_a(&self, host: &str, port: u16) -> Result<Vec<Found>, DiscoveryError> {
        let query = self.fqdn(host)?;
        let (v4, v6) = tokio::join!(
            self.resolver.lookup(query.clone(), RecordType::A),
            self.resolver.lookup(query, RecordType::AAAA),
        );
        let mut addresses = Vec::new();
        for result in [v4, v6] {
            match result {
                Ok(lookup) => addresses.extend(
                    lookup
                        .answers()
                        .iter()
                        .filter_map(|record| address_of(&record.data)),
                ),
                // One kind missing is usual (no AAAA); both is NoRecords below.
                Err(e) if e.is_no_records_found() => {}
                Err(e) => return Err(self.error(e, host, A_AAAA)),
            }
        }
        addresses.sort();
        addresses.dedup();
        if addresses.is_empty() {
            // Both kinds said "none", or answered with only other records
            // (a CNAME to nowhere).
            return Err(DiscoveryError::NoRecords {
                name: host.to_owned(),
                kind: A_AAAA,
            });
        }
        if addresses.len() > MAX_FOUND {
            return Err(self.malformed(format!(
                "{host} has {} addresses, more than the {MAX_FOUND} one source may report",
                addresses.len()
            )));
        }
        let mut found: Vec<Found> = addresses
            .into_iter()
            .map(|ip| {
                let address = SocketAddr::new(ip, port);
                Found {
                    id: address.to_string(),
                    address,
                    zone: None,
                    condition: Condition::Ready,
                }
            })
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(found)
    }

    /// A failed query as discovery reports it; `name` and `kind` are what
    /// was asked.
    fn error(&self, error: NetError, name: &str, kind: &'static str) -> DiscoveryError {
        let server = self.server.clone();
        match error {
            NetError::Dns(DnsError::NoRecordsFound(_)) => DiscoveryError::NoRecords {
                name: name.to_owned(),
                kind,
            },
            NetError::Dns(DnsError::ResponseCode(code)) => DiscoveryError::Server {
                server,
                code: rcode_text(code),
            },
            NetError::Timeout => self.timed_out(),
            NetError::Proto(e) => self.malformed(format!("{name} ({kind}): {e}")),
            NetError::Truncated
            | NetError::QueryCaseMismatch
            | NetError::ForeignClassRecord { .. } => {
                self.malformed(format!("{name} ({kind}): {error}"))
            }
            NetError::Io(e) => {
                DiscoveryError::Unreachable(format!("{server} could not be asked for {name}: {e}"))
            }
            other => DiscoveryError::Unreachable(format!(
                "{server} could not be asked for {name} ({kind}): {other}"
            )),
        }
    }
}

/// The resolver options discovery needs whatever the server: no cache (and
/// no TTL kept, in case a cache were ever on), no hosts file, one retry
/// inside the look's bound.
fn tune(options: &mut ResolverOpts, timeout: Duration) {
    options.cache_size = 0;
    options.positive_min_ttl = None;
    options.negative_min_ttl = None;
    options.positive_max_ttl = Some(Duration::ZERO);
    options.negative_max_ttl = Some(Duration::ZERO);
    options.use_hosts_file = ResolveHosts::Never;
    // Two tries of half the bound each: one lost UDP datagram does not
    // fail the look, and the second try still ends inside it.
    options.attempts = 2;
    options.timeout = (timeout / 2).max(Duration::from_millis(5));
    options.preserve_intermediates = true;
}

/// A response code as operators read it in logs (`SERVFAIL`, `REFUSED`).
fn rcode_text(code: ResponseCode) -> String {
    let mnemonic = match code {
        ResponseCode::FormErr => "FORMERR",
        ResponseCode::ServFail => "SERVFAIL",
        ResponseCode::NXDomain => "NXDOMAIN",
        ResponseCode::NotImp => "NOTIMP",
        ResponseCode::Refused => "REFUSED",
        ResponseCode::NotAuth => "NOTAUTH",
        _ => return format!("rcode {} ({code})", u16::from(code)),
    };
    format!("{mnemonic} ({code})")
}

fn address_of(data: &RData) -> Option<IpAddr> {
    match data {
        RData::A(a) => Some(IpAddr::V4(a.0)),
        RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
        _ => None,
    }
}

/// Why SRV records make no fleet.
#[derive(Debug, PartialEq, Eq)]
enum TargetProblem {
    /// Only targets `.` (RFC 2782: the service is decidedly not available
    /// at this name).
    NotAvailable,
    /// What a fleet cannot be.
    Malformed(String),
}

/// The shards SRV records `(target, port)` name: one per target (the same
/// target and port twice is one shard), sorted by id. Targets `.` are
/// skipped; when there is nothing else, [`TargetProblem::NotAvailable`].
fn srv_targets(records: Vec<(Name, u16)>) -> Result<Vec<Target>, TargetProblem> {
    let any = !records.is_empty();
    let mut by_id: BTreeMap<String, Target> = BTreeMap::new();
    for (name, port) in records {
        if name.is_root() {
            continue;
        }
        let text = target_text(&name);
        let id = shard_id(&text).map_err(TargetProblem::Malformed)?;
        let mut name = name.to_lowercase();
        name.set_fqdn(true);
        match by_id.get(&id) {
            None => {
                by_id.insert(
                    id.clone(),
                    Target {
                        id,
                        text,
                        name,
                        port,
                    },
                );
            }
            Some(seen) if seen.text == text && seen.port == port => {}
            Some(seen) if seen.text == text => {
                return Err(TargetProblem::Malformed(format!(
                    "the target {text} is listed with two ports ({} and {port}); a shard has one",
                    seen.port
                )));
            }
            Some(seen) => {
                return Err(TargetProblem::Malformed(format!(
                    "two targets share the id {id}: {} and {text}",
                    seen.text
                )));
            }
        }
    }
    if any && by_id.is_empty() {
        return Err(TargetProblem::NotAvailable);
    }
    Ok(by_id.into_values().collect())
}

/// A target name written out: lowercase, without the trailing dot.
fn target_text(name: &Name) -> String {
    let text = name.to_ascii().to_ascii_lowercase();
    match text.strip_suffix('.') {
        Some(stripped) => stripped.to_owned(),
        None => text,
    }
}

/// Whether `label` may name a shard or a zone: letters, digits, `-` and
/// `_` (anything else, such as an escaped byte, would make an id no
/// operator can type).
fn is_plain_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A shard's id from its SRV target (`shard-1.zone-a.example.internal` →
/// `shard-1`).
fn shard_id(target: &str) -> Result<String, String> {
    let target = target.strip_suffix('.').unwrap_or(target);
    let first = target.split('.').next().unwrap_or_default();
    if !is_plain_label(first) {
        return Err(format!(
            "the SRV target {target:?} does not start with a label that can be a shard id (letters, digits, '-', '_')"
        ));
    }
    Ok(first.to_ascii_lowercase())
}

/// The zone in the target's `n`th label, counted from 1.
fn zone_label(target: &str, n: usize) -> Result<String, String> {
    let target = target.strip_suffix('.').unwrap_or(target);
    let labels: Vec<&str> = target.split('.').collect();
    match n.checked_sub(1).and_then(|i| labels.get(i)) {
        Some(label) if is_plain_label(label) => Ok(label.to_ascii_lowercase()),
        Some(label) => Err(format!(
            "label {n} of the SRV target {target} ({label:?}) cannot be a zone name"
        )),
        None => Err(format!(
            "the SRV target {target} has {} labels, so no label {n} for its zone (discovery.zone_from = \"label:{n}\")",
            labels.len()
        )),
    }
}

/// The zone among a target's TXT strings: the one `zone=NAME`; `None`
/// when none says; an error when two say different zones.
fn txt_zone(
    target: &str,
    texts: impl IntoIterator<Item = String>,
) -> Result<Option<String>, String> {
    let mut zone: Option<String> = None;
    for text in texts {
        let Some(value) = text.trim().strip_prefix("zone=") else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() || value.len() > 253 || value.chars().any(char::is_control) {
            return Err(format!(
                "the TXT record of {target} names no usable zone: {text:?}"
            ));
        }
        match &zone {
            Some(seen) if seen != value => {
                return Err(format!(
                    "the TXT records of {target} name two zones: {seen} and {value}"
                ));
            }
            _ => zone = Some(value.to_owned()),
        }
    }
    Ok(zone)
}

#[cfg(test)]
mod tests {
    use std::str::FromStr as _;

    use super::*;

    fn name(text: &str) -> Name {
        Name::from_str(text).unwrap()
    }

    #[test]
    fn the_id_is_the_first_label_lowercased() {
        assert_eq!(
            shard_id("Shard-1.zone-a.example.internal.").unwrap(),
            "shard-1"
        );
        assert_eq!(shard_id("db_2").unwrap(), "db_2");
        assert!(shard_id("").is_err());
        assert!(shard_id("a\\032b.example").is_err());
    }

    #[test]
    fn zone_labels_count_from_one() {
        let target = "shard-1.us-east-1a.example.internal";
        assert_eq!(zone_label(target, 1).unwrap(), "shard-1");
        assert_eq!(zone_label(target, 2).unwrap(), "us-east-1a");
        assert_eq!(zone_label("a.B.", 2).unwrap(), "b");
        let problem = zone_label("shard-1.internal", 3).unwrap_err();
        assert!(problem.contains("shard-1.internal"), "{problem}");
        assert!(zone_label(target, 0).is_err());
    }

    #[test]
    fn a_target_twice_is_one_shard_and_two_targets_need_two_ids() {
        let targets = srv_targets(vec![
            (name("b.example."), 80),
            (name("A.example."), 81),
            (name("b.example."), 80),
        ])
        .unwrap();
        let ids: Vec<_> = targets.iter().map(|t| (t.id.as_str(), t.port)).collect();
        assert_eq!(ids, [("a", 81), ("b", 80)]);
        assert_eq!(targets[0].text, "a.example");

        let problem =
            srv_targets(vec![(name("a.x.example."), 80), (name("a.y.example."), 80)]).unwrap_err();
        assert!(
            matches!(&problem, TargetProblem::Malformed(p) if p.contains("two targets share the id a")),
            "{problem:?}"
        );
        assert!(matches!(
            srv_targets(vec![(name("a.example."), 80), (name("a.example."), 81)]),
            Err(TargetProblem::Malformed(_))
        ));
    }

    #[test]
    fn a_root_target_means_not_available() {
        assert_eq!(
            srv_targets(vec![(Name::root(), 0)]),
            Err(TargetProblem::NotAvailable)
        );
        assert_eq!(srv_targets(Vec::new()), Ok(Vec::new()));
        let targets = srv_targets(vec![(Name::root(), 0), (name("a.example."), 80)]).unwrap();
        assert_eq!(targets.len(), 1);
    }

    #[test]
    fn the_txt_zone_is_the_zone_record() {
        let texts = |list: &[&str]| list.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            txt_zone("a", texts(&["v=spf1", "zone=eu-1"])).unwrap(),
            Some("eu-1".to_owned())
        );
        assert_eq!(txt_zone("a", texts(&["other"])).unwrap(), None);
        assert!(txt_zone("a", texts(&["zone=x", "zone=y"])).is_err());
        assert!(txt_zone("a", texts(&["zone="])).is_err());
    }

    #[test]
    fn response_codes_read_as_their_mnemonics() {
        assert!(rcode_text(ResponseCode::ServFail).starts_with("SERVFAIL"));
        assert!(rcode_text(ResponseCode::Refused).starts_with("REFUSED"));
        assert!(rcode_text(ResponseCode::Unknown(3000)).contains("3000"));
    }
}
