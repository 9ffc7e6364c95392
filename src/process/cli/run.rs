//! What the process runs with: the parsed command line mapped onto the
//! service's options ([`RunOptions::from_cli`]), then layered with the
//! configuration's globals where a setting can come from either.

use super::{Ask, Cli, MAX_THREADS};
use crate::observe::{ObserveSettings, Query};
use crate::route::shared::Settings;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Send an operator's request line (`oi backend`, `oi close`, `oi
    /// reload`, `oi config`) and print the answer; `Err`: the arguments
    /// cannot be asked for, and why.
    Admin {
        /// The request line, without its newline.
        line: Result<String, String>,
        /// `oi reload`: waits longer, and prints its errors as `--check`.
        reload: bool,
        /// `oi reload --or-sighup PID`: the process to send SIGHUP when no
        /// control socket answers.
        or_sighup: Option<i32>,
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
            status_socket: self.observe.status_socket.clone(),
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
                    status_socket: cli.status_socket.clone(),
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
                    Ask::Backend { action } => ClientAction::Admin {
                        line: action.line(),
                        reload: false,
                        or_sighup: None,
                    },
                    Ask::Close(which) => ClientAction::Admin {
                        line: which.line(),
                        reload: false,
                        or_sighup: None,
                    },
                    Ask::Reload { or_sighup } => ClientAction::Admin {
                        line: Ok("reload".into()),
                        reload: true,
                        or_sighup,
                    },
                    Ask::Config => ClientAction::Admin {
                        line: Ok("config".into()),
                        reload: false,
                        or_sighup: None,
                    },
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
