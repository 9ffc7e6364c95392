//! `oi close` on the flows that cross protocols, through the real binary:
//! a UDP→TCP association (its stream to the backend closes, the client's
//! next datagram opens a new one) and a TCP→UDP connection (the client's
//! stream closes). Both are counted as closed, none left open.

use crate::common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

/// A TCP echo backend that reports each stream it accepts (numbered from
/// one) on the first channel and each stream's end (EOF or error from
/// oi's side) on the second.
fn reporting_echo_backend() -> (SocketAddr, Receiver<u32>, Receiver<u32>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    let addr = l.local_addr().expect("addr");
    let (opened, opened_rx) = std::sync::mpsc::channel();
    let (ended, ended_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for (n, c) in (1u32..).zip(l.incoming()) {
            let Ok(mut c) = c else { continue };
            let _ = opened.send(n);
            let ended = ended.clone();
            std::thread::spawn(move || {
                let mut b = [0u8; 65_536];
                while let Ok(got) = c.read(&mut b) {
                    if got == 0 || c.write_all(&b[..got]).is_err() {
                        break;
                    }
                }
                let _ = ended.send(n);
            });
        }
    });
    (addr, opened_rx, ended_rx)
}

/// Starts oi on `rules` with a control socket: the process, the socket,
/// and the directory (removed when dropped).
fn start(rules: &str) -> (OiProcess, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, rules);
    let socket = dir.path().join("oi.sock");
    let oi = OiProcess::start(
        dir.path(),
        &conf,
        &["--socket", socket.to_str().expect("utf-8")],
    );
    (oi, socket, dir)
}

/// Runs `oi ARGS --socket SOCKET` and returns its stdout; fails the test
/// with oi's stderr when it fails.
fn ask(oi: &OiProcess, socket: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .expect("run oi");
    if !out.status.success() {
        oi.fail(&format!(
            "oi {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The states of the live entries of `kind` (`udp`, `tcp>udp`).
fn states(oi: &OiProcess, socket: &Path, kind: &str) -> Vec<String> {
    let rows: serde_json::Value =
        serde_json::from_str(&ask(oi, socket, &["connections", "--json"])).expect("json");
    rows.as_array()
        .map(|r| {
            r.iter()
                .filter(|c| c["kind"] == kind)
                .map(|c| c["state"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn close_ends_a_udp_to_tcp_association_and_its_stream() {
    let (backend, opened, ended) = reporting_echo_backend();
    let port = free_udp_port();
    let (oi, socket, _dir) = start(&format!(
        "127.0.0.1 {port}/udp 127.0.0.1 {}\n",
        backend.port()
    ));
    let client = udp_client(local(port));
    assert_eq!(udp_roundtrip(&client, local(port), b"one"), b"one");
    assert_eq!(opened.recv_timeout(PATIENCE), Ok(1), "the first stream");
    assert_eq!(states(&oi, &socket, "udp"), ["open"]);
    let rule = format!("127.0.0.1:{port}/udp");
    let said = ask(
        &oi,
        &socket,
        &["close", "--backend", &rule, &backend.to_string()],
    );
    assert_eq!(said.trim(), "closed 1 connection", "nothing left open");
    // The association's stream closes: the backend reads its end.
    if ended.recv_timeout(PATIENCE) != Ok(1) {
        oi.fail("the backend's stream did not close after oi close");
    }
    wait_until("the association has ended", || {
        states(&oi, &socket, "udp").iter().all(|s| s == "ended")
    });
    // Closing again finds nothing to close.
    let said = ask(&oi, &socket, &["close", "--rule", &rule]);
    assert_eq!(said.trim(), "closed 0 connections");
    // The client's next datagram opens a new association, on a new stream.
    assert_eq!(udp_roundtrip(&client, local(port), b"two"), b"two");
    assert_eq!(opened.recv_timeout(PATIENCE), Ok(2), "a new stream");
    oi.stop();
}

#[test]
fn close_ends_a_tcp_to_udp_connection() {
    let (backend, _datagrams) = udp_echo_backend("127.0.0.1:0");
    let port = free_port();
    let (oi, socket, _dir) = start(&format!(
        "127.0.0.1 {port} 127.0.0.1 {}/udp\n",
        backend.port()
    ));
    let mut c = connect(local(port));
    c.set_read_timeout(Some(PATIENCE)).expect("timeout");
    c.write_all(b"ping").expect("write");
    let mut back = [0u8; 4];
    c.read_exact(&mut back).expect("the datagram's echo");
    assert_eq!(&back, b"ping");
    assert_eq!(states(&oi, &socket, "tcp>udp"), ["open"]);
    let said = ask(&oi, &socket, &["close", "--client", "127.0.0.1"]);
    assert_eq!(said.trim(), "closed 1 connection", "nothing left open");
    // The client's stream ends (EOF, or a reset) well before any idle
    // timeout (the rule's is the default 72 s).
    let mut buf = [0u8; 16];
    match c.read(&mut buf) {
        Ok(0) => {}
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            oi.fail("the client's stream stayed open after oi close")
        }
        Err(_) => {}
        Ok(n) => oi.fail(&format!("read {n} bytes from a closed connection")),
    }
    wait_until("the connection has left the list", || {
        states(&oi, &socket, "tcp>udp").is_empty()
    });
    let said = ask(&oi, &socket, &["close", "--client", "127.0.0.1"]);
    assert_eq!(said.trim(), "closed 0 connections");
    oi.stop();
}
