//! The portable direction mover: read into a pooled buffer, write it out.

use super::mover::{Fault, Meter, Step, SMALL_BURST};
use crate::net::buffers::BufferPool;
use crate::net::pipes::Pipe;
use oi_runtime::reactor::Async;
use std::io;
use std::net::TcpStream;
use std::task::{ready, Context, Poll};

/// send(2) with MSG_NOSIGNAL (a peer gone is an error, not SIGPIPE), as
/// std's `write` on a socket, through rustix's direct system call: std goes
/// through libc, whose cancellation-point bookkeeping around each call was
/// about 2% of oi's instructions per 64-byte round trip (callgrind).
fn send(to: &std::net::TcpStream, buf: &[u8]) -> io::Result<usize> {
    rustix::net::send(to, buf, rustix::net::SendFlags::NOSIGNAL).map_err(io::Error::from)
}

/// Copies one direction through a user-space buffer.
///
/// Holds a buffer only while bytes are in flight or a read is being tried;
/// the moment a read would block the buffer goes back to the pool, so an idle
/// connection holds none.
pub(crate) struct CopyMover {
    /// Copy buffer, held only while `pos < end` or a read is being attempted.
    buf: Option<Box<[u8]>>,
    /// Start of the bytes read but not yet written.
    pos: usize,
    /// End of the bytes read.
    end: usize,
    /// A pipe left by a splice mover that gave up with bytes still in it:
    /// those bytes come before anything more from the socket. Boxed: it
    /// almost never exists, and every connection's pump holds two movers.
    leftover: Option<Box<Pipe>>,
    /// The source may have bytes: set when it signalled readability, cleared
    /// when a read would block or came back short (see "A short read drains
    /// the queue" in `poll_move`). Waiting for readability before reading
    /// (not after a read fails) consumes the reactor's event, and a wake-up
    /// for the other direction costs no read (as in the splice mover).
    /// Measured with 64-byte ping-pong: failed `recvfrom` per round trip 2.9 → 2.0.
    readable: bool,
    /// The direction's connection splices: this mover carries its small
    /// bursts only, reads at most [`SMALL_BURST`] at a time, and hands over
    /// to splice ([`Step::ToSplice`]) once a read fills that.
    splices: bool,
}

impl CopyMover {
    /// A mover with nothing in flight, for a new connection; `splices`: the
    /// connection splices, this mover carries its small bursts (see
    /// [`CopyMover::splices`]).
    ///
    /// It waits for the first edge before reading: registering a socket
    /// reports what is already there as an edge (the header readers of
    /// `edge.rs` and `sni.rs` mark the socket readable when they stop short),
    /// so a speculative read would only fail with EAGAIN on the side that
    /// has not sent yet.
    pub(crate) fn new(splices: bool) -> Self {
        CopyMover {
            buf: None,
            pos: 0,
            end: 0,
            leftover: None,
            readable: false,
            splices,
        }
    }

    /// A mover for a direction whose last splice burst was small
    /// ([`Step::ToCopy`]): the source is drained, the next edge starts a read.
    pub(crate) fn small_bursts() -> Self {
        Self::new(true)
    }

    /// A mover taking over from splice for good (splice cannot serve this
    /// direction); `leftover` holds bytes to forward first.
    pub(crate) fn after_splice(leftover: Option<Pipe>) -> Self {
        CopyMover {
            buf: None,
            pos: 0,
            end: 0,
            leftover: leftover.map(Box::new),
            // Splice gave up before the socket said EAGAIN: read first, no
            // edge will come for what is already there.
            readable: true,
            splices: false,
        }
    }

    /// The most one read asks for from a buffer of `len` bytes (`splices`:
    /// [`CopyMover::splices`]).
    fn read_cap(splices: bool, len: usize) -> usize {
        if splices {
            len.min(SMALL_BURST)
        } else {
            len
        }
    }

    /// Moves bytes until the source blocks, ends, fails, or the budget runs out.
    pub(crate) fn poll_move(
        &mut self,
        cx: &mut Context<'_>,
        from: &Async<TcpStream>,
        to: &Async<TcpStream>,
        pool: &BufferPool,
        meter: &mut Meter<'_>,
    ) -> Poll<Result<Step, (Fault, io::Error)>> {
        loop {
            // Same shape as the splice mover's drain loop, other system call
            // (write(2) from a buffer, not splice(2) from a pipe): kept apart on purpose.
            if let Some(buf) = &self.buf {
                while self.pos < self.end {
                    meter.before_write(to.get_ref());
                    match send(to.get_ref(), &buf[self.pos..self.end]) {
                        Ok(0) => {
                            let e = io::ErrorKind::WriteZero.into();
                            return Poll::Ready(Err((Fault::Write, e)));
                        }
                        Ok(n) => {
                            self.pos += n;
                            meter.wrote(n);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            ready!(to.poll_writable(cx)).map_err(|e| (Fault::Write, e))?;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Poll::Ready(Err((Fault::Write, e))),
                    }
                }
            }
            if let Some(buf) = &self.buf {
                if self.splices && self.end == Self::read_cap(self.splices, buf.len()) {
                    // The last read filled all it asked for, and it is
                    // written: a bulk burst, which splice moves for less CPU.
                    // The socket may still hold bytes: splice reads first.
                    self.release(pool);
                    return Poll::Ready(Ok(Step::ToSplice));
                }
            }
            if meter.budget == 0 {
                return Poll::Ready(Ok(Step::BudgetSpent));
            }
            if !self.readable {
                // Everything read has been written (the loop above): an idle
                // direction holds no buffer while it waits.
                if self.buf.is_some() {
                    self.release(pool);
                }
                ready!(from.poll_readable(cx)).map_err(|e| (Fault::Read, e))?;
                self.readable = true;
            }
            let from_socket = self.leftover.is_none();
            let buf = self.buf.get_or_insert_with(|| pool.take());
            // At most what the meter allows: the poll's budget, or less
            // under a bandwidth limit (`rate`), which charges what is read.
            let want = Self::read_cap(self.splices, buf.len()).min(meter.budget);
            let read = match &self.leftover {
                Some(pipe) => match rustix::io::read(&pipe.read, &mut buf[..want]) {
                    // Empty (we hold the write end, so never EOF): back to the socket.
                    Err(rustix::io::Errno::AGAIN) => {
                        self.leftover = None;
                        continue;
                    }
                    other => other.map_err(io::Error::from),
                },
                None => rustix::io::read(from.get_ref(), &mut buf[..want]).map_err(io::Error::from),
            };
            match read {
                Ok(0) => {
                    self.release(pool);
                    return Poll::Ready(Ok(Step::Eof));
                }
                Ok(n) => {
                    // A short read drains the queue; the next byte raises a
                    // new edge. read(2) on a stream socket returns less than
                    // asked only when the receive queue was empty at that
                    // instant (tcp_recvmsg copies until the queue runs dry,
                    // the backlog included), and the reactor's interest is
                    // edge-triggered: every segment queued after that wakes
                    // the epoll again. So wait for the edge instead of
                    // reading again to hear EAGAIN: one failed read fewer
                    // per message (benches/syscalls.sh). The one exception
                    // is TCP urgent data (MSG_OOB), where a read stops short
                    // at the urgent mark with bytes behind it: those wait for
                    // the sender's next segment (splice, for its part, stops
                    // at the mark for good). Tested by the `short_reads`
                    // integration tests.
                    if from_socket && n < want {
                        self.readable = false;
                    }
                    self.pos = 0;
                    self.end = n;
                    meter.budget = meter.budget.saturating_sub(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Nothing in flight: an idle direction holds no buffer.
                    self.release(pool);
                    self.readable = false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.release(pool);
                    return Poll::Ready(Err((Fault::Read, e)));
                }
            }
        }
    }

    /// Whether bytes read are still to be written: they go out whatever a
    /// bandwidth limit says (they were charged when read).
    pub(crate) fn in_flight(&self) -> bool {
        self.buf.is_some() && self.pos < self.end
    }

    /// Takes the bytes read and not yet written out of this mover (its
    /// leftover pipe's first), leaving it with nothing in flight: for a hand-over.
    pub(crate) fn take_unsent(&mut self, pool: &BufferPool) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        if let Some(pipe) = &self.leftover {
            out = super::splice::drain(pipe, usize::MAX)?;
        }
        if let Some(buf) = &self.buf {
            out.extend_from_slice(&buf[self.pos..self.end]);
        }
        self.discard(pool);
        self.readable = true;
        Ok(out)
    }

    /// Returns the buffer to the pool (only legal when nothing is in flight).
    fn release(&mut self, pool: &BufferPool) {
        debug_assert!(self.pos >= self.end);
        self.discard(pool);
    }

    /// Gives back what this mover holds, dropping anything still in flight;
    /// for a connection that has ended.
    pub(crate) fn discard(&mut self, pool: &BufferPool) {
        if let Some(buf) = self.buf.take() {
            pool.give(buf);
        }
        self.pos = 0;
        self.end = 0;
        self.leftover = None;
    }
}
