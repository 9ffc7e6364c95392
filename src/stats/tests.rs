//! Counting, end to end: open, bytes, refusals, failures, removal.

use super::*;
use crate::logfile::Event;
use oi_config::Proto;
use std::net::SocketAddr;

/// The process's counters, and a snapshot of them with empty pools: the
/// counters alone, without `crate::Shared` (which holds a [`Stats`]; naming
/// it here would make `shared` and `stats` import each other).
struct Fixture {
    /// The counters under test.
    stats: Stats,
    /// Copy and datagram buffers (empty).
    buffers: crate::BufferPool,
    /// Splice pipes (none).
    pipes: crate::PipePool,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            stats: Stats::default(),
            buffers: crate::BufferPool::new(1024, 0),
            pipes: crate::PipePool::new(crate::MIN_PIPE_SIZE, 0),
        }
    }

    fn snapshot(&self) -> Snapshot {
        self.stats.snapshot(Pools {
            buffers: &self.buffers,
            datagrams: &self.buffers,
            pipes: &self.pipes,
            udp_dropped: 0,
            udp_queued: 0,
            log_queued: 0,
            log_dropped: 0,
        })
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("literal")
}

#[test]
fn connections_count_while_open_and_bytes_add_up_after() {
    let shared = Fixture::new();
    let stats = &shared.stats;
    let b = addr("127.0.0.1:2");
    let rule = stats.add_rule("a:1/tcp".into(), Proto::Tcp, &[b]);
    let conn = rule.clone().register(ConnKind::Tcp, addr("127.0.0.1:9"));
    conn.connected(b);
    conn.publish(10, 20, ConnState::Open);
    let s = shared.snapshot();
    assert_eq!(s.totals.active_tcp, 1);
    assert_eq!((s.totals.from_client, s.totals.to_client), (10, 20));
    assert_eq!(s.rules[0].backends[0].active, 1);
    assert_eq!(s.rules[0].backends[0].from_client, 10);
    assert_eq!(stats.connections().len(), 1);
    conn.publish(15, 20, ConnState::ClientClosed);
    drop(conn);
    let s = shared.snapshot();
    assert_eq!(s.totals.active_tcp, 0);
    assert_eq!(s.totals.opened_tcp, 1);
    assert_eq!(
        (s.rules[0].counters.from_client, s.totals.to_client),
        (15, 20)
    );
    assert_eq!(s.rules[0].backends[0].active, 0);
    assert_eq!(s.rules[0].backends[0].to_client, 20);
    assert!(stats.connections().is_empty());
}

#[test]
fn refusals_failures_and_evictions_are_counted_per_rule_and_in_total() {
    let shared = Fixture::new();
    let stats = &shared.stats;
    let rule = stats.add_rule("a:1/udp".into(), Proto::Udp, &[]);
    rule.refused(Event::Denied);
    rule.refused(Event::NotAllowed);
    rule.refused(Event::NotAllowed);
    rule.connect_failed(ConnectFailure::Refused);
    rule.connect_failed(ConnectFailure::Timeout);
    rule.udp_evicted();
    rule.refused(Event::LimitReached);
    assert_eq!(rule.udp_proxy_dropped(), 1, "the process's total so far");
    assert_eq!(rule.udp_proxy_dropped(), 2);
    let s = shared.snapshot();
    for c in [&s.totals, &s.rules[0].counters] {
        assert_eq!((c.denied, c.not_allowed), (1, 2));
        assert_eq!(
            (c.connect_refused, c.connect_timeout, c.connect_failed()),
            (1, 1, 2)
        );
        assert_eq!(c.udp_evicted, 1);
        assert_eq!((c.limit_reached, c.udp_proxy_dropped), (1, 2));
        assert_eq!(c.refused(), 3, "ACL refusals only");
    }
    assert_eq!(stats.udp_proxy_dropped(), 2);
    stats.remove_rule(&rule);
    let s = shared.snapshot();
    assert!(s.rules.is_empty());
    assert_eq!(
        s.totals.denied, 1,
        "process totals keep a removed rule's counts"
    );
}

#[test]
fn connect_errors_are_classified() {
    use std::io::{Error, ErrorKind};
    assert_eq!(
        ConnectFailure::of(&ErrorKind::ConnectionRefused.into()),
        ConnectFailure::Refused
    );
    assert_eq!(
        ConnectFailure::of(&ErrorKind::TimedOut.into()),
        ConnectFailure::Timeout
    );
    let unreach = Error::from_raw_os_error(rustix::io::Errno::HOSTUNREACH.raw_os_error());
    assert_eq!(ConnectFailure::of(&unreach), ConnectFailure::Unreachable);
    assert_eq!(
        ConnectFailure::of(&ErrorKind::Other.into()),
        ConnectFailure::Other
    );
}

#[test]
fn counters_carried_by_an_upgrade_continue_where_they_were() {
    let old = Fixture::new();
    let b = addr("127.0.0.1:2");
    let rule = old.stats.add_rule("a:1/tcp".into(), Proto::Tcp, &[b]);
    let gone = old.stats.add_rule("gone:1/tcp".into(), Proto::Tcp, &[b]);
    let ended = rule.clone().register(ConnKind::Tcp, addr("127.0.0.1:9"));
    ended.connected(b);
    ended.publish(100, 200, ConnState::Open);
    drop(ended);
    rule.refused(Event::Denied);
    gone.refused(Event::Denied);
    // One connection open at the hand-over: the new oi takes it up.
    let live = rule.clone().register(ConnKind::Tcp, addr("127.0.0.1:10"));
    live.connected(b);
    live.publish(7, 8, ConnState::Open);
    let before = old.snapshot();
    let carried = old.stats.carried();

    let new = Fixture::new();
    let mine = new.stats.add_rule("a:1/tcp".into(), Proto::Tcp, &[b]);
    assert_eq!(
        new.stats.carry_on(&carried),
        1,
        "one rule of the two is served"
    );
    // Open for a day and a half already: older than anything this process
    // has timed, its age goes on from there.
    let age = std::time::Duration::from_secs(36 * 3600);
    let adopted = mine.register_resumed(ConnKind::Tcp, addr("127.0.0.1:10"), age);
    adopted.reconnected(b);
    adopted.publish(7, 8, ConnState::Open);
    assert!(adopted.age() >= age, "{:?}", adopted.age());
    let listed = new.stats.connections();
    assert!(listed[0].age >= age, "{:?}", listed[0].age);
    let after = new.snapshot();
    let (was, is) = (&before.rules[0], &after.rules[0]);
    assert_eq!(is.counters, was.counters, "every rule counter carries on");
    assert_eq!(is.backends[0], was.backends[0], "so do the backend's");
    assert_eq!(
        after.totals, before.totals,
        "and the process's, the gone rule's included"
    );
    drop(live);
    drop(adopted);
    let later = new.snapshot();
    assert_eq!(later.rules[0].counters.active_tcp, 0);
    assert_eq!(later.rules[0].counters.opened_tcp, 2);
    assert_eq!(later.rules[0].counters.from_client, 107);
    assert_eq!(later.rules[0].backends[0].to_client, 208);
}

#[test]
fn what_the_old_oi_counts_while_draining_joins_the_new_ones_counters_once() {
    let old = Fixture::new();
    let b = addr("127.0.0.1:2");
    let rule = old.stats.add_rule("a:1/tcp".into(), Proto::Tcp, &[b]);
    // Open at the hand-over: one the new oi takes, one it leaves here.
    let taken = rule.clone().register(ConnKind::Tcp, addr("127.0.0.1:9"));
    taken.connected(b);
    taken.publish(100, 200, ConnState::Open);
    let kept = rule.clone().register(ConnKind::Tcp, addr("127.0.0.1:10"));
    kept.connected(b);
    kept.publish(1, 2, ConnState::Open);
    let (carried, sent) = old.stats.carried_from_here();

    let new = Fixture::new();
    let mine = new.stats.add_rule("a:1/tcp".into(), Proto::Tcp, &[b]);
    new.stats.carry_on(&carried);
    let adopted = mine.register_resumed(
        ConnKind::Tcp,
        addr("127.0.0.1:9"),
        std::time::Duration::ZERO,
    );
    adopted.reconnected(b);
    adopted.publish(100, 200, ConnState::Open);
    let before = new.snapshot();

    // The old oi: its copy of the one taken closes without its bytes; its
    // listeners close (the rule leaves its list); the kept one forwards
    // more and ends; one more is refused meanwhile.
    taken.handed_on();
    drop(taken);
    old.stats.remove_rule(&rule);
    kept.publish(1_001, 2_002, ConnState::Open);
    drop(kept);
    rule.refused(Event::Denied);
    let drained = old.stats.drained_since(&sent);
    assert_eq!(new.stats.fold_drained(&drained), 1, "the rule serves here");
    let after = new.snapshot();
    let (was, is) = (&before.rules[0].counters, &after.rules[0].counters);
    assert_eq!(
        (is.from_client, is.to_client),
        (was.from_client + 1_000, was.to_client + 2_000),
        "the kept connection's bytes since the hand-over, and not the taken one's again"
    );
    assert_eq!(is.opened_tcp, was.opened_tcp, "opened before the hand-over");
    assert_eq!(is.active_tcp, 1, "the taken one only");
    assert_eq!(is.denied, was.denied + 1, "the refusal while draining");
    assert_eq!(after.totals.from_client, before.totals.from_client + 1_000);
    // The backend's count had no floor for the kept connection's first
    // byte (the old oi never took a snapshot here): it gets all its bytes.
    assert_eq!(
        after.rules[0].backends[0].from_client,
        before.rules[0].backends[0].from_client + 1_001
    );
}

#[test]
fn an_upgrade_carries_the_uptime_the_last_reload_and_what_the_shared_buckets_owe() {
    let old = Fixture::new();
    let rule = old.stats.add_rule("a:1/tcp".into(), Proto::Tcp, &[]);
    // The old oi has run an hour (its clocks set back as a carry would).
    let hour = std::time::Duration::from_secs(3600);
    {
        let mut started = old.stats.started.lock();
        started.0 = started.0.checked_sub(hour).expect("an hour fits");
        started.1 -= hour;
    }
    old.stats.reloaded(true);
    let now = std::time::Instant::now();
    // A rule-rate and one client's bucket in debt, another client's full.
    let client: std::net::IpAddr = "192.0.2.1".parse().expect("literal");
    let full: std::net::IpAddr = "192.0.2.2".parse().expect("literal");
    rule.rates.rule(1000).up.charge(5000, now);
    rule.rates.client(client, 1000).down.charge(3000, now);
    let _ = rule.rates.client(full, 1000);
    let before = old.snapshot();
    let carried = old.stats.carried();

    let new = Fixture::new();
    let mine = new.stats.add_rule("a:1/tcp".into(), Proto::Tcp, &[]);
    assert_eq!(new.stats.carry_on(&carried), 1);
    let after = new.snapshot();
    assert!(after.uptime >= before.uptime, "{after:?} / {before:?}");
    assert!(after.uptime >= hour, "the uptime goes on from the old oi's");
    assert_eq!(after.started_at, before.started_at);
    assert_eq!(
        after.last_reload, before.last_reload,
        "stats_since_reload is the old oi's reload"
    );
    // Still owing about 5 s (up) and 3 s (down, the client's): no new burst.
    let later = std::time::Instant::now();
    let owed = mine.rates.owed(later);
    assert!(owed.rule.0 > 4_000_000_000, "{owed:?}");
    assert_eq!(owed.rule.1, 0);
    assert_eq!(
        owed.clients.len(),
        1,
        "a full bucket is not carried: {owed:?}"
    );
    assert_eq!(owed.clients[0].0, client);
    assert!(owed.clients[0].1 .1 > 2_000_000_000, "{owed:?}");
    // A fresh bucket would hold a full burst; this one lacks the 5,000 bytes.
    let room = mine.rates.rule(1000).up.available(later);
    assert!(
        room <= crate::stats::rate::Bucket::burst(1000) - 4_000,
        "{room}"
    );
}

#[test]
fn a_connection_routed_by_server_name_counts_on_the_rule_it_was_routed_to() {
    let shared = Fixture::new();
    let stats = &shared.stats;
    let (a, d) = (addr("127.0.0.1:2"), addr("127.0.0.1:3"));
    let listener = stats.add_rule("h:1/tcp".into(), Proto::Tcp, &[d]);
    let routed = stats.add_rule("h:1/tcp[sni=a.example]".into(), Proto::Tcp, &[a]);
    let count = |s: &Snapshot, i: usize| {
        let c = &s.rules[i].counters;
        (c.active_tcp, c.opened_tcp)
    };

    // While its ClientHello is read: open on the listener's rule, opened nowhere.
    let mut conn = listener
        .clone()
        .register_unrouted(ConnKind::Tcp, addr("127.0.0.1:9"));
    let s = shared.snapshot();
    assert_eq!((count(&s, 0), count(&s, 1)), ((1, 0), (0, 0)));
    assert_eq!((s.totals.active_tcp, s.totals.opened_tcp), (1, 0));

    conn.routed_by("a.example".into());
    conn.route_to(&routed);
    conn.connected(a);
    conn.publish(10, 20, ConnState::Open);
    let s = shared.snapshot();
    assert_eq!((count(&s, 0), count(&s, 1)), ((0, 0), (1, 1)));
    assert_eq!((s.totals.active_tcp, s.totals.opened_tcp), (1, 1));
    assert_eq!(
        s.rules[1].backends[0].active, 1,
        "on the routed rule's backend"
    );
    assert_eq!(s.rules[1].counters.from_client, 10);
    let listed = stats.connections();
    assert_eq!(listed.len(), 1, "listed once, under its rule");
    assert_eq!(listed[0].rule, "h:1/tcp[sni=a.example]");
    assert_eq!(listed[0].server_name.as_deref(), Some("a.example"));
    drop(conn);
    let s = shared.snapshot();
    assert_eq!((count(&s, 0), count(&s, 1)), ((0, 0), (0, 1)));
    assert_eq!(s.rules[1].backends[0].to_client, 20);
    assert_eq!((s.totals.active_tcp, s.totals.opened_tcp), (0, 1));

    // Routed to the rule that binds the listener: opened there, open once.
    let mut own = listener
        .clone()
        .register_unrouted(ConnKind::Tcp, addr("127.0.0.1:9"));
    own.route_to(&listener);
    let s = shared.snapshot();
    assert_eq!((count(&s, 0), count(&s, 1)), ((1, 1), (0, 1)));
    drop(own);
    // Closed unrouted: opened nowhere, open no more.
    drop(
        listener
            .clone()
            .register_unrouted(ConnKind::Tcp, addr("127.0.0.1:9")),
    );
    let s = shared.snapshot();
    assert_eq!((count(&s, 0), count(&s, 1)), ((0, 1), (0, 1)));
    assert_eq!((s.totals.active_tcp, s.totals.opened_tcp), (0, 2));
    assert_eq!(
        s.totals.opened_tcp,
        s.rules.iter().map(|r| r.counters.opened_tcp).sum::<u64>(),
        "the rules' opened add up to the process's"
    );
}
