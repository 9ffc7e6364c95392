//! The command line's convention, through the binary: options that apply to
//! every command (`-c`, `--socket`) are accepted after the subcommand as well
//! as before it, and `oi status -c FILE` finds the server through the file's
//! `controlsocket` line, as the README promises.

use crate::common::*;
use std::process::{Command, Output};

/// Runs the built `oi` with `args`.
fn oi(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(args)
        .output()
        .expect("run oi")
}

/// stdout, or a failure naming the command and its stderr.
fn ok(args: &[&str]) -> String {
    let out = oi(args);
    assert!(
        out.status.success(),
        "oi {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn status_and_connections_take_the_configuration_file_after_the_subcommand() {
    let backend = echo_backend("127.0.0.1:0");
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("oi.sock");
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!(
            "controlsocket {}\n127.0.0.1 {port} {} {}\n",
            sock.display(),
            backend.ip(),
            backend.port()
        ),
    )
    .expect("write conf");
    let server = OiProcess::start(dir.path(), &conf, &[]);
    let conf = conf.to_str().expect("utf-8 path");
    for args in [
        &["status", "-c", conf][..],
        &["-c", conf, "status"],
        &["status", "--conf-file", conf],
    ] {
        let text = ok(args);
        assert!(text.contains("Status Report (oi)"), "oi {args:?}: {text}");
        assert!(text.contains(&format!("127.0.0.1:{port}/tcp")), "{text}");
    }
    let json = ok(&["connections", "-c", conf, "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert!(rows.is_array(), "{json}");
    let (code, stderr) = server.stop();
    assert!(code.success(), "{stderr}");
}

#[test]
fn server_flags_after_a_subcommand_are_refused_with_exit_2() {
    let out = oi(&["status", "--threads", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--threads"), "{stderr}");
}

#[test]
fn every_subcommand_help_lists_the_options_for_every_command() {
    for sub in ["status", "connections"] {
        let help = ok(&[sub, "--help"]);
        for flag in ["--conf-file", "--socket"] {
            assert!(help.contains(flag), "oi {sub} --help lacks {flag}: {help}");
        }
    }
}
