//! A hand-written HTTP/1.1 server loop for the modes hyper cannot act out:
//! it must be able to stop mid-body, trickle forever, close after a head and
//! answer bytes that are not HTTP, on a request-by-request basis, because the
//! gateway sends health checks and data over the same pooled connections.
//!
//! It reads a head with httparse, reads past the request body
//! (`Content-Length` or chunked), then answers healthy exactly as the hyper
//! handler does, or misbehaves when the mode targets the request's path;
//! connections are kept alive between requests.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{LATE_BYTES_HEADER, Mode, Seen, Shared};

/// Largest request head accepted; the gateway's heads are far smaller.
const MAX_HEAD: usize = 64 * 1024;
/// Most header lines accepted in one head.
const MAX_HEADERS: usize = 100;

/// The head of a stalled answer: it promises 1024 body bytes.
const STALL_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1024\r\n\r\n";
/// The 16 body bytes a stalled answer sends before it stops.
const STALL_BODY: &[u8] = b"{\"stalled\":true,";
const _: () = assert!(STALL_BODY.len() == 16);
/// The head of a trickled answer, whose chunks never end.
const TRICKLE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
/// One trickled chunk: a single byte.
const TRICKLE_CHUNK: &[u8] = b"1\r\nx\r\n";
/// What a garbled health answer says: a NUL and the start of a TLS record,
/// which no HTTP parser takes for a status line.
const GARBAGE: &[u8] = b"\x00\x16\x03garbage\r\n\r\n";

/// Whether `mode` misbehaves on a request to the health path (`is_health`)
/// or to the data path.
pub(crate) fn affects(mode: &Mode, is_health: bool) -> bool {
    match mode {
        Mode::StallBody | Mode::Trickle(_) | Mode::CloseAfterHead => !is_health,
        Mode::HealthNoHead
        | Mode::HealthStallBody
        | Mode::HealthTrickle(_)
        | Mode::HealthHuge(_)
        | Mode::HealthGarbage => is_health,
        Mode::Unread => true,
        Mode::LateBytes(_) => !is_health,
        _ => false,
    }
}

/// One request as far as the loop needs it.
struct Head {
    method: String,
    /// Path and query, as sent.
    target: String,
    /// Lowercase names, in order.
    headers: Vec<(String, String)>,
    /// How the body is framed.
    body: Framing,
    /// Whether the client wants the connection closed after the answer.
    close: bool,
}

enum Framing {
    Length(u64),
    Chunked,
}

impl Head {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Serves requests on one connection until the client closes it, an error,
/// or a misbehaviour that ends it.
pub(crate) async fn serve(mut stream: TcpStream, shared: Arc<Shared>) -> io::Result<()> {
    // Single-byte chunks and stalled heads must leave at once, not when
    // Nagle's algorithm decides.
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    loop {
        let Some(head) = read_head(&mut stream, &mut buf).await? else {
            return Ok(());
        };
        let body_len = read_body(&mut stream, &mut buf, &head.body).await?;
        let is_health = head.path() == shared.health_path;
        if !is_health {
            shared.note(|| Seen {
                method: head.method.clone(),
                path: head.target.clone(),
                headers: head.headers.clone(),
                body_len,
            });
        }
        let mode = shared.mode();
        if !affects(&mode, is_health) {
            answer_healthy(&mut stream, &shared, &head, body_len).await?;
            if head.close {
                return stream.shutdown().await;
            }
            continue;
        }
        match mode {
            Mode::StallBody | Mode::HealthStallBody => {
                stream.write_all(STALL_HEAD).await?;
                stream.write_all(STALL_BODY).await?;
                return hold(stream).await;
            }
            Mode::Trickle(period) | Mode::HealthTrickle(period) => {
                return trickle(stream, period).await;
            }
            Mode::CloseAfterHead => {
                stream.write_all(STALL_HEAD).await?;
                return stream.shutdown().await;
            }
            Mode::LateBytes(after) => {
                let answer = healthy_answer(&shared, &head, body_len);
                stream.write_all(&answer).await?;
                if head.header(LATE_BYTES_HEADER).is_some() {
                    // At 0 the copy follows at once, in a write of its own.
                    if !after.is_zero() {
                        tokio::time::sleep(after).await;
                    }
                    stream.write_all(&answer).await?;
                    shared
                        .late_answers
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if head.close {
                    return stream.shutdown().await;
                }
            }
            Mode::HealthNoHead => return hold(stream).await,
            Mode::HealthHuge(bytes) => huge(&mut stream, bytes).await?,
            Mode::HealthGarbage => {
                stream.write_all(GARBAGE).await?;
                return stream.shutdown().await;
            }
            // `Unread` connections never reach this loop; one that was open
            // when the mode changed is about to be dropped.
            _ => return hold(stream).await,
        }
    }
}

/// The same answer the hyper handler gives: `200` and the JSON body.
async fn answer_healthy(
    stream: &mut TcpStream,
    shared: &Shared,
    head: &Head,
    body_len: usize,
) -> io::Result<()> {
    stream
        .write_all(&healthy_answer(shared, head, body_len))
        .await
}

/// The bytes of [`answer_healthy`]'s answer.
fn healthy_answer(shared: &Shared, head: &Head, body_len: usize) -> Vec<u8> {
    let tenant = head.header("x-shuffle-tenant").unwrap_or("");
    let body = shared.answer(tenant, &head.method, head.path(), body_len);
    let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n", body.len());
    if head.close {
        answer.push_str("connection: close\r\n");
    }
    answer.push_str("\r\n");
    if head.method != "HEAD" {
        answer.push_str(&body);
    }
    answer.into_bytes()
}

/// Keeps the connection open and says nothing more, reading (and dropping)
/// whatever the client sends so the task ends when the client goes away.
async fn hold(mut stream: TcpStream) -> io::Result<()> {
    let mut scratch = [0u8; 4096];
    while stream.read(&mut scratch).await? > 0 {}
    Ok(())
}

/// A chunked answer that never ends: one byte now and one every period.
async fn trickle(mut stream: TcpStream, period: Duration) -> io::Result<()> {
    stream.write_all(TRICKLE_HEAD).await?;
    loop {
        // A write fails once the client has gone, which ends the task.
        stream.write_all(TRICKLE_CHUNK).await?;
        tokio::time::sleep(period).await;
    }
}

/// A `200` with `bytes` body bytes, written as fast as the client reads.
async fn huge(stream: &mut TcpStream, bytes: u64) -> io::Result<()> {
    const BLOCK: [u8; 16 * 1024] = [b'x'; 16 * 1024];
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {bytes}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let mut left = bytes;
    while left > 0 {
        let n = BLOCK.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        stream.write_all(&BLOCK[..n]).await?;
        left -= n as u64;
    }
    Ok(())
}

/// Reads more bytes of an unfinished request into `buf`; the stream ending
/// here is an error.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    let n = stream.read_buf(buf).await?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Reads one request head; `None` when the client closed between requests.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<Head>> {
    loop {
        if !buf.is_empty()
            && let Some((length, head)) = parse_head(buf)?
        {
            buf.drain(..length);
            return Ok(Some(head));
        }
        if buf.len() > MAX_HEAD {
            return Err(invalid("request head too large"));
        }
        if stream.read_buf(buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
    }
}

/// Parses a complete head at the start of `buf`: its length and contents.
fn parse_head(buf: &[u8]) -> io::Result<Option<(usize, Head)>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let length = match request.parse(buf).map_err(invalid)? {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => return Ok(None),
    };
    let headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let has_token = |name: &str, token: &str| {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    let body = if has_token("transfer-encoding", "chunked") {
        Framing::Chunked
    } else {
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.trim().parse::<u64>().map_err(invalid))
            .transpose()?;
        Framing::Length(length.unwrap_or(0))
    };
    // HTTP/1.0 closes unless asked to keep alive; HTTP/1.1 keeps alive
    // unless asked to close.
    let close = if request.version == Some(0) {
        !has_token("connection", "keep-alive")
    } else {
        has_token("connection", "close")
    };
    let head = Head {
        method: request.method.unwrap_or("GET").to_owned(),
        target: request.path.unwrap_or("/").to_owned(),
        headers,
        body,
        close,
    };
    Ok(Some((length, head)))
}

/// Reads past the request body and returns its length.
async fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    framing: &Framing,
) -> io::Result<usize> {
    match framing {
        Framing::Length(length) => {
            skip(stream, buf, *length).await?;
            Ok(usize::try_from(*length).unwrap_or(usize::MAX))
        }
        Framing::Chunked => read_chunked(stream, buf).await,
    }
}

/// Drops `count` bytes of the stream, starting with those already in `buf`.
async fn skip(stream: &mut TcpStream, buf: &mut Vec<u8>, count: u64) -> io::Result<()> {
    let mut left = count;
    loop {
        let here = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        buf.drain(..here);
        left -= here as u64;
        if left == 0 {
            return Ok(());
        }
        fill(stream, buf).await?;
    }
}

/// Reads past a chunked body (chunks, the last chunk and any trailers) and
/// returns the length of its data.
async fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut total = 0usize;
    loop {
        let (consumed, size) = loop {
            match httparse::parse_chunk_size(buf).map_err(|_| invalid("bad chunk size"))? {
                httparse::Status::Complete(found) => break found,
                httparse::Status::Partial if buf.len() > MAX_HEAD => {
                    return Err(invalid("chunk size line too long"));
                }
                httparse::Status::Partial => {
                    fill(stream, buf).await?;
                }
            }
        };
        buf.drain(..consumed);
        if size == 0 {
            break;
        }
        // The chunk's data and the CRLF after it.
        skip(stream, buf, size.saturating_add(2)).await?;
        total = total.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
    }
    // Trailer lines, up to the empty line that ends the body.
    loop {
        match buf.windows(2).position(|w| w == b"\r\n") {
            Some(0) => {
                buf.drain(..2);
                return Ok(total);
            }
            Some(end) => {
                buf.drain(..end + 2);
            }
            None if buf.len() > MAX_HEAD => return Err(invalid("trailers too large")),
            None => {
                fill(stream, buf).await?;
            }
        }
    }
}
