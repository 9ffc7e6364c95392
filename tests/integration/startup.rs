//! Startup failures: clear messages, exit 1, nothing left bound.

use crate::common::*;
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

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0");
    let port = free_port();
    write_atomic(
        &conf,
        &format!("127.0.0.1 {port} 127.0.0.1 {}\n", backend.port()),
    );
    // Soft 256 under a hard limit of 2048, as a shell or unit might leave it.
    let script = dir.path().join("low-limit");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nulimit -Sn 256 && ulimit -Hn 2048 && exec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_oi")
        ),
    )
    .expect("write script");
    let mut perm = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).expect("chmod");
    let oi = OiProcess::start_program(&script, dir.path(), &conf, &[]);
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", oi.child.id())).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("nofile line");
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers, ["2048", "2048"], "{line}");
    ping(port).expect("serves");
    oi.stop();
}

#[test]
fn thousands_of_bind_failures_print_a_bounded_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    // Every port of the range is taken by this listener set.
    let held: Vec<TcpListener> = (0..60)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let mut text = String::new();
    for l in &held {
        let p = l.local_addr().expect("addr").port();
        text.push_str(&format!("127.0.0.1 {p} 127.0.0.1 9\n"));
    }
    write_atomic(&conf, &text);
    let (code, stderr) = run_oi(&conf);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("and 40 more listeners that could not be bound"),
        "{stderr}"
    );
    assert!(stderr.lines().count() <= 25, "{stderr}");
}
