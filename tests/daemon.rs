//! Drop-in mode: started as `rinetd`, oi forks like rinetd does.

mod common;

use common::*;
use std::io::Read;
use std::process::{Command, Stdio};

/// A directory with a `rinetd` symlink to the oi binary and a config using a relative path.
fn setup() -> (tempfile::TempDir, std::path::PathBuf, u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("rinetd");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_oi"), &link).expect("symlink");
    let port = free_port();
    let backend = echo_backend("127.0.0.1:0").port();
    let pid = dir.path().join("rinetd.pid");
    std::fs::write(
        dir.path().join("rinetd.conf"),
        format!(
            "pidlogfile {}\n127.0.0.1 {port} 127.0.0.1 {backend}\n",
            pid.display()
        ),
    )
    .expect("config");
    (dir, link, port)
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn echo_once(port: u16) -> bool {
    use std::io::Write;
    let mut s = connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    let mut b = [0u8; 2];
    s.write_all(b"hi").is_ok() && s.read_exact(&mut b).is_ok() && &b == b"hi"
}

#[test]
fn named_rinetd_forks_writes_its_pid_and_stops_on_sigterm() {
    let (dir, link, port) = setup();
    // A relative -c: the daemon changes to / and must still have found its file.
    let status = Command::new(&link)
        .current_dir(dir.path())
        .args(["-c", "rinetd.conf"])
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .status()
        .expect("run rinetd");
    assert!(
        status.success(),
        "the foreground process exits 0 once the daemon is set up"
    );
    let pid: i32 = std::fs::read_to_string(dir.path().join("rinetd.pid"))
        .expect("pid file written before the parent exits")
        .trim()
        .parse()
        .expect("pid");
    assert!(alive(pid), "daemon {pid} is running");
    assert!(echo_once(port), "daemon forwards");
    let p = rustix::process::Pid::from_raw(pid).expect("pid");
    rustix::process::kill_process(p, rustix::process::Signal::TERM).expect("SIGTERM");
    holds_within(PATIENCE, || !alive(pid));
    assert!(!alive(pid), "daemon stopped on SIGTERM");
}

#[test]
fn named_rinetd_with_f_stays_in_the_foreground() {
    let (dir, link, port) = setup();
    let conf = dir.path().join("rinetd.conf");
    let mut oi = OiProcess::start_program(&link, dir.path(), &conf, &["-f"]);
    assert!(
        oi.child.try_wait().expect("try_wait").is_none(),
        "still in the foreground"
    );
    let pid: u32 = std::fs::read_to_string(dir.path().join("rinetd.pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert_eq!(pid, oi.child.id());
    assert!(echo_once(port));
    let (status, _) = oi.stop();
    assert!(status.success());
}
