//! One connection to the tenant store: TCP, then TLS through rustls when
//! the settings ask for it, then the login; and the task that drives it,
//! handing on the notifications a `LISTEN` connection receives.

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{MakeTlsConnect, NoTls};
use tokio_postgres::{AsyncMessage, Client, Config, Connection};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::{PASSWORD_VARIABLE, TenantStoreError, classify};
use super::schema::CHANNEL;
use crate::config::{PostgresUrl, TenantStoreSettings};

/// A connection, and the task driving it (aborted with it).
pub(super) struct Live {
    pub client: Client,
    task: JoinHandle<()>,
}

impl Live {
    /// Waits until the connection ends.
    pub async fn ended(&mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // A stalled server never closes the socket: end the task here
        // rather than leave it waiting forever.
        self.task.abort();
    }
}

/// Settings for a store at `url` (with TLS checked against `ca_file`, or
/// the system's roots for `sslmode=verify-full`), for tools that take a
/// URL on the command line rather than a configuration file.
pub fn settings(
    url: &str,
    ca_file: Option<PathBuf>,
) -> Result<TenantStoreSettings, TenantStoreError> {
    let url = PostgresUrl::parse(url).map_err(|problem| TenantStoreError::Settings { problem })?;
    let tls = if url.verify_full || ca_file.is_some() {
        let tls = crate::config::tls::store_tls("--ca-file", ca_file).map_err(|(_, problem)| {
            TenantStoreError::Settings {
                problem: format!("--ca-file {problem}"),
            }
        })?;
        Some(tls)
    } else {
        None
    };
    Ok(TenantStoreSettings {
        url,
        tls,
        snapshot_file: None,
        // As `tenants.timeout_ms` defaults to; a tool may wait longer.
        timeout: Duration::from_secs(2),
        check_every: Duration::from_millis(500),
    })
}

/// Connects and logs in; notifications go to `notify` when given. Not
/// bounded here: the caller bounds it.
pub(super) async fn open(
    settings: &TenantStoreSettings,
    notify: Option<mpsc::Sender<u64>>,
) -> Result<Live, TenantStoreError> {
    let url = &settings.url;
    let unreachable = |problem: String| TenantStoreError::Unreachable {
        store: url.to_string(),
        problem,
    };
    let stream = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    // Small queries, one at a time: do not wait to fill a segment.
    let _ = stream.set_nodelay(true);
    let mut config = Config::new();
    config
        .user(&url.user)
        .dbname(&url.database)
        .application_name("shuffle-shard");
    let password = url
        .password()
        .map(Cow::Borrowed)
        .or_else(|| std::env::var(PASSWORD_VARIABLE).ok().map(Cow::Owned));
    if let Some(password) = password {
        config.password(password.as_bytes());
    }
    let fail = |e: tokio_postgres::Error| classify(url, e);
    let (client, task) = match &settings.tls {
        None => {
            config.ssl_mode(SslMode::Disable);
            let (client, connection) = config.connect_raw(stream, NoTls).await.map_err(fail)?;
            (client, tokio::spawn(drive(connection, notify)))
        }
        Some(tls) => {
            // Required, never preferred: a store that refuses TLS is not
            // talked to in the clear.
            config.ssl_mode(SslMode::Require);
            let mut make = MakeRustlsConnect::new((*tls.client).clone());
            let connect = match <MakeRustlsConnect as MakeTlsConnect<TcpStream>>::make_tls_connect(
                &mut make, &url.host,
            ) {
                Ok(connect) => connect,
                Err(never) => match never {},
            };
            let (client, connection) = config.connect_raw(stream, connect).await.map_err(fail)?;
            (client, tokio::spawn(drive(connection, notify)))
        }
    };
    Ok(Live { client, task })
}

/// Drives `connection` until it ends, handing each change number
/// announced on [`CHANNEL`] to `notify`. A full channel drops the number:
/// the receiver has a wake-up pending already, and reads the change
/// counter when it runs.
async fn drive<S, T>(mut connection: Connection<S, T>, notify: Option<mpsc::Sender<u64>>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
        match message {
            Some(Ok(AsyncMessage::Notification(note))) => {
                let Some(notify) = &notify else { continue };
                if note.channel() != CHANNEL {
                    continue;
                }
                let Ok(seq) = note.payload().parse::<u64>() else {
                    continue;
                };
                if let Err(mpsc::error::TrySendError::Closed(_)) = notify.try_send(seq) {
                    return;
                }
            }
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                tracing::debug!(%error, "tenant store connection ended");
                return;
            }
            None => return,
        }
    }
}
