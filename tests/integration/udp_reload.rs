//! SIGHUP with `/udp` rules, through the real binary: the reload never waits
//! for a datagram, open associations carry on, new ones take the new route.

use crate::common::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn sighup_returns_at_once_with_udp_rules_idle_or_busy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let port = free_udp_port();
    write_atomic(
        &conf,
        &format!("127.0.0.1 {port}/udp 127.0.0.1 {}/udp\n", backend.port()),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    // Idle: rinetd 0.73 would hang here until a datagram arrived.
    oi.reload();

    let stop = Arc::new(AtomicBool::new(false));
    let echoed = Arc::new(AtomicUsize::new(0));
    let client = {
        let (stop, echoed) = (stop.clone(), echoed.clone());
        thread::spawn(move || {
            let c = udp_client(local(port));
            let start = Instant::now();
            let mut buf = [0u8; 64];
            // Bounded: until told to stop, or 30 s.
            while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
                if c.send_to(b"tick", local(port)).is_ok()
                    && c.recv(&mut buf).is_ok_and(|n| &buf[..n] == b"tick")
                {
                    echoed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while echoed.load(Ordering::Relaxed) < 10 && Instant::now() < deadline {
        thread::yield_now();
    }
    // Busy: three reloads while the client sends; each READY=1 arrives (10 s bound).
    for _ in 0..3 {
        oi.reload();
    }
    let before = echoed.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while echoed.load(Ordering::Relaxed) < before + 10 && Instant::now() < deadline {
        thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    client.join().expect("client thread");
    assert!(
        echoed.load(Ordering::Relaxed) >= before + 10,
        "traffic flows after the reloads"
    );
    let (status, _) = oi.stop();
    assert!(status.success());
}

#[test]
fn reload_keeps_open_associations_and_routes_new_ones_to_the_new_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let (a, seen_a) = udp_echo_backend("127.0.0.1:0");
    let (b, seen_b) = udp_echo_backend("127.0.0.1:0");
    let port = free_udp_port();
    let rule_to =
        |backend: SocketAddr| format!("127.0.0.1 {port}/udp 127.0.0.1 {}/udp\n", backend.port());
    write_atomic(&conf, &rule_to(a));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let server = local(port);
    let old = udp_client(server);
    assert_eq!(udp_roundtrip(&old, server, b"one"), b"one");
    let (upstream, _) = seen_a
        .recv_timeout(Duration::from_secs(5))
        .expect("backend A");

    write_atomic(&conf, &rule_to(b));
    oi.reload();
    assert_eq!(udp_roundtrip(&old, server, b"two"), b"two");
    let (again, _) = seen_a
        .recv_timeout(Duration::from_secs(5))
        .expect("the open association still goes to A");
    assert_eq!(again, upstream, "same association, same upstream socket");

    let new = udp_client(server);
    assert_eq!(udp_roundtrip(&new, server, b"three"), b"three");
    seen_b
        .recv_timeout(Duration::from_secs(5))
        .expect("a new association goes to B");
    let (status, _) = oi.stop();
    assert!(status.success());
}
