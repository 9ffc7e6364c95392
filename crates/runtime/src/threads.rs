//! Executor threads, and which of them runs a new TCP connection.
//!
//! # One executor per thread
//!
//! Each thread runs its own executor ([`crate::executor`]), and a
//! connection's task stays on the executor that spawned it, so waking it
//! never wakes another thread. A single executor shared by both threads
//! woke the other thread on nearly every task wake-up: ping-pong p50 went
//! from +50.5 to +31.3 µs over direct when each thread got its own
//! (docs/performance.md, "Latency").
//!
//! # Placement
//!
//! Every thread accepts on every listener and normally runs what it accepts.
//! But the thread that wakes first drains the whole accept queue: with iperf3
//! -P8, all eight streams landed on one thread while the other stayed idle. So
//! a thread that already runs more connections than the least busy thread by
//! more than [`SLACK`] hands the new connection to that thread instead: one
//! cross-thread wake-up when a connection starts, never one per message.
//! Short-lived connections rarely trip the threshold, so the connection rate
//! keeps the local fast path.
//!
//! The binary, the tests and the benches all start their threads here, with
//! [`Runtime::start`]. Each thread blocks on its own epoll
//! ([`crate::reactor`]), not on async-io's shared reactor.

use crate::executor::Executor;
use crate::reactor::{self, Board, Reactor, Timer};
use async_channel::{Receiver, Sender};
use async_task::Task;
use event_listener::Event;
use futures_lite::FutureExt;
use std::future::Future;
use std::io;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many more connections than the least busy thread a thread may run
/// before it hands new ones over. 1 keeps bursts of short connections local
/// (a thread is often one ahead for a moment) while long-lived bulk streams
/// end up split evenly.
pub const SLACK: usize = 1;

/// The executor threads of one process: thread 0 is the one that calls
/// [`Runtime::block_on`]; the others run their executors until the runtime drops.
pub struct Runtime {
    /// The executors and their connection counts, shared with every listener.
    threads: Arc<Threads>,
    /// Executor 0's reactor, driven by whichever thread calls [`Runtime::block_on`].
    reactor: Arc<Reactor>,
    /// Closed when the runtime drops: the worker threads stop running their executors.
    stop: Sender<()>,
    /// Worker threads 1.., joined on drop.
    workers: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// Starts `threads - 1` worker threads, named `oi-worker-N`; executor 0 is
    /// run by whichever thread calls [`block_on`](Self::block_on).
    pub fn start(threads: NonZeroUsize) -> io::Result<Self> {
        let executors: Vec<Arc<Executor>> = (0..threads.get())
            .map(|_| Arc::new(Executor::new()))
            .collect();
        // One epoll instance per thread, made here so a shortage of
        // descriptors is an error at start, not later.
        let board = Board::new(threads.get());
        let mut reactors = (0..threads.get())
            .map(|i| Reactor::seated(board.clone(), i).map(Arc::new))
            .collect::<io::Result<Vec<_>>>()?;
        let main_reactor = reactors.remove(0);
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let mut runtime = Runtime {
            threads: Threads::new(executors, board),
            reactor: main_reactor,
            stop,
            workers: Vec::new(),
        };
        for (i, reactor) in (1..threads.get()).zip(reactors) {
            let ex = runtime.threads.executors[i].clone();
            let stopped: Receiver<()> = stopped.clone();
            let worker = std::thread::Builder::new()
                .name(format!("oi-worker-{i}"))
                .spawn(move || {
                    // `run` polls this future only when it was woken (the
                    // stop), not on every batch of tasks.
                    reactor::block_on(
                        reactor,
                        ex.run(async move {
                            let _ = stopped.recv().await;
                        }),
                    )
                })?;
            runtime.workers.push(worker);
        }
        Ok(runtime)
    }

    /// Runs `future` to completion on executor 0, driving that executor's
    /// other tasks meanwhile.
    ///
    /// `future` is polled by `Executor::run` itself, only when it was woken
    /// (and first), ahead of the tasks woken with it. It was a task for a
    /// while, queued behind them: passed directly it showed a race in `oi
    /// upgrade` (the service closed a UDP listener before the listener's
    /// task had read its verdicts; `udp::listener`'s `Offering` now applies
    /// them either way), which a queue order had hidden.
    /// The future need not be `Send` or `'static`: it runs on the calling
    /// thread and is not spawned.
    pub fn block_on<T>(&self, future: impl Future<Output = T>) -> T {
        let ex = self.threads.executor(0).clone();
        reactor::block_on(self.reactor.clone(), ex.run(future))
    }

    /// Spawns a task on executor 0 (the one [`block_on`](Self::block_on) drives).
    pub fn spawn<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Task<T> {
        self.threads.executor(0).spawn(future)
    }

    /// Open TCP connections on every thread together.
    pub fn open_connections(&self) -> usize {
        self.threads.open_total()
    }

    /// Open TCP connections on thread `index` (taken modulo the thread count).
    pub fn open_on(&self, index: usize) -> usize {
        self.threads.open(index)
    }

    /// Waits until no TCP connection is open, or `limit` has passed.
    /// Wakes when the last connection of a thread ends, never by polling.
    pub async fn drained(&self, limit: Duration) {
        self.threads.drained(limit).await
    }

    /// The executors and counters listeners place connections with.
    pub fn threads(&self) -> &Arc<Threads> {
        &self.threads
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop.close();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// The executors and how many connections each one runs.
pub struct Threads {
    /// One executor per thread; index 0 is the main one (it also runs UDP).
    executors: Vec<Arc<Executor>>,
    /// Open TCP connections on each executor, by the same index.
    open: Vec<AtomicUsize>,
    /// Notified when a thread's count drops to zero, for [`Threads::drained`].
    idle: Event,
    /// Which threads are busy (their reactors say): no new connection goes there.
    board: Arc<Board>,
}

impl Threads {
    /// Wraps `executors` (each run by exactly one thread; at least one).
    fn new(executors: Vec<Arc<Executor>>, board: Arc<Board>) -> Arc<Self> {
        let open = executors.iter().map(|_| AtomicUsize::new(0)).collect();
        Arc::new(Threads {
            executors,
            open,
            idle: Event::new(),
            board,
        })
    }

    /// How many executor threads there are (at least one).
    #[expect(
        clippy::len_without_is_empty,
        reason = "never empty: at least one thread"
    )]
    pub fn len(&self) -> usize {
        self.executors.len()
    }

    /// The executor at `index` (taken modulo the count, so any index is valid).
    pub fn executor(&self, index: usize) -> &Arc<Executor> {
        &self.executors[index % self.executors.len()]
    }

    /// Open TCP connections on every thread together.
    fn open_total(&self) -> usize {
        self.open.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    /// Open connections on thread `index`.
    fn open(&self, index: usize) -> usize {
        self.open[index % self.open.len()].load(Ordering::Relaxed)
    }

    /// Where a connection accepted on thread `own` should run: `own`, unless
    /// it runs more than [`SLACK`] connections more than the least loaded
    /// thread, or its reactor says it is busy (its pumps keep it running:
    /// see `reactor::accept`); never a busy thread while another is not.
    pub fn pick(&self, own: usize) -> usize {
        let own = own % self.open.len();
        let mine = self.open[own].load(Ordering::Relaxed);
        let (least, fewest) = self
            .open
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .enumerate()
            .filter(|&(i, _)| !self.board.is_busy(i))
            .min_by_key(|&(_, n)| n)
            .unwrap_or((own, mine));
        if self.board.is_busy(own) || mine > fewest + SLACK {
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

    /// See [`Runtime::drained`].
    async fn drained(&self, limit: Duration) {
        let deadline = Instant::now().checked_add(limit);
        loop {
            // Listen before checking, so a drop between the check and the wait is not missed.
            let listener = self.idle.listen();
            if self.open_total() == 0 {
                return;
            }
            let timeout = async {
                match deadline {
                    Some(at) => Timer::at(at).await,
                    None => Timer::never().await,
                };
                true
            };
            let woken = async {
                listener.await;
                false
            };
            if woken.or(timeout).await {
                return;
            }
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
        if self.threads.open[self.index].fetch_sub(1, Ordering::Relaxed) == 1 {
            self.threads.idle.notify(usize::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `future` on this thread with a reactor of its own (its timers need one).
    fn on_a_reactor<T>(future: impl Future<Output = T>) -> T {
        reactor::block_on(Arc::new(Reactor::new().expect("epoll")), future)
    }

    fn threads(n: usize) -> Arc<Threads> {
        Threads::new(
            (0..n).map(|_| Arc::new(Executor::new())).collect(),
            Board::new(n),
        )
    }

    #[test]
    fn block_on_runs_a_future_that_borrows_and_is_not_send() {
        let runtime = Runtime::start(NonZeroUsize::MIN).expect("runtime");
        let local = std::rc::Rc::new(std::cell::Cell::new(0));
        let counted = &local;
        // A task spawned beside it still runs while the future waits on it.
        let task = runtime.spawn(async { 41 });
        let got = runtime.block_on(async move {
            counted.set(task.await + 1);
            counted.get()
        });
        assert_eq!((got, local.get()), (42, 42));
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

    #[test]
    fn drained_returns_when_the_last_connection_ends_not_at_the_limit() {
        let t = threads(2);
        let a = t.place(0);
        let b = t.place(1);
        let waiter = {
            let t = t.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                on_a_reactor(t.drained(Duration::from_secs(3600)));
                start.elapsed()
            })
        };
        drop(a);
        drop(b);
        let waited = waiter.join().expect("waiter");
        assert!(waited < Duration::from_secs(3600), "woke at the limit");
    }

    #[test]
    fn drained_gives_up_at_the_limit() {
        let t = threads(1);
        let _held = t.place(0);
        on_a_reactor(t.drained(Duration::ZERO));
        assert_eq!(t.open_total(), 1);
    }
}
