//! How a thread blocked in [`super::block_on`] is woken: two flags, and its
//! eventfd written only when it sleeps.
//!
//! A waker sets `woken`, then takes `sleeping`: if the thread was asleep (or
//! about to be) the waker writes the eventfd. The thread, before it blocks,
//! sets `sleeping`, then looks at `woken` again. Both sides store, then load
//! the other's flag, all `SeqCst`: in the single order of those four
//! accesses one side sees the other's store, so either the thread does not
//! block or the waker writes the eventfd; a wake is never lost (checked by
//! the model tests, `crate::model`). A waker on the thread itself, inside
//! its turn or a poll, finds `sleeping` false and writes nothing: the flag
//! is all it costs.

use crate::sync::{AtomicBool, Ordering};

/// A reactor thread's wake flags (see the module's notes).
pub(crate) struct WakeFlags {
    /// Set while the thread is (about to be) blocked in its wait with no
    /// timeout shorter than its timers: a waker must write the eventfd.
    sleeping: AtomicBool,
    /// Set when a waker or a new timer needs the thread to go round again.
    woken: AtomicBool,
}

impl WakeFlags {
    /// Neither sleeping nor woken.
    pub(crate) fn new() -> Self {
        WakeFlags {
            sleeping: AtomicBool::new(false),
            woken: AtomicBool::new(false),
        }
    }

    /// Asks the thread to go round again; true when it sleeps (or is about
    /// to) and the caller must write its eventfd.
    pub(crate) fn interrupt(&self) -> bool {
        self.woken.store(true, Ordering::SeqCst);
        self.sleeping.swap(false, Ordering::SeqCst)
    }

    /// Before the thread polls its future: a wake from now on asks for
    /// another round.
    pub(crate) fn clear(&self) {
        self.woken.store(false, Ordering::SeqCst);
    }

    /// Whether something woke the thread since [`clear`](Self::clear).
    pub(crate) fn woken(&self) -> bool {
        self.woken.load(Ordering::SeqCst)
    }

    /// Runs the thread's wait: `wait(true)` may block until the eventfd is
    /// written (or a timer is due), `wait(false)` must not block. Blocking
    /// only when `block` and nothing woke the thread meanwhile.
    pub(crate) fn around_wait<R>(&self, block: bool, wait: impl FnOnce(bool) -> R) -> R {
        if !block {
            return wait(false);
        }
        self.sleeping.store(true, Ordering::SeqCst);
        let may_block = !self.woken.load(Ordering::SeqCst);
        if !may_block {
            // Woken between the last poll and now: do not sleep.
            self.sleeping.store(false, Ordering::SeqCst);
        }
        let waited = wait(may_block);
        // Release, not SeqCst (an `xchg`, an atomic read-modify-write, on
        // every turn): a waker that still sees `true` writes the eventfd
        // once more, which the next turn reads. No wake is lost: the SeqCst
        // store before the wait and the look at `woken` after it see to that.
        self.sleeping.store(false, Ordering::Release);
        waited
    }
}
