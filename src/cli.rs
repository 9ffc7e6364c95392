//! The command line, and the one step that turns it into validated options.
//!
//! Options that mean the same for every command (`-c`, `--socket`) are
//! `global`: accepted before or after a subcommand (`oi status -c FILE` as
//! well as `oi -c FILE status`) and listed in each subcommand's `--help`.
//! The server's own flags stay before any subcommand, which rejects them.
//!
//! Every value is checked while clap parses it, so a bad one exits with
//! status 2 and a message naming the flag (`invalid value '-5' for
//! '--connect-timeout <DURATION>': ...`). [`RunOptions::from_cli`] then only
//! maps the parsed values onto what the service runs with.

use crate::observe::{ObserveSettings, Query, StatusFormat};
use crate::shared::Settings;
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
    /// (q quit, s sort, f filter by rule, p pause). Not on a terminal: one table.
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
    /// Print the configuration (-c, with its includes) in the other format:
    /// rinetd.conf as YAML, YAML as rinetd.conf; what the other cannot say
    /// becomes a comment. Reads the file only: no running oi is needed.
    Convert {
        /// The format to write (default: the one the file is not in).
        #[arg(long, value_name = "FORMAT", value_parser = ["yaml", "conf"])]
        to: Option<String>,
    },
}

/// What `oi status`, `oi connections`, `oi top` or `oi upgrade` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAction {
    /// Print one answer, text or JSON.
    Print {
        /// What to ask.
        query: Query,
        /// JSON instead of text.
        json: bool,
    },
    /// Poll every `interval` and show the live view.
    Top {
        /// Time between polls.
        interval: Duration,
    },
    /// Ask for an upgrade and print how it went.
    Upgrade {
        /// The binary to start, if not the running one's path.
        binary: Option<PathBuf>,
    },
}

/// A question for a running oi, from `oi status` or `oi connections`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientQuery {
    /// What to ask, and what to do with the answer.
    pub action: ClientAction,
    /// The control socket (`--socket`); required until the configuration's
    /// `controlsocket` can supply it.
    pub socket: Option<PathBuf>,
}

/// How the process runs: what it was asked on the command line, validated.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The configuration file, as given (messages name it this way).
    pub conf_file: PathBuf,
    /// Only check the configuration (`--check`).
    pub check: bool,
    /// Print the configuration in this format and exit (`oi convert`).
    pub convert: Option<oi_config::Format>,
    /// With `--check`, print nothing on success (`-q`).
    pub quiet: bool,
    /// Fork to the background (`--daemon`, or started as `rinetd`), unless `-f`.
    pub background: bool,
    /// Whether rinetd's defaults apply: its pid file, syslog name (`--daemon` or drop-in mode).
    pub rinetd_defaults: bool,
    /// The program name diagnostics go out under in syslog.
    pub program: &'static str,
    /// Executor threads to run.
    pub threads: NonZeroUsize,
    /// Engine settings every connection reads.
    pub settings: Settings,
    /// How long open connections may run on after SIGTERM.
    pub drain: Duration,
    /// Status file, STATS line, metrics endpoint and control socket.
    pub observe: ObserveSettings,
    /// The command line's values of settings the configuration file can also
    /// set (`--buffer-size`, `--status-file`, `--metrics`, `--socket`, ...),
    /// stored as the globals they override: the top layer of
    /// `config::settings::resolve_globals`.
    pub flags: oi_config::Globals,
    /// The flags that override rule options (`--connect-timeout`, `--splice`),
    /// as options: the top layer of `config::settings::resolve`.
    pub command_line: oi_config::RuleOptions,
    /// `oi status` or `oi connections`: ask a running oi, then exit.
    pub client: Option<ClientQuery>,
    /// `--user`: who to become after binding (see `privileges`).
    pub user: Option<String>,
    /// `--group`: the group to become with it.
    pub group: Option<String>,
}

impl RunOptions {
    /// The engine settings: the command line's, with the configuration's
    /// `buffersize` when `--buffer-size` was not given (the one order of
    /// `config::settings`). Read at start only: the buffer pools are sized
    /// once, so a reload does not change it.
    pub fn settings_with(&self, globals: &oi_config::Globals) -> Settings {
        let g = oi_config::settings::resolve_globals(&self.flags, globals);
        let mut s = self.settings.clone();
        if let Some(b) = g.buffer_size {
            s.buffer_size = b;
        }
        s
    }

    /// The watching settings: the command line's, then the configuration's
    /// `statusfile`, `statusinterval`, `statusformat`, `statsloginterval`,
    /// `metrics` and `controlsocket` for what it left out, then the defaults.
    pub fn observe_with(&self, globals: &oi_config::Globals) -> ObserveSettings {
        let mut file = globals.clone();
        // YAML `status.enabled: false` turns the file's own status file off;
        // `--status-file` still writes one.
        if file.status_enabled == Some(false) {
            file.status_file = None;
        }
        let g = oi_config::settings::resolve_globals(&self.flags, &file);
        let d = ObserveSettings::default();
        ObserveSettings {
            status_file: g.status_file,
            status_interval: g
                .status_interval
                .filter(|t| !t.is_zero())
                .unwrap_or(d.status_interval),
            status_format: g.status_format.unwrap_or(d.status_format),
            stats_log_interval: g.stats_log_interval.unwrap_or(d.stats_log_interval),
            metrics: g.metrics,
            control_socket: g.control_socket,
        }
    }
}

impl RunOptions {
    /// Maps parsed flags onto run options. `as_rinetd` says whether the
    /// program was started under the name `rinetd` (drop-in mode).
    pub fn from_cli(cli: Cli, as_rinetd: bool) -> Self {
        let threads = cli
            .threads
            .or_else(|| NonZeroUsize::new(num_cpus::get().min(MAX_THREADS)))
            .unwrap_or(NonZeroUsize::MIN);
        let convert = match &cli.command {
            Some(Ask::Convert { to }) => Some(match to.as_deref() {
                Some("yaml") => oi_config::Format::Yaml,
                Some(_) => oi_config::Format::Conf,
                // The other format than the file's.
                None if oi_config::is_yaml(&cli.conf_file) => oi_config::Format::Conf,
                None => oi_config::Format::Yaml,
            }),
            _ => None,
        };
        RunOptions {
            conf_file: cli.conf_file,
            check: cli.check,
            convert,
            quiet: cli.quiet,
            background: (cli.daemon || as_rinetd) && !cli.foreground,
            rinetd_defaults: cli.daemon || as_rinetd,
            program: if as_rinetd { "rinetd" } else { "oi" },
            threads,
            settings: Settings {
                buffer_size: cli
                    .buffer_size
                    .map_or(Settings::default().buffer_size, |b| b as usize),
                connect_timeout: cli
                    .connect_timeout
                    .unwrap_or(Settings::default().connect_timeout),
                half_close_idle: cli.half_close_timeout,
                splice: cli.splice.unwrap_or_default(),
            },
            command_line: oi_config::RuleOptions {
                connect_timeout: cli.connect_timeout,
                splice: cli.splice,
                ..Default::default()
            },
            drain: cli.drain,
            observe: {
                let d = ObserveSettings::default();
                ObserveSettings {
                    status_file: cli.status_file.clone(),
                    status_interval: cli.status_interval.unwrap_or(d.status_interval),
                    status_format: cli.status_format.unwrap_or(d.status_format),
                    stats_log_interval: cli.stats_log_interval.unwrap_or(d.stats_log_interval),
                    metrics: cli.metrics,
                    control_socket: cli.socket.clone(),
                }
            },
            flags: oi_config::Globals {
                buffer_size: cli.buffer_size.map(|b| b as usize),
                status_file: cli.status_file.clone(),
                status_interval: cli.status_interval,
                status_format: cli.status_format,
                stats_log_interval: cli.stats_log_interval,
                metrics: cli.metrics,
                control_socket: cli.socket.clone(),
                watch: cli.watch.then_some(true),
                ..Default::default()
            },
            user: cli.user,
            group: cli.group,
            client: cli.command.and_then(|ask| {
                let action = match ask {
                    Ask::Status { json } => ClientAction::Print {
                        query: Query::Status,
                        json,
                    },
                    Ask::Connections { json } => ClientAction::Print {
                        query: Query::Connections,
                        json,
                    },
                    Ask::Top { interval } => ClientAction::Top { interval },
                    Ask::Upgrade { binary } => ClientAction::Upgrade { binary },
                    Ask::Convert { .. } => return None,
                };
                Some(ClientQuery {
                    action,
                    socket: cli.socket,
                })
            }),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<RunOptions, clap::Error> {
        let argv = std::iter::once("oi").chain(args.iter().copied());
        Cli::try_parse_from(argv).map(|cli| RunOptions::from_cli(cli, false))
    }

    /// The error a bad command line gives, as printed (clap exits 2 with it).
    fn error(args: &[&str]) -> String {
        match parse(args) {
            Ok(o) => panic!("{args:?} accepted: {o:?}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::ValueValidation, "{e}");
                assert_eq!(e.exit_code(), 2);
                e.to_string()
            }
        }
    }

    #[test]
    fn buffersize_in_the_configuration_applies_unless_the_flag_is_given() {
        let globals = oi_config::Globals {
            buffer_size: Some(8192),
            ..Default::default()
        };
        let o = parse(&[]).expect("defaults");
        assert_eq!(o.settings_with(&globals).buffer_size, 8192);
        assert_eq!(o.settings_with(&Default::default()).buffer_size, 65536);
        let o = parse(&["--buffer-size", "4096"]).expect("flag");
        assert_eq!(o.settings_with(&globals).buffer_size, 4096, "the flag wins");
    }

    #[test]
    fn flags_that_override_rule_options_are_given_only_when_written() {
        let o = parse(&[]).expect("defaults");
        assert_eq!(o.command_line, oi_config::RuleOptions::default());
        let o = parse(&["--connect-timeout", "3s", "--splice", "off"]).expect("flags");
        assert_eq!(o.command_line.connect_timeout, Some(Duration::from_secs(3)));
        assert_eq!(o.command_line.splice, Some(SpliceMode::Off));
        // The rule's option loses to them (config::settings::resolve).
        let rule = oi_config::RuleOptions {
            connect_timeout: Some(Duration::from_secs(9)),
            splice: Some(SpliceMode::On),
            ..Default::default()
        };
        let g = oi_config::Globals::default();
        let r = oi_config::settings::resolve(&o.command_line, &rule, &g, Default::default());
        assert_eq!(r.connect_timeout, Some(Duration::from_secs(3)));
        assert_eq!(r.splice, Some(SpliceMode::Off));
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let o = parse(&[]).expect("defaults");
        assert_eq!(o.conf_file, PathBuf::from("/etc/rinetd.conf"));
        assert_eq!(o.settings.connect_timeout, Duration::from_secs(10));
        assert_eq!(o.settings.half_close_idle, Duration::from_secs(60));
        assert_eq!(o.settings.buffer_size, 65536);
        assert_eq!(o.settings.splice, SpliceMode::Auto);
        assert_eq!(o.drain, Duration::ZERO);
        assert!(!o.background && !o.rinetd_defaults);
        assert_eq!(o.program, "oi");
    }

    #[test]
    fn durations_take_units_and_plain_seconds() {
        let o = parse(&[
            "--connect-timeout=500ms",
            "--half-close-timeout",
            "2m",
            "--drain=1.5",
        ])
        .expect("valid");
        assert_eq!(o.settings.connect_timeout, Duration::from_millis(500));
        assert_eq!(o.settings.half_close_idle, Duration::from_secs(120));
        assert_eq!(o.drain, Duration::from_millis(1500));
        let o = parse(&["--drain=1h", "--connect-timeout=3s"]).expect("valid");
        assert_eq!(o.drain, Duration::from_secs(3600));
        assert_eq!(o.settings.connect_timeout, Duration::from_secs(3));
    }

    #[test]
    fn bad_durations_exit_2_naming_the_flag() {
        for (args, flag, why) in [
            (
                ["--connect-timeout=-5"],
                "--connect-timeout",
                "must not be negative",
            ),
            (["--drain=NaN"], "--drain", "must be a finite number"),
            (
                ["--half-close-timeout=inf"],
                "--half-close-timeout",
                "must be a finite number",
            ),
            (["--drain=1e19"], "--drain", "at most 31536000 seconds"),
            (["--connect-timeout=0"], "--connect-timeout", "more than 0"),
            (["--drain=5 parsecs"], "--drain", "expected a number"),
            (["--drain=soon"], "--drain", "expected a number"),
        ] {
            let e = error(&args);
            assert!(e.contains(flag), "{args:?}: {e}");
            assert!(e.contains(why), "{args:?}: {e}");
        }
    }

    #[test]
    fn threads_must_be_between_1_and_the_maximum() {
        assert!(error(&["--threads=0"]).contains("--threads"));
        assert!(error(&["--threads=1025"]).contains("from 1 to 1024"));
        assert!(error(&["--threads=-1"]).contains("--threads"));
        assert_eq!(parse(&["--threads=3"]).expect("valid").threads.get(), 3);
    }

    #[test]
    fn splice_mode_has_one_parser() {
        for (text, mode) in [
            ("on", SpliceMode::On),
            ("off", SpliceMode::Off),
            ("auto", SpliceMode::Auto),
        ] {
            let o = parse(&["--splice", text]).expect("valid");
            assert_eq!(o.settings.splice, mode);
        }
        let e = Cli::try_parse_from(["oi", "--splice=maybe"]).expect_err("invalid");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("--splice"), "{e}");
    }

    #[test]
    fn watching_flags_default_as_rinetd_uv_and_parse() {
        let o = parse(&[]).expect("defaults");
        assert_eq!(o.observe, ObserveSettings::default());
        assert_eq!(o.observe.status_interval, Duration::from_secs(30));
        assert_eq!(o.observe.stats_log_interval, Duration::from_secs(60));
        assert!(o.client.is_none());
        let o = parse(&[
            "--status-file=/run/oi.json",
            "--status-interval=5s",
            "--status-format=text",
            "--stats-log-interval=0",
            "--metrics=127.0.0.1:9465",
            "--socket=/run/oi.sock",
        ])
        .expect("valid");
        assert_eq!(o.observe.status_file, Some(PathBuf::from("/run/oi.json")));
        assert_eq!(o.observe.status_interval, Duration::from_secs(5));
        assert_eq!(o.observe.status_format, StatusFormat::Text);
        assert_eq!(o.observe.stats_log_interval, Duration::ZERO);
        assert_eq!(
            o.observe.metrics,
            Some("127.0.0.1:9465".parse().expect("addr"))
        );
        assert_eq!(
            o.observe.control_socket,
            Some(PathBuf::from("/run/oi.sock"))
        );
        assert!(error(&["--status-interval=0"]).contains("--status-interval"));
        let e = Cli::try_parse_from(["oi", "--status-format=yaml"]).expect_err("invalid");
        assert_eq!(e.exit_code(), 2);
        let e = Cli::try_parse_from(["oi", "--metrics=localhost"]).expect_err("invalid");
        assert!(e.to_string().contains("--metrics"), "{e}");
    }

    #[test]
    fn status_and_connections_are_subcommands_beside_the_old_flags() {
        let o = parse(&["status", "--socket", "/run/oi.sock"]).expect("valid");
        let q = o.client.expect("a question");
        assert_eq!(
            q.action,
            ClientAction::Print {
                query: Query::Status,
                json: false
            }
        );
        assert_eq!(q.socket, Some(PathBuf::from("/run/oi.sock")));
        let o = parse(&["--socket=/s", "connections", "--json"]).expect("valid");
        let q = o.client.expect("a question");
        assert_eq!(
            q.action,
            ClientAction::Print {
                query: Query::Connections,
                json: true
            }
        );
        assert_eq!(q.socket, Some(PathBuf::from("/s")));
        assert!(parse(&["status"])
            .expect("valid")
            .client
            .expect("q")
            .socket
            .is_none());
        // The server's flags are as before.
        let o = parse(&["-c", "/etc/x.conf", "--check"]).expect("valid");
        assert!(o.check && o.client.is_none());
        assert_eq!(o.conf_file, PathBuf::from("/etc/x.conf"));
        let cli = Cli::try_parse_from(["rinetd", "-f", "-c", "/etc/rinetd.conf"]).expect("valid");
        assert!(RunOptions::from_cli(cli, true).client.is_none());
        let q = parse(&["top", "--interval=250ms"])
            .expect("valid")
            .client
            .expect("a question");
        assert_eq!(
            q.action,
            ClientAction::Top {
                interval: Duration::from_millis(250)
            }
        );
        assert!(error(&["top", "--interval=0"]).contains("--interval"));
    }

    #[test]
    fn options_for_every_command_are_accepted_after_the_subcommand_too() {
        for args in [
            &["status", "-c", "/etc/x.conf"][..],
            &["-c", "/etc/x.conf", "status"],
            &["status", "--conf-file=/etc/x.conf", "--json"],
            &["connections", "--socket", "/s", "-c", "/etc/x.conf"],
        ] {
            let o = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(o.conf_file, PathBuf::from("/etc/x.conf"), "{args:?}");
            assert!(o.client.is_some(), "{args:?}");
        }
        let o = parse(&["connections", "--socket", "/s", "-c", "/x"]).expect("valid");
        assert_eq!(o.client.expect("q").socket, Some(PathBuf::from("/s")));
        // The server's own flags do not apply to a question: refused after it.
        let e = Cli::try_parse_from(["oi", "status", "--threads", "2"]).expect_err("server flag");
        assert_eq!(e.kind(), ErrorKind::UnknownArgument, "{e}");
    }

    #[test]
    fn each_subcommand_help_lists_the_options_for_every_command() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        cli.build();
        for sub in ["status", "connections"] {
            let help = cli
                .find_subcommand_mut(sub)
                .expect("subcommand")
                .render_long_help()
                .to_string();
            for flag in ["-c, --conf-file <FILE>", "--socket <PATH>"] {
                assert!(
                    help.contains(flag),
                    "`oi {sub} --help` lacks {flag}:\n{help}"
                );
            }
        }
    }

    #[test]
    fn drop_in_mode_forks_unless_foreground() {
        let cli = Cli::try_parse_from(["rinetd"]).expect("valid");
        let o = RunOptions::from_cli(cli, true);
        assert!(o.background && o.rinetd_defaults);
        assert_eq!(o.program, "rinetd");
        let cli = Cli::try_parse_from(["rinetd", "-f"]).expect("valid");
        assert!(!RunOptions::from_cli(cli, true).background);
    }
}
