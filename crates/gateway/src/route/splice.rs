//! Bytes both ways between two connections, as they come, until both
//! directions have ended, one side fails, or nothing has moved either way
//! for the idle limit.
//!
//! Each direction ends when its reader does: the end is passed on as a
//! shutdown of the other side's writing half (a half-close), and the other
//! direction goes on until its own reader ends. So a WebSocket close
//! handshake (a close frame each way, then the server's FIN, then the
//! client's) passes as it would without the gateway, and so does a side
//! that closes without one. One timer covers both directions
//! ([`IdleTimer`]): it runs only while neither moves, so a tunnel that
//! carries a byte now and then in either direction stays open. Once one
//! direction has ended, the other gets [`HALF_CLOSED_IDLE`] without a byte
//! at most: a WebSocket is over when either side has closed, and a peer
//! that never closes its half must not hold the tunnel (and the shard's
//! in-flight count) for a whole idle period.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::upstream::idle::IdleTimer;

/// Bytes one direction reads at a time.
const BUFFER: usize = 16 * 1024;

/// How long a tunnel one side has closed may go without a byte before it
/// is closed (as long as the connection loop's lingering close).
pub(crate) const HALF_CLOSED_IDLE: Duration = Duration::from_secs(2);

/// How a splice ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Both directions ended, each end passed on.
    Closed,
    /// Nothing moved either way for the idle limit.
    Idle,
    /// Reading or writing failed on one side.
    Failed(io::Error),
    /// Never a splice's own end: its tunnel was closed because a reload
    /// removed the tenant that opened it.
    Revoked,
}

impl Ended {
    /// A short lowercase name for metrics.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Ended::Closed => "closed",
            Ended::Idle => "idle",
            Ended::Failed(_) => "error",
            Ended::Revoked => "revoked",
        }
    }
}

/// Copies `a` to `b` and `b` to `a` until the splice ends; `b_first` (bytes
/// already read from `b`) goes to `a` before anything else. Neither side
/// is closed here: the caller drops them. A tunnel that goes quiet after
/// one side's end counts as closed, not idle.
pub(crate) async fn splice<A, B>(a: &mut A, b: &mut B, b_first: &[u8], idle: Duration) -> Ended
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut forth = Direction::new(&[]);
    let mut back = Direction::new(b_first);
    let mut timer = IdleTimer::new(idle);
    let mut lingering = false;
    poll_fn(|cx| {
        let mut moved = false;
        let polled = [
            forth.poll(cx, Pin::new(&mut *a), Pin::new(&mut *b), &mut moved),
            back.poll(cx, Pin::new(&mut *b), Pin::new(&mut *a), &mut moved),
        ];
        for polled in polled {
            if let Poll::Ready(Err(error)) = polled {
                return Poll::Ready(Ended::Failed(error));
            }
        }
        if forth.done && back.done {
            return Poll::Ready(Ended::Closed);
        }
        let half_closed = forth.done || back.done;
        if half_closed && !lingering {
            lingering = true;
            timer = IdleTimer::new(idle.min(HALF_CLOSED_IDLE));
        } else if moved {
            timer.progressed();
        }
        // Both directions wait: the timer runs.
        timer.poll_expired(cx).map(|_| {
            if half_closed {
                Ended::Closed
            } else {
                Ended::Idle
            }
        })
    })
    .await
}

/// One direction: what was read from one side and not yet written to the
/// other.
struct Direction {
    buf: Box<[u8]>,
    /// `buf[start..end]` is still to be written.
    start: usize,
    end: usize,
    /// The reader has ended: once the buffer is written, the writer is
    /// shut down.
    eof: bool,
    /// The writer has been shut down: nothing more moves this way.
    done: bool,
    /// Bytes were written since the last flush.
    unflushed: bool,
}

impl Direction {
    /// A direction with `first` waiting to be written.
    fn new(first: &[u8]) -> Self {
        let mut buf = vec![0_u8; BUFFER.max(first.len())].into_boxed_slice();
        buf[..first.len()].copy_from_slice(first);
        Self {
            buf,
            start: 0,
            end: first.len(),
            eof: false,
            done: false,
            unflushed: false,
        }
    }

    /// Moves what it can from `reader` to `writer` (setting `moved` when a
    /// byte moved); ready once the writer is shut down after the reader's
    /// end, or on an error. Pending with both sides' wakers registered.
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut reader: Pin<&mut R>,
        mut writer: Pin<&mut W>,
        moved: &mut bool,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            while self.start < self.end {
                let written = ready!(
                    writer
                        .as_mut()
                        .poll_write(cx, &self.buf[self.start..self.end])
                )?;
                if written == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.start += written;
                self.unflushed = true;
                *moved = true;
            }
            if self.eof {
                // The half-close goes on (a shutdown flushes first).
                ready!(writer.as_mut().poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut self.buf);
            match reader.as_mut().poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let filled = read.filled().len();
                    (self.start, self.end) = (0, filled);
                    if filled == 0 {
                        self.eof = true;
                    } else {
                        *moved = true;
                    }
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {
                    // Nothing to read now: what was written must not sit
                    // in a buffer (a TLS stream's, say) meanwhile.
                    if self.unflushed {
                        ready!(writer.as_mut().poll_flush(cx))?;
                        self.unflushed = false;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    #[tokio::test]
    async fn bytes_go_both_ways_first_ones_first_and_each_end_is_passed_on() {
        let (mut client, mut a) = duplex(64);
        let (mut b, mut shard) = duplex(64);
        let spliced =
            tokio::spawn(
                async move { splice(&mut a, &mut b, b"early", Duration::from_secs(60)).await },
            );
        let mut got = [0_u8; 5];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"early");
        client.write_all(b"ping").await.unwrap();
        let mut got = [0_u8; 4];
        shard.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        // The client's end reaches the shard, which can still answer.
        client.shutdown().await.unwrap();
        assert_eq!(shard.read(&mut got).await.unwrap(), 0);
        shard.write_all(b"pong").await.unwrap();
        shard.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"pong");
        assert!(matches!(spliced.await.unwrap(), Ended::Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_side_that_never_closes_its_half_does_not_hold_the_tunnel() {
        let (client, mut a) = duplex(64);
        let (mut b, mut shard) = duplex(64);
        let started = tokio::time::Instant::now();
        let spliced =
            tokio::spawn(
                async move { splice(&mut a, &mut b, b"", Duration::from_secs(600)).await },
            );
        shard.shutdown().await.unwrap();
        // The client neither sends nor closes: the tunnel ends anyway, long
        // before the idle limit, as closed.
        let ended = spliced.await.unwrap();
        assert!(matches!(ended, Ended::Closed), "{ended:?}");
        assert!(started.elapsed() < Duration::from_secs(600));
        drop(client);
    }

    #[tokio::test(start_paused = true)]
    async fn a_splice_where_nothing_moves_ends_idle_and_traffic_either_way_keeps_it_open() {
        let (mut client, mut a) = duplex(64);
        let (mut b, mut shard) = duplex(64);
        let spliced =
            tokio::spawn(async move { splice(&mut a, &mut b, b"", Duration::from_secs(10)).await });
        let mut got = [0_u8; 1];
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            client.write_all(b"x").await.unwrap();
            shard.read_exact(&mut got).await.unwrap();
            tokio::time::sleep(Duration::from_secs(6)).await;
            shard.write_all(b"y").await.unwrap();
            client.read_exact(&mut got).await.unwrap();
        }
        assert!(!spliced.is_finished());
        assert!(matches!(spliced.await.unwrap(), Ended::Idle));
    }
}
