use super::*;
use crate::stats::rate::{MIN_BURST, WAKE_CHUNK};

const MIB: u64 = 1 << 20;

/// Jain's fairness index of `xs`: 1 when even, 1/n when one has it all.
fn jain(xs: &[u64]) -> f64 {
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let squares: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    sum * sum / (xs.len() as f64 * squares)
}

/// Charges `bytes` to every bucket of `l` at `now` (as a direction that
/// read past its turn would).
fn charge(l: &Limit, bytes: u64, now: Instant) {
    for b in &l.buckets {
        b.bucket().charge(bytes, now);
    }
}

/// What every bucket of `l` holds at `now`.
fn available(l: &Limit, now: Instant) -> u64 {
    l.buckets
        .iter()
        .map(|b| b.bucket().available(now))
        .min()
        .unwrap_or(u64::MAX)
}

/// Runs `limits` as directions that always have bytes to move, in simulated
/// time from `t0` for a second and then `secs` more: each, when its turn is
/// due, moves all it may and asks again. Returns the bytes each moved in the
/// `secs` after the first second (which the first direction starts with the
/// bucket's burst) and the longest any waited between two of its turns.
fn drain(limits: &mut [Limit], t0: Instant, secs: u64) -> (Vec<u64>, Duration) {
    let warm = t0 + Duration::from_secs(1);
    let end = warm + Duration::from_secs(secs);
    let mut next = vec![t0; limits.len()];
    let mut last = vec![t0; limits.len()];
    let mut got = vec![0u64; limits.len()];
    let mut longest = Duration::ZERO;
    // Bounded: every turn moves a quantum or moves a waiter's time on.
    for _ in 0..10_000_000 {
        let (i, &now) = next
            .iter()
            .enumerate()
            .min_by_key(|(_, at)| **at)
            .expect("directions");
        if now >= end {
            break;
        }
        match limits[i].turn(now) {
            Ok(n) => {
                limits[i].moved(n);
                if now >= warm {
                    got[i] += n;
                }
                longest = longest.max(now - last[i]);
                last[i] = now;
            }
            Err(at) => next[i] = at,
        }
    }
    (got, longest)
}

/// Down limits of `n` connections from `ip` under `rates`.
fn downs(rates: &Rates, shared: &RuleRates, ip: [u8; 4], n: usize) -> Vec<Limit> {
    (0..n)
        .map(|_| rates.limits(shared, Some(ip.into())).1.expect("limited"))
        .collect()
}

#[test]
fn a_rule_limit_serves_its_waiters_in_turn_and_its_total_stays_exact() {
    let shared = RuleRates::default();
    let rates = Rates {
        rule: Some(MIB),
        ..Rates::default()
    };
    // One client with 50 downloads, another with 1: the rule's bucket does
    // not know clients, so all 51 are equals.
    let mut limits = downs(&rates, &shared, [10, 0, 0, 1], 50);
    limits.extend(downs(&rates, &shared, [10, 0, 0, 2], 1));
    let t0 = Instant::now();
    let secs = 10;
    let (got, longest) = drain(&mut limits, t0, secs);
    let total: u64 = got.iter().sum();
    // The rate's worth, within a quantum per direction (the turns taken just
    // before the window and just before its end).
    let exact = MIB * secs;
    assert!(
        total.abs_diff(exact) <= 51 * WAKE_CHUNK,
        "{total} vs {exact}"
    );
    // Every one got its turns, within one of each other.
    let (min, max) = (got.iter().min().copied(), got.iter().max().copied());
    let (min, max) = (min.unwrap_or(0), max.unwrap_or(0));
    assert!(max - min <= WAKE_CHUNK, "{min}..{max}");
    assert!(jain(&got) >= 0.99, "{}", jain(&got));
    // A turn comes round once per round: 51 quanta at the rate (and a ms).
    let round = Duration::from_secs_f64((51 * WAKE_CHUNK) as f64 / MIB as f64);
    assert!(longest <= round + Duration::from_millis(1), "{longest:?}");
}

#[test]
fn a_client_limit_under_a_rule_limit_is_fair_within_each_client() {
    let shared = RuleRates::default();
    let rates = Rates {
        rule: Some(MIB),
        client: Some(MIB / 2),
        ..Rates::default()
    };
    let mut limits = downs(&rates, &shared, [10, 0, 0, 1], 50);
    limits.extend(downs(&rates, &shared, [10, 0, 0, 2], 1));
    let secs = 10;
    let (got, _) = drain(&mut limits, Instant::now(), secs);
    let (many, one) = got.split_at(50);
    assert!(many.iter().all(|&x| x > 0), "{many:?}");
    assert!(jain(many) >= 0.99, "{}", jain(many));
    // Each client within its own bucket, the two within the rule's.
    let client = MIB / 2 * secs;
    let a: u64 = many.iter().sum();
    let slack = 51 * WAKE_CHUNK;
    assert!(
        a <= client + slack && one[0] <= client + slack,
        "{a} {}",
        one[0]
    );
    assert!(a + one[0] <= MIB * secs + slack);
    // The lone client's one connection has its client's share, but for the
    // first round, when the 50 reserved first (0.8 s of the rule's bucket).
    assert!(one[0] * 10 >= client * 8, "{} of {client}", one[0]);
}

#[test]
fn a_dropped_or_released_reservation_is_given_back() {
    let shared = RuleRates::default();
    let rates = Rates {
        rule: Some(MIB),
        ..Rates::default()
    };
    let pair = shared.rule(MIB);
    let t0 = Instant::now();
    let full = pair.down.available(t0);
    let mut a = rates.limits(&shared, None).1.expect("limited");
    assert_eq!(a.turn(t0), Ok(WAKE_CHUNK));
    assert_eq!(pair.down.available(t0), full - WAKE_CHUNK);
    // Part moved, the rest released: only the part stays charged.
    a.moved(1000);
    a.release();
    assert_eq!(a.held(), 0);
    assert!(pair.down.available(t0).abs_diff(full - 1000) <= 1);
    // A reservation far down the queue, dropped while it waits (a future
    // cancelled): the bucket is as if it never was.
    pair.down.charge(MIN_BURST * 4, t0);
    let owed = pair.down.owed(t0);
    let mut b = rates.limits(&shared, None).1.expect("limited");
    assert!(b.turn(t0).is_err());
    assert!(pair.down.owed(t0) > owed);
    drop(b);
    assert_eq!(pair.down.owed(t0), owed);
}

#[test]
fn moving_more_than_the_turn_allowed_is_charged() {
    let shared = RuleRates::default();
    let rates = Rates {
        rule: Some(MIB),
        ..Rates::default()
    };
    let pair = shared.rule(MIB);
    let mut a = rates.limits(&shared, None).1.expect("limited");
    let t0 = Instant::now();
    assert_eq!(a.turn(t0), Ok(WAKE_CHUNK));
    a.moved(WAKE_CHUNK + MIN_BURST * 4);
    assert_eq!(a.held(), 0);
    assert!(pair.down.owed(Instant::now()) > 0, "in debt");
}

#[test]
fn the_quantum_is_the_slowest_buckets() {
    let shared = RuleRates::default();
    let rates = Rates {
        down: Some(64 * MIB),
        rule: Some(128 * 1024),
        ..Rates::default()
    };
    let mut a = rates.limits(&shared, None).1.expect("limited");
    assert_eq!(a.turn(Instant::now()), Ok(128 * 1024 / 16));
}

#[test]
fn an_absurd_wait_is_as_late_as_the_clock_says() {
    let t0 = Instant::now();
    assert!(later(t0, Duration::MAX) > t0);
    assert_eq!(
        later(t0, Duration::from_secs(1)),
        t0 + Duration::from_secs(1)
    );
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
    charge(&old, 2 * Bucket::burst(1 << 20), now);
    let owed = old.owed_own(now);
    assert_eq!(owed, Bucket::cost(2 * Bucket::burst(1 << 20), 1 << 20));
    // The new oi's connection: its own bucket owes as much, so nothing
    // moves until the debt is paid.
    let (new, _) = rates.limits(&RuleRates::default(), None);
    let new = new.expect("limited up");
    assert!(available(&new, now) > 0, "a fresh bucket has its burst");
    new.owe_own(owed, now);
    assert_eq!(available(&new, now), 0);
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
    charge(&up, 1000, now);
    assert_eq!(up.owed_own(now), 0);
}
