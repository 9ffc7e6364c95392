//! The test harness itself: when oi does not become ready, the failure says
//! why (its exit status and its stderr), instead of only that READY=1 never came.

use crate::common::*;
use std::net::TcpListener;

#[test]
fn a_start_that_fails_carries_the_exit_status_and_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, &format!("127.0.0.1 {port} 127.0.0.1 9\n"));
    let started = std::time::Instant::now();
    let panic = std::panic::catch_unwind(|| OiProcess::start(dir.path(), &conf, &[]))
        .err()
        .expect("oi cannot bind a taken port, so it must not become ready");
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("exited with status 1"), "{msg}");
    assert!(
        msg.contains(&format!("cannot bind 127.0.0.1:{port}/tcp")),
        "{msg}"
    );
    // Waiting ends when oi exits, not when the readiness deadline passes.
    assert!(
        started.elapsed() < READY_PATIENCE / 2,
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn free_ports_are_distinct_and_outside_the_ephemeral_range() {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("ip_local_port_range");
    let bounds: Vec<u16> = text
        .split_whitespace()
        .map(|n| n.parse().expect("number"))
        .collect();
    let ports: Vec<u16> = (0..300).map(|_| free_port()).collect();
    let mut unique = ports.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ports.len(), "a port was given twice");
    assert!(
        ports.iter().all(|p| *p < bounds[0] || *p > bounds[1]),
        "{ports:?} within {bounds:?}"
    );
    let base = free_port_run(200);
    assert!(ports.iter().all(|p| *p < base || *p >= base + 200));
}
