//! A pump's two hooks for `oi upgrade` (`docs/handover.md`): running it so a
//! hand-over can pause it at a safe point and give its connection away
//! ([`run`]), and the conversions between a pump's direction and the wire's.
//!
//! Hand-over state declared here: how a direction ([`Half`]) travels, as
//! the wire's `HalfState` (its own bandwidth bucket's state with it); the
//! rest a connection carries is its [`Open`]'s, and its age its live
//! entry's.

use super::pump::{Half, PumpOutcome};
use super::{Open, Published};
use crate::route::park::{self, HalfState, Parked, Ticket};
use futures_lite::FutureExt;
use std::future::Future;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

impl From<HalfState> for Half {
    fn from(h: HalfState) -> Half {
        Half {
            unsent: h.unsent,
            done: h.done,
            bytes: h.bytes,
            owed: h.owed_ns,
        }
    }
}

impl From<Half> for HalfState {
    fn from(h: Half) -> HalfState {
        HalfState {
            unsent: h.unsent,
            done: h.done,
            bytes: h.bytes,
            owed_ns: h.owed,
        }
    }
}

/// What [`Stoppable`] ended with.
enum Ran {
    /// The pump finished.
    Done(PumpOutcome),
    /// A hand-over asked it to stop; it is at a safe point.
    Stop,
}

/// The pump, raced against the hand-over's stop flag. The flag is looked
/// at only after the pump returned `Pending` (the safe point): one atomic
/// load per poll, and no lock.
struct Stoppable<'p, 'a> {
    /// The published pump.
    inner: &'p mut Published<'a>,
    /// Its membership of the parking.
    ticket: &'p Ticket<'p>,
    /// The waker its slot has (see [`park::Slot::poll_stop`]).
    told: &'p mut Option<Waker>,
}

impl Future for Stoppable<'_, '_> {
    type Output = Ran;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ran> {
        let this = &mut *self;
        if let Poll::Ready(o) = Pin::new(&mut *this.inner).poll(cx) {
            return Poll::Ready(Ran::Done(o));
        }
        match this.ticket.slot.poll_stop(cx, this.told) {
            Poll::Ready(()) => Poll::Ready(Ran::Stop),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Runs the pump to its end, or until the new oi adopts the connection
/// (`None`: the new oi has it and logs its end; this one only closes its
/// descriptors). The rule's name for the new oi is made only when the
/// connection is offered, so a connection does not hold it. A function
/// returning an async block, not an async fn, so the future holds its
/// arguments once; `open` gives it the sockets, the parking, the rule and
/// the start in one reference, not five: the hand-over hook's future went
/// from 96 to 64 bytes of every idle connection.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would hold its arguments twice"
)]
pub(super) fn run<'p, 'a, G>(
    published: &'p mut Published<'a>,
    open: &'p Open<G>,
) -> impl Future<Output = Option<PumpOutcome>> + use<'p, 'a, G> {
    async move {
        let ticket = open.shared.parking.enter();
        let mut told = None;
        loop {
            // Matched where it is awaited, not bound: a bound `Ran` would
            // be kept across the offer's await (32 bytes of every
            // connection's task, -Zprint-type-sizes).
            match (Stoppable {
                inner: published,
                ticket: &ticket,
                told: &mut told,
            })
            .await
            {
                Ran::Done(outcome) => return Some(outcome),
                Ran::Stop => {}
            }
            match Box::pin(offer(published, open, &ticket)).await {
                Offer::Adopted => {
                    // The new oi holds the same open sockets: their
                    // edges must stop waking this process's threads.
                    open.client.leave_epoll();
                    open.backend.leave_epoll();
                    return None;
                }
                Offer::Resume => {}
                Offer::Broken(e) => return Some(published.pump.abort(e)),
            }
        }
    }
}

/// How an offer ended.
enum Offer {
    /// The new oi confirmed it: this one only closes its descriptors.
    Adopted,
    /// It stays here: the pump runs on, its unsent bytes first.
    Resume,
    /// Its unsent bytes could not be taken out whole (a pipe read failed):
    /// it ends, rather than go on with bytes missing.
    Broken(std::io::Error),
}

/// Pauses the pump and offers the connection.
async fn offer<G>(published: &mut Published<'_>, open: &Open<G>, ticket: &Ticket<'_>) -> Offer {
    let (client, backend, shared) = (&open.client, &open.backend, &*open.shared);
    let (up, down) = match published.pump.pause() {
        Ok(halves) => halves,
        Err(e) => {
            shared.parking.pass(ticket);
            return Offer::Broken(e);
        }
    };
    // The sockets are copied only when the message that carries them is
    // about to go (see `park::Handing::OnAsk`).
    let (ask, asks) = async_channel::bounded(1);
    let (verdict, answer) = park::verdict();
    let parked = Parked {
        flow: park::Handing::OnAsk(ask),
        rule: open.route.bind.to_string(),
        up: up.into(),
        down: down.into(),
        age: open.live.age(),
        server_name: open.live.server_name().map(|n| n.to_string()),
        verdict,
    };
    if !shared.parking.park(ticket, parked) {
        return Offer::Resume;
    }
    // Answers the sender's ask for copies (once), then waits for the
    // verdict; a closed channel (the hand-over gave up) means: run on here.
    let copied = async {
        if let Ok(reply) = asks.recv().await {
            let copies = match (
                client.as_fd().try_clone_to_owned(),
                backend.as_fd().try_clone_to_owned(),
            ) {
                (Ok(client), Ok(backend)) => Some(park::Flow::Stream { client, backend }),
                _ => None,
            };
            let _ = reply.try_send(copies);
        }
        // Asked, or never to be: only the verdict is left.
        std::future::pending::<Option<bool>>().await
    };
    let verdict = async { answer.recv().await.ok() }.or(copied).await;
    match verdict {
        Some(true) => Offer::Adopted,
        _ => Offer::Resume,
    }
}
