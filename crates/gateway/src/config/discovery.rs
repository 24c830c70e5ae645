//! `[discovery]` and a cell's `discovery` source: where a cell's shards
//! are found at run time (DNS SRV, DNS A/AAAA, Kubernetes EndpointSlices)
//! and the rules every change of membership passes (how often to look, how
//! long a shard that disappeared is kept down before it leaves placement,
//! how much of a cell may leave at once).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, parse_addr};

/// Where a cell's shards are found (`[[cells]] discovery = "..."`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DiscoverySource {
    /// `dns+srv://_service._proto.domain`: each SRV target is a shard, its
    /// id the target's first label, its port the record's.
    DnsSrv {
        /// The SRV name looked up (no trailing dot).
        name: String,
    },
    /// `dns+a://host:port`: each A/AAAA address of `host` is a shard whose
    /// id is `address:port` (a new address is a new shard: for fleets that
    /// accept remapping when an address changes).
    DnsA {
        /// The name looked up (no trailing dot).
        host: String,
        /// The port every address is reached on.
        port: u16,
    },
    /// `kubernetes://NAMESPACE/SERVICE[:PORT_NAME]`: the ready endpoints of
    /// the service's EndpointSlices, each a shard named by its pod.
    Kubernetes {
        /// The namespace.
        namespace: String,
        /// The service (the `kubernetes.io/service-name` label).
        service: String,
        /// The named port to use; `None`: the slice's only port.
        port_name: Option<String>,
    },
}

impl fmt::Display for DiscoverySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DnsSrv { name } => write!(f, "dns+srv://{name}"),
            Self::DnsA { host, port } => write!(f, "dns+a://{host}:{port}"),
            Self::Kubernetes {
                namespace,
                service,
                port_name,
            } => {
                write!(f, "kubernetes://{namespace}/{service}")?;
                match port_name {
                    Some(port) => write!(f, ":{port}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The longest DNS name (RFC 1035: 253 characters written out).
const MAX_DNS_NAME: usize = 253;

impl DiscoverySource {
    /// Parses a cell's `discovery` value; the error says what a valid one
    /// looks like.
    pub fn parse(text: &str) -> Result<Self, String> {
        let forms = "use \"dns+srv://_service._tcp.domain\", \"dns+a://host:port\" or \"kubernetes://NAMESPACE/SERVICE[:PORT_NAME]\"";
        if let Some(name) = text.strip_prefix("dns+srv://") {
            let name = dns_name(name).map_err(|p| format!("{text:?}: {p}; {forms}"))?;
            return Ok(Self::DnsSrv { name });
        }
        if let Some(rest) = text.strip_prefix("dns+a://") {
            let Some((host, port)) = rest.rsplit_once(':') else {
                return Err(format!(
                    "{text:?} names no port; every address is reached on one port, e.g. \"dns+a://shards.example.internal:8080\""
                ));
            };
            let port: u16 = port
                .parse()
                .ok()
                .filter(|port| *port != 0)
                .ok_or_else(|| format!("{text:?}: {port:?} is not a port from 1 to 65535"))?;
            let host = dns_name(host).map_err(|p| format!("{text:?}: {p}; {forms}"))?;
            return Ok(Self::DnsA { host, port });
        }
        if let Some(rest) = text.strip_prefix("kubernetes://") {
            let (namespace, service) = rest.split_once('/').ok_or_else(|| {
                format!(
                    "{text:?} names no service; write kubernetes://NAMESPACE/SERVICE[:PORT_NAME]"
                )
            })?;
            let (service, port_name) = match service.split_once(':') {
                Some((service, port)) => (service, Some(port)),
                None => (service, None),
            };
            for (what, name) in [("namespace", namespace), ("service", service)] {
                if !is_dns_label(name) {
                    return Err(format!(
                        "{text:?}: the {what} {name:?} is not a Kubernetes name (lower-case letters, digits and '-', at most 63)"
                    ));
                }
            }
            if let Some(port) = port_name
                && !is_dns_label(port)
            {
                return Err(format!(
                    "{text:?}: the port name {port:?} is not a Kubernetes port name (lower-case letters, digits and '-', at most 63)"
                ));
            }
            return Ok(Self::Kubernetes {
                namespace: namespace.to_owned(),
                service: service.to_owned(),
                port_name: port_name.map(str::to_owned),
            });
        }
        Err(format!("{text:?} is not a discovery source; {forms}"))
    }

    /// Whether it is looked up in DNS (polled every `refresh_seconds`).
    pub fn is_dns(&self) -> bool {
        !matches!(self, Self::Kubernetes { .. })
    }
}

/// A DNS name as written in a source: letters, digits, `-` and `_` in
/// dot-separated labels of at most 63, a trailing dot allowed (and
/// dropped).
fn dns_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > MAX_DNS_NAME {
        return Err("the name is empty or longer than 253 characters".into());
    }
    let valid_label = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !name.split('.').all(valid_label) {
        return Err(format!("{name:?} is not a DNS name"));
    }
    Ok(name.to_ascii_lowercase())
}

/// A Kubernetes DNS-1123 label.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Where a DNS-discovered shard's zone comes from (`discovery.zone_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZoneFrom {
    /// No zone.
    #[default]
    None,
    /// The target name's label at this position, counted from 1 at the
    /// left (`"label:2"`: `shard-1.us-east-1a.example.internal` is in
    /// `us-east-1a`).
    Label(usize),
    /// The target name's TXT record `zone=NAME`.
    Txt,
}

/// `[discovery]`: how often and through what shards are looked for, and
/// what a change may do.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DiscoverySettings {
    /// How often DNS is asked again (`refresh_seconds`, default 10).
    pub refresh: Duration,
    /// The longest one lookup may take (`timeout_ms`, default 2000).
    pub timeout: Duration,
    /// The DNS server asked (`resolver`); `None`: the system's.
    pub resolver: Option<SocketAddr>,
    /// How long a shard that disappeared is kept in placement, down, before
    /// it is removed (`removal_grace_seconds`, default 300).
    pub removal_grace: Duration,
    /// The largest share of a cell's shards that may be missing at once
    /// (`max_removed_fraction`, default 0.25); a refresh past it is
    /// refused.
    pub max_removed_fraction: f64,
    /// Apply placement changes that move tenants between surviving shards
    /// (`allow_migration`; by default only rendezvous's minimal moves
    /// apply).
    pub allow_migration: bool,
    /// Where a DNS-discovered shard's zone comes from (`zone_from`).
    pub zone_from: ZoneFrom,
    /// A kubeconfig to reach the Kubernetes API with (`kubeconfig`);
    /// `None`: the pod's service account (in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// How long one watch of the Kubernetes API may go without an event
    /// before it is started again (`watch_timeout_seconds`, default 290).
    pub watch_timeout: Duration,
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        Self {
            refresh: Duration::from_secs(10),
            timeout: Duration::from_millis(2000),
            resolver: None,
            removal_grace: Duration::from_secs(300),
            max_removed_fraction: 0.25,
            allow_migration: false,
            zone_from: ZoneFrom::None,
            kubeconfig: None,
            watch_timeout: Duration::from_secs(290),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDiscovery {
    refresh_seconds: Option<f64>,
    timeout_ms: Option<u64>,
    resolver: Option<String>,
    removal_grace_seconds: Option<f64>,
    max_removed_fraction: Option<f64>,
    allow_migration: Option<bool>,
    zone_from: Option<String>,
    kubeconfig: Option<String>,
    watch_timeout_seconds: Option<f64>,
}

/// Seconds from `key` within `range` (fractions allowed: tests look every
/// tenth of a second).
fn seconds(
    key: &'static str,
    value: Option<f64>,
    default: f64,
    range: std::ops::RangeInclusive<f64>,
) -> Result<Duration, KeyProblem> {
    let value = value.unwrap_or(default);
    if !range.contains(&value) {
        return Err((
            key,
            format!(
                "{value} is out of range; use seconds from {} to {}",
                range.start(),
                range.end()
            ),
        ));
    }
    Ok(Duration::from_secs_f64(value))
}

pub(super) fn discovery_settings(
    raw: RawDiscovery,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<DiscoverySettings, KeyProblem> {
    let max_removed_fraction = raw.max_removed_fraction.unwrap_or(0.25);
    if !(0.0..=1.0).contains(&max_removed_fraction) {
        return Err((
            "discovery.max_removed_fraction",
            format!("{max_removed_fraction} is out of range; use a share from 0 to 1, e.g. 0.25"),
        ));
    }
    let zone_from = match raw.zone_from.as_deref() {
        None | Some("none") => ZoneFrom::None,
        Some("txt") => ZoneFrom::Txt,
        Some(text) => match text
            .strip_prefix("label:")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) if (1..=127).contains(&n) => ZoneFrom::Label(n),
            _ => {
                return Err((
                    "discovery.zone_from",
                    format!(
                        "{text:?} is not a zone source; use \"label:N\" (the target name's Nth label, from 1) or \"txt\" (its TXT record zone=NAME)"
                    ),
                ));
            }
        },
    };
    let timeout_ms = raw.timeout_ms.unwrap_or(2000);
    if !(10..=60_000).contains(&timeout_ms) {
        return Err((
            "discovery.timeout_ms",
            format!("{timeout_ms} is out of range; use a value from 10 to 60000"),
        ));
    }
    Ok(DiscoverySettings {
        refresh: seconds(
            "discovery.refresh_seconds",
            raw.refresh_seconds,
            10.0,
            0.05..=3600.0,
        )?,
        timeout: Duration::from_millis(timeout_ms),
        resolver: raw
            .resolver
            .as_deref()
            .map(parse_addr)
            .transpose()
            .map_err(|p| ("discovery.resolver", p))?,
        removal_grace: seconds(
            "discovery.removal_grace_seconds",
            raw.removal_grace_seconds,
            300.0,
            0.0..=86_400.0,
        )?,
        max_removed_fraction,
        allow_migration: raw.allow_migration.unwrap_or(false),
        zone_from,
        kubeconfig: raw.kubeconfig.as_deref().map(resolve),
        watch_timeout: seconds(
            "discovery.watch_timeout_seconds",
            raw.watch_timeout_seconds,
            290.0,
            1.0..=3600.0,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_print_back() {
        for text in [
            "dns+srv://_shards._tcp.example.internal",
            "dns+a://shards.example.internal:8080",
            "kubernetes://prod/shards",
            "kubernetes://prod/shards:http",
        ] {
            let source = DiscoverySource::parse(text).unwrap();
            assert_eq!(source.to_string(), text);
        }
        assert_eq!(
            DiscoverySource::parse("dns+srv://_s._tcp.Example.internal.").unwrap(),
            DiscoverySource::DnsSrv {
                name: "_s._tcp.example.internal".into()
            }
        );
    }

    #[test]
    fn bad_sources_say_what_a_good_one_is() {
        for (text, says) in [
            ("consul://x", "dns+srv://"),
            ("dns+a://shards.internal", "names no port"),
            ("dns+a://shards.internal:0", "not a port"),
            ("dns+srv://bad name", "not a DNS name"),
            ("kubernetes://prod", "names no service"),
            ("kubernetes://Prod/shards", "not a Kubernetes name"),
            ("kubernetes://prod/shards:", "port name"),
        ] {
            let problem = DiscoverySource::parse(text).unwrap_err();
            assert!(problem.contains(says), "{text}: {problem}");
        }
    }

    #[test]
    fn settings_have_defaults_and_ranges() {
        let resolve = |file: &str| PathBuf::from(file);
        let settings = discovery_settings(RawDiscovery::default(), &resolve).unwrap();
        assert_eq!(settings, DiscoverySettings::default());
        let raw = RawDiscovery {
            max_removed_fraction: Some(1.5),
            ..RawDiscovery::default()
        };
        assert!(discovery_settings(raw, &resolve).is_err());
        let raw = RawDiscovery {
            zone_from: Some("label:2".into()),
            refresh_seconds: Some(0.1),
            ..RawDiscovery::default()
        };
        let settings = discovery_settings(raw, &resolve).unwrap();
        assert_eq!(settings.zone_from, ZoneFrom::Label(2));
        assert_eq!(settings.refresh, Duration::from_millis(100));
        let raw = RawDiscovery {
            zone_from: Some("label:x".into()),
            ..RawDiscovery::default()
        };
        assert!(discovery_settings(raw, &resolve).is_err());
    }
}
