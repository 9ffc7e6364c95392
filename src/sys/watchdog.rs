//! systemd's watchdog (`WatchdogSec=`): `WATCHDOG=1` only while every
//! thread that serves makes progress, so a deadlocked or stuck oi is killed
//! and restarted (keeping its listeners in the descriptor store) instead of
//! holding its ports while serving nothing.
//!
//! What is watched:
//! - **every executor thread** (the data plane: accept loops, pumps, UDP):
//!   each runs a heartbeat task ([`oi_runtime::Heartbeats`]) that counts
//!   every quarter period on its own reactor's timer. A thread blocked in a
//!   task or a system call stops counting; an idle thread asleep in
//!   `epoll_wait` wakes for the timer and counts. Thread 0 is the main
//!   thread, which also runs the service's loop (signals, reloads).
//! - **the control plane's thread** (`oi-observe`: the control socket, the
//!   metrics endpoint, the status file): the pings are sent from a task on
//!   its executor, so a blocked observer sends none.
//!
//! Every half period (sd_watchdog_enabled(3)'s advice) the sender reads the
//! counts and pings only if every one moved since its last look; a count
//! checked twice as often as it moves still moves between two looks when a
//! timer fires a little late. A thread stuck from time T stops the pings
//! by T + one period at most, and systemd acts one period after the last
//! ping: with `WatchdogSec=30s`, a restart within about a minute.
//!
//! Cost, at `WatchdogSec=30s` (dist/oi.service): one timer wake-up per
//! executor thread every 7.5 s, and one wake-up of the observer thread
//! every 15 s with one datagram to systemd (socket, connect, send, close).

use crate::sys::notify;
use oi_runtime::{Heartbeats, Runtime};
use std::time::Duration;

/// Shortest check period, whatever `WATCHDOG_USEC` says: a timer faster
/// than this would spin the threads it wakes.
const MIN_CHECK: Duration = Duration::from_millis(1);

/// The watchdog's sender, before it runs on the observer's thread.
pub(crate) struct Watchdog {
    /// The executor threads' counts, each moving every half `every`.
    heartbeats: Heartbeats,
    /// How often the counts are checked and, if all moved, systemd pinged:
    /// half the watchdog period.
    every: Duration,
}

impl Watchdog {
    /// The watchdog systemd asks for ([`notify::watchdog_period`]), with a
    /// heartbeat started on each of `runtime`'s threads; `None` without one.
    pub(crate) fn from_env(runtime: &Runtime) -> Option<Watchdog> {
        let period = notify::watchdog_period()?;
        let every = (period / 2).max(MIN_CHECK);
        log::debug!("systemd watchdog every {period:?}: checking the threads every {every:?}");
        Some(Watchdog {
            heartbeats: runtime.heartbeats(every / 2),
            every,
        })
    }

    /// Checks the counts every `every`, forever, pinging systemd when every
    /// thread made progress; run on the control plane's thread, so that
    /// thread's progress is the pings themselves. A stall is logged once
    /// (the journal says which thread before systemd says "Watchdog
    /// timeout"), and not at all before the first ping: executor 0 starts
    /// counting only when the main thread starts serving.
    pub(crate) async fn run(self) {
        let mut progress = Progress::new(self.heartbeats.counts().len());
        let mut pinged = false;
        let mut stalled = false;
        loop {
            async_io::Timer::after(self.every).await;
            match progress.check(self.heartbeats.counts()) {
                Ok(()) => {
                    notify::watchdog();
                    if stalled {
                        log::warn!(
                            "every executor thread makes progress again: watchdog pings resumed"
                        );
                    }
                    pinged = true;
                    stalled = false;
                }
                Err(thread) => {
                    if pinged && !stalled {
                        log::error!(
                            "executor thread {thread} ({}) made no progress in {:?}: no watchdog \
                             ping to systemd, which restarts oi if this lasts",
                            thread_name(thread),
                            self.every
                        );
                    }
                    stalled = true;
                }
            }
        }
    }
}

/// The name of executor thread `index` in `ps -L` and a debugger.
fn thread_name(index: usize) -> String {
    if index == 0 {
        "the main thread".to_string()
    } else {
        format!("oi-worker-{index}")
    }
}

/// The counts at the last check, to compare the next ones with.
struct Progress {
    /// Each thread's count at the last check (0 before the first: a thread
    /// that never counted has not started).
    last: Vec<u64>,
}

impl Progress {
    /// No check made yet, for `threads` threads.
    fn new(threads: usize) -> Progress {
        Progress {
            last: vec![0; threads],
        }
    }

    /// `Ok` if every count in `now` moved since the last check, else the
    /// first thread whose count stood still; `now` is the last check from
    /// then on either way.
    fn check(&mut self, now: Vec<u64>) -> Result<(), usize> {
        let still = if now.len() == self.last.len() {
            now.iter().zip(&self.last).position(|(n, l)| n == l)
        } else {
            // Never: the threads are fixed at start. A count that cannot
            // be compared is not progress.
            Some(0)
        };
        self.last = now;
        still.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_only_when_every_thread_moved_since_the_last_check() {
        let mut p = Progress::new(3);
        assert_eq!(
            p.check(vec![1, 0, 1]),
            Err(1),
            "thread 1 has not started counting"
        );
        assert_eq!(p.check(vec![2, 1, 2]), Ok(()));
        assert_eq!(p.check(vec![5, 9, 3]), Ok(()), "any amount is progress");
        assert_eq!(
            p.check(vec![6, 10, 3]),
            Err(2),
            "thread 2 is stuck: no ping"
        );
        assert_eq!(
            p.check(vec![7, 11, 3]),
            Err(2),
            "still stuck: still no ping"
        );
        assert_eq!(
            p.check(vec![8, 11, 4]),
            Err(1),
            "thread 2 runs again, thread 1 stopped"
        );
        assert_eq!(p.check(vec![9, 12, 5]), Ok(()), "all of them run again");
    }

    #[test]
    fn a_stuck_count_blocks_the_ping_even_when_the_others_race_ahead() {
        let mut p = Progress::new(2);
        assert_eq!(p.check(vec![1, 1]), Ok(()));
        assert_eq!(p.check(vec![u64::MAX, 1]), Err(1));
    }
}
