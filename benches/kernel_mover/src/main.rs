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
use figures::{bulk, request_response, rtt, Oi};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

mod figures;

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
        // PARSER=1: the strparser mode (stream_parser + stream_verdict),
        // where the kernel reads the socket with tcp_read_sock instead of
        // tcp_read_skb.
        if std::env::var_os("PARSER").is_some() {
            let parser: &mut SkSkb = bpf
                .program_mut("oi_parser")
                .ok_or("no parser")?
                .try_into()
                .map_err(|e| format!("{e}"))?;
            parser.load().map_err(|e| format!("verifier: {e:?}"))?;
            parser
                .attach(socks.fd())
                .map_err(|e| format!("attach: {e}"))?;
        }
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

/// Resets from either side, and the counters to the byte.
fn rst(m: &mut Mover) {
    for (id, side) in [(5u64, "client"), (6, "backend")] {
        let (client, a, b, backend) = four();
        let (ca, cb) = m.attach(id, &a, &b, false);
        (&client).write_all(&[1u8; 1000]).unwrap();
        (&backend).write_all(&[2u8; 333]).unwrap();
        let to_backend = read_for(&backend, Duration::from_millis(300)).len();
        let to_client = read_for(&client, Duration::from_millis(300)).len();
        let (gone, watch) = if side == "client" {
            (client, &a)
        } else {
            (backend, &b)
        };
        socket2::SockRef::from(&gone)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(gone);
        watch
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut buf = [0u8; 16];
        let got = loop {
            match (&*watch).read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                other => break other,
            }
        };
        println!(
            "rst: the {side} reset: read(2) on its forwarder socket gave {:?}; counters: {} bytes redirected to the backend ({to_backend} arrived), {} to the client ({to_client} arrived)",
            got.map_err(|e| e.to_string()),
            m.redirected(ca),
            m.redirected(cb)
        );
    }
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
        "rst" => rst(&mut m),
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
            let streams = num(4, 1);
            let (secs, cpu) = bulk(&mut m, how, mib, streams, 90);
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
            let streams = num(4, 1);
            for round in 1..=rounds {
                for (i, how) in m
                    .modes(&["direct", "kernel", "splice", "copy"])
                    .into_iter()
                    .enumerate()
                {
                    let id = 1000 * (round * 10 + i as u64 + 1);
                    let (secs, cpu) = bulk(&mut m, how, mib, streams, id);
                    let gib = (mib / streams.max(1)).max(1) as f64 * streams as f64 / 1024.0;
                    println!(
                        "bulk -P{streams} round {round} {how:>9}: {:.2} GiB/s, CPU {:.2} s/GiB (this process's threads, oi's, kworkers, softirq)",
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
                    println!("rr round {round} {how:>9}: {clients} clients, 64 B request/response: {rate:.0} round trips/s");
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
                    println!("rtt round {round} {how:>9}: 64 B round trip p50 {p50:.1} µs ({n} round trips)");
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
