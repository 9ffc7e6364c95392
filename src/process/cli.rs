//! The command line, and the one step that turns it into validated options.
//!
//! Options that mean the same for every command (`-c`, `--socket`) are
//! `global`: accepted before or after a subcommand (`oi status -c FILE` as
//! well as `oi -c FILE status`) and listed in each subcommand's `--help`.
//! The server's own flags stay before any subcommand, which rejects them.
//!
//! Every value is checked while clap parses it, so a bad one exits with
//! status 2 and a message naming the flag (`invalid value '-5' for
//! '--connect-timeout <DURATION>': ...`). [`RunOptions::from_cli`]
//! (`cli/run.rs`) then only maps the parsed values onto what the service
//! runs with.

mod run;
#[cfg(test)]
mod tests;

pub use run::{ClientAction, ClientQuery, RunOptions};

mod admin;
pub use admin::{BackendAction, CloseWhich};

use crate::observe::StatusFormat;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{ArgAction, Parser, Subcommand};
use oi_config::SpliceMode;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

/// The longest duration any flag accepts: one year. Far beyond any sensible
/// timeout, and far enough from `Instant`'s limits that adding it to the
/// current time can never overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The most executor threads `--threads` accepts.
pub const MAX_THREADS: usize = 1024;

/// oi: a rinetd-compatible TCP/UDP port forwarder.
///
/// Reads rinetd.conf (`bindaddr bindport connectaddr connectport [options]`,
/// allow/deny, logfile, logcommon, pidlogfile) and forwards connections.
/// SIGHUP reloads the file without dropping connections.
///
/// Durations take a unit: `10s`, `500ms`, `2m`, `1h`; a bare number is seconds.
#[derive(Parser, Debug, Clone)]
#[command(name = "oi", version, disable_version_flag = true)]
pub struct Cli {
    /// Configuration file to read (`oi status` and `oi connections` find the
    /// control socket in its `controlsocket` line).
    #[arg(
        short = 'c',
        long = "conf-file",
        value_name = "FILE",
        default_value = "/etc/rinetd.conf",
        global = true
    )]
    pub conf_file: PathBuf,

    /// Stay in the foreground (the default for `oi`; under the name `rinetd` or with --daemon, it keeps the process from forking).
    #[arg(short = 'f', long)]
    pub foreground: bool,

    /// Check the configuration, print what would run, and exit (0 if valid, 1 if not).
    #[arg(long)]
    pub check: bool,

    /// With --check: print nothing when the configuration is valid (errors and warnings still go to stderr).
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// Fork to the background like rinetd, write a pid file and log to syslog.
    #[arg(long)]
    pub daemon: bool,

    /// Executor threads, 1 to 1024 (default: number of CPUs).
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<NonZeroUsize>,

    /// Size of each copy buffer in bytes (1024 to 16777216; default: the configuration's `buffersize`, else 65536).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1024..=16 * 1024 * 1024))]
    pub buffer_size: Option<u32>,

    /// How long to wait for a backend to accept a connection (more than 0, at most 365 days; default 10s, or the configuration's `connect-timeout`). Given, it wins over every rule's.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub connect_timeout: Option<Duration>,

    /// How long a half-closed connection may stay idle before it is closed (more than 0, at most 365 days).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_positive_duration)]
    pub half_close_timeout: Duration,

    /// On SIGTERM/SIGINT, let open connections run this long before exiting (0 to 365 days; a second signal exits at once).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub drain: Duration,

    /// Zero-copy splice(2) forwarding: auto (splice; measured faster), on or off (default auto, or the rule's `splice=`). Given, it wins over every rule's.
    #[arg(
        long,
        value_name = "MODE",
        value_parser = PossibleValuesParser::new(SpliceMode::NAMES)
            .try_map(|s: String| s.parse::<SpliceMode>())
    )]
    pub splice: Option<SpliceMode>,

    /// Write a status file (rinetd-uv's `statusfile`), replaced whole every --status-interval.
    #[arg(long, value_name = "PATH")]
    pub status_file: Option<PathBuf>,

    /// How often to rewrite the status file (more than 0, at most 365 days; default 30s, or the configuration's `statusinterval`).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub status_interval: Option<Duration>,

    /// The status file's format: json or text.
    #[arg(
        long,
        value_name = "FORMAT",
        value_parser = PossibleValuesParser::new(StatusFormat::NAMES)
            .try_map(|s: String| s.parse::<StatusFormat>())
    )]
    pub status_format: Option<StatusFormat>,

    /// How often to log a one-line STATS summary (0 turns it off; default 60s, or the configuration's `statsloginterval`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stats_log_interval: Option<Duration>,

    /// Serve Prometheus metrics at http://ADDR/metrics (for example 127.0.0.1:9465).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,

    /// The control socket: the server creates it (mode 0600); `oi status` and `oi connections` ask it.
    #[arg(long, value_name = "PATH", global = true)]
    pub socket: Option<PathBuf>,

    /// A read-only control socket (mode 0660): answers status, connections
    /// and config, refuses what changes anything.
    #[arg(long, value_name = "PATH")]
    pub status_socket: Option<PathBuf>,

    /// After binding, run as this user (name or uid), keeping only
    /// CAP_NET_BIND_SERVICE so a reload can still bind ports below 1024
    /// (or the configuration's `user`).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,

    /// With --user: the group to run as (default: the user's primary group).
    #[arg(long, value_name = "GROUP", requires = "user")]
    pub group: Option<String>,

    /// Reload by itself when the configuration file or an included file changes, as SIGHUP does (default: the configuration's `watch`, else off).
    #[arg(long)]
    pub watch: bool,

    /// Print the version and exit.
    #[arg(short = 'v', short_alias = 'V', long = "version", action = ArgAction::Version)]
    pub version: Option<bool>,

    /// Ask a running oi instead of running one.
    #[command(subcommand)]
    pub command: Option<Ask>,
}

/// Questions for a running oi, asked through its control socket (`--socket`).
#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Print the counters: connections, bytes, refusals, failures, per rule.
    Status {
        /// Print JSON (the status file's document) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print one line per live TCP connection and UDP association.
    Connections {
        /// Print a JSON array instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Watch it live, like top: rules, backends and the busiest connections
    /// (q quit, s sort, f filter by rule, p pause; j/k or the arrow keys
    /// select a backend, d drain, e enable, x disable it, each confirmed
    /// with y). Not on a terminal: one table.
    Top {
        /// Time between polls of the control socket.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_positive_duration)]
        interval: Duration,
    },
    /// Upgrade the running oi without refusing a connection: it starts the
    /// binary at the path it was started from (read again from disk), or
    /// --binary, hands it every listening socket, and exits once its open
    /// connections end. Exits non-zero, saying why, when the new binary
    /// cannot take over; the running oi then keeps serving.
    Upgrade {
        /// The binary to start instead of the running one's path.
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
    },
    /// Change a backend's admin state or weight in the running oi: drain
    /// (no new connections, open ones finish), disable (no new
    /// connections, open ones closed after --grace), enable (back to the
    /// file's state and weight), weight N (0 to 256, instead of the
    /// file's). RULE and BACKEND as `oi status` prints them. Kept across a
    /// reload while the backend is in the file.
    Backend {
        /// What to do.
        #[command(subcommand)]
        action: BackendAction,
    },
    /// Close live connections of the running oi (TCP and unix streams, and
    /// UDP associations to a UDP backend): exactly one of --id
    /// (as `oi connections` lists it), --client ADDR[/BITS], --rule RULE,
    /// --backend RULE BACKEND. Prints how many were closed.
    Close(CloseWhich),
    /// Reload the running oi's configuration and wait for the outcome: the
    /// rule count, or every error as --check prints it (exit 1; the running
    /// oi keeps serving its previous rules).
    Reload {
        /// When no control socket is there to ask (no file, or nobody
        /// listening: oi runs without --socket), check the file (-c) as
        /// --check does and send PID SIGHUP instead, without waiting for
        /// the outcome (oi's log has it). For a service manager's reload
        /// command: `--or-sighup $MAINPID`.
        #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
        or_sighup: Option<i32>,
    },
    /// Print the running configuration as oi resolved it, in the file's
    /// format, with runtime changes (admin state, weights) as comments.
    Config,
    /// Print the configuration (-c, with its includes) in the other format:
    /// rinetd.conf as YAML, YAML as rinetd.conf; what the other cannot say
    /// becomes a comment. Reads the file only: no running oi is needed.
    Convert {
        /// The format to write (default: the one the file is not in).
        #[arg(long, value_name = "FORMAT", value_parser = ["yaml", "conf"])]
        to: Option<String>,
    },
}

/// True when the program was started under the name `rinetd` (a symlink or a copy).
pub fn invoked_as_rinetd() -> bool {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n == "rinetd"))
        .unwrap_or(false)
}

/// `--threads`: a whole number from 1 to [`MAX_THREADS`].
fn parse_threads(s: &str) -> Result<NonZeroUsize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a whole number from 1 to {MAX_THREADS}"))?;
    match NonZeroUsize::new(n) {
        Some(n) if n.get() <= MAX_THREADS => Ok(n),
        _ => Err(format!("must be from 1 to {MAX_THREADS}")),
    }
}

/// A duration that must be more than zero.
fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        Duration::ZERO => Err("must be more than 0".into()),
        d => Ok(d),
    }
}

/// A duration: a non-negative finite number with an optional unit (`ms`, `s`,
/// `m`, `h`; seconds when absent), at most [`MAX_DURATION`]. `inf` and `NaN`
/// are refused: no flag has a meaning for "forever".
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds, such as 10, 1.5, 500ms or 2m".to_string())?;
    if !value.is_finite() {
        return Err("must be a finite number".into());
    }
    if value < 0.0 {
        return Err("must not be negative".into());
    }
    let max = MAX_DURATION.as_secs_f64();
    let secs = value * scale;
    if secs > max {
        return Err(format!("must be at most {max} seconds (365 days)"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}
