//! `--check` (and a start or reload) looks host names up each
//! once, 16 at a time, within 15 s for all, and counts the names it did not
//! get to instead of waiting on them: systemd runs `--check` before every
//! start, inside its timeout. Before, 26,000 names that do not resolve took
//! over two minutes one by one, and a resolver that never answers held
//! `--check` for as long as the resolver's own timeouts added up.

use crate::common::*;
use std::time::Duration;

/// `n` rules, each with a distinct backend name ending `.invalid` (RFC 6761:
/// never resolves) on its own address and port.
fn rules_with_names(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "10.{}.{}.{} {} backend-{i}.invalid 80\n",
                (i / 62_500) % 250,
                (i / 250) % 250,
                i % 250 + 1,
                1024 + i % 60_000
            )
        })
        .collect()
}

/// Runs `oi --check --quiet -c conf` through `program`, bounded; its exit
/// code and stderr.
fn check(
    program: &std::path::Path,
    dir: &std::path::Path,
    conf: &std::path::Path,
) -> (Option<i32>, String) {
    let mut command = std::process::Command::new(program);
    command.args(["--check", "--quiet", "-c"]).arg(conf);
    let mut oi = OiProcess::spawn(command, dir);
    let status = oi.exited_within(Duration::from_secs(120));
    let stderr = oi.stderr_tail();
    let status = status.unwrap_or_else(|| panic!("--check still runs after 120 s\n{stderr}"));
    (status.code(), stderr)
}

#[test]
fn check_of_26000_names_that_do_not_resolve_reports_each_rule() {
    if !mount_namespaces_work() {
        eprintln!("skipped: cannot create a mount namespace here");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // /etc/hosts only: every other name fails at once, without the network.
    let oi = oi_with_resolver(dir.path(), "files", None, None);
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, &rules_with_names(26_000));
    let (code, stderr) = check(&oi, dir.path(), &conf);
    assert_eq!(code, Some(1), "{stderr}");
    // (The tail of stderr: the first errors are further up.)
    assert!(stderr.contains("cannot resolve host 'backend-"), "{stderr}");
    assert!(
        stderr.contains("configuration invalid (26000 errors)"),
        "{stderr}"
    );
    assert!(!stderr.contains("not looked up"), "{stderr}");
}

#[test]
fn check_counts_the_names_a_silent_name_server_never_answered() {
    if !mount_namespaces_work() {
        eprintln!("skipped: cannot create a mount namespace here");
        return;
    }
    // A name server that takes every query and answers none, on a loopback
    // address of its own (port 53 needs root, as the namespace does).
    let server = match std::net::UdpSocket::bind("127.0.0.99:53") {
        Ok(s) => s,
        Err(e) => {
            assert!(
                std::env::var_os("OI_REQUIRE_TOOLS").is_none(),
                "cannot bind 127.0.0.99:53: {e}"
            );
            eprintln!("skipped: cannot bind 127.0.0.99:53: {e}");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // Each lookup waits 30 s for its answer: 40 names on 16 threads would
    // take 90 s; the lookups stop at 15 s.
    let resolv = "nameserver 127.0.0.99\noptions timeout:30 attempts:1\n";
    let oi = oi_with_resolver(dir.path(), "dns", Some(resolv), None);
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, &rules_with_names(40));
    let (code, stderr) = check(&oi, dir.path(), &conf);
    drop(server);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("oi.conf: 40 host names not looked up within 15s (16 at a time)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "cannot resolve host 'backend-0.invalid': not looked up: no answer within 15s"
        ),
        "{stderr}"
    );
}
