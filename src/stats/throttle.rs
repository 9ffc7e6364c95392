//! A direction under a bandwidth limit: how much its next step may read, and
//! the timer it sleeps on until its turn (`rate.rs` holds the buckets and
//! says how a shared one serves its directions in turn). Only limited
//! directions have one; an unlimited direction's `Option<Box<Throttle>>` is
//! `None` and costs one test per step. Both pumps draw on it: the plain one
//! (`tcp/pump.rs`) and the one of connections oi speaks TLS on
//! (`tls/pump.rs`), which limits the plaintext it moves.

use super::rate::Limit;
use super::RuleStats;
use oi_runtime::reactor::Timer;
use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::{Duration, Instant};

/// The shortest sleep: a turn due within it is taken this late, one timer
/// wake-up for what would otherwise be a spin of the reactor.
const MIN_SLEEP: Duration = Duration::from_millis(1);

/// A limited direction's buckets, timer and what it owes the counters.
pub(crate) struct Throttle {
    /// The buckets every byte read is charged to, and this direction's turn.
    limit: Limit,
    /// Wakes the connection when its turn is due; made at the first wait
    /// and reused.
    timer: Option<Timer>,
    /// When the current wait began, while waiting.
    waiting_since: Option<Instant>,
    /// The next step follows a wait: what it reads was delayed.
    after_wait: bool,
    /// Delayed bytes not yet added to the rule's counters.
    delayed: u64,
    /// Time spent waiting not yet added to the counters (whole ms are).
    waited: Duration,
}

impl Throttle {
    /// A direction drawing from `limit`.
    pub(crate) fn new(limit: Limit) -> Self {
        Throttle {
            limit,
            timer: None,
            waiting_since: None,
            after_wait: false,
            delayed: 0,
            waited: Duration::ZERO,
        }
    }

    /// How many bytes the next step may read (at most `budget`): what its
    /// turn allows; `None`: the turn is not due, the timer is armed with
    /// `cx`'s waker, and the direction waits. `in_flight` (bytes read, not
    /// yet written) lets the step run with nothing to read (`Some(0)`), so
    /// they go out now; the turn stays reserved.
    pub(crate) fn admit(
        &mut self,
        cx: &mut Context<'_>,
        budget: usize,
        in_flight: bool,
    ) -> Option<usize> {
        let now = Instant::now();
        let due = match self.limit.turn(now) {
            Ok(allowed) => {
                if let Some(since) = self.waiting_since.take() {
                    self.waited = self
                        .waited
                        .saturating_add(now.saturating_duration_since(since));
                    self.after_wait = true;
                }
                return Some(usize::try_from(allowed).map_or(budget, |a| a.min(budget)));
            }
            Err(_) if in_flight => return Some(0),
            Err(due) => due,
        };
        self.waiting_since.get_or_insert(now);
        let at = due.max(now + MIN_SLEEP);
        let timer = match &mut self.timer {
            Some(t) => {
                t.set_at(at);
                t
            }
            None => self.timer.insert(Timer::at(at)),
        };
        // At least MIN_SLEEP away, so this registers the waker; should it
        // fire at once all the same, poll again rather than lose the wake-up.
        if Pin::new(timer).poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        None
    }

    /// How far, in ns, the direction's own bucket is from full now: what
    /// `oi upgrade` carries ([`Limit::owed_own`]).
    pub(crate) fn owed(&self) -> u64 {
        self.limit.owed_own(Instant::now())
    }

    /// Takes on what a previous oi's bucket for this direction owed.
    pub(crate) fn owe(&self, ns: u64) {
        self.limit.owe_own(ns, Instant::now());
    }

    /// Records the `read` bytes a step moved, out of what its turn allowed.
    pub(crate) fn charge(&mut self, read: usize) {
        let read = u64::try_from(read).unwrap_or(u64::MAX);
        if read == 0 {
            return;
        }
        if self.after_wait {
            self.after_wait = false;
            self.delayed = self.delayed.saturating_add(read);
        }
        self.limit.moved(read);
    }

    /// Adds the waits that ended to `stats`' counters (whole milliseconds;
    /// the rest waits for the next report).
    pub(crate) fn report(&mut self, stats: &RuleStats) {
        if self.delayed > 0 {
            stats.count_by(|c| &c.rate_delayed_bytes, self.delayed);
            self.delayed = 0;
        }
        let ms = self.waited.as_millis();
        if ms > 0 {
            let ms = u64::try_from(ms).unwrap_or(u64::MAX);
            stats.count_by(|c| &c.rate_wait_ms, ms);
            self.waited = self.waited.saturating_sub(Duration::from_millis(ms));
        }
    }

    /// The direction stopped (its source has nothing now, its destination
    /// is full, EOF, a pause): gives back what its turn allowed and it did
    /// not read, so a direction holds a reservation only while it reads.
    pub(crate) fn release(&mut self) {
        self.limit.release();
    }
}
