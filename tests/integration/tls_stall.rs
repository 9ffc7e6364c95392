//! 1,000 clients that open a TLS handshake with oi and never finish it
//! (half say nothing, half send half a ClientHello), through the real
//! binary: oi's memory stays within a stated bound, `tls-max-handshakes`
//! closes the clients past it at once, every one is freed at
//! `tls-handshake-timeout` (oi's descriptors back to where they were), and a
//! normal client is served after. Alone in its own process: it raises
//! RLIMIT_NOFILE and counts oi's descriptors.

use crate::common::*;
use crate::tls::{ca, leaf, openssl_present, p, s_client, start};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Clients that stall.
const CLIENTS: usize = 1000;

/// The rule's `tls-max-handshakes`: the 400 clients past it are refused.
const CAP: usize = 600;

/// The rule's `tls-handshake-timeout`, in seconds: short, so the test is.
const DEADLINE: u64 = 2;

/// How much more memory (VmRSS, KiB) oi may hold with [`CAP`] handshakes
/// stalled than before: measured 7.6-7.7 MiB for 600 in the debug build
/// the tests run (about 13 KiB each: 11 KiB for a client that says nothing
/// -- its task, its registration and rustls's `ServerConnection` -- and 15
/// KiB for one whose half ClientHello rustls holds), bounded at 20 KiB each.
const MAX_GROWTH_KIB: u64 = CAP as u64 * 20;

/// Descriptors process `pid` holds.
fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Lets this process, and the oi it starts, hold the clients' sockets and
/// oi's ends of them.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let want = limit.maximum.map_or(8192, |m| m.min(8192));
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(want),
            maximum: limit.maximum,
        },
    );
}

/// The first 100 bytes of a ClientHello whose record says 512 follow.
fn half_hello() -> Vec<u8> {
    let mut bytes = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    bytes.resize(100, 0);
    bytes
}

/// One stalled client: its socket, when it was opened, and when oi closed it.
struct Stalled {
    /// The client's socket, non-blocking.
    socket: TcpStream,
    /// When it connected.
    opened: Instant,
    /// When it saw oi close (end of stream or reset).
    closed: Option<Instant>,
}

#[test]
fn a_thousand_stalled_handshakes_are_capped_bounded_and_freed_at_the_deadline() {
    if !openssl_present() {
        return;
    }
    if run_in_own_process(
        module_path!(),
        "a_thousand_stalled_handshakes_are_capped_bounded_and_freed_at_the_deadline",
    ) {
        return;
    }
    raise_nofile();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let backend = marker_backend(b"served\n").port();
    let port = free_port();
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={},tls-key={},\
             tls-max-handshakes={CAP},tls-handshake-timeout={DEADLINE}]\n",
            p(&edge.cert),
            p(&edge.key)
        ),
    );
    let pid = oi.child.id();
    let ca_file = p(&root.cert);
    let served = || s_client(port, &["-tls1_3", "-CAfile", &ca_file], b"").contains("served");
    // One whole handshake first, so what rustls sets up once is in the base.
    assert!(served(), "{}", oi.stderr_tail());
    let (base_rss, base_fds) = (vm_rss_kib(pid), fds_of(pid));
    let half = half_hello();
    let began = Instant::now();
    let mut clients: Vec<Stalled> = (0..CLIENTS)
        .map(|i| {
            let mut socket = connect(local(port));
            if i % 2 == 1 {
                // Refused ones may be closed already: what was written matters not.
                let _ = socket.write_all(&half);
            }
            socket.set_nonblocking(true).expect("nonblocking");
            Stalled {
                socket,
                opened: Instant::now(),
                closed: None,
            }
        })
        .collect();
    // Until oi has closed every one: its peak descriptors and memory.
    let (mut peak_fds, mut peak_rss) = (0, 0);
    let deadline = Instant::now() + PATIENCE;
    let mut buf = [0u8; 64];
    while clients.iter().any(|c| c.closed.is_none()) {
        if Instant::now() > deadline {
            oi.fail(&format!(
                "{} stalled clients still open after {PATIENCE:?}",
                clients.iter().filter(|c| c.closed.is_none()).count()
            ));
        }
        peak_fds = peak_fds.max(fds_of(pid));
        peak_rss = peak_rss.max(vm_rss_kib(pid));
        for c in clients.iter_mut().filter(|c| c.closed.is_none()) {
            match c.socket.read(&mut buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Ok(n) if n > 0 => oi.fail("oi answered a stalled client"),
                _ => c.closed = Some(Instant::now()),
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let lived: Vec<Duration> = clients
        .iter()
        .filter_map(|c| c.closed.map(|at| at - c.opened))
        .collect();
    let refused = lived
        .iter()
        .filter(|d| **d < Duration::from_millis(DEADLINE * 500))
        .count();
    let longest = lived.iter().max().copied().unwrap_or_default();
    let grew = peak_rss.saturating_sub(base_rss);
    println!(
        "TLS_STALL| {CLIENTS} stalled, {refused} refused at once; oi: {base_fds} descriptors \
         before, {peak_fds} at most; VmRSS {base_rss} KiB before, {peak_rss} KiB at most \
         ({grew} KiB more, {} bytes a handshake held); longest held {longest:?}",
        grew * 1024 / (CLIENTS - refused).max(1) as u64
    );
    // The cap: never more than CAP held (the slack is clients accepted and
    // not yet refused: up to 78 seen with the whole suite running; without
    // a cap all 1,000 would be held), none refused below it, and, when all
    // were open before the first deadline, exactly those past it refused.
    let all_open_in = clients.iter().map(|c| c.opened).max().map(|t| t - began);
    let fast = all_open_in.is_some_and(|d| d < Duration::from_millis(DEADLINE * 500));
    let exact = !fast || refused == CLIENTS - CAP;
    if peak_fds > base_fds + CAP + 200 || !(1..=CLIENTS - CAP).contains(&refused) || !exact {
        oi.fail(&format!(
            "at most {CAP} handshakes held: {peak_fds} descriptors against {base_fds}, \
             {refused} refused (all open in {all_open_in:?})"
        ));
    }
    if grew > MAX_GROWTH_KIB {
        oi.fail(&format!(
            "{CAP} stalled handshakes cost {grew} KiB, over {MAX_GROWTH_KIB}"
        ));
    }
    // Freed at the deadline, not before and not long after.
    let held = lived
        .iter()
        .filter(|d| **d >= Duration::from_millis(DEADLINE * 500));
    if held
        .clone()
        .any(|d| *d < Duration::from_millis(DEADLINE * 900))
        || longest > Duration::from_secs(DEADLINE + 5)
    {
        oi.fail(&format!(
            "each held handshake ends at {DEADLINE} s: longest {longest:?}"
        ));
    }
    wait_until("oi's descriptors are back to where they were", || {
        fds_of(pid) <= base_fds
    });
    drop(clients);
    assert!(served(), "a client is served after: {}", oi.stderr_tail());
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains(&format!("{CAP} handshakes already in progress")),
        "{stderr}"
    );
}
