//! What one direction of one connection draws from: its own bucket, its
//! rule's and its client's, whichever are set, and its turn in their queues
//! (the quantum it has reserved and not yet moved; "Fair shares" in
//! `rate.rs`).

use super::{Bucket, Pair, RuleRates};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which buckets one side of a connection is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Client to backend.
    Up,
    /// Backend to client.
    Down,
}

/// Where a bucket of a [`Limit`] lives.
#[derive(Debug)]
enum Held {
    /// The connection's own.
    Own(Bucket),
    /// One way of a shared pair.
    Shared(Arc<Pair>, Way),
}

impl Held {
    fn bucket(&self) -> &Bucket {
        match self {
            Held::Own(b) => b,
            Held::Shared(p, Way::Up) => &p.up,
            Held::Shared(p, Way::Down) => &p.down,
        }
    }
}

/// The buckets one direction of one connection draws from: its own (`rate`,
/// `rate-up`/`rate-down`), the rule's and its client's, whichever are set;
/// and the quantum it has reserved in each of them.
///
/// Invariant (what keeps the buckets exact and this bounded): `held` bytes
/// are reserved in every one of `buckets` and not yet moved, at most one
/// quantum; everything else charged to the buckets on this `Limit`'s behalf
/// has moved. `release` and `Drop` give `held` back, so a direction that
/// stops, a connection that ends and a future dropped while it waits leave
/// no charge behind, and the buckets keep no state per waiter.
#[derive(Debug)]
pub struct Limit {
    /// One to three buckets; every byte is charged to each.
    buckets: Vec<Held>,
    /// Bytes reserved in every bucket and not yet moved (0: none, the next
    /// turn reserves).
    held: u64,
    /// When `held` is due: the latest of its buckets' answers.
    due: Instant,
}

/// The rates a rule sets, as the connection code reads them from its route.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    /// Per connection, client to backend.
    pub up: Option<u64>,
    /// Per connection, backend to client.
    pub down: Option<u64>,
    /// The rule's total, per direction.
    pub rule: Option<u64>,
    /// One client address's total, per direction.
    pub client: Option<u64>,
}

impl Rates {
    /// Whether any rate is set.
    pub fn any(&self) -> bool {
        self.up.is_some() || self.down.is_some() || self.rule.is_some() || self.client.is_some()
    }

    /// The two directions' limits (up, down) for a connection from `client`
    /// (`None` for a unix client: no per-client bucket); `None` where the
    /// direction is unlimited.
    pub fn limits(
        &self,
        shared: &RuleRates,
        client: Option<IpAddr>,
    ) -> (Option<Limit>, Option<Limit>) {
        if !self.any() {
            return (None, None);
        }
        let rule = self.rule.map(|r| shared.rule(r));
        let by_client = self.client.zip(client).map(|(r, ip)| shared.client(ip, r));
        let one = |own: Option<u64>, way: Way| {
            let mut buckets: Vec<Held> = Vec::new();
            buckets.extend(own.map(|r| Held::Own(Bucket::new(r))));
            for pair in [&rule, &by_client].into_iter().flatten() {
                buckets.push(Held::Shared(pair.clone(), way));
            }
            (!buckets.is_empty()).then(|| Limit::new(buckets))
        };
        (one(self.up, Way::Up), one(self.down, Way::Down))
    }
}

/// `now` + `by`, or the latest instant the clock can say short of that
/// (halving: at most 64 tries, and `now` itself always fits).
fn later(now: Instant, by: Duration) -> Instant {
    let mut by = by;
    loop {
        if let Some(at) = now.checked_add(by) {
            return at;
        }
        by /= 2;
    }
}

impl Limit {
    /// A direction drawing from `buckets`, holding no reservation.
    fn new(buckets: Vec<Held>) -> Self {
        Limit {
            buckets,
            held: 0,
            due: Instant::now(),
        }
    }

    /// The quantum one turn reserves: the smallest of the buckets' (the
    /// slowest bucket's), so no bucket is asked for more than a 16th of a
    /// second's worth at once.
    fn quantum(&self) -> u64 {
        self.buckets
            .iter()
            .map(|b| Bucket::chunk(b.bucket().rate()))
            .min()
            .unwrap_or(super::WAKE_CHUNK)
    }

    /// This direction's turn: `Ok(n)`, `n` bytes (at least 1) may move now;
    /// `Err(at)`, its quantum is reserved and falls due at `at` (sleep until
    /// then, asking again). Holding nothing, it reserves a quantum in every
    /// bucket, behind whoever reserved before (one compare-and-swap each).
    pub fn turn(&mut self, now: Instant) -> Result<u64, Instant> {
        if self.held == 0 {
            let quantum = self.quantum();
            let wait = self
                .buckets
                .iter()
                .map(|b| b.bucket().reserve(quantum, now))
                .max()
                .unwrap_or(Duration::ZERO);
            self.held = quantum;
            self.due = later(now, wait);
        }
        if now >= self.due {
            Ok(self.held)
        } else {
            Err(self.due)
        }
    }

    /// Records that `bytes` moved: out of what [`Limit::turn`] allowed. More
    /// than that (not done by the callers) is charged, the buckets going
    /// into debt, rather than let through free.
    pub fn moved(&mut self, bytes: u64) {
        let over = bytes.saturating_sub(self.held);
        self.held = self.held.saturating_sub(bytes);
        if over > 0 {
            let now = Instant::now();
            for b in &self.buckets {
                b.bucket().charge(over, now);
            }
        }
    }

    /// Gives back what is reserved and not moved (the direction stops:
    /// nothing to read, nowhere to write, EOF, a pause); its next turn
    /// reserves behind whoever is waiting then.
    pub fn release(&mut self) {
        if self.held > 0 {
            for b in &self.buckets {
                b.bucket().refund(self.held);
            }
            self.held = 0;
        }
    }

    /// Bytes reserved and not yet moved (at most one quantum).
    pub fn held(&self) -> u64 {
        self.held
    }

    /// How far, in ns, the connection's own bucket (`rate`, `rate-up`,
    /// `rate-down`) is from full at `now`; 0 without one. What `oi upgrade`
    /// carries with the connection ([`Limit::owe_own`]); the shared buckets
    /// travel with the rule's counters ([`RuleRates::owed`]).
    pub fn owed_own(&self, now: Instant) -> u64 {
        self.buckets
            .iter()
            .find_map(|b| match b {
                Held::Own(own) => Some(own.owed(now)),
                Held::Shared(..) => None,
            })
            .unwrap_or(0)
    }

    /// Makes the connection's own bucket at least `ns` from full at `now`
    /// (what the previous oi's owed, [`Limit::owed_own`]): a connection
    /// handed over gets no fresh burst. Nothing without one.
    pub fn owe_own(&self, ns: u64, now: Instant) {
        for b in &self.buckets {
            if let Held::Own(own) = b {
                own.owe(ns, now);
            }
        }
    }

    /// Takes a datagram of `bytes` from every bucket if each holds it; a
    /// bucket that does not refuses it, and the ones already charged keep
    /// the charge (a refused datagram is rare, and the error errs on the
    /// side of the limit).
    pub fn try_take(&self, bytes: u64, now: Instant) -> bool {
        self.buckets.iter().all(|b| b.bucket().try_take(bytes, now))
    }
}

impl Drop for Limit {
    /// The invariant's other half: a connection that ends, or a future
    /// dropped while it waited its turn, gives its reservation back.
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests;
