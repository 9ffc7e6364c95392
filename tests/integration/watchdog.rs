//! systemd's watchdog through the real binary: with `WATCHDOG_USEC` (what
//! `WatchdogSec=` sets) oi sends `WATCHDOG=1` every half period while its
//! threads run, idle ones included; not when `WATCHDOG_PID` names another
//! process; and the process `oi upgrade` starts pings in the old one's
//! place. That a blocked thread stops the pings is the runtime's
//! `heartbeat::tests` and the daemon's `sys::watchdog::tests` here, and
//! tests/systemd/run.py case "7 watchdog" under a real systemd.

use super::upgrade::put_binary;
use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The period the tests give oi, in microseconds: 200 ms, so a ping every 100 ms.
const PERIOD_USEC: &str = "200000";

/// Half of [`PERIOD_USEC`]: how often oi pings.
const HALF: Duration = Duration::from_millis(100);

/// A configuration forwarding one port to an echo backend; the port.
fn conf(dir: &Path) -> (std::path::PathBuf, u16) {
    let backend = echo_backend("127.0.0.1:0");
    let port = free_port();
    let conf = dir.join("oi.conf");
    write_atomic(
        &conf,
        &format!("127.0.0.1 {port} 127.0.0.1 {}\n", backend.port()),
    );
    (conf, port)
}

/// `program -c conf --threads 3` started as systemd starts a watched
/// service: `WATCHDOG_USEC`, and `WATCHDOG_PID` set to the process's own
/// pid (a shell that execs oi keeps its pid).
fn watched(program: &Path, conf: &Path) -> Command {
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(r#"export WATCHDOG_PID=$$; exec "$0" "$@""#)
        .arg(program)
        .arg("-c")
        .arg(conf)
        .args(["--threads", "3"])
        .env("WATCHDOG_USEC", PERIOD_USEC);
    c
}

/// Waits for `n` `WATCHDOG=1` messages (skipping others); the time from
/// the first to the last.
fn pings(oi: &OiProcess, n: usize) -> Duration {
    let mut first = None;
    for seen in 0..n {
        loop {
            let m = oi.next_notify();
            if m.lines().any(|l| l == "WATCHDOG=1") {
                break;
            }
            assert!(
                !m.contains("STOPPING=1"),
                "oi stopped after {seen} pings: {m:?}"
            );
        }
        first.get_or_insert_with(Instant::now);
    }
    first.map_or(Duration::ZERO, |t| t.elapsed())
}

/// Waits for READY=1, skipping pings sent before it.
fn ready(oi: &OiProcess) {
    for _ in 0..1000 {
        let m = oi.next_notify();
        if m.contains("READY=1") {
            return;
        }
        if !m.lines().all(|l| l == "WATCHDOG=1") {
            oi.fail(&format!("expected READY=1 or WATCHDOG=1, got {m:?}"));
        }
    }
    oi.fail("a thousand pings and no READY=1");
}

#[test]
fn pings_every_half_period_while_every_thread_runs_idle_ones_included() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (conf, port) = conf(dir.path());
    let oi = OiProcess::spawn(
        watched(Path::new(env!("CARGO_BIN_EXE_oi")), &conf),
        dir.path(),
    );
    ready(&oi);
    // Three threads with nothing to do: each still counts on its timer.
    let took = pings(&oi, 5);
    // Four gaps of at least half a period each (each check waits that
    // long), less the receiving thread's jitter: not a flood.
    assert!(
        took >= HALF * 3,
        "5 pings in {took:?}: faster than every {HALF:?}"
    );
    ping(port).unwrap_or_else(|e| oi.fail(&format!("oi forwards while it pings: {e}")));
    pings(&oi, 2);
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{status}\n{stderr}");
}

#[test]
fn no_ping_when_watchdog_pid_names_another_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (conf, port) = conf(dir.path());
    let mut command = Command::new(env!("CARGO_BIN_EXE_oi"));
    command
        .arg("-c")
        .arg(&conf)
        .env("WATCHDOG_USEC", PERIOD_USEC)
        // pid 1 is never oi: the variables were inherited from a watched parent.
        .env("WATCHDOG_PID", "1");
    let mut oi = OiProcess::spawn(command, dir.path());
    oi.wait_ready();
    // Ten periods: twenty pings had the variables been oi's.
    if let Some(m) = oi.notify_within(HALF * 20) {
        oi.fail(&format!("a notification from an oi not watched: {m:?}"));
    }
    assert!(oi.exited_within(Duration::ZERO).is_none(), "oi exited");
    ping(port).unwrap_or_else(|e| oi.fail(&format!("oi serves: {e}")));
}

#[test]
fn the_process_an_upgrade_starts_pings_in_place_of_the_old_one() {
    let dir = tempfile::Builder::new()
        .prefix("oi-wd")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let (conf, port) = conf(dir.path());
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let mut old = OiProcess::spawn(watched(&binary, &conf), dir.path());
    ready(&old);
    pings(&old, 2);
    // SIGUSR2: the same binary starts and takes over (`oi upgrade`).
    old.signal(rustix::process::Signal::USR2);
    let new: i32 = (0..1000)
        .find_map(|_| {
            let m = old.next_notify();
            m.lines()
                .find_map(|l| l.strip_prefix("MAINPID="))
                .and_then(|p| p.parse().ok())
        })
        .unwrap_or_else(|| old.fail("no MAINPID= after SIGUSR2"));
    let _new = super::upgrade::Adopted(new);
    // systemd's WATCHDOG_PID names the old process: the new one, the main
    // process now, is not started with it.
    let environ = std::fs::read(format!("/proc/{new}/environ")).expect("the new oi's environment");
    let vars: Vec<&[u8]> = environ.split(|&b| b == 0).collect();
    assert!(
        !vars.iter().any(|v| v.starts_with(b"WATCHDOG_PID=")),
        "the new oi inherited WATCHDOG_PID"
    );
    assert!(vars.contains(&b"WATCHDOG_USEC=200000".as_slice()));
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after the hand-over"));
    assert!(status.success(), "{status}");
    // Only the new process is left to ping: at most the last one or two
    // of the old one's can still be on their way to the reader.
    pings(&old, 5);
    ping(port).unwrap_or_else(|e| old.fail(&format!("the new oi serves: {e}")));
}
