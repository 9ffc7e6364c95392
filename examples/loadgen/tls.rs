//! TLS load for `benches/tls.sh`: handshakes (full or resumed) and bulk
//! uploads and downloads, with rustls as the client, and the plain sink
//! (and source) the bulk goes to (and comes from).
//!
//! A Rust client rather than `openssl s_time`: it counts exactly what it
//! did (full handshakes, resumed ones, bytes the sink confirmed), it pins
//! the handshake to one shape (TLS 1.3, X25519, AES-128-GCM) whatever the
//! server prefers, and the same client measures every forwarder.

use crate::IO_TIMEOUT;
use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, StreamOwned};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Plaintext bytes per write of an upload: four TLS records.
const CHUNK: usize = 64 * 1024;

/// A client config trusting `ca`: TLS 1.3 only, X25519, AES-128-GCM, so
/// every forwarder runs the same handshake and cipher; resumption (the
/// in-memory ticket store) only when `resume`.
fn client_config(ca: &Path, resume: bool) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let mut provider = rustls::crypto::ring::default_provider();
    provider.kx_groups = vec![rustls::crypto::ring::kx_group::X25519];
    provider.cipher_suites = vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256];
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    if !resume {
        config.resumption = Resumption::disabled();
    }
    Ok(Arc::new(config))
}

/// A TLS client connection to `addr` for `name`, not yet handshaken.
fn open(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
) -> io::Result<StreamOwned<ClientConnection, TcpStream>> {
    let socket = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    socket.set_nodelay(true)?;
    socket.set_read_timeout(Some(IO_TIMEOUT))?;
    socket.set_write_timeout(Some(IO_TIMEOUT))?;
    let conn = ClientConnection::new(config.clone(), name.clone()).map_err(io::Error::other)?;
    Ok(StreamOwned::new(conn, socket))
}

/// Ends `tls` politely: close_notify, then the socket is dropped.
fn close(mut tls: StreamOwned<ClientConnection, TcpStream>) {
    tls.conn.send_close_notify();
    // Bounded: each pass writes or fails (the write timeout).
    while tls.conn.wants_write() {
        if tls.conn.write_tls(&mut tls.sock).is_err() {
            break;
        }
    }
}

/// What one handshake worker did.
#[derive(Default)]
struct Tally {
    /// Handshakes that were full (and finished the exchange).
    full: u64,
    /// Handshakes that resumed a session (a ticket).
    resumed: u64,
    /// Failures by kind.
    errors: BTreeMap<String, u64>,
}

/// `conns` threads, each doing new connection, handshake, one byte to the
/// echo backend and back, close, for `duration`; prints handshakes per
/// second and how many resumed.
pub fn handshakes(
    addr: SocketAddr,
    ca: &Path,
    name: &str,
    duration: Duration,
    conns: usize,
    resume: bool,
) -> Result<(), String> {
    let name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    // One config per worker: its own ticket store, as separate clients have.
    let configs = (0..conns)
        .map(|_| client_config(ca, resume))
        .collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    let deadline = start + duration;
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .iter()
            .map(|config| scope.spawn(|| handshake_worker(addr, config, &name, deadline)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let full: u64 = tallies.iter().map(|t| t.full).sum();
    let resumed: u64 = tallies.iter().map(|t| t.resumed).sum();
    let mut errors = BTreeMap::<String, u64>::new();
    for t in &tallies {
        for (kind, n) in &t.errors {
            *errors.entry(kind.clone()).or_default() += n;
        }
    }
    let error_total: u64 = errors.values().sum();
    let done = full + resumed;
    let rate = done as f64 / elapsed;
    let fraction = if done == 0 {
        0.0
    } else {
        resumed as f64 / done as f64
    };
    println!(
        "tls-handshakes {addr}: {conns} workers, {elapsed:.2} s: {done} handshakes ({full} full, {resumed} resumed), {rate:.0}/s, {error_total} errors"
    );
    for (kind, n) in &errors {
        println!("  error {kind}: {n}");
    }
    println!(
        "result: per_sec={rate:.1} ok={done} full={full} resumed={resumed} resumed_fraction={fraction:.3} errors={error_total}"
    );
    Ok(())
}

/// One handshake worker's loop until the deadline.
fn handshake_worker(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::default();
    // Bounded by the deadline; each pass by IO_TIMEOUT.
    while Instant::now() < deadline {
        match one_handshake(addr, config, name) {
            Ok(HandshakeKind::Resumed) => tally.resumed += 1,
            Ok(_) => tally.full += 1,
            Err(e) => {
                *tally.errors.entry(format!("{:?}", e.kind())).or_default() += 1;
                // Do not spin on an instantly failing connect.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    tally
}

/// One connection: handshake, a byte to the echo backend and back (which
/// also takes in the server's tickets), close.
fn one_handshake(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
) -> io::Result<HandshakeKind> {
    let mut tls = open(addr, config, name)?;
    tls.write_all(b"h")?;
    let mut answer = [0u8; 1];
    tls.read_exact(&mut answer)?;
    if answer != *b"h" {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "wrong echo"));
    }
    let kind = tls.conn.handshake_kind().unwrap_or(HandshakeKind::Full);
    close(tls);
    Ok(kind)
}

/// `streams` connections at once, each uploading `bytes` of plaintext to
/// the sink through `addr` and waiting for the sink to confirm it has them
/// all (or, `down`, downloading `bytes` the sink sends); prints Gbit/s of
/// plaintext.
pub fn bulk(
    addr: SocketAddr,
    ca: &Path,
    name: &str,
    bytes: u64,
    streams: usize,
    down: bool,
) -> Result<(), String> {
    let name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let config = client_config(ca, false)?;
    let start = Instant::now();
    let results: Vec<io::Result<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..streams)
            .map(|_| {
                scope.spawn(|| match down {
                    false => upload(addr, &config, &name, bytes),
                    true => download(addr, &config, &name, bytes),
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("worker panicked")))
            })
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut moved = 0u64;
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(n) => moved = moved.saturating_add(n),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let gbps = moved as f64 * 8.0 / elapsed / 1e9;
    println!(
        "tls-bulk {addr}: {streams} streams, {moved} bytes in {elapsed:.2} s, {gbps:.2} Gbit/s, {} errors",
        errors.len()
    );
    for e in &errors {
        println!("  error: {e}");
    }
    println!(
        "result: gbps={gbps:.3} bytes={moved} secs={elapsed:.3} errors={}",
        errors.len()
    );
    Ok(())
}

/// A request to the sink: `u` (upload) or `d` (download), then the length
/// (8 bytes, big-endian).
fn header(op: u8, bytes: u64) -> [u8; 9] {
    let mut h = [op; 9];
    h[1..].copy_from_slice(&bytes.to_be_bytes());
    h
}

/// One upload: the header, the bytes, then the sink's one-byte confirmation.
fn upload(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
    bytes: u64,
) -> io::Result<u64> {
    let mut tls = open(addr, config, name)?;
    tls.write_all(&header(b'u', bytes))?;
    let chunk = crate::request(CHUNK);
    let mut left = bytes;
    // Bounded: `left` falls by up to CHUNK each pass.
    while left > 0 {
        let n = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
        tls.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    tls.flush()?;
    // The sink may take a while to drain the forwarder's buffers.
    tls.sock.set_read_timeout(Some(IO_TIMEOUT * 6))?;
    let mut answer = [0u8; 1];
    tls.read_exact(&mut answer)?;
    if answer != *b"k" {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "wrong answer"));
    }
    close(tls);
    Ok(bytes)
}

/// One download: the header, then `bytes` from the sink.
fn download(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
    bytes: u64,
) -> io::Result<u64> {
    let mut tls = open(addr, config, name)?;
    tls.write_all(&header(b'd', bytes))?;
    let mut buf = vec![0u8; CHUNK];
    let mut left = bytes;
    // Bounded: each pass reads at least a byte or fails (EOF, the timeout).
    while left > 0 {
        let want = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
        let n = tls.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{left} bytes short"),
            ));
        }
        left -= n as u64;
    }
    close(tls);
    Ok(bytes)
}

/// The sink: for each connection (a thread each), reads the header; for an
/// upload, that many bytes, then answers `k`; for a download, sends that
/// many. Serves until killed.
pub fn sink(bind: SocketAddr) -> Result<(), String> {
    let listener = TcpListener::bind(bind).map_err(|e| format!("bind {bind}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("sink listening on {local}");
    // Bounded by the process's life: the bench kills the sink.
    for stream in listener.incoming() {
        match stream {
            Ok(s) => {
                std::thread::spawn(move || {
                    if let Err(e) = drain(s) {
                        eprintln!("sink: {e}");
                    }
                });
            }
            Err(e) => {
                eprintln!("sink: accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    Ok(())
}

/// One sink connection: header, then the bytes either way.
fn drain(mut s: TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    let mut head = [0u8; 9];
    s.read_exact(&mut head)?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&head[1..]);
    let mut left = u64::from_be_bytes(len);
    let mut buf = vec![0u8; 256 * 1024];
    if head[0] == b'd' {
        let chunk = crate::request(buf.len());
        // Bounded: `left` falls by up to a chunk each pass.
        while left > 0 {
            let n = usize::try_from(left).map_or(chunk.len(), |l| l.min(chunk.len()));
            s.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        // Wait for the client's end, so the last bytes are not lost to a reset.
        let _ = s.read(&mut buf);
        return Ok(());
    }
    // Bounded: each pass reads at least a byte or returns.
    while left > 0 {
        let want = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
        let n = s.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{left} bytes short"),
            ));
        }
        left -= n as u64;
    }
    s.write_all(b"k")?;
    // Wait for the client's end, so the answer is not lost to a reset.
    let _ = s.read(&mut buf);
    Ok(())
}
