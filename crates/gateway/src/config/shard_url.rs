//! A shard's URL, parsed once when the configuration is loaded into the
//! address the gateway connects to: scheme, host and a port that is known
//! (written, or the scheme's own), so nothing later can fall back to a
//! default port for one that did not parse.
//!
//! `http::Uri` takes `http://127.0.0.1:99999` and `http://h:notaport`
//! (its port is then simply absent), `user:pass@` before the host, and
//! drops a `#fragment` without a word: each would reach somewhere the
//! operator did not write, or put a password in a `Host` header. Here
//! each is refused with what to write instead, and the error never
//! repeats a password.

use std::fmt;
use std::num::NonZeroU16;

use thiserror::Error;

/// A shard's base URL: `http://` or `https://`, a host, a port from 1 to
/// 65535 (80 or 443 when none is written), and an optional path prefix.
#[derive(Clone, PartialEq, Eq)]
pub struct ShardUrl {
    /// The URL as written (validated).
    uri: http::Uri,
    /// `https://`.
    tls: bool,
    /// The host as written (an IPv6 address in brackets).
    host: String,
    port: NonZeroU16,
    /// `host:port`, the port always there.
    address: String,
}

/// Why a shard's URL was refused. No variant carries the user information
/// (`user:pass@`) of the URL it was given.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShardUrlError {
    /// Not a URL at all.
    #[error("{0:?} is not a URL; write e.g. \"http://127.0.0.1:9100\"")]
    NotAUrl(String),
    /// A scheme other than `http` or `https`, or none.
    #[error("{0:?}: a backend URL is http:// or https://, e.g. \"https://shard-1.internal:9443\"")]
    Scheme(String),
    /// No host (`http://`, `http://:9100`).
    #[error("{0:?} has no host; write the shard's host, e.g. \"http://10.0.0.5:9100\"")]
    NoHost(String),
    /// A port that is not a number from 1 to 65535 (the text after the
    /// host's `:`).
    #[error(
        "{url:?}: the port {port:?} is not a number from 1 to 65535; write the shard's port, e.g. \"http://10.0.0.5:9100\", or leave it out for 80 (http) or 443 (https)"
    )]
    Port {
        /// The URL (without user information).
        url: String,
        /// What stood where the port goes.
        port: String,
    },
    /// `user:pass@` before the host: the gateway would send it to the shard
    /// as part of `Host`, and it is not how the gateway authenticates to
    /// shards.
    #[error(
        "{0:?}: user information (user:password@) is not allowed in a shard URL; remove it (the gateway authenticates to shards with [upstream.tls] client certificates)"
    )]
    UserInfo(String),
    /// A `?query`.
    #[error("{0:?}: a backend URL cannot have a query; remove everything from '?'")]
    Query(String),
    /// A `#fragment`, which `http::Uri` would silently drop.
    #[error("{0:?}: a backend URL cannot have a fragment; remove everything from '#'")]
    Fragment(String),
}

impl ShardUrl {
    /// Parses and checks `text`.
    pub fn parse(text: &str) -> Result<Self, ShardUrlError> {
        let shown = || redacted(text);
        // `http::Uri` drops a fragment silently: look at the text itself.
        if text.contains('#') {
            return Err(ShardUrlError::Fragment(shown()));
        }
        let uri: http::Uri = text.parse().map_err(|_| ShardUrlError::NotAUrl(shown()))?;
        Self::from_uri(&uri).map_err(|error| match error {
            // The text as written, not as the parser put it back together.
            ShardUrlError::Port { port, .. } => ShardUrlError::Port { url: shown(), port },
            ShardUrlError::NotAUrl(_) => ShardUrlError::NotAUrl(shown()),
            ShardUrlError::Scheme(_) => ShardUrlError::Scheme(shown()),
            ShardUrlError::NoHost(_) => ShardUrlError::NoHost(shown()),
            ShardUrlError::UserInfo(_) => ShardUrlError::UserInfo(shown()),
            ShardUrlError::Query(_) => ShardUrlError::Query(shown()),
            ShardUrlError::Fragment(_) => ShardUrlError::Fragment(shown()),
        })
    }

    /// Checks a URL already parsed by `http` (one that cannot carry a
    /// fragment any more).
    pub fn from_uri(uri: &http::Uri) -> Result<Self, ShardUrlError> {
        let shown = || redacted(&uri.to_string());
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(ShardUrlError::Scheme(shown())),
        };
        let Some(authority) = uri.authority() else {
            return Err(ShardUrlError::NoHost(shown()));
        };
        let authority = authority.as_str();
        if authority.contains('@') {
            return Err(ShardUrlError::UserInfo(shown()));
        }
        // An IPv6 host is in brackets, and has colons of its own.
        let (host, port) = match authority.strip_prefix('[') {
            Some(rest) => {
                let Some(end) = rest.find(']') else {
                    return Err(ShardUrlError::NotAUrl(shown()));
                };
                let (host, after) = authority.split_at(end + 2);
                match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None if after.is_empty() => (host, None),
                    None => return Err(ShardUrlError::NotAUrl(shown())),
                }
            }
            None => match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            },
        };
        if host.is_empty() || host == "[]" {
            return Err(ShardUrlError::NoHost(shown()));
        }
        let port = match port {
            None => NonZeroU16::new(if tls { 443 } else { 80 }).expect("not zero"),
            // Digits only: `u16::from_str` would take a `+`.
            Some(text) => text
                .bytes()
                .all(|byte| byte.is_ascii_digit())
                .then(|| text.parse::<NonZeroU16>().ok())
                .flatten()
                .ok_or_else(|| ShardUrlError::Port {
                    url: shown(),
                    port: text.to_owned(),
                })?,
        };
        if uri.query().is_some() {
            return Err(ShardUrlError::Query(shown()));
        }
        Ok(Self {
            uri: uri.clone(),
            tls,
            host: host.to_owned(),
            port,
            address: format!("{host}:{port}"),
        })
    }

    /// The URL as written.
    pub fn uri(&self) -> &http::Uri {
        &self.uri
    }

    /// Whether it is an `https://` shard.
    pub fn is_https(&self) -> bool {
        self.tls
    }

    /// The host as written (an IPv6 address in brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port connected to: the written one, or the scheme's.
    pub fn port(&self) -> u16 {
        self.port.get()
    }

    /// `host:port`, as a TCP connect takes it.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl fmt::Debug for ShardUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.uri, f)
    }
}

impl fmt::Display for ShardUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.uri, f)
    }
}

impl std::str::FromStr for ShardUrl {
    type Err = ShardUrlError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// `text` with whatever stands between `://` and its last `@` replaced by
/// `***`, so a password never reaches an error. The last `@` anywhere, not
/// only in the authority: a refused URL's authority may not end where a
/// parser would end it (`http://u:pa/ss@h`, `http://u:p#ss@h`), and hiding
/// part of a path in an error costs less than showing a password.
fn redacted(text: &str) -> String {
    let start = text.find("://").map_or(0, |at| at + 3);
    match text[start..].rfind('@') {
        Some(at) => format!("{}***{}", &text[..start], &text[start + at..]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ShardUrl {
        ShardUrl::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    #[test]
    fn ports_are_written_or_the_schemes_own() {
        let url = parsed("http://127.0.0.1:9100/api/");
        assert_eq!(
            (url.address(), url.host(), url.port()),
            ("127.0.0.1:9100", "127.0.0.1", 9100)
        );
        assert!(!url.is_https());
        assert_eq!(url.uri().path(), "/api/");
        assert_eq!(
            parsed("http://shard.internal").address(),
            "shard.internal:80"
        );
        let tls = parsed("https://[::1]/api");
        assert_eq!((tls.address(), tls.host()), ("[::1]:443", "[::1]"));
        assert!(tls.is_https());
        assert_eq!(parsed("https://[::1]:9443").address(), "[::1]:9443");
        assert_eq!(parsed("http://h:65535").port(), 65535);
        assert_eq!(parsed("http://h:1").port(), 1);
        assert_eq!(parsed("http://h:08080").port(), 8080);
    }

    #[test]
    fn a_port_that_does_not_parse_is_refused_never_defaulted() {
        for (text, port) in [
            ("http://127.0.0.1:99999", "99999"),
            ("http://127.0.0.1:65536", "65536"),
            ("https://127.0.0.1:notaport", "notaport"),
            ("http://127.0.0.1:0", "0"),
            ("http://127.0.0.1:", ""),
            ("http://127.0.0.1:+80", "+80"),
            ("http://[::1]:99999/api", "99999"),
        ] {
            match ShardUrl::parse(text) {
                Err(ShardUrlError::Port { port: got, url }) => {
                    assert_eq!(got, port, "{text}");
                    assert_eq!(url, text);
                }
                other => panic!("{text}: {other:?}"),
            }
            let error = ShardUrl::parse(text).unwrap_err().to_string();
            assert!(
                error.contains("1 to 65535") && error.contains("port"),
                "{error}"
            );
        }
        // The same through a Uri parsed elsewhere (`Upstream::new`).
        let uri: http::Uri = "http://127.0.0.1:99999".parse().unwrap();
        assert_eq!(
            uri.port_u16(),
            None,
            "http gives no port, hence the old default"
        );
        assert!(matches!(
            ShardUrl::from_uri(&uri),
            Err(ShardUrlError::Port { .. })
        ));
    }

    #[test]
    fn user_information_hosts_fragments_and_queries_are_refused() {
        let error = ShardUrl::parse("http://admin:hunter2@10.0.0.1:9100/").unwrap_err();
        assert!(matches!(error, ShardUrlError::UserInfo(_)), "{error:?}");
        let shown = format!("{error} {error:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("admin"),
            "{shown}"
        );
        assert!(shown.contains("10.0.0.1:9100"), "{shown}");
        // Even when the rest does not parse.
        let error = ShardUrl::parse("http://admin:hunter2@10.0.0.1:x y").unwrap_err();
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        for text in ["http://", "http://:9100", "http://[]:80"] {
            assert!(
                matches!(
                    ShardUrl::parse(text),
                    Err(ShardUrlError::NoHost(_) | ShardUrlError::NotAUrl(_))
                ),
                "{text}"
            );
        }
        assert!(matches!(
            ShardUrl::parse("http://h:80/#x"),
            Err(ShardUrlError::Fragment(_))
        ));
        assert!(matches!(
            ShardUrl::parse("http://h:80/?a=1"),
            Err(ShardUrlError::Query(_))
        ));
        assert!(matches!(
            ShardUrl::parse("ftp://h:21"),
            Err(ShardUrlError::Scheme(_))
        ));
        assert!(matches!(
            ShardUrl::parse("/just/a/path"),
            Err(ShardUrlError::Scheme(_))
        ));
    }

    #[test]
    fn redaction_hides_user_information_only() {
        assert_eq!(redacted("http://u:p@h:1/a"), "http://***@h:1/a");
        assert_eq!(redacted("http://h:1/a"), "http://h:1/a");
        // A password whose authority a parser would end early is hidden all
        // the same.
        assert_eq!(redacted("http://u:pa/ss@h:99999"), "http://***@h:99999");
        assert_eq!(redacted("http://u:p#ss@h"), "http://***@h");
        assert_eq!(redacted("http://u:p?ss@h"), "http://***@h");
        assert_eq!(redacted("u:p@h"), "***@h");
    }
}
