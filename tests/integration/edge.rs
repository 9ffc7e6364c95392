//! At the edge: the PROXY protocol both ways (sent to backends,
//! accepted from trusted upstreams) and connection limits, through an
//! in-process server. Headers are checked twice: against bytes the test
//! writes itself from the specification, and with oi's own decoder.

use crate::common::*;
use oxidinetd::config::{AclRules, Pattern, PatternKind, Proto, SpliceMode};
use oxidinetd::proxy::{self, Header, Parsed, ProxyVersion, Transport};
use oxidinetd::{LogHandle, Settings, PROXY_HEADER_TIMEOUT};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// What a PROXY-reading backend saw on one connection.
struct Seen {
    /// The header's bytes exactly.
    header: Vec<u8>,
    /// What oi's decoder made of them.
    decoded: Header,
}

/// A TCP backend that expects a PROXY header on every connection, reports
/// it, then echoes whatever follows it (bytes that came with the header first).
fn proxy_backend(bind: &str) -> (SocketAddr, mpsc::Receiver<Seen>) {
    let l = TcpListener::bind(bind).expect("bind backend");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let tx = tx.clone();
            thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (decoded, length) = loop {
                    match proxy::parse(&buf) {
                        Parsed::Complete { header, length, .. } => break (header, length),
                        Parsed::Incomplete => {}
                        Parsed::Invalid(why) => panic!("backend got {buf:?}: {why}"),
                    }
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let _ = tx.send(Seen {
                    header: buf[..length].to_vec(),
                    decoded,
                });
                if c.write_all(&buf[length..]).is_err() {
                    return;
                }
                let (mut r, mut w) = (&c, &c);
                let _ = std::io::copy(&mut r, &mut w);
                let _ = c.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (addr, rx)
}

/// A version 2 header written out by hand (proxy-protocol.txt, 2.2).
fn v2_by_hand(family_protocol: u8, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut b = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    b.push(0x21);
    b.push(family_protocol);
    let octets = |a: SocketAddr| match a.ip() {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    let len: u16 = if src.is_ipv4() { 12 } else { 36 };
    b.extend_from_slice(&len.to_be_bytes());
    b.extend(octets(src));
    b.extend(octets(dst));
    b.extend_from_slice(&src.port().to_be_bytes());
    b.extend_from_slice(&dst.port().to_be_bytes());
    b
}

/// A version 1 header written out by hand (proxy-protocol.txt, 2.1).
fn v1_by_hand(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {} {} {} {}\r\n",
        src.ip(),
        dst.ip(),
        src.port(),
        dst.port()
    )
    .into_bytes()
}

fn settings(splice: SpliceMode) -> Settings {
    Settings {
        splice,
        ..Settings::default()
    }
}

/// A pattern as `allow`/`deny`/`trust-proxy` would hold it: a literal address.
fn pattern(ip: &str) -> Pattern {
    Pattern {
        text: ip.to_string(),
        kind: PatternKind::Wildcard,
    }
}

/// Sends `data` and reads the same number of bytes back.
fn round_trip(s: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    s.write_all(data).expect("send");
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back).expect("echo");
    back
}

/// True when the server closes `s` (EOF or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).expect("timeout");
    let mut b = [0u8; 64];
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
fn send_proxy_gives_the_backend_the_real_client_over_copy_and_splice_v4_and_v6() {
    for backend_bind in ["127.0.0.1:0", "[::1]:0"] {
        let (backend, seen) = proxy_backend(backend_bind);
        for splice in [SpliceMode::Off, SpliceMode::On] {
            for version in [ProxyVersion::V1, ProxyVersion::V2] {
                let srv = start_edited(
                    vec![tcp_rule(backend)],
                    AclRules::default(),
                    settings(splice),
                    LogHandle::disabled(),
                    |_, r| r.with_send_proxy(Some(version)),
                );
                let mut c = connect(srv.addr());
                let client = c.local_addr().expect("client addr");
                // Sent at once: the header must still come first.
                let back = round_trip(&mut c, b"hello, backend");
                assert_eq!(back, b"hello, backend");
                let got = seen.recv_timeout(Duration::from_secs(10)).expect("header");
                let want = match version {
                    ProxyVersion::V1 => v1_by_hand(client, srv.addr()),
                    ProxyVersion::V2 => {
                        let fam = if client.is_ipv4() { 0x11 } else { 0x21 };
                        v2_by_hand(fam, client, srv.addr())
                    }
                };
                let ctx = format!("{backend_bind} {splice:?} {version:?}");
                assert_eq!(got.header, want, "{ctx}");
                assert_eq!(
                    got.decoded,
                    Header::Proxied {
                        source: client,
                        destination: srv.addr(),
                        transport: Transport::Stream
                    },
                    "{ctx}"
                );
                // Bulk after the header still arrives whole.
                let data = pattern_bytes(256 * 1024);
                let mut w = c.try_clone().expect("clone");
                let sent = data.clone();
                let writer = thread::spawn(move || w.write_all(&sent).expect("bulk"));
                let mut back = vec![0u8; data.len()];
                c.read_exact(&mut back).expect("bulk echo");
                writer.join().expect("writer");
                assert!(back == data, "{ctx}: bulk corrupted");
            }
        }
    }
}

fn pattern_bytes(len: usize) -> Vec<u8> {
    crate::common::pattern(len, 14)
}

#[test]
fn accept_proxy_from_a_trusted_source_carries_the_address_onward_and_into_acls_and_the_log() {
    let (backend, seen) = proxy_backend("127.0.0.1:0");
    for splice in [SpliceMode::Off, SpliceMode::On] {
        let (_dir, path, log) = tab_log();
        let global = AclRules {
            allow: vec![],
            deny: vec![pattern("203.0.113.66")],
            trust_proxy: vec![],
        };
        let srv = start_edited(
            vec![tcp_rule(backend)],
            global,
            settings(splice),
            log,
            |_, r| {
                r.with_accept_proxy(true, vec![pattern("127.0.0.1")])
                    .with_send_proxy(Some(ProxyVersion::V1))
            },
        );
        let mut c = connect(srv.addr());
        // Header and data in one write: the data must not be lost (peeked,
        // not swallowed), and must be forwarded after the new header.
        c.write_all(b"PROXY TCP4 203.0.113.7 198.51.100.1 4000 443\r\nfirst bytes")
            .expect("send");
        let mut back = [0u8; 11];
        c.read_exact(&mut back).expect("echo");
        assert_eq!(&back, b"first bytes", "{splice:?}");
        let got = seen.recv_timeout(Duration::from_secs(10)).expect("header");
        assert_eq!(
            got.header, b"PROXY TCP4 203.0.113.7 198.51.100.1 4000 443\r\n",
            "{splice:?}: the carried addresses are sent on"
        );
        assert_eq!(round_trip(&mut c, b"more"), b"more");
        drop(c);

        // A v2 header from the same trusted source, carrying a denied client.
        let mut d = connect(srv.addr());
        let carried: SocketAddr = "203.0.113.66:5000".parse().expect("literal");
        d.write_all(&v2_by_hand(
            0x11,
            carried,
            "198.51.100.1:443".parse().expect("literal"),
        ))
        .expect("send");
        assert!(closed_within(&mut d, Duration::from_secs(10)), "denied");
        let text = wait_for_file(&path, |t| t.contains("denied") && t.contains("done-"));
        assert!(
            text.lines()
                .any(|l| l.contains("203.0.113.7") && l.contains("opened")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.contains("203.0.113.66") && l.ends_with("denied")),
            "{text}"
        );
        assert!(
            text.lines()
                .all(|l| l.split('\t').nth(1) != Some("127.0.0.1")),
            "the real peer is never logged as the client: {text}"
        );
    }
}

#[test]
fn a_header_that_trickles_in_within_the_timeout_is_honoured() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start_edited(
        vec![tcp_rule(backend)],
        AclRules::default(),
        settings(SpliceMode::On),
        LogHandle::disabled(),
        |_, r| r.with_accept_proxy(true, vec![pattern("127.0.0.1")]),
    );
    let mut c = connect(srv.addr());
    c.set_nodelay(true).expect("nodelay");
    let header = v2_by_hand(
        0x11,
        "192.0.2.1:1".parse().expect("literal"),
        "192.0.2.2:2".parse().expect("literal"),
    );
    for byte in &header {
        c.write_all(&[*byte]).expect("byte");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(round_trip(&mut c, b"after"), b"after");
}

#[test]
fn accept_proxy_refuses_an_untrusted_source_and_logs_it() {
    let backend = echo_backend("127.0.0.1:0");
    let (_dir, path, log) = tab_log();
    let srv = start_edited(
        vec![tcp_rule(backend)],
        AclRules::default(),
        Settings::default(),
        log,
        |_, r| r.with_accept_proxy(true, vec![pattern("127.0.0.1")]),
    );
    let mut c = connect_from("127.0.0.2", srv.addr());
    let _ = c.write_all(b"PROXY TCP4 203.0.113.7 198.51.100.1 4000 443\r\nhi");
    assert!(closed_within(&mut c, Duration::from_secs(10)));
    let text = wait_for_file(&path, |t| t.contains("proxy-untrusted"));
    let line = text
        .lines()
        .find(|l| l.ends_with("proxy-untrusted"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("127.0.0.2"),
        "the real, untrusted peer: {line}"
    );
    // The trusted one still works.
    let mut t = connect(srv.addr());
    t.write_all(b"PROXY UNKNOWN\r\n").expect("send");
    assert_eq!(round_trip(&mut t, b"ok"), b"ok");
}

#[test]
fn malformed_oversized_and_slow_headers_close_only_their_own_connection() {
    let backend = echo_backend("127.0.0.1:0");
    let (_dir, path, log) = tab_log();
    let srv = start_edited(
        vec![tcp_rule(backend)],
        AclRules::default(),
        Settings::default(),
        log,
        |_, r| r.with_accept_proxy(true, vec![pattern("127.0.0.1")]),
    );
    let started = Instant::now();
    let mut slow = connect(srv.addr());
    slow.write_all(b"PROXY TCP4 192.0.2.1 ")
        .expect("partial header");

    let mut bad = connect(srv.addr());
    bad.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("send");
    assert!(
        closed_within(&mut bad, Duration::from_secs(3)),
        "malformed: closed at once"
    );
    let mut big = connect(srv.addr());
    big.write_all(b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff")
        .expect("send");
    assert!(
        closed_within(&mut big, Duration::from_secs(3)),
        "oversized: closed at once"
    );

    // Meanwhile a good connection works, while the slow one still waits.
    let mut good = connect(srv.addr());
    good.write_all(b"PROXY TCP4 192.0.2.9 192.0.2.2 1 2\r\n")
        .expect("send");
    assert_eq!(round_trip(&mut good, b"fine"), b"fine");
    assert!(started.elapsed() < PROXY_HEADER_TIMEOUT);

    assert!(
        closed_within(&mut slow, PROXY_HEADER_TIMEOUT + Duration::from_secs(5)),
        "slow header closed at the timeout"
    );
    let waited = started.elapsed();
    assert!(
        waited >= PROXY_HEADER_TIMEOUT - Duration::from_millis(100),
        "closed after {waited:?}, before the timeout"
    );
    let text = wait_for_file(&path, |t| t.matches("proxy-header-failed").count() >= 3);
    assert_eq!(text.matches("proxy-header-failed").count(), 3, "{text}");
    assert!(text.contains("192.0.2.9"), "{text}");
    assert_eq!(srv.shared.connections_refused_by_limits(), 0);
    wait_until("every connection closed", || srv.open_connections() <= 1);
}

#[test]
fn rule_maxconn_refuses_logs_counts_and_releases() {
    let backend = echo_backend("127.0.0.1:0");
    let (_dir, path, log) = tab_log();
    let srv = start_edited(
        vec![tcp_rule(backend)],
        AclRules::default(),
        Settings::default(),
        log,
        |_, r| r.with_limits(Some(2), None),
    );
    let mut a = connect(srv.addr());
    assert_eq!(round_trip(&mut a, b"a"), b"a");
    let mut b = connect(srv.addr());
    assert_eq!(round_trip(&mut b, b"b"), b"b");
    let mut c = connect(srv.addr());
    assert!(
        closed_within(&mut c, Duration::from_secs(10)),
        "third refused"
    );
    assert_eq!(srv.shared.connections_refused_by_limits(), 1);
    let text = wait_for_file(&path, |t| t.contains("limit-reached"));
    assert_eq!(text.matches("limit-reached").count(), 1, "{text}");
    drop(a);
    wait_until("a slot released", || {
        srv.shared.limited_connections_open() == 1
    });
    let mut d = connect(srv.addr());
    assert_eq!(round_trip(&mut d, b"d"), b"d");
    drop((b, d));
    wait_until("every slot released", || {
        srv.shared.limited_connections_open() == 0
    });
}

#[test]
fn per_client_limit_counts_each_address_and_forgets_it_at_zero() {
    let backend = echo_backend("127.0.0.1:0");
    let (_dir, path, log) = tab_log();
    let srv = start_edited(
        vec![tcp_rule(backend)],
        AclRules::default(),
        Settings::default(),
        log,
        |_, r| r.with_limits(None, Some(1)),
    );
    let mut one = connect_from("127.0.0.1", srv.addr());
    assert_eq!(round_trip(&mut one, b"1"), b"1");
    let mut again = connect_from("127.0.0.1", srv.addr());
    assert!(closed_within(&mut again, Duration::from_secs(10)));
    let mut other = connect_from("127.0.0.2", srv.addr());
    assert_eq!(round_trip(&mut other, b"2"), b"2");
    let text = wait_for_file(&path, |t| t.contains("limit-reached"));
    let line = text
        .lines()
        .find(|l| l.ends_with("limit-reached"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("127.0.0.1"), "{line}");
    assert_eq!(srv.shared.connections_refused_by_limits(), 1);
    drop(one);
    wait_until("released", || srv.shared.limited_connections_open() == 1);
    let mut back = connect_from("127.0.0.1", srv.addr());
    assert_eq!(round_trip(&mut back, b"3"), b"3");
}

#[test]
fn per_client_limit_counts_the_address_a_proxy_header_carried() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start_edited(
        vec![tcp_rule(backend)],
        AclRules::default(),
        Settings::default(),
        LogHandle::disabled(),
        |_, r| {
            r.with_accept_proxy(true, vec![pattern("127.0.0.1")])
                .with_limits(None, Some(1))
        },
    );
    let from = |client: &str| {
        let mut s = connect(srv.addr());
        s.write_all(format!("PROXY TCP4 {client} 192.0.2.2 1000 443\r\n").as_bytes())
            .expect("header");
        s
    };
    let mut a = from("192.0.2.10");
    assert_eq!(round_trip(&mut a, b"a"), b"a");
    let mut b = from("192.0.2.11");
    assert_eq!(
        round_trip(&mut b, b"b"),
        b"b",
        "same real peer, other client"
    );
    let mut c = from("192.0.2.10");
    assert!(closed_within(&mut c, Duration::from_secs(10)));
    assert_eq!(srv.shared.connections_refused_by_limits(), 1);
}

#[test]
fn the_global_maxconn_spans_rules_and_follows_its_setting() {
    let backend = echo_backend("127.0.0.1:0");
    let (_dir, path, log) = tab_log();
    let srv = start(
        vec![tcp_rule(backend), tcp_rule(backend)],
        Settings::default(),
        log,
    );
    srv.shared.set_max_connections(Some(1));
    let mut a = connect(srv.addrs[0]);
    assert_eq!(round_trip(&mut a, b"a"), b"a");
    let mut b = connect(srv.addrs[1]);
    assert!(
        closed_within(&mut b, Duration::from_secs(10)),
        "over the global limit"
    );
    wait_for_file(&path, |t| t.contains("limit-reached"));
    srv.shared.set_max_connections(None);
    let mut c = connect(srv.addrs[1]);
    assert_eq!(round_trip(&mut c, b"c"), b"c", "no limit any more");
    assert_eq!(srv.shared.connections_refused_by_limits(), 1);
    assert_eq!(srv.shared.max_connections(), None);
}

/// The UDP backend's view of one datagram: the header, then the payload.
fn split_datagram(d: &[u8]) -> (Vec<u8>, Header, Vec<u8>) {
    match proxy::parse(d) {
        Parsed::Complete { header, length, .. } => {
            (d[..length].to_vec(), header, d[length..].to_vec())
        }
        other => panic!("datagram {d:?}: {other:?}"),
    }
}

#[test]
fn udp_datagrams_carry_a_v2_header_each_v4_and_v6() {
    for bind in ["127.0.0.1:0", "[::1]:0"] {
        let backend = UdpSocket::bind(bind).expect("bind backend");
        backend
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let baddr = backend.local_addr().expect("addr");
        let srv = start_edited(
            vec![udp_rule(baddr, Proto::Udp)],
            AclRules::default(),
            Settings::default(),
            LogHandle::disabled(),
            |_, r| r.with_send_proxy(Some(ProxyVersion::V1)),
        );
        let client = udp_client(srv.addr());
        let caddr = client.local_addr().expect("client addr");
        let fam = if caddr.is_ipv4() { 0x12 } else { 0x22 };
        for payload in [&b"first"[..], b"second datagram"] {
            client.send_to(payload, srv.addr()).expect("send");
            let mut buf = [0u8; 2048];
            let (n, from) = backend
                .recv_from(&mut buf)
                .expect("datagram at the backend");
            let (header, decoded, rest) = split_datagram(&buf[..n]);
            assert_eq!(
                header,
                v2_by_hand(fam, caddr, srv.addr()),
                "{bind}: v2 always"
            );
            assert_eq!(
                decoded,
                Header::Proxied {
                    source: caddr,
                    destination: srv.addr(),
                    transport: Transport::Datagram
                }
            );
            assert_eq!(rest, payload);
            // Replies go back without a header.
            backend.send_to(b"reply", from).expect("reply");
            let mut r = [0u8; 64];
            let (n, _) = client.recv_from(&mut r).expect("reply at the client");
            assert_eq!(&r[..n], b"reply");
        }
    }
}

#[test]
fn udp_to_tcp_streams_start_with_one_v2_header() {
    let (backend, seen) = proxy_backend("127.0.0.1:0");
    let srv = start_edited(
        vec![udp_rule(backend, Proto::Tcp)],
        AclRules::default(),
        Settings::default(),
        LogHandle::disabled(),
        |_, r| r.with_send_proxy(Some(ProxyVersion::V2)),
    );
    let client = udp_client(srv.addr());
    let caddr = client.local_addr().expect("client addr");
    assert_eq!(udp_roundtrip(&client, srv.addr(), b"one"), b"one");
    assert_eq!(udp_roundtrip(&client, srv.addr(), b"two"), b"two");
    let got = seen.recv_timeout(Duration::from_secs(10)).expect("header");
    assert_eq!(got.header, v2_by_hand(0x12, caddr, srv.addr()));
    assert!(
        seen.recv_timeout(Duration::from_millis(200)).is_err(),
        "one stream, one header"
    );
}

/// A UDP socket on `at` (a loopback address, port 0) with a receive timeout.
fn udp_on(at: &str) -> UdpSocket {
    let s = UdpSocket::bind(at).expect("bind UDP socket");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

/// The next datagram `s` receives, and where it came from.
fn recv(s: &UdpSocket) -> (Vec<u8>, SocketAddr) {
    let mut buf = vec![0u8; 65_536];
    let (n, from) = s.recv_from(&mut buf).expect("a datagram");
    buf.truncate(n);
    (buf, from)
}

#[test]
fn tcp_to_udp_with_proxy_v2_prefixes_every_datagram_v4_and_v6() {
    for bind in ["127.0.0.1:0", "[::1]:0"] {
        let backend = udp_on(bind);
        let baddr = backend.local_addr().expect("addr");
        let srv = start_edited(
            vec![rule(loopback_for(baddr), Proto::Tcp, baddr, Proto::Udp)],
            AclRules::default(),
            Settings::default(),
            LogHandle::disabled(),
            |_, r| r.with_send_proxy(Some(ProxyVersion::V2)),
        );
        let mut c = connect(srv.addr());
        let caddr = c.local_addr().expect("client addr");
        // proxy-protocol.txt 2.2: 0x12 is UDP over IPv4, 0x22 UDP over IPv6;
        // the destination is the address the client connected to.
        let fam = if caddr.is_ipv4() { 0x12 } else { 0x22 };
        let want_header = v2_by_hand(fam, caddr, srv.addr());
        for payload in [&b"first read"[..], b"second read"] {
            c.write_all(payload).expect("send");
            let (d, from) = recv(&backend);
            let (header, decoded, rest) = split_datagram(&d);
            assert_eq!(header, want_header, "{bind}: every datagram, byte for byte");
            assert_eq!(
                decoded,
                Header::Proxied {
                    source: caddr,
                    destination: srv.addr(),
                    transport: Transport::Datagram
                }
            );
            assert_eq!(rest, payload, "{bind}: the payload follows the header");
            // Replies reach the client without a header.
            backend.send_to(b"reply", from).expect("reply");
            let mut r = [0u8; 5];
            c.read_exact(&mut r).expect("reply on the stream");
            assert_eq!(&r, b"reply");
        }
    }
}

#[test]
fn tcp_to_udp_sends_on_the_addresses_an_accepted_header_carried() {
    let backend = udp_on("127.0.0.1:0");
    let baddr = backend.local_addr().expect("addr");
    let srv = start_edited(
        vec![rule(loopback_for(baddr), Proto::Tcp, baddr, Proto::Udp)],
        AclRules::default(),
        Settings::default(),
        LogHandle::disabled(),
        |_, r| {
            r.with_accept_proxy(true, vec![pattern("127.0.0.1")])
                .with_send_proxy(Some(ProxyVersion::V2))
        },
    );
    let mut c = connect(srv.addr());
    c.write_all(b"PROXY TCP4 203.0.113.7 198.51.100.1 4000 443\r\nhello")
        .expect("send");
    let (d, _) = recv(&backend);
    let mut want = v2_by_hand(
        0x12,
        "203.0.113.7:4000".parse().expect("literal"),
        "198.51.100.1:443".parse().expect("literal"),
    );
    want.extend_from_slice(b"hello");
    assert_eq!(d, want);
}

/// A version 2 `PROXY` header over UDP (0x12, IPv4) from `src` to `dst`,
/// followed by `payload`: one datagram as an upstream proxy sends it.
pub(super) fn proxied(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    let mut d = v2_by_hand(
        0x12,
        src.parse().expect("literal"),
        dst.parse().expect("literal"),
    );
    d.extend_from_slice(payload);
    d
}

#[test]
fn udp_accept_proxy_strips_the_header_and_the_carried_client_is_the_client() {
    let backend = udp_on("127.0.0.1:0");
    let baddr = backend.local_addr().expect("addr");
    let (_dir, path, log) = tab_log();
    let global = AclRules {
        allow: vec![],
        deny: vec![pattern("203.0.113.66")],
        trust_proxy: vec![],
    };
    let srv = start_edited(
        vec![udp_rule(baddr, Proto::Udp)],
        global,
        Settings::default(),
        log,
        |_, r| r.with_accept_proxy(true, vec![pattern("127.0.0.1")]),
    );
    let proxy = udp_on("127.0.0.1:0");
    let dst = "198.51.100.1:53";

    // A trusted source with a valid header: the backend sees the payload only.
    proxy
        .send_to(&proxied("203.0.113.7:4000", dst, b"query"), srv.addr())
        .expect("send");
    let (d, assoc) = recv(&backend);
    assert_eq!(d, b"query", "the header is stripped");
    // The reply goes back to the real peer, as the backend sent it.
    backend.send_to(b"answer", assoc).expect("reply");
    let (r, from) = recv(&proxy);
    assert_eq!((r.as_slice(), from), (&b"answer"[..], srv.addr()));
    // The same association carries the next datagram, header stripped again.
    proxy
        .send_to(&proxied("203.0.113.7:4000", dst, b"again"), srv.addr())
        .expect("send");
    assert_eq!(recv(&backend), (b"again".to_vec(), assoc));

    // A header carrying a denied client: refused, logged with that client.
    let denied = udp_on("127.0.0.1:0");
    denied
        .send_to(&proxied("203.0.113.66:5000", dst, b"nope"), srv.addr())
        .expect("send");
    let text = wait_for_file(&path, |t| t.contains("denied"));
    assert!(
        text.lines()
            .any(|l| l.contains("203.0.113.66") && l.ends_with("denied")),
        "{text}"
    );
    // Datagrams are handled in order: had the denied one been forwarded,
    // the backend would see it before this one.
    proxy
        .send_to(&proxied("203.0.113.7:4000", dst, b"after"), srv.addr())
        .expect("send");
    assert_eq!(recv(&backend), (b"after".to_vec(), assoc));

    let text = wait_for_file(&path, |t| t.contains("opened"));
    let opened = text
        .lines()
        .find(|l| l.ends_with("opened"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(opened.split('\t').nth(1), Some("203.0.113.7"), "{opened}");
    assert!(
        text.lines()
            .all(|l| l.split('\t').nth(1) != Some("127.0.0.1")),
        "the real peer is never logged as the client: {text}"
    );
    // So do the live connections list and the statistics.
    let live = srv.shared.stats.connections();
    assert!(
        live.iter()
            .any(|c| c.client == oxidinetd::Peer::Ip("203.0.113.7:4000".parse().expect("literal"))),
        "{live:?}"
    );

    // The proxy's port now speaks for another client: a new association
    // (a new backend socket), the old one ended and logged.
    proxy
        .send_to(&proxied("203.0.113.8:4001", dst, b"other"), srv.addr())
        .expect("send");
    let (d, other) = recv(&backend);
    assert_eq!(d, b"other");
    assert_ne!(other, assoc, "its own association");
    let text = wait_for_file(&path, |t| t.contains("203.0.113.8"));
    assert!(
        text.lines()
            .any(|l| l.contains("203.0.113.7") && l.ends_with("done-local-closed")),
        "{text}"
    );
    assert_eq!(srv.shared.udp_proxy_datagrams_dropped(), 0);
}

#[test]
fn udp_accept_proxy_drops_untrusted_and_malformed_datagrams_and_keeps_serving() {
    let backend = udp_on("127.0.0.1:0");
    let baddr = backend.local_addr().expect("addr");
    let srv = start_edited(
        vec![udp_rule(baddr, Proto::Udp)],
        AclRules::default(),
        Settings::default(),
        LogHandle::disabled(),
        |_, r| r.with_accept_proxy(true, vec![pattern("127.0.0.1")]),
    );
    let dst = "198.51.100.1:53";
    let good = proxied("203.0.113.7:4000", dst, b"ok");

    // A valid header from a source no trust-proxy pattern matches.
    let untrusted = udp_on("127.0.0.2:0");
    untrusted.send_to(&good, srv.addr()).expect("send");
    wait_until("the untrusted datagram is counted", || {
        srv.shared.udp_proxy_datagrams_dropped() == 1
    });

    // From the trusted source, nothing that is a whole v2 datagram header.
    let trusted = udp_on("127.0.0.1:0");
    let mut stream_header = v2_by_hand(
        0x11,
        "203.0.113.7:4000".parse().expect("literal"),
        dst.parse().expect("literal"),
    );
    stream_header.extend_from_slice(b"tcp?");
    let malformed: [&[u8]; 6] = [
        b"no header at all",
        b"",
        &good[..20],
        b"PROXY TCP4 203.0.113.7 198.51.100.1 4000 53\r\nv1",
        &stream_header,
        // Announces 0xffff bytes after the fixed part: more than any header.
        b"\r\n\r\n\0\r\nQUIT\n\x21\x12\xff\xff",
    ];
    for (i, d) in malformed.iter().enumerate() {
        trusted.send_to(d, srv.addr()).expect("send");
        wait_until("the malformed datagram is counted", || {
            srv.shared.udp_proxy_datagrams_dropped() == 2 + i as u64
        });
    }
    assert_eq!(
        srv.shared.stats.connections().len(),
        0,
        "no association was created"
    );

    // The listener keeps serving: the trusted source's valid datagram is
    // the first the backend ever sees.
    trusted.send_to(&good, srv.addr()).expect("send");
    let (d, assoc) = recv(&backend);
    assert_eq!(d, b"ok");
    // A malformed datagram on a live association is dropped too, and the
    // association carries on.
    trusted.send_to(b"junk", srv.addr()).expect("send");
    trusted
        .send_to(&proxied("203.0.113.7:4000", dst, b"still"), srv.addr())
        .expect("send");
    assert_eq!(recv(&backend), (b"still".to_vec(), assoc));
    assert_eq!(srv.shared.udp_proxy_datagrams_dropped(), 8);

    // A LOCAL header (the proxy's own health check): stripped, and the real
    // peer is the client.
    let checker = udp_on("127.0.0.1:0");
    let mut d = proxy::encode_v2_local().as_bytes().to_vec();
    d.extend_from_slice(b"health");
    checker.send_to(&d, srv.addr()).expect("send");
    assert_eq!(recv(&backend).0, b"health");
    let me = checker.local_addr().expect("addr");
    assert!(
        srv.shared
            .stats
            .connections()
            .iter()
            .any(|c| c.client == oxidinetd::Peer::Ip(me)),
        "listed under its real address"
    );
}
