//! Why a call to the tenant store failed, sorted from what the driver
//! says: the store down (unreachable, stalled) apart from a refusal (the
//! login, the schema, a statement), and never with the password.

use std::time::Duration;

use tokio_postgres::error::SqlState;

use super::row::BadRow;
use crate::config::PostgresUrl;

/// The variable a password is read from when the URL has none (as libpq
/// does), so that it need not be written into a file or a command line.
pub const PASSWORD_VARIABLE: &str = "PGPASSWORD";

/// Why a call to the tenant store failed. None of them carries the
/// password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TenantStoreError {
    /// The store URL or TLS settings are wrong.
    #[error("tenant store settings: {problem}")]
    Settings {
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// No connection: refused, lost, TLS failed, or not a PostgreSQL server.
    #[error(
        "the tenant store at {store} is unreachable ({problem}); check that PostgreSQL is running there and accepts connections"
    )]
    Unreachable {
        /// The store's URL without its password.
        store: String,
        /// What the connection said.
        problem: String,
    },
    /// No answer within `tenants.timeout_ms`: stalled or overloaded.
    #[error(
        "the tenant store at {store} did not answer within {after:?} (tenants.timeout_ms); it is stalled or overloaded"
    )]
    Timeout {
        /// The store's URL without its password.
        store: String,
        /// How long the call waited.
        after: Duration,
    },
    /// The server refused the login (role, password or database).
    #[error(
        "the tenant store at {store} refused the login ({problem}); check the role, the password (in the URL or {PASSWORD_VARIABLE}) and the database name"
    )]
    Login {
        /// The store's URL without its password.
        store: String,
        /// What the server said.
        problem: String,
    },
    /// The database has no tenant tables yet.
    #[error(
        "the tenant store at {store} has no shuffle-shard schema; run `shuffle-shard tenants init-schema --store URL` once"
    )]
    SchemaMissing {
        /// The store's URL without its password.
        store: String,
    },
    /// The database was set up by a newer shuffle-shard.
    #[error(
        "the tenant store at {store} holds schema version {found}, newer than this build's {supported}; upgrade shuffle-shard"
    )]
    SchemaNewer {
        /// The store's URL without its password.
        store: String,
        /// The version found.
        found: i32,
        /// The newest version this build knows.
        supported: i32,
    },
    /// The server refused a statement.
    #[error("the tenant store refused a query: {problem}")]
    Query {
        /// What the server said.
        problem: String,
    },
    /// A row that does not convert, or an entry the store cannot hold.
    #[error("{0}")]
    BadRow(#[from] BadRow),
}

impl TenantStoreError {
    /// Whether the store is down (unreachable or stalled), as opposed to
    /// answering with a refusal: the caller keeps what it has and retries.
    pub fn is_down(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Timeout { .. })
    }
}

/// A [`tokio_postgres::Error`] as one of ours.
pub(super) fn classify(url: &PostgresUrl, error: tokio_postgres::Error) -> TenantStoreError {
    let store = url.to_string();
    let problem = describe(&error);
    match error.as_db_error().map(|db| db.code().clone()) {
        Some(code) if code == SqlState::UNDEFINED_TABLE => {
            TenantStoreError::SchemaMissing { store }
        }
        Some(code)
            if code == SqlState::INVALID_PASSWORD
                || code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                || code == SqlState::INVALID_CATALOG_NAME =>
        {
            TenantStoreError::Login { store, problem }
        }
        Some(code)
            if code == SqlState::ADMIN_SHUTDOWN
                || code == SqlState::CRASH_SHUTDOWN
                || code == SqlState::CANNOT_CONNECT_NOW
                || code == SqlState::TOO_MANY_CONNECTIONS =>
        {
            TenantStoreError::Unreachable { store, problem }
        }
        Some(_) => TenantStoreError::Query { problem },
        // No answer from a server: an I/O error, a closed connection, TLS,
        // or bytes that are not PostgreSQL's protocol.
        None => TenantStoreError::Unreachable { store, problem },
    }
}

/// The error and its causes on one line.
fn describe(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = cause_of(source);
    }
    text
}

fn cause_of<'a>(
    error: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<&'a (dyn std::error::Error + 'static)> {
    error.and_then(std::error::Error::source)
}
