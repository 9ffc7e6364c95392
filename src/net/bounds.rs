//! Small tools for keeping what outsiders can make oi spend bounded: a byte
//! budget shared by many holders, and a rate limit for log lines about drops.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes that many holders draw from together, with a hard limit.
///
/// Taking is all-or-nothing and never waits: a request that would pass the
/// limit is refused, so the caller drops what it wanted to keep.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    /// The most bytes that may be held at once.
    limit: usize,
    /// Bytes held right now (the sum of the live [`Charge`]s).
    used: AtomicUsize,
}

impl ByteBudget {
    /// A budget of `limit` bytes, none held.
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(ByteBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Takes `n` bytes if they fit under the limit; they come back when the
    /// returned charge drops.
    pub(crate) fn try_take(self: &Arc<Self>, n: usize) -> Option<Charge> {
        let fits = |used: usize| used.checked_add(n).filter(|&t| t <= self.limit);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, fits)
            .ok()
            .map(|_| Charge {
                budget: self.clone(),
                n,
            })
    }

    /// Bytes held right now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The limit this budget was made with.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }
}

/// Bytes taken from a [`ByteBudget`]; given back on drop, so every way a
/// holder can end (sent, dropped with its queue, cancelled) returns them.
#[derive(Debug)]
pub(crate) struct Charge {
    /// The budget the bytes came from.
    budget: Arc<ByteBudget>,
    /// How many bytes this charge holds.
    n: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.n, Ordering::AcqRel);
    }
}

/// Lets something happen at most once per period, across threads: used so a
/// flood of drops or errors prints one line per period, not one per event.
#[derive(Debug)]
pub(crate) struct Every {
    /// Clock origin for `next_ms`.
    epoch: Instant,
    /// Milliseconds after `epoch` before which nothing more is let through.
    next_ms: AtomicU64,
    /// Length of one period in milliseconds.
    period_ms: u64,
}

impl Every {
    /// At most once per `period`; the first call is let through.
    pub(crate) fn new(period: Duration) -> Self {
        Every {
            epoch: Instant::now(),
            next_ms: AtomicU64::new(0),
            period_ms: u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Whether the caller may act now; if so, the next period starts.
    pub(crate) fn ready(&self) -> bool {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Relaxed);
        now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now.saturating_add(self.period_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_refuses_past_its_limit_and_gets_bytes_back_on_drop() {
        let b = ByteBudget::new(100);
        let a = b.try_take(60).expect("fits");
        assert!(b.try_take(41).is_none(), "60 + 41 > 100");
        let c = b.try_take(40).expect("60 + 40 = 100 fits");
        assert_eq!(b.used(), 100);
        drop(a);
        assert_eq!(b.used(), 40);
        drop(c);
        assert_eq!(b.used(), 0);
        assert!(b.try_take(usize::MAX).is_none(), "no overflow, refused");
    }

    #[test]
    fn every_lets_one_through_per_period() {
        let e = Every::new(Duration::from_secs(3600));
        assert!(e.ready());
        assert!(!e.ready());
        let always = Every::new(Duration::ZERO);
        assert!(always.ready() && always.ready());
    }
}
