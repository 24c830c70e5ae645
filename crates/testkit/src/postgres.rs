//! A PostgreSQL 15 server of a test's own (Debian's `postgresql`), for the
//! tenant store: `initdb` into a temporary directory, a role with a
//! password and a database, listening on 127.0.0.1 only; stopped, killed,
//! frozen (SIGSTOP) and started again as the tests need.
//!
//! PostgreSQL refuses to run as root: when the tests run as root, the
//! server and its tools run as the `postgres` user (the data directory is
//! given to that user), which the Debian package creates.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where Debian installs PostgreSQL 15's programs (`PG_BIN` overrides).
const BIN: &str = "/usr/lib/postgresql/15/bin";

/// The role the tests log in as.
pub const USER: &str = "gateway";

/// The database the tests use.
pub const DATABASE: &str = "tenants";

/// A PostgreSQL server of the test's own, on a port of its own.
pub struct Postgres {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The role's password (in [`Postgres::url`]).
    pub password: String,
    bin: PathBuf,
    /// The user the server runs as, when the tests run as root.
    run_as: Option<(u32, u32)>,
    dir: tempfile::TempDir,
    /// Settings beyond the defaults (TLS), kept for a restart.
    extra: Vec<String>,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Postgres {
    /// Starts one, or `None` (the test skips) when PostgreSQL is not
    /// installed (CI fails instead: `testkit::skip`).
    pub async fn start() -> Option<Self> {
        Self::start_with(None).await
    }

    /// [`Postgres::start`] with TLS on (clients may still connect without
    /// it): the server's certificate and key, in PEM.
    pub async fn start_tls(cert_pem: &str, key_pem: &str) -> Option<Self> {
        Self::start_with(Some((cert_pem, key_pem))).await
    }

    async fn start_with(tls: Option<(&str, &str)>) -> Option<Self> {
        let bin = std::env::var_os("PG_BIN").map_or_else(|| PathBuf::from(BIN), PathBuf::from);
        if !bin.join("initdb").exists() {
            crate::skip::missing(
                "PostgreSQL 15",
                "apt-get install postgresql, or set PG_BIN to the directory holding initdb and postgres",
            );
            return None;
        }
        let run_as = running_as_root().then(postgres_user);
        let mut server = Self {
            child: None,
            port: 0,
            password: format!("pw-{:08x}", random()),
            bin,
            run_as,
            dir: tempfile::tempdir().unwrap(),
            extra: Vec::new(),
        };
        if let Some((cert_pem, key_pem)) = tls {
            let cert = server.dir.path().join("server.crt");
            let key = server.dir.path().join("server.key");
            std::fs::write(&cert, cert_pem).unwrap();
            std::fs::write(&key, key_pem).unwrap();
            // PostgreSQL refuses a key others may read.
            set_mode(&key, 0o600);
            server.extra = vec![
                "ssl=on".to_owned(),
                format!("ssl_cert_file={}", cert.display()),
                format!("ssl_key_file={}", key.display()),
            ];
        }
        server.give(server.dir.path());
        server.init();
        for _ in 0..20 {
            server.port = unclaimed_port();
            if server.spawn().await {
                server.create_role();
                return Some(server);
            }
        }
        panic!("postgres did not start on any of 20 ports");
    }

    /// Its data directory (owned by the `postgres` user when the test
    /// runs as root): copy it while the server is stopped to start a
    /// server later from what it held then.
    pub fn data_dir(&self) -> PathBuf {
        self.data()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A command for one of PostgreSQL's programs, run as its user.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        command.env("LC_ALL", "C");
        command
    }

    /// Hands `path` (recursively) to the server's user.
    fn give(&self, path: &Path) {
        if let Some((uid, gid)) = self.run_as {
            let status = Command::new("chown")
                .args(["-R", &format!("{uid}:{gid}")])
                .arg(path)
                .status()
                .unwrap();
            assert!(status.success(), "chown {}", path.display());
        }
    }

    fn init(&self) {
        // Trust on the Unix socket, which lives in the test's private
        // directory; a password over TCP, as a real deployment has.
        let output = self
            .command("initdb")
            .arg("-D")
            .arg(self.data())
            .args(["-U", "postgres", "-E", "UTF8", "--no-sync"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Starts the server on `self.port`; `false` when the port was taken,
    /// once it accepts connections otherwise.
    async fn spawn(&mut self) -> bool {
        let log_path = self.dir.path().join(format!("postgres-{}.log", self.port));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"])
            // No fsync: a commit still reaches the kernel before it is
            // acknowledged (so it survives a SIGKILL), just not the disk.
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"]);
        for setting in &self.extra {
            command.args(["-c", setting]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("postgres starts");
        for _ in 0..1000 {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                assert!(
                    log.contains("Address already in use") || log.contains("could not bind"),
                    "postgres exited ({status}): {log}"
                );
                return false;
            }
            if self.ready() {
                self.child = Some(child);
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = child.kill();
        panic!("postgres on port {} did not accept connections", self.port);
    }

    fn ready(&self) -> bool {
        self.command("pg_isready")
            .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    fn create_role(&self) {
        // Two commands: CREATE DATABASE cannot share a transaction.
        self.psql_as(
            "postgres",
            &format!("CREATE ROLE {USER} LOGIN PASSWORD '{}'", self.password),
        );
        self.psql_as(
            "postgres",
            &format!("CREATE DATABASE {DATABASE} OWNER {USER}"),
        );
    }

    /// Runs `sql` in the test database as the superuser (over the Unix
    /// socket); what `psql` printed (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        self.psql_as(DATABASE, sql)
    }

    fn psql_as(&self, database: &str, sql: &str) -> String {
        let output = self
            .command("psql")
            .arg("-h")
            .arg(self.dir.path())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                database,
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-X", "-A", "-t", "-c", sql])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// `postgres://gateway:PASSWORD@127.0.0.1:PORT/tenants`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{USER}:{}@127.0.0.1:{}/{DATABASE}",
            self.password, self.port
        )
    }

    /// The server's process and its children (the backends).
    fn processes(&self) -> Vec<u32> {
        let Some(child) = &self.child else {
            return Vec::new();
        };
        let root = child.id();
        let mut all = vec![root];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may hold spaces and parens.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if parent == Some(root) {
                all.push(pid);
            }
        }
        all
    }

    /// Sends `signal` to the server and its backends (`STOP` freezes them
    /// with their connections open, `CONT` wakes them).
    pub fn signal(&self, signal: &str) {
        let pids: Vec<String> = self.processes().iter().map(u32::to_string).collect();
        if pids.is_empty() {
            return;
        }
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .args(&pids)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        let _ = status;
    }

    /// Kills it (SIGKILL, backends too: no goodbye on any connection).
    pub fn kill(&mut self) {
        let pids = self.processes();
        self.signal("KILL");
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        // The backends are not our children: wait until they are gone, so
        // a restart finds no shared memory still attached.
        for pid in pids {
            for _ in 0..500 {
                if !Path::new(&format!("/proc/{pid}")).exists()
                    || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .is_ok_and(|stat| stat.contains(") Z "))
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Stops it as an operator would (a fast shutdown: sessions are ended
    /// with a goodbye).
    pub fn stop(&mut self) {
        self.signal("INT");
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, with the same data.
    pub async fn restart(&mut self) {
        for _ in 0..100 {
            if self.spawn().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("postgres did not start again on port {}", self.port);
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// The `postgres` user's uid and gid (the Debian package creates it).
fn postgres_user() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "running as root, and there is no postgres user to run PostgreSQL as (apt-get install postgresql creates one)"
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    (id("-u"), id("-g"))
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn random() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now()) as u32
}

/// A port free now, below the kernel's ephemeral range (32768 and up on
/// Linux): a port from `bind(0)`, released, may be handed to an outgoing
/// connection before the server binds it.
fn unclaimed_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    let seed = RandomState::new();
    for attempt in 0_u64..10_000 {
        let port = 20_000 + (seed.hash_one(attempt) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port from 20000 to 31999");
}
