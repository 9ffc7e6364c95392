//! Blocking peers for tests: echo backends, clients, resets, data.

use socket2::SockRef;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// 127.0.0.1 at `port`.
pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
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

/// A backend that sends `marker` to each client and closes: which backend a
/// connection reached, read back as its only bytes.
pub fn marker_backend(marker: &'static [u8]) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut c in l.incoming().map_while(Result::ok) {
            let _ = c.write_all(marker);
        }
    });
    addr
}

/// A TCP connection to `to` from loopback address `from` (127.0.0.2 and so
/// on), with [`connect`]'s timeouts.
pub fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    use socket2::{Domain, SockAddr, Socket, Type};
    let from: std::net::IpAddr = from.parse().expect("literal");
    let s = Socket::new(Domain::for_address(to), Type::STREAM, None).expect("socket");
    s.bind(&SockAddr::from(SocketAddr::new(from, 0)))
        .expect("bind client");
    s.connect_timeout(&SockAddr::from(to), Duration::from_secs(5))
        .expect("connect");
    let s = TcpStream::from(s);
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s
}

/// Connects with a generous timeout so a broken server fails the test instead of hanging it.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s
}

/// One 4-byte echo round trip through 127.0.0.1:`port`; Err if the
/// connection was refused or broke.
pub fn ping(port: u16) -> io::Result<()> {
    let mut s = TcpStream::connect_timeout(&local(port), Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"ping")?;
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    if &b != b"ping" {
        return Err(io::Error::other("wrong echo"));
    }
    Ok(())
}

/// Whether a connection to 127.0.0.1:`port` is refused (nothing listens).
pub fn refused(port: u16) -> bool {
    matches!(
        TcpStream::connect_timeout(&local(port), Duration::from_secs(5)),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused
    )
}

/// Closes a socket with a TCP reset instead of a FIN.
pub fn reset(s: TcpStream) {
    SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER 0");
    drop(s);
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

/// Sends `data` through the forwarder at `addr` to an echo backend, shuts down
/// writing, and returns everything that came back until EOF.
pub fn echo_through(addr: SocketAddr, data: Vec<u8>) -> Vec<u8> {
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
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    s.set_nonblocking(false).expect("blocking");
    sent
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

/// A UDP client on loopback (the family of `server`) with a 5 s receive timeout.
pub fn udp_client(server: SocketAddr) -> std::net::UdpSocket {
    let s = std::net::UdpSocket::bind(if server.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    })
    .expect("bind UDP client");
    s.set_read_timeout(Some(Duration::from_secs(5)))
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

/// Writes a file atomically (rename), so a reload never reads half of it.
pub fn write_atomic(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename");
}

/// A TCP backend whose connects never complete: a listener with a backlog
/// of 0 whose one queue slot is taken by a connection nobody accepts, so
/// the kernel drops every further SYN. Keep the returned value alive.
pub fn unaccepting_backend() -> (SocketAddr, (socket2::Socket, TcpStream)) {
    use socket2::{Domain, Socket, Type};
    let l = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("literal");
    l.bind(&any.into()).expect("bind");
    l.listen(0).expect("listen");
    let addr = l
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("inet address");
    let filler = TcpStream::connect(addr).expect("the one queue slot");
    (addr, (l, filler))
}

/// A backend that answers every connection with its one-byte `id`. It
/// serves `limit` connections (then closes its port, before answering the
/// last one, so no later connect can reach it) or forever; with `hold`, it
/// keeps every connection open in `held` instead of closing it.
pub fn id_backend(
    id: u8,
    limit: Option<usize>,
    held: Option<std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>>,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    serve_ids(listener, id, limit, held);
    addr
}

/// Runs [`id_backend`]'s loop on `listener`.
pub fn serve_ids(
    listener: TcpListener,
    id: u8,
    limit: Option<usize>,
    held: Option<std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>>,
) {
    std::thread::spawn(move || {
        let mut listener = Some(listener);
        let mut served = 0usize;
        while let Some(l) = &listener {
            let Ok((mut s, _)) = l.accept() else { return };
            served += 1;
            if limit == Some(served) {
                listener = None;
            }
            let _ = std::io::Write::write_all(&mut s, &[id]);
            match &held {
                Some(h) => h.lock().expect("lock").push(s),
                None => drop(s),
            }
        }
    });
}

/// Connects through oi on `port` and returns the id of the backend that answered.
pub fn which(port: u16) -> u8 {
    let mut s = connect(local(port));
    let mut id = [0u8; 1];
    s.read_exact(&mut id).expect("a backend answered");
    id[0]
}

/// Like [`which`], but `None` when no backend answered (the connection
/// was closed or reset first).
pub fn try_which(port: u16) -> Option<u8> {
    let mut s = TcpStream::connect(local(port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let mut id = [0u8; 1];
    s.read_exact(&mut id).ok()?;
    Some(id[0])
}

/// An `openssl s_server -www` on a free loopback port serving the PEM
/// certificate `cert` with its key `key`, killed on drop; `what` names it
/// when it does not start.
pub struct TlsServer {
    /// The s_server process.
    child: std::process::Child,
    /// Where it listens.
    pub port: u16,
}

impl TlsServer {
    pub fn serving(cert: &std::path::Path, key: &std::path::Path, what: &str) -> Self {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let port = super::free_port();
        let mut child = Command::new("openssl")
            .args(["s_server", "-www", "-accept", &format!("127.0.0.1:{port}")])
            .arg("-cert")
            .arg(cert)
            .arg("-key")
            .arg(key)
            .args(["-naccept", "100"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn openssl s_server");
        // s_server says ACCEPT once it listens (or exits, ending stdout).
        let out = child.stdout.take().expect("stdout");
        let ready = std::io::BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .take(50)
            .any(|l| l.starts_with("ACCEPT"));
        assert!(ready, "openssl s_server for {what} did not start");
        TlsServer { child, port }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
