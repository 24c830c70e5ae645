//! `[admin]`: the admin listener, its token, and what it serves without one.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, parse_addr, within};

/// The admin listener (operations API, metrics, status page).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdminSettings {
    /// Where the admin listener binds.
    pub listen: SocketAddr,
    /// File holding the admin bearer token.
    pub token_file: Option<PathBuf>,
    /// Serve `/metrics` without a token.
    pub metrics_without_token: bool,
    /// Serve the status page (`GET /`) without a token.
    pub status_page_without_token: bool,
    /// The window per-tenant availability and shard utilization cover.
    pub availability_window: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    listen: Option<String>,
    token_file: Option<String>,
    metrics_without_token: Option<bool>,
    status_page_without_token: Option<bool>,
    availability_window_seconds: Option<u64>,
}

pub(super) fn admin_settings(
    a: RawAdmin,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<AdminSettings, KeyProblem> {
    let listen = parse_addr(a.listen.as_deref().unwrap_or("127.0.0.1:9901"))
        .map_err(|problem| ("admin.listen", problem))?;
    let admin = AdminSettings {
        listen,
        token_file: a.token_file.as_deref().map(resolve),
        metrics_without_token: a.metrics_without_token.unwrap_or(false),
        status_page_without_token: a.status_page_without_token.unwrap_or(false),
        availability_window: Duration::from_secs(within(
            "admin.availability_window_seconds",
            a.availability_window_seconds.unwrap_or(60),
            10..=3600,
        )?),
    };
    // What is served without a token on a listener others can reach is
    // served to anyone: the status page lists every fully-down tenant's
    // subset. Refused rather than warned about.
    if !admin.listen.ip().to_canonical().is_loopback() {
        let open: Vec<&str> = [
            ("admin.metrics_without_token", admin.metrics_without_token),
            (
                "admin.status_page_without_token",
                admin.status_page_without_token,
            ),
        ]
        .into_iter()
        .filter_map(|(key, on)| on.then_some(key))
        .collect();
        if !open.is_empty() {
            return Err((
                "admin.listen",
                format!(
                    "{} is not a loopback address, and {} = true would serve it to anyone who can reach it; \
                     bind admin.listen to 127.0.0.1 (or ::1), or set {} = false and use admin.token_file",
                    admin.listen,
                    open.join(" and "),
                    open.join(" and ")
                ),
            ));
        }
    }
    Ok(admin)
}
