//! Several backends per rule through the real binary (YAML `connect:` lists
//! and `load_balancing:`): each algorithm's distribution, failover when a
//! backend dies mid-run, recovery after `recovery_timeout`, affinity.

use crate::common::*;
use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

/// `n` connections through `port`, counted by the backend that answered.
fn spread(port: u16, n: usize) -> HashMap<u8, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        *counts.entry(which(port)).or_insert(0) += 1;
    }
    counts
}

/// Writes a YAML file with one rule on `port` over `backends` (YAML list
/// items) and `balance` (lines under `load_balancing:`), and starts oi on it.
fn start(dir: &tempfile::TempDir, port: u16, backends: &[String], balance: &str) -> OiProcess {
    let mut text =
        format!("rules:\n  - name: pool\n    bind: 127.0.0.1:{port}/tcp\n    connect:\n");
    for b in backends {
        text.push_str(&format!("      - {b}\n"));
    }
    if !balance.is_empty() {
        text.push_str("    load_balancing:\n");
        for line in balance.lines() {
            text.push_str(&format!("      {line}\n"));
        }
    }
    let conf = dir.path().join("oi.yaml");
    write_atomic(&conf, &text);
    OiProcess::start(dir.path(), &conf, &[])
}

/// A YAML backend item for `addr` with `weight`.
fn item(addr: SocketAddr, weight: u32) -> String {
    format!("{{dest: '{addr}/tcp', weight: {weight}}}")
}

#[test]
fn roundrobin_follows_weights_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backends = [
        item(id_backend(1, None, None), 2),
        item(id_backend(2, None, None), 1),
        item(id_backend(3, None, None), 1),
    ];
    let port = free_port();
    let oi = start(&dir, port, &backends, "algorithm: roundrobin");
    let counts = spread(port, 400);
    assert_eq!(
        (counts[&1], counts[&2], counts[&3]),
        (200, 100, 100),
        "{counts:?}"
    );
    oi.stop();
}

#[test]
fn random_follows_weights_within_a_stated_tolerance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backends = [
        item(id_backend(1, None, None), 3),
        item(id_backend(2, None, None), 1),
    ];
    let port = free_port();
    let oi = start(&dir, port, &backends, "algorithm: random");
    let counts = spread(port, 2000);
    // Expected 1500 : 500; σ ≈ 19, so ±100 (5 % of the draws) is over 5 σ.
    let heavy = counts.get(&1).copied().unwrap_or(0) as i64;
    assert!((heavy - 1500).abs() <= 100, "{counts:?}");
    oi.stop();
}

#[test]
fn iphash_and_affinity_keep_one_client_on_one_backend() {
    for balance in [
        "algorithm: iphash",
        "algorithm: roundrobin\naffinity_ttl: 60",
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let backends = [
            item(id_backend(1, None, None), 1),
            item(id_backend(2, None, None), 1),
            item(id_backend(3, None, None), 1),
        ];
        let port = free_port();
        let oi = start(&dir, port, &backends, balance);
        let counts = spread(port, 60);
        assert_eq!(
            counts.len(),
            1,
            "{balance}: one client, one backend: {counts:?}"
        );
        oi.stop();
    }
}

#[test]
fn leastconn_spreads_held_connections_evenly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let held = Arc::new(Mutex::new(Vec::new()));
    let backends = [
        item(id_backend(1, None, Some(held.clone())), 1),
        item(id_backend(2, None, Some(held.clone())), 1),
        item(id_backend(3, None, Some(held.clone())), 1),
    ];
    let port = free_port();
    let oi = start(&dir, port, &backends, "algorithm: leastconn");
    let mut clients = Vec::new();
    let mut counts: HashMap<u8, usize> = HashMap::new();
    for _ in 0..90 {
        let mut s = connect(local(port));
        let mut id = [0u8; 1];
        s.read_exact(&mut id).expect("answer");
        *counts.entry(id[0]).or_insert(0) += 1;
        clients.push(s);
    }
    assert_eq!(
        (counts[&1], counts[&2], counts[&3]),
        (30, 30, 30),
        "{counts:?}"
    );
    drop(clients);
    oi.stop();
}

#[test]
fn a_backend_dying_mid_run_costs_no_client_its_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Backend 2 serves 50 connections, then its port refuses.
    let backends = [
        item(id_backend(1, None, None), 1),
        item(id_backend(2, Some(50), None), 1),
        item(id_backend(3, None, None), 1),
    ];
    let port = free_port();
    let oi = start(
        &dir,
        port,
        &backends,
        "health_threshold: 3\nrecovery_timeout: 60",
    );
    // `which` panics on any connection that gets no answer.
    let counts = spread(port, 300);
    assert_eq!(counts[&2], 50, "{counts:?}");
    assert_eq!(counts[&1] + counts[&3], 250, "{counts:?}");
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains("is down after 3 failed connects"),
        "{stderr}"
    );
}

#[test]
fn a_down_backend_is_tried_again_after_recovery_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Backend 1's port refuses at first.
    let first = local(free_port());
    let backends = [item(first, 1), item(id_backend(2, None, None), 1)];
    let port = free_port();
    let oi = start(
        &dir,
        port,
        &backends,
        "health_threshold: 1\nrecovery_timeout: 1",
    );
    let counts = spread(port, 20);
    assert_eq!(
        counts.get(&2),
        Some(&20),
        "every client failed over: {counts:?}"
    );
    // Backend 1 comes back on its port; within the recovery time it gets
    // connections again.
    let listener = TcpListener::bind(first).expect("rebind the same port");
    serve_ids(listener, 1, None, None);
    wait_until("backend 1 is used again", || which(port) == 1);
    let (_, stderr) = oi.stop();
    assert!(stderr.contains("is up again"), "{stderr}");
}

#[test]
fn the_binds_of_one_rule_share_one_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = local(free_port());
    let (a, b) = (free_port(), free_port());
    let text = format!(
        "rules:\n  - name: shared\n    bind: [127.0.0.1:{a}/tcp, 127.0.0.1:{b}/tcp]\n    connect:\n      - {}\n      - {}\n    load_balancing:\n      health_threshold: 1\n      recovery_timeout: 60\n",
        item(first, 1),
        item(id_backend(2, None, None), 1),
    );
    let conf = dir.path().join("oi.yaml");
    write_atomic(&conf, &text);
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    // The first connection finds backend 1 dead and marks it down...
    assert_eq!(which(a), 2);
    // ...for the other bind too: none of its connections tries it again.
    for _ in 0..10 {
        assert_eq!(which(b), 2);
    }
    let (_, stderr) = oi.stop();
    assert_eq!(stderr.matches("is down after").count(), 1, "{stderr}");
}

#[test]
fn the_status_file_shows_each_backend_up_or_down_and_the_algorithm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = local(free_port());
    let second = id_backend(2, None, None);
    let port = free_port();
    let status = dir.path().join("status.json");
    let text = format!(
        "global:\n  status:\n    enabled: true\n    file: {}\n    interval: 1\nrules:\n  - name: web\n    bind: 127.0.0.1:{port}/tcp\n    connect:\n      - {{dest: '{first}/tcp', name: dead}}\n      - {{dest: '{second}/tcp', name: alive}}\n    load_balancing:\n      algorithm: leastconn\n      health_threshold: 1\n      recovery_timeout: 600\n",
        status.display()
    );
    let conf = dir.path().join("oi.yaml");
    write_atomic(&conf, &text);
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    // leastconn with both idle picks the first: it fails, the client fails over.
    assert_eq!(which(port), 2);
    let json = wait_for_file(&status, |t| {
        t.contains("\"healthy\": false") || t.contains("\"healthy\":false")
    });
    let v: serde_json::Value = serde_json::from_str(&json).expect("status JSON");
    let rule = &v["rules"][0];
    assert_eq!(rule["algorithm"], "leastconn");
    let backends = rule["backends"].as_array().expect("backends");
    let by_name = |n: &str| backends.iter().find(|b| b["name"] == n).cloned().expect(n);
    assert_eq!(by_name("dead")["healthy"], false);
    assert_eq!(by_name("dead")["address"], first.to_string());
    assert_eq!(by_name("alive")["healthy"], true);
    oi.stop();
}

#[test]
fn udp_associations_are_spread_over_the_pool_and_stay_on_their_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (one, seen_one) = udp_echo_backend("127.0.0.1:0");
    let (two, seen_two) = udp_echo_backend("127.0.0.1:0");
    let port = free_udp_port();
    let text = format!(
        "rules:\n  - name: dns\n    bind: 127.0.0.1:{port}/udp\n    connect:\n      - '{one}/udp'\n      - '{two}/udp'\n"
    );
    let conf = dir.path().join("oi.yaml");
    write_atomic(&conf, &text);
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let server = local(port);
    let clients: Vec<_> = (0..20).map(|_| udp_client(server)).collect();
    for round in 0..4u8 {
        for c in &clients {
            assert_eq!(udp_roundtrip(c, server, &[round]), [round]);
        }
    }
    // Every datagram was echoed, so each backend has told of all it got.
    let sources = |rx: &std::sync::mpsc::Receiver<(SocketAddr, usize)>| {
        let mut by_source: HashMap<SocketAddr, usize> = HashMap::new();
        while let Ok((from, _)) = rx.try_recv() {
            *by_source.entry(from).or_insert(0) += 1;
        }
        by_source
    };
    let (a, b) = (sources(&seen_one), sources(&seen_two));
    assert_eq!((a.len(), b.len()), (10, 10), "round robin per association");
    assert!(
        a.values().chain(b.values()).all(|&n| n == 4),
        "an association keeps its backend"
    );
    oi.stop();
}

#[test]
fn a_pool_mixes_tcp_and_unix_socket_backends_and_fails_over_between_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("b.sock");
    let unix = std::os::unix::net::UnixListener::bind(&path).expect("bind unix backend");
    std::thread::spawn(move || {
        for s in unix.incoming() {
            let Ok(mut s) = s else { return };
            let _ = std::io::Write::write_all(&mut s, &[2]);
        }
    });
    let gone = dir.path().join("gone.sock");
    let backends = [
        item(id_backend(1, None, None), 1),
        format!("{{dest: 'unix:{}'}}", path.display()),
        // Nothing listens here: every client sent to it fails over.
        format!("{{dest: 'unix:{}'}}", gone.display()),
    ];
    let port = free_port();
    let oi = start(&dir, port, &backends, "health_threshold: 100");
    // Round robin sends 100 to each; the 100 sent to the dead socket fail
    // over to the next member in order, which wraps round to the first.
    let counts = spread(port, 300);
    assert_eq!((counts[&1], counts[&2]), (200, 100), "{counts:?}");
    oi.stop();
}
