//! `[transparent]` added by a reload to an oi that dropped root with
//! `--user`: oi keeps CAP_NET_ADMIN only when a rule is transparent at
//! start (README), and cannot get it back, so such a reload is refused with
//! the rule's file:line and the previous configuration serves on; where a
//! transparent rule at start kept it, a reload may add another.
//!
//! On loopback, with no namespace: a client of 127.0.0.1 connecting from
//! 127.0.0.1 needs no routing, only IP_TRANSPARENT, so these show what a
//! reload does with the capability. Needs root and a `nobody` user.

use crate::common::*;
/// oi as `nobody` with `rules` in a directory `nobody` can reach (the
/// harness's notify socket is made there, under umask 0, by root).
fn start_as_nobody(rules: &str) -> (tempfile::TempDir, std::path::PathBuf, OiProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut perm = std::fs::metadata(dir.path()).expect("dir").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(dir.path(), perm).expect("chmod");
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, rules);
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let oi = OiProcess::start(dir.path(), &conf, &["--user", "nobody"]);
    rustix::process::umask(old);
    (dir, conf, oi)
}

/// Whether this machine can run these tests; says why not.
fn can_run() -> bool {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root (--user drops from root)");
        return false;
    }
    true
}

/// Sends SIGHUP and waits for the reload's READY=1; returns its STATUS=.
fn reload_status(oi: &OiProcess) -> String {
    oi.signal(rustix::process::Signal::HUP);
    let reloading = oi.next_notify();
    if !reloading.contains("RELOADING=1") {
        oi.fail(&format!(
            "after SIGHUP, expected RELOADING=1, got {reloading:?}"
        ));
    }
    oi.next_notify()
}

#[test]
fn a_reload_adding_a_transparent_rule_after_user_dropped_the_capability_is_refused() {
    if !can_run() {
        return;
    }
    let backend = echo_backend("127.0.0.1:0").port();
    let (plain, added) = (free_port(), free_port());
    let first = format!("127.0.0.1 {plain} 127.0.0.1 {backend}\n");
    let (_dir, conf, oi) = start_as_nobody(&first);
    ping(plain).unwrap_or_else(|e| oi.fail(&format!("the plain rule forwards as nobody: {e}")));

    // Line 2: a transparent rule, which nobody without CAP_NET_ADMIN
    // cannot serve: accepted, each of its clients would be closed.
    write_atomic(
        &conf,
        &format!("{first}127.0.0.1 {added} 127.0.0.1 {backend} [transparent]\n"),
    );
    let status = reload_status(&oi);
    assert!(
        status.contains("reload refused: previous configuration still serving"),
        "{status:?}; oi: {}",
        oi.stderr_tail()
    );
    let want = format!(
        "{}:2: transparent needs CAP_NET_ADMIN, which oi dropped at start-up with --user nobody \
         (no rule was transparent then); restart oi to add it",
        conf.display()
    );
    if !holds_within(PATIENCE, || oi.stderr_tail().contains(&want)) {
        oi.fail(&format!("no refusal naming the rule's line: {want}"));
    }
    // The previous configuration serves: the plain rule forwards, and the
    // transparent one was never bound.
    ping(plain).unwrap_or_else(|e| oi.fail(&format!("the plain rule after the refusal: {e}")));
    assert!(refused(added), "the refused rule's port is not listened on");
    assert!(
        !oi.stderr_tail().contains("IP_TRANSPARENT"),
        "no client failed: {}",
        oi.stderr_tail()
    );

    // Without the transparent rule, the next reload goes through.
    write_atomic(
        &conf,
        &format!("{first}127.0.0.1 {added} 127.0.0.1 {backend}\n"),
    );
    let status = reload_status(&oi);
    assert!(status.contains("serving 2 rule(s)"), "{status:?}");
    ping(added).unwrap_or_else(|e| oi.fail(&format!("the rule a reload added: {e}")));
}

#[test]
fn a_transparent_rule_at_start_lets_a_reload_add_another() {
    if !can_run() {
        return;
    }
    let backend = echo_backend("127.0.0.1:0").port();
    let (first_port, added) = (free_port(), free_port());
    let first = format!("127.0.0.1 {first_port} 127.0.0.1 {backend} [transparent]\n");
    let (_dir, conf, oi) = start_as_nobody(&first);
    write_atomic(
        &conf,
        &format!("{first}127.0.0.1 {added} 127.0.0.1 {backend} [transparent]\n"),
    );
    let status = reload_status(&oi);
    assert!(
        status.contains("serving 2 rule(s)"),
        "{status:?}; oi: {}",
        oi.stderr_tail()
    );
    // Both connect from the client's address (127.0.0.1) with IP_TRANSPARENT.
    for port in [first_port, added] {
        ping(port).unwrap_or_else(|e| oi.fail(&format!("transparent rule on {port}: {e}")));
    }
    assert!(
        !oi.stderr_tail().contains("IP_TRANSPARENT"),
        "{}",
        oi.stderr_tail()
    );
}

/// `oi upgrade` reads the configuration again: the new oi has only what
/// the old one kept, so a transparent rule only the new configuration has
/// is refused as a reload's is, and the old oi serves on.
#[test]
fn an_upgrade_adding_a_transparent_rule_after_user_dropped_the_capability_is_refused() {
    if !can_run() {
        return;
    }
    let backend = echo_backend("127.0.0.1:0").port();
    let (plain, added) = (free_port(), free_port());
    let first = format!("127.0.0.1 {plain} 127.0.0.1 {backend}\n");
    let dir = tempfile::Builder::new()
        .prefix("oi-upgtr")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let mut perm = std::fs::metadata(dir.path()).expect("dir").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(dir.path(), perm).expect("chmod");
    let binary = dir.path().join("oi");
    super::upgrade::put_binary(std::path::Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, &first);
    let umask = rustix::process::umask(rustix::fs::Mode::empty());
    let old = OiProcess::start_program(&binary, dir.path(), &conf, &["--user", "nobody"]);
    rustix::process::umask(umask);
    write_atomic(
        &conf,
        &format!("{first}127.0.0.1 {added} 127.0.0.1 {backend} [transparent]\n"),
    );
    old.signal(rustix::process::Signal::USR2);
    let want = format!(
        "refused to take over: {}:2: transparent needs CAP_NET_ADMIN, which oi dropped at \
         start-up with --user nobody",
        conf.display()
    );
    if !holds_within(PATIENCE, || old.stderr_tail().contains(&want)) {
        old.fail(&format!("no refusal naming the rule's line: {want}"));
    }
    assert!(
        old.stderr_tail().contains("this oi keeps serving"),
        "{}",
        old.stderr_tail()
    );
    ping(plain).unwrap_or_else(|e| old.fail(&format!("the old oi serves on: {e}")));
    assert!(refused(added), "the refused rule's port is not listened on");
}
