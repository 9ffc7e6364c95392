//! Where live TCP connections wait while a hand-over offers them to the new
//! oi (`docs/handover.md`, step 8).
//!
//! Every pumping connection enters the [`Parking`] (one lock when it starts
//! and one when it ends, none per poll) with a [`Slot`]: a flag and a waker.
//! A hand-over raises every slot's flag and wakes it; each pump stops at its
//! next safe point (after a poll that returned `Pending`: no byte is in a
//! system call), moves its unsent bytes out of its buffer or pipe, and parks
//! here with copies of its two sockets and a channel for the verdict:
//! adopted (the new oi confirmed it; this one closes its copies and forgets
//! the connection) or resume (anything else: it pumps on here, nothing lost).

use async_channel::{Receiver, Sender};
use atomic_waker::AtomicWaker;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long a hand-over waits for every pump to reach a safe point: a pump
/// gets there at its next poll, so this only bounds a stuck thread.
pub(crate) const PARK_WITHIN: Duration = Duration::from_secs(5);

/// One direction's state, as the wire carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HalfState {
    /// Bytes read from the source and not yet written, in order.
    pub(crate) unsent: Vec<u8>,
    /// EOF read from the source and the destination's write half shut down.
    pub(crate) done: bool,
    /// Bytes written to the destination so far.
    pub(crate) bytes: u64,
}

/// A paused connection, on its way to the new oi.
pub(crate) struct Parked {
    /// The client's socket (a copy: the pump keeps its own until the verdict).
    pub(crate) client: OwnedFd,
    /// The backend's socket (a copy).
    pub(crate) backend: OwnedFd,
    /// The rule's listening address (`BindAddr`'s text): the new oi finds
    /// its route by it.
    pub(crate) rule: String,
    /// Client → backend.
    pub(crate) up: HalfState,
    /// Backend → client.
    pub(crate) down: HalfState,
    /// When the connection was accepted (seconds since the epoch).
    pub(crate) started: u64,
    /// Where the verdict goes: `true` adopted, `false` resume.
    pub(crate) verdict: Sender<bool>,
}

/// A connection the previous oi handed over, as the new one receives it.
pub struct Offered {
    /// Its number in this hand-over, to confirm it by.
    pub(crate) id: u64,
    /// The rule's listening address, as [`Parked::rule`].
    pub(crate) rule: String,
    /// The client's socket.
    pub(crate) client: OwnedFd,
    /// The backend's socket.
    pub(crate) backend: OwnedFd,
    /// Client → backend, where the previous oi stopped.
    pub(crate) up: HalfState,
    /// Backend → client.
    pub(crate) down: HalfState,
    /// When the previous oi accepted it (seconds since the epoch).
    pub(crate) started: u64,
}

/// A pump's flag and waker: how a hand-over reaches it.
#[derive(Default)]
pub(crate) struct Slot {
    /// Raised when a hand-over wants this pump to stop at its next safe point.
    stop: AtomicBool,
    /// The pump's task, woken when the flag rises.
    waker: AtomicWaker,
}

impl Slot {
    /// Whether a stop was asked for; registers the task to be woken when
    /// one is (checked after registering, so a stop in between is seen).
    pub(crate) fn poll_stop(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.stop.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        if self.stop.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// What the lock guards.
#[derive(Default)]
struct Inner {
    /// Every pumping connection's slot, by id.
    slots: HashMap<u64, Arc<Slot>>,
    /// The next id.
    next: u64,
    /// Set while a hand-over collects: only then does a pump park.
    collecting: bool,
    /// Paused connections, collected by the hand-over.
    parked: Vec<Parked>,
    /// Pumps that have answered the stop (parked, or ended meanwhile).
    answered: usize,
}

/// Every pumping connection of this process (one per `Shared`).
#[derive(Default)]
pub(crate) struct Parking {
    /// The slots and the parked connections.
    inner: Mutex<Inner>,
    /// Signalled when a pump parks or ends, for the collecting hand-over.
    changed: Condvar,
}

/// A pump's membership; leaves the parking when dropped.
pub(crate) struct Ticket<'a> {
    /// Where it is registered.
    parking: &'a Parking,
    /// Its id there.
    id: u64,
    /// Its flag and waker.
    pub(crate) slot: Arc<Slot>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut inner = self.parking.lock();
        if inner.slots.remove(&self.id).is_some() && self.slot.stop.load(Ordering::Acquire) {
            // Ended instead of parking: the collector need not wait for it.
            inner.answered += 1;
        }
        self.parking.changed.notify_all();
    }
}

impl Parking {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a pump.
    pub(crate) fn enter(&self) -> Ticket<'_> {
        let mut inner = self.lock();
        let id = inner.next;
        inner.next = inner.next.wrapping_add(1);
        // One that starts while a hand-over collects is not asked: it stays here.
        let slot = Arc::new(Slot::default());
        inner.slots.insert(id, slot.clone());
        Ticket {
            parking: self,
            id,
            slot,
        }
    }

    /// A paused pump offers its connection; `false` when no hand-over is
    /// collecting any more (it resumes at once), else the verdict comes
    /// through the channel in `parked`.
    pub(crate) fn park(&self, ticket: &Ticket<'_>, parked: Parked) -> bool {
        let mut inner = self.lock();
        ticket.slot.stop.store(false, Ordering::Release);
        if !inner.collecting {
            return false;
        }
        inner.answered += 1;
        inner.parked.push(parked);
        self.changed.notify_all();
        true
    }

    /// A pump whose stop was asked but which cannot park (its sockets could
    /// not be copied): it answers, and runs on.
    pub(crate) fn decline(&self, ticket: &Ticket<'_>) {
        let mut inner = self.lock();
        ticket.slot.stop.store(false, Ordering::Release);
        if inner.collecting {
            inner.answered += 1;
            self.changed.notify_all();
        }
    }

    /// Stops every pump at its next safe point and returns the connections
    /// that parked within `within` (blocking: run off the executors). Pumps
    /// that answer later run on here.
    pub(crate) fn collect(&self, within: Duration) -> Vec<Parked> {
        let deadline = Instant::now() + within;
        let mut inner = self.lock();
        inner.collecting = true;
        inner.answered = 0;
        let asked = inner.slots.len();
        for slot in inner.slots.values() {
            slot.stop.store(true, Ordering::Release);
            slot.waker.wake();
        }
        while inner.answered < asked {
            let now = Instant::now();
            if now >= deadline {
                log::warn!(
                    "upgrade: {} of {asked} connection(s) did not pause within {} s; they stay here",
                    asked - inner.answered,
                    within.as_secs()
                );
                break;
            }
            inner = self
                .changed
                .wait_timeout(inner, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        inner.collecting = false;
        for slot in inner.slots.values() {
            slot.stop.store(false, Ordering::Release);
        }
        std::mem::take(&mut inner.parked)
    }
}

/// A verdict channel: the sender goes with the parked connection, the pump
/// waits on the receiver (a closed channel means resume).
pub(crate) fn verdict() -> (Sender<bool>, Receiver<bool>) {
    async_channel::bounded(1)
}
