//! The four ways a pool picks a member for a new connection. Each looks only
//! at members `ok` accepts (the eligible ones; all when all are down) and
//! returns an index into `members`; with none eligible, 0.

use super::Member;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Smooth weighted round robin (as nginx): every eligible member's running
/// weight grows by its weight, the largest wins and gives back the total.
/// Weights 5, 1, 1 give a a b a c a a, never a burst of the heavy one.
/// The caller holds the pool's rotation lock.
pub(super) fn round_robin(members: &[Arc<Member>], ok: &dyn Fn(&Member) -> bool) -> usize {
    let mut total: i64 = 0;
    let mut best: Option<(usize, i64)> = None;
    for (i, m) in members.iter().enumerate() {
        if !ok(m) {
            continue;
        }
        let weight = i64::from(m.weight());
        total += weight;
        let current = m.current.load(Ordering::Relaxed) + weight;
        m.current.store(current, Ordering::Relaxed);
        if best.is_none_or(|(_, b)| current > b) {
            best = Some((i, current));
        }
    }
    match best {
        Some((i, current)) => {
            members[i].current.store(current - total, Ordering::Relaxed);
            i
        }
        None => 0,
    }
}

/// Fewest connections; among equals the heavier weight; among those, the
/// first at or after `start` (which the caller advances), so equals take turns.
pub(super) fn least_conn(
    members: &[Arc<Member>],
    ok: &dyn Fn(&Member) -> bool,
    start: usize,
) -> usize {
    let n = members.len();
    let mut best: Option<(usize, usize, u32)> = None;
    for k in 0..n {
        let i = (start % n + k) % n;
        let m = &members[i];
        if !ok(m) {
            continue;
        }
        let (active, weight) = (m.active(), m.weight());
        let better = match best {
            None => true,
            Some((_, a, w)) => active < a || (active == a && weight > w),
        };
        if better {
            best = Some((i, active, weight));
        }
    }
    best.map_or(0, |(i, _, _)| i)
}

/// A member drawn with probability proportional to its weight, from `draw`.
pub(super) fn random(members: &[Arc<Member>], ok: &dyn Fn(&Member) -> bool, draw: u64) -> usize {
    weighted_slot(members, ok, draw)
}

/// A member decided by the client's address alone, weighted: one client
/// keeps its member while the set of eligible members stays the same.
pub(super) fn ip_hash(
    members: &[Arc<Member>],
    ok: &dyn Fn(&Member) -> bool,
    client: IpAddr,
) -> usize {
    weighted_slot(members, ok, hash_ip(client))
}

/// The member whose share of the total eligible weight contains `value`
/// modulo that total.
fn weighted_slot(members: &[Arc<Member>], ok: &dyn Fn(&Member) -> bool, value: u64) -> usize {
    let total: u64 = members
        .iter()
        .filter(|m| ok(m))
        .map(|m| u64::from(m.weight()))
        .sum();
    if total == 0 {
        return 0;
    }
    let mut left = value % total;
    for (i, m) in members.iter().enumerate() {
        if !ok(m) {
            continue;
        }
        let w = u64::from(m.weight());
        if left < w {
            return i;
        }
        left -= w;
    }
    0
}

/// FNV-1a over the address bytes, then a final mix: fixed across processes
/// and versions (a client keeps its backend across restarts), and spread
/// well enough over neighbouring addresses.
fn hash_ip(ip: IpAddr) -> u64 {
    let bytes: Vec<u8> = match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64's finaliser: FNV alone leaves low bits that follow the last byte.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}
