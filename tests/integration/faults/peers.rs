//! The peers of the fault tests: a transfer backend, checked uploads and
//! downloads with half-close both ways, and oi's memory.
//!
//! Upload: the client sends `U`, its data and a FIN; the backend, still
//! writable after the client's FIN, answers with the SHA-256 and length of
//! what arrived, then its own FIN. Download: the client sends `D`, a seed and
//! a length; the backend sends that data and a FIN; the client, still
//! writable after the backend's FIN, sends `ACK <sha256>`, which the backend
//! checks and reports.

use super::link::Net;
use crate::common::{pattern, sha256, vm_rss_kib};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one transfer may take before it counts as hung.
const TRANSFER_LIMIT: Duration = Duration::from_secs(180);

/// A backend serving uploads and downloads, one thread per connection.
pub struct TransferBackend {
    /// What each download's acknowledgement said (`down-ack-ok` or why not).
    reports: mpsc::Receiver<String>,
}

impl TransferBackend {
    /// Listens on `addr` in namespace `ns`.
    pub fn start(net: &Net, ns: &str, addr: SocketAddr) -> Self {
        let l = net.run_in(ns, move || {
            TcpListener::bind(addr).expect("bind transfer backend")
        });
        let (tx, reports) = mpsc::channel();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { return };
                let tx = tx.clone();
                std::thread::spawn(move || {
                    if let Some(r) = serve(c) {
                        let _ = tx.send(r);
                    }
                });
            }
        });
        TransferBackend { reports }
    }

    /// The next download's report.
    pub fn next_report(&self) -> String {
        self.reports
            .recv_timeout(TRANSFER_LIMIT)
            .unwrap_or_else(|_| "no report".into())
    }
}

/// One connection of the backend; `Some` report for a download.
fn serve(mut c: TcpStream) -> Option<String> {
    c.set_read_timeout(Some(TRANSFER_LIMIT)).ok()?;
    let mut cmd = [0u8; 1];
    c.read_exact(&mut cmd).ok()?;
    match cmd[0] {
        b'U' => {
            let mut data = Vec::new();
            c.read_to_end(&mut data).ok()?;
            let reply = format!("{} {}\n", sha256(&data), data.len());
            c.write_all(reply.as_bytes()).ok()?;
            c.shutdown(Shutdown::Write).ok()?;
            None
        }
        b'D' => {
            let mut head = [0u8; 16];
            if c.read_exact(&mut head).is_err() {
                return Some("download: no header".into());
            }
            let seed = u64::from_le_bytes(head[..8].try_into().ok()?);
            let len = u64::from_le_bytes(head[8..].try_into().ok()?) as usize;
            let data = pattern(len, seed);
            // A client that stops reading (the memory test) ends this with an error.
            if c.write_all(&data).is_err() || c.shutdown(Shutdown::Write).is_err() {
                return None;
            }
            let mut ack = String::new();
            let _ = (&mut c).take(200).read_to_string(&mut ack);
            Some(if ack == format!("ACK {}\n", sha256(&data)) {
                "down-ack-ok".into()
            } else {
                format!("down-ack-bad {ack:?}")
            })
        }
        _ => Some(format!("bad command {}", cmd[0])),
    }
}

/// A TCP connection to `to`, made in namespace `ns`.
pub fn client_connect(net: &Net, ns: &str, to: SocketAddr) -> TcpStream {
    let s = net.run_in(ns, move || {
        TcpStream::connect_timeout(&to, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("connect {to}: {e}"))
    });
    s.set_read_timeout(Some(TRANSFER_LIMIT)).expect("timeout");
    s.set_write_timeout(Some(TRANSFER_LIMIT)).expect("timeout");
    s
}

/// Uploads `len` bytes; checks the backend's digest, which comes after our
/// FIN. Returns how long it took.
pub fn upload(mut s: TcpStream, len: usize, seed: u64) -> Duration {
    let start = Instant::now();
    let data = pattern(len, seed);
    s.write_all(b"U").expect("command");
    s.write_all(&data).expect("upload");
    s.shutdown(Shutdown::Write).expect("FIN");
    let mut reply = String::new();
    s.read_to_string(&mut reply)
        .expect("the reply after our FIN");
    assert_eq!(
        reply,
        format!("{} {len}\n", sha256(&data)),
        "what the backend received"
    );
    start.elapsed()
}

/// Downloads `len` bytes (counting them into `progress`), checks them, and
/// acknowledges after the backend's FIN. Returns how long it took.
pub fn download(
    mut s: TcpStream,
    len: usize,
    seed: u64,
    progress: Option<Arc<AtomicU64>>,
) -> Duration {
    let start = Instant::now();
    let mut head = vec![b'D'];
    head.extend_from_slice(&seed.to_le_bytes());
    head.extend_from_slice(&(len as u64).to_le_bytes());
    s.write_all(&head).expect("command");
    let mut data = Vec::with_capacity(len);
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = s.read(&mut buf).expect("download");
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(p) = &progress {
            p.store(data.len() as u64, Ordering::Relaxed);
        }
        assert!(data.len() <= len, "more than was sent");
    }
    assert_eq!(data.len(), len, "download length");
    let digest = sha256(&data);
    assert!(digest == sha256(&pattern(len, seed)), "download corrupted");
    s.write_all(format!("ACK {digest}\n").as_bytes())
        .expect("writable after the backend's FIN");
    s.shutdown(Shutdown::Write).expect("FIN");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("EOF");
    start.elapsed()
}

/// Asks for `len` bytes and reads for `limit`, then drops the connection;
/// returns the bytes read and the time.
pub fn read_for(mut s: TcpStream, len: usize, seed: u64, limit: Duration) -> (u64, Duration) {
    let start = Instant::now();
    let mut head = vec![b'D'];
    head.extend_from_slice(&seed.to_le_bytes());
    head.extend_from_slice(&(len as u64).to_le_bytes());
    s.write_all(&head).expect("command");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let expected = pattern(len, seed);
    let mut got = 0usize;
    let mut buf = vec![0u8; 65_536];
    // Past `limit`, keep reading until the first bytes come (up to 8 x
    // `limit`): on a loaded machine the user-space link can take seconds to
    // carry the command and the first segment, and a window that saw no data
    // says nothing about oi's memory under a slow reader. (A CI run beside
    // the fuzzers and four builds read 0 bytes in 4.4 s; alone, 376 KB.)
    let hard_limit = limit.saturating_mul(8);
    while start.elapsed() < limit || (got == 0 && start.elapsed() < hard_limit) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                assert_eq!(&buf[..n], &expected[got..got + n], "data at {got}");
                got += n;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    (got as u64, start.elapsed())
}

/// Samples a process's VmRSS every 20 ms and keeps the peak.
pub struct RssSampler {
    /// Ends the sampling.
    stop: Arc<AtomicBool>,
    /// The sampling thread; returns the peak.
    thread: std::thread::JoinHandle<u64>,
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !s.load(Ordering::Relaxed) {
                peak = peak.max(vm_rss_kib(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak.max(vm_rss_kib(pid))
        });
        RssSampler { stop, thread }
    }

    /// The peak VmRSS in KiB.
    pub fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

/// Sends `count` numbered datagrams of `size` bytes from `s` to `to`, one
/// between receives (at most 20 ms apart), and collects the echoes until none came for 1.5 s after the
/// last send. Returns (distinct datagrams echoed, echoes received).
pub fn udp_exchange(
    s: std::net::UdpSocket,
    to: SocketAddr,
    id: u8,
    count: usize,
    size: usize,
) -> (usize, usize) {
    s.set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let mut seen = vec![false; count];
    let mut received = 0;
    let mut buf = [0u8; 2048];
    let mut last = Instant::now();
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if sent < count {
            let mut d = vec![id; size];
            d[1..3].copy_from_slice(&(sent as u16).to_le_bytes());
            s.send_to(&d, to).expect("send datagram");
            sent += 1;
            last = Instant::now();
        } else if last.elapsed() > Duration::from_millis(1500) {
            break;
        }
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            assert_eq!(from, to, "a reply from elsewhere");
            assert_eq!((n, buf[0]), (size, id), "someone else's datagram");
            let seq = u16::from_le_bytes([buf[1], buf[2]]) as usize;
            seen[seq] = true;
            received += 1;
            last = last.max(Instant::now());
        }
    }
    (seen.iter().filter(|s| **s).count(), received)
}
