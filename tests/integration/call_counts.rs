//! System calls per message and per connection, counted on the real binary
//! with `strace -c`: the figures the per-thread reactor and the cuts after
//! it brought down (a 64 B round trip from 16.1 calls to 6, a connection
//! from 36.9 to about 17 under load), held in CI. A count does not move with machine noise the way a timing
//! does, so these are tests, not benchmarks (benches/syscalls.sh measures
//! the same beside rinetd and haproxy).
//!
//! strace attaches to oi only once its connection (or listener) is set up,
//! and detaches before the connection closes: what it counts is the load,
//! not start-up, warm-up or shutdown. Where timing can change a count (two
//! events in one `epoll_wait` or in two), the bound allows it and says so.

use crate::common::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// 64 B round trips counted on one TCP connection (or UDP association).
const ROUND_TRIPS: usize = 2_000;

/// Connections counted, one after another.
const CONNECTIONS: usize = 200;

/// Calls and failed calls of one system call over the traced span.
#[derive(Clone, Copy, Debug)]
struct Count {
    /// How often it was made.
    calls: u64,
    /// How often it failed.
    errors: u64,
}

/// strace attached to a running oi, counting its calls (`-c`) in every thread.
struct Traced {
    /// The strace process; interrupted by [`Traced::finish`], killed if
    /// the test fails before that.
    strace: Option<Child>,
    /// Where strace writes its summary when it detaches.
    out: PathBuf,
}

impl Traced {
    /// Attaches to every thread of `pid` and returns once each one is
    /// traced; fails with strace's own message if it cannot attach.
    fn attach(pid: u32, dir: &Path) -> Traced {
        let out = dir.join("strace.out");
        let err = dir.join("strace.err");
        let mut strace = Command::new("strace")
            .args(["-f", "-qq", "-c", "-o"])
            .arg(&out)
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("strace's stderr file"))
            .spawn()
            .expect("start strace");
        wait_until("strace traces every thread of oi", || {
            if let Ok(Some(status)) = strace.try_wait() {
                let said = std::fs::read_to_string(&err).unwrap_or_default();
                panic!("strace could not attach to oi ({status}): {said}");
            }
            all_traced(pid)
        });
        Traced {
            strace: Some(strace),
            out,
        }
    }

    /// Detaches (SIGINT) and returns oi's calls counted, by name, but the
    /// checks of a debug build: its standard library asks whether each
    /// descriptor it closes is open (an `fcntl` with F_GETFD), which a
    /// release build does not. The tests run the debug binary; what they
    /// bound is the release binary's path.
    fn finish(mut self) -> BTreeMap<String, Count> {
        let mut strace = self.strace.take().expect("strace runs until finish");
        let pid = rustix::process::Pid::from_raw(strace.id() as i32).expect("strace's pid");
        rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("interrupt strace");
        let status = strace.wait().expect("wait for strace");
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        // strace writes its summary and then ends by the same signal.
        let interrupted = std::os::unix::process::ExitStatusExt::signal(&status) == Some(2);
        assert!(
            (status.success() || interrupted) && text.contains("total"),
            "strace failed ({status}): {text}"
        );
        let mut calls = summary(&text);
        if cfg!(debug_assertions) {
            calls.remove("fcntl");
        }
        calls
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        if let Some(mut strace) = self.strace.take() {
            let _ = strace.kill();
            let _ = strace.wait();
        }
    }
}

/// Whether every thread of `pid` has a tracer.
fn all_traced(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("status")).is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0"))
        })
    })
}

/// The rows of an `strace -c` table: `% time seconds usecs/call calls
/// [errors] syscall`, the total row left out.
fn summary(text: &str) -> BTreeMap<String, Count> {
    let mut calls = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let numeric = f.first().is_some_and(|v| v.parse::<f64>().is_ok());
        if !numeric || f.len() < 5 || f[f.len() - 1] == "total" {
            continue;
        }
        let Ok(n) = f[3].parse() else { continue };
        let errors = if f.len() == 6 {
            f[4].parse().unwrap_or(0)
        } else {
            0
        };
        calls.insert(f[f.len() - 1].to_string(), Count { calls: n, errors });
    }
    calls
}

/// The table per unit, for a failure message.
fn table(calls: &BTreeMap<String, Count>, units: usize) -> String {
    let mut rows: Vec<_> = calls.iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.calls));
    rows.iter()
        .map(|(name, c)| {
            format!(
                "  {name}: {:.3} ({:.3} failed)\n",
                c.calls as f64 / units as f64,
                c.errors as f64 / units as f64
            )
        })
        .collect()
}

/// Calls of `name` per unit.
fn per(calls: &BTreeMap<String, Count>, name: &str, units: usize) -> f64 {
    calls.get(name).map_or(0, |c| c.calls) as f64 / units as f64
}

/// Fails, with the table, if all calls per `unit` come to more than `most`.
fn assert_total_at_most(calls: &BTreeMap<String, Count>, units: usize, most: f64, unit: &str) {
    let all = calls.values().map(|c| c.calls).sum::<u64>() as f64 / units as f64;
    assert!(
        all <= most,
        "{all:.2} system calls per {unit}, over {most}:\n{}",
        table(calls, units)
    );
}

/// oi forwarding `rule` (rinetd.conf lines) at one thread (at two, which
/// thread takes a connection is the kernel's choice; the calls per
/// connection are the same).
fn start_oi(dir: &Path, rule: &str) -> OiProcess {
    let conf = dir.join("oi.conf");
    write_atomic(&conf, rule);
    OiProcess::start(dir, &conf, &["--threads", "1"])
}

/// oi forwarding a TCP port of its own to an echo backend; the port.
fn tcp_to_echo(dir: &Path) -> (OiProcess, u16) {
    let echo = echo_backend("127.0.0.1:0");
    let port = free_port();
    let rule = format!("127.0.0.1 {port} 127.0.0.1 {}\n", echo.port());
    (start_oi(dir, &rule), port)
}

/// Whether strace is here (CI installs it; elsewhere the test says it skipped).
fn strace_present() -> bool {
    tool_present("strace", "-V", "strace")
}

/// One 64 B round trip on `client` through oi to an echo backend.
fn round_trip(client: &mut TcpStream) {
    let msg = [0x5a_u8; 64];
    client.write_all(&msg).expect("client write");
    let mut got = [0u8; 64];
    client.read_exact(&mut got).expect("echo back through oi");
    assert_eq!(got, msg);
}

#[test]
fn a_64_byte_round_trip_costs_six_system_calls() {
    if !strace_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (oi, port) = tcp_to_echo(dir.path());
    let mut client = connect(local(port));
    // Warm-up: the connection set up, and the second write's TCP_NODELAY
    // made (a one-off per connection, not a cost per message).
    for _ in 0..3 {
        round_trip(&mut client);
    }
    let traced = Traced::attach(oi.child.id(), dir.path());
    for _ in 0..ROUND_TRIPS {
        round_trip(&mut client);
    }
    let calls = traced.finish();
    // One read and one write each way is four; a wait for each direction's
    // bytes is two more. Nothing else runs per message: no epoll_ctl to
    // re-arm, no timerfd, no eventfd (the reactor's design, crates/runtime/src/reactor).
    // The small margin over 6 is oi's periodic work (timers, the status
    // view) over the few seconds strace slows the run to.
    assert_total_at_most(&calls, ROUND_TRIPS, 6.1, "round trip");
    for once_each_way in ["read", "sendto", "epoll_pwait"] {
        let n = per(&calls, once_each_way, ROUND_TRIPS);
        assert!(
            (1.9..=2.05).contains(&n),
            "{once_each_way}: {n:.2} per round trip, not 2:\n{}",
            table(&calls, ROUND_TRIPS)
        );
    }
    drop(client);
    let _ = oi.stop();
}

#[test]
fn a_connection_costs_no_more_system_calls_than_it_needs() {
    if !strace_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (oi, port) = tcp_to_echo(dir.path());
    let pid = oi.child.id();
    // Warm-up: one connection, so buffers and the live list are allocated.
    round_trip(&mut connect(local(port)));
    wait_until("oi closes the warm-up connection", || connections(pid) == 0);
    let traced = Traced::attach(pid, dir.path());
    for _ in 0..CONNECTIONS {
        round_trip(&mut connect(local(port)));
    }
    // oi closes both sockets once the backend's end of data comes back.
    wait_until("oi closes every connection", || connections(pid) == 0);
    let calls = traced.finish();
    // What one connection needs, one after another (benches/syscalls.sh
    // counts fewer per connection under load, where waits are shared):
    // accept4 and its epoll_ctl; socket, SO_KEEPALIVE, connect and its
    // epoll_ctl; a read and a send each way; the client's end of data read
    // and passed on (shutdown), the backend's read; two closes; and at most
    // five waits (the accept; the connect's completion with the first
    // bytes; the reply; each end of data), fewer when events come
    // together. 20 at most; rinetd 0.73 makes 23 for the same connection
    // (strace by hand). Any other call is one this path does not need.
    let most = [
        ("accept4", 1.0),
        ("epoll_ctl", 2.0),
        ("socket", 1.0),
        ("setsockopt", 1.0),
        ("connect", 1.0),
        ("read", 4.0),
        ("sendto", 2.0),
        ("shutdown", 1.0),
        ("close", 2.0),
        ("epoll_pwait", 5.0),
    ];
    assert_total_at_most(&calls, CONNECTIONS, 20.0, "connection");
    for call in calls.keys() {
        let n = per(&calls, call, CONNECTIONS);
        let bound = most
            .iter()
            .find(|(c, _)| c == call)
            .map_or(0.0, |(_, m)| *m);
        // The margin: oi's other threads' periodic work (async-io's timer
        // re-armed once in a run, say), a call in twenty connections.
        assert!(
            n <= bound + 0.05,
            "{call}: {n:.2} per connection, over {bound}:\n{}",
            table(&calls, CONNECTIONS)
        );
    }
    let _ = oi.stop();
}

/// TCP sockets `pid` holds that are not listening: its connections' two
/// ends, the client's and the backend's. From the sockets' inodes in
/// `/proc/PID/fd` and the table of `/proc/PID/net/tcp` (IPv4, as every
/// address here; state `0A` is LISTEN), so nothing else the process holds
/// counts.
fn connections(pid: u32) -> usize {
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let connected: std::collections::HashSet<&str> = table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && f[3] != "0A").then(|| f[9])
        })
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter(|t| {
                let t = t.to_string_lossy();
                t.strip_prefix("socket:[")
                    .and_then(|i| i.strip_suffix(']'))
                    .is_some_and(|i| connected.contains(i))
            })
            .count()
    })
}

#[test]
fn a_lone_udp_round_trip_costs_six_system_calls() {
    if !strace_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (echo, _seen) = udp_echo_backend("127.0.0.1:0");
    let port = free_udp_port();
    let oi = start_oi(
        dir.path(),
        &format!("127.0.0.1 {port}/udp 127.0.0.1 {}/udp\n", echo.port()),
    );
    let server: SocketAddr = local(port);
    let client = udp_client(server);
    // Warm-up: the association made (its socket, its task, its timer).
    udp_roundtrip(&client, server, &[1u8; 64]);
    let traced = Traced::attach(oi.child.id(), dir.path());
    for _ in 0..ROUND_TRIPS {
        assert_eq!(udp_roundtrip(&client, server, &[7u8; 64]), [7u8; 64]);
    }
    let calls = traced.finish();
    // Per lone datagram each way: the wait, one recvmmsg (fewer datagrams
    // than asked for: the socket is drained, no second call to find
    // EAGAIN), one send. The same six as rinetd's select, recvfrom and
    // sendto each way: batching saves calls only when datagrams queue.
    // The margin over 6 as for TCP.
    assert_total_at_most(&calls, ROUND_TRIPS, 6.1, "UDP round trip");
    let _ = oi.stop();
}

#[test]
fn a_dripped_client_hello_is_peeked_twice_not_once_a_segment() {
    if !strace_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = echo_backend("127.0.0.1:0");
    let port = free_port();
    let rule = format!(
        "127.0.0.1 {port} 127.0.0.1 {e} [sni=drip.example.com]\n127.0.0.1 {port} 127.0.0.1 {e}\n",
        e = echo.port()
    );
    let oi = start_oi(dir.path(), &rule);
    let hello = crate::sni_drip::hello_of("drip.example.com", 16 * 1024);
    let traced = Traced::attach(oi.child.id(), dir.path());
    crate::sni_drip::drip(&oi, local(port), &hello);
    let calls = traced.finish();
    // A peek (recvfrom with MSG_PEEK; the pump reads with read) at the
    // first segment, whose record header announces 16 KiB, and one once
    // they are queued: 901 before (a peek at each wake that saw new bytes,
    // of 2,048 segments), each copying all the bytes so far.
    let peeks = per(&calls, "recvfrom", 1);
    assert!(
        peeks <= 3.0,
        "{peeks} peeks at one dripped ClientHello:\n{}",
        table(&calls, 1)
    );
    let _ = oi.stop();
}

/// oi ending TLS (a test CA's leaf for `localhost`) in front of
/// `backend`; oi and its listening port.
fn tls_to(dir: &Path, backend: u16) -> (OiProcess, u16, PathBuf) {
    let ca = crate::tls::ca(dir, "ca");
    let leaf = crate::tls::leaf(dir, &ca, "localhost", 30);
    let port = free_port();
    let rule = format!(
        "127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={},tls-key={}]\n",
        leaf.cert.display(),
        leaf.key.display()
    );
    (start_oi(dir, &rule), port, ca.cert)
}

/// MiB moved each way by the TLS bulk test.
const TLS_MIB: usize = 8;

#[test]
fn tls_bulk_goes_four_records_a_send_each_way() {
    if !strace_present() || !crate::tls::openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // The backend reads the whole upload, then sends the download.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = listener.local_addr().expect("addr").port();
    let pattern: Vec<u8> = (0..TLS_MIB << 20).map(|i| (i % 251) as u8).collect();
    let upload = pattern.clone();
    let served = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().expect("accept");
        let mut got = vec![0u8; upload.len()];
        c.read_exact(&mut got).expect("the upload through oi");
        assert!(got == upload, "the upload reached the backend changed");
        c.write_all(&upload).expect("the download");
    });
    let (oi, port, ca) = tls_to(dir.path(), backend);
    let mut client = crate::tls::rustls_client(port, &ca, "localhost");
    while client.conn.is_handshaking() {
        client
            .conn
            .complete_io(&mut client.sock)
            .expect("handshake with oi");
    }
    let traced = Traced::attach(oi.child.id(), dir.path());
    client.write_all(&pattern).expect("upload through oi");
    client.flush().expect("upload through oi");
    let mut down = vec![0u8; pattern.len()];
    client.read_exact(&mut down).expect("download through oi");
    let calls = traced.finish();
    assert!(down == pattern, "the download reached the client changed");
    served.join().expect("backend");
    // Up: oi decrypts records (16 KiB of plaintext each) and gathers four
    // before a send to the backend; down: it encrypts what it reads and
    // lets rustls hold four records before one sendmsg. 64 sends a MiB each
    // way before (one a record); 16 now when the bytes queue, as they do
    // with strace slowing oi. The bound, 32 a MiB each way, allows a
    // short batch in two.
    let sends = per(&calls, "sendto", TLS_MIB) + per(&calls, "sendmsg", TLS_MIB);
    assert!(
        sends <= 64.0,
        "{sends:.1} sends a MiB (both ways), over 64:\n{}",
        table(&calls, TLS_MIB)
    );
    let _ = oi.stop();
}

#[test]
fn a_tls_handshake_sends_its_tickets_in_one_call() {
    if !strace_present() || !crate::tls::openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = echo_backend("127.0.0.1:0");
    let (oi, port, ca) = tls_to(dir.path(), echo.port());
    let exchange = || {
        let mut client = crate::tls::rustls_client(port, &ca, "localhost");
        client.write_all(b"x").expect("write through oi");
        let mut got = [0u8; 1];
        client.read_exact(&mut got).expect("echo through oi");
        assert_eq!(&got, b"x");
        client.conn.send_close_notify();
        let _ = client.conn.complete_io(&mut client.sock);
    };
    exchange();
    let pid = oi.child.id();
    wait_until("oi closes the warm-up connection", || connections(pid) == 0);
    let traced = Traced::attach(pid, dir.path());
    for _ in 0..CONNECTIONS / 4 {
        exchange();
    }
    wait_until("oi closes every connection", || connections(pid) == 0);
    let calls = traced.finish();
    // To the client: the server's flight, its two session tickets, the
    // echoed byte, close_notify; to the backend: the byte. Five; seven
    // before, when rustls's records went out one write each.
    let units = CONNECTIONS / 4;
    let sends = per(&calls, "sendto", units) + per(&calls, "sendmsg", units);
    assert!(
        sends <= 5.05,
        "{sends:.2} sends a TLS connection, over 5:\n{}",
        table(&calls, units)
    );
    let _ = oi.stop();
}
