//! The pump of a connection oi speaks TLS on (either side or both): two
//! directions, each `Running → ShuttingDown → Done` as in `tcp::pump`, one
//! function ([`Direction::poll`]) called for each. A direction reads
//! plaintext from its source (decrypting when the source is TLS) into its
//! buffer and writes it to its sink (encrypting when the sink is TLS).
//!
//! splice(2) cannot apply: the bytes must pass through oi's memory to be
//! decrypted or encrypted. With kTLS (not in this kernel) the sockets would
//! carry plaintext and `tcp::pump`, splice included, would run instead;
//! [`run`] is that seam.
//!
//! Bandwidth limits (`rate`, `rule-rate`, `client-rate`) apply to the
//! plaintext, through the plain pump's [`Throttle`]: a limited direction
//! reads at most what its turn in the buckets allows (a TLS source's
//! record stays in rustls until its turn), so the bytes a client or backend
//! receives stay within the rule's rates whether or not oi speaks TLS to it.

use super::io::{poll_fill, poll_flush};
use crate::stats::rate::Limit;
use crate::stats::throttle::Throttle;
use crate::stats::RuleStats;
use oi_runtime::reactor::Async;
use rustls::Connection;
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A direction's buffer when it writes to a TLS sink: one TLS record's
/// plaintext (16 KiB), so a write to a TLS sink makes one full record.
const RECORD: usize = 16 * 1024;

/// A direction's buffer when it reads from a TLS source and writes to a
/// plain socket: four records' plaintext, gathered before one send, so the
/// plain side takes a quarter of the sends (and its peer a quarter of the
/// wake-ups) of a send per record.
const BATCH: usize = 4 * RECORD;

/// Passes of one direction's loop in one poll before it lets other tasks
/// run (and wakes itself): 16 records, 256 KiB.
const PASSES_PER_POLL: usize = 16;

/// One end of the connection: its socket, and the TLS oi speaks on it.
pub(crate) struct End<'a> {
    /// The socket.
    pub(crate) socket: &'a Async<TcpStream>,
    /// rustls's state when oi speaks TLS to this end; `None`: plain bytes.
    pub(crate) tls: Option<&'a mut Connection>,
}

/// How a TLS-pumped connection ended.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Plaintext bytes read from the client and written to the backend.
    pub(crate) from_client: u64,
    /// Plaintext bytes read from the backend and written to the client.
    pub(crate) to_client: u64,
    /// Whether the client closed (or failed) first (else the backend).
    pub(crate) client_first: bool,
    /// Why it ended early, if it did.
    pub(crate) error: Option<io::Error>,
}

/// Where one direction is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Moving bytes.
    Running,
    /// The source ended: the sink gets close_notify (when TLS) and a FIN.
    ShuttingDown,
    /// Finished.
    Done,
}

/// What one read from a source gave.
enum Read_ {
    /// This many bytes, now in the buffer.
    Bytes(usize),
    /// The end of the stream (close_notify, or the TCP end without one).
    End,
}

/// One direction's state.
struct Direction {
    /// Plaintext read and not yet written.
    buf: Box<[u8]>,
    /// The first unwritten byte of `buf`.
    start: usize,
    /// The end of what `buf` holds.
    end: usize,
    /// Where the direction is.
    state: State,
    /// Plaintext bytes moved.
    bytes: u64,
    /// Whether close_notify has been queued for the sink.
    notified: bool,
    /// The bandwidth limit, when the rule sets one for this direction.
    throttle: Option<Box<Throttle>>,
    /// A TLS source's socket had nothing (EAGAIN) when last read: the next
    /// read waits for the reactor's edge instead of asking the kernel again.
    /// Without it, a batch sent because the socket was empty cost a second
    /// failed recvfrom right after it (one more call a record).
    drained: bool,
}

impl Direction {
    /// A direction from `from` to `to`, its buffer sized for them, drawing
    /// from `limit` when it has one.
    fn new(from: &End<'_>, to: &End<'_>, limit: Option<Limit>) -> Self {
        let size = match (&from.tls, &to.tls) {
            (Some(_), None) => BATCH,
            _ => RECORD,
        };
        Direction {
            buf: vec![0; size].into_boxed_slice(),
            start: 0,
            end: 0,
            state: State::Running,
            bytes: 0,
            notified: false,
            throttle: limit.map(|l| Box::new(Throttle::new(l))),
            drained: false,
        }
    }

    /// Adds this direction's ended waits to the rule's counters.
    fn report(&mut self, stats: &RuleStats) {
        if let Some(t) = &mut self.throttle {
            t.report(stats);
        }
    }

    /// The direction stopped (nothing to read, nowhere to write, the end):
    /// what its turn allowed and it did not read goes back to the buckets,
    /// for the directions waiting behind it, as the plain pump's does.
    fn release(&mut self) {
        if let Some(t) = &mut self.throttle {
            t.release();
        }
    }

    /// Moves bytes from `from` to `to` until it would block (`Pending`, the
    /// wakers registered), its loop's budget is spent, or it is done.
    fn poll(
        &mut self,
        from: &mut End<'_>,
        to: &mut End<'_>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        for _ in 0..PASSES_PER_POLL {
            match self.state {
                State::Done => return Poll::Ready(Ok(())),
                State::ShuttingDown => {
                    if let Some(conn) = to.tls.as_deref_mut() {
                        if !self.notified {
                            conn.send_close_notify();
                            self.notified = true;
                        }
                        if poll_flush(conn, to.socket, cx)?.is_pending() {
                            return Poll::Pending;
                        }
                    }
                    // The peer may be gone already: nothing left to tell it.
                    let _ = to.socket.get_ref().shutdown(Shutdown::Write);
                    self.state = State::Done;
                }
                State::Running if self.start < self.end => {
                    let pending = &self.buf[self.start..self.end];
                    let n = match to.tls.as_deref_mut() {
                        None => {
                            let mut socket = to.socket;
                            match futures_lite::AsyncWrite::poll_write(
                                Pin::new(&mut socket),
                                cx,
                                pending,
                            ) {
                                Poll::Ready(n) => n?,
                                Poll::Pending => {
                                    self.release();
                                    return Poll::Pending;
                                }
                            }
                        }
                        Some(conn) => {
                            // Records gather in rustls until its buffer is
                            // full (64 KiB, four records) or the source has
                            // no more (below): then one sendmsg takes them
                            // all, a quarter of the sends of one per record.
                            let n = conn.writer().write(pending)?;
                            if n < pending.len() {
                                let flushed = poll_flush(conn, to.socket, cx)?;
                                if n == 0 && flushed.is_pending() {
                                    self.release();
                                    return Poll::Pending;
                                }
                            }
                            n
                        }
                    };
                    self.start += n;
                }
                State::Running => {
                    // Under a limit, a read takes what the turn allows;
                    // before its turn the direction sleeps on the timer,
                    // keeping its place in the buckets' queue.
                    let room = match &mut self.throttle {
                        None => self.buf.len(),
                        Some(t) => match t.admit(cx, RECORD, false) {
                            Some(allowed) => allowed.clamp(1, RECORD),
                            None => {
                                // What a TLS sink holds goes out before the wait.
                                if let Some(conn) = to.tls.as_deref_mut() {
                                    let _ = poll_flush(conn, to.socket, cx)?;
                                }
                                return Poll::Pending;
                            }
                        },
                    };
                    match self.read(from, cx, room)? {
                        Poll::Pending => {
                            // The source has no more for now: a TLS sink
                            // sends what it holds before the task waits.
                            if let Some(conn) = to.tls.as_deref_mut() {
                                let _ = poll_flush(conn, to.socket, cx)?;
                            }
                            self.release();
                            return Poll::Pending;
                        }
                        Poll::Ready(Read_::End) => {
                            self.release();
                            self.state = State::ShuttingDown;
                        }
                        Poll::Ready(Read_::Bytes(n)) => {
                            if let Some(t) = &mut self.throttle {
                                t.charge(n);
                            }
                            (self.start, self.end) = (0, n);
                            self.bytes = self.bytes.saturating_add(n as u64);
                        }
                    }
                }
            }
        }
        // Budget spent with work left: run again after the others.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Reads at most `room` bytes (1 to the buffer's length) from `from`
    /// into the (empty) buffer.
    fn read(
        &mut self,
        from: &mut End<'_>,
        cx: &mut Context<'_>,
        room: usize,
    ) -> io::Result<Poll<Read_>> {
        let len = self.buf.len();
        let buf = &mut self.buf[..room.clamp(1, len)];
        let Some(conn) = from.tls.as_deref_mut() else {
            let mut socket = from.socket;
            return match futures_lite::AsyncRead::poll_read(Pin::new(&mut socket), cx, buf) {
                Poll::Ready(Ok(0)) => Ok(Poll::Ready(Read_::End)),
                Poll::Ready(Ok(n)) => Ok(Poll::Ready(Read_::Bytes(n))),
                Poll::Ready(Err(e)) => Err(e),
                Poll::Pending => Ok(Poll::Pending),
            };
        };
        // Plaintext gathered so far: records are taken until `buf` is full
        // or the socket has no more, then written in one go.
        let mut got = 0;
        // Bounded: each pass takes plaintext (`buf` fills), or a record
        // from the socket, or returns.
        loop {
            match conn.reader().read(&mut buf[got..]) {
                Ok(0) if got > 0 => return Ok(Poll::Ready(Read_::Bytes(got))),
                Ok(0) => return Ok(Poll::Ready(Read_::End)),
                Ok(n) => {
                    got += n;
                    if got == buf.len() {
                        return Ok(Poll::Ready(Read_::Bytes(got)));
                    }
                    continue;
                }
                // The TCP end without close_notify: an end all the same,
                // as stunnel takes it (HTTP/1.0 servers close so).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && got > 0 => {
                    return Ok(Poll::Ready(Read_::Bytes(got)))
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Ok(Poll::Ready(Read_::End))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // Answers rustls owes the peer (a key update) go out first.
            let _ = poll_flush(conn, from.socket, cx)?;
            let filled = match self.drained {
                // Read only once the socket has signalled bytes since.
                true => match from.socket.poll_readable(cx) {
                    Poll::Ready(Ok(())) => poll_fill(conn, from.socket, cx)?,
                    Poll::Ready(Err(e)) => return Err(e),
                    Poll::Pending => Poll::Pending,
                },
                false => poll_fill(conn, from.socket, cx)?,
            };
            self.drained = filled.is_pending();
            match filled {
                // The socket has no more for now: what was gathered goes
                // out (the waker stays registered for the rest).
                Poll::Pending if got > 0 => return Ok(Poll::Ready(Read_::Bytes(got))),
                Poll::Pending => return Ok(Poll::Pending),
                Poll::Ready(true) => {}
                Poll::Ready(false) => {}
            }
        }
    }
}

/// Pumps `client` and `backend` until both directions are done or one fails,
/// each direction within its bandwidth limit (`limits`: client to backend,
/// backend to client; `None`: unlimited), whose waits go to `stats`.
/// The kTLS seam: with keys handed to the kernel, the plain pump would run here.
pub(crate) async fn run(
    mut client: End<'_>,
    mut backend: End<'_>,
    limits: (Option<Limit>, Option<Limit>),
    stats: &RuleStats,
) -> Outcome {
    let mut up = Direction::new(&client, &backend, limits.0);
    let mut down = Direction::new(&backend, &client, limits.1);
    let mut client_first = None;
    let error = poll_fn(|cx| {
        let polled = up.poll(&mut client, &mut backend, cx);
        up.report(stats);
        let up_done = match polled {
            Poll::Ready(Err(e)) => {
                client_first.get_or_insert(true);
                return Poll::Ready(Some(e));
            }
            Poll::Ready(Ok(())) => {
                client_first.get_or_insert(true);
                true
            }
            Poll::Pending => false,
        };
        let polled = down.poll(&mut backend, &mut client, cx);
        down.report(stats);
        let down_done = match polled {
            Poll::Ready(Err(e)) => {
                client_first.get_or_insert(false);
                return Poll::Ready(Some(e));
            }
            Poll::Ready(Ok(())) => {
                client_first.get_or_insert(false);
                true
            }
            Poll::Pending => false,
        };
        if up_done && down_done {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    })
    .await;
    Outcome {
        from_client: up.bytes,
        to_client: down.bytes,
        client_first: client_first.unwrap_or(true),
        error,
    }
}
