//! Running out of descriptors must not take a port down (EMFILE on accept).
//!
//! Alone in its own test binary: it lowers the process's RLIMIT_NOFILE.

use crate::common::*;
use oxidinetd::Settings;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use socket2::{Domain, Socket, Type};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Re-reads an already open file from the start: at the descriptor limit, opening fails.
fn reread(f: &mut std::fs::File) -> String {
    use std::io::Seek;
    let mut s = String::new();
    let _ = f.rewind().and_then(|_| f.read_to_string(&mut s));
    s
}

/// CPU time (user + system) of this process, in clock ticks, from an open /proc/self/stat.
fn cpu_ticks(stat: &mut std::fs::File) -> u64 {
    let stat = reread(stat);
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fields 14 and 15 of stat (utime, stime) are at 11 and 12 after the name.
    get(11) + get(12)
}

fn lines_with(log: &mut std::fs::File, needle: &str) -> usize {
    reread(log).lines().filter(|l| l.contains(needle)).count()
}

/// An echo backend that reports on the returned channel once each connection's
/// descriptor is closed, so the test knows exactly which descriptors are still open.
/// It costs one descriptor per connection (no clone).
fn reporting_echo_backend() -> (SocketAddr, mpsc::Receiver<()>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    let addr = l.local_addr().expect("backend addr");
    let (closed_tx, closed) = mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let closed_tx = closed_tx.clone();
            std::thread::spawn(move || {
                let (mut r, mut w) = (&c, &c);
                let _ = std::io::copy(&mut r, &mut w);
                drop(c);
                let _ = closed_tx.send(());
            });
        }
    });
    (addr, closed)
}

/// Fills the descriptor table up to the (lowered) limit with copies of `/dev/null`,
/// then frees exactly `room` of them: what remains free is known exactly, however
/// many descriptors the runtime, the harness or the kernel's numbering hold.
fn leave_exactly(room: usize) -> Vec<std::fs::File> {
    let null = std::fs::File::open("/dev/null").expect("open /dev/null");
    let mut filler = Vec::new();
    // Bounded: the limit was set a few dozen above the open count.
    for _ in 0..1000 {
        match null.try_clone() {
            Ok(f) => filler.push(f),
            Err(e) => {
                assert_eq!(
                    e.raw_os_error(),
                    Some(emfile_errno()),
                    "filling stops at EMFILE"
                );
                break;
            }
        }
    }
    drop(null);
    // `null` itself freed one slot.
    for _ in 1..room {
        filler.pop().expect("enough filler descriptors to free");
    }
    filler
}

/// EMFILE as an OS error number.
fn emfile_errno() -> i32 {
    rustix::io::Errno::MFILE.raw_os_error()
}

#[test]
fn accept_emfile_backs_off_and_recovers() {
    // Changes or counts what the whole test process has (limits, descriptors).
    if run_in_own_process(module_path!(), "accept_emfile_backs_off_and_recovers") {
        return;
    }
    let (_dir, logpath, log) = tab_log();
    let (backend, backend_closed) = reporting_echo_backend();
    let srv = start(vec![tcp_rule(backend)], Settings::default(), log);
    let addr = srv.addr();

    // Warm up, so lazily created descriptors (reactor, timers) exist before the limit.
    let mut warm = connect(addr);
    warm.write_all(b"warm").expect("warm");
    let mut b = [0u8; 4];
    warm.read_exact(&mut b).expect("warm echo");
    drop(warm);
    backend_closed
        .recv_timeout(Duration::from_secs(10))
        .expect("backend closes the warm-up connection");
    holds_within(PATIENCE, || srv.open_connections() == 0);
    assert_eq!(srv.open_connections(), 0);

    // Client sockets are created before the limit is lowered; connecting needs no new descriptor.
    let first = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let second = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let mut logfile = std::fs::File::open(&logpath).expect("open log for reading");
    let mut stat = std::fs::File::open("/proc/self/stat").expect("open stat");
    let saved = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(open_fds() as u64 + 32),
            maximum: saved.maximum,
        },
    )
    .expect("lower RLIMIT_NOFILE");
    // Room for exactly one forwarded connection: server accept + backend connect + backend accept.
    let filler = leave_exactly(3);

    first.connect(&addr.into()).expect("connect first");
    let mut first: TcpStream = first.into();
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    first.write_all(b"one!").expect("write");
    first.read_exact(&mut b).expect("first is served");
    assert_eq!(&b, b"one!");

    // The second connection is queued by the kernel, but accept hits EMFILE.
    second
        .connect(&addr.into())
        .expect("connect second (kernel backlog)");
    let mut second: TcpStream = second.into();
    second
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    second.write_all(b"two!").expect("write");
    holds_within(PATIENCE, || lines_with(&mut logfile, "accept-failed -") > 0);
    assert_eq!(
        lines_with(&mut logfile, "accept-failed -"),
        1,
        "one log line per burst"
    );

    // It must back off, not spin on the readable listener (a measurement window, not a sync).
    let before = cpu_ticks(&mut stat);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(600));
    let ticks = cpu_ticks(&mut stat) - before;
    let hz = 100; // USER_HZ on Linux
    let busy = ticks as f64 / hz as f64 / t0.elapsed().as_secs_f64();
    assert!(
        busy < 0.5,
        "server spins while out of descriptors ({busy:.2} cores)"
    );

    // Free the first connection's descriptors: the second is served.
    drop(first);
    second
        .read_exact(&mut b)
        .expect("second is served once descriptors free up");
    assert_eq!(&b, b"two!");
    assert_eq!(lines_with(&mut logfile, "accept-failed -"), 1);
    drop(filler);
    setrlimit(Resource::Nofile, saved).expect("restore limit");
}

/// The descriptor numbers open in process `pid`.
fn open_fd_numbers(pid: u32) -> Vec<u32> {
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("list the process's descriptors")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    fds
}

/// One echo round trip over `s`.
fn unix_echoes(s: &mut std::os::unix::net::UnixStream, msg: &[u8; 4]) -> bool {
    let mut b = [0u8; 4];
    s.write_all(msg).is_ok() && s.read_exact(&mut b).is_ok() && &b == msg
}

/// Through the binary: accept errors on unix listeners are logged
/// once per episode for all listeners, as for TCP ones. oi's descriptor
/// limit is lowered from outside (prlimit) to leave exactly two numbers
/// free: one forwarded connection on listener A takes them, the next
/// connection on A and one on B both meet EMFILE at accept, and stderr has
/// one `accept failed` line. Before, each unix listener had its own flag:
/// one line per listener per episode.
#[test]
fn unix_listeners_log_accept_errors_once_per_episode() {
    use rustix::process::{prlimit, Pid, Resource, Rlimit};
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = echo_backend("127.0.0.1:0");
    let (a, b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "unix:{} 127.0.0.1 {p}\nunix:{} 127.0.0.1 {p}\n",
            a.display(),
            b.display(),
            p = backend.port()
        ),
    );
    // Copying: no pipes appear later to take a descriptor.
    let oi = OiProcess::start(dir.path(), &conf, &["--splice", "off"]);
    let pid = oi.child.id();
    let timeout = Some(Duration::from_secs(10));
    // Warm up both listeners, so whatever is made lazily exists before the
    // limit; the connections stay open, so oi's descriptors stand still
    // once they have echoed.
    let mut warm = Vec::new();
    for path in [&a, &b] {
        let mut s = UnixStream::connect(path).expect("connect to warm up");
        s.set_read_timeout(timeout).expect("timeout");
        assert!(unix_echoes(&mut s, b"warm"), "{}", oi.stderr_tail());
        warm.push(s);
    }
    let open = open_fd_numbers(pid);
    // The limit just past the second free descriptor number: new
    // descriptors can take exactly those two.
    let second_free = (0u32..)
        .filter(|n| !open.contains(n))
        .nth(1)
        .expect("free numbers");
    let rpid = Pid::from_raw(pid as i32).expect("pid");
    let saved = prlimit(
        Some(rpid),
        Resource::Nofile,
        Rlimit {
            current: Some(u64::from(second_free) + 1),
            // oi inherited this process's hard limit.
            maximum: rustix::process::getrlimit(Resource::Nofile).maximum,
        },
    )
    .expect("lower oi's RLIMIT_NOFILE");
    let mut first = UnixStream::connect(&a).expect("connect first");
    first.set_read_timeout(timeout).expect("timeout");
    assert!(unix_echoes(&mut first, b"one!"), "{}", oi.stderr_tail());
    // Queued by the kernel; accept hits EMFILE on both listeners.
    let mut second = UnixStream::connect(&a).expect("connect second");
    let mut third = UnixStream::connect(&b).expect("connect third");
    let failed = |oi: &OiProcess| oi.stderr_tail().matches("accept failed").count();
    wait_until("oi logs the accept failure", || failed(&oi) > 0);
    // A measurement window (not a sync): B's loop, woken by its queued
    // connection, fails too; a second line would show within it.
    let twice = holds_within(Duration::from_millis(500), || failed(&oi) > 1);
    prlimit(Some(rpid), Resource::Nofile, saved).expect("restore oi's limit");
    drop(first);
    for (s, msg) in [(&mut second, b"two!"), (&mut third, b"3rd!")] {
        s.set_read_timeout(timeout).expect("timeout");
        assert!(
            unix_echoes(s, msg),
            "served once descriptors are back\n{}",
            oi.stderr_tail()
        );
    }
    drop(warm);
    let (_, stderr) = oi.stop();
    assert!(!twice, "a second accept failed line\n{stderr}");
    assert_eq!(stderr.matches("accept failed").count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches("accepting connections again").count(),
        1,
        "{stderr}"
    );
}
