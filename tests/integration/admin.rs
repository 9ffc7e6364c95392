//! The operator commands through the real binary and its control socket:
//! `oi backend drain|disable|enable|weight`, `oi close`, `oi reload`, and
//! the read-only `--status-socket`.

use crate::common::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A backend that answers each connection with its one-byte `id`, then
/// echoes what it reads until the client's EOF.
fn id_echo_backend(id: u8) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                if s.write_all(&[id]).is_err() {
                    return;
                }
                let mut buf = [0u8; 65536];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A running oi with one rule over `backends` and its two sockets.
struct Admin {
    /// The process.
    oi: OiProcess,
    /// The rule's port.
    port: u16,
    /// The control socket.
    socket: PathBuf,
    /// The read-only socket.
    status_socket: PathBuf,
    /// The configuration file.
    conf: PathBuf,
    /// Its directory, removed when the test ends.
    _dir: tempfile::TempDir,
}

/// The YAML of one rule on `port` over `backends` with `balance` lines.
fn yaml(port: u16, backends: &[String], balance: &str) -> String {
    let mut text =
        format!("rules:\n  - name: pool\n    bind: 127.0.0.1:{port}/tcp\n    connect:\n");
    for b in backends {
        text.push_str(&format!("      - {b}\n"));
    }
    if !balance.is_empty() {
        text.push_str("    load_balancing:\n");
        for line in balance.lines() {
            text.push_str(&format!("      {line}\n"));
        }
    }
    text
}

/// A YAML backend item.
fn item(addr: SocketAddr, weight: u32) -> String {
    format!("{{dest: '{addr}/tcp', weight: {weight}}}")
}

impl Admin {
    /// Starts oi on one rule over `backends` (round robin).
    fn start(backends: &[SocketAddr]) -> Admin {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let items: Vec<String> = backends.iter().map(|b| item(*b, 1)).collect();
        let conf = dir.path().join("oi.yaml");
        write_atomic(&conf, &yaml(port, &items, "algorithm: roundrobin"));
        let socket = dir.path().join("oi.sock");
        let status_socket = dir.path().join("ro.sock");
        let oi = OiProcess::start(
            dir.path(),
            &conf,
            &[
                "--socket",
                socket.to_str().expect("utf-8"),
                "--status-socket",
                status_socket.to_str().expect("utf-8"),
            ],
        );
        Admin {
            oi,
            port,
            socket,
            status_socket,
            conf,
            _dir: dir,
        }
    }

    /// The rule's name as `oi status` prints it.
    fn rule(&self) -> String {
        format!("127.0.0.1:{}/tcp", self.port)
    }

    /// Runs `oi ARGS --socket SOCKET`: (success, stdout, stderr).
    fn run_on(&self, socket: &Path, args: &[&str]) -> (bool, String, String) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
            .args(args)
            .arg("--socket")
            .arg(socket)
            .output()
            .expect("run oi");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs `oi ARGS` on the control socket and returns its stdout; fails
    /// the test (with oi's stderr) when it fails.
    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run_on(&self.socket, args);
        if !ok {
            self.oi
                .fail(&format!("oi {args:?} failed: {err}\n(stdout: {out})"));
        }
        out
    }

    /// Runs `oi ARGS` on the control socket, expecting it to fail: its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run_on(&self.socket, args);
        assert!(!ok, "oi {args:?} should fail; it printed {out}");
        err
    }

    /// `oi status`'s line for backend `b`.
    fn status_line(&self, b: SocketAddr) -> String {
        let status = self.ok(&["status"]);
        status
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{b}:")))
            .unwrap_or_else(|| panic!("no line for {b} in:\n{status}"))
            .to_string()
    }
}

/// A connection through oi: the backend's id and the stream.
fn open(port: u16) -> (u8, TcpStream) {
    let mut s = connect(local(port));
    let mut id = [0u8; 1];
    s.read_exact(&mut id).expect("a backend answered");
    (id[0], s)
}

/// Sends `data` on `s`, reads its echo back, and closes: the bytes echoed.
fn echo_all(mut s: TcpStream, data: &[u8]) -> Vec<u8> {
    let writer = {
        let mut w = s.try_clone().expect("clone");
        let data = data.to_vec();
        std::thread::spawn(move || {
            w.write_all(&data).expect("write");
            w.shutdown(Shutdown::Write).expect("half-close");
        })
    };
    let mut back = Vec::new();
    s.read_to_end(&mut back).expect("read the echo");
    writer.join().expect("writer");
    back
}

/// Whether `s` was closed by oi: its read ends (EOF or reset).
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[test]
fn drain_under_load_sends_no_new_connection_there_and_an_open_stream_finishes_byte_exact() {
    let backends = [id_echo_backend(1), id_echo_backend(2)];
    let a = Admin::start(&backends);
    // A stream open on backend 1 before the drain.
    let (mut first, mut stream) = open(a.port);
    if first != 1 {
        (first, stream) = open(a.port);
    }
    assert_eq!(first, 1, "round robin gives the second connection to 1");
    // The client loop: connections one after another, each with the time
    // it was made, until told to stop (bounded by `MOST`).
    const MOST: usize = 20_000;
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<(Instant, u8)>>> = Arc::default();
    let port = a.port;
    let client = {
        let (stop, seen) = (stop.clone(), seen.clone());
        std::thread::spawn(move || {
            for _ in 0..MOST {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let started = Instant::now();
                let (id, _) = open(port);
                seen.lock().expect("lock").push((started, id));
            }
        })
    };
    wait_until("the client loop reaches both backends", || {
        let s = seen.lock().expect("lock");
        s.iter().any(|(_, id)| *id == 1) && s.iter().any(|(_, id)| *id == 2)
    });
    let out = a.ok(&["backend", "drain", &a.rule(), &backends[0].to_string()]);
    let drained_at = Instant::now();
    assert!(out.contains("state=drain"), "{out}");
    let after = |s: &Vec<(Instant, u8)>| s.iter().filter(|(t, _)| *t > drained_at).count();
    wait_until("200 connections after the drain", || {
        after(&seen.lock().expect("lock")) >= 200
    });
    stop.store(true, Ordering::Relaxed);
    client.join().expect("client loop");
    let seen = seen.lock().expect("lock");
    let to_drained: Vec<_> = seen
        .iter()
        .filter(|(t, id)| *t > drained_at && *id == 1)
        .collect();
    assert!(
        to_drained.is_empty(),
        "{} of {} connections made after the drain reached the drained backend",
        to_drained.len(),
        after(&seen)
    );
    // The open stream on the drained backend carries on, byte for byte.
    let data = pattern(4 << 20, 7);
    let back = echo_all(stream, &data);
    assert_eq!(sha256(&back), sha256(&data), "the drained stream's echo");
    let line = a.status_line(backends[0]);
    assert!(line.contains("state=drain"), "{line}");
    let metrics_free_json = a.ok(&["status", "--json"]);
    assert!(
        metrics_free_json.contains("\"admin_state\":\"drain\""),
        "{metrics_free_json}"
    );
    // Enabled again: it takes connections again.
    a.ok(&["backend", "enable", &a.rule(), &backends[0].to_string()]);
    let ids: Vec<u8> = (0..4).map(|_| open(a.port).0).collect();
    assert!(ids.contains(&1), "{ids:?}");
    let (_, stderr) = a.oi.stop();
    assert!(
        stderr.contains("-> state=drain weight=1 (asked by uid "),
        "the change is logged with who asked: {stderr}"
    );
}

#[test]
fn disable_closes_its_connections_once_the_grace_has_passed() {
    let backends = [id_echo_backend(1), id_echo_backend(2)];
    let a = Admin::start(&backends);
    let mut conns: Vec<(u8, TcpStream)> = (0..4).map(|_| open(a.port)).collect();
    let on = |id: u8| conns.iter().filter(|(i, _)| *i == id).count();
    assert_eq!((on(1), on(2)), (2, 2));
    let asked = Instant::now();
    let out = a.ok(&[
        "backend",
        "disable",
        &a.rule(),
        &backends[0].to_string(),
        "--grace",
        "1s",
    ]);
    assert!(out.contains("2 open connections close in 1.000s"), "{out}");
    // Within the grace they still carry bytes.
    for (_, s) in conns.iter_mut().filter(|(id, _)| *id == 1) {
        s.write_all(b"ping").expect("write");
        let mut b = [0u8; 4];
        s.read_exact(&mut b).expect("echo within the grace");
    }
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "the echoes took the whole grace"
    );
    for (id, s) in conns.iter_mut() {
        if *id == 1 {
            wait_until("the disabled backend's connection is closed", || closed(s));
        }
    }
    assert!(
        asked.elapsed() >= Duration::from_secs(1),
        "closed before the grace had passed"
    );
    // The other backend's connections are untouched, and new ones avoid 1.
    for (_, s) in conns.iter_mut().filter(|(id, _)| *id == 2) {
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s.write_all(b"pong").expect("write");
        let mut b = [0u8; 4];
        s.read_exact(&mut b)
            .expect("the other backend's connection is open");
    }
    assert!((0..10).all(|_| open(a.port).0 == 2));
    assert!(a.status_line(backends[0]).contains("state=disabled"));
    // Disabled with no grace: closed at once (its two and a new one),
    // counted in the answer.
    let (_, mut s) = open(a.port);
    let out = a.ok(&["backend", "disable", &a.rule(), &backends[1].to_string()]);
    assert!(out.contains("closed 3 connections"), "{out}");
    wait_until("the connection is closed", || closed(&mut s));
    for (_, s) in conns.iter_mut().filter(|(id, _)| *id == 2) {
        wait_until("backend 2's connection is closed", || closed(s));
    }
    // Every backend out of service: a new connection is refused, not sent
    // to a disabled one.
    let mut s = connect(local(a.port));
    let mut b = [0u8; 1];
    assert!(
        matches!(s.read(&mut b), Ok(0) | Err(_)),
        "a connection reached a disabled backend"
    );
    a.oi.stop();
}

#[test]
fn weight_changes_the_share_of_new_connections() {
    let backends = [id_echo_backend(1), id_echo_backend(2)];
    let a = Admin::start(&backends);
    let out = a.ok(&[
        "backend",
        "weight",
        &a.rule(),
        &backends[0].to_string(),
        "3",
    ]);
    assert!(out.contains("weight=3 (file: 1)"), "{out}");
    let mut counts: HashMap<u8, usize> = HashMap::new();
    for _ in 0..1000 {
        *counts.entry(open(a.port).0).or_default() += 1;
    }
    let heavy = counts.get(&1).copied().unwrap_or(0);
    assert!(
        heavy.abs_diff(750) <= 50,
        "weight 3:1 over 1,000: {counts:?}"
    );
    assert!(a.status_line(backends[0]).contains("weight=3"));
    // Weight 0: no new connections.
    a.ok(&[
        "backend",
        "weight",
        &a.rule(),
        &backends[0].to_string(),
        "0",
    ]);
    assert!((0..20).all(|_| open(a.port).0 == 2));
    // Out of range: refused by the command line.
    let err = a.fails(&[
        "backend",
        "weight",
        &a.rule(),
        &backends[0].to_string(),
        "257",
    ]);
    assert!(err.contains("257"), "{err}");
    a.oi.stop();
}

#[test]
fn unknown_rules_and_backends_are_named_with_what_exists() {
    let backends = [id_echo_backend(1)];
    let a = Admin::start(&backends);
    let near = format!("127.0.0.1:{}/tcpx", a.port);
    let err = a.fails(&["backend", "drain", &near, &backends[0].to_string()]);
    assert!(
        err.contains(&format!("did you mean '{}'", a.rule())),
        "{err}"
    );
    let err = a.fails(&["backend", "drain", "nothing-like-it", "x"]);
    assert!(err.contains(&format!("there are: {}", a.rule())), "{err}");
    let err = a.fails(&["backend", "drain", &a.rule(), "10.9.9.9:1"]);
    assert!(err.contains(&backends[0].to_string()), "{err}");
    a.oi.stop();
}

#[test]
fn close_by_client_closes_exactly_those_connections() {
    let backends = [id_echo_backend(1)];
    let a = Admin::start(&backends);
    let mut conns: Vec<(&str, TcpStream)> = ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.1"]
        .into_iter()
        .map(|from| {
            let mut s = connect_from(from, local(a.port));
            let mut id = [0u8; 1];
            s.read_exact(&mut id).expect("answered");
            (from, s)
        })
        .collect();
    wait_until("four connections listed", || {
        a.ok(&["connections"]).lines().count() == 5
    });
    let out = a.ok(&["close", "--client", "127.0.0.2"]);
    assert_eq!(out.trim(), "closed 2 connections");
    for (from, s) in conns.iter_mut() {
        if *from == "127.0.0.2" {
            wait_until("127.0.0.2's connection is closed", || closed(s));
        }
    }
    for (from, s) in conns.iter_mut().filter(|(f, _)| *f != "127.0.0.2") {
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s.write_all(b"ok").expect("write");
        let mut b = [0u8; 2];
        s.read_exact(&mut b)
            .unwrap_or_else(|e| panic!("{from}'s connection was closed too: {e}"));
    }
    // By id, as `oi connections --json` lists it.
    let listing = a.ok(&["connections", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&listing).expect("json");
    let row = rows
        .as_array()
        .and_then(|r| {
            r.iter().find(|c| {
                c["client"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("127.0.0.3:"))
            })
        })
        .unwrap_or_else(|| panic!("127.0.0.3 in {listing}"))
        .clone();
    let id = row["id"].as_u64().expect("an id").to_string();
    assert_eq!(a.ok(&["close", "--id", &id]).trim(), "closed 1 connection");
    let err = a.fails(&["close", "--id", "999999999"]);
    assert!(err.contains("no live connection has id"), "{err}");
    // A network: 127.0.0.0/8 takes the one left.
    assert_eq!(
        a.ok(&["close", "--client", "127.0.0.0/8"]).trim(),
        "closed 1 connection"
    );
    a.oi.stop();
}

#[test]
fn reload_prints_every_error_as_check_does_and_keeps_serving() {
    let backends = [id_echo_backend(1), id_echo_backend(2)];
    let a = Admin::start(&backends);
    let good = std::fs::read_to_string(&a.conf).expect("read");
    // Broken: an unknown key and a bad port, two errors.
    let broken = good.replace(
        "algorithm: roundrobin",
        "algorithm: roundrobin\n      bogus: 1",
    ) + "  - name: bad\n    bind: 127.0.0.1:99999/tcp\n    connect: 127.0.0.1:1/tcp\n";
    write_atomic(&a.conf, &broken);
    let (ok, out, err) = a.run_on(&a.socket, &["reload"]);
    assert!(!ok, "a broken file's reload exits non-zero: {out}");
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(&a.conf)
        .output()
        .expect("oi --check");
    let check_err = String::from_utf8_lossy(&check.stderr);
    let errors: Vec<&str> = check_err
        .lines()
        .filter(|l| l.contains("oi.yaml:"))
        .collect();
    assert!(!errors.is_empty(), "--check reports errors: {check_err}");
    for line in errors {
        assert!(err.contains(line), "`oi reload` lacks {line:?}:\n{err}");
    }
    assert!(err.contains("configuration invalid (2 errors)"), "{err}");
    assert!(
        err.contains("previous configuration still serving"),
        "{err}"
    );
    // Still serving the old rule.
    assert!([1, 2].contains(&open(a.port).0));
    // Fixed: reloaded, with the rule count.
    let third = id_echo_backend(3);
    let more = yaml(
        a.port,
        &[item(backends[0], 1), item(backends[1], 1), item(third, 1)],
        "algorithm: roundrobin",
    );
    write_atomic(&a.conf, &more);
    assert_eq!(a.ok(&["reload"]).trim(), "reloaded: serving 1 rule(s)");
    a.oi.stop();
}

#[test]
fn admin_state_is_kept_across_a_reload_and_dropped_when_the_backend_leaves_the_file() {
    let backends = [id_echo_backend(1), id_echo_backend(2)];
    let a = Admin::start(&backends);
    a.ok(&["backend", "drain", &a.rule(), &backends[0].to_string()]);
    a.ok(&[
        "backend",
        "weight",
        &a.rule(),
        &backends[1].to_string(),
        "7",
    ]);
    // Reloaded with a third backend: both changes stay.
    let third = id_echo_backend(3);
    let with_third = yaml(
        a.port,
        &[item(backends[0], 1), item(backends[1], 1), item(third, 1)],
        "algorithm: roundrobin",
    );
    write_atomic(&a.conf, &with_third);
    a.ok(&["reload"]);
    assert!(a.status_line(backends[0]).contains("state=drain"));
    assert!(a.status_line(backends[1]).contains("weight=7"));
    assert!((0..12).all(|_| open(a.port).0 != 1));
    // `oi config`: the running file, with the runtime changes as comments.
    let config = a.ok(&["config"]);
    assert!(config.starts_with("# "), "{config}");
    assert!(
        config.contains(&format!("dest: \"{third}/tcp\"")),
        "{config}"
    );
    for changed in [
        format!(
            "#   rule {} backend {}: state=drain\n",
            a.rule(),
            backends[0]
        ),
        format!(
            "#   rule {} backend {}: state=ready weight=7\n",
            a.rule(),
            backends[1]
        ),
    ] {
        assert!(config.contains(&changed), "{changed:?} in:\n{config}");
    }
    // Backend 1 leaves the file, then comes back: ready, as the file says.
    let without = yaml(
        a.port,
        &[item(backends[1], 1), item(third, 1)],
        "algorithm: roundrobin",
    );
    write_atomic(&a.conf, &without);
    a.ok(&["reload"]);
    write_atomic(&a.conf, &with_third);
    a.ok(&["reload"]);
    let line = a.status_line(backends[0]);
    assert!(line.contains("state=ready"), "{line}");
    a.oi.stop();
}

#[test]
fn the_read_only_socket_answers_status_and_refuses_changes() {
    let backends = [id_echo_backend(1)];
    let a = Admin::start(&backends);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("socket").permissions().mode() & 0o777;
    assert_eq!(mode(&a.socket), 0o600);
    assert_eq!(mode(&a.status_socket), 0o660);
    let (ok, out, _) = a.run_on(&a.status_socket, &["status"]);
    assert!(ok && out.contains(&a.rule()), "{out}");
    for read in ["connections", "config"] {
        let (ok, _, err) = a.run_on(&a.status_socket, &[read]);
        assert!(ok, "{read} on the read-only socket: {err}");
    }
    for write in [
        vec!["backend", "drain", &a.rule(), &backends[0].to_string()],
        vec!["close", "--rule", &a.rule()],
        vec!["reload"],
        vec!["upgrade"],
    ] {
        let (ok, _, err) = a.run_on(&a.status_socket, &write);
        assert!(!ok, "{write:?} on the read-only socket");
        assert!(err.contains("read-only"), "{write:?}: {err}");
    }
    // Nothing changed.
    assert!(a.status_line(backends[0]).contains("state=ready"));
    a.oi.stop();
}

#[test]
fn an_upgrade_carries_the_admin_state_and_weights() {
    let backends = [id_echo_backend(1), id_echo_backend(2)];
    let mut a = Admin::start(&backends);
    a.ok(&["backend", "drain", &a.rule(), &backends[0].to_string()]);
    a.ok(&[
        "backend",
        "weight",
        &a.rule(),
        &backends[1].to_string(),
        "9",
    ]);
    let said = a.ok(&["upgrade"]);
    let pid: i32 = said
        .strip_prefix("upgraded: oi pid ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected answer: {said:?}"));
    let _new = crate::upgrade::Adopted(pid);
    a.oi.exited_within(PATIENCE)
        .unwrap_or_else(|| a.oi.fail("the old oi did not exit"));
    // The new oi answers on the control socket, with the state carried.
    let line = a.status_line(backends[0]);
    assert!(line.contains("state=drain"), "{line}");
    let line = a.status_line(backends[1]);
    assert!(line.contains("weight=9"), "{line}");
    assert!((0..8).all(|_| open(a.port).0 == 2));
}

#[test]
fn close_ends_a_udp_association_and_the_next_datagram_opens_a_new_one() {
    let (backend, _) = udp_echo_backend("127.0.0.1:0");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_udp_port();
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!("127.0.0.1 {port}/udp 127.0.0.1 {}/udp\n", backend.port()),
    );
    let socket = dir.path().join("oi.sock");
    let oi = OiProcess::start(
        dir.path(),
        &conf,
        &["--socket", socket.to_str().expect("utf-8")],
    );
    let ask = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .output()
            .expect("run oi");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let u = udp_client(local(port));
    assert_eq!(udp_roundtrip(&u, local(port), b"one"), b"one");
    let states = || -> Vec<String> {
        let rows: serde_json::Value =
            serde_json::from_str(&ask(&["connections", "--json"])).expect("json");
        rows.as_array()
            .map(|r| {
                r.iter()
                    .map(|c| c["state"].as_str().unwrap_or("?").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(states(), ["open"]);
    assert_eq!(
        ask(&["close", "--client", "127.0.0.1"]).trim(),
        "closed 1 connection"
    );
    wait_until("the association has ended", || states() == ["ended"]);
    // Closing again finds nothing left to close.
    assert_eq!(
        ask(&["close", "--client", "127.0.0.1"]).trim(),
        "closed 0 connections"
    );
    assert_eq!(udp_roundtrip(&u, local(port), b"two"), b"two");
    wait_until("a new association is open", || {
        states().contains(&"open".to_string())
    });
    oi.stop();
}

#[test]
fn enabled_within_the_grace_its_connections_stay() {
    let backends = [id_echo_backend(1), id_echo_backend(2)];
    let a = Admin::start(&backends);
    let (mut id, mut s) = open(a.port);
    if id != 1 {
        (id, s) = open(a.port);
    }
    assert_eq!(id, 1);
    let b = backends[0].to_string();
    a.ok(&["backend", "disable", &a.rule(), &b, "--grace", "300ms"]);
    a.ok(&["backend", "enable", &a.rule(), &b]);
    assert!(
        !holds_within(Duration::from_secs(1), || closed(&mut s)),
        "closed by a grace an enable had cancelled"
    );
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(b"still").expect("write");
    let mut back = [0u8; 5];
    s.read_exact(&mut back).expect("the connection is open");
    // A weight change under a disable keeps that disable's grace.
    a.ok(&["backend", "disable", &a.rule(), &b, "--grace", "300ms"]);
    a.ok(&["backend", "weight", &a.rule(), &b, "2"]);
    wait_until("the grace closes the connection", || closed(&mut s));
    a.oi.stop();
}
