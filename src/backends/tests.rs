//! The pool's choices, health and refresh, without sockets.

use super::*;
use oi_config::{parse_yaml, resolve, services::Services};
use std::collections::HashMap;
use std::io;
use std::sync::mpsc;

/// The pool of the first rule of `yaml`.
fn pool(yaml: &str) -> BackendPool {
    BackendPool::new(&rule(yaml))
}

/// The first rule of `yaml`, resolved.
fn rule(yaml: &str) -> ResolvedRule {
    let config = parse_yaml(yaml).unwrap_or_else(|e| panic!("{e}"));
    let resolved = resolve(config, &Services::parse("")).unwrap_or_else(|e| panic!("{e}"));
    resolved.rules.into_iter().next().expect("one rule")
}

/// A rule on 127.0.0.1:9000 with `backends` (YAML list items) and `balance` lines.
fn yaml(backends: &[&str], balance: &str) -> String {
    let mut s =
        String::from("rules:\n  - name: pool\n    bind: 127.0.0.1:9000/tcp\n    connect:\n");
    for b in backends {
        s.push_str(&format!("      - {b}\n"));
    }
    if !balance.is_empty() {
        s.push_str("    load_balancing:\n");
        for line in balance.lines() {
            s.push_str(&format!("      {line}\n"));
        }
    }
    s
}

/// How many of `n` connections from `client(i)` each member's first address gets.
fn spread(p: &BackendPool, n: usize, client: impl Fn(usize) -> IpAddr) -> HashMap<u16, usize> {
    let mut counts = HashMap::new();
    for i in 0..n {
        let lease = p.attempts(client(i)).next().expect("a member");
        let port = lease.member().addrs()[0].port();
        *counts.entry(port).or_insert(0) += 1;
    }
    counts
}

fn one_client(_: usize) -> IpAddr {
    IpAddr::from([10, 0, 0, 1])
}

#[test]
fn smooth_round_robin_follows_weights_without_bursts() {
    let p = pool(&yaml(
        &[
            "{dest: '127.0.0.1:1/tcp', weight: 5}",
            "{dest: '127.0.0.1:2/tcp'}",
            "{dest: '127.0.0.1:3/tcp'}",
        ],
        "",
    ));
    let order: Vec<u16> = (0..7)
        .map(|_| {
            p.attempts(one_client(0))
                .next()
                .expect("member")
                .member()
                .addrs()[0]
                .port()
        })
        .collect();
    // nginx's smooth sequence for 5:1:1.
    assert_eq!(order, [1, 1, 2, 1, 3, 1, 1]);
    let counts = spread(&p, 7000, one_client);
    assert_eq!((counts[&1], counts[&2], counts[&3]), (5000, 1000, 1000));
}

#[test]
fn random_follows_weights_within_three_percent() {
    let p = pool(&yaml(
        &[
            "{dest: '127.0.0.1:1/tcp', weight: 3}",
            "{dest: '127.0.0.1:2/tcp'}",
        ],
        "algorithm: random",
    ));
    let counts = spread(&p, 4000, one_client);
    // Expected 3000 : 1000; ±3 % of all draws is far beyond chance (σ ≈ 27).
    let heavy = counts[&1] as i64;
    assert!((heavy - 3000).abs() <= 120, "{counts:?}");
    assert_eq!(counts[&1] + counts[&2], 4000);
}

#[test]
fn iphash_keeps_a_client_on_one_member_and_spreads_clients() {
    let p = pool(&yaml(
        &[
            "'127.0.0.1:1/tcp'",
            "'127.0.0.1:2/tcp'",
            "'127.0.0.1:3/tcp'",
        ],
        "algorithm: iphash",
    ));
    let client = |i: usize| IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8]);
    for i in 0..50 {
        let first = p.attempts(client(i)).next().expect("m").member().addrs()[0];
        for _ in 0..5 {
            let again = p.attempts(client(i)).next().expect("m").member().addrs()[0];
            assert_eq!(again, first, "client {i} moved");
        }
    }
    let counts = spread(&p, 3000, client);
    for port in 1..=3 {
        let c = counts[&port] as i64;
        assert!((c - 1000).abs() <= 150, "{counts:?}");
    }
}

#[test]
fn leastconn_picks_the_least_loaded_and_weight_breaks_ties() {
    let p = pool(&yaml(
        &[
            "{dest: '127.0.0.1:1/tcp'}",
            "{dest: '127.0.0.1:2/tcp', weight: 2}",
        ],
        "algorithm: leastconn",
    ));
    // Equal (0, 0): the heavier one.
    let a = p.attempts(one_client(0)).next().expect("m");
    assert_eq!(a.member().addrs()[0].port(), 2);
    // 0 against 1: the idle one, whatever the weight.
    let b = p.attempts(one_client(0)).next().expect("m");
    assert_eq!(b.member().addrs()[0].port(), 1);
    // Held connections spread evenly: 1,000 leases end 500/500.
    let mut held = vec![a, b];
    for _ in 0..998 {
        held.push(p.attempts(one_client(0)).next().expect("m"));
    }
    let on = |port| {
        held.iter()
            .filter(|l| l.member().addrs()[0].port() == port)
            .count()
    };
    assert_eq!((on(1), on(2)), (500, 500));
    drop(held);
    assert!(
        p.members().iter().all(|m| m.active() == 0),
        "leases released"
    );
}

#[test]
fn failures_past_the_threshold_take_a_member_out_until_recovery() {
    let p = pool(&yaml(
        &["'127.0.0.1:1/tcp'", "'127.0.0.1:2/tcp'"],
        "health_threshold: 2\nrecovery_timeout: 1",
    ));
    let members = p.members();
    p.failed(&members[0]);
    assert!(
        members[0].eligible(now_ms()),
        "one failure is below the threshold"
    );
    p.failed(&members[0]);
    assert!(!members[0].eligible(now_ms()), "down at the threshold");
    let counts = spread(&p, 100, one_client);
    assert_eq!(counts.get(&1), None, "a down member gets no connections");
    // Recovery: eligible again once recovery_timeout has passed.
    let later = now_ms() + 1001;
    assert!(members[0].eligible(later));
    // A success brings it fully back.
    p.succeeded(&members[0]);
    assert!(members[0].eligible(now_ms()));
    assert_eq!(members[0].state.failures.load(Ordering::Relaxed), 0);
}

#[test]
fn attempts_fail_over_to_every_other_eligible_member_once() {
    let p = pool(&yaml(
        &[
            "'127.0.0.1:1/tcp'",
            "'127.0.0.1:2/tcp'",
            "'127.0.0.1:3/tcp'",
        ],
        "health_threshold: 1",
    ));
    let ports: Vec<u16> = p
        .attempts(one_client(0))
        .map(|l| l.member().addrs()[0].port())
        .collect();
    assert_eq!(ports.len(), 3);
    let mut sorted = ports.clone();
    sorted.sort();
    assert_eq!(sorted, [1, 2, 3], "each member once");
    // A down member is skipped by failover...
    p.failed(&p.members()[1]);
    let ports: Vec<u16> = p
        .attempts(one_client(0))
        .map(|l| l.member().addrs()[0].port())
        .collect();
    assert!(!ports.contains(&2), "{ports:?}");
    // ...unless every member is down: then all are tried (fail open).
    p.failed(&p.members()[0]);
    p.failed(&p.members()[2]);
    assert_eq!(p.attempts(one_client(0)).count(), 3);
}

#[test]
fn affinity_keeps_a_client_until_its_member_goes_down() {
    let p = pool(&yaml(
        &["'127.0.0.1:1/tcp'", "'127.0.0.1:2/tcp'"],
        "affinity_ttl: 300\nhealth_threshold: 1",
    ));
    let a = IpAddr::from([10, 0, 0, 1]);
    let first = p.attempts(a).next().expect("m").member().addrs()[0].port();
    for _ in 0..10 {
        let again = p.attempts(a).next().expect("m").member().addrs()[0].port();
        assert_eq!(again, first, "round robin alone would alternate");
    }
    let member = p
        .members()
        .iter()
        .find(|m| m.addrs()[0].port() == first)
        .cloned();
    p.failed(&member.expect("member"));
    let moved = p.attempts(a).next().expect("m").member().addrs()[0].port();
    assert_ne!(moved, first, "health beats affinity");
}

#[test]
fn affinity_table_evicts_the_least_recently_used_client() {
    let p = pool(&yaml(
        &["'127.0.0.1:1/tcp'", "'127.0.0.1:2/tcp'"],
        "affinity_ttl: 300\naffinity_max_entries: 100",
    ));
    for i in 0..1000u32 {
        let _ = p.attempts(IpAddr::from(i.to_be_bytes())).next();
    }
    let len = p.affinity.as_ref().map(|a| a.lock().len());
    assert_eq!(len, Some(100));
}

#[test]
fn reload_keeps_the_health_of_backends_it_keeps() {
    let text = yaml(
        &["'127.0.0.1:1/tcp'", "'127.0.0.1:2/tcp'"],
        "health_threshold: 1",
    );
    let old = pool(&text);
    old.failed(&old.members()[0]);
    let kept = pool(&text);
    kept.keep_state_of(&old);
    assert!(
        !kept.members()[0].eligible(now_ms()),
        "still down after reload"
    );
    assert!(old.retired(), "the replaced pool's probes stop");
    assert!(!kept.retired());
    let changed = pool(&yaml(&["'127.0.0.1:3/tcp'", "'127.0.0.1:2/tcp'"], ""));
    changed.keep_state_of(&old);
    assert!(
        changed.members()[0].eligible(now_ms()),
        "a new backend starts up"
    );
}

#[test]
fn a_name_with_several_addresses_expands_in_yaml_only() {
    // localhost has 127.0.0.1 (and often ::1) in /etc/hosts: filtered to IPv4.
    let p = pool(&yaml(&["'localhost:80/tcp'"], ""));
    let members = p.members();
    assert!(members
        .iter()
        .all(|m| m.addrs().len() == 1 && m.addrs()[0].is_ipv4()));
    assert_eq!(members[0].label(), "localhost:80[0]");
    let h = p.health_of(members[0].addrs()[0]).expect("listed");
    assert_eq!(
        (h.label.as_str(), h.parent.as_deref(), h.healthy),
        ("localhost:80[0]", Some("localhost"), true)
    );
    // dns_multi_ip_expand: false keeps one member with every address.
    let mut text = String::from("global:\n  dns_multi_ip_expand: false\n");
    text.push_str(&yaml(&["'localhost:80/tcp'"], ""));
    let p = pool(&text);
    assert_eq!(p.members().len(), 1);
    assert_eq!(p.members()[0].label(), "localhost:80");
    let h = p.health_of(p.members()[0].addrs()[0]).expect("listed");
    assert_eq!(h.parent, None, "not an implicit backend");
}

/// A lookup answering from a table the test changes, telling each call.
fn table_lookup(table: Arc<Mutex<Vec<SocketAddr>>>, calls: mpsc::Sender<String>) -> Lookup {
    let calls = Mutex::new(calls);
    Arc::new(
        move |name: &str, port: u16| -> io::Result<Vec<SocketAddr>> {
            let _ = calls.lock().send(name.to_string());
            Ok(table
                .lock()
                .iter()
                .map(|a| SocketAddr::new(a.ip(), port))
                .collect())
        },
    )
}

/// Waits (bounded) until `p`'s addresses are `want`.
fn wait_addrs(p: &BackendPool, want: &[SocketAddr]) {
    for _ in 0..500 {
        if p.addrs() == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("addresses stayed {:?}, wanted {want:?}", p.addrs());
}

#[test]
fn repeated_connect_failures_look_the_name_up_again_and_new_connections_use_it() {
    let table = Arc::new(Mutex::new(vec![SocketAddr::from(([127, 0, 0, 2], 0))]));
    let (calls_tx, calls) = mpsc::channel();
    let refresher = Refresher::with_lookup(table_lookup(table.clone(), calls_tx));
    let mut text = String::from("global:\n  dns_refresh: 0\n");
    text.push_str(&yaml(&["'localhost:80/tcp'"], ""));
    let p = Arc::new(pool(&text));
    let (changed_tx, changed) = mpsc::channel();
    let on_change: OnChange = Box::new(move |a: &[SocketAddr]| {
        let _ = changed_tx.send(a.to_vec());
    });
    refresher.watch(&p, on_change);
    *table.lock() = vec![SocketAddr::from(([127, 0, 0, 9], 0))];
    let member = p.members()[0].clone();
    for _ in 0..FAILURES_BEFORE_LOOKUP {
        p.failed(&member);
    }
    let name = calls
        .recv_timeout(Duration::from_secs(10))
        .expect("looked up");
    assert_eq!(name, "localhost");
    let now = changed.recv_timeout(Duration::from_secs(10)).expect("told");
    assert_eq!(now, [SocketAddr::from(([127, 0, 0, 9], 80))]);
    let lease = p.attempts(one_client(0)).next().expect("m");
    assert_eq!(
        lease.member().addrs()[0],
        SocketAddr::from(([127, 0, 0, 9], 80))
    );
}

#[test]
fn names_are_looked_up_again_on_their_interval_and_failures_keep_the_old_addresses() {
    let table = Arc::new(Mutex::new(vec![
        SocketAddr::from(([127, 0, 0, 3], 0)),
        SocketAddr::from(([127, 0, 0, 4], 0)),
    ]));
    let (calls_tx, calls) = mpsc::channel();
    let refresher = Refresher::with_lookup(table_lookup(table.clone(), calls_tx));
    // A 1 s refresh: the shortest the configuration allows.
    let p = Arc::new(pool(&yaml(
        &["{dest: 'localhost:80/tcp', dns_refresh: 1}"],
        "",
    )));
    let before = p.addrs();
    refresher.watch(&p, Box::new(|_: &[SocketAddr]| {}));
    // The expanded name becomes two members, one per address.
    wait_addrs(
        &p,
        &[
            SocketAddr::from(([127, 0, 0, 3], 80)),
            SocketAddr::from(([127, 0, 0, 4], 80)),
        ],
    );
    assert_ne!(before, p.addrs());
    assert_eq!(p.members().len(), 2);
    assert_eq!(
        calls.recv_timeout(Duration::from_secs(10)).as_deref(),
        Ok("localhost")
    );
    // An empty answer keeps what there was.
    table.lock().clear();
    assert_eq!(
        calls.recv_timeout(Duration::from_secs(10)).as_deref(),
        Ok("localhost")
    );
    assert_eq!(p.members().len(), 2);
    // An address gone from DNS goes from the pool; the other keeps its member.
    let kept = p.members()[0].clone();
    *table.lock() = vec![SocketAddr::from(([127, 0, 0, 3], 0))];
    wait_addrs(&p, &[SocketAddr::from(([127, 0, 0, 3], 80))]);
    assert!(
        Arc::ptr_eq(&p.members()[0], &kept),
        "its health and load stay"
    );
}

#[test]
fn pools_of_literal_addresses_start_no_thread() {
    let (calls_tx, _calls) = mpsc::channel();
    let refresher = Refresher::with_lookup(table_lookup(Arc::default(), calls_tx));
    let p = Arc::new(pool(&yaml(&["'127.0.0.1:1/tcp'"], "")));
    refresher.watch(&p, Box::new(|_: &[SocketAddr]| {}));
    assert!(!refresher.started());
}

#[test]
fn an_upgrade_carries_health_affinity_and_load_to_the_new_pool() {
    let text = yaml(
        &[
            "'127.0.0.1:1/tcp'",
            "'127.0.0.1:2/tcp'",
            "'127.0.0.1:3/tcp'",
        ],
        "affinity_ttl: 300\nhealth_threshold: 1\nalgorithm: leastconn",
    );
    let old = pool(&text);
    old.failed(&old.members()[0]);
    let a = IpAddr::from([10, 0, 0, 1]);
    let used = old.attempts(a).next().expect("m").member().addrs()[0];
    let carried = old.carried();
    // Through JSON text, as it travels.
    let carried: serde_json::Value = serde_json::from_str(&carried.to_string()).expect("JSON");

    let new = pool(&text);
    new.carry_on(&carried);
    assert!(!new.members()[0].eligible(now_ms()), "still down");
    assert!(new.members()[1].eligible(now_ms()));
    for _ in 0..5 {
        let again = new.attempts(a).next().expect("m").member().addrs()[0];
        assert_eq!(again, used, "the client stays on its backend");
    }
    // A handed-over connection counts on its member's load.
    let other = IpAddr::from([10, 0, 0, 2]);
    let _held = new.lease_of(addr_of(&new, 2)).expect("a member has it");
    let _held2 = new.lease_of(addr_of(&new, 2)).expect("a member has it");
    let picked = new.attempts(other).next().expect("m").member().addrs()[0];
    assert_eq!(picked.port(), 3, "least connections sees the load");
    assert!(new.lease_of("127.0.0.1:9".parse().expect("addr")).is_none());
}

/// The address of `p`'s member on `port`.
fn addr_of(p: &BackendPool, port: u16) -> SocketAddr {
    p.members()
        .iter()
        .map(|m| m.addrs()[0])
        .find(|a| a.port() == port)
        .expect("member")
}

#[test]
fn an_operators_state_and_weight_decide_who_is_chosen_and_travel_with_an_upgrade() {
    use admin::AdminState;
    let text = yaml(
        &[
            "'127.0.0.1:1/tcp'",
            "'127.0.0.1:2/tcp'",
            "'127.0.0.1:3/tcp'",
        ],
        "algorithm: roundrobin",
    );
    let old = pool(&text);
    let m1 = old.member_named("127.0.0.1:1").expect("by address");
    let m2 = old.member_named("127.0.0.1:2").expect("by address");
    let missing = old.member_named("127.0.0.1:9").err().expect("not found");
    assert_eq!(missing, ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
    old.set_admin(&m1, AdminState::Drain, None);
    old.set_admin(&m2, AdminState::Ready, Some(3));
    let counts = spread(&old, 400, one_client);
    assert_eq!(counts.get(&1), None, "drained: never chosen {counts:?}");
    assert_eq!((counts[&2], counts[&3]), (300, 100), "weight 3 against 1");
    // Down by health or not, an operator's "out" wins over failing open.
    let m3 = old.member_named("127.0.0.1:3").expect("by address");
    old.set_admin(&m2, AdminState::Disabled, Some(3));
    old.set_admin(&m3, AdminState::Ready, Some(0));
    assert!(old.attempts(one_client(0)).next().is_none());
    assert!(old.none_in_service());
    old.set_admin(&m3, AdminState::Ready, None);

    // Carried through JSON text, as an upgrade does.
    let carried = old.carried();
    let carried: serde_json::Value = serde_json::from_str(&carried.to_string()).expect("JSON");
    let new = pool(&text);
    new.carry_on(&carried);
    let states: Vec<(AdminState, u32)> = new
        .members()
        .iter()
        .map(|m| (m.state().admin(), m.weight()))
        .collect();
    assert_eq!(
        states,
        [
            (AdminState::Drain, 1),
            (AdminState::Disabled, 3),
            (AdminState::Ready, 1)
        ]
    );
    // A reload that keeps the members keeps their state too.
    let reloaded = pool(&text);
    reloaded.keep_state_of(&new);
    assert_eq!(reloaded.members()[0].state().admin(), AdminState::Drain);
    assert_eq!(reloaded.members()[1].weight(), 3);
}

#[test]
fn a_single_backend_drained_takes_no_connection() {
    let p = pool(&yaml(&["'127.0.0.1:1/tcp'"], ""));
    let m = p.members()[0].clone();
    p.set_admin(&m, admin::AdminState::Drain, None);
    assert!(p.attempts(one_client(0)).next().is_none());
    p.set_admin(&m, admin::AdminState::Ready, None);
    assert!(p.attempts(one_client(0)).next().is_some());
}
