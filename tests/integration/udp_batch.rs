//! Batched UDP through the binary (src/udp/batch.rs): many clients at once on
//! one rule, runs of datagrams from one client, datagrams near 64 KiB, and
//! datagrams a client sends coalesced (UDP GSO) that oi receives coalesced
//! (UDP GRO): every datagram keeps its boundary and its content, and every
//! reply reaches the client that asked. Each test runs twice: batched, and
//! with `OI_UDP_BATCH=off` (the one-datagram-per-call fallback).

use crate::common::*;
use nix::sys::socket::{self as nx, ControlMessage, MsgFlags, SockaddrStorage};
use std::collections::HashMap;
use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// oi forwarding one `/udp` rule to a UDP echo backend.
struct Rig {
    /// Holds the config file and the notify socket.
    _dir: tempfile::TempDir,
    /// The oi under test (its stderr goes into failure messages).
    oi: OiProcess,
    /// The rule's listening address.
    addr: SocketAddr,
    /// (source, length) of every datagram the backend received.
    seen: Receiver<(SocketAddr, usize)>,
}

/// Starts oi on `127.0.0.1 PORT/udp -> echo backend`, batched or not.
fn rig(batched: bool) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let (backend, seen) = udp_echo_backend("127.0.0.1:0");
    let port = free_udp_port();
    write_atomic(
        &conf,
        &format!("127.0.0.1 {port}/udp 127.0.0.1 {}/udp\n", backend.port()),
    );
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_oi"));
    command.arg("-c").arg(&conf);
    if !batched {
        command.env("OI_UDP_BATCH", "off");
    }
    let oi = OiProcess::spawn(command, dir.path());
    oi.wait_ready();
    Rig {
        _dir: dir,
        oi,
        addr: local(port),
        seen,
    }
}

impl Rig {
    /// The next datagram `client` receives, which must come from the rule's address.
    fn reply(&self, client: &UdpSocket) -> Vec<u8> {
        let mut buf = vec![0u8; 65_536];
        match client.recv_from(&mut buf) {
            Ok((n, from)) => {
                assert_eq!(
                    from, self.addr,
                    "a reply must come from the listening address"
                );
                buf.truncate(n);
                buf
            }
            Err(e) => self.oi.fail(&format!(
                "no reply within 5 s on {:?}: {e}",
                client.local_addr()
            )),
        }
    }
}

/// What client `id` sends as its `seq`th datagram: `len` bytes no other
/// client's datagram equals, so a reply delivered to the wrong client shows.
fn payload(id: usize, seq: usize, len: usize) -> Vec<u8> {
    let mut p = pattern(len, (id * 1_000 + seq) as u64);
    let tag = format!("{id}:{seq}:");
    let n = tag.len().min(len);
    p[..n].copy_from_slice(&tag.as_bytes()[..n]);
    p
}

fn many_clients_at_once(batched: bool) {
    const CLIENTS: usize = 16;
    const ROUNDS: usize = 12;
    // Datagrams per client per round: runs from one client (one batched
    // send) among runs from the others (one receive across clients). 16 × 4
    // small datagrams stay well inside the sockets' default buffers.
    const RUN: usize = 4;
    let r = rig(batched);
    let clients: Vec<UdpSocket> = (0..CLIENTS).map(|_| udp_client(r.addr)).collect();
    for round in 0..ROUNDS {
        let mut sent: HashMap<usize, Vec<Vec<u8>>> = HashMap::new();
        for (id, c) in clients.iter().enumerate() {
            // Equal sizes within a run in even rounds (GSO), mixed in odd ones.
            for k in 0..RUN {
                let len = if round % 2 == 0 {
                    40 + 13 * id + round
                } else {
                    1 + 37 * k + id
                };
                let p = payload(id, round * RUN + k, len);
                c.send_to(&p, r.addr).expect("send");
                sent.entry(id).or_default().push(p);
            }
        }
        for (id, c) in clients.iter().enumerate() {
            let mut got: Vec<Vec<u8>> = (0..RUN).map(|_| r.reply(c)).collect();
            let mut want = sent.remove(&id).unwrap_or_default();
            got.sort();
            want.sort();
            if got != want {
                r.oi.fail(&format!(
                    "client {id}, round {round}: replies {:?} differ from what it sent {:?} \
                     (lengths)",
                    got.iter().map(Vec::len).collect::<Vec<_>>(),
                    want.iter().map(Vec::len).collect::<Vec<_>>()
                ));
            }
        }
    }
    // One association per client: the backend saw exactly CLIENTS sources.
    let sources: std::collections::HashSet<SocketAddr> =
        r.seen.try_iter().map(|(s, _)| s).collect();
    assert_eq!(sources.len(), CLIENTS, "one backend socket per client");
}

#[test]
fn many_clients_at_once_keep_boundaries_and_get_only_their_own_replies() {
    many_clients_at_once(true);
}

#[test]
fn many_clients_at_once_without_batching() {
    many_clients_at_once(false);
}

fn large_datagrams(batched: bool) {
    let r = rig(batched);
    let c = udp_client(r.addr);
    // The largest IPv4 payload, one at a time, then two equal halves at once
    // (one GSO send of 64,000 bytes), then two that together exceed what one
    // GSO send may carry (two sends in one sendmmsg).
    for (round, sizes) in [
        &[65_507][..],
        &[65_000],
        &[32_000, 32_000],
        &[40_000, 40_000],
    ]
    .iter()
    .enumerate()
    {
        let sent: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &len)| payload(round, k, len))
            .collect();
        for p in &sent {
            c.send_to(p, r.addr).expect("send");
        }
        for p in &sent {
            let got = r.reply(&c);
            if &got != p {
                r.oi.fail(&format!(
                    "round {round}: a {}-byte datagram came back as {} bytes or changed",
                    p.len(),
                    got.len()
                ));
            }
        }
    }
}

#[test]
fn datagrams_near_64_kib_pass_intact_both_ways() {
    large_datagrams(true);
}

#[test]
fn datagrams_near_64_kib_pass_intact_without_batching() {
    large_datagrams(false);
}

/// Sends `count` datagrams of `size` bytes in one `sendmsg` with
/// `UDP_SEGMENT`: the kernel keeps them as one coalesced packet up to a
/// receiver with `UDP_GRO` on (oi's listener), and splits them for others.
fn send_coalesced(c: &UdpSocket, to: SocketAddr, parts: &[Vec<u8>]) -> nix::Result<usize> {
    let size = u16::try_from(parts[0].len()).expect("segment size");
    let iov: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    nx::sendmsg(
        c.as_raw_fd(),
        &iov,
        &[ControlMessage::UdpGsoSegments(&size)],
        MsgFlags::empty(),
        Some(&SockaddrStorage::from(to)),
    )
}

fn coalesced_datagrams(batched: bool) {
    const COUNT: usize = 10;
    const SIZE: usize = 1_000;
    let r = rig(batched);
    let c = udp_client(r.addr);
    let mut parts: Vec<Vec<u8>> = (0..COUNT).map(|k| payload(7, k, SIZE)).collect();
    // The last segment of a GSO send may be shorter: it is a datagram too.
    parts.push(payload(7, COUNT, SIZE / 3));
    match send_coalesced(&c, r.addr, &parts) {
        Ok(_) => {}
        // A kernel without UDP GSO (before 4.18): nothing to test.
        Err(e) if e == nix::Error::EINVAL || e == nix::Error::ENOPROTOOPT => {
            eprintln!("skipped: this kernel has no UDP GSO ({e})");
            return;
        }
        Err(e) => panic!("GSO send: {e}"),
    }
    // The backend sees each datagram on its own, at its own length.
    let lengths: Vec<usize> = (0..parts.len())
        .map(|_| match r.seen.recv_timeout(Duration::from_secs(5)) {
            Ok((_, n)) => n,
            Err(_) => r.oi.fail("the backend did not see every datagram"),
        })
        .collect();
    let want: Vec<usize> = parts.iter().map(Vec::len).collect();
    assert_eq!(
        lengths, want,
        "each coalesced datagram reached the backend alone"
    );
    // And the client gets each back, in order, unchanged.
    for p in &parts {
        assert_eq!(&r.reply(&c), p, "replies keep their boundaries and content");
    }
}

#[test]
fn datagrams_a_client_sends_coalesced_are_forwarded_one_by_one() {
    coalesced_datagrams(true);
}

#[test]
fn datagrams_a_client_sends_coalesced_are_forwarded_one_by_one_without_batching() {
    coalesced_datagrams(false);
}

/// Namespaces made by this process so far (names must be unique).
static NAMESPACES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A network namespace of its own whose loopback has an Ethernet MTU, so a
/// GSO send of 2,000-byte segments is refused (`EMSGSIZE`) where plain sends
/// are fragmented; removed when dropped. `None` (with a message) without
/// root or `ip`, unless OI_REQUIRE_TOOLS says the machine must have them.
struct SmallMtu(String);

impl SmallMtu {
    fn new() -> Option<SmallMtu> {
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| e.to_string())
                .and_then(|o| {
                    o.status
                        .success()
                        .then_some(())
                        .ok_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned())
                })
        };
        let why = if !rustix::process::geteuid().is_root() {
            Some("needs root (a network namespace)".to_string())
        } else {
            ip(&["-V"])
                .err()
                .map(|e| format!("needs ip (iproute2): {e}"))
        };
        if let Some(why) = why {
            assert!(
                std::env::var_os("OI_REQUIRE_TOOLS").is_none(),
                "{why}, and OI_REQUIRE_TOOLS is set"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        let n = NAMESPACES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("oib{}x{n}", std::process::id());
        ip(&["netns", "add", &name]).unwrap_or_else(|e| panic!("ip netns add: {e}"));
        let ns = SmallMtu(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up", "mtu", "1500"])
            .unwrap_or_else(|e| panic!("ip link set lo: {e}"));
        Some(ns)
    }
}

impl Drop for SmallMtu {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .output();
    }
}

#[test]
fn runs_the_kernel_refuses_as_gso_go_out_one_by_one_intact() {
    let Some(ns) = SmallMtu::new() else {
        return;
    };
    run_in_netns(format!("/run/netns/{}", ns.0), || {
        // oi (a child of this thread) and every socket here are in the namespace.
        let r = rig(true);
        let c = udp_client(r.addr);
        // Runs of four equal datagrams: 2,000 bytes (GSO refused, past the
        // MTU; fragmented one by one) and 1,000 bytes (GSO taken), twice.
        for (round, size) in [2_000, 1_000, 2_000, 1_000].into_iter().enumerate() {
            let sent: Vec<Vec<u8>> = (0..4).map(|k| payload(round, k, size)).collect();
            for p in &sent {
                c.send_to(p, r.addr).expect("send");
            }
            let mut got: Vec<Vec<u8>> = (0..4).map(|_| r.reply(&c)).collect();
            got.sort();
            let mut want = sent;
            want.sort();
            if got != want {
                r.oi.fail(&format!("round {round}: {size}-byte datagrams changed"));
            }
        }
    });
}
