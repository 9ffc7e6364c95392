//! UDP forwarding through an in-process server: associations, expiry, large
//! datagrams and the two cross-protocol directions.

use crate::common::*;
use oxidinetd::config::Proto;
use oxidinetd::LogHandle;
use oxidinetd::Settings;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The source address of the next datagram the backend reports, within 5 s.
fn next_source(seen: &Receiver<(SocketAddr, usize)>) -> SocketAddr {
    next_datagram(seen).0
}

/// The next datagram's (source, length) the backend reports, within 5 s.
fn next_datagram(seen: &Receiver<(SocketAddr, usize)>) -> (SocketAddr, usize) {
    seen.recv_timeout(Duration::from_secs(5))
        .expect("backend saw a datagram")
}

fn echo_through_udp_rule(backend_bind: &str) {
    let (backend, seen) = udp_echo_backend(backend_bind);
    let srv = start(
        vec![udp_rule(backend, Proto::Udp)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let c = udp_client(srv.addr());
    assert_eq!(udp_roundtrip(&c, srv.addr(), b"hello"), b"hello");
    let (first, len) = next_datagram(&seen);
    assert_eq!(
        len, 5,
        "no empty datagram before the first one (rinetd sends one)"
    );
    assert_eq!(udp_roundtrip(&c, srv.addr(), b"again"), b"again");
    assert_eq!(
        next_source(&seen),
        first,
        "one client keeps one association (one upstream socket)"
    );
}

#[test]
fn udp_echo_ipv4() {
    echo_through_udp_rule("127.0.0.1:0");
}

#[test]
fn udp_echo_ipv6() {
    echo_through_udp_rule("[::1]:0");
}

#[test]
fn two_clients_on_one_rule_each_get_only_their_own_replies() {
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let srv = start(
        vec![udp_rule(backend, Proto::Udp)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let (a, b) = (udp_client(srv.addr()), udp_client(srv.addr()));
    for i in 0..200u32 {
        // Both send before either reads, so replies are in flight together.
        let (ma, mb) = (format!("a{i}"), format!("b{i}"));
        a.send_to(ma.as_bytes(), srv.addr()).expect("send a");
        b.send_to(mb.as_bytes(), srv.addr()).expect("send b");
        let mut buf = [0u8; 64];
        let n = a.recv(&mut buf).expect("reply to a");
        assert_eq!(&buf[..n], ma.as_bytes());
        let n = b.recv(&mut buf).expect("reply to b");
        assert_eq!(&buf[..n], mb.as_bytes());
    }
}

#[test]
fn association_expires_after_idle_timeout_and_is_logged() {
    let (_dir, path, log) = tab_log();
    let (backend, seen) = udp_echo_backend("127.0.0.1:0");
    let mut r = udp_rule(backend, Proto::Udp);
    r.rule.options.timeout = Some(Duration::from_secs(1));
    let srv = start(vec![r], Settings::default(), log);
    let c = udp_client(srv.addr());

    assert_eq!(udp_roundtrip(&c, srv.addr(), b"first"), b"first");
    let before = next_source(&seen);
    let text = wait_for_file(&path, |t| t.contains("done-local-closed"));
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    let port = srv.addr().port().to_string();
    let backend_port = backend.port().to_string();
    // rinetd's opened line counts the first datagram; the done line has both directions.
    assert_eq!(
        lines[0][1..],
        [
            "127.0.0.1",
            "127.0.0.1",
            &port,
            "127.0.0.1",
            &backend_port,
            "5",
            "0",
            "opened"
        ]
    );
    assert_eq!(
        lines[1][1..],
        [
            "127.0.0.1",
            "127.0.0.1",
            &port,
            "127.0.0.1",
            &backend_port,
            "5",
            "5",
            "done-local-closed"
        ]
    );

    assert_eq!(udp_roundtrip(&c, srv.addr(), b"second"), b"second");
    let after = next_source(&seen);
    assert_ne!(
        before, after,
        "a new association uses a new upstream socket"
    );
    let text = wait_for_file(&path, |t| t.lines().count() >= 3);
    assert!(
        text.lines()
            .nth(2)
            .is_some_and(|l| l.ends_with("\t6\t0\topened")),
        "{text}"
    );
}

#[test]
fn replies_keep_the_association_alive() {
    // Only the backend talks after the first datagram; the association must
    // not expire while it does (rinetd refreshed the timer on client traffic only).
    let backend = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind backend");
    backend
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut r = udp_rule(backend.local_addr().expect("addr"), Proto::Udp);
    r.rule.options.timeout = Some(Duration::from_secs(2));
    let srv = start(vec![r], Settings::default(), LogHandle::disabled());
    let c = udp_client(srv.addr());
    c.send_to(b"subscribe", srv.addr()).expect("send");
    let mut buf = [0u8; 64];
    let (_, upstream) = backend.recv_from(&mut buf).expect("backend got it");
    // Replies every 250 ms for 3 s: longer than the timeout.
    for i in 0..12u8 {
        backend.send_to(&[i], upstream).expect("reply");
        let n = c.recv(&mut buf).expect("reply reaches the client");
        assert_eq!(&buf[..n], &[i]);
        std::thread::sleep(Duration::from_millis(250));
    }
    c.send_to(b"still here", srv.addr()).expect("send");
    let (_, from) = backend.recv_from(&mut buf).expect("backend got it");
    assert_eq!(
        from, upstream,
        "the association survived on backend traffic"
    );
}

#[test]
fn datagram_of_65000_bytes_passes_intact_both_ways() {
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let srv = start(
        vec![udp_rule(backend, Proto::Udp)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let c = udp_client(srv.addr());
    let data = pattern(65_000, 7);
    let back = udp_roundtrip(&c, srv.addr(), &data);
    assert_eq!(back.len(), 65_000);
    assert_eq!(sha256(&back), sha256(&data));
}

#[test]
fn tcp_to_udp_round_trip() {
    let (_dir, path, log) = tab_log();
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let srv = start(vec![tcp_rule_to_udp(backend)], Settings::default(), log);
    let mut c = connect(srv.addr());
    for msg in [&b"ping"[..], b"second message", &pattern(30_000, 3)] {
        c.write_all(msg).expect("write");
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).expect("echo");
        assert_eq!(back, msg);
    }
    c.shutdown(Shutdown::Write).expect("close");
    let mut rest = Vec::new();
    c.read_to_end(&mut rest)
        .expect("EOF after the client closes");
    let text = wait_for_file(&path, |t| t.contains("done-"));
    let total = (4 + 14 + 30_000).to_string();
    assert!(
        text.contains(&format!("\t{total}\t{total}\tdone-remote-closed")),
        "{text}"
    );
}

#[test]
fn tcp_to_udp_with_the_largest_timeout_serves_instead_of_aborting() {
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let mut r = tcp_rule_to_udp(backend);
    // 18446744073709551615 seconds: `Instant + timeout` would overflow and panic.
    r.rule.options.timeout = Some(std::time::Duration::from_secs(u64::MAX));
    let srv = start(
        vec![r],
        Settings::default(),
        oxidinetd::LogHandle::disabled(),
    );
    for _ in 0..2 {
        let mut c = connect(srv.addr());
        c.write_all(b"ping").expect("write");
        let mut back = [0u8; 4];
        c.read_exact(&mut back)
            .expect("echo: the server is still up");
        assert_eq!(&back, b"ping");
    }
}

/// A TCP listener rule on loopback (the backend's family) to a UDP backend.
fn tcp_rule_to_udp(backend: SocketAddr) -> oxidinetd::config::ResolvedRule {
    rule(loopback_for(backend), Proto::Tcp, backend, Proto::Udp)
}

#[test]
fn udp_to_tcp_round_trip() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![udp_rule(backend, Proto::Tcp)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let c = udp_client(srv.addr());
    for i in 0..20u32 {
        let msg = format!("datagram {i}");
        assert_eq!(
            udp_roundtrip(&c, srv.addr(), msg.as_bytes()),
            msg.as_bytes()
        );
    }
}

#[test]
fn udp_to_tcp_keeps_datagram_order() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![udp_rule(backend, Proto::Tcp)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let c = udp_client(srv.addr());
    let (mut want, mut got) = (Vec::new(), Vec::new());
    let mut buf = [0u8; 1024];
    for group in 0..20u32 {
        // Ten datagrams back to back, then wait for their echo (the stream may
        // come back in fewer, larger datagrams): well within the association's queue.
        for i in 0..10 {
            let d = (group * 10 + i).to_be_bytes();
            want.extend_from_slice(&d);
            c.send_to(&d, srv.addr()).expect("send");
        }
        while got.len() < want.len() {
            let n = c.recv(&mut buf).expect("echo datagram");
            got.extend_from_slice(&buf[..n]);
        }
    }
    assert_eq!(got, want, "datagrams reach the stream in order");
}

#[test]
fn refused_clients_get_no_association_and_are_logged() {
    use oxidinetd::config::{self, services::Services};
    let (backend, seen) = udp_echo_backend("127.0.0.1:0");
    let text = format!(
        "127.0.0.1 1/udp 127.0.0.1 {}/udp\nallow 127.0.0.1\ndeny 127.0.0.1\n",
        backend.port()
    );
    let cfg = config::parse(&text).expect("valid config");
    let mut resolved = config::resolve(cfg, &Services::parse("")).expect("resolves");
    let mut r = resolved.rules.remove(0);
    r.bind = config::BindAddr::Ip(SocketAddr::from(([127, 0, 0, 1], 0)));
    let (_dir, path, log) = tab_log();
    let srv = start(vec![r], Settings::default(), log);
    for from in [[127, 0, 0, 2], [127, 0, 0, 1]] {
        let c = std::net::UdpSocket::bind(SocketAddr::from((from, 0))).expect("bind client");
        c.send_to(b"knock", srv.addr()).expect("send");
    }
    let text = wait_for_file(&path, |t| t.lines().count() >= 2);
    let mut events: Vec<&str> = text
        .lines()
        .map(|l| l.rsplit('\t').next().unwrap_or(""))
        .collect();
    events.sort();
    assert_eq!(events, ["denied", "not-allowed"], "{text}");
    assert!(seen.try_recv().is_err(), "no datagram reached the backend");
}

#[test]
fn tcp_to_udp_closes_after_idle_timeout() {
    let (_dir, path, log) = tab_log();
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let mut r = tcp_rule_to_udp(backend);
    r.rule.options.timeout = Some(Duration::from_secs(1));
    let srv = start(vec![r], Settings::default(), log);
    let mut c = connect(srv.addr());
    c.write_all(b"ping").expect("write");
    let mut back = [0u8; 4];
    c.read_exact(&mut back).expect("echo");
    // Idle from here on: oi closes the connection (read returns EOF; bounded by
    // the 20 s read timeout `connect` sets).
    let mut rest = Vec::new();
    c.read_to_end(&mut rest)
        .expect("EOF from oi after the idle timeout");
    assert!(rest.is_empty());
    let text = wait_for_file(&path, |t| t.contains("done-"));
    assert!(text.contains("\t4\t4\tdone-local-closed"), "{text}");
}

#[test]
fn udp_to_tcp_backend_close_ends_the_association_and_the_next_datagram_reconnects() {
    let (_dir, path, log) = tab_log();
    // Answers one 5-byte request per connection, then closes it.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for _ in 0..2 {
            let Ok((mut s, _)) = l.accept() else { return };
            let mut req = [0u8; 5];
            if s.read_exact(&mut req).is_ok() {
                let _ = s.write_all(b"bye");
            }
        }
    });
    let srv = start(
        vec![udp_rule(backend, Proto::Tcp)],
        Settings::default(),
        log,
    );
    let c = udp_client(srv.addr());
    assert_eq!(udp_roundtrip(&c, srv.addr(), b"hello"), b"bye");
    let text = wait_for_file(&path, |t| t.contains("done-local-closed"));
    assert!(text.contains("\t5\t3\tdone-local-closed"), "{text}");
    assert_eq!(udp_roundtrip(&c, srv.addr(), b"again"), b"bye");
    let text = wait_for_file(&path, |t| t.matches("opened").count() == 2);
    assert_eq!(text.matches("opened").count(), 2, "{text}");
}

/// A UDP→TCP server whose backend never accepts, so every datagram waits in
/// its association's queue; connects wait long enough for the test.
fn udp_to_unaccepting_tcp() -> (TestServer, impl Sized) {
    let (backend, keep) = unaccepting_backend();
    let settings = Settings {
        connect_timeout: Duration::from_secs(300),
        ..Settings::default()
    };
    let srv = start(
        vec![udp_rule(backend, Proto::Tcp)],
        settings,
        LogHandle::disabled(),
    );
    (srv, keep)
}

#[test]
fn one_source_queues_at_most_its_byte_budget_towards_a_stalled_tcp_backend() {
    let (srv, _backend) = udp_to_unaccepting_tcp();
    let c = udp_client(srv.addr());
    let payload = vec![7u8; 32_000];
    // Sent until the association refuses one (the kernel may drop some on
    // the way in, so the count of sends is not the measure).
    let deadline = std::time::Instant::now() + PATIENCE;
    while srv.shared.udp_datagrams_dropped() == 0 {
        assert!(std::time::Instant::now() < deadline, "nothing was dropped");
        c.send_to(&payload, srv.addr()).expect("send");
    }
    let queued = srv.shared.udp_queued_bytes();
    // Four 32,000-byte datagrams (and their bookkeeping) fit in 128 KiB, a fifth does not.
    assert!(queued <= oxidinetd::ASSOC_QUEUE_BYTES, "{queued}");
    assert!(queued >= 4 * 32_000, "{queued}");
}

#[test]
fn many_sources_queue_at_most_the_process_budget_towards_a_stalled_tcp_backend() {
    let (srv, _backend) = udp_to_unaccepting_tcp();
    let payload = vec![7u8; 32_000];
    let total = oxidinetd::UDP_QUEUE_TOTAL;
    // 200 sources × 128 KiB each would be 25 MiB: more than the 16 MiB in all.
    let sources: Vec<_> = (0..200).map(|_| udp_client(srv.addr())).collect();
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut peak = 0;
    while srv.shared.udp_queued_bytes() < total - 2 * 32_064 {
        assert!(
            std::time::Instant::now() < deadline,
            "the queues never filled: {} bytes",
            srv.shared.udp_queued_bytes()
        );
        for s in &sources {
            s.send_to(&payload, srv.addr()).expect("send");
            peak = peak.max(srv.shared.udp_queued_bytes());
        }
    }
    for s in &sources {
        s.send_to(&payload, srv.addr()).expect("send");
        peak = peak.max(srv.shared.udp_queued_bytes());
    }
    assert!(peak <= total, "queued {peak} bytes, budget {total}");
    assert!(srv.shared.udp_datagrams_dropped() > 0);
    // Every queued byte comes back when the associations end.
    drop(sources);
    drop(srv);
}

#[test]
fn queued_bytes_are_given_back_when_the_server_stops() {
    let (srv, _backend) = udp_to_unaccepting_tcp();
    let c = udp_client(srv.addr());
    c.send_to(b"one", srv.addr()).expect("send");
    wait_until("the datagram is queued", || {
        srv.shared.udp_queued_bytes() > 0
    });
    let shared = srv.shared.clone();
    drop(srv);
    wait_until("the queue budget is returned", || {
        shared.udp_queued_bytes() == 0
    });
}

#[test]
fn udp_rule_with_the_largest_timeout_keeps_serving_across_sweeps() {
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let mut r = udp_rule(backend, Proto::Udp);
    // The sweep compares idle time with this and divides it by 4 for its period.
    r.rule.options.timeout = Some(Duration::from_secs(u64::MAX));
    let srv = start(vec![r], Settings::default(), LogHandle::disabled());
    let c = udp_client(srv.addr());
    // Past the longest sweep period (1 s), so at least one sweep has run.
    let started = std::time::Instant::now();
    let mut rounds = 0;
    while started.elapsed() < Duration::from_millis(1500) && rounds < 100_000 {
        assert_eq!(udp_roundtrip(&c, srv.addr(), b"ping"), b"ping");
        rounds += 1;
    }
}
