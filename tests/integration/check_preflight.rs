//! `oi --check` catches what start-up would fail on beyond syntax: listeners
//! that overlap, and warns about files it cannot write; `-q` for scripts.

use crate::common::*;
use std::process::Command;

/// Runs the binary with `args` on a configuration holding `text`; returns (exit code, stdout, stderr).
fn oi(text: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    std::fs::write(&conf, text).expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(args)
        .arg("-c")
        .arg(&conf)
        .env_remove("NOTIFY_SOCKET")
        .output()
        .expect("run oi");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn overlapping_listeners_fail_the_check_as_they_fail_the_start() {
    let port = free_port();
    let backend = echo_backend("127.0.0.1:0").port();
    let text =
        format!("0.0.0.0 {port} 127.0.0.1 {backend}\n127.0.0.1 {port} 127.0.0.1 {backend}\n");
    let (code, _, err) = oi(&text, &["--check"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            ":2: listener 127.0.0.1:{port}/tcp overlaps 0.0.0.0:{port}/tcp of line 1"
        )),
        "{err}"
    );
    // And the start really fails on it, so the check is not over-strict.
    let (code, _, err) = oi(&text, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("Address already in use"), "{err}");
}

#[test]
fn unwritable_log_file_is_a_warning_and_quiet_prints_nothing_on_success() {
    let port = free_port();
    let text = format!("logfile /nonexistent-dir/oi.log\n127.0.0.1 {port} 127.0.0.1 9\n");
    let (code, out, err) = oi(&text, &["--check"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("warning: cannot write the log file '/nonexistent-dir/oi.log'"),
        "{err}"
    );
    assert!(out.contains("configuration OK (1 rule"), "{out}");
    let (code, out, err) = oi(&text, &["--check", "-q"]);
    assert_eq!(code, Some(0));
    assert_eq!(out, "", "quiet");
    assert!(
        err.contains("warning: cannot write the log file"),
        "warnings still shown"
    );
}

#[test]
fn syntax_errors_and_unknown_names_are_reported_in_one_run() {
    let text =
        "0.0.0.0 80 10.0.0.1 80 [timout=5]\n127.0.0.1 nosuchservice-oi 127.0.0.1 81\nalow 10.*\n";
    let (code, _, err) = oi(text, &["--check"]);
    assert_eq!(code, Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    let at = |n: usize| {
        lines
            .iter()
            .position(|l| l.contains(&format!("oi.conf:{n}:")))
    };
    let (one, two, three) = (at(1), at(2), at(3));
    assert!(
        one.is_some() && two.is_some() && three.is_some(),
        "every line reported: {err}"
    );
    assert!(one < two && two < three, "in line order: {err}");
    assert!(
        err.contains("nosuchservice-oi"),
        "the unknown service: {err}"
    );
    assert!(err.contains("configuration invalid (3 errors)"), "{err}");
}
