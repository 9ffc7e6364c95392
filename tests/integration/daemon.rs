//! Drop-in mode: started as `rinetd`, oi forks like rinetd does.

use crate::common::*;
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

/// A syslog socket in `dir` that the test reads; messages arrive as datagrams.
fn syslog_socket(dir: &std::path::Path) -> (std::path::PathBuf, std::os::unix::net::UnixDatagram) {
    let path = dir.join("log.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&path).expect("syslog socket");
    socket.set_read_timeout(Some(PATIENCE)).expect("timeout");
    (path, socket)
}

/// Reads syslog datagrams until one contains `want` (fails after PATIENCE); returns it.
fn syslog_until(socket: &std::os::unix::net::UnixDatagram, want: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 4096];
    for _ in 0..1000 {
        let Ok(n) = socket.recv(&mut buf) else { break };
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        if line.contains(want) {
            return line;
        }
        seen.push(line);
    }
    panic!("no syslog message with {want:?}; got {seen:#?}");
}

#[test]
fn drop_in_mode_reports_start_reload_and_errors_to_syslog() {
    let (dir, link, port) = setup();
    let (log_path, log) = syslog_socket(dir.path());
    let status = Command::new(&link)
        .current_dir(dir.path())
        .args(["-c", "rinetd.conf"])
        .env("OI_SYSLOG_SOCKET", &log_path)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .status()
        .expect("run rinetd");
    assert!(status.success());
    let started = syslog_until(&log, "serving 1 rule(s)");
    // daemon.info, tagged with the program name and the daemon's pid.
    let pid: i32 = std::fs::read_to_string(dir.path().join("rinetd.pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(started.starts_with("<30>"), "{started}");
    assert!(started.contains(&format!(" rinetd[{pid}]: ")), "{started}");
    assert!(echo_once(port));

    // A broken file on reload: every error reaches syslog, the old rules keep serving.
    std::fs::write(dir.path().join("rinetd.conf"), "0.0.0.0 80 nowhere\n").expect("write");
    let p = rustix::process::Pid::from_raw(pid).expect("pid");
    rustix::process::kill_process(p, rustix::process::Signal::HUP).expect("SIGHUP");
    let error = syslog_until(&log, "rinetd.conf:1:");
    assert!(error.starts_with("<27>"), "daemon.err: {error}");
    syslog_until(&log, "keeping the previous configuration");
    assert!(echo_once(port), "old configuration still serving");
    rustix::process::kill_process(p, rustix::process::Signal::TERM).expect("SIGTERM");
    holds_within(PATIENCE, || !alive(pid));
}

#[test]
fn drop_in_mode_start_failure_reaches_syslog_too() {
    let (dir, link, _port) = setup();
    let (log_path, log) = syslog_socket(dir.path());
    std::fs::write(dir.path().join("rinetd.conf"), "alow 10.*\n").expect("write");
    let out = Command::new(&link)
        .current_dir(dir.path())
        .args(["-c", "rinetd.conf"])
        .env("OI_SYSLOG_SOCKET", &log_path)
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .output()
        .expect("run rinetd");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rinetd.conf:1:"), "{stderr}");
    let line = syslog_until(&log, "rinetd.conf:1:");
    assert!(line.starts_with("<27>"), "{line}");
}

/// Runs `oi` on a one-rule configuration with `RUST_LOG=rust_log`, does
/// `during(port)` once it is ready, stops it, and returns its stderr.
fn stderr_with_rust_log(rust_log: &str, during: impl FnOnce(u16)) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let port = free_port();
    write_atomic(&conf, &format!("127.0.0.1 {port} 127.0.0.1 {backend}\n"));
    let sock_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("notify");
    notify.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut child = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("-c")
        .arg(&conf)
        // Open connections end (and are logged) before the process exits.
        .args(["--drain", "10s"])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("RUST_LOG", rust_log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn oi");
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"));
    during(port);
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let _ = child.wait();
    err
}

#[test]
fn a_bogus_rust_log_is_reported_and_info_still_shows() {
    let err = stderr_with_rust_log("bogus", |_| {});
    assert!(err.contains("RUST_LOG: 'bogus' is not a level"), "{err}");
    assert!(err.contains("serving 1 rule(s)"), "info still shown: {err}");
}

/// A stderr line on a terminal or in a log file reads as env_logger's
/// default format did before oi wrote the line itself (to drop env_logger's
/// humantime feature and its compile time, see diagnostics.rs): UTC time
/// to the second, the level padded to five, the module, the message.
#[test]
fn stderr_lines_carry_time_level_and_module() {
    let err = stderr_with_rust_log("info", |_| {});
    let line = err
        .lines()
        .find(|l| l.contains("serving 1 rule(s)"))
        .unwrap_or_else(|| panic!("no start line: {err}"));
    let (time, rest) = line
        .strip_prefix('[')
        .and_then(|l| l.split_once(' '))
        .unwrap_or_else(|| panic!("no '[time ' at the start: {line}"));
    assert!(
        chrono::NaiveDateTime::parse_from_str(time, "%Y-%m-%dT%H:%M:%SZ").is_ok(),
        "not a UTC time to the second: {time:?} in {line}"
    );
    assert!(
        rest.starts_with("INFO  oxidinetd::process::service] oi "),
        "level, module, message: {line}"
    );
}

#[test]
fn debug_level_prints_one_line_per_connection() {
    let err = stderr_with_rust_log("debug", |port| {
        assert!(echo_once(port));
    });
    let line = err
        .lines()
        .find(|l| l.contains("bytes from the client"))
        .unwrap_or_else(|| panic!("no connection line: {err}"));
    assert!(line.contains("2 bytes from the client, 2 to it"), "{line}");
    assert!(line.contains("/tcp (127.0.0.1:"), "rule named: {line}");
    assert!(line.contains("done-"), "how it ended: {line}");
}
