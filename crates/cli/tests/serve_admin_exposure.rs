//! `shuffle-shard serve` refuses to start an admin listener that other
//! hosts can reach with a page served without the admin token: it exits
//! with status 2 and one line on stderr naming both keys, before anything
//! listens.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// A configuration whose admin listener is on every interface and serves
/// `key` without the token, in `dir`.
fn write_config(dir: &std::path::Path, key: &str) -> std::path::PathBuf {
    let placement_key: Vec<u8> = (0..32).map(|_| fastrand::u8(..)).collect();
    std::fs::write(dir.join("placement.key"), placement_key).unwrap();
    std::fs::write(
        dir.join("tenants.toml"),
        format!(
            "[[tenants]]\nid = \"t\"\napi_key_sha256 = \"{}\"\n",
            "ab".repeat(32)
        ),
    )
    .unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:0\"\ntenants_file = \"tenants.toml\"\n\n\
             [placement]\nalgorithm = \"rendezvous\"\nk = 1\nkey_file = \"placement.key\"\nkey_version = \"v1\"\n\n\
             [admin]\nlisten = \"0.0.0.0:0\"\n{key} = true\n\n\
             [[cells]]\nname = \"main\"\nshards = [{{ id = \"s0\", url = \"http://127.0.0.1:9\" }}]\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn serve_refuses_tokenless_admin_pages_on_a_non_loopback_listener() {
    for key in ["status_page_without_token", "metrics_without_token"] {
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path(), key);
        let mut child = Command::new(env!("CARGO_BIN_EXE_shuffle-shard"))
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A guard against a hang, not a timing: a gateway that started and
        // never said so is killed (by its id) after a minute.
        let (done, watched) = std::sync::mpsc::channel::<()>();
        let pid = child.id().to_string();
        let guard = std::thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = watched.recv_timeout(Duration::from_secs(60)) {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        });
        // Read stderr to its end (the process exiting closes it); a gateway
        // that starts instead says so, and is stopped here.
        let mut lines = Vec::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            if line.contains("gateway listening") {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{key}: serve started with admin.listen = 0.0.0.0:0: {line}");
            }
            lines.push(line);
        }
        let status = child.wait().unwrap();
        let _ = done.send(());
        guard.join().unwrap();
        let lines: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(status.code(), Some(2), "{key}: {status}: {lines:?}");
        assert_eq!(lines.len(), 1, "{key}: {lines:?}");
        assert!(
            lines[0].contains("admin.listen") && lines[0].contains(key),
            "{key}: {}",
            lines[0]
        );
        assert!(!lines[0].contains("panicked"), "{}", lines[0]);
    }
}
