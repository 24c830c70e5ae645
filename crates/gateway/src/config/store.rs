//! A Redis server replicas share (`limits.tenant.store`, `fleet.store`):
//! its URL, whose password nothing prints, and TLS to it (`rediss://`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use serde::Deserialize;

/// `limits.tenant.store`: a Redis server shared by every replica.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoreSettings {
    /// Where it is, and how to log in.
    pub url: RedisUrl,
    /// The longest one call may take before the request is judged by the
    /// local limiter instead (`store_timeout_ms`).
    pub timeout: Duration,
    /// TLS to it, for a `rediss://` URL.
    pub tls: Option<StoreTls>,
}

/// TLS to a store: the roots its certificate is checked against (the CA
/// file named, or the system's trust store).
#[derive(Clone)]
pub struct StoreTls {
    /// The CA file, when one is named (`fleet.ca_file`).
    pub ca_file: Option<PathBuf>,
    /// The client configuration every connection uses.
    pub client: Arc<ClientConfig>,
}

impl PartialEq for StoreTls {
    fn eq(&self, other: &Self) -> bool {
        self.ca_file == other.ca_file
    }
}

impl std::fmt::Debug for StoreTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreTls")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

/// A `redis://[[user]:password@]host:port[/db]` URL. The password is a
/// secret: `Debug` shows only whether there is one, and nothing prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The ACL user, when the URL names one.
    pub username: Option<String>,
    /// The database number (`SELECT`), when not 0.
    pub db: u32,
    /// `rediss://`: TLS to the server.
    pub tls: bool,
    password: Option<String>,
}

impl RedisUrl {
    /// Parses a `redis://` URL. Errors never repeat the URL: it may carry a
    /// password.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (tls, rest) = match (
            text.strip_prefix("redis://"),
            text.strip_prefix("rediss://"),
        ) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => {
                return Err("must start with redis:// or rediss:// (TLS), e.g. \"redis://127.0.0.1:6379\"; Unix sockets are not supported".to_owned());
            }
        };
        let (login, rest) = match rest.rsplit_once('@') {
            Some((login, rest)) => (Some(login), rest),
            None => (None, rest),
        };
        let (address, db) = match rest.split_once('/') {
            Some((address, "")) => (address, 0),
            Some((address, db)) => (
                address,
                db.parse::<u32>().map_err(|_| {
                    "the path must be a database number (redis://host:port/0)".to_owned()
                })?,
            ),
            None => (rest, 0),
        };
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| "name the port too (redis://host:6379)".to_owned())?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| "the port must be a number from 1 to 65535".to_owned())?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err("name the host (redis://127.0.0.1:6379)".into());
        }
        let (username, password) = match login {
            None => (None, None),
            Some(login) => match login.split_once(':') {
                Some((user, password)) => (
                    (!user.is_empty()).then(|| user.to_owned()),
                    (!password.is_empty()).then(|| password.to_owned()),
                ),
                None => (None, (!login.is_empty()).then(|| login.to_owned())),
            },
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            username,
            db,
            tls,
            password,
        })
    }

    /// The password, for the `AUTH` command only.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisUrl")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("db", &self.db)
            .field("tls", &self.tls)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A string that may hold a secret (a URL with a password): read from the
/// file like any other, but never shown by `Debug`.
#[derive(Deserialize)]
#[serde(transparent)]
pub(super) struct Redacted(pub(super) String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}
