//! Where the tenants come from: the tenants file (`tenants_file`, TOML or
//! JSON Lines), or a PostgreSQL database every replica reads
//! (`[tenants] store`), with the file the last registry applied is kept in
//! (`[tenants] snapshot_file`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, millis};
use super::store::{Redacted, StoreTls};

/// Where the tenants come from.
#[derive(Debug, Clone, PartialEq)]
pub enum TenantSource {
    /// A tenants file: TOML (`[[tenants]]` entries), or JSON Lines when its
    /// name ends in `.jsonl`.
    File(PathBuf),
    /// The tenant store, PostgreSQL.
    Store(TenantStoreSettings),
}

impl TenantSource {
    /// The tenants file, when tenants come from one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::File(path) => Some(path),
            Self::Store(_) => None,
        }
    }

    /// What to name in an error about one tenant: the file, or the store's
    /// host and database (never its password).
    pub fn describe(&self) -> PathBuf {
        match self {
            Self::File(path) => path.clone(),
            Self::Store(store) => PathBuf::from(store.url.to_string()),
        }
    }
}

/// `[tenants] store`: PostgreSQL as the fleet's source of truth.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TenantStoreSettings {
    /// Where it is and how to log in.
    pub url: PostgresUrl,
    /// TLS to it (`tenants.ca_file`, or `sslmode=verify-full` in the URL).
    pub tls: Option<StoreTls>,
    /// Where the last registry applied is kept (`tenants.snapshot_file`).
    pub snapshot_file: Option<PathBuf>,
    /// The longest one query may take before the store counts as down
    /// (`tenants.timeout_ms`).
    pub timeout: Duration,
    /// How often the change counter is read, so a missed notification is
    /// caught (`tenants.check_ms`).
    pub check_every: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTenants {
    store: Option<Redacted>,
    ca_file: Option<String>,
    snapshot_file: Option<String>,
    timeout_ms: Option<u64>,
    check_ms: Option<u64>,
}

pub(super) fn tenant_source(
    file: Option<&str>,
    t: Option<RawTenants>,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<TenantSource, KeyProblem> {
    let t = t.unwrap_or_default();
    let store = match (file, t.store) {
        (Some(file), None) => {
            for (key, set) in [
                ("tenants.ca_file", t.ca_file.is_some()),
                ("tenants.snapshot_file", t.snapshot_file.is_some()),
                ("tenants.timeout_ms", t.timeout_ms.is_some()),
                ("tenants.check_ms", t.check_ms.is_some()),
            ] {
                if set {
                    return Err((
                        key,
                        "applies to the tenant store only; set tenants.store = \"postgres://…\" (and remove tenants_file), or remove this key".into(),
                    ));
                }
            }
            return Ok(TenantSource::File(resolve(file)));
        }
        (Some(_), Some(_)) => {
            return Err((
                "tenants.store",
                "tenants_file and tenants.store are both set; tenants come from one place: keep one".into(),
            ));
        }
        (None, None) => {
            return Err((
                "tenants_file",
                "name where the tenants are: tenants_file = \"tenants.toml\" (or .jsonl), or [tenants] store = \"postgres://user@host:5432/db\"".into(),
            ));
        }
        (None, Some(Redacted(url))) => url,
    };
    let url = PostgresUrl::parse(&store).map_err(|problem| ("tenants.store", problem))?;
    let ca_file = t.ca_file.as_deref().map(resolve);
    let tls = if url.verify_full || ca_file.is_some() {
        Some(
            super::tls::store_tls("tenants.ca_file", ca_file)
                .map_err(|(_, problem)| ("tenants.ca_file", problem))?,
        )
    } else {
        None
    };
    Ok(TenantSource::Store(TenantStoreSettings {
        url,
        tls,
        snapshot_file: t.snapshot_file.as_deref().map(resolve),
        timeout: millis("tenants.timeout_ms", t.timeout_ms, 2_000, 1..=60_000)?,
        check_every: millis("tenants.check_ms", t.check_ms, 500, 50..=10_000)?,
    }))
}

/// A `postgres://user[:password]@host:port/database[?sslmode=…]` URL. The
/// password is a secret: `Debug` and `Display` leave it out.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The role to log in as.
    pub user: String,
    /// The database.
    pub database: String,
    /// `sslmode=verify-full`: TLS with the server's certificate checked
    /// (also implied by `tenants.ca_file`).
    pub verify_full: bool,
    password: Option<String>,
}

impl PostgresUrl {
    /// Parses the URL. Errors never repeat it: it may carry a password.
    pub fn parse(text: &str) -> Result<Self, String> {
        let rest = text
            .strip_prefix("postgres://")
            .or_else(|| text.strip_prefix("postgresql://"))
            .ok_or_else(|| {
                "must start with postgres://, e.g. \"postgres://gateway@127.0.0.1:5432/tenants\"; Unix sockets are not supported".to_owned()
            })?;
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let mut verify_full = false;
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair {
                "sslmode=disable" => verify_full = false,
                "sslmode=verify-full" => verify_full = true,
                _ => {
                    return Err(format!(
                        "the only option understood is sslmode=disable or sslmode=verify-full (TLS with the server's certificate checked); {:?} is not one",
                        pair.split('=').next().unwrap_or_default()
                    ));
                }
            }
        }
        let (login, rest) = rest.rsplit_once('@').ok_or_else(|| {
            "name the role to log in as (postgres://user@host:5432/database)".to_owned()
        })?;
        let (address, database) = rest
            .split_once('/')
            .ok_or_else(|| "name the database (postgres://user@host:5432/database)".to_owned())?;
        if database.is_empty() || database.contains('/') {
            return Err(
                "name one database after the address (postgres://user@host:5432/database)".into(),
            );
        }
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| "name the port too (postgres://user@host:5432/database)".to_owned())?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| "the port must be a number from 1 to 65535".to_owned())?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err("name the host (postgres://user@127.0.0.1:5432/database)".into());
        }
        let (user, password) = match login.split_once(':') {
            Some((user, password)) => (user, (!password.is_empty()).then(|| password.to_owned())),
            None => (login, None),
        };
        if user.is_empty() {
            return Err("name the role to log in as (postgres://user@host:5432/database)".into());
        }
        Ok(Self {
            host: host.to_owned(),
            port,
            user: user.to_owned(),
            database: database.to_owned(),
            verify_full,
            password,
        })
    }

    /// The password, for logging in only.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }
}

impl std::fmt::Display for PostgresUrl {
    /// The URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "postgres://{}@{}:{}/{}",
            self.user, self.host, self.port, self.database
        )
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresUrl")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("database", &self.database)
            .field("verify_full", &self.verify_full)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_parses_and_never_shows_its_password() {
        let url = PostgresUrl::parse("postgres://gw:s3cret-pw@127.0.0.1:5432/tenants").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.user.as_str()),
            ("127.0.0.1", 5432, "gw")
        );
        assert_eq!(url.password(), Some("s3cret-pw"));
        assert!(!format!("{url} {url:?}").contains("s3cret"));
        for bad in [
            "redis://x@h:1/d",
            "postgres://h:5432/d",
            "postgres://u@h/d",
            "postgres://u@h:0/d",
            "postgres://u@h:5432",
            "postgres://u:pw-in-error@h:5432/d?sslmode=prefer",
        ] {
            let problem = PostgresUrl::parse(bad).unwrap_err();
            assert!(!problem.contains("pw-in-error"), "{problem}");
        }
    }
}
