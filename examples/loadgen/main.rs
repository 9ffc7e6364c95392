//! loadgen: the load clients and echo backend behind `benches/compare.sh`.
//!
//! ```text
//! cargo run --release --example loadgen -- echo-server 127.0.0.1:9001
//! cargo run --release --example loadgen -- pingpong 127.0.0.1:9000 --count 20000
//! cargo run --release --example loadgen -- connrate 127.0.0.1:9000 --secs 5 --conns 8
//! cargo run --release --example loadgen -- idle 127.0.0.1:9000 --count 10000
//! cargo run --release --example loadgen -- sink 127.0.0.1:9002
//! cargo run --release --example loadgen -- tls-handshakes 127.0.0.1:9443 --ca ca.pem --name localhost --resume
//! cargo run --release --example loadgen -- tls-bulk 127.0.0.1:9444 --ca ca.pem --name localhost --streams 8
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
mod tls;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
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
    /// Reads `u` and a length (8 bytes, big-endian) and that many bytes, then
    /// answers `k`; or `d` and a length, and sends that many; the backend of
    /// `tls-bulk`.
    Sink {
        /// Address to listen on.
        bind: SocketAddr,
    },
    /// Concurrent TLS clients doing connect, handshake, one byte echoed,
    /// close; prints handshakes/s and the fraction resumed.
    TlsHandshakes {
        /// Address to connect to (a TLS forwarder to an echo server).
        addr: SocketAddr,
        /// PEM file of the CA that signed the forwarder's certificate.
        #[arg(long)]
        ca: PathBuf,
        /// Server name to ask for and verify.
        #[arg(long, default_value = "localhost")]
        name: String,
        /// How long to run.
        #[arg(long, default_value_t = 5.0)]
        secs: f64,
        /// Concurrent workers (threads), each with one connection at a time.
        #[arg(long, default_value_t = 8)]
        conns: usize,
        /// Offer the tickets the server gave (each worker its own store).
        #[arg(long)]
        resume: bool,
    },
    /// Concurrent TLS uploads to the sink (or downloads); prints Gbit/s of plaintext.
    TlsBulk {
        /// Address to connect to (a TLS forwarder to a sink).
        addr: SocketAddr,
        /// PEM file of the CA that signed the forwarder's certificate.
        #[arg(long)]
        ca: PathBuf,
        /// Server name to ask for and verify.
        #[arg(long, default_value = "localhost")]
        name: String,
        /// Plaintext bytes per stream.
        #[arg(long, default_value_t = 1 << 30)]
        bytes: u64,
        /// Streams at once.
        #[arg(long, default_value_t = 1)]
        streams: usize,
        /// Download from the sink instead of uploading to it.
        #[arg(long)]
        down: bool,
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
        Command::Sink { bind } => tls::sink(bind),
        Command::TlsHandshakes {
            addr,
            ca,
            name,
            secs,
            conns,
            resume,
        } => tls::handshakes(
            addr,
            &ca,
            &name,
            Duration::from_secs_f64(secs.max(0.1)),
            conns.max(1),
            resume,
        ),
        Command::TlsBulk {
            addr,
            ca,
            name,
            bytes,
            streams,
            down,
        } => tls::bulk(addr, &ca, &name, bytes, streams.max(1), down),
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
