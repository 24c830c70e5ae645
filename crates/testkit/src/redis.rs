//! A `redis-server` of a test's own (Debian's package), for the global
//! limits, the fleet and the fleet drill: started on a free port (with TLS
//! too, when asked), killed, frozen, shut down empty and started again, as
//! the tests need.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A `redis-server` of the test's own, on a port of its own.
pub struct Redis {
    child: Child,
    /// Its plain port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    /// Arguments beyond the defaults (TLS), kept for a restart.
    extra: Vec<String>,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Redis {
    /// Starts one, or `None` (the test skips) when `redis-server` is not
    /// installed (CI fails instead: `testkit::skip`).
    pub async fn start() -> Option<Self> {
        Self::start_with(Vec::new()).await
    }

    /// [`Redis::start`] with TLS too, on a port of its own (returned) with
    /// the certificate and key in `cert` and `key`; clients need not show
    /// one. The plain port stays, for the readiness `PING`.
    pub async fn start_tls(cert: &Path, key: &Path) -> Option<(Self, u16)> {
        let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let extra = vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            cert.display().to_string(),
            "--tls-key-file".to_owned(),
            key.display().to_string(),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        Some((Self::start_with(extra).await?, tls_port))
    }

    /// Starts one with `extra` arguments.
    async fn start_with(extra: Vec<String>) -> Option<Self> {
        let installed = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !installed {
            crate::skip::missing("redis-server", "apt-get install redis-server");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        // redis-server cannot be told port 0 and report the port it got:
        // take a port the kernel handed out, let it go, and start again on
        // another if someone took it meanwhile.
        for _ in 0..20 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            if let Some(child) = Self::spawn(dir.path(), port, &extra).await {
                return Some(Self {
                    child,
                    port,
                    dir,
                    extra,
                });
            }
        }
        panic!("redis-server did not start on any of 20 ports");
    }

    /// Starts `redis-server` on `port`; `None` when it exits (the port was
    /// taken), once it answers `PING` otherwise.
    async fn spawn(dir: &Path, port: u16, extra: &[String]) -> Option<Child> {
        let log = std::fs::File::create(dir.join(format!("redis-{port}.log"))).unwrap();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--dir"])
            .arg(dir)
            .args(extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("redis-server starts");
        for _ in 0..500 {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.join(format!("redis-{port}.log")))
                    .unwrap_or_default();
                assert!(
                    log.contains("Address already in use"),
                    "redis-server exited ({status}): {log}"
                );
                return None;
            }
            if ping(port).await {
                return Some(child);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = child.kill();
        panic!("redis-server on port {port} did not answer PING");
    }

    /// Sends one inline command; the first reply line, with its CRLF.
    pub async fn command(&self, command: &str) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        stream
            .write_all(format!("{command}\r\n").as_bytes())
            .await
            .unwrap();
        let mut reply = Vec::new();
        while !reply.ends_with(b"\r\n") {
            let mut byte = [0_u8; 1];
            stream.read_exact(&mut byte).await.unwrap();
            reply.push(byte[0]);
        }
        String::from_utf8(reply).unwrap()
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills it (SIGKILL: no goodbye on its connections).
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends it `signal` (`STOP` freezes it with its connections open,
    /// `CONT` wakes it).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    /// Shuts it down as an operator would (`SHUTDOWN NOSAVE`: it closes
    /// its connections and forgets everything).
    pub async fn shut_down(&mut self) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        stream.write_all(b"SHUTDOWN NOSAVE\r\n").await.unwrap();
        let _ = stream.read(&mut [0_u8; 64]).await;
        self.child.wait().unwrap();
    }

    /// Starts it again on the same port.
    pub async fn restart(&mut self) {
        for _ in 0..100 {
            if let Some(child) = Self::spawn(self.dir.path(), self.port, &self.extra).await {
                self.child = child;
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server did not start again on port {}", self.port);
    }
}

async fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if stream.write_all(b"PING\r\n").await.is_err() {
        return false;
    }
    let mut answer = [0_u8; 7];
    stream.read_exact(&mut answer).await.is_ok() && &answer == b"+PONG\r\n"
}
