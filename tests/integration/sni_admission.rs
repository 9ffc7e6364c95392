//! Admission on a listener rules share by server name, through the real
//! binary: each `[sni=...]` rule admits with its own allow/deny lines,
//! `maxconn` and `maxconn-per-client`, after the ClientHello chose it, and
//! the default rule with its own. A client the routed rule refuses is
//! closed before any backend is asked and logged with the server name; the
//! same client naming another rule is served. Raw ClientHellos
//! (`client_hello::example`), so no TLS tool is needed.

use crate::common::*;
use oxidinetd::client_hello;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

/// `host port` of a backend, as a rule line writes it.
fn at(a: SocketAddr) -> String {
    format!("{} {}", a.ip(), a.port())
}

/// What a connection from `from` naming `name` gets back from
/// 127.0.0.1:`port` before it is closed: the marker of the backend it
/// reached, or nothing when it was refused. An echo backend that admitted
/// it never closes: the read gives up after the tests' patience, with the
/// echoed bytes (`connect_from` gives every read 20 s).
fn answer_from(from: &str, port: u16, name: &str) -> Vec<u8> {
    let mut s = connect_from(from, local(port));
    s.write_all(&client_hello::example(Some(name)))
        .expect("write the ClientHello");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    reply
}

/// A connection naming `name` that the echo backend behind it answered:
/// admitted and held open until dropped.
fn held_open(from: &str, port: u16, name: &str) -> TcpStream {
    let mut s = connect_from(from, local(port));
    let hello = client_hello::example(Some(name));
    s.write_all(&hello).expect("write the ClientHello");
    let mut back = vec![0u8; hello.len()];
    s.read_exact(&mut back)
        .unwrap_or_else(|e| panic!("{name} from {from} should be admitted and echoed: {e}"));
    s
}

/// Starts oi on `rules` (rinetd.conf lines) with a tab log; returns it and the log's path.
fn oi_with(dir: &Path, rules: &str) -> (OiProcess, std::path::PathBuf) {
    let log = dir.join("oi.log");
    let conf = dir.join("oi.conf");
    write_atomic(&conf, &format!("logfile {}\n{rules}", log.display()));
    (OiProcess::start(dir, &conf, &[]), log)
}

/// How many log lines end with `ending`, once at least `want` do (or the
/// wait gave up), and the whole log for the failure message.
fn logged(log: &Path, want: usize, ending: &str) -> (usize, String) {
    let count = |t: &str| t.lines().filter(|l| l.ends_with(ending)).count();
    let text = wait_for_file(log, |t| count(t) >= want);
    (count(&text), text)
}

#[test]
fn deny_under_an_sni_rule_refuses_that_client_while_the_default_rule_serves_it() {
    let named = marker_backend(b"NAMED");
    let rest = marker_backend(b"REST");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let (oi, log) = oi_with(
        dir.path(),
        &format!(
            "127.0.0.1 {port} {} [sni=a.example.com]\ndeny 127.0.0.2\n127.0.0.1 {port} {}\n",
            at(named),
            at(rest)
        ),
    );
    if answer_from("127.0.0.2", port, "a.example.com") != b"" {
        oi.fail("127.0.0.2 is denied by the a.example.com rule");
    }
    assert_eq!(answer_from("127.0.0.2", port, "b.example.com"), b"REST");
    assert_eq!(answer_from("127.0.0.1", port, "a.example.com"), b"NAMED");
    let (denied, lines) = logged(&log, 1, "\tdenied\ta.example.com");
    assert_eq!(
        denied, 1,
        "one denied line naming the server name:\n{lines}"
    );
    assert!(lines.contains("127.0.0.2\t"), "{lines}");
    oi.stop();
}

#[test]
fn allow_under_an_sni_rule_admits_only_its_clients_whatever_the_default_rule_says() {
    let named = marker_backend(b"NAMED");
    let rest = marker_backend(b"REST");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    // The default rule binds the listener and denies 127.0.0.3; the named
    // rule allows only 127.0.0.3.
    let (oi, log) = oi_with(
        dir.path(),
        &format!(
            "127.0.0.1 {port} {}\ndeny 127.0.0.3\n\
             127.0.0.1 {port} {} [sni=a.example.com]\nallow 127.0.0.3\n",
            at(rest),
            at(named)
        ),
    );
    if answer_from("127.0.0.3", port, "a.example.com") != b"NAMED" {
        oi.fail("127.0.0.3 is allowed by the a.example.com rule");
    }
    assert_eq!(answer_from("127.0.0.3", port, "other.example.com"), b"");
    assert_eq!(answer_from("127.0.0.1", port, "a.example.com"), b"");
    assert_eq!(answer_from("127.0.0.1", port, "other.example.com"), b"REST");
    let (not_allowed, lines) = logged(&log, 1, "\tnot-allowed\ta.example.com");
    assert_eq!(not_allowed, 1, "{lines}");
    let (denied, lines) = logged(&log, 1, "\tdenied\tother.example.com");
    assert_eq!(denied, 1, "{lines}");
    oi.stop();
}

#[test]
fn maxconn_counts_and_limits_each_sni_rule_on_its_own() {
    let echo = echo_backend("127.0.0.1:0");
    let rest = marker_backend(b"REST");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    // The default rule's maxconn=1 limits only its own connections.
    let (oi, log) = oi_with(
        dir.path(),
        &format!(
            "127.0.0.1 {port} {} [maxconn=1]\n\
             127.0.0.1 {port} {} [sni=a.example.com, maxconn=2]\n",
            at(rest),
            at(echo)
        ),
    );
    let first = held_open("127.0.0.1", port, "a.example.com");
    let second = held_open("127.0.0.1", port, "a.example.com");
    if answer_from("127.0.0.1", port, "a.example.com") != b"" {
        oi.fail("a third a.example.com connection is over that rule's maxconn=2");
    }
    // Two open connections of the named rule leave the default's one free.
    assert_eq!(answer_from("127.0.0.1", port, "b.example.com"), b"REST");
    let (limited, lines) = logged(&log, 1, "\tlimit-reached\ta.example.com");
    assert_eq!(limited, 1, "{lines}");
    drop((first, second));
    // Its slots come back when its connections close.
    wait_until("a.example.com admits again", || {
        let mut s = connect_from("127.0.0.1", local(port));
        let hello = client_hello::example(Some("a.example.com"));
        s.write_all(&hello).is_ok() && s.read_exact(&mut vec![0u8; hello.len()]).is_ok()
    });
    oi.stop();
}

#[test]
fn maxconn_per_client_counts_each_client_on_the_sni_rule_it_reached() {
    let echo = echo_backend("127.0.0.1:0");
    let other = echo_backend("127.0.0.1:0");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let (oi, log) = oi_with(
        dir.path(),
        &format!(
            "127.0.0.1 {port} {} [sni=a.example.com, maxconn-per-client=1]\n\
             127.0.0.1 {port} {}\n",
            at(echo),
            at(other)
        ),
    );
    let _one = held_open("127.0.0.4", port, "a.example.com");
    if answer_from("127.0.0.4", port, "a.example.com") != b"" {
        oi.fail("a second a.example.com connection from 127.0.0.4 is over its per-client limit");
    }
    // Another client of the same rule, and the same client on the default rule.
    let _two = held_open("127.0.0.5", port, "a.example.com");
    let _three = held_open("127.0.0.4", port, "b.example.com");
    let _four = held_open("127.0.0.4", port, "b.example.com");
    let (limited, lines) = logged(&log, 1, "\tlimit-reached\ta.example.com");
    assert_eq!(limited, 1, "{lines}");
    oi.stop();
}

#[test]
fn a_connection_handed_over_by_an_upgrade_stays_with_the_rule_its_server_name_chose() {
    use super::upgrade::{put_binary, signal_upgrade};
    let echo = echo_backend("127.0.0.1:0");
    let rest = marker_backend(b"REST");
    let dir = tempfile::Builder::new()
        .prefix("oi-sni-upg")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let port = free_port();
    let log = dir.path().join("oi.log");
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "logfile {}\n127.0.0.1 {port} {} [sni=a.example.com, maxconn=1]\n127.0.0.1 {port} {}\n",
            log.display(),
            at(echo),
            at(rest)
        ),
    );
    let mut old = OiProcess::start_program(&binary, dir.path(), &conf, &[]);
    let mut held = held_open("127.0.0.1", port, "a.example.com");
    let new = signal_upgrade(&mut old, &binary);
    wait_until("the old oi says it handed the connection over", || {
        old.stderr_tail().contains("handed 1 live connection(s)")
    });
    if old.exited_within(PATIENCE).is_none() {
        old.fail("the old oi did not exit after handing its connection over");
    }
    // Still the routed rule's: it echoes, and it fills that rule's maxconn=1.
    held.write_all(b"after").expect("write after the upgrade");
    let mut back = [0u8; 5];
    held.read_exact(&mut back).expect("echo after the upgrade");
    assert_eq!(&back, b"after");
    assert_eq!(
        answer_from("127.0.0.1", port, "a.example.com"),
        b"",
        "the handed-over connection counts on a.example.com's maxconn"
    );
    assert_eq!(answer_from("127.0.0.1", port, "b.example.com"), b"REST");
    drop(held);
    // Its last line names the server name it was routed by, as before.
    let text = wait_for_file(&log, |t| {
        t.lines()
            .any(|l| l.contains("\tdone-") && l.ends_with("\ta.example.com"))
    });
    assert!(
        text.lines()
            .any(|l| l.contains("\t88\t88\tdone-") && l.ends_with("\ta.example.com")),
        "the handed-over connection's last line, its bytes from both oi:\n{text}"
    );
    assert!(!new.exited(), "the new oi serves on");
}
