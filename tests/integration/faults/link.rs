//! A packet-level fault link in user space, for kernels without netem.
//!
//! Each [`Link`] is two TUN devices, each moved into a network namespace the
//! test created, and four threads in the test process that carry the IP
//! packets one device's kernel sends to the other device's kernel: a reader
//! per direction decides each packet's fate (loss, duplication, a delay with
//! jitter, reordering, a rate limit) and queues it by release time; a writer
//! per direction hands it to the other kernel when it is due. Real kernel TCP
//! and UDP run on both ends, so retransmission, congestion control and
//! half-close are the kernel's own. Every decision comes from a seeded
//! generator: a failing run prints its seed.
//!
//! What the impairments mean (as netem's of the same names):
//! - `loss`: each packet is dropped with this probability;
//! - `duplicate`: each packet that survives is sent twice with this probability;
//! - `delay` ± `jitter`: a uniform sample in [delay − jitter, delay + jitter];
//!   packets keep their order (a packet is never released before the one
//!   queued ahead of it), as netem does with a rate;
//! - `reorder`: this share of the packets skip the delay and go at once,
//!   ahead of the ones queued (netem's `reorder`);
//! - `rate`: packets leave one after another at this many bits per second;
//!   at most `limit` wait, further ones are dropped (a router's tail drop);
//! - `down`: every packet is dropped, in both directions, until it is up.

use std::collections::BinaryHeap;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a link does to the packets crossing it, each direction alike.
#[derive(Clone, Debug)]
pub struct Impairment {
    /// Probability that a packet is dropped.
    pub loss: f64,
    /// Mean one-way delay.
    pub delay: Duration,
    /// Half-width of the uniform spread around `delay`.
    pub jitter: Duration,
    /// Probability that a packet skips the delay (overtakes those queued).
    pub reorder: f64,
    /// Probability that a packet is sent twice.
    pub duplicate: f64,
    /// Bits per second the link carries, `None` for as fast as the relay goes.
    pub rate: Option<u64>,
    /// Packets that may wait in one direction; further ones are dropped.
    pub limit: usize,
}

impl Impairment {
    /// A perfect link.
    pub fn none() -> Self {
        Impairment {
            loss: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            reorder: 0.0,
            duplicate: 0.0,
            rate: None,
            limit: 1000,
        }
    }

    /// 1% loss, 50 ms ± 10 ms delay, 1% reordering, 1% duplication.
    pub fn wan() -> Self {
        Impairment {
            loss: 0.01,
            delay: Duration::from_millis(50),
            jitter: Duration::from_millis(10),
            reorder: 0.01,
            duplicate: 0.01,
            ..Self::none()
        }
    }

    /// Every packet dropped.
    pub fn black_hole() -> Self {
        Impairment {
            loss: 1.0,
            ..Self::none()
        }
    }

    /// A link of `bits_per_second` with `limit` packets of queue.
    pub fn rate(bits_per_second: u64, limit: usize) -> Self {
        Impairment {
            rate: Some(bits_per_second),
            limit,
            ..Self::none()
        }
    }
}

/// What one direction of a link did, packet by packet.
#[derive(Default, Debug)]
pub struct Counts {
    /// Packets read from the sending kernel.
    pub packets: AtomicU64,
    /// Their bytes (IP headers included).
    pub bytes: AtomicU64,
    /// Dropped by `loss`.
    pub lost: AtomicU64,
    /// Dropped while the link was down.
    pub down: AtomicU64,
    /// Dropped because `limit` packets were waiting.
    pub overflow: AtomicU64,
    /// Sent twice.
    pub duplicated: AtomicU64,
    /// Sent ahead of the queue.
    pub reordered: AtomicU64,
    /// Handed to the receiving kernel (duplicates included).
    pub delivered: AtomicU64,
    /// UDP datagrams (IPv4 protocol 17) read from the sending kernel.
    pub udp_in: AtomicU64,
    /// UDP datagrams handed to the receiving kernel (duplicates included).
    pub udp_delivered: AtomicU64,
}

/// Whether `packet` is an IPv4 UDP datagram.
fn is_udp(packet: &[u8]) -> bool {
    packet.len() > 9 && packet[0] >> 4 == 4 && packet[9] == 17
}

impl Counts {
    /// One line for the test's output.
    pub fn summary(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{} packets ({} bytes): {} lost, {} down, {} overflow, {} duplicated, {} reordered, {} delivered",
            g(&self.packets),
            g(&self.bytes),
            g(&self.lost),
            g(&self.down),
            g(&self.overflow),
            g(&self.duplicated),
            g(&self.reordered),
            g(&self.delivered)
        )
    }
}

/// A packet waiting to be released.
struct Queued {
    /// When it may go.
    at: Instant,
    /// Arrival order, so equal times keep it.
    seq: u64,
    /// The IP packet.
    data: Vec<u8>,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    /// Reversed: the heap's top is the earliest.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// One direction's queue, shared by its reader and writer.
#[derive(Default)]
struct Queue {
    /// Packets by release time.
    heap: Mutex<BinaryHeap<Queued>>,
    /// Wakes the writer when a packet is queued or the link stops.
    ready: Condvar,
}

/// State the relay threads and the test share.
struct Shared {
    /// The impairment in force.
    impair: Mutex<Impairment>,
    /// The link is down: everything is dropped.
    down: AtomicBool,
    /// The threads end.
    stop: AtomicBool,
    /// Per direction: a → b, b → a.
    counts: [Counts; 2],
    /// Per direction.
    queues: [Queue; 2],
}

/// A running link between two namespaces; stops when dropped.
pub struct Link {
    /// What the threads share.
    shared: Arc<Shared>,
    /// The relay threads, joined on drop.
    threads: Vec<JoinHandle<()>>,
    /// The seed the link's decisions came from.
    seed: u64,
}

/// xorshift64*: small, seeded, good enough to decide packets' fates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

impl Link {
    /// Takes the link down (every packet dropped) or up again.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Counts for a → b (0) and b → a (1).
    pub fn counts(&self) -> &[Counts; 2] {
        &self.shared.counts
    }

    /// Both directions, one line each.
    pub fn summary(&self) -> String {
        format!(
            "seed {}; a->b {}; b->a {}",
            self.seed,
            self.shared.counts[0].summary(),
            self.shared.counts[1].summary()
        )
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for q in &self.shared.queues {
            q.ready.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Reads packets from `from` and queues them in direction `dir`'s queue.
fn reader(shared: Arc<Shared>, from: Arc<tun::Device>, dir: usize, seed: u64) {
    let mut rng = Rng(seed | 1);
    let mut buf = vec![0u8; 65_536];
    let mut seq = 0u64;
    // When the last delayed packet goes (keeps delayed packets in order) and
    // when the rate-limited link is free again.
    let mut last_release = Instant::now();
    let mut link_free = Instant::now();
    let counts = &shared.counts[dir];
    let queue = &shared.queues[dir];
    while !shared.stop.load(Ordering::Relaxed) {
        let n = match from.recv_timeout(&mut buf, Duration::from_millis(100)) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            // The device is gone (its namespace was deleted).
            Err(_) => return,
        };
        counts.packets.fetch_add(1, Ordering::Relaxed);
        counts.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if is_udp(&buf[..n]) {
            counts.udp_in.fetch_add(1, Ordering::Relaxed);
        }
        if shared.down.load(Ordering::SeqCst) {
            counts.down.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let imp = shared
            .impair
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if rng.chance(imp.loss) {
            counts.lost.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let copies = if rng.chance(imp.duplicate) {
            counts.duplicated.fetch_add(1, Ordering::Relaxed);
            2
        } else {
            1
        };
        let now = Instant::now();
        let at = if rng.chance(imp.reorder) {
            counts.reordered.fetch_add(1, Ordering::Relaxed);
            now
        } else {
            let spread = imp.jitter.as_secs_f64() * (2.0 * rng.unit() - 1.0);
            let delay = Duration::from_secs_f64((imp.delay.as_secs_f64() + spread).max(0.0));
            let mut at = (now + delay).max(last_release);
            if let Some(rate) = imp.rate.filter(|r| *r > 0) {
                at = at.max(link_free);
                link_free = at + Duration::from_secs_f64((n * 8) as f64 / rate as f64);
            }
            last_release = at;
            at
        };
        let mut heap = queue.heap.lock().unwrap_or_else(|e| e.into_inner());
        if heap.len() >= imp.limit {
            counts.overflow.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        for _ in 0..copies {
            seq += 1;
            heap.push(Queued {
                at,
                seq,
                data: buf[..n].to_vec(),
            });
        }
        drop(heap);
        queue.ready.notify_one();
    }
}

/// Hands direction `dir`'s packets to `to` when they are due.
fn writer(shared: Arc<Shared>, to: Arc<tun::Device>, dir: usize) {
    let queue = &shared.queues[dir];
    let counts = &shared.counts[dir];
    let mut heap = queue.heap.lock().unwrap_or_else(|e| e.into_inner());
    while !shared.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        match heap.peek().map(|q| q.at) {
            Some(at) if at <= now => {
                if let Some(q) = heap.pop() {
                    drop(heap);
                    // A full receive queue or a device going away loses the
                    // packet, as a wire would.
                    if to.send(&q.data).is_ok() {
                        counts.delivered.fetch_add(1, Ordering::Relaxed);
                        if is_udp(&q.data) {
                            counts.udp_delivered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    heap = queue.heap.lock().unwrap_or_else(|e| e.into_inner());
                }
            }
            next => {
                let wait = next.map_or(Duration::from_millis(100), |at| at - now);
                heap = queue
                    .ready
                    .wait_timeout(heap, wait.min(Duration::from_millis(100)))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

/// Runs `ip` with `args`; Err carries what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e} (apt-get install iproute2)", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Network namespaces the test creates, and the links between them; all
/// removed when dropped (links first, so no thread writes to a vanished device).
pub struct Net {
    /// Prefix of every namespace and device name, unique to this process and net.
    tag: String,
    /// The namespaces' full names.
    namespaces: Vec<String>,
    /// The links, in creation order.
    links: Vec<Link>,
}

/// Nets created by this process so far (names must be unique).
static NETS: AtomicU64 = AtomicU64::new(0);

/// TUN devices created by this process so far.
static DEVICES: AtomicU64 = AtomicU64::new(0);

impl Net {
    /// Why this machine cannot run the fault tests, if it cannot.
    pub fn unavailable() -> Option<String> {
        if !rustix::process::geteuid().is_root() {
            return Some("needs root (network namespaces, TUN devices)".into());
        }
        if !std::path::Path::new("/dev/net/tun").exists() {
            return Some("needs /dev/net/tun (the kernel's TUN driver)".into());
        }
        if let Err(e) = ip(&["-V"]) {
            return Some(e);
        }
        None
    }

    /// Creates one namespace per name in `names` (loopback up in each).
    pub fn new(names: &[&str]) -> Net {
        let n = NETS.fetch_add(1, Ordering::Relaxed);
        let tag = format!("oif{}x{n}", std::process::id());
        let mut net = Net {
            tag,
            namespaces: Vec::new(),
            links: Vec::new(),
        };
        for name in names {
            let full = format!("{}{name}", net.tag);
            ip(&["netns", "add", &full]).unwrap_or_else(|e| panic!("{e}"));
            net.namespaces.push(full.clone());
            ip(&["-n", &full, "link", "set", "lo", "up"]).unwrap_or_else(|e| panic!("{e}"));
        }
        net
    }

    /// The full name of namespace `name`.
    pub fn ns(&self, name: &str) -> String {
        let full = format!("{}{name}", self.tag);
        assert!(self.namespaces.contains(&full), "no namespace {name}");
        full
    }

    /// Joins namespaces `a` and `b` with a fault link: `a_ip`/24 on a's
    /// device, `b_ip`/24 on b's. Returns the link's index for [`Net::link`].
    pub fn connect(
        &mut self,
        (a, a_ip): (&str, Ipv4Addr),
        (b, b_ip): (&str, Ipv4Addr),
        impair: Impairment,
        seed: u64,
    ) -> usize {
        let index = self.links.len();
        let mut devices = Vec::new();
        for (ns, addr) in [(a, a_ip), (b, b_ip)] {
            // At most 15 bytes, unique in the process and among processes.
            let name = format!(
                "oif{}d{}",
                std::process::id() % 100_000,
                DEVICES.fetch_add(1, Ordering::Relaxed) % 100_000
            );
            assert!(name.len() <= 15, "device name {name} too long");
            let mut config = tun::Configuration::default();
            config.tun_name(&name).layer(tun::Layer::L3);
            config.platform_config(|p| {
                p.ensure_root_privileges(false);
            });
            let dev = tun::create(&config).unwrap_or_else(|e| panic!("TUN device {name}: {e}"));
            let full = self.ns(ns);
            let cidr = format!("{addr}/24");
            for args in [
                vec!["link", "set", "dev", &name, "netns", &full],
                vec!["-n", &full, "addr", "add", &cidr, "dev", &name],
                vec!["-n", &full, "link", "set", "dev", &name, "up"],
            ] {
                ip(&args).unwrap_or_else(|e| panic!("{e}"));
            }
            devices.push(Arc::new(dev));
        }
        let shared = Arc::new(Shared {
            impair: Mutex::new(impair),
            down: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            counts: Default::default(),
            queues: Default::default(),
        });
        let mut threads = Vec::new();
        for dir in 0..2 {
            let (from, to) = (Arc::clone(&devices[dir]), Arc::clone(&devices[1 - dir]));
            let s = Arc::clone(&shared);
            let dir_seed = seed ^ (dir as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            threads.push(std::thread::spawn(move || reader(s, from, dir, dir_seed)));
            let s = Arc::clone(&shared);
            threads.push(std::thread::spawn(move || writer(s, to, dir)));
        }
        self.links.push(Link {
            shared,
            threads,
            seed,
        });
        index
    }

    /// Link number `i` (in the order [`Net::connect`] made them).
    pub fn link(&self, i: usize) -> &Link {
        &self.links[i]
    }

    /// Runs `f` on a thread inside namespace `name`: sockets it creates
    /// belong to that namespace for good, whichever thread uses them later.
    pub fn run_in<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        crate::common::run_in_netns(format!("/run/netns/{}", self.ns(name)), f)
    }

    /// A script in `dir` that runs oi (with its arguments) inside namespace
    /// `name`; `ip netns exec` execs, so the process is oi itself.
    pub fn oi_wrapper(&self, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let script = dir.join(format!("oi-in-{name}"));
        let text = format!(
            "#!/bin/sh\nexec ip netns exec {} {} \"$@\"\n",
            self.ns(name),
            env!("CARGO_BIN_EXE_oi")
        );
        std::fs::write(&script, text).expect("write wrapper");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("chmod wrapper");
        script
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.links.clear();
        for ns in &self.namespaces {
            // Processes still in it (an oi the test did not stop) are the test's.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Some(pid) = pid.parse().ok().and_then(rustix::process::Pid::from_raw) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
            }
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
