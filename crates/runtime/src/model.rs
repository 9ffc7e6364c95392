//! Model tests of the hand-offs between threads that the per-thread fast
//! paths rest on, explored with shuttle: its scheduler may switch threads
//! at every operation on [`crate::sync`]'s primitives and on the models'
//! locks, and each test runs under [`SCHEDULES`] different schedules.
//!
//! ```text
//! RUSTFLAGS="--cfg shuttle" cargo test -p oi-runtime --lib --target-dir target/shuttle model::
//! ```
//!
//! Real code: the executor ([`Executor`]: its shared queue, each thread's
//! own queue, `run`), the loop `block_on` runs ([`drive`]), the wake flags
//! ([`WakeFlags`]) and a socket's readiness ([`Readiness::poll`],
//! [`Readiness::edge`]). Modelled: epoll and the eventfd, as a count under
//! a lock that a blocking wait waits on until another thread writes it. A
//! lost wake leaves the runner blocked there with every other thread done,
//! which shuttle reports as a deadlock; the debug build's `debug_assert!`s
//! run too.
//!
//! Why shuttle and not loom: the wake flags are a store-then-load hand-off
//! on each side (`sleeping`/`woken`, and the shared queue against `woken`),
//! correct only because the accesses are `SeqCst`. loom treats `SeqCst`
//! loads and stores as acquire/release (its documented limitation), so it
//! would report lost wakes that cannot happen unless the code were rewritten
//! with fences. shuttle explores schedules under sequential consistency,
//! the model this code is written to, and needs no change to the queue
//! crate the executor uses (each of its operations is one step here). Not
//! checked here: the two orderings weaker than `SeqCst`, which shuttle runs
//! as `SeqCst`: the `Release` store of `sleeping` after a wait (its comment
//! in reactor/wake.rs says why it is enough) and the main future's flag in
//! `Executor::run` (a `Release` store before the wake, an `AcqRel` swap in
//! the poll that follows it).

use crate::executor::{Executor, MayWake};
use crate::reactor::{drive, Park, Readiness, Wait, WakeFlags};
use shuttle::sync::{Condvar, Mutex};
use std::future::{poll_fn, Future};
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};

/// Schedules explored per test. Each mutation of the hand-offs tried
/// (a flag store or the look at `woken` before sleeping removed, the flags
/// cleared after the poll instead of before, a waiter not marked waiting, a
/// task woken from another thread put on that thread's own queue) failed
/// in under a second, of the 30,000 schedules; the four tests together
/// take about 7 s (debug build, two cores).
const SCHEDULES: usize = 30_000;

/// Runs `test` over [`SCHEDULES`] schedules of shuttle's PCT scheduler
/// (probabilistic concurrency testing: random thread priorities, changed
/// at up to two random points, so any bug that needs at most three steps
/// in a given order has a known chance per schedule of being hit).
fn check(test: impl Fn() + Send + Sync + 'static) {
    shuttle::check_pct(test, SCHEDULES, 3);
}

/// An executor thread's wake flags and its eventfd (a count under a lock).
struct Thread {
    /// The real flags.
    flags: WakeFlags,
    /// What the eventfd holds: written by a waker that found the thread asleep.
    eventfd: Mutex<u64>,
    /// Told when the eventfd is written: what `epoll_wait` waits for.
    written: Condvar,
}

impl Thread {
    /// A thread neither asleep nor woken.
    fn new() -> Arc<Self> {
        Arc::new(Thread {
            flags: WakeFlags::new(),
            eventfd: Mutex::new(0),
            written: Condvar::new(),
        })
    }

    /// What `Reactor::interrupt` does: the flags, then the eventfd if asleep.
    fn interrupt(&self) {
        if self.flags.interrupt() {
            *self.eventfd.lock().expect("eventfd") += 1;
            self.written.notify_one();
        }
    }
}

/// What `block_on`'s waker does: wakes the thread.
struct ThreadWaker(Arc<Thread>);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.interrupt();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.interrupt();
    }
}

/// The turn of a reactor with no sources: waits on the eventfd when
/// [`WakeFlags::around_wait`] lets it block, reads it either way.
struct Parked(Arc<Thread>);

impl Park for Parked {
    fn flags(&self) -> &WakeFlags {
        &self.0.flags
    }

    fn turn(&mut self, block: bool) {
        let _waking = MayWake::enter();
        let thread = &self.0;
        thread.flags.around_wait(block, |may_block| {
            let mut n = thread.eventfd.lock().expect("eventfd");
            while may_block && *n == 0 {
                n = thread.written.wait(n).expect("eventfd");
            }
            *n = 0;
        });
    }
}

/// Runs `future` with `ex`'s tasks on this thread, as an executor thread does.
fn run_thread<T>(ex: &Executor, future: impl Future<Output = T>) -> T {
    let thread = Thread::new();
    let waker = Waker::from(Arc::new(ThreadWaker(thread.clone())));
    drive(&mut Parked(thread), &waker, ex.run(future))
}

/// A one-shot signal, between tasks or threads.
#[derive(Default)]
struct Signal(Mutex<(bool, Option<Waker>)>);

impl Signal {
    /// Sets it and wakes its waiter, outside the lock.
    fn set(&self) {
        let waiter = {
            let mut s = self.0.lock().expect("signal");
            s.0 = true;
            s.1.take()
        };
        if let Some(w) = waiter {
            w.wake();
        }
    }

    /// Waits until it is set.
    async fn wait(&self) {
        poll_fn(|cx| {
            let mut s = self.0.lock().expect("signal");
            if s.0 {
                return Poll::Ready(());
            }
            s.1 = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// Tasks woken from another thread take the shared queue and wake the
/// runner, whether it is running or asleep; tasks woken on the runner's
/// thread (by themselves, by another task) take its own queue. Every task
/// finishes in every schedule.
#[test]
fn a_task_woken_from_another_thread_runs_whether_its_thread_runs_or_sleeps() {
    check(|| {
        let ex = Executor::new();
        let remote = Arc::new(Signal::default());
        let local = Arc::new(Signal::default());
        let waits_remote = ex.spawn({
            let s = remote.clone();
            async move { s.wait().await }
        });
        let waits_local = ex.spawn({
            let s = local.clone();
            async move { s.wait().await }
        });
        let wakes_local = ex.spawn(async move {
            futures_lite::future::yield_now().await;
            local.set();
        });
        let other = shuttle::thread::spawn(move || remote.set());
        run_thread(&ex, async {
            waits_remote.await;
            waits_local.await;
            wakes_local.await;
        });
        other.join().expect("the other thread");
    });
}

/// The future `run` drives itself (not a task), woken from another thread.
#[test]
fn runs_own_future_woken_from_another_thread_is_polled_again() {
    check(|| {
        let ex = Executor::new();
        let signal = Arc::new(Signal::default());
        let other = shuttle::thread::spawn({
            let s = signal.clone();
            move || s.set()
        });
        run_thread(&ex, signal.wait());
        other.join().expect("the other thread");
    });
}

/// What the reactor's turn does with one event: the edge under the
/// readiness's lock (waking the slot's task in place), then the queued
/// waiters it collected.
fn edge(readiness: &Mutex<Readiness>, write: bool) {
    let mut wake = Vec::new();
    readiness.lock().expect("readiness").edge(write, &mut wake);
    for w in wake {
        w.wake();
    }
}

/// A task's wait for readiness in one direction, as `poll_registered`
/// does it (without epoll); counts itself in `waiting` at its first
/// `Pending`.
async fn wait_ready(
    readiness: Arc<Mutex<Readiness>>,
    write: bool,
    mut wait: Wait,
    waiting: Arc<(Mutex<usize>, Condvar)>,
) {
    let mut counted = false;
    poll_fn(|cx| {
        let polled = readiness.lock().expect("readiness").poll(
            write,
            cx.waker(),
            &mut wait,
            // No epoll here: a datagram socket's interest is not modelled.
            |_| Ok(()),
        );
        if polled.is_pending() && !std::mem::replace(&mut counted, true) {
            *waiting.0.lock().expect("count") += 1;
            waiting.1.notify_all();
        }
        polled.map(|r| r.expect("no epoll call fails here"))
    })
    .await
}

/// A new count of waiting tasks.
fn counter() -> Arc<(Mutex<usize>, Condvar)> {
    Arc::new((Mutex::new(0), Condvar::new()))
}

/// An edge from another thread against a task registering its wait: the
/// task sees the edge's flag, or the edge finds it waiting and wakes it,
/// through the executor's shared queue and the sleeping thread's eventfd.
/// One task waits in the slot (`poll_readable`, the pumps' way), one as a
/// `writable()` future.
#[test]
fn an_edge_from_another_thread_meets_a_registering_waiter_and_wakes_it() {
    check(|| {
        let ex = Executor::new();
        let readiness = Arc::new(Mutex::new(Readiness::default()));
        let waiting = counter();
        let reader = ex.spawn(wait_ready(
            readiness.clone(),
            false,
            Wait::Slot,
            waiting.clone(),
        ));
        let writer = ex.spawn(wait_ready(readiness.clone(), true, Wait::Fresh, waiting));
        let edges = shuttle::thread::spawn(move || {
            edge(&readiness, false);
            edge(&readiness, true);
        });
        run_thread(&ex, async {
            reader.await;
            writer.await;
        });
        edges.join().expect("the reactor's thread");
    });
}

/// Two tasks waiting in one direction (a UDP listener's reply tasks): one
/// edge, once both wait, wakes both, the one in the slot and the one
/// queued beside it. (An edge before both wait may be taken by the first:
/// the second then waits for the next, as the contract says.)
#[test]
fn one_edge_wakes_both_tasks_waiting_in_one_direction() {
    check(|| {
        let ex = Executor::new();
        let readiness = Arc::new(Mutex::new(Readiness::default()));
        let waiting = counter();
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let (r, w) = (readiness.clone(), waiting.clone());
                ex.spawn(wait_ready(r, false, Wait::Fresh, w))
            })
            .collect();
        let edges = shuttle::thread::spawn(move || {
            let (count, changed) = &*waiting;
            let mut n = count.lock().expect("count");
            while *n < 2 {
                n = changed.wait(n).expect("count");
            }
            drop(n);
            edge(&readiness, false);
        });
        run_thread(&ex, async {
            for t in tasks {
                t.await;
            }
        });
        edges.join().expect("the reactor's thread");
    });
}
