//! Round-trip latency of small requests over one connection.

use crate::{request, IO_TIMEOUT};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Runs `warmup` untimed and `count` timed round trips and prints percentiles.
pub fn run(addr: SocketAddr, count: usize, size: usize, warmup: usize) -> Result<(), String> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| format!("socket options: {e}"))?;
    let req = request(size.max(1));
    let mut resp = vec![0u8; req.len()];
    let mut samples = Vec::with_capacity(count);
    for i in 0..warmup + count {
        let start = Instant::now();
        stream
            .write_all(&req)
            .and_then(|()| stream.read_exact(&mut resp))
            .map_err(|e| format!("round trip {i}: {e}"))?;
        let rtt = start.elapsed();
        if resp != req {
            return Err(format!("round trip {i}: response differs from request"));
        }
        if i >= warmup {
            samples.push(rtt);
        }
    }
    if samples.is_empty() {
        return Err("no samples (--count 0)".to_string());
    }
    samples.sort();
    let pct = |p: f64| micros(samples[((samples.len() - 1) as f64 * p).round() as usize]);
    let (p50, p90, p99, max) = (pct(0.50), pct(0.90), pct(0.99), pct(1.0));
    println!(
        "pingpong {addr}: {} round trips of {} B: p50 {p50:.1} µs, p90 {p90:.1} µs, p99 {p99:.1} µs, max {max:.1} µs",
        samples.len(),
        req.len()
    );
    println!("result: p50_us={p50:.1} p90_us={p90:.1} p99_us={p99:.1} max_us={max:.1}");
    Ok(())
}

/// A duration in microseconds.
fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
