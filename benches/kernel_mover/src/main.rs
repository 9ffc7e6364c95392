//! Probe of an sk_skb kernel mover (issue 46): what this kernel does with
//! two TCP sockets whose bytes an `sk_skb/stream_verdict` program redirects
//! to each other through a sockhash. Each subcommand sets up client ↔ (a,
//! b) ↔ backend over loopback, where `a` and `b` are the two sockets a
//! forwarder would hold, and prints one line of findings. See README.md.
//!
//! Not oi's code: it may use `unsafe` (one setsockopt no safe crate wraps)
//! and `unwrap` (a probe that fails should stop at once and say where).

use aya::maps::{HashMap, MapData, SockHash};
use aya::programs::SkSkb;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The verdict program, compiled by build.rs.
const PLAIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mover.o"));
/// The same with the CO-RE read of the peer's write_seq.
const PEER_SEQ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mover_seq.o"));

/// The loaded program and its two maps.
struct Mover {
    /// Keeps the program (and its attachment) alive.
    _bpf: aya::Ebpf,
    /// Key (id << 1 | side) → socket.
    socks: SockHash<MapData, u64>,
    /// Socket cookie → [peer key, bytes redirected, peer's write_seq].
    ends: HashMap<MapData, u64, [u64; 3]>,
    /// oi itself beside the probe's paths (`OI=path/to/oi`): "oi-splice"
    /// and "oi-copy", each an oi process forwarding to a listener here.
    ois: Vec<(&'static str, Oi)>,
}

/// An oi process forwarding one port to a listener of the probe's.
struct Oi {
    /// The process, killed on drop.
    child: std::process::Child,
    /// Where oi listens.
    port: u16,
    /// Where oi connects: the probe accepts each backend socket here.
    backends: TcpListener,
    /// Its configuration file, removed on drop.
    conf: std::path::PathBuf,
}

impl Oi {
    /// Starts `bin` forwarding a free port to a new listener, `[splice=on]`
    /// or `[splice=off]`, and waits until it accepts.
    fn start(bin: &str, splice: bool) -> Oi {
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

impl Mover {
    fn load(object: &[u8]) -> Result<Mover, String> {
        // An owned copy: the ELF parser wants the allocator's alignment,
        // which include_bytes! does not promise.
        let data = object.to_vec();
        let mut bpf = aya::Ebpf::load(&data).map_err(|e| format!("load: {e}"))?;
        let socks = SockHash::try_from(bpf.take_map("socks").ok_or("no socks map")?)
            .map_err(|e| e.to_string())?;
        let ends = HashMap::try_from(bpf.take_map("ends").ok_or("no ends map")?)
            .map_err(|e| e.to_string())?;
        let prog: &mut SkSkb = bpf
            .program_mut("oi_mover")
            .ok_or("no program")?
            .try_into()
            .map_err(|e| format!("{e}"))?;
        prog.load().map_err(|e| format!("verifier: {e:?}"))?;
        prog.attach(socks.fd())
            .map_err(|e| format!("attach: {e}"))?;
        Ok(Mover {
            _bpf: bpf,
            socks,
            ends,
            ois: Vec::new(),
        })
    }

    /// Puts `a` and `b` in the map as connection `id`; `hold_a`: `a`'s
    /// bytes stay on `a` (its entry's peer is 0). Returns the cookies.
    fn attach(&mut self, id: u64, a: &TcpStream, b: &TcpStream, hold_a: bool) -> (u64, u64) {
        let (ka, kb) = (id << 1, id << 1 | 1);
        let ca = rustix::net::sockopt::socket_cookie(a).unwrap();
        let cb = rustix::net::sockopt::socket_cookie(b).unwrap();
        let peer_a = if hold_a { 0 } else { kb };
        self.ends.insert(ca, [peer_a, 0, 0], 0).unwrap();
        self.ends.insert(cb, [ka, 0, 0], 0).unwrap();
        self.socks.insert(ka, a.as_raw_fd(), 0).unwrap();
        self.socks.insert(kb, b.as_raw_fd(), 0).unwrap();
        (ca, cb)
    }

    /// `four()` for `how`; through oi for "oi-splice" and "oi-copy" (then
    /// `a` is a clone of the client and `b` of the backend: oi holds the two
    /// sockets between them).
    fn four(&self, how: &str) -> (TcpStream, TcpStream, TcpStream, TcpStream) {
        let Some((_, oi)) = self.ois.iter().find(|(name, _)| *name == how) else {
            return four();
        };
        let client = TcpStream::connect(("127.0.0.1", oi.port)).unwrap();
        client.set_nodelay(true).unwrap();
        let (backend, _) = oi.backends.accept().unwrap();
        backend.set_nodelay(true).unwrap();
        (
            client.try_clone().unwrap(),
            client,
            backend.try_clone().unwrap(),
            backend,
        )
    }

    /// The modes to measure: the probe's, then oi's when `OI` started them.
    fn modes(&self, probe: &[&'static str]) -> Vec<&'static str> {
        let mut all = probe.to_vec();
        all.extend(self.ois.iter().map(|(name, _)| *name));
        all
    }

    fn redirected(&self, cookie: u64) -> u64 {
        self.ends.get(&cookie, 0).map(|e| e[1]).unwrap_or(0)
    }
}

/// client, a (its accepted end), b, backend (b's accepted end).
fn four() -> (TcpStream, TcpStream, TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let client = TcpStream::connect(addr).unwrap();
    let (a, _) = l.accept().unwrap();
    let b = TcpStream::connect(addr).unwrap();
    let (backend, _) = l.accept().unwrap();
    for s in [&client, &a, &b, &backend] {
        s.set_nodelay(true).unwrap();
    }
    (client, a, b, backend)
}

/// Reads what arrives within `wait`.
fn read_for(s: &TcpStream, wait: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut got = Vec::new();
    while let Ok(n) = (&*s).read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// MemAvailable in KiB.
fn mem_available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// utime + stime (clock ticks) from a /proc stat line.
fn stat_ticks(text: &str) -> u64 {
    // The fields after the command's closing parenthesis: state is the
    // first, utime the 12th, stime the 13th.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// CPU ticks the work of a relay costs: this process's threads (client,
/// relay, backend), every kworker thread (where the psock's backlog sends
/// the redirected skbs), and the machine's softirq time (loopback's
/// receive path). Other load on the machine only reaches the softirq part.
fn cpu_ticks(m: &Mover) -> u64 {
    let ois: u64 = m.ois.iter().map(|(_, oi)| oi.ticks()).sum();
    ois + probe_ticks()
}

/// [`cpu_ticks`] without oi's.
fn probe_ticks() -> u64 {
    let mine = std::fs::read_to_string("/proc/self/stat")
        .map(|t| stat_ticks(&t))
        .unwrap_or(0);
    let mut kworkers = 0;
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
                continue;
            };
            for t in tasks.flatten() {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                if comm.starts_with("kworker") {
                    kworkers += std::fs::read_to_string(t.path().join("stat"))
                        .map(|t| stat_ticks(&t))
                        .unwrap_or(0);
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
    mine + kworkers + softirq
}

/// Writes as much as the client's socket takes within `secs`, nobody
/// reading the far end; returns the bytes taken.
fn flood(client: &TcpStream, secs: u64) -> u64 {
    client.set_nonblocking(true).unwrap();
    let buf = vec![0x5au8; 1 << 20];
    let mut sent = 0u64;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        match (&*client).write(&buf) {
            Ok(n) => sent += n as u64,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    client.set_nonblocking(false).unwrap();
    sent
}

fn set_rcvlowat(s: &TcpStream, v: i32) -> std::io::Result<()> {
    // SAFETY: a valid descriptor, a c_int option value and its size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Bytes queued on `a` before it joined the map: do they reach the backend?
fn stranded(m: &mut Mover) {
    let (client, a, b, backend) = four();
    (&client).write_all(b"sent before the map").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    m.attach(1, &a, &b, false);
    let first = read_for(&backend, Duration::from_millis(500));
    set_rcvlowat(&a, 1).unwrap();
    let kicked = read_for(&backend, Duration::from_millis(500));
    println!(
        "stranded: 19 bytes queued before the sockets joined the map: {} reached the backend within 500 ms; after setsockopt(SO_RCVLOWAT, 1) on the socket: {} more",
        first.len(),
        kicked.len()
    );
}

/// A backend that reads nothing: how much does the client get accepted?
fn unbounded(m: &mut Mover, secs: u64) {
    let (client, a, b, _backend) = four();
    let baseline = {
        let (c2, _a2, _b2, _be2) = four();
        flood(&c2, 1)
    };
    let (ca, _) = m.attach(2, &a, &b, false);
    let before = mem_available();
    let sent = flood(&client, secs);
    let after = mem_available();
    println!(
        "unbounded: backend not reading, {secs} s: the client got {} MiB accepted ({} MiB redirected by the verdict; MemAvailable fell by {} MiB); without the map a non-reading forwarder takes {} MiB",
        sent >> 20,
        m.redirected(ca) >> 20,
        before.saturating_sub(after) >> 10,
        baseline >> 20
    );
}

/// EOF from the client while the redirected bytes still queue for a slow
/// backend: shutting the backend's write half at EOF (what the pump does).
fn eof(m: &mut Mover, mib: u64) {
    let (client, a, b, backend) = four();
    let (ca, _) = m.attach(3, &a, &b, false);
    let total = mib << 20;
    let writer = std::thread::spawn(move || {
        let buf = vec![0x42u8; 1 << 20];
        for _ in 0..mib {
            (&client).write_all(&buf).unwrap();
        }
        client.shutdown(Shutdown::Write).unwrap();
        client
    });
    let mut buf = [0u8; 16];
    let start = Instant::now();
    // A blocking read: the verdict's data_ready wakes the socket's waiters
    // for every burst it redirects, and read(2) then finds nothing and says
    // EAGAIN even on a blocking socket; counted, as user-space wake-ups.
    let mut woken = 0u64;
    let n = loop {
        match (&a).read(&mut buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => woken += 1,
            Err(e) => panic!("read: {e}"),
        }
    };
    let at_eof = start.elapsed();
    let redirected = m.redirected(ca);
    b.shutdown(Shutdown::Write).unwrap();
    let got = read_for(&backend, Duration::from_secs(3)).len() as u64;
    let _client = writer.join().unwrap();
    println!(
        "eof: a blocking read() on the client's socket returned EAGAIN {woken} times while {mib} MiB were redirected, then {n} (EOF) after {at_eof:?} with {} MiB redirected; shutdown(b, SHUT_WR) then: the backend received {} of {} bytes ({} lost)",
        redirected >> 20,
        got,
        total,
        total.saturating_sub(got)
    );
}

/// The hold: the verdict passes `a`'s bytes to `a` itself; nobody reads.
fn hold(m: &mut Mover, secs: u64) {
    let (client, a, b, _backend) = four();
    m.attach(4, &a, &b, true);
    let sent = flood(&client, secs);
    let queued = rustix::io::ioctl_fionread(&a).unwrap_or(0);
    println!(
        "hold: verdict SK_PASS, nobody reading, {secs} s: the client got {} KiB accepted (FIONREAD on the socket: {queued})",
        sent >> 10
    );
    // Then: are the held bytes readable, and do they survive the socket
    // leaving the map (what a hand-over would do)?
    let held = read_for(&a, Duration::from_millis(200)).len();
    (&client_again(&client)).write_all(&[7u8; 65536]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    m.socks.remove(&(4 << 1)).unwrap();
    let after = read_for(&a, Duration::from_millis(300)).len();
    println!(
        "hold: {held} held bytes read back from the socket; of 65536 more held then the socket removed from the map, {after} could be read after the removal"
    );
}

fn client_again(c: &TcpStream) -> TcpStream {
    c.try_clone().unwrap()
}

/// Bulk client → backend through (a, b): `how` is kernel, splice, copy or
/// direct; returns (seconds, busy CPU seconds of the whole machine).
fn bulk(m: &mut Mover, how: &str, mib: u64, id: u64) -> (f64, f64) {
    let (client, a, b, backend) = m.four(how);
    let target: &TcpStream = if how == "direct" { &a } else { &backend };
    let target = target.try_clone().unwrap();
    let mut relay = None;
    match how {
        "kernel" => {
            m.attach(id, &a, &b, false);
        }
        "splice" => {
            let (a2, b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
            relay = Some(std::thread::spawn(move || {
                let (r, w) = rustix::pipe::pipe().unwrap();
                let _ = rustix::pipe::fcntl_setpipe_size(&r, 256 << 10);
                loop {
                    let n = rustix::pipe::splice(
                        &a2,
                        None,
                        &w,
                        None,
                        256 << 10,
                        rustix::pipe::SpliceFlags::MOVE,
                    )
                    .unwrap();
                    if n == 0 {
                        break;
                    }
                    let mut left = n;
                    while left > 0 {
                        left -= rustix::pipe::splice(
                            &r,
                            None,
                            &b2,
                            None,
                            left,
                            rustix::pipe::SpliceFlags::MOVE,
                        )
                        .unwrap();
                    }
                }
            }));
        }
        "copy" => {
            let (a2, b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
            relay = Some(std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = (&a2).read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    (&b2).write_all(&buf[..n]).unwrap();
                }
            }));
        }
        _ => {}
    }
    let count = Arc::new(AtomicU64::new(0));
    let c2 = count.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = (&target).read(&mut buf).unwrap();
            c2.fetch_add(n as u64, Ordering::Relaxed);
            if c2.load(Ordering::Relaxed) >= mib << 20 || n == 0 {
                break;
            }
        }
    });
    let busy0 = cpu_ticks(m);
    let start = Instant::now();
    let buf = vec![0x33u8; 1 << 20];
    for _ in 0..mib {
        (&client).write_all(&buf).unwrap();
    }
    reader.join().unwrap();
    let secs = start.elapsed().as_secs_f64();
    let busy1 = cpu_ticks(m);
    client.shutdown(Shutdown::Write).unwrap();
    if let Some(r) = relay {
        r.join().unwrap();
    }
    let hz = 100.0; // USER_HZ, the unit of /proc's ticks
    (secs, (busy1 - busy0) as f64 / hz)
}

/// One forwarded connection to an echoing backend: the client's socket,
/// and what must be stopped at the end.
struct Path {
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
fn rtt(m: &mut Mover, how: &str, rounds: usize, id: u64) -> f64 {
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
fn request_response(m: &mut Mover, how: &str, clients: u64, secs: u64, id: u64) -> f64 {
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map(String::as_str).unwrap_or("all");
    let num = |i: usize, d: u64| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let mut m = match Mover::load(PLAIN) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("kernel-mover-probe: the verdict program could not be loaded: {e}");
            std::process::exit(2);
        }
    };
    if let Ok(bin) = std::env::var("OI") {
        m.ois.push(("oi-splice", Oi::start(&bin, true)));
        m.ois.push(("oi-copy", Oi::start(&bin, false)));
    }
    match what {
        "stranded" => stranded(&mut m),
        "unbounded" => unbounded(&mut m, num(2, 2)),
        "eof" => eof(&mut m, num(2, 64)),
        "hold" => hold(&mut m, num(2, 2)),
        "peer-seq" => match Mover::load(PEER_SEQ) {
            Ok(_) => {
                println!("peer-seq: the verdict with a CO-RE read of the peer's write_seq loads")
            }
            Err(e) => println!(
                "peer-seq: the verdict with a CO-RE read of the peer's write_seq is refused: {e}"
            ),
        },
        "bulk-one" => {
            let how = args.get(2).map(String::as_str).unwrap_or("kernel");
            let mib = num(3, 1024);
            let (secs, cpu) = bulk(&mut m, how, mib, 90);
            let gib = mib as f64 / 1024.0;
            println!(
                "bulk {how}: {:.2} GiB/s, CPU {:.2} s/GiB",
                gib / secs,
                cpu / gib
            );
        }
        "bulk" => {
            let mib = num(2, 1024);
            let rounds = num(3, 3);
            for round in 1..=rounds {
                for (i, how) in m
                    .modes(&["direct", "kernel", "splice", "copy"])
                    .into_iter()
                    .enumerate()
                {
                    let (secs, cpu) = bulk(&mut m, how, mib, 100 + round * 10 + i as u64);
                    let gib = mib as f64 / 1024.0;
                    println!(
                        "bulk round {round} {how:>6}: {:.2} GiB/s, CPU {:.2} s/GiB (client, relay and backend threads, kworkers, softirq)",
                        gib / secs,
                        cpu / gib
                    );
                }
            }
        }
        "rr" => {
            let clients = num(2, 50);
            let secs = num(3, 5);
            let rounds = num(4, 3);
            for round in 1..=rounds {
                for (i, how) in m
                    .modes(&["direct", "kernel", "copy"])
                    .into_iter()
                    .enumerate()
                {
                    let rate = request_response(
                        &mut m,
                        how,
                        clients,
                        secs,
                        10_000 * (round * 10 + i as u64 + 1),
                    );
                    println!("rr round {round} {how:>6}: {clients} clients, 64 B request/response: {rate:.0} round trips/s");
                }
            }
        }
        "rtt" => {
            let n = num(2, 20000) as usize;
            let rounds = num(3, 3);
            for round in 1..=rounds {
                for (i, how) in m
                    .modes(&["direct", "kernel", "copy"])
                    .into_iter()
                    .enumerate()
                {
                    let p50 = rtt(&mut m, how, n, 200 + round * 10 + i as u64);
                    println!("rtt round {round} {how:>6}: 64 B round trip p50 {p50:.1} µs ({n} round trips)");
                }
            }
        }
        _ => {
            stranded(&mut m);
            unbounded(&mut m, 2);
            eof(&mut m, 64);
            hold(&mut m, 2);
            match Mover::load(PEER_SEQ) {
                Ok(_) => println!(
                    "peer-seq: the verdict with a CO-RE read of the peer's write_seq loads"
                ),
                Err(e) => println!("peer-seq: refused: {e}"),
            }
        }
    }
}
