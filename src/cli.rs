//! Command-line options.

use crate::config::SpliceMode;
use clap::{ArgAction, Parser, ValueEnum};
use std::path::PathBuf;

/// oi: a rinetd-compatible TCP/UDP port forwarder.
///
/// Reads rinetd.conf (`bindaddr bindport connectaddr connectport [options]`,
/// allow/deny, logfile, logcommon, pidlogfile) and forwards connections.
/// SIGHUP reloads the file without dropping connections.
#[derive(Parser, Debug, Clone)]
#[command(name = "oi", version, disable_version_flag = true)]
pub struct Cli {
    /// Configuration file to read.
    #[arg(
        short = 'c',
        long = "conf-file",
        value_name = "FILE",
        default_value = "/etc/rinetd.conf"
    )]
    pub conf_file: PathBuf,

    /// Stay in the foreground (the default for `oi`; under the name `rinetd` or with --daemon, it keeps the process from forking).
    #[arg(short = 'f', long)]
    pub foreground: bool,

    /// Check the configuration, print what would run, and exit (0 if valid, 1 if not).
    #[arg(long)]
    pub check: bool,

    /// Fork to the background like rinetd, write a pid file and log to syslog.
    #[arg(long)]
    pub daemon: bool,

    /// Worker threads for the executor (default: number of CPUs).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Size of each copy buffer in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 65536, value_parser = clap::value_parser!(u32).range(1024..=16 * 1024 * 1024))]
    pub buffer_size: u32,

    /// Seconds to wait for a backend to accept a connection.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub connect_timeout: f64,

    /// Seconds a half-closed connection may stay idle before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub half_close_timeout: f64,

    /// On SIGTERM/SIGINT, let open connections run this many seconds before exiting.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub drain: f64,

    /// Zero-copy splice(2) forwarding on Linux: auto, on or off.
    #[arg(long, value_enum, default_value_t = SpliceArg::Auto)]
    pub splice: SpliceArg,

    /// Print the version and exit.
    #[arg(short = 'v', short_alias = 'V', long = "version", action = ArgAction::Version)]
    pub version: Option<bool>,
}

/// `--splice` values.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpliceArg {
    /// Whichever measured faster on Linux: splice (see README, Command line).
    Auto,
    /// Use splice(2).
    On,
    /// Copy through user-space buffers.
    Off,
}

impl From<SpliceArg> for SpliceMode {
    fn from(a: SpliceArg) -> Self {
        match a {
            SpliceArg::Auto => SpliceMode::Auto,
            SpliceArg::On => SpliceMode::On,
            SpliceArg::Off => SpliceMode::Off,
        }
    }
}
