//! loadgen: the load clients and echo backend behind `benches/compare.sh`.
//!
//! ```text
//! cargo run --release --example loadgen -- echo-server 127.0.0.1:9001
//! cargo run --release --example loadgen -- pingpong 127.0.0.1:9000 --count 20000
//! cargo run --release --example loadgen -- connrate 127.0.0.1:9000 --secs 5 --conns 8
//! cargo run --release --example loadgen -- idle 127.0.0.1:9000 --count 10000
//! ```
//!
//! Every client prints a human-readable summary and then one line starting
//! with `result:` followed by `key=value` pairs, which the script parses.
//! Errors that happen under load (refused, reset, timed out) are counted and
//! reported, never unwrapped.
#![forbid(unsafe_code)]

mod connrate;
mod echo;
mod idle;
mod pingpong;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// Load clients for measuring a TCP forwarder, and an echo backend for them.
#[derive(Parser, Debug)]
#[command(name = "loadgen")]
struct Cli {
    /// Which load to generate.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Echo every byte back; the backend for the other modes.
    EchoServer {
        /// Address to listen on.
        bind: SocketAddr,
        /// Executor threads (default: number of CPUs).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// One connection, request/response ping-pong; prints round-trip percentiles.
    Pingpong {
        /// Address to connect to (an echo server, directly or through a forwarder).
        addr: SocketAddr,
        /// Timed round trips.
        #[arg(long, default_value_t = 20_000)]
        count: usize,
        /// Bytes per request (and response).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Untimed round trips first, to warm caches and the scheduler.
        #[arg(long, default_value_t = 1_000)]
        warmup: usize,
    },
    /// Concurrent workers doing connect, request, response, close; prints connections/s.
    Connrate {
        /// Address to connect to.
        addr: SocketAddr,
        /// How long to run.
        #[arg(long, default_value_t = 5.0)]
        secs: f64,
        /// Concurrent workers (threads), each with one connection at a time.
        #[arg(long, default_value_t = 8)]
        conns: usize,
        /// Bytes per request (and response).
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
    /// Opens connections and holds them until stdin reaches EOF (or a line arrives).
    Idle {
        /// Address to connect to.
        addr: SocketAddr,
        /// Connections to open.
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        /// Skip the one 64-byte round trip that proves each connection reaches the backend.
        #[arg(long)]
        no_ping: bool,
        /// Stop opening connections after this many seconds (a slow forwarder
        /// must not stall the benchmark); what is open by then is held.
        #[arg(long, default_value_t = 60.0)]
        open_secs: f64,
    },
}

/// How long any single connect or read may take before it counts as an error;
/// keeps a wedged forwarder from hanging the benchmark script.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::EchoServer { bind, threads } => echo::run(bind, threads),
        Command::Pingpong {
            addr,
            count,
            size,
            warmup,
        } => pingpong::run(addr, count, size, warmup),
        Command::Connrate {
            addr,
            secs,
            conns,
            size,
        } => connrate::run(
            addr,
            Duration::from_secs_f64(secs.max(0.1)),
            conns.max(1),
            size,
        ),
        Command::Idle {
            addr,
            count,
            no_ping,
            open_secs,
        } => idle::run(
            addr,
            count,
            !no_ping,
            Duration::from_secs_f64(open_secs.max(0.1)),
        ),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("loadgen: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Raises this process's open-file soft limit to its hard limit; returns the new soft limit.
///
/// 10,000 connections need more than the usual soft limit of 1024.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => limit.maximum.unwrap_or(u64::MAX),
        Err(e) => {
            eprintln!("loadgen: cannot raise RLIMIT_NOFILE: {e}");
            limit.current.unwrap_or(u64::MAX)
        }
    }
}

/// A request of `size` bytes with a recognisable pattern, so a forwarder that
/// mixes up bytes is caught by the response check.
pub fn request(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}
