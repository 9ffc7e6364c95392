//! SIGHUP reloads through the real binary: nothing breaks, nothing is refused.

use crate::common::*;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Streams `len` bytes through `port` to the echo backend and checks them, in chunks.
fn stream_checked(port: u16, len: usize, seed: u64) -> bool {
    let data = pattern(len, seed);
    let want = sha256(&data);
    let mut s = connect(local(port));
    let mut w = s.try_clone().expect("clone");
    let writer = thread::spawn(move || {
        for chunk in data.chunks(16 * 1024) {
            w.write_all(chunk).expect("write");
        }
        w.shutdown(Shutdown::Write).expect("shutdown");
    });
    let mut back = Vec::with_capacity(len);
    let ok = s.read_to_end(&mut back).is_ok();
    writer.join().is_ok() && ok && sha256(&back) == want
}

#[test]
fn reload_burst_under_traffic_breaks_no_stream_and_refuses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let (keep, a, b) = (free_port(), free_port(), free_port());
    let config_a =
        format!("127.0.0.1 {keep} 127.0.0.1 {backend}\n127.0.0.1 {a} 127.0.0.1 {backend}\n");
    let config_b =
        format!("127.0.0.1 {keep} 127.0.0.1 {backend}\n127.0.0.1 {b} 127.0.0.1 {backend}\n");
    write_atomic(&conf, &config_a);
    let oi = OiProcess::start(dir.path(), &conf, &[]);

    let stop = Arc::new(AtomicBool::new(false));
    let refusals = Arc::new(AtomicUsize::new(0));
    let pings = Arc::new(AtomicUsize::new(0));
    let hammer = {
        let (stop, refusals, pings) = (stop.clone(), refusals.clone(), pings.clone());
        thread::spawn(move || {
            // Bounded: at most 100k attempts or 60 s.
            let start = Instant::now();
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) || start.elapsed() > Duration::from_secs(60) {
                    break;
                }
                match ping(keep) {
                    Ok(()) => pings.fetch_add(1, Ordering::Relaxed),
                    Err(_) => refusals.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    let streams: Vec<_> = (0..16u64)
        .map(|i| thread::spawn(move || stream_checked(keep, 8 * 1024 * 1024, i)))
        .collect();

    // Ten reloads in quick succession: each SIGHUP is sent as soon as the previous
    // reload has started, so they overlap with each other and with the traffic.
    for i in 0..10 {
        write_atomic(&conf, if i % 2 == 0 { &config_b } else { &config_a });
        oi.signal(rustix::process::Signal::HUP);
        while !oi.next_notify().contains("RELOADING=1") {}
    }
    while !oi.next_notify().contains("READY=1") {}

    for (i, s) in streams.into_iter().enumerate() {
        assert!(
            s.join().expect("stream thread"),
            "stream {i} corrupted or broken"
        );
    }
    stop.store(true, Ordering::Relaxed);
    hammer.join().expect("hammer");
    assert_eq!(
        refusals.load(Ordering::Relaxed),
        0,
        "the unchanged listener refused"
    );
    assert!(pings.load(Ordering::Relaxed) > 0);
    // The last file written was config A.
    ping(a).expect("added rule serves");
    assert!(refused(b), "removed rule still listening");
    let (status, _) = oi.stop();
    assert!(status.success());
}

#[test]
fn broken_reload_keeps_every_old_rule_and_names_the_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let (p1, p2) = (free_port(), free_port());
    write_atomic(
        &conf,
        &format!("127.0.0.1 {p1} 127.0.0.1 {backend}\n127.0.0.1 {p2} 127.0.0.1 {backend}\n"),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    write_atomic(
        &conf,
        &format!("127.0.0.1 {p1} 127.0.0.1 {backend}\n127.0.0.1 99999 127.0.0.1 1\nbogus line\n"),
    );
    oi.reload();
    ping(p1).expect("old rule 1 still serves");
    ping(p2).expect("old rule 2 still serves (the broken file dropped it)");
    let (status, stderr) = oi.stop();
    assert!(status.success());
    let name = conf.display().to_string();
    assert!(stderr.contains(&format!("{name}:2: ")), "{stderr}");
    assert!(stderr.contains(&format!("{name}:3: ")), "{stderr}");
    assert!(
        stderr.contains("keeping the previous configuration"),
        "{stderr}"
    );
}

#[test]
fn removed_rule_closes_added_rule_serves_open_connection_flows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let log = dir.path().join("oi.log");
    let backend = echo_backend("127.0.0.1:0").port();
    let (old, new) = (free_port(), free_port());
    let logline = format!("logfile {}\n", log.display());
    write_atomic(
        &conf,
        &format!("{logline}127.0.0.1 {old} 127.0.0.1 {backend}\n"),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);

    let mut open = connect(local(old));
    open.write_all(b"before").expect("write");
    let mut b = [0u8; 6];
    open.read_exact(&mut b).expect("echo before");

    write_atomic(
        &conf,
        &format!("{logline}127.0.0.1 {new} 127.0.0.1 {backend}\n"),
    );
    oi.reload();
    assert!(refused(old), "removed rule still listening");
    ping(new).expect("added rule serves");

    open.write_all(b"after!").expect("write after reload");
    open.read_exact(&mut b).expect("echo after reload");
    assert_eq!(&b, b"after!");
    open.shutdown(Shutdown::Write).expect("close");
    let mut rest = Vec::new();
    open.read_to_end(&mut rest).expect("EOF");

    // The open connection's last line names its own (removed) rule.
    let want = format!("\t{old}\t127.0.0.1\t{backend}\t12\t12\tdone-remote-closed");
    let text = wait_for_file(&log, |t| t.contains(&want));
    assert!(text.contains(&want), "{text}");
    oi.stop();
}

#[test]
fn log_file_is_reopened_after_rename() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let log = dir.path().join("oi.log");
    let rotated = dir.path().join("oi.log.1");
    let backend = echo_backend("127.0.0.1:0").port();
    let port = free_port();
    write_atomic(
        &conf,
        &format!(
            "logfile {}\n127.0.0.1 {port} 127.0.0.1 {backend}\n",
            log.display()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    ping(port).expect("first");
    assert_eq!(wait_lines(&log, 2).len(), 2);
    std::fs::rename(&log, &rotated).expect("rotate");
    oi.reload();
    ping(port).expect("second");
    assert_eq!(wait_lines(&log, 2).len(), 2, "new file gets the new lines");
    assert_eq!(
        wait_lines(&rotated, 2).len(),
        2,
        "rotated file keeps the old lines only"
    );
    oi.stop();
}

#[test]
fn sd_notify_messages_arrive_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, &format!("127.0.0.1 {} 127.0.0.1 9\n", free_port()));
    // start() has already checked that READY=1 came first.
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    oi.signal(rustix::process::Signal::HUP);
    let reloading = oi.next_notify();
    assert!(reloading.contains("RELOADING=1"), "{reloading:?}");
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading:?}");
    assert!(oi.next_notify().contains("READY=1"));
    oi.signal(rustix::process::Signal::TERM);
    assert!(oi.next_notify().contains("STOPPING=1"));
    let (status, _) = oi.stop_after_signal();
    assert!(status.success());
}

/// The backend's marker a new connection to `port` reads.
fn marker_through(port: u16) -> Vec<u8> {
    let mut got = Vec::new();
    connect(local(port))
        .read_to_end(&mut got)
        .expect("read the marker");
    got
}

/// `oi reload --or-sighup PID` when no control socket answers (oi started
/// without --socket, as a drop-in to the Debian unit's ExecStart= may): a
/// broken file is refused with --check's errors and no signal is sent; a
/// good one is checked, PID gets SIGHUP, and the new rule serves.
#[test]
fn reload_without_a_control_socket_checks_the_file_then_sends_sighup() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let (a, b) = (marker_backend(b"A"), marker_backend(b"B"));
    let port = free_port();
    write_atomic(&conf, &format!("127.0.0.1 {port} 127.0.0.1 {}\n", a.port()));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let absent = dir.path().join("control.sock");
    let reload = |extra: &[String]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
            .arg("reload")
            .arg("-c")
            .arg(&conf)
            .arg("--socket")
            .arg(&absent)
            .args(extra)
            .output()
            .expect("run oi reload")
    };

    // Without --or-sighup, no socket is a failure that says so.
    let out = reload(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "no socket, no fallback: {err}");
    assert!(err.contains("cannot reach oi's control socket"), "{err}");

    // Broken: --check's errors, exit 1, and no signal. The process named
    // (a sentinel, not oi) then dies of the SIGTERM sent after, not of an
    // earlier SIGHUP (pending signals are delivered lowest number first).
    write_atomic(&conf, &format!("127.0.0.1 {port} 127.0.0.1 not-a-port\n"));
    let mut sentinel = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    let out = reload(&["--or-sighup".into(), sentinel.id().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    let sentinel_pid = rustix::process::Pid::from_raw(sentinel.id() as i32).expect("pid");
    rustix::process::kill_process(sentinel_pid, rustix::process::Signal::TERM).expect("kill");
    let ended = sentinel.wait().expect("wait for sleep");
    assert!(!out.status.success(), "a broken file was accepted: {err}");
    assert!(
        err.contains("oi.conf:1: unknown service 'not-a-port/tcp'"),
        "--check's error with FILE:LINE: {err}"
    );
    assert_eq!(
        ended.signal(),
        Some(rustix::process::Signal::TERM.as_raw()),
        "the broken file's reload signalled pid {}: {err}",
        sentinel.id()
    );
    assert_eq!(marker_through(port), b"A", "the old rule still serves");

    // Good: checked, oi gets SIGHUP and reloads (its notifications say when).
    write_atomic(&conf, &format!("127.0.0.1 {port} 127.0.0.1 {}\n", b.port()));
    let out = reload(&["--or-sighup".into(), oi.child.id().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the fallback failed: {err}");
    assert!(
        err.contains(&format!("sent pid {} SIGHUP", oi.child.id())),
        "{err}"
    );
    let (reloading, ready) = (oi.next_notify(), oi.next_notify());
    if !reloading.contains("RELOADING=1") || !ready.contains("READY=1") {
        oi.fail(&format!(
            "after the fallback's SIGHUP: {reloading:?} then {ready:?}"
        ));
    }
    assert_eq!(marker_through(port), b"B", "the reloaded rule serves");
    oi.stop();
}
