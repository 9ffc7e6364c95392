//! Bandwidth limits (`rate`, `rate-up`, `rate-down`, `rule-rate`,
//! `client-rate`): token buckets, and the per-rule and per-client sets of
//! them. It imports nothing from the crate; `tcp` and `udp` act on it.
//!
//! # The bucket
//!
//! Each [`Bucket`] is one `AtomicU64` in the form of the generic cell rate
//! algorithm: `tat`, the time (ns since the bucket was made) at which the
//! bucket would be full again. Taking `n` bytes moves `tat` forward by
//! `n / rate` seconds (from now, if it lay in the past); the bucket holds
//! what `burst` nanoseconds minus how far `tat` is ahead of now are worth.
//! One compare-and-swap per charge, no lock, so a rule's and a client's
//! buckets are shared by every thread.
//!
//! The burst is a tenth of a second's worth, at least [`MIN_BURST`] bytes, so
//! a quiet connection starts at full speed.
//!
//! # Fair shares: a stream waits its turn
//!
//! A stream direction (TCP, and a TCP→UDP stream's reads) does not look at
//! what a bucket holds and race the others for it: it *reserves* a quantum
//! ([`Bucket::reserve`]: `tat` moves on by the quantum's cost at once) and
//! sleeps on its own timer until the quantum is due, the moment the bucket
//! would have held it had nobody reserved after it. `tat` is then a queue in
//! virtual time: reservations fall due in the order they were made, spaced
//! by their cost, and a direction that has moved its quantum reserves the
//! next one behind everyone already waiting. So every direction waiting on
//! a shared bucket gets one quantum per round, a round being (waiting
//! directions x quantum) / rate, and none can be overtaken twice: no
//! starvation, while the total stays the bucket's rate (nothing moves
//! before it is due). When a direction draws from two or three buckets
//! (`rate`, `rule-rate`, `client-rate`), it reserves the same quantum in
//! each and waits for the latest: each bucket's queue is fair on its own,
//! so the directions of one client share that client's bucket evenly, and
//! the clients share the rule's. (Before, each waiting direction woke when a
//! chunk was back and the first to run took what was there: with 50 + 1
//! downloads under `rule-rate=1M`, 3 to 10 of them got no byte in 8 s and
//! Jain's index was 0.39–0.56; `benches/rate_fairness.sh`.)
//!
//! The quantum is [`WAKE_CHUNK`], or a 64th of a second's worth at high
//! rates, a 16th at low ones (`Bucket::chunk`): so the wake-ups of a bucket's
//! waiters together stay at most 64 a second (16 below 256 KiB/s), whatever
//! their number, and at high rates a turn reads full buffers. (With a fixed
//! 16 KiB chunk, a binding 256 MiB/s limit cost 1.3–1.5x the CPU per GiB of
//! an unlimited rule: 16,000 wake-ups a second, 16 KiB per step.)
//!
//! The invariant, which keeps memory bounded and the total exact: a bucket's
//! `tat` accounts for the bytes moved through it plus the quanta reserved and
//! not yet moved by live [`Limit`]s, each holding at most one quantum (two
//! words in the `Limit`, nothing in the bucket: no list of waiters, so
//! nothing to leak and O(1) per turn). A `Limit` gives back what it holds and
//! did not move when its direction stops (its source has nothing, its
//! destination is full, EOF, a hand-over's pause) and when it is dropped,
//! so a connection that ends, or a future cancelled while it waits, leaves
//! no charge for bytes that never moved.
//!
//! A datagram is all or nothing ([`Bucket::try_take`]): it passes if the
//! bucket holds it now, or is dropped; it never waits.
//!
//! # What an unlimited rule pays
//!
//! Nothing per byte: a connection of a rule without rate options has no
//! [`Limit`] (`None`), so the pump tests one `Option` per step and touches no
//! bucket, no clock and no timer.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod limit;
pub use limit::{Limit, Rates, Way};

/// The smallest burst, in bytes: one 64 KiB read always fits.
pub const MIN_BURST: u64 = 64 * 1024;

/// The quantum a waiting direction reserves per turn, or a 64th of a
/// second's worth when that is more (`Bucket::chunk`): at most 64 turns a
/// second per bucket at any rate (16 below 256 KiB/s).
pub const WAKE_CHUNK: u64 = 16 * 1024;

/// Most client addresses one rule's `client-rate` remembers.
pub const MAX_CLIENTS: usize = 65_536;

/// Nanoseconds in a second.
const NS: u128 = 1_000_000_000;

/// One token bucket, shareable between threads.
#[derive(Debug)]
pub struct Bucket {
    /// The instant `tat` counts from.
    base: Instant,
    /// Bytes per second; a reload may change it (`set_rate`). Never 0 once
    /// set (the options' range starts at 1).
    rate: AtomicU64,
    /// When the bucket is full again, in ns since `base`.
    tat: AtomicU64,
}

impl Bucket {
    /// A full bucket of `rate` bytes per second (at least 1).
    pub fn new(rate: u64) -> Self {
        Bucket {
            base: Instant::now(),
            rate: AtomicU64::new(rate.max(1)),
            tat: AtomicU64::new(0),
        }
    }

    /// Changes the rate (a reload), keeping what the bucket owes.
    pub fn set_rate(&self, rate: u64) {
        let rate = rate.max(1);
        if self.rate.load(Ordering::Relaxed) != rate {
            self.rate.store(rate, Ordering::Relaxed);
        }
    }

    /// Bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Nanoseconds since `base` at `now`.
    fn ns(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// How long `bytes` take at `rate`, in ns (rounded up, saturating).
    fn cost(bytes: u64, rate: u64) -> u64 {
        let ns = (u128::from(bytes) * NS).div_ceil(u128::from(rate.max(1)));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// The burst at `rate`, in bytes.
    pub fn burst(rate: u64) -> u64 {
        (rate / 10).max(MIN_BURST)
    }

    /// The quantum a waiting direction reserves at `rate`: [`WAKE_CHUNK`]
    /// or a 64th of a second's worth, whichever is more (at most 64 turns a
    /// second, and full-sized reads and splices at high rates); below
    /// 256 KiB/s, where 16 KiB would take longer, a 16th of a second's worth.
    /// Always within the burst (at least 64 KiB, and a tenth of a second), so
    /// a full bucket's first reservation is due at once.
    fn chunk(rate: u64) -> u64 {
        if rate / 16 < WAKE_CHUNK {
            (rate / 16).max(1)
        } else {
            (rate / 64).max(WAKE_CHUNK)
        }
    }

    /// Bytes that may move now.
    pub fn available(&self, now: Instant) -> u64 {
        let rate = self.rate();
        let burst_ns = Self::cost(Self::burst(rate), rate);
        let ahead = self
            .tat
            .load(Ordering::Relaxed)
            .saturating_sub(self.ns(now));
        let room = u128::from(burst_ns.saturating_sub(ahead));
        u64::try_from(room * u128::from(rate) / NS).unwrap_or(u64::MAX)
    }

    /// Reserves `bytes` for a waiting direction (see "Fair shares" above):
    /// `tat` moves on by their cost at once, and the answer is how long until
    /// they are due (zero: now), the moment the bucket would hold them had
    /// nobody reserved after. Reservations fall due in the order they are
    /// made. What is not moved goes back with [`Bucket::refund`].
    fn reserve(&self, bytes: u64, now: Instant) -> Duration {
        let rate = self.rate();
        let cost = Self::cost(bytes, rate);
        let burst_ns = Self::cost(Self::burst(rate), rate);
        let now = self.ns(now);
        let step = |tat: u64| tat.max(now).saturating_add(cost);
        // The closure always returns Some: fetch_update cannot fail.
        let before = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| Some(step(tat)))
            .unwrap_or_else(|tat| tat);
        // Due when the reservation's end lies within the burst of now.
        Duration::from_nanos(step(before).saturating_sub(burst_ns).saturating_sub(now))
    }

    /// Gives back `bytes` reserved and not moved: `tat` moves back by their
    /// cost, so whoever reserves next has them. (A reservation made
    /// before a reload changed the rate goes back at the new rate's cost:
    /// off by at most a quantum, once.)
    fn refund(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let cost = Self::cost(bytes, self.rate());
        // The closure always returns Some: fetch_update cannot fail.
        let _ = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| {
                Some(tat.saturating_sub(cost))
            });
    }

    /// Takes `bytes` out of the bucket (it may go into debt).
    pub fn charge(&self, bytes: u64, now: Instant) {
        if bytes == 0 {
            return;
        }
        let cost = Self::cost(bytes, self.rate());
        let now = self.ns(now);
        // The closure always returns Some: fetch_update cannot fail.
        let _ = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| {
                Some(tat.max(now).saturating_add(cost))
            });
    }

    /// Takes `bytes` if the bucket holds them (a UDP datagram: all or none).
    pub fn try_take(&self, bytes: u64, now: Instant) -> bool {
        let rate = self.rate();
        let cost = Self::cost(bytes, rate);
        let burst_ns = Self::cost(Self::burst(rate), rate);
        let now = self.ns(now);
        self.tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| {
                let next = tat.max(now).saturating_add(cost);
                (next.saturating_sub(now) <= burst_ns).then_some(next)
            })
            .is_ok()
    }

    /// Whether the bucket is full (nothing owed): forgetting it loses nothing.
    fn is_full(&self, now: Instant) -> bool {
        self.tat.load(Ordering::Relaxed) <= self.ns(now)
    }

    /// How far, in ns, the bucket is from full at `now` (0: full): what
    /// `oi upgrade` carries to the new oi's bucket ([`Bucket::owe`]).
    pub fn owed(&self, now: Instant) -> u64 {
        self.tat
            .load(Ordering::Relaxed)
            .saturating_sub(self.ns(now))
    }

    /// Makes the bucket at least `ns` from full at `now` (what a previous
    /// oi's bucket owed), keeping a larger debt of its own.
    pub fn owe(&self, ns: u64, now: Instant) {
        let at = self.ns(now).saturating_add(ns);
        self.tat.fetch_max(at, Ordering::Relaxed);
    }
}

/// A direction's buckets: up (client to backend) and down.
#[derive(Debug)]
pub struct Pair {
    /// Client to backend.
    pub up: Bucket,
    /// Backend to client.
    pub down: Bucket,
}

impl Pair {
    /// Two full buckets of `rate`.
    pub fn new(rate: u64) -> Self {
        Pair {
            up: Bucket::new(rate),
            down: Bucket::new(rate),
        }
    }

    /// Sets both rates.
    fn set_rate(&self, rate: u64) {
        self.up.set_rate(rate);
        self.down.set_rate(rate);
    }
}

/// A rule's shared buckets, owned with its counters by its listener, so a
/// reload that keeps the listener keeps them (and what they owe).
#[derive(Debug)]
pub struct RuleRates {
    /// `rule-rate`: every connection of the rule. Its rate is set from the
    /// route each connection starts with.
    rule: Arc<Pair>,
    /// `client-rate`: one pair per client address, at most [`MAX_CLIENTS`].
    clients: Mutex<HashMap<IpAddr, Arc<Pair>>>,
}

impl Default for RuleRates {
    fn default() -> Self {
        RuleRates {
            rule: Arc::new(Pair::new(1)),
            clients: Mutex::new(HashMap::new()),
        }
    }
}

impl RuleRates {
    /// The rule's pair, at `rate` (the route's `rule-rate`).
    pub fn rule(&self, rate: u64) -> Arc<Pair> {
        self.rule.set_rate(rate);
        self.rule.clone()
    }

    /// `client`'s pair, at `rate` (the route's `client-rate`). At
    /// [`MAX_CLIENTS`], clients no connection holds are forgotten (those
    /// whose bucket is full first; then any); when every one is held, the
    /// new client gets a pair of its own that is not remembered.
    pub fn client(&self, client: IpAddr, rate: u64) -> Arc<Pair> {
        let mut map = self.clients.lock();
        if let Some(pair) = map.get(&client) {
            pair.set_rate(rate);
            return pair.clone();
        }
        if map.len() >= MAX_CLIENTS {
            let now = Instant::now();
            let idle = |p: &Arc<Pair>| Arc::strong_count(p) == 1;
            map.retain(|_, p| !(idle(p) && p.up.is_full(now) && p.down.is_full(now)));
            if map.len() >= MAX_CLIENTS {
                map.retain(|_, p| !idle(p));
            }
            if map.len() >= MAX_CLIENTS {
                return Arc::new(Pair::new(rate));
            }
        }
        map.entry(client)
            .or_insert_with(|| Arc::new(Pair::new(rate)))
            .clone()
    }

    /// What the buckets owe at `now` (see [`Bucket::owed`]), for `oi
    /// upgrade`: the rule pair's (up, down), and each client's that owes
    /// anything (full buckets are as good as new ones).
    pub fn owed(&self, now: Instant) -> Owed {
        let pair = |p: &Pair| (p.up.owed(now), p.down.owed(now));
        let map = self.clients.lock();
        let clients = map
            .iter()
            .map(|(ip, p)| (*ip, pair(p)))
            .filter(|(_, (u, d))| *u > 0 || *d > 0)
            .collect();
        Owed {
            rule: pair(&self.rule),
            clients,
        }
    }

    /// Takes on what a previous oi's buckets owed (`oi upgrade`): each
    /// bucket owes at least as much as it did there. At most
    /// [`MAX_CLIENTS`] clients are remembered; the rest start full.
    pub fn carry_on(&self, owed: &Owed, now: Instant) {
        self.rule.up.owe(owed.rule.0, now);
        self.rule.down.owe(owed.rule.1, now);
        let mut map = self.clients.lock();
        for (ip, (up, down)) in &owed.clients {
            if map.len() >= MAX_CLIENTS && !map.contains_key(ip) {
                break;
            }
            // The rate is set by the first connection that uses it.
            let pair = map.entry(*ip).or_insert_with(|| Arc::new(Pair::new(1)));
            pair.up.owe(*up, now);
            pair.down.owe(*down, now);
        }
    }

    /// Client addresses remembered now.
    pub fn clients(&self) -> usize {
        self.clients.lock().len()
    }
}

/// What a rule's shared buckets owe, in ns from full ([`RuleRates::owed`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owed {
    /// The rule pair's (up, down).
    pub rule: (u64, u64),
    /// Each client's (up, down) that owes anything.
    pub clients: Vec<(IpAddr, (u64, u64))>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_holds_its_burst_and_refills_at_its_rate() {
        let b = Bucket::new(1 << 20);
        let t0 = b.base;
        assert_eq!(b.available(t0), Bucket::burst(1 << 20));
        b.charge(Bucket::burst(1 << 20), t0);
        assert_eq!(b.available(t0), 0);
        // 50 ms later, 50 ms worth is back (rounding aside).
        let later = t0 + Duration::from_millis(50);
        let got = b.available(later);
        assert!(got.abs_diff((1 << 20) / 20) <= 1, "{got}");
        // Never more than the burst, however long it waited.
        assert_eq!(
            b.available(t0 + Duration::from_secs(100)),
            Bucket::burst(1 << 20)
        );
    }

    #[test]
    fn reservations_fall_due_in_the_order_they_were_made() {
        let b = Bucket::new(1 << 20);
        let t0 = b.base;
        let burst = Bucket::burst(1 << 20);
        // A full bucket's burst goes at once, a quantum at a time; then each
        // quantum is due one quantum's cost after the one before.
        let quantum = Bucket::chunk(1 << 20);
        let at_once = burst / quantum;
        let mut last = Duration::ZERO;
        for i in 0..at_once + 10 {
            let wait = b.reserve(quantum, t0);
            if i < at_once {
                assert_eq!(wait, Duration::ZERO, "{i}");
            } else {
                assert!(wait > last, "{i}: {wait:?}");
                let step = Duration::from_nanos(Bucket::cost(quantum, 1 << 20));
                assert!(i == at_once || wait - last == step, "{i}: {wait:?}");
            }
            last = wait;
        }
        // The last one given back: the next is due when it would have been.
        b.refund(quantum);
        assert_eq!(b.reserve(quantum, t0), last);
    }

    #[test]
    fn a_waiting_direction_wakes_at_most_64_times_a_second() {
        for rate in [1, 100, 16 * 1024, 256 * 1024, 1 << 20, 1 << 28, 1 << 40] {
            let chunk = Bucket::chunk(rate);
            assert!(
                chunk >= 1 && chunk <= Bucket::burst(rate),
                "{rate}: {chunk}"
            );
            assert!(rate / chunk <= 64, "{rate}: {chunk}");
        }
        assert_eq!(Bucket::chunk(1 << 28), (1 << 28) / 64);
    }

    #[test]
    fn a_datagram_is_all_or_nothing() {
        let b = Bucket::new(100_000);
        let t0 = b.base;
        assert!(b.try_take(MIN_BURST, t0));
        assert!(!b.try_take(1, t0));
        assert!(b.try_take(100, t0 + Duration::from_millis(1)));
    }

    #[test]
    fn no_rate_no_limit() {
        let rates = Rates::default();
        let (up, down) = rates.limits(&RuleRates::default(), None);
        assert!(up.is_none() && down.is_none());
        let rates = Rates {
            down: Some(5),
            ..Rates::default()
        };
        let (up, down) = rates.limits(&RuleRates::default(), None);
        assert!(up.is_none() && down.is_some());
    }

    #[test]
    fn the_client_map_is_bounded_and_forgets_idle_clients_first() {
        let rates = RuleRates::default();
        let held = rates.client([10, 0, 0, 1].into(), 1000);
        for i in 0..MAX_CLIENTS as u32 + 10 {
            let ip = IpAddr::from((0x0b00_0000 + i).to_be_bytes());
            drop(rates.client(ip, 1000));
            assert!(rates.clients() <= MAX_CLIENTS);
        }
        // The held client's pair survived every eviction.
        let again = rates.client([10, 0, 0, 1].into(), 1000);
        assert!(Arc::ptr_eq(&held, &again));
    }

    #[test]
    fn extreme_rates_do_not_overflow() {
        for rate in [1, 1 << 40, u64::MAX] {
            let b = Bucket::new(rate);
            let t = b.base + Duration::from_secs(10);
            b.charge(u64::MAX, t);
            let _ = (
                b.available(t),
                b.reserve(u64::MAX, t),
                b.try_take(u64::MAX, t),
            );
            b.refund(u64::MAX);
        }
    }
}
