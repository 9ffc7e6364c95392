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
//! buckets are shared by every thread. A charge may take more than the
//! bucket holds (a shared bucket can be spent by another connection between
//! the look and the charge): the bucket is then in debt, and everyone waits
//! until it is paid.
//!
//! The burst is a tenth of a second's worth, at least [`MIN_BURST`] bytes, so
//! a quiet connection starts at full speed and one timer wake-up per step is
//! enough at any rate. A waiting direction sleeps until a chunk is there
//! ([`WAKE_CHUNK`], or a 64th of a second's worth at high rates, a 16th at
//! low ones): at most 64 wake-ups a second, not one per byte, and at high
//! rates the steps after a wake-up read full buffers. (With a fixed 16 KiB
//! chunk, a binding 256 MiB/s limit cost 1.3–1.5x the CPU per GiB of an
//! unlimited rule: 16,000 wake-ups a second, 16 KiB per step.)
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

/// The smallest burst, in bytes: one 64 KiB read always fits.
pub const MIN_BURST: u64 = 64 * 1024;

/// A waiting direction sleeps until this many bytes are in the bucket, or a
/// 64th of a second's worth when that is more (`Bucket::chunk`): at most 64
/// wake-ups a second at any rate (16 below 256 KiB/s).
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

    /// What a waiting direction sleeps for at `rate`: [`WAKE_CHUNK`] or a
    /// 64th of a second's worth, whichever is more (at most 64 wake-ups a
    /// second, and full-sized reads and splices at high rates); below
    /// 256 KiB/s, where 16 KiB would take longer, a 16th of a second's worth.
    /// Always within the burst (at least 64 KiB, and a tenth of a second).
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

    /// How long until at least [`WAKE_CHUNK`] bytes (or a sixteenth of a
    /// second's worth) are there.
    pub fn wait(&self, now: Instant) -> Duration {
        let rate = self.rate();
        let burst_ns = Self::cost(Self::burst(rate), rate);
        let want_ns = Self::cost(Self::chunk(rate), rate);
        let ahead = self
            .tat
            .load(Ordering::Relaxed)
            .saturating_sub(self.ns(now));
        // Room is `burst_ns - ahead`; it must reach `want_ns`.
        Duration::from_nanos(ahead.saturating_sub(burst_ns.saturating_sub(want_ns)))
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
/// `rate-up`/`rate-down`), the rule's and its client's, whichever are set.
#[derive(Debug)]
pub struct Limit {
    /// One to three buckets; every byte is charged to each.
    buckets: Vec<Held>,
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
            (!buckets.is_empty()).then_some(Limit { buckets })
        };
        (one(self.up, Way::Up), one(self.down, Way::Down))
    }
}

impl Limit {
    /// Bytes every bucket allows now.
    pub fn available(&self, now: Instant) -> u64 {
        self.buckets
            .iter()
            .map(|b| b.bucket().available(now))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// How long until every bucket has something worth waking for.
    pub fn wait(&self, now: Instant) -> Duration {
        self.buckets
            .iter()
            .map(|b| b.bucket().wait(now))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Charges `bytes` to every bucket.
    pub fn charge(&self, bytes: u64, now: Instant) {
        for b in &self.buckets {
            b.bucket().charge(bytes, now);
        }
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
    fn the_wait_ends_when_a_chunk_is_back() {
        let b = Bucket::new(1 << 20);
        let t0 = b.base;
        b.charge(Bucket::burst(1 << 20) + 1000, t0);
        let w = b.wait(t0);
        assert!(b.available(t0 + w) >= WAKE_CHUNK, "{w:?}");
        assert!(b.available(t0 + w - Duration::from_millis(1)) < WAKE_CHUNK);
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
    fn a_connections_own_bucket_carries_what_it_owes_and_the_shared_ones_are_left_alone() {
        let rates = Rates {
            up: Some(1 << 20),
            rule: Some(1 << 30),
            ..Rates::default()
        };
        let shared = RuleRates::default();
        let (old, _) = rates.limits(&shared, None);
        let old = old.expect("limited up");
        let now = Instant::now();
        // Drained and 0.1 s in debt: a burst's worth, then as much again.
        old.charge(2 * Bucket::burst(1 << 20), now);
        let owed = old.owed_own(now);
        assert_eq!(owed, Bucket::cost(2 * Bucket::burst(1 << 20), 1 << 20));
        // The new oi's connection: its own bucket owes as much, so nothing
        // moves until the debt is paid.
        let (new, _) = rates.limits(&RuleRates::default(), None);
        let new = new.expect("limited up");
        assert!(new.available(now) > 0, "a fresh bucket has its burst");
        new.owe_own(owed, now);
        assert_eq!(new.available(now), 0);
        assert_eq!(new.owed_own(now), owed);
        // The rule's bucket, at 1 GiB/s, owes a thousandth of that: it
        // travels with the rule's counters, not with the connection.
        assert!(shared.owed(now).rule.0 < owed / 100);
        // Unlimited by its own rate: nothing to carry.
        let only_rule = Rates {
            rule: Some(1 << 20),
            ..Rates::default()
        };
        let (up, _) = only_rule.limits(&RuleRates::default(), None);
        let up = up.expect("limited by the rule");
        up.charge(1000, now);
        assert_eq!(up.owed_own(now), 0);
    }

    #[test]
    fn extreme_rates_do_not_overflow() {
        for rate in [1, 1 << 40, u64::MAX] {
            let b = Bucket::new(rate);
            let t = b.base + Duration::from_secs(10);
            b.charge(u64::MAX, t);
            let _ = (b.available(t), b.wait(t), b.try_take(u64::MAX, t));
        }
    }
}
