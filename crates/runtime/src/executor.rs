//! The task queue each executor thread runs: one per thread, never shared
//! between threads' runners, so it has no work stealing and no sleepers'
//! list.
//!
//! A task woken on another thread (a placement, a reply) is pushed onto its
//! executor's shared queue, and the thread that runs the executor is told
//! through the waker its `run` future was first polled with: `block_on`'s,
//! which sets a flag while the thread runs and writes its eventfd only while
//! it sleeps. A task woken on the thread that runs its executor (its
//! reactor's turn, another task) goes onto that thread's own queue instead:
//! no atomic operation and no telling, because of this invariant —
//!
//! **On the thread that runs an executor, a task is woken only inside a poll
//! of `run` (whose loop pops it before returning `Pending`) or inside the
//! reactor's turn in `block_on` (which polls `run` right after).** Nothing
//! else on that thread wakes tasks. Measured: the shared queue's push and
//! pop were about 340 of 3,420 user-space instructions per 64 B round trip
//! (callgrind, one thread).
//!
//! Checked in debug builds: `run`'s poll and the reactor's turn each hold a
//! `MayWake`, and a task put on a thread's own queue outside both fails a
//! `debug_assert!` (the whole test suite runs the debug build). The
//! hand-off of a task woken on another thread (shared queue, then the
//! runner's waker, then its reactor's wake flags) is explored by the model
//! tests (`crate::model`, under `--cfg shuttle`).
//!
//! Why not smol's `Executor`: built for many threads running one executor,
//! it looks for work in its global queue, its runner's local queue and every
//! other runner's queue (a read lock and a random start), and keeps a
//! sleepers' list under a mutex, on every task it runs. With one runner per
//! executor none of that finds anything. Callgrind, one thread, 64 B round
//! trips: about 1,300 of oi's 5,100 user-space instructions per round trip
//! were the executor's (docs/performance.md, "Instructions per connection
//! and per round trip").
//!
//! A task that is dropped unfinished when its executor is dropped: every
//! live task's waker is kept (`active`) so that dropping the executor can
//! wake them all and drop them from the queue, as smol's does. Without it a
//! task waiting on a socket would hold that socket's registration, which
//! holds the task's waker: neither would ever be freed.

use crate::sync::{AtomicBool, Ordering};
use async_task::{Runnable, Task};
use concurrent_queue::ConcurrentQueue;
use parking_lot::Mutex;
use slab::Slab;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

/// Tasks one poll of [`Executor::run`] runs before it asks to be polled
/// again: the thread then counts a busy poll and, every so many, looks for
/// I/O events without sleeping (`reactor::block_on`), so a stream of
/// self-waking tasks cannot starve the sockets.
const TASKS_PER_POLL: usize = 64;

crate::sync::thread_local! {
    /// The executor this thread runs, and the tasks of it woken on this thread.
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local { owner: 0, queue: VecDeque::new() })
    };
}

#[cfg(debug_assertions)]
crate::sync::thread_local! {
    /// How many [`MayWake`]s this thread holds: inside a poll of `run` or a
    /// reactor's turn (they nest: a turn inside a `run`'s task does not
    /// happen, but a `run` inside another's task may).
    static MAY_WAKE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Held while this thread polls `run` or turns its reactor: the places the
/// module's invariant lets a task be woken onto this thread's own queue.
/// Counted in debug builds only; nothing in a release build.
pub(crate) struct MayWake {
    /// Not made outside [`MayWake::enter`].
    _private: (),
}

impl MayWake {
    /// Marks this thread as inside `run`'s poll or a reactor's turn until dropped.
    #[inline]
    pub(crate) fn enter() -> MayWake {
        #[cfg(debug_assertions)]
        MAY_WAKE.with(|n| n.set(n.get() + 1));
        MayWake { _private: () }
    }

    /// Whether this thread holds one (always true in a release build).
    fn held() -> bool {
        #[cfg(debug_assertions)]
        return MAY_WAKE.try_with(|n| n.get() > 0).unwrap_or(false);
        #[cfg(not(debug_assertions))]
        true
    }
}

#[cfg(debug_assertions)]
impl Drop for MayWake {
    fn drop(&mut self) {
        let _ = MAY_WAKE.try_with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Runs `f` on this thread's [`Local`]; `None` while it is borrowed (never
/// on the paths that use it) or once the thread is exiting.
fn with_local<R>(f: impl FnOnce(&mut Local) -> R) -> Option<R> {
    LOCAL
        .try_with(|l| l.try_borrow_mut().ok().map(|mut l| f(&mut l)))
        .ok()
        .flatten()
}

/// A thread's own run queue.
struct Local {
    /// The address of the [`State`] of the executor whose `run` this thread
    /// is in; 0 outside one. Only that executor's tasks go onto `queue`.
    owner: usize,
    /// Tasks woken on this thread and not yet run, in the order they were woken.
    queue: VecDeque<Runnable>,
}

/// Makes the calling thread the runner of one executor for as long as it lives.
struct Owner {
    /// The executor's state, to hand leftover tasks back to.
    state: Arc<State>,
    /// Whether this thread took ownership (false inside another executor's run).
    owns: bool,
}

impl Owner {
    /// Takes this thread's own queue for `state`'s executor, unless it already
    /// runs one (a nested run then uses the shared queue only).
    fn enter(state: &Arc<State>) -> Owner {
        let me = state.address();
        let owns = with_local(|l| {
            let free = l.owner == 0;
            if free {
                l.owner = me;
            }
            free
        })
        .unwrap_or(false);
        Owner {
            state: state.clone(),
            owns,
        }
    }

    /// The next task woken on this thread (or moved here by `take_shared`).
    fn pop(&self) -> Option<Runnable> {
        with_local(|l| l.queue.pop_front()).flatten()
    }

    /// Moves tasks woken on other threads onto this thread's queue, behind
    /// the ones already there: both kinds then run in turn. At most as many
    /// as were queued when it looked, so other threads cannot keep it here.
    fn take_shared(&self) {
        if !self.owns || self.state.queue.is_empty() {
            return;
        }
        with_local(|l| {
            for _ in 0..self.state.queue.len() {
                match self.state.queue.pop() {
                    Ok(r) => l.queue.push_back(r),
                    Err(_) => break,
                }
            }
        });
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if !self.owns {
            return;
        }
        // Tasks still on this thread's queue go back to the shared one, where
        // the executor's drop (or its next runner) finds them.
        let left: Vec<Runnable> = with_local(|l| {
            l.owner = 0;
            l.queue.drain(..).collect()
        })
        .unwrap_or_default();
        for r in left {
            let _ = self.state.queue.push(r);
        }
    }
}

/// The waker `run` gives the future it was asked to run: marks it woken,
/// then wakes whoever polls `run`.
struct MainWaker {
    /// Set when the future should be polled again.
    woken: AtomicBool,
    /// The waker `run` itself was polled with.
    outer: Waker,
}

impl Wake for MainWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.outer.wake_by_ref();
    }
}

/// A queue of tasks run by one thread at a time (see the module's notes).
pub struct Executor {
    /// What the tasks' schedule functions share with the executor.
    state: Arc<State>,
}

/// The part of an executor a task's schedule function holds.
struct State {
    /// Tasks woken and not yet run, in the order they were woken.
    queue: ConcurrentQueue<Runnable>,
    /// The waker of the thread running the executor, told of every task
    /// scheduled: the first `run` poll's (one thread drives an executor for
    /// its whole life, and its waker reaches the same reactor every time).
    notify: OnceLock<Waker>,
    /// A waker of every task that has not finished: woken and dropped
    /// unrun when the executor is dropped.
    active: Mutex<Slab<Waker>>,
}

impl State {
    /// What identifies this executor in a thread's [`Local::owner`].
    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Queues `runnable`: on this thread's own queue when this thread runs
    /// the executor (see the invariant in the module's notes), otherwise on
    /// the shared queue, telling the running thread.
    fn schedule(&self, runnable: Runnable) {
        let me = self.address();
        let mut runnable = Some(runnable);
        with_local(|l| {
            if l.owner == me {
                debug_assert!(
                    MayWake::held(),
                    "a task woken onto its runner's own queue outside `run` and the reactor's turn"
                );
                if let Some(r) = runnable.take() {
                    l.queue.push_back(r);
                }
            }
        });
        let Some(runnable) = runnable else {
            return;
        };
        // Unbounded: a push fails only once the queue is closed, which
        // this executor never does.
        let _ = self.queue.push(runnable);
        if let Some(waker) = self.notify.get() {
            waker.wake_by_ref();
        }
    }
}

/// Removes a finished (or dropped) task from the executor's live tasks.
struct Finished {
    /// The executor's state.
    state: Arc<State>,
    /// The task's place among the live tasks.
    index: usize,
}

impl Drop for Finished {
    fn drop(&mut self) {
        self.state.active.lock().try_remove(self.index);
    }
}

pin_project_lite::pin_project! {
    /// A task's future with its [`Finished`]: a struct, not an async block
    /// around the future, which would hold the future twice (the captured
    /// one and the one awaited): measured 1.03 → 1.53 KiB per idle
    /// connection (benches/idle_memory.sh).
    struct Tracked<F> {
        #[pin]
        // The task's own future.
        future: F,
        // Leaves the live tasks when the future is dropped, done or not.
        finished: Finished,
    }
}

impl<F: Future> Future for Tracked<F> {
    type Output = F::Output;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().future.poll(cx)
    }
}

impl Default for Executor {
    fn default() -> Self {
        Self::new()
    }
}

impl Executor {
    /// An executor with no tasks.
    pub fn new() -> Self {
        Executor {
            state: Arc::new(State {
                queue: ConcurrentQueue::unbounded(),
                notify: OnceLock::new(),
                active: Mutex::new(Slab::new()),
            }),
        }
    }

    /// Starts `future` as a task of this executor; it runs on the thread
    /// that runs the executor. Dropping the returned `Task` cancels it;
    /// `detach` lets it run to its end.
    pub fn spawn<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Task<T> {
        let mut active = self.state.active.lock();
        let entry = active.vacant_entry();
        let finished = Finished {
            state: self.state.clone(),
            index: entry.key(),
        };
        let future = Tracked { future, finished };
        let state = self.state.clone();
        let (runnable, task) = async_task::spawn(future, move |r| state.schedule(r));
        entry.insert(runnable.waker());
        drop(active);
        runnable.schedule();
        task
    }

    /// Runs this executor's tasks on the calling thread until `future`
    /// completes. One thread at a time.
    ///
    /// `future` is polled only when its waker was woken (and at first): a
    /// poll of `run` is mostly for its tasks, and polling a task handle or a
    /// channel each time cost about 80–100 instructions per connection
    /// (callgrind, two threads).
    pub async fn run<T>(&self, future: impl Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        let owner = Owner::enter(&self.state);
        let mut main: Option<Arc<MainWaker>> = None;
        std::future::poll_fn(|cx| {
            let _waking = MayWake::enter();
            self.state.notify.get_or_init(|| cx.waker().clone());
            // First poll, or polled with another waker: a new one, and
            // the future polled now.
            let m = match &main {
                Some(m) if m.outer.will_wake(cx.waker()) => m,
                _ => main.insert(Arc::new(MainWaker {
                    woken: AtomicBool::new(true),
                    outer: cx.waker().clone(),
                })),
            };
            if m.woken.swap(false, Ordering::AcqRel) {
                let waker = Waker::from(m.clone());
                if let Poll::Ready(v) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
                    return Poll::Ready(v);
                }
            }
            owner.take_shared();
            for _ in 0..TASKS_PER_POLL {
                // Tasks woken on other threads since `take_shared` wake
                // `notify`: the next poll takes them.
                let next = if owner.owns {
                    owner.pop()
                } else {
                    self.state.queue.pop().ok()
                };
                match next {
                    Some(runnable) => {
                        runnable.run();
                    }
                    // A task scheduled from now on wakes `notify` (set
                    // before this pop) or is woken on this thread, inside
                    // the reactor's turn that precedes the next poll.
                    None => return Poll::Pending,
                }
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Wake every unfinished task (its schedule puts it on the queue),
        // then drop the queue's runnables: each drops its task's future,
        // and with it the sockets and timers it holds.
        let wakers: Vec<Waker> = self.state.active.lock().drain().collect();
        for waker in wakers {
            waker.wake();
        }
        while self.state.queue.pop().is_ok() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn runs_spawned_tasks_and_returns_their_results() {
        let ex = Executor::new();
        let a = ex.spawn(async { 1 });
        let b = ex.spawn(async { 2 });
        let sum = futures_lite::future::block_on(ex.run(async { a.await + b.await }));
        assert_eq!(sum, 3);
    }

    #[test]
    fn a_task_woken_from_another_thread_runs() {
        let ex = Executor::new();
        let (tx, rx) = async_channel::bounded::<u32>(1);
        let t = ex.spawn(async move { rx.recv().await.expect("value") });
        let sender = std::thread::spawn(move || {
            futures_lite::future::block_on(tx.send(7)).expect("send");
        });
        assert_eq!(futures_lite::future::block_on(ex.run(t)), 7);
        sender.join().expect("sender");
    }

    #[test]
    fn dropping_the_executor_drops_its_unfinished_tasks() {
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let ex = Executor::new();
        // Waiting for ever: it holds a clone of its own waker, as a task
        // waiting on a socket does through the socket's registration.
        for _ in 0..3 {
            let held = Counted(dropped.clone());
            ex.spawn(async move {
                let _held = held;
                let mut keep: Option<Waker> = None;
                std::future::poll_fn(|cx| {
                    keep = Some(cx.waker().clone());
                    Poll::<()>::Pending
                })
                .await
            })
            .detach();
        }
        futures_lite::future::block_on(ex.run(futures_lite::future::yield_now()));
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "still waiting");
        drop(ex);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            3,
            "every waiting task dropped"
        );
    }

    /// Tasks woken on the running thread take its own queue: they still run
    /// in the order they were woken, a chain of them runs to its end within
    /// one `run`, and a task yielding for ever does not keep one woken from
    /// another thread waiting.
    #[test]
    fn tasks_woken_on_the_running_thread_run_in_order_beside_others() {
        let ex = Executor::new();
        let order = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = (0..3)
            .map(|i| {
                let order = order.clone();
                ex.spawn(async move {
                    for round in 0..3 {
                        order.lock().push((round, i));
                        futures_lite::future::yield_now().await;
                    }
                })
            })
            .collect();
        // Never finishes on its own: yields (wakes itself) for ever.
        ex.spawn(async {
            loop {
                futures_lite::future::yield_now().await;
            }
        })
        .detach();
        let (tx, rx) = async_channel::bounded::<u32>(1);
        let remote = ex.spawn(async move { rx.recv().await.expect("value") });
        let sender = std::thread::spawn(move || {
            futures_lite::future::block_on(tx.send(9)).expect("send");
        });
        let got = futures_lite::future::block_on(ex.run(async {
            for t in tasks {
                t.await;
            }
            remote.await
        }));
        sender.join().expect("sender");
        assert_eq!(got, 9);
        let order = order.lock().clone();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "rounds interleave in wake order");
    }

    /// `run` polls its own future only when that future's waker was woken,
    /// not each time it runs a batch of tasks (a worker's stop channel was
    /// polled on every batch: about 100 instructions per connection at two
    /// threads), and never misses the wake.
    #[test]
    fn runs_own_future_is_polled_only_when_woken() {
        let ex = Executor::new();
        let (tx, rx) = async_channel::bounded::<u32>(1);
        // Yields 1,000 times (about 16 batches of 64), then sends.
        ex.spawn(async move {
            for _ in 0..1000 {
                futures_lite::future::yield_now().await;
            }
            tx.send(3).await.expect("send");
        })
        .detach();
        let polls = AtomicUsize::new(0);
        let mut recv = std::pin::pin!(rx.recv());
        let got = futures_lite::future::block_on(ex.run(std::future::poll_fn(|cx| {
            polls.fetch_add(1, Ordering::SeqCst);
            recv.as_mut().poll(cx)
        })));
        assert_eq!(got.expect("value"), 3);
        let polls = polls.load(Ordering::SeqCst);
        assert!(polls <= 3, "polled {polls} times for one wake");
    }

    /// A `run` that ends with tasks on its thread's own queue hands them
    /// back: run again on another thread, they finish.
    #[test]
    fn tasks_left_queued_when_a_run_ends_run_on_the_next_runner() {
        let ex = Arc::new(Executor::new());
        let left = ex.spawn(async {
            for _ in 0..100 {
                futures_lite::future::yield_now().await;
            }
            5
        });
        // Ends on its second poll, after the first ran `left` 64 times (it
        // yields 100): `left` is then on this thread's own queue.
        futures_lite::future::block_on(ex.run(futures_lite::future::yield_now()));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let runner = ex.clone();
        std::thread::spawn(move || {
            let v = futures_lite::future::block_on(runner.run(left));
            let _ = done_tx.send(v);
        });
        let v = done_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the task left on the first thread's queue never ran");
        assert_eq!(v, 5);
    }

    /// The future of every connection's task is wrapped: the wrapper may add
    /// its guard's bytes, never a second copy of the future (an async block
    /// awaiting the future it captured did: 1.03 -> 1.53 KiB per idle
    /// connection, benches/idle_memory.sh).
    #[test]
    fn wrapping_a_future_adds_only_its_guard() {
        fn tracked_size<F: Future>(future: F) -> usize {
            let finished = Finished {
                state: Executor::new().state.clone(),
                index: usize::MAX,
            };
            std::mem::size_of_val(&Tracked { future, finished })
        }
        let big = [7u8; 1024];
        let future = async move {
            futures_lite::future::yield_now().await;
            big.len()
        };
        let alone = std::mem::size_of_val(&future);
        assert!(alone >= 1024);
        let wrapped = tracked_size(future);
        // The guard's bytes, and the padding that aligns them.
        let guard = std::mem::size_of::<Finished>();
        assert!(
            wrapped <= alone.next_multiple_of(std::mem::align_of::<Finished>()) + guard,
            "a {alone}-byte future takes {wrapped} bytes wrapped"
        );
    }

    #[test]
    fn a_finished_task_leaves_the_live_list() {
        let ex = Executor::new();
        let t = ex.spawn(async { 5 });
        assert_eq!(futures_lite::future::block_on(ex.run(t)), 5);
        assert_eq!(ex.state.active.lock().len(), 0);
    }
}
