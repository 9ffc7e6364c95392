//! The live list's tests: entry and guard sizes, slots, `oi close`.

use super::*;
use crate::stats::counters::Counters;

/// A rule of its own, as `Stats::add_rule` makes one: the process's
/// `Stats` is in `snapshot`, above the rules this list is part of.
fn rule() -> Arc<RuleStats> {
    Arc::new(RuleStats {
        name: parking_lot::Mutex::new(Arc::from("a:1/tcp")),
        proto: oi_config::Proto::Tcp,
        counters: Counters::default(),
        process: Arc::default(),
        live: Arc::new(Live::new()),
        pool: arc_swap::ArcSwapOption::empty(),
        rates: crate::stats::rate::RuleRates::default(),
        tls: arc_swap::ArcSwapOption::empty(),
        backends: arc_swap::ArcSwap::from_pointee(Vec::new()),
    })
}

/// One entry per open connection: 136 bytes on x86_64, so that with the
/// `Arc`'s two counts it is a 160-byte allocation (glibc rounds to 16
/// with 8 bytes of its own). Growth past it costs 16 bytes per connection.
#[test]
fn entry_fits_its_budget() {
    let size = std::mem::size_of::<Conn>();
    assert!(
        size <= 136,
        "a live entry is {size} bytes, over its 136-byte budget"
    );
}

/// Every connection's task holds its guard: 16 bytes (24 with `usize`
/// shard and slot; -Zprint-type-sizes).
#[test]
fn guard_fits_its_budget() {
    let size = std::mem::size_of::<Registered>();
    assert!(
        size <= 16,
        "a live guard is {size} bytes, over its 16-byte budget"
    );
}

/// `oi close` reaches exactly the entries it picks, whether their
/// pump waits already (woken) or has not looked yet (sees the ask).
#[test]
fn a_close_asks_the_picked_entries_and_wakes_a_waiting_pump() {
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;
    /// Counts its wakes.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let rule = rule();
    let waiting = rule.clone().register(ConnKind::Tcp, Peer::Unix);
    let later = rule.clone().register(ConnKind::Tcp, Peer::Unix);
    let other = rule.clone().register(ConnKind::Tcp, Peer::Unix);
    let udp = rule.clone().register(ConnKind::Udp, Peer::Unix);
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    let cx = Context::from_waker(&waker);
    assert!(!waiting.close_asked(&cx), "nothing asked yet");
    let picked = [waiting.conn.id(), later.conn.id(), udp.conn.id()];
    let (closed, left) = rule.live.close(|c| picked.contains(&c.id()));
    assert_eq!((closed, left), (2, 1), "the UDP entry is left");
    assert_eq!(
        count.0.load(Ordering::Relaxed),
        1,
        "the waiting pump is woken"
    );
    assert!(waiting.close_asked(&cx));
    assert!(later.close_asked(&cx), "a pump that looks later sees it");
    assert!(!other.close_asked(&cx), "an entry not picked is not asked");
    drop((waiting, later));
    let shard = rule.live.shards[SHARD.with(|s| *s)].lock();
    assert!(
        shard.wakers.iter().flatten().count() <= 1,
        "wakers go with their entries"
    );
}

/// Slots are reused, and an emptied shard gives its storage back.
#[test]
fn slots_are_reused_and_freed() {
    let rule = rule();
    let live = &rule.live;
    let a = rule.clone().register(ConnKind::Tcp, Peer::Unix);
    let b = rule.clone().register(ConnKind::Tcp, Peer::Unix);
    assert_eq!(live.list().len(), 2);
    let slot_a = a.slot;
    drop(a);
    let c = rule.clone().register(ConnKind::Tcp, Peer::Unix);
    assert_eq!(c.slot, slot_a, "a freed slot is taken first");
    drop(b);
    drop(c);
    assert!(live.list().is_empty());
    let shard = live.shards[SHARD.with(|s| *s)].lock();
    assert_eq!((shard.slots.capacity(), shard.free.capacity()), (0, 0));
}

/// A UDP→TCP association's task that pauses for `oi upgrade` lets its
/// waker go: while paused the flow is left (no task would see the ask),
/// and once a new task resumes it, that task's waker is the one woken.
#[test]
fn an_unwatched_flow_is_left_until_a_new_task_watches_it() {
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;
    /// Counts its wakes.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let rule = rule();
    let flow = rule.clone().register(ConnKind::Udp, Peer::Unix);
    let (old, new) = (
        Arc::new(Count(AtomicUsize::new(0))),
        Arc::new(Count(AtomicUsize::new(0))),
    );
    let (old_waker, new_waker) = (Waker::from(old.clone()), Waker::from(new.clone()));
    assert!(!flow.close_asked(&Context::from_waker(&old_waker)));
    flow.unwatch();
    assert_eq!(rule.live.close(|_| true), (0, 1), "paused: left");
    assert!(!flow.close_asked(&Context::from_waker(&new_waker)));
    assert_eq!(rule.live.close(|_| true), (1, 0));
    assert_eq!(
        old.0.load(Ordering::Relaxed),
        0,
        "the old task is not woken"
    );
    assert_eq!(new.0.load(Ordering::Relaxed), 1, "the new task is");
    assert!(flow.close_asked(&Context::from_waker(&new_waker)));
}
