//! When no pipe can be had (here: EMFILE from pipe2), a spliced connection
//! falls back to copying and still forwards every byte; the next connection,
//! once descriptors are free again, splices.
//!
//! Alone in its own test binary (one test): it lowers the process's RLIMIT_NOFILE.

use crate::common::*;
use oxidinetd::config::SpliceMode;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use socket2::{Domain, Socket, Type};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Descriptor numbers open in this process, without the one used to list them.
fn fd_numbers() -> Vec<u64> {
    let dir = std::fs::read_dir("/proc/self/fd").expect("list descriptors");
    let mut fds = Vec::new();
    for entry in dir.flatten() {
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        if target.ends_with("fd") && target.starts_with("/proc") {
            continue; // the listing's own handle
        }
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            fds.push(n);
        }
    }
    fds
}

/// The RLIMIT_NOFILE under which exactly `free` more descriptors can be opened
/// (the limit bounds descriptor numbers, and new ones fill the lowest gaps).
fn limit_leaving(free: u64) -> u64 {
    let fds = fd_numbers();
    (0..)
        .find(|&l| l - fds.iter().filter(|&&f| f < l).count() as u64 == free)
        .expect("a limit exists")
}

/// What the backend reports.
#[derive(Debug, PartialEq)]
enum Seen {
    /// A connection was accepted.
    Accepted,
    /// A connection's socket was closed.
    Closed,
}

/// A one-thread echo backend (no dup of the socket: every descriptor counts
/// here) that reports when it accepts and closes each connection.
fn counted_echo_backend() -> (std::net::SocketAddr, mpsc::Receiver<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    let addr = l.local_addr().expect("addr");
    let (report, rx) = mpsc::channel();
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let _ = report.send(Seen::Accepted);
            let mut buf = vec![0u8; 65536];
            while let Ok(n @ 1..) = c.read(&mut buf) {
                if c.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = c.shutdown(Shutdown::Write);
            drop(c);
            let _ = report.send(Seen::Closed);
        }
    });
    (addr, rx)
}

/// Echoes `data` through `s` (already connected) and checks every byte.
fn round_trip(s: TcpStream, data: Vec<u8>) {
    let want = sha256(&data);
    let len = data.len();
    let mut w = s.try_clone().expect("clone client");
    let writer = thread::spawn(move || {
        w.write_all(&data).expect("write");
        w.shutdown(Shutdown::Write).expect("shutdown");
    });
    let mut back = Vec::with_capacity(len);
    let mut s = s;
    s.read_to_end(&mut back).expect("echo");
    writer.join().expect("writer");
    assert_eq!(back.len(), len);
    assert_eq!(sha256(&back), want);
}

#[test]
fn no_pipe_means_copying_not_failing() {
    // Changes or counts what the whole test process has (limits, descriptors).
    if run_in_own_process(module_path!(), "no_pipe_means_copying_not_failing") {
        return;
    }
    let (backend, seen) = counted_echo_backend();
    let next = || seen.recv_timeout(Duration::from_secs(20)).expect("backend");
    // Start the reactor (its descriptors) with a server that does not splice,
    // and wait until that connection's sockets are all closed.
    let warm = splice_server(SpliceMode::Off, backend);
    round_trip(connect(warm.addr()), b"warm".to_vec());
    assert_eq!((next(), next()), (Seen::Accepted, Seen::Closed));
    wait_until("the warm-up connection ended", || {
        warm.open_connections() == 0
    });
    let srv = splice_server(SpliceMode::On, backend);
    let pipes = &srv.shared.pipes;

    // The client socket (and its clone for writing) exist before the limit drops.
    let client = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let saved = getrlimit(Resource::Nofile);
    // Room for the server's accepted socket, its backend socket, the backend's
    // accepted socket and the client's clone for its writer thread; none for a pipe.
    let limit = limit_leaving(4);
    let lowered = Rlimit {
        current: Some(limit),
        maximum: saved.maximum,
    };
    setrlimit(Resource::Nofile, lowered).expect("lower RLIMIT_NOFILE");
    client.connect(&srv.addr().into()).expect("connect");
    let client: TcpStream = client.into();
    assert_eq!(next(), Seen::Accepted);
    let data = pattern(8 * 1024 * 1024, 51);
    round_trip(client, data);
    assert_eq!(
        pipes.unavailable(),
        2,
        "both directions were refused a pipe"
    );
    assert_eq!(pipes.live(), 0, "no pipe was made");
    setrlimit(Resource::Nofile, saved).expect("restore RLIMIT_NOFILE");

    // Descriptors again: the next connection splices.
    round_trip(connect(srv.addr()), pattern(1024 * 1024, 53));
    assert!(pipes.live() > 0, "pipes are used again");
}
