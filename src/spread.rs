//! Which executor thread runs a new TCP connection.
//!
//! Every executor thread accepts on every listener and normally runs what it
//! accepts, so a connection's wake-ups never cross threads. But the thread
//! that wakes first drains the whole accept queue: with iperf3 -P8, all eight
//! streams landed on one thread while the other stayed idle (README,
//! Performance). So a thread that already runs more connections than the
//! least busy thread by more than [`SLACK`] hands the new connection to that
//! thread instead: one cross-thread wake-up when a connection starts, never
//! one per message. Short-lived connections rarely trip the threshold, so the
//! connection rate keeps the local fast path.

use smol::Executor;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many more connections than the least busy thread a thread may run
/// before it hands new ones over. 1 keeps bursts of short connections local
/// (a thread is often one ahead for a moment) while long-lived bulk streams
/// end up split evenly.
pub const SLACK: usize = 1;

/// The executor threads and how many connections each one runs.
pub struct Threads {
    /// One executor per thread; index 0 is the main one (it also runs UDP).
    executors: Vec<Arc<Executor<'static>>>,
    /// Open TCP connections on each executor, by the same index.
    open: Vec<AtomicUsize>,
}

impl Threads {
    /// Wraps `executors` (each run by exactly one thread); `None` when empty.
    pub fn new(executors: Vec<Arc<Executor<'static>>>) -> Option<Arc<Self>> {
        if executors.is_empty() {
            return None;
        }
        let open = executors.iter().map(|_| AtomicUsize::new(0)).collect();
        Some(Arc::new(Threads { executors, open }))
    }

    /// How many executor threads there are (at least one).
    pub fn len(&self) -> usize {
        self.executors.len()
    }

    /// Never true: a `Threads` always has an executor (see [`Threads::new`]).
    pub fn is_empty(&self) -> bool {
        self.executors.is_empty()
    }

    /// The executor at `index` (taken modulo the count, so any index is valid).
    pub fn executor(&self, index: usize) -> &Arc<Executor<'static>> {
        &self.executors[index % self.executors.len()]
    }

    /// Open TCP connections on every thread together (`--drain` waits for 0).
    pub fn open_total(&self) -> usize {
        self.open.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    /// Open connections on thread `index`, for tests and diagnostics.
    pub fn open(&self, index: usize) -> usize {
        self.open[index % self.open.len()].load(Ordering::Relaxed)
    }

    /// Where a connection accepted on thread `own` should run: `own`, unless
    /// it runs more than [`SLACK`] connections more than the least busy thread.
    pub fn pick(&self, own: usize) -> usize {
        let own = own % self.open.len();
        let mine = self.open[own].load(Ordering::Relaxed);
        let (least, fewest) = self
            .open
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .enumerate()
            .min_by_key(|&(_, n)| n)
            .unwrap_or((own, mine));
        if mine > fewest + SLACK {
            least
        } else {
            own
        }
    }

    /// Counts a connection against thread `index` until the guard drops.
    pub fn place(self: &Arc<Self>, index: usize) -> Placed {
        let index = index % self.open.len();
        self.open[index].fetch_add(1, Ordering::Relaxed);
        Placed {
            threads: self.clone(),
            index,
        }
    }
}

/// A connection's claim on the thread that runs it; released on drop.
pub struct Placed {
    /// The counters to release into.
    threads: Arc<Threads>,
    /// The thread this connection runs on.
    index: usize,
}

impl Drop for Placed {
    fn drop(&mut self) {
        self.threads.open[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(n: usize) -> Arc<Threads> {
        Threads::new((0..n).map(|_| Arc::new(Executor::new())).collect()).expect("non-empty")
    }

    #[test]
    fn empty_list_is_refused() {
        assert!(Threads::new(Vec::new()).is_none());
    }

    #[test]
    fn stays_local_within_the_slack() {
        let t = threads(2);
        let _a = t.place(0);
        assert_eq!(t.pick(0), 0, "one ahead is within the slack");
        assert_eq!(t.pick(1), 1);
    }

    #[test]
    fn a_burst_on_one_thread_is_split_within_the_slack() {
        let t = threads(2);
        let mut held = Vec::new();
        // Eight long-lived connections all accepted by thread 0.
        for _ in 0..8 {
            let at = t.pick(0);
            held.push(t.place(at));
        }
        let (a, b) = (t.open(0), t.open(1));
        assert_eq!(a + b, 8);
        assert!(a.abs_diff(b) <= SLACK + 1, "{a} vs {b}");
        drop(held);
        assert_eq!((t.open(0), t.open(1)), (0, 0));
    }

    #[test]
    fn hands_over_to_the_least_busy_of_several() {
        let t = threads(3);
        let _held: Vec<_> = [0, 0, 0, 1, 1].iter().map(|&i| t.place(i)).collect();
        assert_eq!(t.pick(0), 2, "thread 0 runs 3, thread 2 runs none");
        assert_eq!(
            t.pick(1),
            2,
            "thread 1 runs 2, more than thread 2's none plus the slack"
        );
        let _more = t.place(2);
        assert_eq!(
            t.pick(1),
            1,
            "thread 1 runs 2, within the slack of thread 2's one"
        );
    }
}
