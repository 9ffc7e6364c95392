//! Bytes go through oi exactly, in both directions, with half-close honoured.

use crate::common::*;
use oxidinetd::LogHandle;
use oxidinetd::Settings;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::thread;

#[test]
fn small_transfer_round_trips() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    assert_eq!(
        echo_through(srv.addr(), b"hello, oi".to_vec()),
        b"hello, oi"
    );
}

#[test]
fn sixty_four_concurrent_connections_round_trip_exactly() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let addr = srv.addr();
    let clients: Vec<_> = (0..64u64)
        .map(|i| {
            thread::spawn(move || {
                let data = pattern(1024 * 1024 + i as usize * 997, i);
                let want = sha256(&data);
                let back = echo_through(addr, data);
                assert_eq!(sha256(&back), want, "connection {i}");
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
}

#[test]
fn large_transfers_both_directions_sha256() {
    // 64 MiB up and 64 MiB down at the same time, on two connections at once.
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let addr = srv.addr();
    let clients: Vec<_> = (0..2u64)
        .map(|i| {
            thread::spawn(move || {
                let data = pattern(64 * 1024 * 1024, 100 + i);
                let want = sha256(&data);
                let back = echo_through(addr, data);
                assert_eq!(back.len(), 64 * 1024 * 1024);
                assert_eq!(sha256(&back), want);
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
}

#[test]
fn client_half_close_still_gets_the_whole_reply() {
    // The backend reads the request to EOF, then answers and closes: rinetd loses this reply.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = l.local_addr().expect("addr");
    let server = thread::spawn(move || {
        let (mut c, _) = l.accept().expect("accept");
        let mut req = Vec::new();
        c.read_to_end(&mut req).expect("read request");
        let reply = pattern(3 * 1024 * 1024, 7);
        c.write_all(&reply).expect("reply");
        req
    });
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let mut s = connect(srv.addr());
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("send");
    s.shutdown(Shutdown::Write).expect("half-close");
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).expect("reply");
    assert_eq!(sha256(&reply), sha256(&pattern(3 * 1024 * 1024, 7)));
    assert_eq!(server.join().expect("backend"), b"GET / HTTP/1.0\r\n\r\n");
}

#[test]
fn backend_half_close_still_receives_the_client() {
    // The backend speaks first and shuts down its write side; the client then uploads.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = l.local_addr().expect("addr");
    let server = thread::spawn(move || {
        let (mut c, _) = l.accept().expect("accept");
        c.write_all(b"banner\n").expect("banner");
        c.shutdown(Shutdown::Write).expect("half-close");
        let mut upload = Vec::new();
        c.read_to_end(&mut upload).expect("read upload");
        upload
    });
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let mut s = connect(srv.addr());
    let mut banner = Vec::new();
    s.read_to_end(&mut banner).expect("banner until EOF");
    assert_eq!(banner, b"banner\n");
    let upload = pattern(2 * 1024 * 1024, 9);
    s.write_all(&upload).expect("upload");
    s.shutdown(Shutdown::Write).expect("close");
    assert_eq!(sha256(&server.join().expect("backend")), sha256(&upload));
}

#[test]
fn ipv6_listener_to_ipv4_backend_and_back() {
    let v4_backend = echo_backend("127.0.0.1:0");
    let v6_backend = echo_backend("[::1]:0");
    let r1 = rule(
        "[::1]:0".parse().expect("addr"),
        oxidinetd::config::Proto::Tcp,
        v4_backend,
        oxidinetd::config::Proto::Tcp,
    );
    let r2 = rule(
        "127.0.0.1:0".parse().expect("addr"),
        oxidinetd::config::Proto::Tcp,
        v6_backend,
        oxidinetd::config::Proto::Tcp,
    );
    let srv = start(vec![r1, r2], Settings::default(), LogHandle::disabled());
    assert!(srv.addrs[0].is_ipv6() && srv.addrs[1].is_ipv4());
    assert_eq!(
        echo_through(srv.addrs[0], b"six to four".to_vec()),
        b"six to four"
    );
    assert_eq!(
        echo_through(srv.addrs[1], b"four to six".to_vec()),
        b"four to six"
    );
}

#[test]
fn long_lived_connections_are_spread_over_the_executor_threads() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    // A burst, as iperf3 -P8 opens its streams: all eight wait in the accept
    // queue together, and the thread that wakes first would take them all.
    // Each is then proven by an echo, so it has been accepted and placed.
    let mut held: Vec<_> = (0..8u8).map(|_| connect(srv.addr())).collect();
    for (i, c) in held.iter_mut().enumerate() {
        c.write_all(&[i as u8]).expect("write");
        let mut b = [0u8; 1];
        c.read_exact(&mut b).expect("echo");
        assert_eq!(b, [i as u8]);
    }
    let (a, b) = (srv.runtime.open_on(0), srv.runtime.open_on(1));
    assert_eq!(a + b, 8, "every connection is counted on one thread");
    assert!(
        a.abs_diff(b) <= oxidinetd::SLACK + 1,
        "connections piled on one thread: {a} and {b}"
    );
    drop(held);
}
