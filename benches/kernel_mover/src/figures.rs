//! The figures: oi's processes beside the probe's paths, CPU accounting,
//! and the three measurements (64 B round trip, request/response with many
//! clients, bulk at one and several streams).

use crate::Mover;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An oi process forwarding one port to a listener of the probe's.
pub struct Oi {
    /// The process, killed on drop.
    child: std::process::Child,
    /// Where oi listens.
    pub port: u16,
    /// Where oi connects: the probe accepts each backend socket here.
    pub backends: TcpListener,
    /// Its configuration file, removed on drop.
    conf: std::path::PathBuf,
}

impl Oi {
    /// Starts `bin` forwarding a free port to a new listener, `[splice=on]`
    /// or `[splice=off]`, and waits until it accepts.
    pub fn start(bin: &str, splice: bool) -> Oi {
        let backends = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = std::env::temp_dir().join(format!("kmprobe-{}-{port}.conf", std::process::id()));
        let mode = if splice { "on" } else { "off" };
        std::fs::write(
            &conf,
            format!(
                "127.0.0.1 {port} 127.0.0.1 {} [splice={mode}]\n",
                backends.local_addr().unwrap().port()
            ),
        )
        .unwrap();
        let child = std::process::Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "oi did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // That probe connection: its backend side is accepted and dropped.
        let _ = backends.accept().unwrap();
        Oi {
            child,
            port,
            backends,
            conf,
        }
    }

    /// utime + stime of the oi process.
    fn ticks(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .map(|t| stat_ticks(&t))
            .unwrap_or(0)
    }
}

impl Drop for Oi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.conf);
    }
}

/// utime + stime (clock ticks) from a /proc stat line.
pub fn stat_ticks(text: &str) -> u64 {
    // The fields after the command's closing parenthesis: state is the
    // first, utime the 12th, stime the 13th.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// A reading of the CPU ticks the work of a relay costs: this process's
/// threads (client, relay, backend), oi's, every kworker thread (where the
/// psock's backlog sends the redirected skbs) and the machine's softirq time
/// (loopback's receive path). Other load on the machine only reaches the
/// softirq part.
pub struct Ticks {
    /// This process's and oi's, and the machine's softirq ticks.
    fixed: u64,
    /// Each kworker thread's ticks, by its /proc path: a kworker that exits
    /// between two readings must not make the difference negative.
    kworkers: std::collections::HashMap<std::path::PathBuf, u64>,
}

impl Ticks {
    /// Reads them now.
    pub fn now(m: &Mover) -> Ticks {
        let ois: u64 = m.ois.iter().map(|(_, oi)| oi.ticks()).sum();
        let mine = std::fs::read_to_string("/proc/self/stat")
            .map(|t| stat_ticks(&t))
            .unwrap_or(0);
        let mut kworkers = std::collections::HashMap::new();
        if let Ok(procs) = std::fs::read_dir("/proc") {
            for p in procs.flatten() {
                let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
                    continue;
                };
                for t in tasks.flatten() {
                    let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                    if comm.starts_with("kworker") {
                        let ticks = std::fs::read_to_string(t.path().join("stat"))
                            .map(|t| stat_ticks(&t))
                            .unwrap_or(0);
                        kworkers.insert(t.path(), ticks);
                    }
                }
            }
        }
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let softirq = stat
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(7))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        Ticks {
            fixed: ois + mine + softirq,
            kworkers,
        }
    }

    /// CPU seconds from `earlier` to `self`.
    pub fn since(&self, earlier: &Ticks) -> f64 {
        let kworkers: u64 = self
            .kworkers
            .iter()
            .map(|(k, v)| v.saturating_sub(earlier.kworkers.get(k).copied().unwrap_or(0)))
            .sum();
        let ticks = self.fixed.saturating_sub(earlier.fixed) + kworkers;
        ticks as f64 / 100.0 // USER_HZ, the unit of /proc's ticks
    }
}

/// Bulk client → backend over `streams` connections at once, `mib` MiB
/// in all: `how` is direct, kernel, splice, copy, or one of oi's; returns
/// (seconds, CPU seconds: [`Ticks`]).
pub fn bulk(m: &mut Mover, how: &str, mib: u64, streams: u64, id: u64) -> (f64, f64) {
    let per = (mib / streams.max(1)).max(1);
    let mut writers = Vec::new();
    let mut threads = Vec::new();
    let mut keep = Vec::new();
    for s in 0..streams {
        let (client, a, b, backend) = m.four(how);
        let target = if how == "direct" {
            a.try_clone().unwrap()
        } else {
            backend.try_clone().unwrap()
        };
        match how {
            "kernel" => {
                m.attach(id + s, &a, &b, false);
            }
            "splice" => {
                let (a2, b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
                threads.push(std::thread::spawn(move || splice_relay(&a2, &b2)));
            }
            "copy" => {
                let (a2, b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
                threads.push(std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    while let Ok(n @ 1..) = (&a2).read(&mut buf) {
                        (&b2).write_all(&buf[..n]).unwrap();
                    }
                }));
            }
            _ => {}
        }
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 256 << 10];
            let mut got = 0u64;
            while got < per << 20 {
                match (&target).read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n as u64,
                }
            }
        }));
        writers.push(client);
        keep.push((a, b, backend));
    }
    let busy0 = Ticks::now(m);
    let start = Instant::now();
    let senders: Vec<_> = writers
        .into_iter()
        .map(|client| {
            std::thread::spawn(move || {
                let buf = vec![0x33u8; 1 << 20];
                for _ in 0..per {
                    (&client).write_all(&buf).unwrap();
                }
                client
            })
        })
        .collect();
    let clients: Vec<TcpStream> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    // The readers are the last of `threads` for each stream: all end once
    // every byte arrived; the relays end at the clients' EOF below.
    for c in &clients {
        let _ = c.shutdown(Shutdown::Write);
    }
    // The kernel path passes no FIN on (the forwarder would): its readers
    // stop at their count.
    for t in threads {
        t.join().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let busy1 = Ticks::now(m);
    drop(keep);
    (secs, busy1.since(&busy0))
}

/// socket → pipe → socket until EOF, as oi's splice mover does for bulk.
fn splice_relay(from: &TcpStream, to: &TcpStream) {
    use rustix::pipe::{splice, SpliceFlags};
    let (r, w) = rustix::pipe::pipe().unwrap();
    let _ = rustix::pipe::fcntl_setpipe_size(&r, 256 << 10);
    loop {
        let n = splice(from, None, &w, None, 256 << 10, SpliceFlags::MOVE).unwrap();
        if n == 0 {
            break;
        }
        let mut left = n;
        while left > 0 {
            left -= splice(&r, None, to, None, left, SpliceFlags::MOVE).unwrap();
        }
    }
}

/// One forwarded connection to an echoing backend: the client's socket,
/// and what must be stopped at the end.
pub struct Path {
    /// The client's socket.
    client: TcpStream,
    /// The forwarder's client-side socket, open while the path is.
    _a: TcpStream,
    /// The forwarder's backend-side socket (a kernel path passes the FIN on).
    b: TcpStream,
    /// The backend's socket.
    backend: TcpStream,
    /// The echo thread, and the relay threads of a user-space path.
    threads: Vec<std::thread::JoinHandle<()>>,
    /// kernel, copy or direct.
    kernel: bool,
}

impl Path {
    /// client ↔ (a, b) ↔ echoing backend; `how`: direct (the client talks
    /// to the echo itself), kernel (the verdict), copy (two relay threads;
    /// oi's splice path copies bursts under 16 KiB too).
    fn new(m: &mut Mover, how: &str, id: u64) -> Path {
        let (client, a, b, backend) = m.four(how);
        let echo_end = if how == "direct" {
            a.try_clone().unwrap()
        } else {
            backend.try_clone().unwrap()
        };
        let mut threads = Vec::new();
        match how {
            "kernel" => {
                m.attach(id, &a, &b, false);
            }
            "copy" => {
                for (from, to) in [
                    (a.try_clone().unwrap(), b.try_clone().unwrap()),
                    (b.try_clone().unwrap(), a.try_clone().unwrap()),
                ] {
                    threads.push(std::thread::spawn(move || {
                        let mut buf = vec![0u8; 16 << 10];
                        while let Ok(n @ 1..) = (&from).read(&mut buf) {
                            if (&to).write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Write);
                    }));
                }
            }
            _ => {}
        }
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while (&echo_end).read_exact(&mut buf).is_ok() {
                if (&echo_end).write_all(&buf).is_err() {
                    break;
                }
            }
        }));
        Path {
            client,
            _a: a,
            b,
            backend,
            threads,
            kernel: how == "kernel",
        }
    }

    /// One 64-byte round trip.
    fn round_trip(client: &TcpStream, buf: &mut [u8; 64]) {
        (&*client).write_all(buf).unwrap();
        (&*client).read_exact(buf).unwrap();
    }

    /// Ends the connection and its threads.
    fn end(self) {
        self.client.shutdown(Shutdown::Write).unwrap();
        drop(self.client);
        // The verdict does not carry a FIN: the forwarder passes it on (all
        // bytes were echoed, nothing is in flight).
        if self.kernel {
            let _ = self.b.shutdown(Shutdown::Write);
        }
        let mut threads = self.threads;
        let echo = threads.pop().unwrap();
        let _ = echo.join();
        // The backend's last descriptor: its close ends the relay's way back.
        drop(self.backend);
        for t in threads {
            let _ = t.join();
        }
    }
}

/// 64-byte round trips through one path: p50 in µs.
pub fn rtt(m: &mut Mover, how: &str, rounds: usize, id: u64) -> f64 {
    let path = Path::new(m, how, id);
    let mut times = Vec::with_capacity(rounds);
    let mut buf = [0u8; 64];
    for _ in 0..rounds {
        let t = Instant::now();
        Path::round_trip(&path.client, &mut buf);
        times.push(t.elapsed().as_nanos() as f64 / 1000.0);
    }
    path.end();
    times.sort_by(|x, y| x.partial_cmp(y).unwrap());
    times[times.len() / 2]
}

/// `clients` connections each doing 64-byte request/response for `secs`:
/// round trips per second, all together.
pub fn request_response(m: &mut Mover, how: &str, clients: u64, secs: u64, id: u64) -> f64 {
    let paths: Vec<Path> = (0..clients).map(|i| Path::new(m, how, id + i)).collect();
    let total = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let runners: Vec<_> = paths
        .iter()
        .map(|p| {
            let client = p.client.try_clone().unwrap();
            let total = total.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                let mut n = 0;
                while Instant::now() < deadline {
                    Path::round_trip(&client, &mut buf);
                    n += 1;
                }
                total.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    for r in runners {
        r.join().unwrap();
    }
    for p in paths {
        p.end();
    }
    total.load(Ordering::Relaxed) as f64 / secs as f64
}
