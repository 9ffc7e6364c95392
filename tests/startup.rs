//! Startup failures: clear messages, exit 1, nothing left bound.

mod common;

use common::*;
use std::net::TcpListener;
use std::process::Command;

fn run_oi(conf: &std::path::Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("-c")
        .arg(conf)
        .env_remove("NOTIFY_SOCKET")
        .output()
        .expect("run oi");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bind_failure_names_the_rule_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let free = free_port();
    write_atomic(
        &conf,
        &format!(
            "# taken port on line 3\n127.0.0.1 {free} 127.0.0.1 9\n127.0.0.1 {port} 127.0.0.1 9\n"
        ),
    );
    let (code, stderr) = run_oi(&conf);
    assert_eq!(code, 1, "{stderr}");
    let want = format!("{}:3: cannot bind 127.0.0.1:{port}/tcp: ", conf.display());
    assert!(stderr.contains(&want), "{stderr}");
    // Nothing stays bound: the free port is still free.
    TcpListener::bind(("127.0.0.1", free)).expect("the other rule's port was released");
}

#[test]
fn config_errors_are_all_reported_and_nothing_is_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let free = free_port();
    write_atomic(
        &conf,
        &format!("127.0.0.1 {free} 127.0.0.1 9\n127.0.0.1 70000 127.0.0.1 9\n127.0.0.1 81 127.0.0.1 9 [timout=5]\n"),
    );
    let (code, stderr) = run_oi(&conf);
    assert_eq!(code, 1, "{stderr}");
    let name = conf.display().to_string();
    assert!(
        stderr.contains(&format!("{name}:2: port out of range (1-65535) '70000'")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{name}:3: unknown option 'timout'")),
        "{stderr}"
    );
    TcpListener::bind(("127.0.0.1", free)).expect("nothing was bound");
}

#[test]
fn bad_command_line_values_exit_2_naming_the_flag() {
    for (arg, flag) in [
        ("--connect-timeout=-5", "--connect-timeout"),
        ("--drain=NaN", "--drain"),
        ("--half-close-timeout=inf", "--half-close-timeout"),
        ("--drain=1e19", "--drain"),
        ("--threads=0", "--threads"),
        ("--splice=sometimes", "--splice"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_oi"))
            .args(["-c", "/nonexistent/never-read.conf", arg])
            .env_remove("NOTIFY_SOCKET")
            .output()
            .expect("run oi");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{arg}: {stderr}");
        assert!(stderr.contains(flag), "{arg}: {stderr}");
        assert!(
            !stderr.contains("never-read"),
            "rejected before reading: {stderr}"
        );
    }
}
