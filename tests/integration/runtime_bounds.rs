//! Through the real binary: nothing outside oi can stall or kill it: a log
//! file that is a FIFO (with no reader, or a reader that never reads),
//! SIGUSR1, a pid file that cannot be written.

use crate::common::*;
use rustix::process::Signal;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    use rustix::fs::{mknodat, FileType, Mode, CWD};
    mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0).expect("mkfifo");
}

/// Opens the FIFO's read end without waiting for a writer; never read from.
fn fifo_reader(path: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .expect("open the FIFO for reading")
}

/// A directory with `oi.conf`: one TCP rule to an echo backend, then `extra` lines.
fn setup(extra: &str) -> (tempfile::TempDir, PathBuf, SocketAddr) {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = echo_backend("127.0.0.1:0");
    let port = free_port();
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!("127.0.0.1 {port} 127.0.0.1 {}\n{extra}", backend.port()),
    )
    .expect("config");
    (dir, conf, local(port))
}

/// One echo through `addr`.
fn serves(addr: SocketAddr) -> bool {
    let mut c = connect(addr);
    let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
    let mut b = [0u8; 2];
    c.write_all(b"hi").is_ok() && c.read_exact(&mut b).is_ok() && &b == b"hi"
}

/// Stops `oi` with SIGTERM; asserts it exits 0 within 10 s; returns its stderr.
fn stop_promptly(mut oi: OiProcess) -> String {
    oi.signal(Signal::TERM);
    let status = oi.exited_within(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM: exit 0 within 10 s, got {status:?}"
    );
    oi.stop_after_signal().1
}

#[test]
fn a_fifo_log_file_without_a_reader_stalls_neither_start_nor_reload_nor_exit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("log.fifo");
    mkfifo(&fifo);
    let (_d, conf, addr) = setup(&format!("logfile {}\n", fifo.display()));
    // Before, the open blocked the writer and start-up waited on it: no READY=1.
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    assert!(serves(addr));
    oi.reload();
    assert!(serves(addr));
    let err = stop_promptly(oi);
    assert!(
        err.contains("log.fifo") && err.contains("FIFO nobody reads"),
        "{err}"
    );
}

#[test]
fn a_fifo_log_file_nobody_reads_drops_lines_and_exit_stays_prompt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("log.fifo");
    mkfifo(&fifo);
    let _reader = fifo_reader(&fifo);
    let udp_port = free_udp_port();
    // Every datagram from 127.0.0.1 is denied and logged: a cheap flood of lines.
    let (_d, conf, addr) = setup(&format!(
        "logfile {}\n127.0.0.1 {udp_port}/udp 127.0.0.1 9/udp\ndeny 127.0.0.1\n",
        fifo.display()
    ));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let c = std::net::UdpSocket::bind("127.0.0.1:0").expect("client");
    // About 90 bytes a line: 20,000 lines are far more than the FIFO's 64 KiB.
    for _ in 0..20_000 {
        let _ = c.send_to(b"x", local(udp_port));
    }
    assert!(serves(addr), "forwarding goes on while the log is stuck");
    oi.reload();
    assert!(serves(addr));
    let err = stop_promptly(oi);
    assert!(err.contains("log file: dropping lines"), "{err}");
    assert_eq!(
        err.matches("log file: dropping lines").count(),
        1,
        "one warning a minute: {err}"
    );
}

#[test]
fn sigusr1_logs_a_status_line_and_oi_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_d, conf, addr) = setup("");
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    assert!(serves(addr));
    // Before, SIGUSR1's default action killed oi, as it kills rinetd.
    oi.signal(Signal::USR1);
    assert!(serves(addr));
    let err = stop_promptly(oi);
    assert_eq!(err.matches("status: ").count(), 1, "{err}");
}

#[test]
fn an_unwritable_pid_file_is_reported_with_its_path_and_oi_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid = dir.path().join("no-such-dir").join("oi.pid");
    let (_d, conf, addr) = setup(&format!("pidlogfile {}\n", pid.display()));
    // Before, start-up failed with "cannot start: No such file or directory".
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    assert!(serves(addr));
    oi.reload();
    assert!(serves(addr));
    let err = stop_promptly(oi);
    let named = format!("cannot write the pid file {}", pid.display());
    assert_eq!(err.matches(&named).count(), 2, "start-up and reload: {err}");
}

#[test]
fn a_daemon_with_an_unwritable_pid_file_still_reports_ready_and_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid = dir.path().join("no-such-dir").join("oi.pid");
    let (_d, conf, addr) = setup(&format!("pidlogfile {}\n", pid.display()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("-c")
        .arg(&conf)
        .arg("--daemon")
        .env_remove("NOTIFY_SOCKET")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run oi --daemon");
    // The daemon is found by its configuration path, to stop it at the end.
    let daemon = find_process_with_arg(&conf);
    let stop = Stopper(daemon);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "parent exits 0: {stderr}");
    assert!(stderr.contains(&pid.display().to_string()), "{stderr}");
    assert!(stop.0.is_some(), "the daemon runs");
    assert!(serves(addr));
}

/// Kills the daemon when the test ends, however it ends.
struct Stopper(Option<i32>);

impl Drop for Stopper {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, Signal::TERM);
        }
    }
}

/// The pid of a running process (not a zombie) with `arg` on its command line.
fn find_process_with_arg(arg: &Path) -> Option<i32> {
    let want = arg.as_os_str().as_encoded_bytes();
    let mut found = None;
    wait_until("the daemon is running", || {
        found = std::fs::read_dir("/proc").ok().and_then(|d| {
            d.flatten().find_map(|e| {
                let pid: i32 = e.file_name().to_str()?.parse().ok()?;
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let live = !stat.contains(") Z ");
                (live && cmd.split(|&b| b == 0).any(|a| a == want)).then_some(pid)
            })
        });
        found.is_some()
    });
    found
}
