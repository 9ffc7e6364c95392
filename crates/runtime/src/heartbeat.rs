//! Heartbeats: proof that every executor thread still turns its loop.
//!
//! [`Runtime::heartbeats`](crate::Runtime::heartbeats) spawns one task on
//! each executor that adds one to that thread's counter, at once and then
//! every `every`, on a [`Timer`] of the thread's own reactor. The count moves
//! only while the thread runs its executor and turns its reactor: a thread
//! blocked in a task (a deadlock, a system call that does not return, a
//! loop that never yields) stops its count, while an idle thread, asleep in
//! `epoll_wait`, still wakes for the timer and counts. A watcher elsewhere
//! reads the counts and judges; this module says nothing about what a
//! stopped count means.
//!
//! The cost is one timer wake-up per thread per `every`: with nothing else
//! to do, the wake is one `epoll_wait` return, one task poll and one
//! atomic add.

use crate::reactor::Timer;
use crate::threads::{Runtime, Threads};
use async_task::Task;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One counter per executor thread, each moved by a task on that thread;
/// the tasks stop when this is dropped.
pub struct Heartbeats {
    /// The counters, by thread index (0 is the thread of `Runtime::block_on`).
    beats: Arc<[AtomicU64]>,
    /// The beating tasks, one per thread: dropping them cancels them, each
    /// dropped on its own thread by its executor.
    _tasks: Vec<Task<()>>,
}

impl Heartbeats {
    /// Starts a beating task on every executor of `threads`.
    fn start(threads: &Threads, every: Duration) -> Heartbeats {
        let beats: Arc<[AtomicU64]> = (0..threads.len()).map(|_| AtomicU64::new(0)).collect();
        let tasks = (0..threads.len())
            .map(|i| {
                let beats = beats.clone();
                threads.executor(i).spawn(async move {
                    let mut timer = Timer::never();
                    loop {
                        beats[i].fetch_add(1, Ordering::Relaxed);
                        timer.set_after(every);
                        (&mut timer).await;
                    }
                })
            })
            .collect();
        Heartbeats {
            beats,
            _tasks: tasks,
        }
    }

    /// Each thread's count now, by thread index: a count that has not moved
    /// between two reads an `every` or more apart is a thread that did not
    /// run its executor meanwhile.
    pub fn counts(&self) -> Vec<u64> {
        self.beats
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }
}

impl Runtime {
    /// Starts a heartbeat on every executor thread, each counting once at
    /// once and then every `every` for as long as the thread runs its loop
    /// (a thread blocked in a task stops its count; an idle one, asleep in
    /// `epoll_wait`, still counts); dropping the result stops them.
    pub fn heartbeats(&self, every: Duration) -> Heartbeats {
        Heartbeats::start(self.threads(), every)
    }
}

#[cfg(test)]
mod tests {
    use crate::reactor::Timer;
    use crate::Runtime;
    use std::num::NonZeroUsize;
    use std::time::{Duration, Instant};

    /// Longest a test waits for counts to move: generous for a loaded machine.
    const PATIENCE: Duration = Duration::from_secs(30);

    #[test]
    fn idle_threads_beat_and_a_blocked_thread_stops_beating_until_it_runs_again() {
        let threads = NonZeroUsize::new(3).expect("3");
        let runtime = Runtime::start(threads).expect("runtime");
        let every = Duration::from_millis(5);
        let hearts = runtime.heartbeats(every);
        // Thread 2 blocks in a task until the test lets it go.
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (entered, in_task) = std::sync::mpsc::channel::<()>();
        runtime
            .threads()
            .executor(2)
            .spawn(async move {
                let _ = entered.send(());
                let _ = blocked.recv();
            })
            .detach();
        runtime.block_on(async {
            in_task.recv().expect("the blocking task ran");
            // Thread 2 is inside the blocking task now: its count is final
            // until it is released.
            let start = hearts.counts();
            let deadline = Instant::now() + PATIENCE;
            let mut now = hearts.counts();
            // Ten periods of the idle threads 0 and 1 (each beats at least
            // once per period when it runs at all).
            while (now[0] < start[0] + 10 || now[1] < start[1] + 10) && Instant::now() < deadline {
                Timer::after(every).await;
                now = hearts.counts();
            }
            assert!(
                now[0] >= start[0] + 10 && now[1] >= start[1] + 10,
                "idle threads 0 and 1 did not beat ten times in {PATIENCE:?}: {start:?} -> {now:?}"
            );
            assert!(
                now[2] == start[2],
                "thread 2 is blocked in a task yet beat: {start:?} -> {now:?}"
            );
            release.send(()).expect("release");
            let stopped_at = now[2];
            while hearts.counts()[2] <= stopped_at + 1 && Instant::now() < deadline {
                Timer::after(every).await;
            }
            assert!(
                hearts.counts()[2] > stopped_at + 1,
                "thread 2 did not beat again once released"
            );
        });
    }

    #[test]
    fn dropping_the_heartbeats_stops_the_tasks() {
        let runtime = Runtime::start(NonZeroUsize::new(2).expect("2")).expect("runtime");
        let hearts = runtime.heartbeats(Duration::from_millis(1));
        let beats = hearts.beats.clone();
        drop(hearts);
        // Runs executor 0 until the cancelled tasks have gone: only the
        // counters' own handle is left then.
        let deadline = Instant::now() + PATIENCE;
        runtime.block_on(async {
            while std::sync::Arc::strong_count(&beats) > 1 && Instant::now() < deadline {
                Timer::after(Duration::from_millis(1)).await;
            }
        });
        assert_eq!(
            std::sync::Arc::strong_count(&beats),
            1,
            "a beating task outlived its Heartbeats"
        );
    }
}
