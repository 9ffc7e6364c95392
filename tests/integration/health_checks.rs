//! Active health checks (`check-interval`, YAML `health_check:`) through the
//! real binary: probes mark a backend down before any client reaches it,
//! `rise` good probes bring one back, and a pool with a dead member sends no
//! client to it. State is read from `GET /status.json` (the status file's
//! document, with `healthy` and `probe_ms` per backend) and `/metrics`.

use crate::common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What reached a test backend.
#[derive(Default)]
struct Seen {
    /// Probe connections (they send `PING\r\n`).
    probes: AtomicUsize,
    /// Client connections (they send anything else).
    clients: AtomicUsize,
    /// Connections a silent backend keeps open without answering.
    held: Mutex<Vec<TcpStream>>,
}

/// A backend on `listener`. Each connection's first four bytes say what it
/// is: `PING` is a probe, answered `+PONG\r\n` when `answers`; anything
/// else is a client, answered with `id` when `answers`. A backend that does
/// not answer keeps every connection open (a hung service).
fn backend(listener: TcpListener, id: u8, answers: bool) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let s = s.clone();
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(PATIENCE));
                let mut first = [0u8; 4];
                if conn.read_exact(&mut first).is_err() {
                    return;
                }
                let probe = &first == b"PING";
                if probe {
                    s.probes.fetch_add(1, Ordering::SeqCst);
                } else {
                    s.clients.fetch_add(1, Ordering::SeqCst);
                }
                if !answers {
                    s.held.lock().expect("lock").push(conn);
                    return;
                }
                let answer: &[u8] = if probe { b"+PONG\r\n" } else { &[id] };
                let _ = conn.write_all(answer);
            });
        }
    });
    seen
}

/// A listener on a free loopback port.
fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    (l, addr)
}

/// A YAML rule on `port` over `backends`, with a health check (interval
/// 1 s, timeout 1 s, rise `rise`, fall 2, PING/+PONG) unless `rise` is `None`.
fn config(port: u16, backends: &[SocketAddr], rise: Option<u32>) -> String {
    let mut text =
        format!("rules:\n  - name: pool\n    bind: 127.0.0.1:{port}/tcp\n    connect:\n");
    for b in backends {
        text.push_str(&format!("      - {b}/tcp\n"));
    }
    if let Some(rise) = rise {
        text.push_str(&format!(
            "    health_check:\n      interval: 1\n      timeout: 1\n      rise: {rise}\n      \
             fall: 2\n      send: 'PING\\r\\n'\n      expect: '+PONG'\n"
        ));
    }
    text
}

/// Writes [`config`] with rise 2 and starts oi on it with `/metrics` (and
/// the status JSON) on `metrics`.
fn start(dir: &tempfile::TempDir, port: u16, backends: &[SocketAddr], metrics: u16) -> OiProcess {
    let conf = dir.path().join("oi.yaml");
    write_atomic(&conf, &config(port, backends, Some(2)));
    let metrics = format!("127.0.0.1:{metrics}");
    OiProcess::start(dir.path(), &conf, &["--metrics", &metrics])
}

/// `GET path` from oi's metrics listener; the body.
fn get(metrics: u16, path: &str) -> String {
    let mut s = TcpStream::connect(local(metrics)).expect("connect to metrics");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .expect("request");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or(out)
}

/// The status document's entry for backend `addr`.
fn entry(metrics: u16, addr: SocketAddr) -> serde_json::Value {
    let body = get(metrics, "/status.json");
    let doc: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    doc["rules"][0]["backends"]
        .as_array()
        .and_then(|list| {
            list.iter()
                .find(|b| b["address"] == serde_json::json!(addr.to_string()))
        })
        .unwrap_or_else(|| panic!("{addr} not in {body}"))
        .clone()
}

/// A probed backend's (healthy, probe_ms) in the status document.
fn health(metrics: u16, addr: SocketAddr) -> (bool, Option<f64>) {
    let b = entry(metrics, addr);
    assert!(
        b.get("probe_ms").is_some(),
        "a probed backend has probe_ms: {b}"
    );
    (
        b["healthy"] == serde_json::json!(true),
        b["probe_ms"].as_f64(),
    )
}

/// A client through oi on `port`: sends a greeting, returns the id of the
/// backend that answered.
fn client(port: u16) -> u8 {
    let mut s = connect(local(port));
    s.write_all(b"HELLO\n").expect("greeting");
    let mut id = [0u8; 1];
    s.read_exact(&mut id).expect("a backend answered");
    id[0]
}

#[test]
fn a_backend_that_never_answers_is_down_before_any_client_reaches_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (good_l, good) = listener();
    let (silent_l, silent) = listener();
    let good_seen = backend(good_l, 1, true);
    let silent_seen = backend(silent_l, 2, false);
    let (port, metrics) = (free_port(), free_port());
    let oi = start(&dir, port, &[good, silent], metrics);

    wait_until("the silent backend is marked down by its probes", || {
        !health(metrics, silent).0
    });
    assert!(silent_seen.probes.load(Ordering::SeqCst) >= 2, "fall is 2");
    assert_eq!(
        silent_seen.clients.load(Ordering::SeqCst),
        0,
        "no client yet"
    );
    wait_until("the good backend has a probe round trip", || {
        health(metrics, good).1.is_some()
    });
    let (up, probe_ms) = health(metrics, good);
    assert!(up, "the good backend is up");
    assert!(probe_ms.is_some_and(|ms| ms >= 0.0), "{probe_ms:?}");
    let scrape = get(metrics, "/metrics");
    let silent_up =
        format!("oi_backend_up{{rule=\"127.0.0.1:{port}/tcp\",backend=\"{silent}\"}} 0");
    assert!(scrape.contains(&silent_up), "{silent_up} not in\n{scrape}");
    assert!(
        scrape.contains(&format!(
            "oi_backend_probe_seconds{{rule=\"127.0.0.1:{port}/tcp\",backend=\"{good}\"}}"
        )),
        "{scrape}"
    );

    for _ in 0..50 {
        assert_eq!(
            client(port),
            1,
            "every client goes to the answering backend"
        );
    }
    assert_eq!(silent_seen.clients.load(Ordering::SeqCst), 0);
    assert_eq!(good_seen.clients.load(Ordering::SeqCst), 50);
    // Probes are not client traffic: the rule counted 50 connections.
    let total = format!("oi_connections_total{{rule=\"127.0.0.1:{port}/tcp\"}} 50");
    let scrape = get(metrics, "/metrics");
    assert!(scrape.contains(&total), "{total} not in\n{scrape}");

    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains(&format!(
            "backend {silent} is down: probe timed out after 1s; 2 failed probes in a row"
        )),
        "{stderr}"
    );
}

#[test]
fn a_backend_that_comes_back_is_up_after_rise_probes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (good_l, good) = listener();
    backend(good_l, 1, true);
    // Reserve a port, then close it: probes are refused.
    let (gone_l, gone) = listener();
    drop(gone_l);
    let (port, metrics) = (free_port(), free_port());
    let oi = start(&dir, port, &[good, gone], metrics);
    wait_until("the closed backend is marked down", || {
        !health(metrics, gone).0
    });
    assert_eq!(
        health(metrics, gone).1,
        None,
        "no round trip after a failed probe"
    );

    let back = TcpListener::bind(gone).expect("the port again");
    let seen = backend(back, 2, true);
    wait_until("the backend is up again", || health(metrics, gone).0);
    assert!(
        seen.probes.load(Ordering::SeqCst) >= 2,
        "up only after rise (2) good probes, saw {}",
        seen.probes.load(Ordering::SeqCst)
    );
    assert!(health(metrics, gone).1.is_some());
    // Clients reach it again.
    wait_until("a client reaches the revived backend", || client(port) == 2);

    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains(&format!("backend {gone} is down: ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("backend {gone} is up again after 2 good probes")),
        "{stderr}"
    );
}

#[test]
fn a_pool_of_three_with_one_dead_sends_no_client_to_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_l, a) = listener();
    let (b_l, b) = listener();
    let (dead_l, dead) = listener();
    let a_seen = backend(a_l, 1, true);
    let b_seen = backend(b_l, 2, true);
    let dead_seen = backend(dead_l, 3, false);
    let (port, metrics) = (free_port(), free_port());
    let oi = start(&dir, port, &[a, dead, b], metrics);
    wait_until("the dead backend is marked down", || {
        !health(metrics, dead).0
    });

    let mut counts = [0usize; 4];
    for _ in 0..300 {
        counts[usize::from(client(port))] += 1;
    }
    assert_eq!(counts[3], 0, "{counts:?}");
    assert_eq!(counts[1] + counts[2], 300, "{counts:?}");
    assert_eq!(
        (counts[1], counts[2]),
        (150, 150),
        "round robin over the two live ones"
    );
    assert_eq!(dead_seen.clients.load(Ordering::SeqCst), 0);
    assert_eq!(
        a_seen.clients.load(Ordering::SeqCst) + b_seen.clients.load(Ordering::SeqCst),
        300
    );
    let scrape = get(metrics, "/metrics");
    let dead_total = format!(
        "oi_backend_connections_total{{rule=\"127.0.0.1:{port}/tcp\",backend=\"{dead}\"}} 0"
    );
    assert!(
        scrape.contains(&dead_total),
        "{dead_total} not in\n{scrape}"
    );
    drop(oi);
}

#[test]
fn a_reload_keeps_the_health_of_kept_backends_and_the_probes_follow_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (good_l, good) = listener();
    let (silent_l, silent) = listener();
    backend(good_l, 1, true);
    let silent_seen = backend(silent_l, 2, false);
    let (port, metrics) = (free_port(), free_port());
    let oi = start(&dir, port, &[good, silent], metrics);
    wait_until("the silent backend is marked down", || {
        !health(metrics, silent).0
    });

    // Same backends, another rise: the new pool starts with the old health.
    let conf = dir.path().join("oi.yaml");
    write_atomic(&conf, &config(port, &[good, silent], Some(3)));
    oi.reload();
    assert!(
        !health(metrics, silent).0,
        "still down right after the reload"
    );
    for _ in 0..20 {
        assert_eq!(client(port), 1);
    }
    assert_eq!(silent_seen.clients.load(Ordering::SeqCst), 0);

    // No health check any more: no probe_ms, and a probe's "down" is over
    // (nothing would end it): the backend is tried again, passive only.
    write_atomic(&conf, &config(port, &[good, silent], None));
    oi.reload();
    let b = entry(metrics, silent);
    assert!(b.get("probe_ms").is_none(), "{b}");
    assert_eq!(b["healthy"], serde_json::json!(true), "{b}");
    drop(oi);
}

/// The names of `pid`'s threads, sorted.
fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("oi's threads");
    let mut names: Vec<String> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    names.sort();
    names
}

/// One runtime story, seen from outside: a plain `oi -c` with a
/// health-checked rule runs oi's executor threads (each on its own epoll),
/// its control-plane threads and async-io's reactor thread, and no other:
/// no fallback reactor (`oi-reactor`, once started for the probes'
/// sockets, registered on it and polled from the probe thread).
#[test]
fn a_health_checked_server_has_no_fallback_reactor_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (good_l, good) = listener();
    let seen = backend(good_l, 1, true);
    let port = free_port();
    let conf = dir.path().join("oi.yaml");
    write_atomic(&conf, &config(port, &[good], Some(1)));
    let oi = OiProcess::start(dir.path(), &conf, &["--threads", "2"]);
    wait_until("a probe reached the backend", || {
        seen.probes.load(Ordering::SeqCst) >= 2
    });
    assert_eq!(client(port), 1, "a client is forwarded");
    let names = thread_names(oi.child.id());
    // Sorted, as `names` is.
    let expected = [
        // async-io's reactor: the control plane's sockets, signals and timers.
        "async-io",
        // Executor 0 on its epoll, also running the service (signals, reloads).
        "oi",
        // The log file's writer.
        "oi-logfile",
        // The status file, control socket and metrics (smol on async-io).
        "oi-observe",
        // The health probes (smol on async-io).
        "oi-probe",
        // The second executor, on its own epoll.
        "oi-worker-1",
    ];
    assert_eq!(
        names,
        expected,
        "oi's threads; stderr:\n{}",
        oi.stderr_tail()
    );
    drop(oi);
}

/// A backend's `name:` is the operator's free text and oi's diagnostics go
/// to terminals and the journal: the "is down" warning shows its control
/// bytes escaped (`\x1b`, `\x07`), never raw, as every other view does.
#[test]
fn diagnostics_escape_control_bytes_in_a_backend_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Reserve a port, then close it: probes are refused.
    let (gone_l, gone) = listener();
    drop(gone_l);
    let port = free_port();
    let conf = dir.path().join("oi.yaml");
    // YAML's double-quoted "\e" is ESC: the name carries a colour sequence.
    write_atomic(
        &conf,
        &format!(
            "rules:\n  - name: pool\n    bind: 127.0.0.1:{port}/tcp\n    connect:\n      \
             - {{dest: '{gone}', name: \"red\\e[31mX\\a\"}}\n    health_check:\n      \
             interval: 1\n      timeout: 1\n      rise: 1\n      fall: 1\n"
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    wait_until("the closed backend is reported down", || {
        oi.stderr_tail().contains(" is down: ")
    });
    let (_, stderr) = oi.stop();
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "raw control bytes from a backend name reached stderr: {stderr:?}"
    );
    assert!(
        stderr.contains("backend red\\x1b[31mX\\x07 is down: "),
        "the backend's name, escaped: {stderr:?}"
    );
}
