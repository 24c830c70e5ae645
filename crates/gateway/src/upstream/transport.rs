//! What carries a connection to a shard. Today that is plain TCP; TLS
//! toward shards (and an HTTP/2 connection) are further variants of
//! [`Transport`] and [`Connector`], so that the pool, the health checks and
//! the in-flight accounting stay one copy whatever a shard speaks.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// One open connection to a shard.
#[derive(Debug)]
pub(crate) enum Transport {
    /// Plain TCP.
    Tcp(TcpStream),
}

impl Transport {
    /// Whether the backend left the connection open while it sat idle (it
    /// neither closed it nor sent anything unasked). Only a connection the
    /// event loop has seen become readable costs a system call to check.
    pub(crate) fn is_open(&mut self) -> bool {
        match self {
            Transport::Tcp(stream) => {
                let mut cx = Context::from_waker(Waker::noop());
                match stream.poll_read_ready(&mut cx) {
                    Poll::Pending => true,
                    Poll::Ready(Err(_)) => false,
                    Poll::Ready(Ok(())) => {
                        let mut probe = [0_u8; 1];
                        matches!(stream.try_read(&mut probe), Err(error) if error.kind() == io::ErrorKind::WouldBlock)
                    }
                }
            }
        }
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Transport::Tcp(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

/// How to open a connection to one shard.
#[derive(Debug, Clone)]
pub(crate) enum Connector {
    /// TCP to `host:port`.
    Tcp {
        /// `host:port`.
        address: String,
    },
    /// The shard's URL names no host: nothing can be reached.
    Unreachable,
}

impl Connector {
    /// The connector for a shard's URL (`http://host[:port]/...`).
    pub(crate) fn for_url(url: &http::Uri) -> Self {
        match url.host() {
            Some(host) => Connector::Tcp {
                address: format!("{host}:{}", url.port_u16().unwrap_or(80)),
            },
            None => Connector::Unreachable,
        }
    }

    /// Where it connects, for operators (`Debug` of the pool).
    pub(crate) fn address(&self) -> Option<&str> {
        match self {
            Connector::Tcp { address } => Some(address),
            Connector::Unreachable => None,
        }
    }

    /// A new connection within `timeout`; `None` when it cannot be made
    /// (refused, unreachable, timed out).
    pub(crate) async fn connect(&self, timeout: Duration) -> Option<Transport> {
        match self {
            Connector::Tcp { address } => {
                let stream = tokio::time::timeout(timeout, TcpStream::connect(address.as_str()))
                    .await
                    .ok()?
                    .ok()?;
                // Requests are written whole: no need to wait for more.
                let _ = stream.set_nodelay(true);
                Some(Transport::Tcp(stream))
            }
            Connector::Unreachable => None,
        }
    }
}
