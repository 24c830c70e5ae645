//! A `dnsmasq` of a test's own (Debian's `dnsmasq-base`), serving the SRV,
//! A and TXT records a test gives it on a free 127.0.0.1 port, for DNS
//! discovery: its records replaced, and the server stopped and started
//! again, always on the same port.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::net::UdpSocket;

/// Where Debian installs it (`dnsmasq-base`); `PATH` is tried too, since
/// `/usr/sbin` is not on every user's.
const DNSMASQ: &str = "/usr/sbin/dnsmasq";

/// One record dnsmasq serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// `name SRV priority weight port target` (`--srv-host`).
    Srv {
        /// The SRV name, e.g. `_shards._tcp.example.internal`.
        name: String,
        /// The target host, e.g. `shard-1.zone-a.example.internal`.
        target: String,
        /// The port.
        port: u16,
        /// The priority.
        priority: u16,
        /// The weight.
        weight: u16,
    },
    /// `name A ip` or `name AAAA ip` (`--host-record`).
    A {
        /// The host name.
        name: String,
        /// Its address (IPv4 gives an A record, IPv6 an AAAA).
        ip: IpAddr,
    },
    /// `name TXT text` (`--txt-record`; a comma in `text` splits it into
    /// several strings, as dnsmasq reads it).
    Txt {
        /// The name.
        name: String,
        /// The text.
        text: String,
    },
}

impl Record {
    /// An SRV record of priority 0 and weight 0.
    pub fn srv(name: &str, target: &str, port: u16) -> Self {
        Self::Srv {
            name: name.to_owned(),
            target: target.to_owned(),
            port,
            priority: 0,
            weight: 0,
        }
    }

    /// An A (or AAAA) record; panics on an address that does not parse.
    pub fn a(name: &str, ip: &str) -> Self {
        Self::A {
            name: name.to_owned(),
            ip: ip.parse().expect("an IP address"),
        }
    }

    /// A TXT record.
    pub fn txt(name: &str, text: &str) -> Self {
        Self::Txt {
            name: name.to_owned(),
            text: text.to_owned(),
        }
    }

    /// The dnsmasq option that serves it.
    pub fn arg(&self) -> String {
        match self {
            Self::Srv {
                name,
                target,
                port,
                priority,
                weight,
            } => format!("--srv-host={name},{target},{port},{priority},{weight}"),
            Self::A { name, ip } => format!("--host-record={name},{ip}"),
            Self::Txt { name, text } => format!("--txt-record={name},{text}"),
        }
    }
}

/// The records that make each `(id, port)` on 127.0.0.1 a target of the
/// SRV name `service` (`_shards._tcp.DOMAIN`): an SRV record pointing at
/// `ID.DOMAIN` on that port, and that name's A record.
pub fn shards(service: &str, shards: &[(&str, u16)]) -> Vec<Record> {
    let domain = service.splitn(3, '.').nth(2).unwrap_or(service);
    shards
        .iter()
        .flat_map(|(id, port)| {
            let target = format!("{id}.{domain}");
            [
                Record::srv(service, &target, *port),
                Record::a(&target, "127.0.0.1"),
            ]
        })
        .collect()
}

/// A `dnsmasq` of the test's own, on 127.0.0.1, UDP and TCP. Killed on
/// drop.
pub struct Dnsmasq {
    child: Option<Child>,
    port: u16,
    records: Vec<Record>,
    /// The TTL of every record (`--local-ttl`).
    ttl: u32,
    binary: PathBuf,
    /// Its log (stderr), read when it fails to start.
    dir: tempfile::TempDir,
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Dnsmasq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dnsmasq")
            .field("port", &self.port)
            .field("running", &self.child.is_some())
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

impl Dnsmasq {
    /// Starts one serving `records` with TTL 0, once it answers; `None`
    /// (the test skips) when dnsmasq is not installed (CI fails instead:
    /// `testkit::skip`).
    pub async fn start(records: Vec<Record>) -> Option<Self> {
        Self::start_with_ttl(records, 0).await
    }

    /// [`Dnsmasq::start`] with every record's TTL `ttl` seconds: a client
    /// that must not cache can be shown to ignore a long one.
    pub async fn start_with_ttl(records: Vec<Record>, ttl: u32) -> Option<Self> {
        let Some(binary) = find_binary() else {
            crate::skip::missing("dnsmasq", "apt-get install dnsmasq-base");
            return None;
        };
        let mut server = Self {
            child: None,
            port: 0,
            records,
            ttl,
            binary,
            dir: tempfile::tempdir().unwrap(),
        };
        // dnsmasq cannot be told port 0 and report the port it got: take a
        // port free for both UDP and TCP, let it go, and try another when
        // someone took it meanwhile.
        for _ in 0..20 {
            server.port = free_port();
            if server.spawn().await {
                return Some(server);
            }
        }
        panic!("dnsmasq did not start on any of 20 ports");
    }

    /// Its port on 127.0.0.1 (UDP and TCP).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, for `discovery.resolver`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port)
    }

    /// The records it serves.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Serves `records` instead, on the same port: dnsmasq reads
    /// command-line records once, so this is a restart.
    pub async fn set_records(&mut self, records: Vec<Record>) {
        self.stop();
        self.records = records;
        self.restart().await;
    }

    /// Kills it (SIGKILL); the port is kept for [`Dnsmasq::restart`].
    /// Queries meanwhile go unanswered (UDP) or are refused (TCP).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, with the same records, once it
    /// answers. Does nothing when it runs.
    pub async fn restart(&mut self) {
        if self.child.is_some() {
            return;
        }
        // The port was ours a moment ago; another process may hold it
        // briefly (a client's ephemeral port), so try for a while.
        for _ in 0..100 {
            if self.spawn().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("dnsmasq did not start again on port {}", self.port);
    }

    /// Starts dnsmasq on `self.port`; `false` when it exits because the
    /// port is taken, `true` once it answers.
    async fn spawn(&mut self) -> bool {
        let log_path = self.dir.path().join(format!("dnsmasq-{}.log", self.port));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut child = Command::new(&self.binary)
            .args(args(self.port, self.ttl, &self.records))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dnsmasq starts");
        for _ in 0..500 {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                assert!(
                    log.contains("Address already in use"),
                    "dnsmasq exited ({status}): {log}"
                );
                return false;
            }
            if answers(self.port).await {
                self.child = Some(child);
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("dnsmasq on port {} did not answer", self.port);
    }
}

/// dnsmasq's arguments for `port`, `ttl` and `records`.
fn args(port: u16, ttl: u32, records: &[Record]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--no-daemon",
        // Nothing from the machine: no /etc/dnsmasq.conf, no upstream
        // servers, no /etc/hosts.
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        // Every name is local: a name it has no record of is NXDOMAIN (or
        // NODATA), as from an authoritative server, not REFUSED for want
        // of an upstream.
        "--local=/#/",
        "--listen-address=127.0.0.1",
        "--bind-interfaces",
        // No pid file: parallel tests' servers would share the default one.
        "--pid-file=",
        // dnsmasq drops root for a user named at build time ("dnsmasq" or
        // "nobody"), missing in some containers; staying root is harmless
        // for a test, and the option is ignored when not started as root.
        "--user=root",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    args.push(format!("--port={port}"));
    args.push(format!("--local-ttl={ttl}"));
    args.extend(records.iter().map(Record::arg));
    args
}

/// The dnsmasq binary: Debian's path, or one on `PATH`.
fn find_binary() -> Option<PathBuf> {
    let runs = |path: &Path| {
        Command::new(path)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    [PathBuf::from(DNSMASQ), PathBuf::from("dnsmasq")]
        .into_iter()
        .find(|path| runs(path))
}

/// A port on 127.0.0.1 free for both UDP and TCP at the moment (DNS
/// servers take both), below the kernel's ephemeral range, and never
/// handed out twice by this process. A port from the ephemeral range (what
/// `bind(0)` gives) may be taken by any outgoing connection once its
/// server stops, and held for a minute in TIME_WAIT: a dnsmasq restarted
/// on it then failed to bind for longer than any wait (seen once in CI).
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let (low, high) = ((ephemeral_low / 3).max(1024), ephemeral_low.max(2048));
    let seed = RandomState::new();
    for attempt in 0_u64..100_000 {
        let port = low + (seed.hash_one(attempt) % u64::from(high - low)) as u16;
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if handed_out.contains(&port) {
            continue;
        }
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if udp.is_ok() && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no port free for UDP and TCP from {low} to {high} on 127.0.0.1");
}

/// Whether a DNS server on `port` answers a query at all (any answer: a
/// server that answers is up).
async fn answers(port: u16) -> bool {
    let Ok(socket) = UdpSocket::bind("127.0.0.1:0").await else {
        return false;
    };
    if socket.connect(("127.0.0.1", port)).await.is_err() {
        return false;
    }
    let query = query(0x5eed, "ready.testkit.invalid", 1);
    if socket.send(&query).await.is_err() {
        return false;
    }
    let mut reply = [0_u8; 512];
    matches!(
        tokio::time::timeout(Duration::from_millis(100), socket.recv(&mut reply)).await,
        Ok(Ok(n)) if n >= 2 && reply[..2] == query[..2]
    )
}

/// A DNS query for `name` of type `kind` (1: A, 33: SRV), id `id`,
/// recursion desired.
pub fn query(id: u16, name: &str, kind: u16) -> Vec<u8> {
    let mut message = Vec::with_capacity(name.len() + 18);
    message.extend_from_slice(&id.to_be_bytes());
    // Flags: RD; one question, no other records.
    message.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        message.push(u8::try_from(label.len()).expect("a label of at most 63 bytes"));
        message.extend_from_slice(label.as_bytes());
    }
    message.push(0);
    message.extend_from_slice(&kind.to_be_bytes());
    message.extend_from_slice(&1_u16.to_be_bytes());
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_become_dnsmasq_options() {
        assert_eq!(
            Record::srv("_s._tcp.x", "a.x", 8080).arg(),
            "--srv-host=_s._tcp.x,a.x,8080,0,0"
        );
        assert_eq!(
            Record::a("a.x", "127.0.0.2").arg(),
            "--host-record=a.x,127.0.0.2"
        );
        assert_eq!(Record::a("a.x", "::1").arg(), "--host-record=a.x,::1");
        assert_eq!(
            Record::txt("a.x", "zone=eu").arg(),
            "--txt-record=a.x,zone=eu"
        );
    }

    #[test]
    fn a_query_is_a_header_and_one_question() {
        let query = query(0x1234, "a.bc", 33);
        assert_eq!(
            query,
            [
                0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'a', 2, b'b', b'c', 0, 0, 33, 0, 1
            ]
        );
    }

    #[tokio::test]
    async fn it_answers_and_keeps_its_port() {
        let Some(mut dnsmasq) = Dnsmasq::start(vec![Record::a("a.test", "127.0.0.9")]).await else {
            return;
        };
        let port = dnsmasq.port();
        assert!(answers(port).await);
        dnsmasq.stop();
        assert!(!answers(port).await);
        dnsmasq.restart().await;
        assert_eq!(dnsmasq.port(), port);
        assert!(answers(port).await);
        dnsmasq.set_records(Vec::new()).await;
        assert_eq!(dnsmasq.port(), port);
        assert!(answers(port).await);
    }
}
