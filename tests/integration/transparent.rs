//! `[transparent]`: oi connects to the backend from the client's own
//! address. Three network namespaces the test creates, joined by veth
//! pairs: client 10.88.1.1 / fd88:1::1 — 10.88.1.2 / fd88:1::2 oi
//! 10.88.2.1 / fd88:2::1 — 10.88.2.2 / fd88:2::2 backend, whose route to
//! the client's network goes through oi's namespace. oi's namespace forwards
//! nothing (ip_forward stays 0): replies reach the client only because
//! dist/transparent-routing.sh, the README's routing, hands them to oi.
//!
//! Needs root, `ip` (iproute2) and `nft` (nftables); without them the tests
//! say so and pass, unless OI_REQUIRE_TOOLS is set (CI sets it).

use crate::common::*;
use std::io::{Read, Write};
use std::net::UdpSocket;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const CLIENT4: Ipv4Addr = Ipv4Addr::new(10, 88, 1, 1);
const OI_FRONT4: Ipv4Addr = Ipv4Addr::new(10, 88, 1, 2);
const BACKEND4: Ipv4Addr = Ipv4Addr::new(10, 88, 2, 2);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0xfd88, 1, 0, 0, 0, 0, 0, 1);
const OI_FRONT6: Ipv6Addr = Ipv6Addr::new(0xfd88, 1, 0, 0, 0, 0, 0, 2);
const BACKEND6: Ipv6Addr = Ipv6Addr::new(0xfd88, 2, 0, 0, 0, 0, 0, 2);

/// Longest any socket operation of these tests waits.
const PATIENCE: Duration = Duration::from_secs(10);

/// Runs a command; Err carries what it printed.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why these tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (network namespaces, CAP_NET_ADMIN)".into());
    }
    if let Err(e) = run("ip", &["-V"]) {
        return Some(format!("needs ip (apt-get install iproute2): {e}"));
    }
    if let Err(e) = run("nft", &["--version"]) {
        return Some(format!("needs nft (apt-get install nftables): {e}"));
    }
    None
}

/// Whether to run: false (with a message) where the machine cannot, unless
/// OI_REQUIRE_TOOLS says it must.
fn available() -> bool {
    match unavailable() {
        None => true,
        Some(why) => {
            assert!(
                std::env::var_os("OI_REQUIRE_TOOLS").is_none(),
                "transparent tests: {why}, and OI_REQUIRE_TOOLS is set"
            );
            eprintln!("skipped: the transparent tests {why}");
            false
        }
    }
}

/// Hosts made by this process so far (names must be unique).
static HOSTS: AtomicU64 = AtomicU64::new(0);

/// The three namespaces, removed (with anything still running in them) when dropped.
struct Hosts {
    /// Prefix of every namespace and interface name, unique to this process and net.
    tag: String,
}

impl Hosts {
    /// Namespaces c, o, b joined as the module documentation draws, with
    /// dist/transparent-routing.sh run in o when `routing`.
    fn new(routing: bool) -> Hosts {
        let n = HOSTS.fetch_add(1, Ordering::Relaxed);
        // Interface names are at most 15 bytes: "oit" + pid + "x" + n + one letter.
        let tag = format!("oit{}x{n}", std::process::id() % 1_000_000);
        let hosts = Hosts { tag };
        let t = &hosts.tag;
        let ip = |args: &[&str]| run("ip", args).unwrap_or_else(|e| panic!("{e}"));
        for ns in ["c", "o", "b"] {
            ip(&["netns", "add", &format!("{t}{ns}")]);
            ip(&["-n", &format!("{t}{ns}"), "link", "set", "lo", "up"]);
        }
        // Two veth pairs: c–o (ends "c" and "x"), o–b (ends "y" and "b").
        for (a, a_ns, b, b_ns) in [("c", "c", "x", "o"), ("y", "o", "b", "b")] {
            let (a_dev, b_dev) = (format!("{t}{a}"), format!("{t}{b}"));
            ip(&[
                "link", "add", &a_dev, "type", "veth", "peer", "name", &b_dev,
            ]);
            ip(&["link", "set", &a_dev, "netns", &format!("{t}{a_ns}")]);
            ip(&["link", "set", &b_dev, "netns", &format!("{t}{b_ns}")]);
        }
        for (ns, dev, v4, v6) in [
            ("c", "c", "10.88.1.1/24", "fd88:1::1/64"),
            ("o", "x", "10.88.1.2/24", "fd88:1::2/64"),
            ("o", "y", "10.88.2.1/24", "fd88:2::1/64"),
            ("b", "b", "10.88.2.2/24", "fd88:2::2/64"),
        ] {
            let (ns, dev) = (format!("{t}{ns}"), format!("{t}{dev}"));
            ip(&["-n", &ns, "addr", "add", v4, "dev", &dev]);
            // nodad: the address is usable at once, not after duplicate detection.
            ip(&["-n", &ns, "addr", "add", v6, "dev", &dev, "nodad"]);
            ip(&["-n", &ns, "link", "set", &dev, "up"]);
        }
        // The backend reaches the client's network through oi's namespace.
        let b = format!("{t}b");
        ip(&["-n", &b, "route", "add", "10.88.1.0/24", "via", "10.88.2.1"]);
        ip(&[
            "-n",
            &b,
            "-6",
            "route",
            "add",
            "fd88:1::/64",
            "via",
            "fd88:2::1",
        ]);
        if routing {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/dist/transparent-routing.sh");
            run("ip", &["netns", "exec", &format!("{t}o"), "sh", script])
                .unwrap_or_else(|e| panic!("{e}"));
        }
        hosts
    }

    /// Runs `f` on a thread inside namespace `ns` (c, o or b): sockets it
    /// creates belong to that namespace whichever thread uses them later.
    fn run_in<T: Send + 'static>(&self, ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        run_in_netns(format!("/run/netns/{}{ns}", self.tag), f)
    }

    /// oi with `conf_text` (rinetd.conf; `@DIR@` stands for oi's directory),
    /// run in namespace o through `prefix` (a command oi runs under, such as
    /// setpriv, or nothing).
    fn start_oi(&self, conf_text: &str, prefix: &str) -> (tempfile::TempDir, OiProcess) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("oi.conf");
        let text = conf_text.replace("@DIR@", &dir.path().display().to_string());
        write_atomic(&conf, &text);
        let script = dir.path().join("oi-in-o");
        let text = format!(
            "#!/bin/sh\nexec ip netns exec {}o {prefix} {} \"$@\"\n",
            self.tag,
            env!("CARGO_BIN_EXE_oi")
        );
        std::fs::write(&script, text).expect("write wrapper");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("chmod wrapper");
        let oi = OiProcess::start_program(&script, dir.path(), &conf, &["-f"]);
        (dir, oi)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in ["c", "o", "b"] {
            let ns = format!("{}{ns}", self.tag);
            // Processes still in it (an oi the test did not stop) are the test's.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Some(pid) = pid.parse().ok().and_then(rustix::process::Pid::from_raw) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
            }
            // Deleting a namespace removes the veth ends in it, and so the pairs.
            let _ = run("ip", &["netns", "del", &ns]);
        }
    }
}

/// A TCP listener in the backend's namespace on `ip`, port 0.
fn backend_listener(hosts: &Hosts, ip: IpAddr) -> TcpListener {
    hosts.run_in("b", move || {
        TcpListener::bind(SocketAddr::new(ip, 0)).expect("backend bind")
    })
}

/// What the backend of [`exchange`] saw: the peer address and the bytes it read.
type Seen = (SocketAddr, Vec<u8>);

/// One connection through oi at `front` (from the client's namespace), both
/// half-closes in turn: the client sends `up`; the backend sends `down` and
/// closes its sending side first; the client reads `down` to the end, then
/// sends `after` and closes its own. Returns what the client read, the
/// client's own address, and what the backend saw.
fn exchange(
    hosts: &Hosts,
    listener: TcpListener,
    front: SocketAddr,
    header: &[u8],
    up: Vec<u8>,
    down: Vec<u8>,
) -> (Vec<u8>, SocketAddr, Seen) {
    let backend = std::thread::spawn(move || {
        listener.set_nonblocking(false).expect("blocking");
        let (mut s, peer) = listener.accept().expect("backend accept");
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        s.write_all(&down).expect("backend write");
        s.shutdown(Shutdown::Write).expect("backend shutdown");
        let mut got = Vec::new();
        s.read_to_end(&mut got)
            .expect("backend read to the client's end");
        (peer, got)
    });
    let mut client = hosts.run_in("c", move || {
        TcpStream::connect_timeout(&front, PATIENCE).expect("client connect")
    });
    let local = client.local_addr().expect("client address");
    client.set_read_timeout(Some(PATIENCE)).expect("timeout");
    client.write_all(header).expect("client header");
    client.write_all(&up).expect("client write");
    let mut got = Vec::new();
    client
        .read_to_end(&mut got)
        .expect("client read to the backend's end");
    // After the backend's half-close, this direction still carries bytes.
    client.write_all(b"after").expect("write after half-close");
    client.shutdown(Shutdown::Write).expect("client shutdown");
    let seen = backend.join().expect("backend thread");
    (got, local, seen)
}

/// The rule lines of the TCP and UDP tests: transparent rules for both
/// families, ports 7000 (TCP) and 7001 (UDP) on oi's front addresses.
fn transparent_rules(
    tcp4: SocketAddr,
    tcp6: SocketAddr,
    udp4: SocketAddr,
    udp6: SocketAddr,
) -> String {
    format!(
        "{OI_FRONT4} 7000 {BACKEND4} {} [transparent]\n\
         {OI_FRONT6} 7000 {BACKEND6} {} [transparent]\n\
         {OI_FRONT4} 7001/udp {BACKEND4} {}/udp [transparent]\n\
         {OI_FRONT6} 7001/udp {BACKEND6} {}/udp [transparent]\n",
        tcp4.port(),
        tcp6.port(),
        udp4.port(),
        udp6.port()
    )
}

#[test]
fn backend_sees_the_client_address_over_tcp_v4_and_v6_with_both_half_closes() {
    if !available() {
        return;
    }
    let hosts = Hosts::new(true);
    let l4 = backend_listener(&hosts, BACKEND4.into());
    let l6 = backend_listener(&hosts, BACKEND6.into());
    let (a4, a6) = (
        l4.local_addr().expect("addr"),
        l6.local_addr().expect("addr"),
    );
    let u4 = hosts.run_in("b", || UdpSocket::bind((BACKEND4, 0)).expect("udp"));
    let u6 = hosts.run_in("b", || UdpSocket::bind((BACKEND6, 0)).expect("udp"));
    let rules = transparent_rules(
        a4,
        a6,
        u4.local_addr().expect("addr"),
        u6.local_addr().expect("addr"),
    );
    let (_dir, oi) = hosts.start_oi(&rules, "");
    for (listener, front, client_ip) in [
        (
            l4,
            SocketAddr::from((OI_FRONT4, 7000)),
            IpAddr::from(CLIENT4),
        ),
        (
            l6,
            SocketAddr::from((OI_FRONT6, 7000)),
            IpAddr::from(CLIENT6),
        ),
    ] {
        let (up, down) = (pattern(200_000, 1), pattern(300_000, 2));
        let (got, local, (peer, seen)) =
            exchange(&hosts, listener, front, b"", up.clone(), down.clone());
        assert_eq!(local.ip(), client_ip);
        assert_eq!(
            peer.ip(),
            client_ip,
            "the backend sees the client's address; oi: {}",
            oi.stderr_tail()
        );
        assert_eq!(sha256(&got), sha256(&down), "backend to client, whole");
        let mut want = up;
        want.extend_from_slice(b"after");
        assert_eq!(
            sha256(&seen),
            sha256(&want),
            "client to backend, whole, after the half-close"
        );
    }
}

#[test]
fn udp_association_comes_from_the_client_address_and_port_v4_and_v6() {
    if !available() {
        return;
    }
    let hosts = Hosts::new(true);
    let l4 = backend_listener(&hosts, BACKEND4.into());
    let l6 = backend_listener(&hosts, BACKEND6.into());
    let u4 = hosts.run_in("b", || UdpSocket::bind((BACKEND4, 0)).expect("udp"));
    let u6 = hosts.run_in("b", || UdpSocket::bind((BACKEND6, 0)).expect("udp"));
    let rules = transparent_rules(
        l4.local_addr().expect("addr"),
        l6.local_addr().expect("addr"),
        u4.local_addr().expect("addr"),
        u6.local_addr().expect("addr"),
    );
    let (_dir, oi) = hosts.start_oi(&rules, "");
    for (backend, client_ip, front) in [
        (
            u4,
            IpAddr::from(CLIENT4),
            SocketAddr::from((OI_FRONT4, 7001)),
        ),
        (
            u6,
            IpAddr::from(CLIENT6),
            SocketAddr::from((OI_FRONT6, 7001)),
        ),
    ] {
        let client = hosts.run_in("c", move || {
            UdpSocket::bind(SocketAddr::new(client_ip, 0)).expect("client udp")
        });
        client.set_read_timeout(Some(PATIENCE)).expect("timeout");
        backend.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let me = client.local_addr().expect("client address");
        let mut buf = [0u8; 2048];
        for round in 0..3u8 {
            client.send_to(&[b'q', round], front).expect("client send");
            let (n, peer) = backend
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("backend recv: {e}; oi: {}", oi.stderr_tail()));
            assert_eq!(&buf[..n], &[b'q', round]);
            assert_eq!(peer, me, "the backend sees the client's address and port");
            backend
                .send_to(&[b'r', round], peer)
                .expect("backend reply");
            let (n, from) = client
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("client recv: {e}; oi: {}", oi.stderr_tail()));
            assert_eq!(&buf[..n], &[b'r', round], "the reply comes back through oi");
            assert_eq!(from, front, "from the address the client sent to");
        }
    }
}

#[test]
fn accept_proxy_carried_address_becomes_the_source() {
    if !available() {
        return;
    }
    let hosts = Hosts::new(true);
    let l4 = backend_listener(&hosts, BACKEND4.into());
    let a4 = l4.local_addr().expect("addr");
    // The client speaks for 10.88.1.77, an address no host has: the
    // backend's route to it goes through oi as to the whole network.
    let rules = format!(
        "trust-proxy {CLIENT4}\n{OI_FRONT4} 7002 {BACKEND4} {} [accept-proxy, transparent]\n",
        a4.port()
    );
    let (_dir, oi) = hosts.start_oi(&rules, "");
    let header = format!("PROXY TCP4 10.88.1.77 {OI_FRONT4} 40000 7002\r\n");
    let front = SocketAddr::from((OI_FRONT4, 7002));
    let (got, _, (peer, seen)) = exchange(
        &hosts,
        l4,
        front,
        header.as_bytes(),
        b"up".to_vec(),
        b"down".to_vec(),
    );
    assert_eq!(
        peer.ip(),
        IpAddr::from(Ipv4Addr::new(10, 88, 1, 77)),
        "oi: {}",
        oi.stderr_tail()
    );
    assert_eq!(got, b"down");
    assert_eq!(seen, b"upafter");
}

#[test]
fn without_cap_net_admin_check_warns_and_only_transparent_clients_are_closed() {
    if !available() {
        return;
    }
    // setpriv (util-linux) drops CAP_NET_ADMIN and CAP_NET_RAW (either
    // allows IP_TRANSPARENT) from the bounding set, so oi, though root,
    // runs without them.
    if let Err(e) = run("setpriv", &["--version"]) {
        assert!(std::env::var_os("OI_REQUIRE_TOOLS").is_none(), "{e}");
        eprintln!("skipped: needs setpriv (apt-get install util-linux): {e}");
        return;
    }
    let hosts = Hosts::new(true);
    let l4 = backend_listener(&hosts, BACKEND4.into());
    let a4 = l4.local_addr().expect("addr");
    let rules = format!(
        "logfile @DIR@/oi.log\n\
         {OI_FRONT4} 7000 {BACKEND4} {port} [transparent]\n\
         {OI_FRONT4} 7003 {BACKEND4} {port}\n",
        port = a4.port()
    );
    let without = "setpriv --bounding-set -net_admin,-net_raw --inh-caps -net_admin,-net_raw";
    let (dir, oi) = hosts.start_oi(&rules, without);
    let conf = dir.path().join("oi.conf");
    let check = Command::new("setpriv")
        .args(["--bounding-set", "-net_admin,-net_raw"])
        .args(["--inh-caps", "-net_admin,-net_raw"])
        .arg(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("oi --check");
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{said}");
    assert!(
        said.contains(":2: warning: transparent needs CAP_NET_ADMIN"),
        "--check names the rule's line: {said}"
    );
    // oi said so at start too.
    if !holds_within(PATIENCE, || {
        oi.stderr_tail().contains("which oi does not have")
    }) {
        oi.fail("no start-up warning about the missing capability");
    }
    // The transparent client is closed at once, with nothing sent to it.
    let mut client = hosts.run_in("c", || {
        TcpStream::connect_timeout(&SocketAddr::from((OI_FRONT4, 7000)), PATIENCE).expect("connect")
    });
    client.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut got = Vec::new();
    let _ = client.read_to_end(&mut got);
    assert!(got.is_empty());
    let why = "cannot make the backend socket: IP_TRANSPARENT: Operation not permitted";
    if !holds_within(PATIENCE, || oi.stderr_tail().contains(why)) {
        oi.fail("no warning naming the client's failure and its reason");
    }
    // The plain rule of the same oi still forwards.
    let (got, _, (peer, seen)) = exchange(
        &hosts,
        l4,
        SocketAddr::from((OI_FRONT4, 7003)),
        b"",
        b"up".to_vec(),
        b"down".to_vec(),
    );
    assert_eq!(
        peer.ip(),
        IpAddr::from(Ipv4Addr::new(10, 88, 2, 1)),
        "oi's own address"
    );
    assert_eq!(
        (got.as_slice(), seen.as_slice()),
        (&b"down"[..], &b"upafter"[..])
    );
    let log = wait_for_file(&dir.path().join("oi.log"), |t| {
        t.contains("local-socket-failed")
    });
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        log.contains("local-socket-failed"),
        "{log:?} {files:?} {}",
        std::fs::read_to_string(dir.path().join("oi.conf")).unwrap_or_default()
    );
}

#[test]
fn without_the_routing_the_backend_replies_never_reach_oi() {
    if !available() {
        return;
    }
    // The same hosts without dist/transparent-routing.sh: the backend's
    // SYN-ACK to the client's address reaches oi's namespace, which neither
    // takes it (no mark, no local route) nor forwards it.
    let hosts = Hosts::new(false);
    let l4 = backend_listener(&hosts, BACKEND4.into());
    let rules = format!(
        "logfile @DIR@/oi.log\n\
         {OI_FRONT4} 7000 {BACKEND4} {} [transparent, connect-timeout=1]\n",
        l4.local_addr().expect("addr").port()
    );
    let (dir, oi) = hosts.start_oi(&rules, "");
    let mut client = hosts.run_in("c", || {
        TcpStream::connect_timeout(&SocketAddr::from((OI_FRONT4, 7000)), PATIENCE).expect("connect")
    });
    client.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut got = Vec::new();
    let _ = client.read_to_end(&mut got);
    assert!(got.is_empty(), "closed after oi's connect timed out");
    let log = wait_for_file(&dir.path().join("oi.log"), |t| {
        t.contains("done-local-closed")
    });
    assert!(
        log.contains("done-local-closed"),
        "{log} {}",
        oi.stderr_tail()
    );
    l4.set_nonblocking(true).expect("nonblocking");
    let accepted = l4.accept();
    assert!(
        accepted
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the backend never completed a handshake: {accepted:?}"
    );
}

#[test]
fn cross_protocol_rules_come_from_the_client_address_too() {
    if !available() {
        return;
    }
    let hosts = Hosts::new(true);
    let udp_backend = hosts.run_in("b", || UdpSocket::bind((BACKEND4, 0)).expect("udp"));
    let tcp_backend = backend_listener(&hosts, BACKEND4.into());
    let rules = format!(
        "{OI_FRONT4} 7004 {BACKEND4} {}/udp [transparent]\n\
         {OI_FRONT4} 7005/udp {BACKEND4} {} [transparent]\n",
        udp_backend.local_addr().expect("addr").port(),
        tcp_backend.local_addr().expect("addr").port()
    );
    let (_dir, oi) = hosts.start_oi(&rules, "");
    let client_ip = IpAddr::from(CLIENT4);
    let mut buf = [0u8; 2048];
    // TCP to UDP: the datagrams come from the client's address.
    let mut tcp = hosts.run_in("c", || {
        TcpStream::connect_timeout(&SocketAddr::from((OI_FRONT4, 7004)), PATIENCE).expect("connect")
    });
    tcp.set_read_timeout(Some(PATIENCE)).expect("timeout");
    udp_backend
        .set_read_timeout(Some(PATIENCE))
        .expect("timeout");
    tcp.write_all(b"tcp-up").expect("write");
    let (n, peer) = udp_backend
        .recv_from(&mut buf)
        .unwrap_or_else(|e| panic!("backend recv: {e}; oi: {}", oi.stderr_tail()));
    assert_eq!((&buf[..n], peer.ip()), (&b"tcp-up"[..], client_ip));
    udp_backend.send_to(b"udp-down", peer).expect("reply");
    let mut back = [0u8; 8];
    tcp.read_exact(&mut back).expect("reply through oi");
    assert_eq!(&back, b"udp-down");
    // UDP to TCP: the connection comes from the client's address.
    let udp = hosts.run_in("c", move || {
        UdpSocket::bind(SocketAddr::new(client_ip, 0)).expect("client udp")
    });
    udp.set_read_timeout(Some(PATIENCE)).expect("timeout");
    udp.send_to(b"udp-up", (OI_FRONT4, 7005)).expect("send");
    let (mut s, peer) = tcp_backend.accept().expect("backend accept");
    assert_eq!(peer.ip(), client_ip, "oi: {}", oi.stderr_tail());
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut got = [0u8; 6];
    s.read_exact(&mut got).expect("backend read");
    assert_eq!(&got, b"udp-up");
    s.write_all(b"tcp-down").expect("backend write");
    let (n, _) = udp.recv_from(&mut buf).expect("reply through oi");
    assert_eq!(&buf[..n], b"tcp-down");
}

#[test]
fn a_dual_stack_listener_connects_from_an_ipv4_client_as_ipv4() {
    if !available() {
        return;
    }
    let hosts = Hosts::new(true);
    let l4 = backend_listener(&hosts, BACKEND4.into());
    // `::` takes IPv4 clients as ::ffff:a.b.c.d; the source must be a.b.c.d.
    let rules = format!(
        ":: 7010 {BACKEND4} {} [transparent]\n",
        l4.local_addr().expect("addr").port()
    );
    let (_dir, oi) = hosts.start_oi(&rules, "");
    let front = SocketAddr::from((OI_FRONT4, 7010));
    let (got, _, (peer, seen)) = exchange(&hosts, l4, front, b"", b"up".to_vec(), b"down".to_vec());
    assert_eq!(peer.ip(), IpAddr::from(CLIENT4), "oi: {}", oi.stderr_tail());
    assert_eq!(
        (got.as_slice(), seen.as_slice()),
        (&b"down"[..], &b"upafter"[..])
    );
}

/// `--user` keeps CAP_NET_ADMIN beside CAP_NET_BIND_SERVICE when a rule is
/// transparent at start (CapEff 0x1400), and only the latter otherwise
/// (shared_host.rs checks that case). Needs root and a `nobody` user.
#[test]
fn run_as_a_user_keeps_cap_net_admin_for_a_transparent_rule() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // The harness's notify socket is made by root; nobody must reach it.
    let mut perm = std::fs::metadata(dir.path()).expect("dir").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(dir.path(), perm).expect("chmod");
    let conf = dir.path().join("oi.conf");
    let port = free_port();
    write_atomic(
        &conf,
        &format!("127.0.0.1 {port} 127.0.0.1 9 [transparent]\n"),
    );
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let oi = OiProcess::start(dir.path(), &conf, &["--user", "nobody"]);
    rustix::process::umask(old);
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", oi.child.id())).expect("status");
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    assert_eq!(cap_eff, "0000000000001400", "{}", oi.stderr_tail());
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains("CAP_NET_ADMIN (for transparent rules)"),
        "{stderr}"
    );
    assert!(!stderr.contains("which oi does not have"), "{stderr}");
}
