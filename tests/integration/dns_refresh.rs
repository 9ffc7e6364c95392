//! DNS refresh through the real binary, with nothing leaving the machine:
//! oi runs in a mount namespace of its own where /etc/hosts is a file the
//! test rewrites, so a backend name moves from 127.0.0.2 to 127.0.0.3.
//! New connections follow the name; open ones keep their backend.

use crate::common::*;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

/// The backend name the test's hosts file defines.
const NAME: &str = "oi-dns-refresh-test.invalid";

/// Two id backends on one port: 1 on 127.0.0.2, 2 on 127.0.0.3.
fn two_backends() -> (u16, TcpListener) {
    for _ in 0..50 {
        let first = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
        let port = first.local_addr().expect("addr").port();
        if let Ok(second) = TcpListener::bind(SocketAddr::from(([127, 0, 0, 3], port))) {
            serve_ids(second, 2, None, None);
            return (port, first);
        }
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

/// Points [`NAME`] at `ip` by rewriting `hosts` in place (the bind mount
/// follows the file, not the name, so no rename).
fn point(hosts: &Path, ip: &str) {
    std::fs::write(hosts, format!("127.0.0.1 localhost\n{ip} {NAME}\n")).expect("write hosts");
}

/// A script that runs oi in a new mount namespace with `hosts` as /etc/hosts.
/// `unshare` without `--fork` and `exec` keep one process: signals reach oi.
fn wrapper(dir: &Path, hosts: &Path) -> PathBuf {
    let script = dir.join("oi-with-hosts");
    let oi = env!("CARGO_BIN_EXE_oi");
    let text = format!(
        "#!/bin/sh\nexec unshare --mount sh -c 'mount --bind \"$0\" /etc/hosts && exec \"$@\"' {} {} \"$@\"\n",
        hosts.display(),
        oi
    );
    std::fs::write(&script, text).expect("write wrapper");
    let mut perm = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).expect("chmod");
    script
}

/// Whether this machine lets the test make a mount namespace (root, or
/// unprivileged user namespaces); the CI machine does.
fn namespaces_work() -> bool {
    std::process::Command::new("unshare")
        .args(["--mount", "true"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Starts oi on `conf_text` with [`NAME`] at 127.0.0.2.
fn start(dir: &tempfile::TempDir, conf_text: &str) -> (OiProcess, PathBuf) {
    let hosts = dir.path().join("hosts");
    point(&hosts, "127.0.0.2");
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, conf_text);
    let program = wrapper(dir.path(), &hosts);
    (
        OiProcess::start_program(&program, dir.path(), &conf, &[]),
        hosts,
    )
}

#[test]
fn new_connections_follow_a_name_that_moves_and_open_ones_stay() {
    if !namespaces_work() {
        eprintln!("skipped: cannot create a mount namespace here");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (backend_port, first) = two_backends();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    serve_ids(first, 1, None, Some(held.clone()));
    let port = free_port();
    let (oi, hosts) = start(
        &dir,
        &format!("dns-refresh 1\n127.0.0.1 {port} {NAME} {backend_port}\n"),
    );
    let mut open = connect(local(port));
    let mut id = [0u8; 1];
    open.read_exact(&mut id).expect("answer");
    assert_eq!(id[0], 1);
    point(&hosts, "127.0.0.3");
    wait_until("new connections reach the new address", || which(port) == 2);
    // The connection opened before is still open (no EOF, no reset).
    open.set_nonblocking(true).expect("nonblocking");
    let e = open.read(&mut id).expect_err("nothing to read, but open");
    assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains(&format!("{NAME} now 127.0.0.3")),
        "{stderr}"
    );
}

#[test]
fn sighup_looks_every_name_up_again() {
    if !namespaces_work() {
        eprintln!("skipped: cannot create a mount namespace here");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (backend_port, first) = two_backends();
    serve_ids(first, 1, None, None);
    let port = free_port();
    // No periodic refresh: only the reload can move the name.
    let (oi, hosts) = start(
        &dir,
        &format!("dns-refresh 0\n127.0.0.1 {port} {NAME} {backend_port}\n"),
    );
    assert_eq!(which(port), 1);
    point(&hosts, "127.0.0.3");
    assert_eq!(which(port), 1, "no refresh without SIGHUP");
    oi.reload();
    assert_eq!(which(port), 2);
    oi.stop();
}

#[test]
fn three_failed_connects_look_the_name_up_at_once() {
    if !namespaces_work() {
        eprintln!("skipped: cannot create a mount namespace here");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (backend_port, first) = two_backends();
    // Backend 1 is gone before oi starts: every connect to it is refused.
    drop(first);
    let port = free_port();
    let (oi, hosts) = start(
        &dir,
        &format!("dns-refresh 0\n127.0.0.1 {port} {NAME} {backend_port}\n"),
    );
    point(&hosts, "127.0.0.3");
    // A few clients are refused (the name still points at 127.0.0.2);
    // the third failure triggers the lookup, and clients reach backend 2.
    wait_until("clients reach the looked-up address", || {
        try_which(port) == Some(2)
    });
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains("after repeated connect failures"),
        "{stderr}"
    );
}
