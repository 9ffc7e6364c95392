//! Running out of descriptors must not take a port down (EMFILE on accept).
//!
//! Alone in its own test binary: it lowers the process's RLIMIT_NOFILE.

mod common;

use common::*;
use oxidinetd::logfile::{Format, LogHandle};
use oxidinetd::server::Settings;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use socket2::{Domain, Socket, Type};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

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

#[test]
fn accept_emfile_backs_off_and_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logpath = dir.path().join("oi.log");
    let log = LogHandle::start().expect("log thread");
    log.reopen(Some(logpath.clone()), Format::Tab)
        .expect("open log");
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(vec![tcp_rule(backend)], Settings::default(), log);
    let addr = srv.addr();

    // Warm up, so lazily created descriptors (reactor, timers) exist before the limit.
    let mut warm = connect(addr);
    warm.write_all(b"warm").expect("warm");
    let mut b = [0u8; 4];
    warm.read_exact(&mut b).expect("warm echo");
    drop(warm);
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.shared.active.load(std::sync::atomic::Ordering::Relaxed) > 0
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }

    // Client sockets are created before the limit is lowered; connecting needs no new descriptor.
    let first = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let second = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let mut logfile = std::fs::File::open(&logpath).expect("open log for reading");
    let mut stat = std::fs::File::open("/proc/self/stat").expect("open stat");
    let saved = getrlimit(Resource::Nofile);
    // Room for exactly one forwarded connection: server accept + backend connect + backend accept.
    let limit = open_fds() + 3;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(limit),
            maximum: saved.maximum,
        },
    )
    .expect("lower RLIMIT_NOFILE");

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
    let deadline = Instant::now() + Duration::from_secs(5);
    while lines_with(&mut logfile, "accept-failed -") == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        lines_with(&mut logfile, "accept-failed -"),
        1,
        "one log line per burst"
    );

    // It must back off, not spin on the readable listener.
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
    setrlimit(Resource::Nofile, saved).expect("restore limit");
}
