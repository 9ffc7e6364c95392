//! A flood of UDP sources must not take the descriptors TCP needs: the
//! association cap is clamped to the UDP listeners' share of RLIMIT_NOFILE.
//!
//! Alone in its own test binary: it lowers the process's RLIMIT_NOFILE.

use crate::common::*;
use oxidinetd::config::Proto;
use oxidinetd::{LogHandle, Settings};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use std::io::{Read, Write};
use std::time::Duration;

#[test]
fn a_udp_flood_leaves_descriptors_for_a_tcp_rule_beside_it() {
    // Changes or counts what the whole test process has (limits, descriptors).
    if run_in_own_process(
        module_path!(),
        "a_udp_flood_leaves_descriptors_for_a_tcp_rule_beside_it",
    ) {
        return;
    }
    let limit: u64 = 256;
    let old = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(limit),
            maximum: old.maximum,
        },
    )
    .expect("lower RLIMIT_NOFILE");
    let tcp_backend = echo_backend("127.0.0.1:0");
    // Associations stay until their timeout (72 s): longer than the test.
    let (udp_addr, _seen) = udp_echo_backend("127.0.0.1:0");
    let srv = start(
        vec![tcp_rule(tcp_backend), udp_rule(udp_addr, Proto::Udp)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let (tcp, udp) = (srv.addrs[0], srv.addrs[1]);
    let cap = srv.shared.udp_association_cap();
    // Half the limit, less the listeners' descriptors (3 here).
    assert!(cap < 128 && cap > 100, "cap {cap}");
    let before = open_fds();
    // 400 sources, each a socket of its own, closed right after its one
    // datagram (the association outlives it), so the test itself holds one.
    for i in 0..400u32 {
        let c = std::net::UdpSocket::bind("127.0.0.1:0").expect("source");
        c.send_to(&i.to_be_bytes(), udp).expect("send");
    }
    // The listener reads datagrams in order: once a last source's echo is
    // back, every earlier datagram has been handled.
    // (Sent again until answered: the kernel may drop it behind the flood.)
    let last = std::net::UdpSocket::bind("127.0.0.1:0").expect("last source");
    last.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut b = [0u8; 16];
    wait_until("the last source is answered", || {
        last.send_to(b"last", udp).expect("send");
        matches!(last.recv(&mut b), Ok(4))
    });
    // The associations (one descriptor each) stay within the cap. An evicted
    // one's socket closes when its executor next runs the cancelled task, so
    // during the flood the count may pass the cap by a batch of datagrams;
    // once the flood is read it settles. A few descriptors of slack: the
    // runtime opens some lazily (measured: 2).
    wait_until("associations settle within the cap", || {
        open_fds() <= before + cap + 8
    });
    assert!(
        !holds_within(Duration::from_millis(300), || open_fds() > before + cap + 8),
        "associations past the cap: {} descriptors over {before}",
        open_fds().saturating_sub(before)
    );
    assert!(
        open_fds() >= before + cap / 2,
        "the flood made associations"
    );
    // The TCP rule still serves: every one of 20 connections echoes.
    for i in 0..20u8 {
        let mut c = connect(tcp);
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        c.write_all(&[i; 4]).expect("write");
        let mut b = [0u8; 4];
        c.read_exact(&mut b).expect("echo through the TCP rule");
        assert_eq!(b, [i; 4]);
    }
}
