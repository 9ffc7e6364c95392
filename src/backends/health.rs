//! Active health: what one probe result does to a member's health, and the
//! reply check. Probes (`crate::backends::probe`, the `oi-probe` thread) and client
//! connects (`BackendPool::failed`, `succeeded`) feed the same
//! [`MemberState`]:
//!
//! - `fall` failed probes in a row mark a member down until probes pass
//!   (`down_until` = [`PROBE_DOWN`]); a failed client connect also restarts
//!   the count of good probes;
//! - `rise` good probes in a row mark a down member up, whether its probes
//!   or `health_threshold` failed client connects took it down;
//! - a good client connect does not end a probe's verdict (the probe may
//!   check more than the connect: `check-expect`).

use super::MemberState;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// `down_until` of a member its probes marked down: never eligible by
/// time, only by `rise` good probes (or when every member is down).
pub(crate) const PROBE_DOWN: u64 = u64::MAX;

/// A rule's active health check, from its `check-*` options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Check {
    /// How often each member is probed.
    pub(crate) interval: Duration,
    /// How long one probe may take, connect to expected reply.
    pub(crate) timeout: Duration,
    /// Good probes in a row that mark a down member up (at least 1).
    pub(crate) rise: u32,
    /// Failed probes in a row that mark a member down (at least 1).
    pub(crate) fall: u32,
    /// Bytes written once connected (may be empty).
    pub(crate) send: Vec<u8>,
    /// What the reply must begin with (empty: the connect is the probe).
    pub(crate) expect: Vec<u8>,
}

/// What one probe result changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing anyone should hear about.
    Same,
    /// The member went down, after this many failed probes in a row.
    Down(u32),
    /// The member came back up, after this many good probes in a row.
    Up(u32),
}

/// Where a reply stands against the expected prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Everything so far matches; more bytes are needed.
    More,
    /// The whole prefix arrived.
    Matches,
    /// A byte differs.
    Differs,
}

/// Compares the reply so far, `got`, with `expect`: only the first
/// `expect.len()` bytes are ever read, so nothing past them matters.
pub(crate) fn reply(expect: &[u8], got: &[u8]) -> Reply {
    let n = got.len().min(expect.len());
    if got[..n] != expect[..n] {
        Reply::Differs
    } else if n == expect.len() {
        Reply::Matches
    } else {
        Reply::More
    }
}

impl MemberState {
    /// Starts a probe unless one is in flight (at most one per member,
    /// however many pools share the state across a reload).
    pub(crate) fn start_probe(&self) -> bool {
        !self.probing.swap(true, Ordering::Relaxed)
    }

    /// Marks the probe in flight as finished.
    pub(crate) fn end_probe(&self) {
        self.probing.store(false, Ordering::Relaxed);
    }

    /// Records a failed probe; see the module doc.
    pub(crate) fn probe_failed(&self, fall: u32) -> Change {
        self.probe_oks.store(0, Ordering::Relaxed);
        self.probe_us.store(NO_PROBE, Ordering::Relaxed);
        let fails = bump(&self.probe_fails);
        if fails < fall.max(1) || self.down_until.load(Ordering::Relaxed) == PROBE_DOWN {
            return Change::Same;
        }
        self.down_until.store(PROBE_DOWN, Ordering::Relaxed);
        if self.was_down.swap(true, Ordering::Relaxed) {
            // Already down for failed client connects: now until probes pass.
            Change::Same
        } else {
            Change::Down(fails)
        }
    }

    /// Records a good probe that took `rtt`; see the module doc.
    pub(crate) fn probe_passed(&self, rise: u32, rtt: Duration) -> Change {
        let us = u64::try_from(rtt.as_micros()).unwrap_or(NO_PROBE - 1);
        self.probe_us.store(us.min(NO_PROBE - 1), Ordering::Relaxed);
        self.probe_fails.store(0, Ordering::Relaxed);
        let oks = bump(&self.probe_oks);
        if self.down_until.load(Ordering::Relaxed) == 0 || oks < rise.max(1) {
            return Change::Same;
        }
        self.down_until.store(0, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        if self.was_down.swap(false, Ordering::Relaxed) {
            Change::Up(oks)
        } else {
            Change::Same
        }
    }

    /// Forgets what probes said, for a pool that no longer probes: a member
    /// down by its probes may be tried again from `now` (ms since the
    /// pool's epoch), as after a passive recovery time.
    pub(crate) fn forget_probes(&self, now: u64) {
        self.probe_fails.store(0, Ordering::Relaxed);
        self.probe_oks.store(0, Ordering::Relaxed);
        self.probe_us.store(NO_PROBE, Ordering::Relaxed);
        let _ =
            self.down_until
                .compare_exchange(PROBE_DOWN, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The last good probe's round trip; `None` before one, or after a failed probe.
    pub(crate) fn last_probe(&self) -> Option<Duration> {
        match self.probe_us.load(Ordering::Relaxed) {
            NO_PROBE => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

/// `probe_us` when there is no good probe to report.
pub(crate) const NO_PROBE: u64 = u64::MAX;

/// Adds one to a count, stopping at `u32::MAX`; returns the new count.
fn bump(count: &std::sync::atomic::AtomicU32) -> u32 {
    let before = count
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.saturating_add(1))
        })
        .unwrap_or(u32::MAX);
    before.saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> MemberState {
        MemberState::default()
    }

    #[test]
    fn fall_failed_probes_in_a_row_mark_down_once() {
        let s = state();
        assert_eq!(s.probe_failed(3), Change::Same);
        assert_eq!(s.probe_failed(3), Change::Same);
        // A good probe in between restarts the count.
        assert_eq!(s.probe_passed(2, Duration::from_millis(1)), Change::Same);
        assert_eq!(s.probe_failed(3), Change::Same);
        assert_eq!(s.probe_failed(3), Change::Same);
        assert_eq!(s.probe_failed(3), Change::Down(3));
        assert_eq!(s.down_until.load(Ordering::Relaxed), PROBE_DOWN);
        assert_eq!(s.last_probe(), None);
        // Said once: later failures change nothing.
        assert_eq!(s.probe_failed(3), Change::Same);
    }

    #[test]
    fn rise_good_probes_in_a_row_mark_up() {
        let s = state();
        assert_eq!(s.probe_failed(1), Change::Down(1));
        assert_eq!(s.probe_passed(3, Duration::from_millis(2)), Change::Same);
        assert_eq!(s.probe_passed(3, Duration::from_millis(2)), Change::Same);
        // A failure in between starts the rise over.
        assert_eq!(s.probe_failed(1), Change::Same);
        assert_eq!(s.probe_passed(3, Duration::from_millis(2)), Change::Same);
        assert_eq!(s.probe_passed(3, Duration::from_millis(2)), Change::Same);
        assert_eq!(s.probe_passed(3, Duration::from_millis(4)), Change::Up(3));
        assert_eq!(s.down_until.load(Ordering::Relaxed), 0);
        assert_eq!(s.last_probe(), Some(Duration::from_millis(4)));
        assert_eq!(s.probe_passed(3, Duration::from_millis(2)), Change::Same);
    }

    #[test]
    fn probes_end_a_passive_down_and_a_passive_down_is_not_said_twice() {
        let s = state();
        // What `BackendPool::failed` leaves after health_threshold failures.
        s.down_until.store(1_000, Ordering::Relaxed);
        s.was_down.store(true, Ordering::Relaxed);
        s.failures.store(3, Ordering::Relaxed);
        assert_eq!(s.probe_failed(1), Change::Same, "already down");
        assert_eq!(s.down_until.load(Ordering::Relaxed), PROBE_DOWN);
        assert_eq!(s.probe_passed(1, Duration::ZERO), Change::Up(1));
        assert_eq!(s.failures.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_pool_without_checks_ends_a_probe_down() {
        let s = state();
        assert_eq!(s.probe_failed(1), Change::Down(1));
        s.forget_probes(42);
        assert_eq!(s.down_until.load(Ordering::Relaxed), 42);
        assert!(
            s.was_down.load(Ordering::Relaxed),
            "the next good connect says it is up"
        );
        // A passive down keeps its own recovery time.
        s.down_until.store(1_000, Ordering::Relaxed);
        s.forget_probes(42);
        assert_eq!(s.down_until.load(Ordering::Relaxed), 1_000);
    }

    #[test]
    fn counts_stop_at_the_top() {
        let s = state();
        s.probe_fails.store(u32::MAX, Ordering::Relaxed);
        assert_eq!(s.probe_failed(100), Change::Down(u32::MAX));
        assert_eq!(s.probe_fails.load(Ordering::Relaxed), u32::MAX);
    }

    #[test]
    fn one_probe_in_flight() {
        let s = state();
        assert!(s.start_probe());
        assert!(!s.start_probe());
        s.end_probe();
        assert!(s.start_probe());
    }

    #[test]
    fn the_reply_matcher() {
        assert_eq!(reply(b"+PONG", b""), Reply::More);
        assert_eq!(reply(b"+PONG", b"+PO"), Reply::More);
        assert_eq!(reply(b"+PONG", b"+PONG"), Reply::Matches);
        assert_eq!(reply(b"+PONG", b"+PONG\r\n"), Reply::Matches);
        assert_eq!(reply(b"+PONG", b"-ERR"), Reply::Differs);
        assert_eq!(reply(b"+PONG", b"+PX"), Reply::Differs);
        assert_eq!(reply(b"", b"anything"), Reply::Matches);
    }
}
