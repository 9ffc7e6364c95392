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

pub(crate) use crate::route::edge::Origin;
use async_channel::{Receiver, Sender};
use atomic_waker::AtomicWaker;
use parking_lot::{Condvar, Mutex};
use slab::Slab;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
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
    /// How far, in ns, the direction's own bandwidth bucket (`rate`,
    /// `rate-up`, `rate-down`) is from full, debt included: the new oi's
    /// bucket starts as far from full, so a hand-over gives no fresh burst
    /// (0: full, or no such limit).
    pub(crate) owed_ns: u64,
}

/// What kind of flow a parked connection is, with its descriptors (copies:
/// the old oi keeps its own until the verdict).
pub(crate) enum Flow {
    /// A TCP or unix client and its TCP or unix backend: both sockets.
    Stream {
        /// The client's socket.
        client: OwnedFd,
        /// The backend's socket.
        backend: OwnedFd,
    },
    /// A TCP client forwarded to a UDP backend: the client's socket and the
    /// connected UDP socket.
    TcpToUdp {
        /// The client's socket.
        client: OwnedFd,
        /// The UDP socket connected to the backend.
        backend: OwnedFd,
        /// Who the client is (differs from the peer under `accept-proxy`).
        origin: Origin,
        /// How long it has had no traffic either way: its idle deadline
        /// carries on from there.
        idle: Duration,
    },
    /// A UDP association: the client's address (replies go there, from the
    /// listening socket the new oi already has) and the connected socket.
    Datagram {
        /// The client's address, the association's key.
        client: SocketAddr,
        /// The UDP socket connected to the backend.
        backend: OwnedFd,
        /// Who the client is (differs from `client` under `accept-proxy`).
        origin: Origin,
        /// How long it has had no traffic either way.
        idle: Duration,
    },
    /// A UDP→TCP association: the client's address (replies go there, from
    /// the listening socket) and the TCP stream to the backend; the
    /// datagrams that waited in its queue travel as its `up` unsent bytes.
    UdpToTcp {
        /// The client's address, the association's key.
        client: SocketAddr,
        /// The TCP stream to the backend.
        backend: OwnedFd,
        /// Who the client is (differs from `client` under `accept-proxy`).
        origin: Origin,
        /// How long it has had no traffic either way.
        idle: Duration,
    },
}

/// How a parked connection's sockets reach the message that carries them.
pub(crate) enum Handing {
    /// Copied when it parked (UDP flows, TCP→UDP connections).
    Copied(Flow),
    /// A TCP or unix stream: the paused pump copies its two sockets when
    /// the sender asks, just before the message that carries them goes
    /// (`None`: no descriptor left), and the sender closes the copies once
    /// it is sent. So the old oi holds copies of one message's connections
    /// at a time (252 descriptors), not of every connection at once: that
    /// doubled its descriptors at the hand-over, which is what limited it
    /// to about a quarter of the open-file limit's connections.
    OnAsk(Sender<Sender<Option<Flow>>>),
}

impl Handing {
    /// Asks a paused pump for copies without waiting for them, so a whole
    /// message's pumps copy at once ([`Asked::copies`] waits).
    pub(crate) fn ask(&self) -> Asked<'_> {
        match self {
            Handing::Copied(f) => Asked::Parked(f),
            Handing::OnAsk(ask) => {
                let (reply, copies) = async_channel::bounded(1);
                match ask.try_send(reply) {
                    Ok(()) => Asked::Waiting(copies),
                    Err(_) => Asked::Gone,
                }
            }
        }
    }
}

/// A flow whose copies were asked for ([`Handing::ask`]).
pub(crate) enum Asked<'a> {
    /// Copied at park.
    Parked(&'a Flow),
    /// The pump's answer is on its way.
    Waiting(async_channel::Receiver<Option<Flow>>),
    /// The pump is gone (or was asked already).
    Gone,
}

impl<'a> Asked<'a> {
    /// The flow with its descriptors (blocking: the sender's thread, off
    /// the executors). `None`: no descriptor left, or the pump is gone.
    pub(crate) fn copies(self) -> Option<Copies<'a>> {
        match self {
            Asked::Parked(f) => Some(Copies::Parked(f)),
            Asked::Waiting(copies) => copies.recv_blocking().ok().flatten().map(Copies::Made),
            Asked::Gone => None,
        }
    }
}

/// A flow's descriptors for one message: those copied at park, or copies
/// made for it (closed when this is dropped).
pub(crate) enum Copies<'a> {
    /// Copied at park; the parked connection keeps them.
    Parked(&'a Flow),
    /// Made for this message.
    Made(Flow),
}

impl std::ops::Deref for Copies<'_> {
    type Target = Flow;

    fn deref(&self) -> &Flow {
        match self {
            Copies::Parked(f) => f,
            Copies::Made(f) => f,
        }
    }
}

/// A paused connection, on its way to the new oi.
pub(crate) struct Parked {
    /// What it is, with its sockets (copies, now or when asked).
    pub(crate) flow: Handing,
    /// The rule's listening address (`BindAddr`'s text): the new oi finds
    /// its route by it.
    pub(crate) rule: String,
    /// Client → backend.
    pub(crate) up: HalfState,
    /// Backend → client.
    pub(crate) down: HalfState,
    /// How long it has been open (its live entry's age): the new oi's
    /// `oi connections` and status page go on from it.
    pub(crate) age: Duration,
    /// The TLS server name that routed it, on a listener rules share by
    /// server name: the new oi routes it to the same rule by it.
    pub(crate) server_name: Option<String>,
    /// Where the verdict goes: `true` adopted, `false` resume.
    pub(crate) verdict: Sender<bool>,
}

/// A connection the previous oi handed over, as the new one receives it.
pub struct Offered {
    /// Its number in this hand-over, to confirm it by.
    pub(crate) id: u64,
    /// The rule's listening address, as [`Parked::rule`].
    pub(crate) rule: String,
    /// What it is, with its sockets.
    pub(crate) flow: Flow,
    /// Client → backend, where the previous oi stopped.
    pub(crate) up: HalfState,
    /// Backend → client.
    pub(crate) down: HalfState,
    /// How long it had been open when the previous oi offered it.
    pub(crate) age: Duration,
    /// The server name that routed it, as [`Parked::server_name`]; at most
    /// [`MAX_SERVER_NAME`] bytes.
    pub(crate) server_name: Option<String>,
}

/// Longest server name a hand-over carries: a DNS name's limit.
pub(crate) const MAX_SERVER_NAME: usize = 255;

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
    /// `told` is the waker registered last: the same task's waker is not
    /// registered again, since `AtomicWaker::register` is two atomic
    /// read-modify-writes, and a pump's task asks once per poll.
    /// A stop's wake takes the waker out of the slot, so `told` is cleared
    /// when a stop is seen: the next wait registers again.
    pub(crate) fn poll_stop(&self, cx: &mut Context<'_>, told: &mut Option<Waker>) -> Poll<()> {
        if !self.stop.load(Ordering::Acquire) {
            if told.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                return Poll::Pending;
            }
            self.waker.register(cx.waker());
            if !self.stop.load(Ordering::Acquire) {
                *told = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
        *told = None;
        Poll::Ready(())
    }
}

/// What the lock guards.
#[derive(Default)]
struct Inner {
    /// Every pumping connection's slot, by id: a slab, so entering and
    /// leaving, once each per connection, hash nothing (a `HashMap` keyed
    /// by a counter ran SipHash both times, about 300 instructions a
    /// connection by callgrind).
    slots: Slab<Arc<Slot>>,
    /// Set while a hand-over collects: only then does a pump park.
    collecting: bool,
    /// Paused connections, collected by the hand-over.
    parked: Vec<Parked>,
    /// Pumps that have answered the stop (parked, or ended meanwhile).
    answered: usize,
    /// Pumps that answered without parking (no descriptor to copy their
    /// sockets): they stay here, and the hand-over says how many.
    declined: usize,
    /// New side: UDP associations handed over, by rule, waiting for their
    /// listener to take them when the hand-over ends ([`Parking::released`]).
    stashed: HashMap<String, Vec<Offered>>,
    /// New side: closed when the hand-over of live connections has ended;
    /// UDP listeners read nothing before (see [`Parking::hold`]).
    gate: Option<Receiver<()>>,
    /// Old side: a new oi serves now, so a closing UDP listener hands the
    /// associations it kept to a task of their own ([`Parking::kept`]).
    handed: bool,
    /// Old side: tasks serving UDP associations the new oi did not take.
    leftovers: usize,
    /// Old side: made by each hand-over's [`Parking::collect`], dropped by
    /// [`Parking::abandoned`]: a UDP listener whose associations the new oi
    /// took stops reading until the hand-over ends, and reads again if the
    /// new oi then fails (its health question unanswered).
    abandon: Option<(Sender<()>, Receiver<()>)>,
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
    /// Its key in the slots.
    id: usize,
    /// Its flag and waker.
    pub(crate) slot: Arc<Slot>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut inner = self.parking.inner.lock();
        if inner.slots.try_remove(self.id).is_some() && self.slot.stop.load(Ordering::Acquire) {
            // Ended instead of parking: the collector need not wait for it.
            inner.answered += 1;
        }
        // Only a collecting hand-over waits for pumps to end (`collect`
        // sets the flag under this lock before it waits). Unconditional, the
        // notify was a futex call at the end of every connection.
        if inner.collecting {
            self.parking.changed.notify_all();
        }
    }
}

impl Parking {
    /// Registers a pump.
    pub(crate) fn enter(&self) -> Ticket<'_> {
        let mut inner = self.inner.lock();
        // One that starts while a hand-over collects is not asked: it stays here.
        let slot = Arc::new(Slot::default());
        let id = inner.slots.insert(slot.clone());
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
        let mut inner = self.inner.lock();
        ticket.slot.stop.store(false, Ordering::Release);
        if !inner.collecting {
            return false;
        }
        inner.answered += 1;
        inner.parked.push(parked);
        self.changed.notify_all();
        true
    }

    /// A UDP listener offers its associations, answering its stop once for
    /// all; as [`Parking::park`].
    pub(crate) fn park_many(&self, ticket: &Ticket<'_>, parked: Vec<Parked>) -> bool {
        let mut inner = self.inner.lock();
        ticket.slot.stop.store(false, Ordering::Release);
        if !inner.collecting {
            return false;
        }
        inner.answered += 1;
        inner.parked.extend(parked);
        self.changed.notify_all();
        true
    }

    /// New side: until the returned sender drops, [`Parking::released`]
    /// waits. Called before the listeners start, so a UDP listener reads no
    /// datagram before the associations handed over are in its map (else a
    /// client's next datagram would open a second association, from
    /// another port, beside the one on its way).
    pub(crate) fn hold(&self) -> Sender<()> {
        let (open, gate) = async_channel::bounded(1);
        self.inner.lock().gate = Some(gate);
        open
    }

    /// Waits until the hand-over (if any) has ended.
    pub(crate) async fn released(&self) {
        let gate = self.inner.lock().gate.clone();
        if let Some(gate) = gate {
            let _ = gate.recv().await;
        }
    }

    /// New side: keeps a handed-over UDP association for its listener.
    pub(crate) fn stash(&self, offered: Offered) {
        let mut inner = self.inner.lock();
        inner
            .stashed
            .entry(offered.rule.clone())
            .or_default()
            .push(offered);
    }

    /// New side: the associations stashed for the listener of `rule`.
    pub(crate) fn unstash(&self, rule: &str) -> Vec<Offered> {
        self.inner.lock().stashed.remove(rule).unwrap_or_default()
    }

    /// New side: forgets every stashed association (the previous oi was
    /// not told this one took them: it keeps them).
    pub(crate) fn unstash_all(&self) {
        self.inner.lock().stashed.clear();
    }

    /// A pump or listener whose stop was asked with nothing to offer (a UDP
    /// listener without associations, a pump that ends): it answers.
    pub(crate) fn pass(&self, ticket: &Ticket<'_>) {
        let mut inner = self.inner.lock();
        ticket.slot.stop.store(false, Ordering::Release);
        if inner.collecting {
            inner.answered += 1;
            self.changed.notify_all();
        }
    }

    /// A pump whose stop was asked but which cannot park (its sockets could
    /// not be copied): it answers, and runs on.
    pub(crate) fn decline(&self, ticket: &Ticket<'_>) {
        let mut inner = self.inner.lock();
        ticket.slot.stop.store(false, Ordering::Release);
        if inner.collecting {
            inner.answered += 1;
            inner.declined += 1;
            self.changed.notify_all();
        }
    }

    /// Stops every pump at its next safe point and returns the connections
    /// that parked within `within` (blocking: run off the executors). Pumps
    /// that answer later run on here.
    pub(crate) fn collect(&self, within: Duration) -> Vec<Parked> {
        let deadline = Instant::now() + within;
        let mut inner = self.inner.lock();
        inner.abandon = Some(async_channel::bounded(1));
        inner.collecting = true;
        inner.answered = 0;
        inner.declined = 0;
        let asked = inner.slots.len();
        for slot in inner.slots.iter().map(|(_, slot)| slot) {
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
            self.changed.wait_for(&mut inner, deadline - now);
        }
        inner.collecting = false;
        if inner.declined > 0 {
            log::warn!(
                "upgrade: {} connection(s) could not be paused for the new oi (no descriptor \
                 left to copy their sockets); they stay here",
                inner.declined
            );
        }
        for slot in inner.slots.iter().map(|(_, slot)| slot) {
            slot.stop.store(false, Ordering::Release);
        }
        std::mem::take(&mut inner.parked)
    }
}

impl Parking {
    /// Old side: a new oi serves the listeners now (they are closing).
    pub(crate) fn set_handed(&self) {
        self.inner.lock().handed = true;
    }

    /// Old side: when a new oi serves now, counts a task that keeps
    /// serving UDP associations the new oi did not take, until
    /// [`Parking::kept_ended`] (`false`: no hand-over; the associations
    /// end with their listener as before).
    pub(crate) fn keep_serving(&self) -> bool {
        let mut inner = self.inner.lock();
        if inner.handed {
            inner.leftovers += 1;
        }
        inner.handed
    }

    /// Old side: closes when the hand-over now collecting (or the last
    /// one) is abandoned after the new oi took flows ([`Parking::abandoned`]);
    /// never, once it has succeeded. Asked by a listener while it offers.
    pub(crate) fn until_abandoned(&self) -> Receiver<()> {
        let mut inner = self.inner.lock();
        let (_, wait) = inner
            .abandon
            .get_or_insert_with(|| async_channel::bounded(1));
        wait.clone()
    }

    /// Old side: the new oi failed after it took flows: every listener
    /// waiting on [`Parking::until_abandoned`] serves its socket again.
    pub(crate) fn abandoned(&self) {
        let dropped = self.inner.lock().abandon.take();
        drop(dropped);
    }

    /// Old side: a task counted by [`Parking::keep_serving`] has ended.
    pub(crate) fn kept_ended(&self) {
        let mut inner = self.inner.lock();
        inner.leftovers = inner.leftovers.saturating_sub(1);
        self.changed.notify_all();
    }

    /// Old side: waits (blocking) until every task counted by
    /// [`Parking::keep_serving`] has ended.
    pub(crate) fn wait_leftovers(&self) {
        let mut inner = self.inner.lock();
        while inner.leftovers > 0 {
            self.changed.wait(&mut inner);
        }
    }
}

/// A verdict channel: the sender goes with the parked connection, the pump
/// waits on the receiver (a closed channel means resume).
pub(crate) fn verdict() -> (Sender<bool>, Receiver<bool>) {
    async_channel::bounded(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// What `collect` does to one slot.
    fn stop(slot: &Slot) {
        slot.stop.store(true, Ordering::Release);
        slot.waker.wake();
    }

    /// A pump whose task is already registered does not register again, yet
    /// a stop's wake reaches it every time: after a first hand-over it
    /// resumed from (the stop's wake took the waker out of the slot), a
    /// second one must still wake it.
    #[test]
    fn a_stop_wakes_the_pump_again_after_one_it_resumed_from() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let slot = Slot::default();
        let mut told = None;
        for round in 1..=3 {
            assert!(slot.poll_stop(&mut cx, &mut told).is_pending());
            assert!(slot.poll_stop(&mut cx, &mut told).is_pending());
            stop(&slot);
            assert_eq!(
                count.0.load(Ordering::SeqCst),
                round,
                "stop {round} woke the pump"
            );
            assert!(slot.poll_stop(&mut cx, &mut told).is_ready());
            // Resumed: `park` (or `pass`, `decline`) lowers the flag.
            slot.stop.store(false, Ordering::Release);
        }
    }

    /// A stop raised before the first poll is seen by it, with nothing to wake.
    #[test]
    fn a_stop_before_the_first_poll_is_seen_at_once() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let slot = Slot::default();
        stop(&slot);
        assert!(slot.poll_stop(&mut cx, &mut None).is_ready());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }
}
