//! `[forwarding]`: the forwarding headers the gateway adds for shards.

use serde::Deserialize;

/// What the gateway tells a shard about the client's address in
/// `x-forwarded-for`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForwardedFor {
    /// Keep the list the client sent and add the client's address after
    /// it (nginx's `$proxy_add_x_forwarded_for`, HAProxy's `option
    /// forwardfor`): right for a gateway behind a load balancer that adds
    /// its own. Only the last entry is the gateway's; the rest is the
    /// client's word.
    Append,
    /// Drop the client's list and send only the client's address: for a
    /// gateway at the edge, where nothing in front of it can vouch for a
    /// list.
    Replace,
    /// Send no `x-forwarded-for` at all, the client's included.
    Off,
}

/// The forwarding headers the gateway adds for shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardingSettings {
    /// `x-forwarded-for`.
    pub x_forwarded_for: ForwardedFor,
    /// Send `x-forwarded-host` (the client's `Host`). A client's own
    /// `x-forwarded-host` never passes either way.
    pub x_forwarded_host: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForwarding {
    x_forwarded_for: Option<ForwardedFor>,
    x_forwarded_host: Option<bool>,
}

/// `[forwarding]`, every key optional: `x-forwarded-for` appended to, and
/// `x-forwarded-host` sent.
pub(super) fn forwarding_settings(f: RawForwarding) -> ForwardingSettings {
    ForwardingSettings {
        x_forwarded_for: f.x_forwarded_for.unwrap_or(ForwardedFor::Append),
        x_forwarded_host: f.x_forwarded_host.unwrap_or(true),
    }
}
