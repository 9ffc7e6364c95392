//! The batch module's tests: receives through real loopback sockets, and GSO runs.

use super::*;

/// Sends three datagrams from `from` to `dest`, then reads what `to`
/// has through `recv_runs`, as `to`'s own family; returns each
/// datagram's sender and bytes.
fn three_through(from: &UdpSocket, dest: SocketAddr, to: &UdpSocket) -> Vec<(SocketAddr, Vec<u8>)> {
    for i in 0..3u8 {
        from.send_to(&[i; 5], dest).expect("send");
    }
    to.set_nonblocking(true).expect("nonblocking");
    let family = Family::of_socket(to);
    let mut pace = Pace::default();
    let mut got = Vec::new();
    // Loopback delivers synchronously: all three are queued by now.
    for _ in 0..3 {
        let each = |peer, run: &[&[u8]]| {
            got.extend(run.iter().map(|d| (peer, d.to_vec())));
        };
        match recv_runs(to, family, &mut pace, each) {
            Ok(r) if r.drained => break,
            Ok(_) => {}
            Err(e) => panic!("receive: {e}"),
        }
    }
    got
}

/// The three datagrams of [`three_through`], as sent by `peer`.
fn three_from(peer: SocketAddr) -> Vec<(SocketAddr, Vec<u8>)> {
    (0..3u8).map(|i| (peer, vec![i; 5])).collect()
}

#[test]
fn each_family_reads_its_senders_addresses() {
    for (bind, family) in [("127.0.0.1:0", Family::V4), ("[::1]:0", Family::V6)] {
        let a = UdpSocket::bind(bind).expect("bind");
        let b = UdpSocket::bind(bind).expect("bind");
        assert_eq!(Family::of_socket(&b), family);
        let dest = b.local_addr().expect("address");
        let peer = a.local_addr().expect("address");
        assert_eq!(three_through(&a, dest, &b), three_from(peer), "{bind}");
    }
}

#[test]
fn an_ipv6_socket_reads_ipv4_senders_as_mapped_addresses() {
    // An IPv6 socket on the IPv4-mapped loopback address: what a dual-stack
    // `[::]` rule receives from IPv4 clients, without leaving loopback.
    let b = UdpSocket::bind("[::ffff:127.0.0.1]:0").expect("bind v4-mapped");
    let a = UdpSocket::bind("127.0.0.1:0").expect("bind v4");
    let port = b.local_addr().expect("address").port();
    let dest = SocketAddr::from(([127, 0, 0, 1], port));
    let v4 = a.local_addr().expect("address");
    let mapped = match v4.ip() {
        std::net::IpAddr::V4(ip) => SocketAddr::new(ip.to_ipv6_mapped().into(), v4.port()),
        std::net::IpAddr::V6(_) => v4,
    };
    assert_eq!(three_through(&a, dest, &b), three_from(mapped));
}

#[test]
fn a_quiet_socket_still_reads_a_burst_whole_and_in_order() {
    let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
    b.set_nonblocking(true).expect("nonblocking");
    let dest = b.local_addr().expect("address");
    let family = Family::of_socket(&b);
    let mut pace = Pace::default();
    let mut got: Vec<Vec<u8>> = Vec::new();
    // Sizes differ, so GRO coalesces none of them: one slot each.
    a.send_to(&[9; 3], dest).expect("send");
    let lone = recv_runs(&b, family, &mut pace, |_, run| {
        got.extend(run.iter().map(|d| d.to_vec()))
    })
    .expect("receive");
    assert!(lone.drained && lone.datagrams == 1 && pace.lone);
    for i in 0..5u8 {
        a.send_to(&vec![i; usize::from(i) + 1], dest).expect("send");
    }
    // Loopback delivers synchronously: all five are queued by now. The
    // quiet socket's receive takes LONE_SLOTS and cannot say it drained.
    let mut calls = Vec::new();
    for _ in 0..5 {
        let r = recv_runs(&b, family, &mut pace, |_, run| {
            got.extend(run.iter().map(|d| d.to_vec()))
        })
        .expect("receive");
        calls.push((r.datagrams, r.drained));
        if r.drained {
            break;
        }
    }
    assert_eq!(calls, [(LONE_SLOTS, false), (5 - LONE_SLOTS, true)]);
    let want: Vec<Vec<u8>> = std::iter::once(vec![9; 3])
        .chain((0..5u8).map(|i| vec![i; usize::from(i) + 1]))
        .collect();
    assert_eq!(got, want);
    assert!(!pace.lone);
}

#[test]
fn gso_takes_equal_sizes_and_a_shorter_last() {
    let (a, b): (&[u8], &[u8]) = (&[1; 10], &[2; 4]);
    assert_eq!(gso_prefix(&[a, a, b, a]), Some(3));
    assert_eq!(gso_prefix(&[a, b]), Some(2));
    assert_eq!(gso_prefix(&[b, a, a]), None);
    assert_eq!(gso_prefix(&[a]), None);
    assert_eq!(gso_prefix(&[&[], &[]]), None);
    let big: &[u8] = &[0; 40_000];
    assert_eq!(gso_prefix(&[big, big]), None);
}
