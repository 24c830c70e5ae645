//! A DNS server that misbehaves on purpose, for the failures a real one
//! (dnsmasq) cannot be made to show: silence, SERVFAIL, REFUSED, and
//! replies that are not DNS. It listens on UDP and TCP on one 127.0.0.1
//! port; what it does is switched while it runs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

/// What the server does with each query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Reads it and answers nothing (a stalled or overloaded server).
    Silent,
    /// Answers SERVFAIL (rcode 2) with the query's id and question.
    ServFail,
    /// Answers REFUSED (rcode 5) with the query's id and question.
    Refused,
    /// Answers 40 random bytes.
    Junk,
    /// Answers a reply with the query's id, QR set and one answer
    /// announced, cut off in the middle of that answer.
    Garbled,
}

/// The misbehaving server. Its tasks end on drop.
#[derive(Debug)]
pub struct DnsFault {
    addr: SocketAddr,
    fault: Arc<Mutex<Fault>>,
    queries: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for DnsFault {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl DnsFault {
    /// Starts one on a free 127.0.0.1 port (UDP and TCP), doing `fault`.
    /// Needs a tokio runtime.
    pub async fn start(fault: Fault) -> Self {
        let (udp, tcp) = bind_both().await;
        let addr = udp.local_addr().unwrap();
        let fault = Arc::new(Mutex::new(fault));
        let queries = Arc::new(AtomicUsize::new(0));
        let udp_task = tokio::spawn(serve_udp(udp, fault.clone(), queries.clone()));
        let tcp_task = tokio::spawn(serve_tcp(tcp, fault.clone(), queries.clone()));
        Self {
            addr,
            fault,
            queries,
            tasks: vec![udp_task, tcp_task],
        }
    }

    /// Does `fault` from the next query on.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// What it does now.
    pub fn fault(&self) -> Fault {
        *self.fault.lock().unwrap()
    }

    /// How many queries it has received (UDP and TCP): proof a client
    /// asked it.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }

    /// `127.0.0.1:PORT`, for `discovery.resolver`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its port (UDP and TCP).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// A UDP socket and a TCP listener on the same free 127.0.0.1 port.
async fn bind_both() -> (UdpSocket, TcpListener) {
    for _ in 0..100 {
        let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = udp.local_addr().unwrap().port();
        if let Ok(tcp) = TcpListener::bind((IpAddr::V4(Ipv4Addr::LOCALHOST), port)).await {
            return (udp, tcp);
        }
    }
    panic!("no 127.0.0.1 port free for both UDP and TCP in 100 tries");
}

async fn serve_udp(socket: UdpSocket, fault: Arc<Mutex<Fault>>, queries: Arc<AtomicUsize>) {
    let mut buffer = [0_u8; 4096];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        queries.fetch_add(1, Ordering::SeqCst);
        let mode = *fault.lock().unwrap();
        if let Some(reply) = reply(mode, &buffer[..n]) {
            let _ = socket.send_to(&reply, from).await;
        }
    }
}

async fn serve_tcp(listener: TcpListener, fault: Arc<Mutex<Fault>>, queries: Arc<AtomicUsize>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Each connection on its own task, so a silent one does not hold
        // up the next; they end with the listener's task's runtime.
        tokio::spawn(serve_connection(stream, fault.clone(), queries.clone()));
    }
}

/// DNS over TCP: each message behind its two-byte length.
async fn serve_connection(
    mut stream: TcpStream,
    fault: Arc<Mutex<Fault>>,
    queries: Arc<AtomicUsize>,
) {
    loop {
        let Ok(length) = stream.read_u16().await else {
            return;
        };
        let mut message = vec![0_u8; usize::from(length)];
        if stream.read_exact(&mut message).await.is_err() {
            return;
        }
        queries.fetch_add(1, Ordering::SeqCst);
        let mode = *fault.lock().unwrap();
        if let Some(reply) = reply(mode, &message) {
            let length = u16::try_from(reply.len()).unwrap_or(u16::MAX);
            if stream.write_u16(length).await.is_err() || stream.write_all(&reply).await.is_err() {
                return;
            }
        }
    }
}

/// What `fault` answers to `query`; `None`: nothing.
pub fn reply(fault: Fault, query: &[u8]) -> Option<Vec<u8>> {
    match fault {
        Fault::Silent => None,
        Fault::ServFail => Some(error_reply(query, 2)),
        Fault::Refused => Some(error_reply(query, 5)),
        Fault::Junk => Some(junk(40)),
        Fault::Garbled => Some(garbled_reply(query)),
    }
}

/// A reply with `rcode`: the query's id, opcode and RD, QR and RA set, its
/// question copied, nothing else.
pub fn error_reply(query: &[u8], rcode: u8) -> Vec<u8> {
    let mut reply = header(query, rcode);
    match question(query) {
        Some(question) => {
            reply[5] = 1;
            reply.extend_from_slice(question);
        }
        None => reply[5] = 0,
    }
    reply
}

/// A reply that announces one answer and breaks off inside it: the right
/// id, so only its body shows it is not DNS.
pub fn garbled_reply(query: &[u8]) -> Vec<u8> {
    let mut reply = header(query, 0);
    if let Some(question) = question(query) {
        reply[5] = 1;
        reply.extend_from_slice(question);
    }
    // ANCOUNT 1, then an answer that is a compression pointer to nowhere
    // and half a type field.
    reply[7] = 1;
    reply.extend_from_slice(&[0xc0, 0xff, 0x00]);
    reply
}

/// The 12 header bytes of a reply to `query`, with `rcode` and no counts.
fn header(query: &[u8], rcode: u8) -> Vec<u8> {
    let id = [
        query.first().copied().unwrap_or(0),
        query.get(1).copied().unwrap_or(0),
    ];
    let flags = query.get(2).copied().unwrap_or(0);
    // QR, the query's opcode (bits 3-6) and RD (bit 0).
    let first = 0x80 | (flags & 0x78) | (flags & 0x01);
    // RA, and the rcode.
    let second = 0x80 | (rcode & 0x0f);
    vec![id[0], id[1], first, second, 0, 0, 0, 0, 0, 0, 0, 0]
}

/// The query's first question (name, type, class), when it has one that
/// can be read.
fn question(query: &[u8]) -> Option<&[u8]> {
    if query.len() < 12 || query[4..6] == [0, 0] {
        return None;
    }
    let mut at = 12;
    loop {
        let length = usize::from(*query.get(at)?);
        if length == 0 {
            at += 1;
            break;
        }
        // A query's name is not compressed; a pointer here is not a query.
        if length > 63 {
            return None;
        }
        at += 1 + length;
    }
    query.get(12..at + 4)
}

/// `n` bytes of noise (xorshift from the clock: no random crate needed for
/// bytes that only have to be unlike DNS).
fn junk(n: usize) -> Vec<u8> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let mut state = (nanos as u64) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnsmasq::query;

    #[test]
    fn servfail_echoes_the_id_and_the_question() {
        let query = query(0xbeef, "a.example", 33);
        let reply = error_reply(&query, 2);
        assert_eq!(&reply[..2], &[0xbe, 0xef]);
        assert_eq!(reply[2] & 0x80, 0x80, "QR");
        assert_eq!(reply[2] & 0x01, 0x01, "RD copied");
        assert_eq!(reply[3] & 0x0f, 2, "SERVFAIL");
        assert_eq!(&reply[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&reply[12..], &query[12..]);
    }

    #[test]
    fn broken_queries_still_get_a_header() {
        assert_eq!(error_reply(&[], 5).len(), 12);
        assert_eq!(
            error_reply(&[1, 2, 3, 4, 0, 1, 0, 0, 0, 0, 0, 0, 9], 5).len(),
            12
        );
        assert!(garbled_reply(&[0xff; 3]).len() > 12);
        assert_eq!(junk(40).len(), 40);
    }

    #[tokio::test]
    async fn it_answers_per_its_fault() {
        let server = DnsFault::start(Fault::Refused).await;
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(server.addr()).await.unwrap();
        socket.send(&query(7, "x.test", 1)).await.unwrap();
        let mut reply = [0_u8; 512];
        let n = socket.recv(&mut reply).await.unwrap();
        assert_eq!(reply[3] & 0x0f, 5);
        assert!(n > 12);
        server.set(Fault::Silent);
        socket.send(&query(8, "x.test", 1)).await.unwrap();
        let silent = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            socket.recv(&mut reply),
        )
        .await;
        assert!(silent.is_err(), "a silent server answered");
        assert_eq!(server.queries(), 2);
    }
}
