//! `oi upgrade` and the UDP flows `upgrade_udp` does not cover:
//! a UDP→TCP association keeps its one TCP stream to the backend across
//! the upgrade, the new oi carrying it on; an association under
//! `accept-proxy` keeps forwarding its client's datagrams (each with its
//! PROXY header) whether the new oi takes it or the old one keeps it (the
//! new oi's configuration lacks the rule: the old one serves it to its end).

use super::upgrade::{put_binary, signal_upgrade};
use crate::common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::mpsc::Receiver;

/// A TCP echo backend that reports the source of each connection it
/// accepts (before echoing on it, so an accept is always reported before
/// the first echo it makes).
fn accepting_echo_backend() -> (SocketAddr, Receiver<SocketAddr>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            if let Ok(peer) = c.peer_addr() {
                let _ = tx.send(peer);
            }
            std::thread::spawn(move || {
                let mut b = [0u8; 65_536];
                while let Ok(n) = c.read(&mut b) {
                    if n == 0 || c.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Starts oi from a binary of its own in a fresh directory with `rules`
/// (after a `controlsocket` line); returns the directory, the binary's
/// path, the process and the control socket.
fn start_with(rules: &str) -> (tempfile::TempDir, std::path::PathBuf, OiProcess) {
    let dir = tempfile::Builder::new()
        .prefix("oi-upgk")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let conf = dir.path().join("oi.conf");
    let control = dir.path().join("control.sock");
    std::fs::write(
        &conf,
        format!("controlsocket {}\n{rules}", control.display()),
    )
    .expect("conf");
    let old = OiProcess::start_program(&binary, dir.path(), &conf, &[]);
    (dir, binary, old)
}

#[test]
fn an_upgrade_hands_a_udp_to_tcp_association_with_its_stream_to_the_new_oi() {
    let (backend, accepted) = accepting_echo_backend();
    let u = free_udp_port();
    let rules = format!("127.0.0.1 {u}/udp 127.0.0.1 {}\n", backend.port());
    let (dir, binary, mut old) = start_with(&rules);
    let udp = local(u);
    let client = udp_client(udp);
    assert_eq!(udp_roundtrip(&client, udp, b"before"), b"before");
    let stream = accepted
        .recv_timeout(PATIENCE)
        .expect("the backend accepted the association's stream");
    let new = signal_upgrade(&mut old, &binary);
    wait_until("the old oi says it handed the association over", || {
        old.stderr_tail().contains("handed 1 live connection(s)")
    });
    // Nothing stays with the old oi: it exits at once.
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after handing everything over"));
    assert!(status.success(), "{status}");
    wait_until("the new oi says it took it", || {
        old.stderr_tail()
            .contains("took over 1 of 1 live connection(s)")
    });
    for round in ["after", "again"] {
        let echoed = udp_roundtrip(&client, udp, round.as_bytes());
        assert_eq!(echoed, round.as_bytes(), "{}", old.stderr_tail());
    }
    // An accept is reported before its first echo: had the new oi opened
    // a stream of its own, it would be in the channel now.
    match accepted.try_recv() {
        Err(std::sync::mpsc::TryRecvError::Empty) => {}
        other => panic!(
            "the backend saw another connection ({other:?}) beside {stream}: {}",
            old.stderr_tail()
        ),
    }
    assert!(!new.exited(), "the new oi serves on");
    drop(dir);
}

#[test]
fn a_udp_to_tcp_association_whose_rule_the_new_oi_lacks_runs_on_in_the_old_one_on_its_stream() {
    let (backend, accepted) = accepting_echo_backend();
    let u = free_udp_port();
    // Ends 8 s after its last datagram, so the old oi exits in time.
    let rules = format!(
        "127.0.0.1 {u}/udp 127.0.0.1 {} [timeout=8]\n",
        backend.port()
    );
    let (dir, binary, mut old) = start_with(&rules);
    let udp = local(u);
    let client = udp_client(udp);
    assert_eq!(udp_roundtrip(&client, udp, b"before"), b"before");
    accepted
        .recv_timeout(PATIENCE)
        .expect("the backend accepted");
    let new = upgrade_without_the_rule(&dir, &binary, &mut old);
    wait_until("the old oi says the association stays", || {
        old.stderr_tail()
            .contains("1 UDP association(s) of 127.0.0.1:")
    });
    // Its task started again where it paused, on the same stream.
    assert_eq!(
        udp_roundtrip(&client, udp, b"after"),
        b"after",
        "{}",
        old.stderr_tail()
    );
    assert!(
        matches!(
            accepted.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Empty)
        ),
        "no second stream: {}",
        old.stderr_tail()
    );
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after its association idled out"));
    assert!(status.success(), "{status}");
    assert!(!new.exited(), "the new oi serves on");
}

/// Upgrades `old` to the same oi reading a configuration without its UDP
/// rule (one TCP rule instead), so the old oi keeps the association.
fn upgrade_without_the_rule(
    dir: &tempfile::TempDir,
    binary: &Path,
    old: &mut OiProcess,
) -> super::upgrade::Adopted {
    let b = echo_backend("127.0.0.1:0").port();
    let control = dir.path().join("control.sock");
    std::fs::write(
        dir.path().join("oi.conf"),
        format!(
            "controlsocket {}\n127.0.0.1 {} 127.0.0.1 {b}\n",
            control.display(),
            free_port()
        ),
    )
    .expect("conf");
    signal_upgrade(old, binary)
}

/// oi with one `accept-proxy` UDP rule to a UDP echo backend, and an
/// association opened through it by a proxy on loopback; returns the
/// proxy's socket, the listener and where the backend reports sources.
fn proxied_association(
    options: &str,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    OiProcess,
    std::net::UdpSocket,
    SocketAddr,
    Receiver<(SocketAddr, usize)>,
) {
    let (backend, seen) = udp_echo_backend("127.0.0.1:0");
    let u = free_udp_port();
    let rules = format!(
        "trust-proxy 127.0.0.1\n127.0.0.1 {u}/udp 127.0.0.1 {}/udp [accept-proxy{options}]\n",
        backend.port()
    );
    let (dir, binary, old) = start_with(&rules);
    let udp = local(u);
    let proxy = udp_client(udp);
    assert_eq!(
        udp_roundtrip(&proxy, udp, &query(b"before")),
        b"before",
        "{}",
        old.stderr_tail()
    );
    seen.recv_timeout(PATIENCE).expect("the backend saw it");
    (dir, binary, old, proxy, udp, seen)
}

/// A datagram as the proxy sends it for its client 203.0.113.7:4000.
fn query(payload: &[u8]) -> Vec<u8> {
    super::edge::proxied("203.0.113.7:4000", "198.51.100.1:53", payload)
}

/// One round trip of the proxy's through oi, and the backend's view: the
/// same association's socket as `source`.
fn proxied_echo(
    old: &OiProcess,
    proxy: &std::net::UdpSocket,
    udp: SocketAddr,
    seen: &Receiver<(SocketAddr, usize)>,
    source: SocketAddr,
    round: &str,
) {
    proxy
        .send_to(&query(round.as_bytes()), udp)
        .expect("send datagram");
    let mut buf = vec![0u8; 65_536];
    let got = proxy.recv_from(&mut buf);
    let Ok((n, from)) = got else {
        old.fail(&format!("no reply {round} under accept-proxy: {got:?}"));
    };
    assert_eq!((&buf[..n], from), (round.as_bytes(), udp), "{round}");
    let (from, _) = seen.recv_timeout(PATIENCE).expect("the backend saw it");
    assert_eq!(from, source, "the same association ({round})");
}

#[test]
fn an_accept_proxy_association_carries_on_in_the_new_oi() {
    let (_dir, binary, mut old, proxy, udp, seen) = proxied_association("");
    proxy.send_to(&query(b"where"), udp).expect("send");
    let mut buf = [0u8; 64];
    proxy.recv_from(&mut buf).expect("reply");
    let (source, _) = seen.recv_timeout(PATIENCE).expect("the backend saw it");
    let new = signal_upgrade(&mut old, &binary);
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after handing everything over"));
    assert!(status.success(), "{status}");
    for round in ["after", "again"] {
        proxied_echo(&old, &proxy, udp, &seen, source, round);
    }
    assert!(!new.exited(), "the new oi serves on");
}

#[test]
fn an_accept_proxy_association_whose_rule_the_new_oi_lacks_is_served_on_by_the_old_one() {
    let (dir, binary, mut old, proxy, udp, seen) = proxied_association(",timeout=8");
    proxy.send_to(&query(b"where"), udp).expect("send");
    let mut buf = [0u8; 64];
    proxy.recv_from(&mut buf).expect("reply");
    let (source, _) = seen.recv_timeout(PATIENCE).expect("the backend saw it");
    let new = upgrade_without_the_rule(&dir, &binary, &mut old);
    wait_until("the old oi says it serves the association on", || {
        old.stderr_tail()
            .contains("1 UDP association(s) of 127.0.0.1:")
    });
    for round in ["after", "again"] {
        proxied_echo(&old, &proxy, udp, &seen, source, round);
    }
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after its association idled out"));
    assert!(status.success(), "{status}");
    assert!(!new.exited(), "the new oi serves on");
}
