//! `shuffle-shard backend` as a real process: it answers as the shard it was
//! named (over HTTP/1.1, or gRPC with `grpc-call` as the client), switches
//! mode through its control API, and exits 0 on SIGTERM.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::terminate;

/// Where the OS picks a port: the backend says which in its first line, so
/// no port chosen in advance can be taken by another test meanwhile.
const ANY_PORT: &str = "127.0.0.1:0";

/// A running backend, its data address and its control address (when it
/// has one), read from the line it prints once it listens.
fn spawn(args: &[&str]) -> (Child, String, Option<String>) {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .arg("backend")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    // The rest of what it prints, drained so that it never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let after = |marker: &str| {
        let (_, rest) = line.split_once(marker)?;
        let end = rest.find([' ', ',', ')', '\n']).unwrap_or(rest.len());
        Some(rest[..end].to_owned())
    };
    let addr = after("listening on http://").unwrap_or_else(|| panic!("no address in {line:?}"));
    let control = after("control API on http://");
    (child, addr, control)
}

/// Connects once the child listens on `addr`.
fn connect(child: &mut Child, addr: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    let stream = loop {
        match TcpStream::connect(addr) {
            Ok(stream) => break stream,
            Err(error) => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("backend exited with {status} before listening");
                }
                assert!(Instant::now() < deadline, "no listener on {addr}: {error}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// One request with `connection: close`: the status and the body.
fn call(child: &mut Child, addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = connect(child, addr);
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let Some((head, body)) = response.split_once("\r\n\r\n") else {
        return (0, response);
    };
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}

#[test]
fn backend_answers_as_its_shard_and_stops_on_sigterm() {
    let (mut child, addr, _) = spawn(&["--listen", ANY_PORT, "--id", "s0"]);
    let (status, body) = call(&mut child, &addr, "GET", "/x", "");
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["shard"], "s0");
    assert_eq!(body["path"], "/x");
    terminate(child, "backend");
}

#[test]
fn the_control_api_switches_the_running_backend() {
    let (mut child, addr, control) = spawn(&[
        "--listen",
        ANY_PORT,
        "--id",
        "s3",
        "--mode",
        "health-garbage",
        "--control",
        ANY_PORT,
    ]);
    let control = control.expect("the control API's address");
    assert_eq!(
        call(&mut child, &control, "GET", "/mode", ""),
        (200, "health-garbage".into())
    );
    let (status, garbage) = call(&mut child, &addr, "GET", "/healthz", "");
    assert_eq!(status, 0, "not HTTP: {garbage:?}");

    assert_eq!(call(&mut child, &control, "PUT", "/mode", "healthy").0, 204);
    assert_eq!(call(&mut child, &addr, "GET", "/healthz", "").0, 200);

    let (status, message) = call(&mut child, &control, "PUT", "/mode", "trickle:0");
    assert_eq!(status, 400, "{message}");
    assert!(
        message.contains("trickle:0") && message.contains("health-stall"),
        "{message}"
    );
    assert_eq!(
        call(&mut child, &control, "GET", "/mode", ""),
        (200, "healthy".into())
    );
    terminate(child, "backend");
}

#[test]
fn a_bad_mode_is_refused_with_the_valid_ones() {
    let output = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .args(["backend", "--mode", "health-huge:x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("health-huge:x"), "{stderr}");
}

/// `shuffle-shard grpc-call` with `args`: its exit status, stdout and
/// stderr.
fn grpc_call(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .arg("grpc-call")
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_grpc_backend_answers_grpc_call_and_its_control_api_breaks_it() {
    let (mut child, addr, control) = spawn(&[
        "--listen",
        ANY_PORT,
        "--id",
        "g0",
        "--protocol",
        "grpc",
        "--control",
        ANY_PORT,
    ]);
    let control = control.expect("the control API's address");
    let url = format!("http://{addr}");
    connect(&mut child, &addr);
    let (code, stdout, stderr) = grpc_call(&["--url", &url, "--text", "hi"]);
    assert_eq!(code, Some(0), "{stderr}");
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(answer["shard"], "g0");
    assert_eq!(answer["text"], "hi");
    let (code, stdout, stderr) = grpc_call(&["--url", &url, "--count", "3"]);
    assert_eq!(code, Some(0), "{stderr}");
    let indices: Vec<u64> = stdout
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["index"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(indices, [0, 1, 2]);

    // The byte-level HTTP/1.1 faults are refused, the gRPC ones taken.
    let (status, message) = call(&mut child, &control, "PUT", "/mode", "stall-body");
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("--protocol grpc"), "{message}");
    assert_eq!(
        call(&mut child, &control, "PUT", "/mode", "errors:503:1").0,
        204
    );
    let (code, _, stderr) = grpc_call(&["--url", &url]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("Unavailable (14)"), "{stderr}");
    terminate(child, "backend");
}

#[test]
fn a_grpc_backend_refuses_a_byte_level_mode_at_start() {
    let output = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .args(["backend", "--protocol", "grpc", "--mode", "health-stall"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("health-stall") && stderr.contains("errors:STATUS:RATE"),
        "{stderr}"
    );
    let output = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .args(["backend", "--protocol", "h3"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("grpc"));
}

#[test]
fn grpc_call_to_nothing_exits_1_and_a_bad_url_exits_2() {
    let port = {
        // Bound and dropped: refused, for the moment this test needs.
        let listener = std::net::TcpListener::bind(ANY_PORT).unwrap();
        listener.local_addr().unwrap().port()
    };
    let (code, _, stderr) = grpc_call(&["--url", &format!("http://127.0.0.1:{port}")]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is it listening?"), "{stderr}");
    let (code, _, stderr) = grpc_call(&["--url", "https://127.0.0.1:1"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--url"), "{stderr}");
}

/// Issue 29: `--protocol ws` is a WebSocket echo server. Through a real
/// socket with a real client: the upgrade is accepted on any path, text
/// and binary messages come back as sent, a ping gets its pong, a close
/// gets a close; a plain GET (the gateway's health check) gets 200 naming
/// the shard; and it exits 0 on SIGTERM.
#[test]
fn a_ws_backend_echoes_text_and_binary_answers_pings_and_closes_cleanly() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let (mut child, addr, control) =
        spawn(&["--listen", ANY_PORT, "--id", "w7", "--protocol", "ws"]);
    assert_eq!(control, None);
    let (status, body) = call(&mut child, &addr, "GET", "/healthz", "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"shard\":\"w7\""), "{body}");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // A generous bound on a hang, not a timing.
        tokio::time::timeout(Duration::from_secs(60), async {
            for path in ["/", "/any/path?x=1"] {
                let (mut socket, answer) =
                    tokio_tungstenite::connect_async(format!("ws://{addr}{path}"))
                        .await
                        .unwrap();
                assert_eq!(answer.status(), 101);
                socket.send(Message::text("hello")).await.unwrap();
                assert_eq!(
                    socket.next().await.unwrap().unwrap(),
                    Message::text("hello")
                );
                let bytes = vec![0u8, 1, 2, 255];
                socket.send(Message::binary(bytes.clone())).await.unwrap();
                assert_eq!(
                    socket.next().await.unwrap().unwrap(),
                    Message::binary(bytes)
                );
                socket
                    .send(Message::Ping(b"are you there".to_vec().into()))
                    .await
                    .unwrap();
                assert_eq!(
                    socket.next().await.unwrap().unwrap(),
                    Message::Pong(b"are you there".to_vec().into())
                );
                socket.close(None).await.unwrap();
                // The server's answering close, then the end of the stream.
                match socket.next().await {
                    Some(Ok(Message::Close(_))) | None => {}
                    other => panic!("after our close: {other:?}"),
                }
                assert!(socket.next().await.is_none());
            }
        })
        .await
        .expect("the echo exchange hung");
    });
    terminate(child, "backend");
}

/// `--protocol ws` acts out no mode and has no control API: asking for
/// either is refused (exit 2, one line saying what to do), not ignored.
#[test]
fn a_ws_backend_refuses_modes_and_a_control_api() {
    for extra in [["--mode", "slow:50"], ["--control", ANY_PORT]] {
        let output = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
            .args(["backend", "--protocol", "ws", "--listen", ANY_PORT])
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--protocol ws") && stderr.contains("--protocol http1"),
            "{stderr}"
        );
    }
}
