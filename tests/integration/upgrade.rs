//! `oi upgrade` through SIGUSR2 with the real binary: the running oi starts
//! the binary at the path it was started from (read again from disk) and
//! hands it every listening socket. oi is started from a hard link in the
//! test's directory, so a test can put another binary at that path: the
//! same oi (a good upgrade) or a small script (a bad one).

use crate::common::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What one test's oi runs with.
pub(super) struct Setup {
    /// The test's directory (removed at the end).
    pub(super) dir: tempfile::TempDir,
    /// The path oi is started from, which an upgrade reads again.
    pub(super) binary: PathBuf,
    /// The configuration.
    pub(super) conf: PathBuf,
    /// The TCP rule's port.
    pub(super) port: u16,
    /// The unix listener's socket file.
    pub(super) sock: PathBuf,
    /// The control socket.
    pub(super) control: PathBuf,
}

/// An echo backend, a configuration with a TCP rule, a unix listener and a
/// control socket, and oi at a path of the test's own.
pub(super) fn setup() -> Setup {
    let backend = echo_backend("127.0.0.1:0");
    let dir = tempfile::Builder::new()
        .prefix("oi-upg")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let port = free_port();
    let sock = dir.path().join("in.sock");
    let control = dir.path().join("control.sock");
    let conf = dir.path().join("oi.conf");
    let b = backend.port();
    std::fs::write(
        &conf,
        format!(
            "controlsocket {}\n127.0.0.1 {port} 127.0.0.1 {b}\nunix:{} 127.0.0.1 {b}\n",
            control.display(),
            sock.display()
        ),
    )
    .expect("conf");
    Setup {
        dir,
        binary,
        conf,
        port,
        sock,
        control,
    }
}

/// Puts `from` at `to` as a package upgrade does: a new file renamed over
/// the old path (a hard link when on the same file system, else a copy).
pub(super) fn put_binary(from: &Path, to: &Path) {
    let tmp = to.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    if std::fs::hard_link(from, &tmp).is_err() {
        std::fs::copy(from, &tmp).expect("copy oi");
    }
    std::fs::rename(&tmp, to).expect("rename");
}

/// Starts an upgrade as a package would: the same oi put at `binary` again,
/// then SIGUSR2 to `old`; returns the new process once it has said
/// `MAINPID=` (the old one says how it went on its stderr).
pub(super) fn signal_upgrade(old: &mut OiProcess, binary: &Path) -> Adopted {
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), binary);
    old.signal(rustix::process::Signal::USR2);
    // The new process tells systemd it is the main process now, then READY=1.
    let main = old.next_notify();
    let pid: i32 = main
        .lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| old.fail(&format!("expected MAINPID=, got {main:?}")));
    Adopted(pid)
}

/// Writes an executable script at `to` the same way.
pub(super) fn put_script(to: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = to.with_extension("new");
    std::fs::write(&tmp, text).expect("script");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&tmp, to).expect("rename");
}

/// A process the test did not start (the new oi): SIGTERM when dropped.
pub(super) struct Adopted(pub(super) i32);

impl Adopted {
    /// Whether it has exited (gone, or a zombie nobody reaped yet).
    pub(super) fn exited(&self) -> bool {
        Self::has_exited(self.0)
    }

    /// Whether process `pid` has exited (gone, or a zombie nobody reaped yet).
    pub(super) fn has_exited(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    }
}

impl Drop for Adopted {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

/// One echo round trip through the unix listener.
pub(super) fn unix_ping(path: &Path) -> std::io::Result<()> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"unix")?;
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(())
}

/// `oi status --socket PATH` with the binary under test: its output.
pub(super) fn status(control: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("status")
        .arg("--socket")
        .arg(control)
        .output()
        .expect("oi status")
}

#[test]
fn an_upgrade_hands_every_listener_over_and_refuses_no_connection() {
    let s = setup();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut old =
        OiProcess::start_program(&s.binary, s.dir.path(), &s.conf, &["--metrics", &metrics]);
    ping(s.port).unwrap_or_else(|e| old.fail(&format!("serves before: {e}")));
    // Open across the upgrade: the old process finishes it.
    let mut held = connect(local(s.port));
    held.write_all(b"held").expect("write");
    let mut b = [0u8; 4];
    held.read_exact(&mut b).expect("echo");

    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (stop, port) = (stop.clone(), s.port);
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u32, Vec::new());
            for _ in 0..1_000_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match ping(port) {
                    Ok(()) => ok += 1,
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        })
    };
    // The same binary, put there again as a package upgrade would.
    let new = signal_upgrade(&mut old, &s.binary);
    let pid = new.0;
    assert_ne!(pid as u32, old.child.id());
    let ready = old.next_notify();
    assert!(ready.contains("READY=1"), "{ready:?}");
    wait_until("the old oi says it handed over", || {
        old.stderr_tail().contains("upgraded: oi pid")
    });

    // The held connection still works through the old process, which exits
    // once it ends.
    held.write_all(b"more").expect("write");
    held.read_exact(&mut b).expect("echo after the upgrade");
    assert_eq!(&b, b"more");
    drop(held);
    let status_old = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after its last connection"));
    assert!(status_old.success(), "{status_old}");
    assert!(!new.exited(), "the new oi serves on");

    // Only the new one is left: it serves every listener.
    for _ in 0..20 {
        ping(s.port).unwrap_or_else(|e| old.fail(&format!("the new oi serves TCP: {e}")));
    }
    unix_ping(&s.sock).unwrap_or_else(|e| old.fail(&format!("the new oi serves unix: {e}")));
    let st = status(&s.control);
    assert!(
        st.status.success(),
        "the control socket answers: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    // The metrics endpoint was handed over too: the old oi is gone and it answers.
    let mut m = connect(metrics.parse().expect("addr"));
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut head = [0u8; 12];
    m.read_exact(&mut head).expect("metrics answer");
    assert_eq!(&head, b"HTTP/1.1 200", "the new oi serves /metrics");
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = client.join().expect("client");
    assert!(
        failed.is_empty(),
        "{} of {} connections failed during the upgrade, first: {:?}\n{}",
        failed.len(),
        failed.len() + ok as usize,
        failed.first(),
        old.stderr_tail()
    );
    drop(new);
    wait_until("the new oi exits on SIGTERM", || {
        Adopted(pid).exited_without_signal()
    });
}

impl Adopted {
    /// [`Adopted::exited`], without the SIGTERM a drop sends.
    fn exited_without_signal(self) -> bool {
        let gone = self.exited();
        std::mem::forget(self);
        gone
    }
}

/// `oi upgrade --socket CONTROL [--binary PATH]` with the binary under test.
pub(super) fn oi_upgrade(control: &Path, binary: Option<&Path>) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_oi"));
    c.arg("upgrade").arg("--socket").arg(control);
    if let Some(b) = binary {
        c.arg("--binary").arg(b);
    }
    c.output().expect("oi upgrade")
}

/// How a test asks for the upgrade.
#[derive(Clone, Copy)]
enum Ask {
    /// SIGUSR2, with the script put at the path oi was started from.
    Signal,
    /// `oi upgrade --binary SCRIPT`: it must exit non-zero with the reason.
    Command,
}

/// Starts oi, asks it to upgrade to `script`, and checks that the upgrade
/// fails with a message containing `why` while the old oi serves every
/// listener on.
fn a_bad_binary_leaves_the_old_oi_serving(ask: Ask, script: impl Fn(&Setup) -> String, why: &str) {
    let s = setup();
    let old = OiProcess::start_program(&s.binary, s.dir.path(), &s.conf, &[]);
    match ask {
        Ask::Signal => {
            put_script(&s.binary, &script(&s));
            old.signal(rustix::process::Signal::USR2);
        }
        Ask::Command => {
            let fake = s.dir.path().join("fake-oi");
            put_script(&fake, &script(&s));
            let out = oi_upgrade(&s.control, Some(&fake));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "oi upgrade must fail: {err}");
            assert!(err.contains(why), "expected {why:?} in oi upgrade's: {err}");
        }
    }
    wait_until("the upgrade fails", || {
        old.stderr_tail().contains("upgrade failed")
    });
    let log = old.stderr_tail();
    let line = log
        .lines()
        .find(|l| l.contains("upgrade failed"))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains(why), "expected {why:?} in: {line}\n{log}");
    assert!(line.contains("this oi keeps serving"), "{line}");
    for _ in 0..5 {
        ping(s.port).unwrap_or_else(|e| old.fail(&format!("the old oi serves TCP: {e}")));
    }
    unix_ping(&s.sock).unwrap_or_else(|e| old.fail(&format!("the old oi serves unix: {e}")));
    assert!(
        status(&s.control).status.success(),
        "the control socket answers"
    );
    let (st, stderr) = old.stop();
    assert!(st.success(), "{st}: {stderr}");
}

#[test]
fn a_new_binary_that_exits_at_once_leaves_the_old_one_serving() {
    a_bad_binary_leaves_the_old_oi_serving(
        Ask::Signal,
        |_| "#!/bin/sh\nexit 3\n".to_string(),
        "exited (exit status: 3) before taking over",
    );
}

#[test]
fn a_new_binary_that_rejects_the_configuration_leaves_the_old_one_serving() {
    a_bad_binary_leaves_the_old_oi_serving(
        Ask::Command,
        |s| {
            let broken = s.dir.path().join("broken.conf");
            std::fs::write(&broken, "127.0.0.1 notaport 127.0.0.1 9\n").expect("broken conf");
            format!(
                "#!/bin/sh\nexec {} -c {}\n",
                env!("CARGO_BIN_EXE_oi"),
                broken.display()
            )
        },
        "refused to take over: ",
    );
}

#[test]
fn a_new_binary_of_another_hand_over_version_leaves_the_old_one_serving() {
    if !tool_present("python3", "--version", "python3") {
        return;
    }
    // Says hello as a version-99 oi would, then waits to be turned away.
    a_bad_binary_leaves_the_old_oi_serving(
        Ask::Command,
        |_| {
            "#!/usr/bin/env python3\n\
             import json, os, socket, struct\n\
             s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n\
             s.connect('\\0' + os.environ['OI_HANDOVER'])\n\
             s.send(b'OIHO' + struct.pack('>HB', 99, 1) + json.dumps({'pid': os.getpid()}).encode())\n\
             s.settimeout(60)\n\
             s.recv(65536)\n"
                .to_string()
        },
        "speaks hand-over version 99, this oi speaks version 5",
    );
}

#[test]
fn a_new_binarys_refusal_is_shown_escaped_and_cut() {
    if !tool_present("python3", "--version", "python3") {
        return;
    }
    // Says hello as this oi would, then refuses with a terminal title
    // sequence, a bell, 20000 bytes and a line of its own.
    let shown = format!(
        "refused to take over: \\x1b]0;owned\\x07{}...; this oi keeps serving",
        "A".repeat(101)
    );
    a_bad_binary_leaves_the_old_oi_serving(
        Ask::Command,
        |_| {
            "#!/usr/bin/env python3\n\
             import json, os, socket, struct\n\
             s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n\
             s.connect('\\0' + os.environ['OI_HANDOVER'])\n\
             head = lambda kind: b'OIHO' + struct.pack('>HB', 5, kind)\n\
             s.send(head(1) + json.dumps({'pid': os.getpid()}).encode())\n\
             why = '\\x1b]0;owned\\x07' + 'A' * 20000 + '\\nINJECTED'\n\
             s.send(head(5) + json.dumps({'error': why}).encode())\n\
             s.settimeout(60)\n\
             while s.recv(65536): pass\n"
                .to_string()
        },
        &shown,
    );
}

#[test]
fn oi_upgrade_says_which_pid_serves_now() {
    let s = setup();
    let mut old = OiProcess::start_program(&s.binary, s.dir.path(), &s.conf, &[]);
    let out = oi_upgrade(&s.control, None);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "oi upgrade: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        old.stderr_tail()
    );
    let pid: i32 = said
        .strip_prefix("upgraded: oi pid ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected answer: {said:?}"));
    let new = Adopted(pid);
    // Nothing open: the old one exits at once.
    let status_old = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit"));
    assert!(status_old.success(), "{status_old}");
    ping(s.port).unwrap_or_else(|e| old.fail(&format!("the new oi serves: {e}")));
    assert!(!new.exited());
    // The new one answers `oi upgrade` too (it has the control socket).
    assert!(status(&s.control).status.success());
}

#[test]
fn the_package_postinst_upgrades_a_running_oi_and_keeps_its_connection() {
    let s = setup();
    let mut old = OiProcess::start_program(&s.binary, s.dir.path(), &s.conf, &[]);
    let mut held = connect(local(s.port));
    let mut b = [0u8; 4];
    held.write_all(b"held").expect("write");
    held.read_exact(&mut b).expect("echo");
    // What `dpkg -i` runs after unpacking; only its upgrade step, against
    // this test's oi (the rest creates a system user).
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/dist/deb/postinst");
    let out = std::process::Command::new("sh")
        .arg(script)
        .arg("configure")
        .env("OI_POSTINST_UPGRADE_ONLY", "1")
        .env("OI_CONTROL_SOCKET", &s.control)
        .env("OI_BINARY", env!("CARGO_BIN_EXE_oi"))
        .output()
        .expect("postinst");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && said.starts_with("upgraded: oi pid "),
        "postinst: {said}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        old.stderr_tail()
    );
    let pid: i32 = said["upgraded: oi pid ".len()..]
        .split(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("pid");
    let new = Adopted(pid);
    // The connection opened before the upgrade carries on.
    held.write_all(b"kept").expect("write after the upgrade");
    held.read_exact(&mut b).expect("echo after the upgrade");
    assert_eq!(&b, b"kept");
    ping(s.port).unwrap_or_else(|e| old.fail(&format!("the new oi serves: {e}")));
    drop(held);
    let st = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after handing its connections over"));
    assert!(st.success(), "{st}");
    assert!(!new.exited());
}
