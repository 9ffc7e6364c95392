//! `oi upgrade`'s first test, through the binary: during a 512 MiB
//! sha256-checked transfer each way over a copying rule and a splicing
//! rule, with 200 idle connections, a UDP association, a TCP→UDP stream and
//! a unix-socket client open, `oi upgrade`: every byte arrives in order, no
//! connection is closed, each idle connection echoes afterwards, the old
//! pid exits, the new pid serves, and the counters carry on.
//!
//! The transfers' readers stop half-way (256 MiB) until the upgrade is done
//! and their writers wait until the path is full, so the upgrade happens
//! mid-transfer with bytes in oi's buffers and pipes, whatever the speed
//! of the machine.

use super::upgrade::{put_binary, Adopted};
use super::upgrade_live::{
    backend, echo, every_byte_arrives, pause_at, start_transfer, unix_echo, TRANSFER_PATIENCE,
};
use super::upgrade_udp::{counters, status_json, stream_echo};
use crate::common::*;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Bytes each way per transfer.
const TOTAL: usize = 512 * 1024 * 1024;

/// Idle connections, half on each TCP rule.
const IDLE: usize = 200;

#[test]
fn an_upgrade_mid_transfer_keeps_every_byte_every_connection_and_every_count() {
    let began = Instant::now();
    let paused = Arc::new(AtomicUsize::new(0));
    let stalled = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(AtomicBool::new(false));
    let (got, backend_got) = std::sync::mpsc::channel();
    // The idle ones, the two transfers, the unix client, new ones after.
    let b = backend(IDLE + 8, paused.clone(), stalled.clone(), go.clone(), got);
    let (udp_backend, seen) = udp_echo_backend("127.0.0.1:0");
    let dir = tempfile::Builder::new()
        .prefix("oi-upgf")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let (copy, splice, udp, tcp_udp) = (free_port(), free_port(), free_udp_port(), free_port());
    let sock = dir.path().join("in.sock");
    let control = dir.path().join("control.sock");
    let conf = dir.path().join("oi.conf");
    let u = udp_backend.port();
    std::fs::write(
        &conf,
        format!(
            "controlsocket {control}\n\
             127.0.0.1 {copy} 127.0.0.1 {b} [splice=off]\n\
             127.0.0.1 {splice} 127.0.0.1 {b} [splice=on]\n\
             127.0.0.1 {udp}/udp 127.0.0.1 {u}/udp [timeout=3600]\n\
             127.0.0.1 {tcp_udp} 127.0.0.1 {u}/udp [timeout=3600]\n\
             unix:{sock} 127.0.0.1 {b}\n",
            control = control.display(),
            sock = sock.display(),
        ),
    )
    .expect("conf");
    let mut old = OiProcess::start_program(&binary, dir.path(), &conf, &[]);

    let mut idle = Vec::new();
    for i in 0..IDLE {
        let mut s = connect(local(if i % 2 == 0 { copy } else { splice }));
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        s.write_all(b"E").expect("role");
        echo(&mut s, format!("before {i}").as_bytes())
            .unwrap_or_else(|e| old.fail(&format!("idle {i}: {e}")));
        idle.push(s);
    }
    let mut unix = std::os::unix::net::UnixStream::connect(&sock).expect("unix client");
    unix.set_read_timeout(Some(PATIENCE)).expect("timeout");
    unix.write_all(b"E").expect("role");
    unix_echo(&mut unix, b"unix before").unwrap_or_else(|e| old.fail(&format!("unix: {e}")));
    let assoc = udp_client(local(udp));
    assert_eq!(
        udp_roundtrip(&assoc, local(udp), b"udp before"),
        b"udp before"
    );
    let (assoc_source, _) = seen.recv_timeout(PATIENCE).expect("the UDP backend saw it");
    let mut to_udp = connect(local(tcp_udp));
    to_udp.set_read_timeout(Some(PATIENCE)).expect("timeout");
    stream_echo(&mut to_udp, b"tcp->udp before")
        .unwrap_or_else(|e| old.fail(&format!("tcp->udp: {e}")));
    let (stream_source, _) = seen.recv_timeout(PATIENCE).expect("the UDP backend saw it");

    let mut clients = Vec::new();
    for port in [copy, splice] {
        clients.push(start_transfer(
            port,
            TOTAL,
            pause_at(TOTAL),
            &paused,
            &stalled,
            &go,
        ));
    }
    // 256 MiB each way on two rules: on a machine loaded many times over
    // (the 20-run series runs the suite beside two busy loops) this took
    // longer than PATIENCE, which bounds waits on a single event.
    assert!(
        holds_within(TRANSFER_PATIENCE, || paused.load(Ordering::SeqCst) == 4),
        "timed out after {TRANSFER_PATIENCE:?} waiting until both ends of both transfers are half-way"
    );
    wait_until("every writer is stalled", || {
        stalled.load(Ordering::SeqCst) == 4
    });
    let before = counters(&status_json(&control));

    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let upgrade_began = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["upgrade", "--socket"])
        .arg(&control)
        .output()
        .expect("oi upgrade");
    assert!(out.status.success(), "oi upgrade: {out:?}");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let pid: i32 = said
        .split("oi pid ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| old.fail(&format!("oi upgrade said {said:?}")));
    let new = Adopted(pid);
    // 200 idle, 2 transfers, the unix client, the TCP->UDP stream, the association.
    let all = IDLE + 5;
    wait_until("the old oi says it handed everything over", || {
        old.stderr_tail()
            .contains(&format!("handed {all} live connection(s)"))
    });
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after handing everything over"));
    assert!(status.success(), "{status}");
    let handed_in = upgrade_began.elapsed();
    wait_until(
        "the new oi says what it took and that counts carry on",
        || {
            let tail = old.stderr_tail();
            tail.contains(&format!("took over {all} of {all} live connection(s)"))
                && tail.contains("the counters of 5 rule(s) carry on")
        },
    );
    let after = counters(&status_json(&control));
    assert_eq!(after.len(), before.len(), "the same counters: {after:?}");
    for ((k, was), (_, is)) in before.iter().zip(&after) {
        assert!(is >= was, "{k}: {was} before the upgrade, {is} after");
    }

    every_byte_arrives(&go, clients, &backend_got, &mut idle, TOTAL);
    unix_echo(&mut unix, b"unix after").unwrap_or_else(|e| panic!("unix after: {e}"));
    assert_eq!(
        udp_roundtrip(&assoc, local(udp), b"udp after"),
        b"udp after"
    );
    let (from, _) = seen.recv_timeout(PATIENCE).expect("the UDP backend saw it");
    assert_eq!(
        from, assoc_source,
        "the same association, from the same port"
    );
    stream_echo(&mut to_udp, b"tcp->udp after").unwrap_or_else(|e| panic!("tcp->udp: {e}"));
    let (from, _) = seen.recv_timeout(PATIENCE).expect("the UDP backend saw it");
    assert_eq!(from, stream_source, "the same TCP->UDP stream");
    // The new oi serves new connections too.
    let mut fresh = connect(local(copy));
    fresh.set_read_timeout(Some(PATIENCE)).expect("timeout");
    fresh.write_all(b"E").expect("role");
    echo(&mut fresh, b"new").unwrap_or_else(|e| panic!("a new connection: {e}"));
    let last = counters(&status_json(&control));
    let total = |c: &[(String, u64)], key: &str| {
        c.iter()
            .find(|(k, _)| k == &format!("process {key}"))
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(
        total(&last, "connections_total_tcp"),
        total(&before, "connections_total_tcp") + 1,
        "opened counts carry on: the new connection is one more"
    );
    // Every byte of both transfers counts once, half of them counted by
    // the old oi: without the carried counts the new one would show half.
    for key in ["bytes_from_clients", "bytes_to_clients"] {
        assert!(
            total(&last, key) >= 2 * TOTAL as u64,
            "{key}: both transfers count in full: {before:?} then {last:?}"
        );
    }
    assert!(!new.exited(), "the new oi serves on");
    eprintln!(
        "upgrade_full: hand-over of {all} connections in {:.2} s (old oi gone); whole test {:.1} s",
        handed_in.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
}
