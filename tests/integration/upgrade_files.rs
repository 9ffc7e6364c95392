//! What a new oi takes on with the listeners `oi upgrade` hands it: the
//! unix socket files the old one made (it applies its configuration's
//! `mode=` to them and removes them when it exits) and the user the old
//! one runs as (`--user`: the new one is that user already); and the
//! control socket's file, which it removes at exit if the path still names
//! the very socket (no symlink followed).

use super::upgrade::{put_binary, signal_upgrade, Adopted};
use super::upgrade_live::unix_echo;
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Upgrades `old` (started from `binary`) to the same oi by SIGUSR2 and
/// waits until the old one has exited: the new one serves.
fn upgrade(old: &mut OiProcess, binary: &Path) -> Adopted {
    let new = signal_upgrade(old, binary);
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after the hand-over"));
    assert!(status.success(), "{status}");
    wait_until("the new oi has taken over", || {
        old.stderr_tail()
            .contains("took over 0 of 0 live connection(s)")
    });
    new
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("socket file")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn a_new_oi_owns_the_socket_files_it_is_handed_sets_their_mode_and_removes_them() {
    let b = echo_backend("127.0.0.1:0").port();
    let dir = tempfile::Builder::new()
        .prefix("oi-upgm")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let sock = dir.path().join("in.sock");
    let conf = dir.path().join("oi.conf");
    let rule = |m: &str| format!("unix:{} 127.0.0.1 {b} [mode={m}]\n", sock.display());
    std::fs::write(&conf, rule("0600")).expect("conf");
    let mut old = OiProcess::start_program(&binary, dir.path(), &conf, &[]);
    assert_eq!(mode(&sock), 0o600);
    // The new oi reads another mode.
    std::fs::write(&conf, rule("0640")).expect("conf");
    let new = upgrade(&mut old, &binary);
    assert_eq!(
        mode(&sock),
        0o640,
        "the new oi applies its mode= to the file"
    );
    let mut client = std::os::unix::net::UnixStream::connect(&sock).expect("unix client");
    client.set_read_timeout(Some(PATIENCE)).expect("timeout");
    unix_echo(&mut client, b"through the new oi").unwrap_or_else(|e| panic!("echo: {e}"));
    drop(client);
    let pid = rustix::process::Pid::from_raw(new.0).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    wait_until("the new oi has exited", || new.exited());
    assert!(
        !sock.exists(),
        "the new oi removes the socket file it took over when it exits"
    );
}

#[test]
fn a_new_oi_started_by_one_running_as_a_user_is_that_user_already() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let b = echo_backend("127.0.0.1:0").port();
    let dir = tempfile::Builder::new()
        .prefix("oi-upgu")
        .tempdir_in("/tmp")
        .expect("tempdir");
    // nobody runs the binary from here and reaches the notify socket.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let port = free_port();
    let conf = dir.path().join("oi.conf");
    std::fs::write(&conf, format!("127.0.0.1 {port} 127.0.0.1 {b}\n")).expect("conf");
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    // The harness's notify socket must be writable by nobody: made under umask 0.
    let umask = rustix::process::umask(rustix::fs::Mode::empty());
    let mut old = OiProcess::start_program(&binary, dir.path(), &conf, &["--user", "nobody"]);
    rustix::process::umask(umask);
    ping(port).unwrap_or_else(|e| old.fail(&format!("as nobody: {e}")));
    let new = upgrade(&mut old, &binary);
    let status = std::fs::read_to_string(format!("/proc/{}/status", new.0)).expect("status");
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|v| v.split_whitespace().collect::<Vec<_>>())
        .unwrap_or_default();
    let nobody = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .expect("id -u nobody");
    let nobody = String::from_utf8_lossy(&nobody.stdout).trim().to_string();
    assert!(
        uid.iter().all(|u| *u == nobody),
        "the new oi runs as nobody: Uid {uid:?}"
    );
    ping(port).unwrap_or_else(|e| panic!("through the new oi: {e}"));
    assert!(!new.exited(), "the new oi serves on");
}

/// oi with a control socket and one TCP rule, upgraded once to the same
/// oi; returns the directory, the new oi and the control socket's path.
fn upgraded_with_control() -> (tempfile::TempDir, Adopted, std::path::PathBuf) {
    let b = echo_backend("127.0.0.1:0").port();
    let dir = tempfile::Builder::new()
        .prefix("oi-upgc")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let control = dir.path().join("control.sock");
    let conf = dir.path().join("oi.conf");
    let rule = format!(
        "controlsocket {}\n127.0.0.1 {} 127.0.0.1 {b}\n",
        control.display(),
        free_port()
    );
    std::fs::write(&conf, rule).expect("conf");
    let mut old = OiProcess::start_program(&binary, dir.path(), &conf, &[]);
    let new = upgrade(&mut old, &binary);
    assert!(
        control.exists(),
        "the old oi leaves the control socket file"
    );
    let status = super::upgrade_udp::status_json(&control);
    assert!(
        status["uptime_seconds"].is_u64(),
        "the new oi answers: {status}"
    );
    (dir, new, control)
}

/// Stops the new oi and waits until it has exited.
fn stop(new: &Adopted) {
    let pid = rustix::process::Pid::from_raw(new.0).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    wait_until("the new oi has exited", || new.exited());
}

#[test]
fn a_new_oi_owns_the_control_socket_file_it_is_handed_and_removes_it_at_exit() {
    let (_dir, new, control) = upgraded_with_control();
    stop(&new);
    assert!(
        !control.exists(),
        "the new oi removes the control socket file it took over when it exits"
    );
}

#[test]
fn a_control_socket_path_turned_into_a_symlink_is_left_alone_at_exit() {
    let (dir, new, control) = upgraded_with_control();
    // Someone who can write to the directory moves the socket and puts a
    // symlink to it in its place: following it, the new oi would find the
    // inode it took over and remove the path.
    let moved = dir.path().join("moved.sock");
    std::fs::rename(&control, &moved).expect("rename");
    std::os::unix::fs::symlink(&moved, &control).expect("symlink");
    stop(&new);
    assert!(
        std::fs::symlink_metadata(&control).is_ok_and(|m| m.file_type().is_symlink()),
        "the symlink stays"
    );
    assert!(moved.exists(), "and the socket file it names");
}

/// The capability bits `pid` has in effect (`CapEff` of its status).
fn effective_caps(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("CapEff")
}

#[test]
fn a_new_oi_started_by_one_running_as_a_user_keeps_the_capabilities_transparent_needs() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let b = echo_backend("127.0.0.1:0").port();
    let dir = tempfile::Builder::new()
        .prefix("oi-upgt")
        .tempdir_in("/tmp")
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let port = free_port();
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!("127.0.0.1 {port} 127.0.0.1 {b} [transparent]\n"),
    )
    .expect("conf");
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let umask = rustix::process::umask(rustix::fs::Mode::empty());
    let mut old = OiProcess::start_program(&binary, dir.path(), &conf, &["--user", "nobody"]);
    rustix::process::umask(umask);
    // CAP_NET_BIND_SERVICE (bit 10) and CAP_NET_ADMIN (bit 12).
    let wanted = (1u64 << 10) | (1u64 << 12);
    let had = effective_caps(i32::try_from(old.child.id()).expect("a pid"));
    assert_eq!(had & wanted, wanted, "the old oi keeps both: {had:x}");
    let new = upgrade(&mut old, &binary);
    let has = effective_caps(new.0);
    assert_eq!(
        has, had,
        "the new oi has what the old one kept, no more: {has:x}"
    );
    assert!(
        !old.stderr_tail()
            .contains("transparent needs CAP_NET_ADMIN"),
        "no warning that transparent cannot work: {}",
        old.stderr_tail()
    );
}
