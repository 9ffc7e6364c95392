//! A timer on the polling thread's reactor: an entry in its [`TimerQueue`],
//! whose soonest deadline becomes the `epoll_wait` timeout. No timerfd, no
//! system call to set or cancel one.
//!
//! Most timers never fire: a connection's connect timeout and its half-close
//! timer are both cancelled within a round trip of being set. So the queue
//! makes adding and cancelling cheap: a timer is an entry in a slab (its key
//! is its handle) plus a place in a binary heap of deadlines; cancelling
//! removes the entry, dropping its waker at once, and leaves its place in the
//! heap, to be discarded when it reaches the top. An ordered map did both
//! with a tree search, about 250 instructions each, 1,000 per connection
//! (callgrind, benches/rtt_instructions.sh; docs/performance.md,
//! "Instructions per connection and per round trip").
//!
//! Bound: the heap holds the pending timers plus at most as many cancelled
//! places again (and 64): past that, a cancel sweeps the cancelled ones out.

use super::{driving, is_current, Reactor};
use slab::Slab;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Which timer in a [`TimerQueue`]: its slab key, and an id that tells it
/// from a later timer given the same key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TimerId {
    /// The entry's key in the slab.
    key: usize,
    /// Unique among the queue's timers.
    id: u64,
}

/// One pending timer (its deadline is its place in the heap).
struct Entry {
    /// Tells it from an earlier timer that had the same key.
    id: u64,
    /// The task to wake when it fires.
    waker: Waker,
}

/// A reactor's pending timers, soonest first (see the module's notes).
#[derive(Default)]
pub(super) struct TimerQueue {
    /// Every pending timer, by key.
    entries: Slab<Entry>,
    /// (deadline, key, id) of every pending timer, soonest on top, and of
    /// cancelled ones not yet discarded.
    order: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    /// The id the next timer gets.
    next_id: u64,
}

/// Whether timer (`key`, `id`) is still pending: among `entries` (a free
/// function, so the heap's sweep can ask while the heap itself is borrowed).
fn pending(entries: &Slab<Entry>, key: usize, id: u64) -> bool {
    entries.get(key).is_some_and(|e| e.id == id)
}

/// Cancelled places the heap may hold beyond one per pending timer.
const SLACK: usize = 64;

impl TimerQueue {
    /// Adds a timer firing at `at`; also says whether it is now the soonest.
    pub(super) fn add(&mut self, at: Instant, waker: Waker) -> (TimerId, bool) {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let key = self.entries.insert(Entry { id, waker });
        self.order.push(Reverse((at, key, id)));
        let soonest = self
            .order
            .peek()
            .is_some_and(|Reverse((top, _, _))| *top == at);
        (TimerId { key, id }, soonest)
    }

    /// Replaces the waker of timer `t`; false if it is no longer pending.
    pub(super) fn update(&mut self, t: TimerId, waker: &Waker) -> bool {
        match self.entries.get_mut(t.key) {
            Some(e) if e.id == t.id => {
                if !e.waker.will_wake(waker) {
                    e.waker.clone_from(waker);
                }
                true
            }
            _ => false,
        }
    }

    /// Cancels timer `t` if it is still pending.
    pub(super) fn remove(&mut self, t: TimerId) {
        if !pending(&self.entries, t.key, t.id) {
            return;
        }
        self.entries.remove(t.key);
        if self.order.len() > 2 * self.entries.len() + SLACK {
            let entries = &self.entries;
            self.order
                .retain(|Reverse((_, key, id))| pending(entries, *key, *id));
        }
    }

    /// The soonest pending deadline, discarding cancelled places above it.
    pub(super) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, key, id))) = self.order.peek() {
            if pending(&self.entries, key, id) {
                return Some(at);
            }
            self.order.pop();
        }
        None
    }

    /// Takes the wakers of every timer due by `now`.
    pub(super) fn fire(&mut self, now: Instant, into: &mut Vec<Waker>) {
        while let Some(&Reverse((at, key, id))) = self.order.peek() {
            if at > now {
                break;
            }
            self.order.pop();
            if pending(&self.entries, key, id) {
                into.push(self.entries.remove(key).waker);
            }
        }
    }

    /// Whether no timer is pending.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Fires once at a deadline (never, if it has none); the API of async-io's
/// `Timer` that oi uses.
pub struct Timer {
    /// When it fires; `None`: never.
    when: Option<Instant>,
    /// Where it waits and its id there, once polled.
    registered: Option<(Arc<Reactor>, TimerId)>,
}

impl Timer {
    /// A timer firing `after` from now (never, if that is past the end of time).
    pub fn after(after: Duration) -> Self {
        Timer {
            when: Instant::now().checked_add(after),
            registered: None,
        }
    }

    /// A timer firing at `at`.
    pub fn at(at: Instant) -> Self {
        Timer {
            when: Some(at),
            registered: None,
        }
    }

    /// A timer that never fires.
    pub fn never() -> Self {
        Timer {
            when: None,
            registered: None,
        }
    }

    /// Moves the deadline to `after` from now.
    pub fn set_after(&mut self, after: Duration) {
        self.cancel();
        self.when = Instant::now().checked_add(after);
    }

    /// Moves the deadline to `at`.
    pub fn set_at(&mut self, at: Instant) {
        self.cancel();
        self.when = Some(at);
    }

    /// Removes the pending entry, if any.
    fn cancel(&mut self) {
        if let Some((reactor, id)) = self.registered.take() {
            reactor.remove_timer(id);
        }
    }
}

impl Future for Timer {
    type Output = Instant;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Instant> {
        let Some(at) = self.when else {
            return Poll::Pending;
        };
        if let Some((reactor, id)) = &self.registered {
            debug_assert!(
                is_current(reactor),
                "an oi timer polled on a thread other than its reactor's"
            );
            // Still pending: not due yet, or due and fired by the reactor's
            // next turn, which wakes this task. Gone: the reactor fired it,
            // having found the deadline passed. So no poll reads the clock:
            // a UDP listener polls its sweep timer on every wake-up.
            if reactor.update_timer(*id, cx.waker()) {
                return Poll::Pending;
            }
            self.registered = None;
            return Poll::Ready(at);
        }
        // The first poll reads no clock either: a deadline already past
        // fires on the reactor's next turn, which waits no time for it.
        let reactor = match driving("an oi timer") {
            Ok(reactor) => reactor,
            Err(e) => {
                // A release build's timer with no reactor never fires (the
                // bug is logged once per timer; a debug build panicked).
                log::error!("{e}");
                self.when = None;
                return Poll::Pending;
            }
        };
        let id = reactor.add_timer(at, cx.waker().clone());
        self.registered = Some((reactor, id));
        Poll::Pending
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // A waker that counts its wakes, one per timer.
    use crate::reactor::WakeCount as Count;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn waker(n: &Arc<Count>) -> Waker {
        Waker::from(n.clone())
    }

    fn fire_all(q: &mut TimerQueue, now: Instant) -> usize {
        let mut due = Vec::new();
        q.fire(now, &mut due);
        let n = due.len();
        due.into_iter().for_each(Waker::wake);
        n
    }

    #[test]
    fn timers_fire_at_their_deadlines_soonest_first() {
        let t0 = Instant::now();
        let s = |ms| t0 + Duration::from_millis(ms);
        let hits: Vec<Arc<Count>> = (0..3)
            .map(|_| Arc::new(Count(AtomicUsize::new(0))))
            .collect();
        let mut q = TimerQueue::default();
        let (_, soonest) = q.add(s(30), waker(&hits[0]));
        assert!(soonest);
        let (_, soonest) = q.add(s(10), waker(&hits[1]));
        assert!(soonest, "an earlier deadline is the new soonest");
        let (_, soonest) = q.add(s(20), waker(&hits[2]));
        assert!(!soonest);
        assert_eq!(q.next_deadline(), Some(s(10)));
        assert_eq!(fire_all(&mut q, s(5)), 0);
        assert_eq!(fire_all(&mut q, s(20)), 2);
        assert_eq!(hits[1].0.load(Ordering::SeqCst), 1);
        assert_eq!(hits[2].0.load(Ordering::SeqCst), 1);
        assert_eq!(q.next_deadline(), Some(s(30)));
        assert_eq!(fire_all(&mut q, s(30)), 1);
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn a_cancelled_timer_never_fires_and_drops_its_waker_at_once() {
        let t0 = Instant::now();
        let hit = Arc::new(Count(AtomicUsize::new(0)));
        let mut q = TimerQueue::default();
        let (id, _) = q.add(t0, waker(&hit));
        assert_eq!(Arc::strong_count(&hit), 2);
        q.remove(id);
        assert_eq!(Arc::strong_count(&hit), 1, "the task is not held");
        assert_eq!(q.next_deadline(), None);
        assert_eq!(fire_all(&mut q, t0 + Duration::from_secs(1)), 0);
        assert_eq!(hit.0.load(Ordering::SeqCst), 0);
    }

    /// A timer that fired (or was cancelled) and is cancelled again later,
    /// as a dropped `Timer` does, must not cancel a newer timer that took
    /// the same slab key.
    #[test]
    fn an_old_id_does_not_cancel_a_newer_timer_on_the_same_key() {
        let t0 = Instant::now();
        let hit = Arc::new(Count(AtomicUsize::new(0)));
        let mut q = TimerQueue::default();
        let (old, _) = q.add(t0, waker(&hit));
        assert_eq!(fire_all(&mut q, t0), 1);
        let (new, _) = q.add(t0 + Duration::from_millis(5), waker(&hit));
        assert_eq!(old.key, new.key, "the key is reused");
        q.remove(old);
        assert!(!q.update(old, &waker(&hit)));
        assert!(q.update(new, &waker(&hit)));
        assert_eq!(fire_all(&mut q, t0 + Duration::from_millis(5)), 1);
    }

    /// Cancelled places never outnumber pending timers by more than the
    /// slack, however many timers come and go (each connection sets two).
    #[test]
    fn cancelled_places_are_bounded() {
        let t0 = Instant::now();
        let hit = Arc::new(Count(AtomicUsize::new(0)));
        let mut q = TimerQueue::default();
        let (kept, _) = q.add(t0 + Duration::from_secs(60), waker(&hit));
        for i in 0..100_000u64 {
            let (id, _) = q.add(t0 + Duration::from_secs(i % 7 + 1), waker(&hit));
            q.remove(id);
            assert!(q.order.len() <= 2 * q.entries.len() + SLACK + 1);
        }
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_secs(60)));
        q.remove(kept);
        assert!(q.is_empty());
    }
}
