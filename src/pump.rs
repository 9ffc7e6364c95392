//! Moves bytes both ways between a client and its backend: one future per
//! connection, driving two independent directions.
//!
//! Each direction is a small state machine, `Running → ShuttingDown → Done`:
//! while running it waits for its source to be readable, moves what is there,
//! and on EOF shuts down the write half of its destination (half-close) while
//! the other direction carries on. An error on either side ends both.
//!
//! A direction holds a copy buffer only while bytes are in flight; the moment
//! a read would block it gives the buffer back, so an idle connection holds
//! none. smol has no cooperative budget, so one poll moves at most
//! [`POLL_BUDGET`] bytes per direction before yielding to other tasks.

use crate::pool::BufferPool;
use async_io::{Async, Timer};
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

/// Bytes one direction may move in a single poll before yielding.
pub const POLL_BUDGET: usize = 512 * 1024;

/// Which end of a forwarded connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The peer that connected to our listener.
    Client,
    /// The server we connected to.
    Backend,
}

/// How a pumped connection ended.
#[derive(Debug)]
pub struct PumpOutcome {
    /// Bytes read from the client and written to the backend.
    pub from_client: u64,
    /// Bytes read from the backend and written to the client.
    pub to_client: u64,
    /// The side that closed (or failed) first; decides rinetd's done-* event.
    pub first_closed: Side,
    /// Why it ended early, if it did (a reset, or the half-close idle limit).
    pub error: Option<io::Error>,
}

/// Where one direction is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Moving bytes.
    Running,
    /// Source hit EOF and everything read was written; the destination's write half must close.
    ShuttingDown,
    /// Finished: EOF forwarded.
    Done,
}

/// Which half of a direction's work failed; tells which peer misbehaved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Reading from the source.
    Read,
    /// Writing to the destination.
    Write,
}

/// One direction's state: where it is and what it holds.
struct Direction {
    /// Life-cycle position.
    state: State,
    /// Copy buffer, held only while `pos < end` or a read is being attempted.
    buf: Option<Box<[u8]>>,
    /// Start of the bytes read but not yet written.
    pos: usize,
    /// End of the bytes read.
    end: usize,
    /// Bytes written to the destination so far.
    bytes: u64,
}

impl Direction {
    fn new() -> Self {
        Direction {
            state: State::Running,
            buf: None,
            pos: 0,
            end: 0,
            bytes: 0,
        }
    }

    /// Drives this direction until it blocks, finishes, fails, or spends its budget.
    /// Returns `Ready(Ok(true))` when done, `Ready(Ok(false))` when the budget ran
    /// out, and on failure whether the source (`Fault::Read`) or the destination failed.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        from: &Async<TcpStream>,
        to: &Async<TcpStream>,
        pool: &BufferPool,
        progress: &mut bool,
    ) -> Poll<Result<bool, (Fault, io::Error)>> {
        let mut budget = POLL_BUDGET;
        loop {
            match self.state {
                State::Running => {
                    if let Some(buf) = &self.buf {
                        while self.pos < self.end {
                            match to.get_ref().write(&buf[self.pos..self.end]) {
                                Ok(0) => {
                                    let e = io::ErrorKind::WriteZero.into();
                                    return Poll::Ready(Err((Fault::Write, e)));
                                }
                                Ok(n) => {
                                    self.pos += n;
                                    self.bytes += n as u64;
                                    *progress = true;
                                }
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                    ready!(to.poll_writable(cx)).map_err(|e| (Fault::Write, e))?;
                                }
                                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                                Err(e) => return Poll::Ready(Err((Fault::Write, e))),
                            }
                        }
                    }
                    if budget == 0 {
                        return Poll::Ready(Ok(false));
                    }
                    let buf = self.buf.get_or_insert_with(|| pool.take());
                    match from.get_ref().read(buf) {
                        Ok(0) => {
                            self.release(pool);
                            self.state = State::ShuttingDown;
                        }
                        Ok(n) => {
                            self.pos = 0;
                            self.end = n;
                            budget = budget.saturating_sub(n);
                            *progress = true;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            // Nothing in flight: an idle direction holds no buffer.
                            self.release(pool);
                            ready!(from.poll_readable(cx)).map_err(|e| (Fault::Read, e))?;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            self.release(pool);
                            return Poll::Ready(Err((Fault::Read, e)));
                        }
                    }
                }
                State::ShuttingDown => {
                    match to.get_ref().shutdown(Shutdown::Write) {
                        // The peer may already be gone; the other direction will tell.
                        Ok(()) | Err(_) => self.state = State::Done,
                    }
                }
                State::Done => return Poll::Ready(Ok(true)),
            }
        }
    }

    /// Returns the buffer to the pool (only legal when nothing is in flight).
    fn release(&mut self, pool: &BufferPool) {
        debug_assert!(self.pos >= self.end);
        if let Some(buf) = self.buf.take() {
            pool.give(buf);
        }
        self.pos = 0;
        self.end = 0;
    }
}

/// The future that forwards one connection until both directions finish.
pub struct Pump<'a> {
    /// Client socket.
    client: &'a Async<TcpStream>,
    /// Backend socket.
    backend: &'a Async<TcpStream>,
    /// Where copy buffers come from and go back to.
    pool: &'a BufferPool,
    /// Client → backend.
    upstream: Direction,
    /// Backend → client.
    downstream: Direction,
    /// Who closed first, once known.
    first_closed: Option<Side>,
    /// How long a half-closed connection may sit idle.
    half_close_idle: Duration,
    /// Fires when a half-closed connection has been idle too long; re-armed on progress.
    idle_timer: Option<Timer>,
}

impl<'a> Pump<'a> {
    /// Prepares to forward between `client` and `backend`.
    pub fn new(
        client: &'a Async<TcpStream>,
        backend: &'a Async<TcpStream>,
        pool: &'a BufferPool,
        half_close_idle: Duration,
    ) -> Self {
        Pump {
            client,
            backend,
            pool,
            upstream: Direction::new(),
            downstream: Direction::new(),
            first_closed: None,
            half_close_idle,
            idle_timer: None,
        }
    }

    fn finish(&mut self, error: Option<io::Error>, culprit: Side) -> PumpOutcome {
        self.upstream.buf = None;
        self.downstream.buf = None;
        PumpOutcome {
            from_client: self.upstream.bytes,
            to_client: self.downstream.bytes,
            first_closed: self.first_closed.unwrap_or(culprit),
            error,
        }
    }
}

impl Future for Pump<'_> {
    type Output = PumpOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PumpOutcome> {
        let this = &mut *self;
        let mut progress = false;
        let mut yielded = false;

        let up = this
            .upstream
            .poll(cx, this.client, this.backend, this.pool, &mut progress);
        match up {
            Poll::Ready(Err((fault, e))) => {
                let culprit = if fault == Fault::Read {
                    Side::Client
                } else {
                    Side::Backend
                };
                return Poll::Ready(this.finish(Some(e), culprit));
            }
            Poll::Ready(Ok(false)) => yielded = true,
            Poll::Ready(Ok(true)) => {
                this.first_closed.get_or_insert(Side::Client);
            }
            Poll::Pending => {}
        }
        let down = this
            .downstream
            .poll(cx, this.backend, this.client, this.pool, &mut progress);
        match down {
            Poll::Ready(Err((fault, e))) => {
                let culprit = if fault == Fault::Read {
                    Side::Backend
                } else {
                    Side::Client
                };
                return Poll::Ready(this.finish(Some(e), culprit));
            }
            Poll::Ready(Ok(false)) => yielded = true,
            Poll::Ready(Ok(true)) => {
                this.first_closed.get_or_insert(Side::Backend);
            }
            Poll::Pending => {}
        }

        let up_done = this.upstream.state == State::Done;
        let down_done = this.downstream.state == State::Done;
        if up_done && down_done {
            return Poll::Ready(this.finish(None, Side::Client));
        }
        if yielded {
            // Budget spent: let other tasks on this thread run, then continue.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if up_done || down_done {
            let idle = this.half_close_idle;
            let timer = this.idle_timer.get_or_insert_with(|| Timer::after(idle));
            if progress {
                timer.set_after(idle);
            }
            if Pin::new(timer).poll(cx).is_ready() {
                let err = io::Error::new(io::ErrorKind::TimedOut, "half-closed connection idle");
                let culprit = if up_done { Side::Client } else { Side::Backend };
                return Poll::Ready(this.finish(Some(err), culprit));
            }
        }
        Poll::Pending
    }
}
