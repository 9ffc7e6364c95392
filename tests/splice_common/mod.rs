//! Helpers shared by the splice test binaries (each includes this module).
#![allow(dead_code)]

use super::common::*;
use oxidinetd::config::SpliceMode;
use oxidinetd::logfile::LogHandle;
use oxidinetd::server::Settings;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// A server forwarding to `backend` with `--splice` set to `mode`.
pub fn server(mode: SpliceMode, backend: SocketAddr) -> TestServer {
    let settings = Settings {
        splice: mode,
        ..Settings::default()
    };
    start(vec![tcp_rule(backend)], settings, LogHandle::disabled())
}

/// Polls `cond` until it holds; fails the test after 20 s.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Descriptors this process has open.
pub fn open_fds() -> usize {
    // The directory handle itself is one of the entries.
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1))
}

/// Writes `data` without blocking until the socket would block and `stalled`
/// says the forwarder is stuck too; returns how many bytes went out.
pub fn fill(s: &mut TcpStream, data: &[u8], stalled: impl Fn() -> bool) -> usize {
    s.set_nonblocking(true).expect("nonblocking");
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "forwarder never stalled");
        assert!(sent < data.len(), "{sent} bytes never filled the buffers");
        let end = (sent + 65536).min(data.len());
        match s.write(&data[sent..end]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if stalled() {
                    break;
                }
                thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    s.set_nonblocking(false).expect("blocking");
    sent
}
