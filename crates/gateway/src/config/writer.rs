//! Writing a gateway configuration: `gateway.toml` and the key, tenants
//! and admin token files it names, into one directory. The demo and the
//! tests (the gateway's fixture, the CLI's `serve` and `drill` tests) all
//! write one, and each used to by hand, so a change to the format had as
//! many copies to follow. It is plain text, so a test can still edit it
//! (reload tests replace a line and reload). It lives beside the parser so
//! that the two change together; a test parses what it writes.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A random key of `len` bytes (a demo's or a test's own; none is
/// committed).
pub fn random_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|_| fastrand::u8(..)).collect()
}

/// The SHA-256 of `bytes` in lower-case hex, as the tenants file stores an
/// API key.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    text::hex(&Sha256::digest(bytes.as_ref()))
}

/// `count` tenants, `tenant-0` onwards, each with a fresh random API key:
/// (id, key).
pub fn tenants(count: usize) -> Vec<(String, String)> {
    (0..count)
        .map(|t| {
            (
                format!("tenant-{t}"),
                format!("key-{t}-{}", fastrand::u64(..)),
            )
        })
        .collect()
}

/// A tenants file: one `[[tenants]]` entry per `(id, API key)`, the key
/// stored as its SHA-256.
pub fn tenants_toml(tenants: &[(String, String)]) -> String {
    tenants.iter().fold(String::new(), |mut text, (id, key)| {
        let _ = write!(
            text,
            "[[tenants]]\nid = \"{id}\"\napi_key_sha256 = \"{}\"\n",
            sha256_hex(key)
        );
        text
    })
}

/// One entry of the cell's `shards` list.
#[derive(Debug, Clone)]
pub struct Shard {
    /// The shard's id.
    pub id: String,
    /// Where the gateway reaches it (`http://host:port` or
    /// `https://host:port`).
    pub url: String,
    /// Its zone, if the test places by zone.
    pub zone: Option<String>,
    /// For an `https://` shard: the name its certificate carries, when not
    /// the URL's host.
    pub server_name: Option<String>,
    /// Its `protocol` (`"http1"`, `"h2c"` or `"h2"`), when not the default.
    pub protocol: Option<String>,
    /// Its `max_in_flight`, when it sets one.
    pub max_in_flight: Option<u64>,
}

impl Shard {
    /// A shard without a zone.
    pub fn new(id: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            url: url.into(),
            zone: None,
            server_name: None,
            protocol: None,
            max_in_flight: None,
        }
    }

    /// The same shard in `zone`.
    #[must_use]
    pub fn in_zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// The same shard, whose certificate must carry `name` (and which is
    /// sent as SNI) instead of the URL's host.
    #[must_use]
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The same shard, spoken to in `protocol` (`"http1"`, `"h2c"` or
    /// `"h2"`).
    #[must_use]
    pub fn speaking(mut self, protocol: impl Into<String>) -> Self {
        self.protocol = Some(protocol.into());
        self
    }

    /// The same shard, with at most `cap` requests in flight (0: none,
    /// whatever `limits.shard.max_in_flight` says).
    #[must_use]
    pub fn with_max_in_flight(mut self, cap: u64) -> Self {
        self.max_in_flight = Some(cap);
        self
    }
}

/// A gateway configuration with one cell, rendezvous placement and an
/// admin listener. [`Default`] gives a valid one but for its shards: both
/// listeners on 127.0.0.1 port 0, k = 2, a fresh random placement key, no
/// tenants and no admin token.
#[derive(Debug, Clone)]
pub struct GatewayToml {
    /// The data listener's address.
    pub listen: String,
    /// `placement.k`.
    pub k: u32,
    /// `placement.key_version`.
    pub key_version: String,
    /// `placement.zone_aware`.
    pub zone_aware: bool,
    /// Tables after `[placement]`, in order, as (name, body): for example
    /// `("routing", "failover = false\n")`. A table is written even when
    /// its body is empty.
    pub tables: Vec<(String, String)>,
    /// `admin.listen`; `None` writes no `[admin]` table (then `admin_token`
    /// and `admin` must be empty).
    pub admin_listen: Option<String>,
    /// When set, written to `admin.token` and named by `admin.token_file`.
    pub admin_token: Option<String>,
    /// Further lines inside `[admin]`, after `listen` and `token_file`.
    pub admin: String,
    /// Whole TOML tables after `[admin]` (e.g. `[limits]`, `[auth.jwt]`).
    pub extra: String,
    /// The cell's name.
    pub cell: String,
    /// Further lines inside `[[cells]]`, after `name` (`discovery = …`,
    /// `algorithm = …`).
    pub cell_lines: String,
    /// The cell's shards, one per line (so a test can remove one by its
    /// line).
    pub shards: Vec<Shard>,
    /// The contents of `placement.key`.
    pub placement_key: Vec<u8>,
    /// The contents of `tenants.toml` (see [`tenants_toml`]).
    pub tenants: String,
    /// The body of a `[tenants]` table (`store = "postgres://…"`,
    /// `snapshot_file`, …): when set, the tenants come from the tenant
    /// store, so it is written instead of `tenants_file` (the two exclude
    /// each other) and no `tenants.toml` is written.
    pub tenant_store: Option<String>,
}

impl Default for GatewayToml {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:0".into(),
            k: 2,
            key_version: "v1".into(),
            zone_aware: false,
            tables: Vec::new(),
            admin_listen: Some("127.0.0.1:0".into()),
            admin_token: None,
            admin: String::new(),
            extra: String::new(),
            cell: "default".into(),
            cell_lines: String::new(),
            shards: Vec::new(),
            placement_key: random_bytes(32),
            tenants: String::new(),
            tenant_store: None,
        }
    }
}

impl GatewayToml {
    /// A configuration of one shard at k = 1, with `extra` tables: for
    /// tests of how one shard is configured.
    pub fn one_shard(shard: Shard, extra: &str) -> Self {
        Self {
            k: 1,
            shards: vec![shard],
            extra: extra.into(),
            ..Self::default()
        }
    }

    /// The text of `gateway.toml`.
    pub fn render(&self) -> String {
        let tenants_file = match self.tenant_store {
            Some(_) => "",
            None => "tenants_file = \"tenants.toml\"\n",
        };
        let mut text = format!(
            "listen = \"{}\"\n{tenants_file}\n\
             [placement]\nalgorithm = \"rendezvous\"\nk = {}\nkey_file = \"placement.key\"\nkey_version = \"{}\"\n",
            self.listen, self.k, self.key_version
        );
        if self.zone_aware {
            text.push_str("zone_aware = true\n");
        }
        if let Some(store) = &self.tenant_store {
            let _ = write!(text, "\n[tenants]\n{}", lines(store));
        }
        for (name, body) in &self.tables {
            let _ = write!(text, "\n[{name}]\n{}", lines(body));
        }
        match &self.admin_listen {
            Some(listen) => {
                let _ = write!(text, "\n[admin]\nlisten = \"{listen}\"\n");
                if self.admin_token.is_some() {
                    text.push_str("token_file = \"admin.token\"\n");
                }
                text.push_str(&lines(&self.admin));
            }
            None => assert!(
                self.admin_token.is_none() && self.admin.is_empty(),
                "admin settings without an [admin] table"
            ),
        }
        if !self.extra.is_empty() {
            let _ = write!(text, "\n{}", lines(&self.extra));
        }
        let _ = write!(
            text,
            "\n[[cells]]\nname = \"{}\"\n{}shards = [\n",
            self.cell,
            lines(&self.cell_lines)
        );
        for shard in &self.shards {
            let _ = write!(text, "  {{ id = \"{}\", url = \"{}\"", shard.id, shard.url);
            if let Some(zone) = &shard.zone {
                let _ = write!(text, ", zone = \"{zone}\"");
            }
            if let Some(name) = &shard.server_name {
                let _ = write!(text, ", server_name = \"{name}\"");
            }
            if let Some(protocol) = &shard.protocol {
                let _ = write!(text, ", protocol = \"{protocol}\"");
            }
            if let Some(cap) = shard.max_in_flight {
                let _ = write!(text, ", max_in_flight = {cap}");
            }
            text.push_str(" },\n");
        }
        text.push_str("]\n");
        text
    }

    /// Writes `gateway.toml`, `placement.key`, `tenants.toml` (unless the
    /// tenants come from the store) and (with a token) `admin.token` into
    /// `dir`; the path of `gateway.toml`.
    pub fn write(&self, dir: &Path) -> std::io::Result<PathBuf> {
        fs::write(dir.join("placement.key"), &self.placement_key)?;
        if self.tenant_store.is_none() {
            fs::write(dir.join("tenants.toml"), &self.tenants)?;
        }
        if let Some(token) = &self.admin_token {
            fs::write(dir.join("admin.token"), format!("{token}\n"))?;
        }
        let path = dir.join("gateway.toml");
        fs::write(&path, self.render())?;
        Ok(path)
    }
}

/// `body`, ending in a newline unless empty: table bodies are written one
/// after another, and a missing newline would join two lines.
fn lines(body: &str) -> String {
    let mut text = body.to_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_part_in_order() {
        let config = GatewayToml {
            k: 3,
            zone_aware: true,
            tables: vec![
                ("health".into(), "rise = 1".into()),
                ("routing".into(), String::new()),
            ],
            admin_token: Some("t".into()),
            admin: "status_page_without_token = true\n".into(),
            extra: "[limits]\nmax_connections = 1".into(),
            cell: "main".into(),
            shards: vec![
                Shard::new("s0", "http://127.0.0.1:1").in_zone("a"),
                Shard::new("c0", "http://127.0.0.1:2"),
                Shard::new("t0", "https://10.0.0.1:3")
                    .in_zone("b")
                    .with_server_name("t0.shards.internal")
                    .speaking("h2"),
            ],
            ..GatewayToml::default()
        };
        assert_eq!(
            config.render(),
            "listen = \"127.0.0.1:0\"\ntenants_file = \"tenants.toml\"\n\n\
             [placement]\nalgorithm = \"rendezvous\"\nk = 3\nkey_file = \"placement.key\"\n\
             key_version = \"v1\"\nzone_aware = true\n\n\
             [health]\nrise = 1\n\n\
             [routing]\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"admin.token\"\n\
             status_page_without_token = true\n\n\
             [limits]\nmax_connections = 1\n\n\
             [[cells]]\nname = \"main\"\nshards = [\n\
             \x20 { id = \"s0\", url = \"http://127.0.0.1:1\", zone = \"a\" },\n\
             \x20 { id = \"c0\", url = \"http://127.0.0.1:2\" },\n\
             \x20 { id = \"t0\", url = \"https://10.0.0.1:3\", zone = \"b\", \
             server_name = \"t0.shards.internal\", protocol = \"h2\" },\n]\n"
        );
    }

    #[test]
    fn without_an_admin_listener_there_is_no_admin_table() {
        let config = GatewayToml {
            admin_listen: None,
            ..GatewayToml::default()
        };
        assert!(!config.render().contains("[admin]"));
    }

    #[test]
    fn what_it_writes_is_a_valid_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let path = GatewayToml {
            shards: vec![
                Shard::new("s0", "http://127.0.0.1:9100").in_zone("a"),
                Shard::new("s1", "http://127.0.0.1:9101").in_zone("b"),
            ],
            zone_aware: true,
            tenants: tenants_toml(&tenants(3)),
            admin_token: Some("a-token-of-sixteen-or-more".into()),
            ..GatewayToml::default()
        }
        .write(dir.path())
        .unwrap();
        let config = crate::GatewayConfig::load(&path).unwrap();
        assert_eq!(config.cells[0].shards.len(), 2);
        assert!(config.admin.token_file.is_some());
    }

    #[test]
    fn what_it_writes_for_https_shards_is_a_valid_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let ca = rcgen::CertificateParams::new(Vec::<String>::new())
            .and_then(|mut params| {
                params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                params.self_signed(&rcgen::KeyPair::generate()?)
            })
            .unwrap();
        fs::write(dir.path().join("shards-ca.pem"), ca.pem()).unwrap();
        let path = GatewayToml {
            k: 1,
            shards: vec![
                Shard::new("s0", "https://127.0.0.1:9443"),
                Shard::new("s1", "https://127.0.0.1:9444").with_server_name("s1.shards.internal"),
            ],
            extra: "[upstream.tls]\nca_file = \"shards-ca.pem\"\n".into(),
            ..GatewayToml::default()
        }
        .write(dir.path())
        .unwrap();
        let config = crate::GatewayConfig::load(&path).unwrap();
        let shards = &config.cells()[0].shards;
        assert_eq!(shards[0].server_name, None);
        assert_eq!(
            shards[1].server_name,
            Some(rustls_pki_types::ServerName::try_from("s1.shards.internal").unwrap())
        );
        assert!(config.upstream_tls().is_some());
    }

    #[test]
    fn with_a_tenant_store_it_writes_a_tenants_table_and_no_tenants_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = GatewayToml {
            shards: vec![Shard::new("s0", "http://127.0.0.1:9100")],
            k: 1,
            tenant_store: Some(
                "store = \"postgres://gw:pw@127.0.0.1:5432/tenants\"\ncheck_ms = 100".into(),
            ),
            ..GatewayToml::default()
        };
        let text = config.render();
        assert!(!text.contains("tenants_file"), "{text}");
        assert!(
            text.contains(
                "\n[tenants]\nstore = \"postgres://gw:pw@127.0.0.1:5432/tenants\"\ncheck_ms = 100\n"
            ),
            "{text}"
        );
        let path = config.write(dir.path()).unwrap();
        assert!(!dir.path().join("tenants.toml").exists());
        let config = crate::GatewayConfig::load(&path).unwrap();
        let crate::config::TenantSource::Store(store) = config.tenants() else {
            panic!("the tenants come from a file: {:?}", config.tenants());
        };
        assert_eq!(store.check_every, std::time::Duration::from_millis(100));
    }

    #[test]
    fn tenants_are_stored_by_the_sha256_of_their_key() {
        assert_eq!(
            tenants_toml(&[("t".into(), "abc".into())]),
            "[[tenants]]\nid = \"t\"\n\
             api_key_sha256 = \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"\n"
        );
    }
}
