//! Test harness: an in-process oi server on port 0 and simple blocking peers.
#![allow(dead_code)]

use oxidinetd::config::{AclRules, Port, Proto, ResolvedRule};
use oxidinetd::logfile::LogHandle;
use oxidinetd::server::{self, BoundSocket, Route, Settings, Shared};
use smol::Executor;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A rule forwarding `bind` (its port only matters for the log) to `connect`.
pub fn rule(
    bind: SocketAddr,
    bind_proto: Proto,
    connect: SocketAddr,
    connect_proto: Proto,
) -> ResolvedRule {
    ResolvedRule::between(bind, bind_proto, connect, connect_proto)
}

/// A running in-process server; stops when dropped.
pub struct TestServer {
    /// Where each rule listens, in the order given.
    pub addrs: Vec<SocketAddr>,
    /// The server's shared state (open connection count, log).
    pub shared: Arc<Shared>,
    /// The executor threads with their connection counts.
    pub threads: Arc<oxidinetd::spread::Threads>,
    /// Closing this stops the server and its threads.
    stop: async_channel::Sender<()>,
    /// The threads running the executors.
    runners: Vec<JoinHandle<()>>,
}

impl TestServer {
    /// The first listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.close();
        for t in self.runners.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts a server on two executor threads. Each rule's listener is bound to its
/// `bind` address (use port 0); the real addresses are in `TestServer::addrs`.
pub fn start(rules: Vec<ResolvedRule>, settings: Settings, log: LogHandle) -> TestServer {
    start_acl(rules, AclRules::default(), settings, log)
}

/// Like `start`, with global allow/deny patterns.
pub fn start_acl(
    rules: Vec<ResolvedRule>,
    global: AclRules,
    settings: Settings,
    log: LogHandle,
) -> TestServer {
    let shared = Shared::new(settings, log);
    let mut sockets = Vec::new();
    let mut addrs = Vec::new();
    let global = Arc::new(global);
    for mut r in rules {
        let s = server::bind(&r).expect("bind test listener");
        let addr = s.local_addr().expect("local addr");
        // As if the configuration had named the port the kernel picked.
        r.bind = addr;
        r.rule.bind.port = Port::Number(addr.port());
        addrs.push(addr);
        sockets.push((s, Route::new(r, global.clone())));
    }
    start_sockets(sockets, addrs, shared)
}

/// Starts a server on already-bound sockets with routes.
pub fn start_sockets(
    sockets: Vec<(BoundSocket, Route)>,
    addrs: Vec<SocketAddr>,
    shared: Arc<Shared>,
) -> TestServer {
    // Two threads, each running its own executor, as oi runs them.
    let executors: Vec<Arc<Executor<'static>>> =
        (0..2).map(|_| Arc::new(Executor::new())).collect();
    let (stop, stopped) = async_channel::bounded::<()>(1);
    // Listeners start here, before this returns (duplicating their descriptors
    // for every executor), so a test that counts descriptors sees them all.
    let mut server = server::Server::new(executors.clone(), shared.clone()).expect("server");
    server.start(sockets).expect("start listeners");
    let threads = server.threads().clone();
    executors[0]
        .spawn({
            let stopped = stopped.clone();
            async move {
                let _ = stopped.recv().await;
                server.close().await;
            }
        })
        .detach();
    let runners = executors
        .into_iter()
        .map(|ex| {
            let stopped = stopped.clone();
            std::thread::spawn(move || {
                smol::block_on(ex.run(async move {
                    let _ = stopped.recv().await;
                }))
            })
        })
        .collect();
    TestServer {
        addrs,
        shared,
        threads,
        stop,
        runners,
    }
}

/// Loopback port 0 in `backend`'s address family: where a test listener binds.
pub fn loopback_for(backend: SocketAddr) -> SocketAddr {
    let ip: std::net::IpAddr = if backend.is_ipv4() {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv6Addr::LOCALHOST.into()
    };
    SocketAddr::new(ip, 0)
}

/// A TCP forwarding rule from loopback port 0 (the backend's family) to `backend`.
pub fn tcp_rule(backend: SocketAddr) -> ResolvedRule {
    rule(loopback_for(backend), Proto::Tcp, backend, Proto::Tcp)
}

/// An echo backend: one thread per connection, echoes until EOF, then closes.
pub fn echo_backend(bind: &str) -> SocketAddr {
    let l = TcpListener::bind(bind).expect("bind echo backend");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            std::thread::spawn(move || {
                // Reads and writes through one descriptor: no clone, so a test that
                // counts descriptors knows each connection costs the backend exactly one.
                let (mut r, mut w) = (&c, &c);
                let _ = std::io::copy(&mut r, &mut w);
                let _ = c.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}

/// Deterministic pseudo-random bytes (xorshift), so failures are reproducible.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// SHA-256 of some bytes, as hex.
pub fn sha256(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Connects with a generous timeout so a broken server fails the test instead of hanging it.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    s
}

/// Sends `data` through the forwarder at `addr` to an echo backend, shuts down
/// writing, and returns everything that came back until EOF.
pub fn echo_through(addr: SocketAddr, data: Vec<u8>) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = connect(addr);
    let mut w = s.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        w.write_all(&data).expect("write");
        w.shutdown(std::net::Shutdown::Write).expect("shutdown");
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).expect("read back");
    writer.join().expect("writer");
    back
}

/// A log writer appending rinetd's tab format to `oi.log` in a fresh
/// temporary directory (kept alive by the returned `TempDir`).
pub fn tab_log() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    oxidinetd::logfile::LogHandle,
) {
    use oxidinetd::logfile::{Format, LogHandle};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("oi.log");
    let log = LogHandle::start().expect("log thread");
    log.reopen(Some(path.clone()), Format::Tab)
        .expect("open log");
    (dir, path, log)
}

/// A port that was free a moment ago (for configurations of the real binary,
/// which cannot take port 0).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Writes a file atomically (rename), so a reload never reads half of it.
pub fn write_atomic(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename");
}

/// The real `oi` binary, started with a NOTIFY_SOCKET the test listens on.
pub struct OiProcess {
    /// The child process.
    pub child: std::process::Child,
    /// Receives sd_notify datagrams.
    pub notify: std::os::unix::net::UnixDatagram,
    /// stderr of the child, collected by a thread.
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl OiProcess {
    /// Starts `oi -c conf` plus `args`, and waits for READY=1.
    pub fn start(dir: &std::path::Path, conf: &std::path::Path, args: &[&str]) -> Self {
        Self::start_program(
            std::path::Path::new(env!("CARGO_BIN_EXE_oi")),
            dir,
            conf,
            args,
        )
    }

    /// Like `start`, running `program` (a link to oi under another name).
    pub fn start_program(
        program: &std::path::Path,
        dir: &std::path::Path,
        conf: &std::path::Path,
        args: &[&str],
    ) -> Self {
        let sock_path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&sock_path);
        let notify = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("notify socket");
        notify
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        let mut child = std::process::Command::new(program)
            .arg("-c")
            .arg(conf)
            .args(args)
            .env("NOTIFY_SOCKET", &sock_path)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn oi");
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut e, &mut s);
                s
            })
        });
        let p = OiProcess {
            child,
            notify,
            stderr,
        };
        let first = p.next_notify();
        assert!(first.contains("READY=1"), "first notification: {first:?}");
        p
    }

    /// The next sd_notify message (panics after 10 s without one).
    pub fn next_notify(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self.notify.recv(&mut buf).expect("sd_notify message");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("kill");
    }

    /// Sends SIGHUP and waits until the reload is done (RELOADING=1, then READY=1).
    pub fn reload(&self) {
        self.signal(rustix::process::Signal::HUP);
        let a = self.next_notify();
        assert!(a.contains("RELOADING=1"), "{a:?}");
        let b = self.next_notify();
        assert!(b.contains("READY=1"), "{b:?}");
    }

    /// SIGTERM, wait for exit, and return (exit status, everything written to stderr).
    pub fn stop(self) -> (std::process::ExitStatus, String) {
        self.signal(rustix::process::Signal::TERM);
        self.stop_after_signal()
    }

    /// Waits for an exit already asked for; returns (exit status, stderr).
    pub fn stop_after_signal(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("wait");
        let err = self
            .stderr
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        (status, err)
    }
}

impl Drop for OiProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UDP echo backend: sends every datagram back to its sender, and reports
/// each datagram's source address and length on the returned channel (ignored if dropped).
pub fn udp_echo_backend(
    bind: &str,
) -> (SocketAddr, std::sync::mpsc::Receiver<(SocketAddr, usize)>) {
    let s = std::net::UdpSocket::bind(bind).expect("bind UDP echo backend");
    let addr = s.local_addr().expect("addr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        loop {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            let _ = tx.send((from, n));
            let _ = s.send_to(&buf[..n], from);
        }
    });
    (addr, rx)
}

/// A `/udp` listener rule on loopback port 0 (the backend's family) to `backend`.
pub fn udp_rule(backend: SocketAddr, connect_proto: Proto) -> ResolvedRule {
    rule(loopback_for(backend), Proto::Udp, backend, connect_proto)
}

/// A UDP client on loopback (the family of `server`) with a 5 s receive timeout.
pub fn udp_client(server: SocketAddr) -> std::net::UdpSocket {
    let s = std::net::UdpSocket::bind(if server.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    })
    .expect("bind UDP client");
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    s
}

/// Sends `payload` to `server` and returns the reply, checking it came from `server`.
pub fn udp_roundtrip(s: &std::net::UdpSocket, server: SocketAddr, payload: &[u8]) -> Vec<u8> {
    s.send_to(payload, server).expect("send datagram");
    let mut buf = vec![0u8; 65_536];
    let (n, from) = s.recv_from(&mut buf).expect("reply datagram");
    assert_eq!(from, server, "reply must come from the listening address");
    buf.truncate(n);
    buf
}

/// Polls `path` until its text satisfies `done` or 10 s pass; returns the last text read.
pub fn wait_for_file(path: &std::path::Path, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if done(&text) || std::time::Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
