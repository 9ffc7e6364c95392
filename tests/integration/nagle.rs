//! Small messages to a backend are never held by Nagle's algorithm: oi's
//! socket to the backend has TCP_NODELAY by the time it writes a second
//! time. It is dialled without it and the pump sets it just before that
//! second write (a connection that sends its backend one request saves the
//! setsockopt; Linux never holds a connection's first write, nothing being
//! unacknowledged before it). These tests read the option off oi's own
//! socket: the server runs in the test's process, and `pidfd_getfd` lends
//! the test a duplicate of the descriptor.

use crate::common::*;
use oxidinetd::config::{AclRules, SpliceMode};
use oxidinetd::proxy::ProxyVersion;
use oxidinetd::{LogHandle, Settings};
use rustix::process::{getpid, pidfd_getfd, pidfd_open, PidfdFlags, PidfdGetfdFlags};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A stalled forwarder fails the test instead of hanging it.
const STALL: Duration = Duration::from_secs(30);

/// The socket of this process connected from `local` to `peer`, duplicated:
/// oi's socket to the backend, found by the two addresses.
fn socket_between(local: SocketAddr, peer: SocketAddr) -> socket2::Socket {
    let me = pidfd_open(getpid(), PidfdFlags::empty()).expect("pidfd_open of this process");
    let fds = std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd");
    for entry in fds.flatten() {
        let Some(n) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // Another test's descriptor may close meanwhile: skipped.
        let Ok(fd) = pidfd_getfd(&me, n, PidfdGetfdFlags::empty()) else {
            continue;
        };
        let s = socket2::Socket::from(fd);
        let addr = |a: std::io::Result<socket2::SockAddr>| a.ok().and_then(|a| a.as_socket());
        if addr(s.local_addr()) == Some(local) && addr(s.peer_addr()) == Some(peer) {
            return s;
        }
    }
    panic!("no socket from {local} to {peer} among this process's descriptors")
}

/// Sends `msg` from the client and reads it whole at the backend.
fn through(client: &mut TcpStream, backend: &mut TcpStream, msg: &[u8]) {
    client.write_all(msg).expect("client write");
    let mut got = vec![0u8; msg.len()];
    backend
        .read_exact(&mut got)
        .expect("the message reaches the backend");
    assert_eq!(got, msg);
}

/// A client connected through `srv` to `listener`, and the backend's end.
fn connection(srv: &TestServer, listener: &TcpListener) -> (TcpStream, TcpStream) {
    let client = connect(srv.addr());
    let (backend, _) = listener.accept().expect("the backend accepts");
    backend.set_read_timeout(Some(STALL)).expect("timeout");
    (client, backend)
}

#[test]
fn the_backend_socket_has_nodelay_before_its_second_write_copying_and_splicing() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("backend");
    let backend_addr = listener.local_addr().expect("backend addr");
    for splice in [SpliceMode::Off, SpliceMode::On] {
        let settings = Settings {
            splice,
            ..Settings::default()
        };
        let srv = start(
            vec![tcp_rule(backend_addr)],
            settings,
            LogHandle::disabled(),
        );
        let (mut client, mut backend) = connection(&srv, &listener);
        let oi_side = backend.peer_addr().expect("oi's end");
        through(&mut client, &mut backend, b"first request");
        let socket = socket_between(oi_side, backend_addr);
        assert!(
            !socket.tcp_nodelay().expect("TCP_NODELAY"),
            "{splice:?}: one write, and TCP_NODELAY already set: the setsockopt was not saved"
        );
        through(&mut client, &mut backend, b"second");
        assert!(
            socket.tcp_nodelay().expect("TCP_NODELAY"),
            "{splice:?}: a second write to the backend went out with Nagle on"
        );
        // A bulk burst (spliced when splicing) and small ones after it all arrive.
        through(&mut client, &mut backend, &pattern(300_000, 7));
        through(&mut client, &mut backend, b"x");
    }
}

#[test]
fn a_backend_that_gets_a_proxy_header_has_nodelay_from_the_start() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("backend");
    let backend_addr = listener.local_addr().expect("backend addr");
    let srv = start_edited(
        vec![tcp_rule(backend_addr)],
        AclRules::default(),
        Settings::default(),
        LogHandle::disabled(),
        |_, r| r.with_send_proxy(Some(ProxyVersion::V2)),
    );
    let (mut client, mut backend) = connection(&srv, &listener);
    let oi_side = backend.peer_addr().expect("oi's end");
    // The header (28 bytes for IPv4) is the first write, the client's the second.
    client.write_all(b"hi").expect("client write");
    let mut got = [0u8; 30];
    backend.read_exact(&mut got).expect("header and message");
    assert_eq!(&got[28..], b"hi");
    let socket = socket_between(oi_side, backend_addr);
    assert!(
        socket.tcp_nodelay().expect("TCP_NODELAY"),
        "the client's bytes followed the PROXY header with Nagle on"
    );
}
