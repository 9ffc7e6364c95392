//! Connection rate: connect, one small request/response, close, repeatedly.

use crate::{request, IO_TIMEOUT};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// What one worker did.
#[derive(Default)]
struct Tally {
    /// Connections that completed the exchange and closed.
    ok: u64,
    /// Failures by kind, so a run that is mostly refusals is visible as such.
    errors: BTreeMap<String, u64>,
}

/// Runs `workers` threads for `duration` and prints connections per second.
pub fn run(
    addr: SocketAddr,
    duration: Duration,
    workers: usize,
    size: usize,
) -> Result<(), String> {
    let req = request(size.max(1));
    let start = Instant::now();
    let deadline = start + duration;
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| scope.spawn(|| worker(addr, &req, deadline)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let ok: u64 = tallies.iter().map(|t| t.ok).sum();
    let mut errors = BTreeMap::<String, u64>::new();
    for t in &tallies {
        for (kind, n) in &t.errors {
            *errors.entry(kind.clone()).or_default() += n;
        }
    }
    let error_total: u64 = errors.values().sum();
    let rate = ok as f64 / elapsed;
    println!(
        "connrate {addr}: {workers} workers, {elapsed:.2} s: {ok} connections, {rate:.0} conn/s, {error_total} errors"
    );
    for (kind, n) in &errors {
        println!("  error {kind}: {n}");
    }
    println!("result: conns_per_sec={rate:.0} ok={ok} errors={error_total}");
    Ok(())
}

/// One worker's loop until the deadline.
fn worker(addr: SocketAddr, req: &[u8], deadline: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut resp = vec![0u8; req.len()];
    // Bounded by the deadline; each iteration is bounded by IO_TIMEOUT.
    while Instant::now() < deadline {
        match exchange(addr, req, &mut resp) {
            Ok(()) => tally.ok += 1,
            Err(e) => {
                *tally.errors.entry(format!("{:?}", e.kind())).or_default() += 1;
                // Do not spin on an instantly failing connect (refused, EMFILE).
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    tally
}

/// One connection: connect, send the request, read the whole response, close.
fn exchange(addr: SocketAddr, req: &[u8], resp: &mut [u8]) -> io::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.write_all(req)?;
    stream.read_exact(resp)?;
    if resp != req {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "response differs",
        ));
    }
    Ok(())
}
