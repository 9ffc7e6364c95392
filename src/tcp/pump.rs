//! Moves bytes both ways between a client and its backend: one future per
//! connection, driving two independent directions.
//!
//! Each direction is a small state machine, `Running → ShuttingDown → Done`:
//! while running it waits for its source to be readable, moves what is there,
//! and on EOF shuts down the write half of its destination (half-close) while
//! the other direction carries on. An error on either side ends both.
//!
//! Each direction moves bytes with a `Mover`: a copy through a pooled buffer
//! (`copy.rs`) or splice(2) through a pooled pipe (`splice.rs`); both speak
//! the vocabulary of `mover.rs`. A splicing direction copies its small
//! bursts and splices its large ones, switching as the bursts go. Either
//! holds its buffer or pipe only while bytes are in flight; the moment the
//! source would block it gives it back, so an idle connection holds neither.
//! smol has no cooperative budget, so one poll moves at most
//! [`POLL_BUDGET`] bytes per direction before yielding to other tasks.

use super::copy::CopyMover;
use super::mover::{Fault, Meter, Step};
use super::splice::SpliceMover;
use crate::net::buffers::BufferPool;
use crate::net::pipes::PipePool;
use crate::route::shared::Shared;
use crate::stats::rate::Limit;
use crate::stats::throttle::Throttle;
use crate::stats::RuleStats;
use oi_runtime::reactor::{Async, Timer};
use std::future::Future;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// Bytes one direction may move in a single poll before yielding.
pub(crate) const POLL_BUDGET: usize = 512 * 1024;

/// Which end of a forwarded connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The peer that connected to our listener.
    Client,
    /// The server we connected to.
    Backend,
}

/// How a pumped connection ended.
#[derive(Debug)]
pub(crate) struct PumpOutcome {
    /// Bytes read from the client and written to the backend.
    pub(crate) from_client: u64,
    /// Bytes read from the backend and written to the client.
    pub(crate) to_client: u64,
    /// The side that closed (or failed) first; decides rinetd's done-* event.
    pub(crate) first_closed: Side,
    /// Why it ended early, if it did (a reset, or the half-close idle limit).
    pub(crate) error: Option<io::Error>,
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

/// What a direction's poll did, short of blocking or failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moved {
    /// EOF was forwarded: the destination's write half is shut down.
    Finished,
    /// The poll's byte budget ran out; the direction wants to run again.
    BudgetSpent,
}

/// How a direction moves bytes; chosen per connection, copy is the fallback.
enum Mover {
    /// Through a pooled user-space buffer.
    Copy(CopyMover),
    /// Through a pipe with splice(2).
    Splice(SpliceMover),
}

/// One direction's state: where it is, how it moves bytes, and how many it has moved.
struct Direction {
    /// Life-cycle position.
    state: State,
    /// The mechanism, holding the buffer or pipe while bytes are in flight.
    mover: Mover,
    /// Bytes written to the destination so far.
    bytes: u64,
    /// The bandwidth limit, if the rule sets one for this direction; boxed
    /// so an unlimited direction carries one pointer.
    throttle: Option<Box<Throttle>>,
    /// Bytes read before a hand-over paused the pump (drained out of the
    /// mover's buffer or pipe, or handed over by the previous oi): written
    /// before the mover moves anything more. `None` but for a hand-over;
    /// boxed so every other direction carries one word, not a `Vec`'s
    /// three, in every idle connection's pump.
    #[allow(clippy::box_collection)]
    pending: Option<Box<Vec<u8>>>,
    /// The destination's TCP_NODELAY is still to be set, before its second
    /// write (a backend connected with `Dial::nodelay_later`).
    nagle: bool,
}

impl Direction {
    fn new(splice: bool, throttle: Option<Throttle>, nagle: bool) -> Self {
        Direction {
            nagle,
            throttle: throttle.map(Box::new),
            state: State::Running,
            // A splicing direction starts by copying: its first burst may
            // well be small (a request), see `SMALL_BURST`.
            mover: Mover::Copy(CopyMover::new(splice)),
            bytes: 0,
            pending: None,
        }
    }

    /// Writes `pending` ([`Direction::pending`]) out; ready when it is
    /// empty, and then dropped.
    #[allow(clippy::box_collection)]
    fn poll_pending(
        slot: &mut Option<Box<Vec<u8>>>,
        cx: &mut Context<'_>,
        to: &Async<TcpStream>,
        meter: &mut Meter<'_>,
    ) -> Poll<Result<(), (Fault, io::Error)>> {
        use std::io::Write;
        let Some(pending) = slot else {
            return Poll::Ready(Ok(()));
        };
        while !pending.is_empty() {
            meter.before_write(to.get_ref());
            match to.get_ref().write(pending.as_slice()) {
                Ok(0) => return Poll::Ready(Err((Fault::Write, io::ErrorKind::WriteZero.into()))),
                Ok(n) => {
                    pending.drain(..n);
                    meter.wrote(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(to.poll_writable(cx)).map_err(|e| (Fault::Write, e))?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err((Fault::Write, e))),
            }
        }
        // A hand-over's bytes can be large (a whole pipe): not kept once sent.
        *slot = None;
        Poll::Ready(Ok(()))
    }

    /// Moves what the mover holds (bytes read, not yet written) into
    /// `pending`, giving its buffer or pipe back, and returns this
    /// direction's state for a hand-over. Called between polls only, when
    /// no byte is half-way through a system call.
    fn pause(&mut self, pools: &Pools<'_>) -> io::Result<Half> {
        // A paused direction holds no turn: what the buckets owe is carried
        // to the new oi without it (and it is reserved again if the
        // connection runs on here).
        if let Some(t) = &mut self.throttle {
            t.release();
        }
        let held = match &mut self.mover {
            Mover::Copy(m) => m.take_unsent(pools.buffers)?,
            Mover::Splice(m) => m.take_unsent(pools.pipes)?,
        };
        if !held.is_empty() {
            self.pending
                .get_or_insert_with(Box::default)
                .extend_from_slice(&held);
        }
        Ok(Half {
            unsent: self.pending.as_deref().cloned().unwrap_or_default(),
            done: self.state != State::Running,
            bytes: self.bytes,
            owed: self.throttle.as_ref().map_or(0, |t| t.owed()),
        })
    }

    /// Drives this direction until it blocks, finishes, fails, or spends its
    /// budget; on failure says whether the source (`Fault::Read`) or the
    /// destination failed. `last`: the other direction is done.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        (from, to): (&Async<TcpStream>, &Async<TcpStream>),
        pools: &Pools<'_>,
        progress: &mut bool,
        last: bool,
    ) -> Poll<Result<Moved, (Fault, io::Error)>> {
        let mut meter = Meter::new(POLL_BUDGET, &mut self.bytes, progress, &mut self.nagle);
        loop {
            match self.state {
                State::Running => {
                    if self.pending.is_some() {
                        ready!(Self::poll_pending(&mut self.pending, cx, to, &mut meter))?;
                    }
                    // Under a limit, this step may read what its turn
                    // allows (bytes already read still go out); before its
                    // turn the direction sleeps on the throttle's timer.
                    let budget = meter.budget;
                    if let Some(t) = &mut self.throttle {
                        let in_flight = match &self.mover {
                            Mover::Copy(m) => m.in_flight(),
                            Mover::Splice(m) => m.in_flight(),
                        };
                        match t.admit(cx, budget, in_flight) {
                            Some(allowed) => meter.budget = allowed,
                            None => return Poll::Pending,
                        }
                    }
                    let allowed = meter.budget;
                    let step = match &mut self.mover {
                        Mover::Copy(m) => m.poll_move(cx, from, to, pools.buffers, &mut meter),
                        Mover::Splice(m) => m.poll_move(cx, from, to, pools.pipes, &mut meter),
                    };
                    let limited = if let Some(t) = &mut self.throttle {
                        let read = allowed - meter.budget;
                        t.charge(read);
                        meter.budget = budget - read;
                        // Stopped (nothing to read, nowhere to write, EOF,
                        // an error): what the turn allowed and was not read
                        // goes back to the buckets, for the directions
                        // waiting behind this one.
                        if matches!(step, Poll::Pending | Poll::Ready(Ok(Step::Eof) | Err(_))) {
                            t.release();
                        }
                        allowed < budget
                    } else {
                        false
                    };
                    match ready!(step)? {
                        Step::Eof => self.state = State::ShuttingDown,
                        // The limit, not the poll's budget, ran out: ask the
                        // buckets again (they sleep when empty).
                        Step::BudgetSpent if limited => {}
                        Step::BudgetSpent => return Poll::Ready(Ok(Moved::BudgetSpent)),
                        Step::Fallback(leftover) => {
                            self.mover = Mover::Copy(CopyMover::after_splice(leftover));
                        }
                        Step::ToSplice => self.mover = Mover::Splice(SpliceMover::new()),
                        Step::ToCopy => self.mover = Mover::Copy(CopyMover::small_bursts()),
                    }
                }
                State::ShuttingDown => {
                    // The other direction done too, the connection ends in
                    // this poll and both sockets close: close(2) sends the
                    // FIN (nothing is left unread in `to`, whose EOF the
                    // other direction read), one system call fewer.
                    if !last {
                        // The peer may already be gone; the other direction will tell.
                        let _ = to.get_ref().shutdown(Shutdown::Write);
                    }
                    self.state = State::Done;
                }
                State::Done => return Poll::Ready(Ok(Moved::Finished)),
            }
        }
    }

    /// Gives back the buffer or pipe this direction holds; the connection has ended.
    fn discard(&mut self, pools: &Pools<'_>) {
        match &mut self.mover {
            Mover::Copy(m) => m.discard(pools.buffers),
            Mover::Splice(m) => m.discard(pools.pipes),
        }
    }
}

/// One direction's state at a hand-over (`docs/handover.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Half {
    /// Bytes read from the source and not yet written to the destination, in order.
    pub(crate) unsent: Vec<u8>,
    /// The source's EOF was read and the destination's write half shut
    /// down (the pump does both in one step, never one without the other).
    pub(crate) done: bool,
    /// Bytes written to the destination so far.
    pub(crate) bytes: u64,
    /// How far, in ns, its own bandwidth bucket is from full (0: full or
    /// none): the bytes it read were charged, and a hand-over must not
    /// refill it.
    pub(crate) owed: u64,
}

/// Where movers get their buffers and pipes: the server's shared pools.
#[derive(Clone, Copy)]
struct Pools<'a> {
    /// Copy buffers.
    buffers: &'a BufferPool,
    /// Pipes for splice.
    pipes: &'a PipePool,
}

/// The future that forwards one connection until both directions finish.
pub(crate) struct Pump<'a> {
    /// Client socket.
    client: &'a Async<TcpStream>,
    /// Backend socket.
    backend: &'a Async<TcpStream>,
    /// Where buffers and pipes come from (and go back to), and the
    /// half-close idle limit: one reference, not the pools' two and a
    /// 16-byte `Duration` in every connection's pump.
    shared: &'a Shared,
    /// Client → backend.
    upstream: Direction,
    /// Backend → client.
    downstream: Direction,
    /// Who closed first, once known.
    first_closed: Option<Side>,
    /// Fires when a half-closed connection has been idle too long; re-armed
    /// on progress. Boxed: made only once a side has closed, it would
    /// otherwise add a timer's bytes to every open connection.
    idle_timer: Option<Box<Timer>>,
    /// The rule's counters, which limited directions add their waits to.
    stats: &'a RuleStats,
}

/// A connection's bandwidth limits, and the counters their waits go to.
pub(crate) struct Limits<'a> {
    /// Client to backend, backend to client (`None`: unlimited).
    pub(crate) directions: (Option<Limit>, Option<Limit>),
    /// The rule's counters.
    pub(crate) stats: &'a RuleStats,
}

impl<'a> Pump<'a> {
    /// Prepares to forward between `client` and `backend`, with splice(2)
    /// when `splice` is set (each direction falls back to copying on its
    /// own), with `shared`'s pools and half-close idle limit. `nagle`: the
    /// backend was connected without TCP_NODELAY, which the pump sets
    /// before its second write (`Dial::nodelay_later`).
    pub(crate) fn new(
        client: &'a Async<TcpStream>,
        backend: &'a Async<TcpStream>,
        shared: &'a Shared,
        splice: bool,
        limits: Limits<'a>,
        nagle: bool,
    ) -> Self {
        let (up, down) = limits.directions;
        Pump {
            client,
            backend,
            shared,
            upstream: Direction::new(splice, up.map(Throttle::new), nagle),
            // The client's socket has TCP_NODELAY from its listener.
            downstream: Direction::new(splice, down.map(Throttle::new), false),
            stats: limits.stats,
            first_closed: None,
            idle_timer: None,
        }
    }

    /// Where buffers and pipes come from and go back to.
    fn pools(&self) -> Pools<'a> {
        Pools {
            buffers: &self.shared.buffers,
            pipes: &self.shared.pipes,
        }
    }

    fn finish(&mut self, error: Option<io::Error>, culprit: Side) -> PumpOutcome {
        let pools = self.pools();
        self.upstream.discard(&pools);
        self.downstream.discard(&pools);
        PumpOutcome {
            from_client: self.upstream.bytes,
            to_client: self.downstream.bytes,
            first_closed: self.first_closed.unwrap_or(culprit),
            error,
        }
    }
}

impl Pump<'_> {
    /// Bytes written so far (from the client, to the client), and whether
    /// the client and the backend have finished sending: what the live
    /// connection list shows while the connection runs.
    pub(crate) fn progress(&self) -> (u64, u64, bool, bool) {
        (
            self.upstream.bytes,
            self.downstream.bytes,
            self.upstream.state != State::Running,
            self.downstream.state != State::Running,
        )
    }

    /// Stops for a hand-over: each direction's unsent bytes move out of its
    /// buffer or pipe (kept, to go out first if the pump runs on here) and
    /// both directions' states are returned (client→backend first). Call
    /// only after a poll returned `Pending`: that is the safe point.
    pub(crate) fn pause(&mut self) -> io::Result<(Half, Half)> {
        let pools = self.pools();
        Ok((self.upstream.pause(&pools)?, self.downstream.pause(&pools)?))
    }

    /// Ends the connection with `e` (a pause that could not keep its bytes).
    pub(crate) fn abort(&mut self, e: io::Error) -> PumpOutcome {
        self.finish(Some(e), Side::Client)
    }

    /// Takes up a connection another oi paused: `up` and `down` are its
    /// directions' states; their unsent bytes go out first, and their own
    /// bandwidth buckets owe what the other oi's did.
    pub(crate) fn adopt(&mut self, up: Half, down: Half) {
        for (d, h) in [(&mut self.upstream, up), (&mut self.downstream, down)] {
            d.pending = (!h.unsent.is_empty()).then(|| Box::new(h.unsent));
            d.bytes = h.bytes;
            if let Some(t) = &d.throttle {
                t.owe(h.owed);
            }
            if h.done {
                d.state = State::Done;
            }
        }
        if self.downstream.state == State::Done && self.upstream.state != State::Done {
            self.first_closed = Some(Side::Backend);
        } else if self.upstream.state == State::Done {
            self.first_closed = Some(Side::Client);
        }
    }

    /// Polls one direction, reading from `source`, and records what it did.
    /// `Some` is the connection's outcome when the direction failed; a failure
    /// to read blames the source, a failure to write the other side.
    fn step(
        &mut self,
        cx: &mut Context<'_>,
        source: Side,
        progress: &mut bool,
        yielded: &mut bool,
    ) -> Option<PumpOutcome> {
        let pools = self.pools();
        let (direction, other, from, to) = match source {
            Side::Client => (
                &mut self.upstream,
                &self.downstream,
                self.client,
                self.backend,
            ),
            Side::Backend => (
                &mut self.downstream,
                &self.upstream,
                self.backend,
                self.client,
            ),
        };
        let last = other.state == State::Done;
        let polled = direction.poll(cx, (from, to), &pools, progress, last);
        if let Some(t) = &mut direction.throttle {
            t.report(self.stats);
        }
        match polled {
            Poll::Pending => None,
            Poll::Ready(Ok(Moved::BudgetSpent)) => {
                *yielded = true;
                oi_runtime::reactor::note_budget_spent();
                None
            }
            Poll::Ready(Ok(Moved::Finished)) => {
                self.first_closed.get_or_insert(source);
                None
            }
            Poll::Ready(Err((fault, e))) => {
                let culprit = match fault {
                    Fault::Read => source,
                    Fault::Write => source.other(),
                };
                Some(self.finish(Some(e), culprit))
            }
        }
    }
}

impl Side {
    /// The opposite end.
    fn other(self) -> Side {
        match self {
            Side::Client => Side::Backend,
            Side::Backend => Side::Client,
        }
    }
}

impl Future for Pump<'_> {
    type Output = PumpOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PumpOutcome> {
        let this = &mut *self;
        let mut progress = false;
        let mut yielded = false;
        for source in [Side::Client, Side::Backend] {
            if let Some(outcome) = this.step(cx, source, &mut progress, &mut yielded) {
                return Poll::Ready(outcome);
            }
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
            let idle = this.shared.settings.half_close_idle;
            let timer = this
                .idle_timer
                .get_or_insert_with(|| Box::new(Timer::after(idle)));
            if progress {
                timer.set_after(idle);
            }
            if Pin::new(&mut **timer).poll(cx).is_ready() {
                let err = io::Error::new(io::ErrorKind::TimedOut, "half-closed connection idle");
                let culprit = if up_done { Side::Client } else { Side::Backend };
                return Poll::Ready(this.finish(Some(err), culprit));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every open connection's task holds a pump, idle or not (idle memory
    /// per connection, benches/idle_memory.sh): rarely used state (the
    /// half-close timer, a bandwidth limit, a splice pipe left to a copy
    /// mover, a hand-over's pending bytes) is boxed. Measured 264 bytes on x86_64 (344 before these
    /// cuts), 224 once the pools and the half-close limit were read from
    /// `Shared` and the pending bytes boxed (-Zprint-type-sizes, release);
    /// a growth past the bound should be a decision, not an accident.
    #[test]
    fn a_pump_stays_small() {
        let size = std::mem::size_of::<Pump<'static>>();
        assert!(
            size <= 232,
            "Pump is {size} bytes, over its 232-byte budget"
        );
    }
}
