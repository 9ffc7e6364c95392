//! The pump over loopback, copy vs splice: `cargo bench --bench pump`.
//!
//! An in-process oi server (two executor threads, as on a 2-core machine)
//! forwards to an in-process sink that reads and discards; clients push
//! 1 GiB through it on 1 and on 4 connections. For each mode it prints
//! throughput and CPU seconds per GiB, both for the forwarder's executor
//! threads alone and for the whole process (clients and sink included). Modes
//! alternate run by run so background load hits both alike; medians of the
//! runs are printed. Set `PUMP_BENCH_GIB` and `PUMP_BENCH_RUNS` to change the
//! volume (default 1) and the repetitions (default 5), and `PUMP_BENCH_BUFFER`
//! for `--buffer-size` (default 65536; pipes are at least 256 KiB).

use oxidinetd::config::{AclRules, Proto, ResolvedRule, SpliceMode};
use oxidinetd::{LogHandle, Route, Runtime, Settings, Shared};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

/// Name prefix of the forwarder's executor threads (`Runtime` names its
/// workers this way; the bench names thread 0 alike), to tell their CPU time apart.
const EXEC_THREAD: &str = "oi-worker";

/// Clock ticks per second of /proc stat times (USER_HZ, 100 on Linux).
const TICKS: f64 = 100.0;

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` does not, and
    // then only a smoke run checks that both modes forward (no workload).
    if !std::env::args().any(|a| a == "--bench") {
        let sink = sink();
        for mode in [SpliceMode::Off, SpliceMode::On] {
            let addr = forwarder(mode, Settings::default().buffer_size, sink);
            push(addr, 1, 1 << 20);
        }
        println!("pump bench: 1 MiB forwarded with splice off and on; run `cargo bench --bench pump` to measure");
        return;
    }
    let gib: u64 = env_or("PUMP_BENCH_GIB", 1);
    let runs: usize = env_or("PUMP_BENCH_RUNS", 5);
    let buffer: usize = env_or("PUMP_BENCH_BUFFER", Settings::default().buffer_size);
    let total = gib << 30;
    let sink = sink();
    let copy = forwarder(SpliceMode::Off, buffer, sink);
    let splice = forwarder(SpliceMode::On, buffer, sink);
    println!(
        "pump bench: {gib} GiB per run, {runs} runs per row, medians; \
         2 executor threads; buffer {buffer} bytes, pipe {} bytes",
        oxidinetd::pipe_size(buffer)
    );
    println!("| mode | connections | GiB/s | forwarder CPU s/GiB | process CPU s/GiB |");
    println!("|---|---|---|---|---|");
    for conns in [1usize, 4] {
        let mut rows: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..runs {
            for (i, addr) in [copy, splice].into_iter().enumerate() {
                rows[i].push(push(addr, conns, total));
            }
        }
        for (name, samples) in ["copy", "splice"].into_iter().zip(rows) {
            let med = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
            println!(
                "| {name} | {conns} | {:.2} | {:.3} | {:.3} |",
                med(|s| s.gib_per_s),
                med(|s| s.exec_cpu_per_gib),
                med(|s| s.proc_cpu_per_gib)
            );
        }
    }
}

/// One run's figures.
struct Sample {
    /// Throughput.
    gib_per_s: f64,
    /// CPU time of the forwarder's executor threads per GiB forwarded.
    exec_cpu_per_gib: f64,
    /// CPU time of the whole process per GiB forwarded.
    proc_cpu_per_gib: f64,
}

/// Pushes `total` bytes through `addr` over `conns` connections at once.
fn push(addr: SocketAddr, conns: usize, total: u64) -> Sample {
    let (exec0, proc0) = (exec_ticks(), proc_ticks());
    let t0 = Instant::now();
    let per_conn = total / conns as u64;
    let clients: Vec<_> = (0..conns)
        .map(|_| {
            thread::spawn(move || {
                let chunk = vec![0x5au8; 256 * 1024];
                let mut s = TcpStream::connect(addr).expect("connect to the forwarder");
                let mut left = per_conn;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    s.write_all(&chunk[..n]).expect("write");
                    left -= n as u64;
                }
                s.shutdown(std::net::Shutdown::Write).expect("shutdown");
                // The sink answers with the byte count once it has read everything.
                let mut got = [0u8; 8];
                s.read_exact(&mut got).expect("sink's count");
                assert_eq!(u64::from_le_bytes(got), per_conn, "every byte arrived");
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
    let secs = t0.elapsed().as_secs_f64();
    let gib = (per_conn * conns as u64) as f64 / (1u64 << 30) as f64;
    Sample {
        gib_per_s: gib / secs,
        exec_cpu_per_gib: (exec_ticks() - exec0) as f64 / TICKS / gib,
        proc_cpu_per_gib: (proc_ticks() - proc0) as f64 / TICKS / gib,
    }
}

/// A backend that reads each connection to EOF, then writes back the byte count.
fn sink() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind sink");
    let addr = l.local_addr().expect("sink addr");
    thread::spawn(move || {
        for c in l.incoming().flatten() {
            thread::spawn(move || {
                let mut c = c;
                let mut buf = vec![0u8; 256 * 1024];
                let mut n = 0u64;
                while let Ok(r @ 1..) = c.read(&mut buf) {
                    n += r as u64;
                }
                let _ = c.write_all(&n.to_le_bytes());
            });
        }
    });
    addr
}

/// Starts an in-process forwarder to `backend` with `--splice` = `mode`.
fn forwarder(mode: SpliceMode, buffer_size: usize, backend: SocketAddr) -> SocketAddr {
    let settings = Settings {
        splice: mode,
        buffer_size,
        ..Settings::default()
    };
    let shared = Shared::new(settings, LogHandle::disabled());
    let mut rule = rule("127.0.0.1:0".parse().expect("literal"), backend);
    let socket = oxidinetd::bind(&rule).expect("bind forwarder");
    let addr = socket.local_addr().expect("forwarder addr");
    rule.bind = oxidinetd::config::BindAddr::Ip(addr);
    let route = Route::new(rule, Arc::new(AclRules::default()));
    // Two threads, each running its own executor, as oi runs them on two cores.
    let threads = NonZeroUsize::new(2).expect("two");
    let runtime = Runtime::start(threads).expect("runtime");
    let (commands, received) = async_channel::bounded(1);
    let server =
        oxidinetd::serve(&runtime, shared, vec![(socket, route)], received).expect("serve");
    thread::Builder::new()
        .name(format!("{EXEC_THREAD}-0"))
        .spawn(move || {
            // Serves for the rest of the process: the sender lives in this thread.
            let _commands = commands;
            runtime.block_on(server)
        })
        .expect("executor thread");
    addr
}

/// A TCP rule from `bind` to `connect`.
fn rule(bind: SocketAddr, connect: SocketAddr) -> ResolvedRule {
    ResolvedRule::between(bind, Proto::Tcp, connect, Proto::Tcp)
}

/// utime + stime from a /proc stat line.
fn stat_ticks(stat: &str) -> u64 {
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 of stat (utime, stime) are at 11 and 12 after the name.
    fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0)
}

/// CPU ticks of the whole process.
fn proc_ticks() -> u64 {
    stat_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default())
}

/// CPU ticks of the forwarder's executor threads (both forwarders).
fn exec_ticks() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(EXEC_THREAD))
        })
        .map(|t| stat_ticks(&std::fs::read_to_string(t.path().join("stat")).unwrap_or_default()))
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
