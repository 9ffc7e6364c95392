//! A shared bandwidth limit serves its connections in turn, through the
//! real binary: one client address with 50 downloads and another with 1,
//! under `rule-rate` (all 51 even) and under `rule-rate` with `client-rate`
//! (the 50 even within their client's share, the two clients even).
//!
//! The window is counted in bytes, not time: it starts once the warm-up's
//! bytes have arrived and ends once the window's have, so a loaded machine
//! makes it last longer, not come out different. At these rates a turn is
//! 16 KiB (`stats/rate.rs`, "Fair shares"), so the window holds about four
//! rounds of the 50: a connection left out of one round, or served twice in
//! one, shows in Jain's index (1 is even, 1/n is one connection taking all).

use crate::common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 1024-based, as the options read `M`.
const MIB: u64 = 1 << 20;

/// How long the warm-up and the window may take before the test fails (at
/// the rates below they need about 1 s and 3 s).
const LIMIT: Duration = Duration::from_secs(60);

/// A backend that writes to each connection until it goes away.
fn pouring_backend() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind source");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let data = pattern(64 * 1024, 5);
                while c.write_all(&data).is_ok() {}
            });
        }
    });
    addr
}

/// Jain's fairness index of `xs`.
fn jain(xs: &[u64]) -> f64 {
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let squares: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (xs.len() as f64 * squares)
}

/// Downloads through oi, each read by a thread of its own into its counter.
struct Downloads {
    /// Bytes each connection has received so far.
    got: Vec<Arc<AtomicU64>>,
    /// Tells the readers to stop.
    stop: Arc<AtomicBool>,
    /// The readers, joined at the end.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Downloads {
    /// Opens one download to `to` from each address of `from`.
    fn open(from: &[&str], to: SocketAddr) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut got = Vec::new();
        let mut readers = Vec::new();
        for ip in from {
            let mut s: TcpStream = connect_from(ip, to);
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .expect("timeout");
            let count = Arc::new(AtomicU64::new(0));
            let (c, halt) = (count.clone(), stop.clone());
            readers.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while !halt.load(Ordering::Relaxed) {
                    match s.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            c.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e) if is_timeout(&e) => {}
                        Err(_) => return,
                    }
                }
            }));
            got.push(count);
        }
        Downloads { got, stop, readers }
    }

    /// Each connection's bytes so far.
    fn now(&self) -> Vec<u64> {
        self.got.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }

    /// Waits until the connections `of` together have received `bytes` more
    /// than in `since`; returns what each has then. Fails (with oi's stderr)
    /// after [`LIMIT`].
    fn after(&self, oi: &OiProcess, since: &[u64], of: usize, bytes: u64) -> Vec<u64> {
        let deadline = Instant::now() + LIMIT;
        loop {
            let now = self.now();
            let moved: u64 = now[..of].iter().zip(since).map(|(n, s)| n - s).sum();
            if moved >= bytes {
                return now;
            }
            if Instant::now() > deadline {
                oi.fail(&format!("{moved} of {bytes} bytes in {LIMIT:?}: {now:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the readers and closes the connections.
    fn close(self) {
        self.stop.store(true, Ordering::Relaxed);
        for r in self.readers {
            r.join().expect("reader");
        }
    }
}

/// A read that timed out (`WouldBlock` or `TimedOut`, by platform).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Starts oi with one rule of `options` to a pouring backend, opens 50
/// downloads from 127.0.0.1 and 1 from 127.0.0.2, and returns the bytes
/// each received in a window of `window` bytes of the first `of`
/// connections, after a warm-up of `warm` bytes of theirs.
fn fifty_and_one(options: &str, of: usize, warm: u64, window: u64) -> Vec<u64> {
    let backend = pouring_backend();
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "127.0.0.1 {port} 127.0.0.1 {} [{options}]\n",
            backend.port()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let mut from = vec!["127.0.0.1"; 50];
    from.push("127.0.0.2");
    let downloads = Downloads::open(&from, local(port));
    let zero = vec![0; from.len()];
    let start = downloads.after(&oi, &zero, of, warm);
    let end = downloads.after(&oi, &start, of, window);
    downloads.close();
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
    end.iter().zip(&start).map(|(e, s)| e - s).collect()
}

#[test]
fn a_rule_limit_serves_every_connection_its_share() {
    // 51 connections of 16 KiB turns at 1 MiB/s: a round is 0.8 s; the
    // window is 3 s worth (a warm-up of 1 s first).
    let got = fifty_and_one("rule-rate=1M, splice=on", 51, MIB, 3 * MIB);
    let index = jain(&got);
    assert!(
        got.iter().all(|&x| x > 0),
        "a connection got nothing: {got:?}"
    );
    assert!(index >= 0.9, "Jain's index {index:.3}: {got:?}");
}

#[test]
fn a_client_limit_under_a_rule_limit_serves_every_connection_of_a_client() {
    // Each client has 1 MiB/s of the rule's 2: the 50 of 127.0.0.1 take
    // 16 KiB turns of their client's, a round of 0.8 s; the window is 3 s
    // of theirs (a warm-up of 1 s first).
    let got = fifty_and_one("rule-rate=2M, client-rate=1M, splice=off", 50, MIB, 3 * MIB);
    let (many, one) = got.split_at(50);
    let index = jain(many);
    assert!(
        many.iter().all(|&x| x > 0),
        "a connection got nothing: {got:?}"
    );
    assert!(index >= 0.9, "Jain's index of the 50 {index:.3}: {got:?}");
    // The two clients share the rule's bucket evenly too.
    let clients = [many.iter().sum::<u64>(), one[0]];
    let index = jain(&clients);
    assert!(
        index >= 0.9,
        "Jain's index of the 2 clients {index:.3}: {clients:?}"
    );
}
