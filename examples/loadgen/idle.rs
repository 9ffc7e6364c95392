//! Idle connections: open many, prove each works, hold them.

use crate::{raise_nofile_limit, request, IO_TIMEOUT};
use std::collections::BTreeMap;
use std::io::{self, BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Opens `count` connections one after another (for at most `open_time`),
/// then holds them until stdin yields a line or EOF.
///
/// Prints `result: held=N ...` as soon as every attempt is done, so a script
/// can measure the forwarder while the connections are up.
pub fn run(addr: SocketAddr, count: usize, ping: bool, open_time: Duration) -> Result<(), String> {
    let limit = raise_nofile_limit();
    let req = request(64);
    let mut resp = vec![0u8; req.len()];
    let mut held = Vec::with_capacity(count);
    let mut errors = BTreeMap::<String, u64>::new();
    let start = Instant::now();
    for _ in 0..count {
        if start.elapsed() > open_time {
            *errors.entry("OpenTimeExceeded".to_string()).or_default() += 1;
            break;
        }
        match open(addr, ping.then_some(&req[..]), &mut resp) {
            Ok(stream) => held.push(stream),
            Err(e) => *errors.entry(format!("{:?}", e.kind())).or_default() += 1,
        }
    }
    let open_secs = start.elapsed().as_secs_f64();
    let error_total: u64 = errors.values().sum();
    println!(
        "idle {addr}: holding {} of {count} connections, opened in {open_secs:.1} s (RLIMIT_NOFILE {limit}), {error_total} errors",
        held.len()
    );
    for (kind, n) in &errors {
        println!("  error {kind}: {n}");
    }
    println!(
        "result: held={} requested={count} errors={error_total} open_secs={open_secs:.1}",
        held.len()
    );
    // Flush before waiting: the script reads this line while we hold.
    let _ = io::stdout().flush();
    let mut line = String::new();
    let _ = io::stdin().lock().read_line(&mut line);
    drop(held);
    println!("idle: closed");
    Ok(())
}

/// Connects and, if `ping` is given, does one round trip so the connection is
/// known to reach the backend (a forwarder's listen backlog alone would accept it).
fn open(addr: SocketAddr, ping: Option<&[u8]>, resp: &mut [u8]) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    if let Some(req) = ping {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.write_all(req)?;
        stream.read_exact(resp)?;
    }
    Ok(stream)
}
