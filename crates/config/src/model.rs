//! The parts of the model that came with rinetd-uv's dialect and YAML format:
//! several backends per rule, how to choose among them, and the global
//! settings rinetd-uv added. Both file formats fill the same fields.

use super::{Endpoint, Host};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Which file format a configuration was read from; decides the defaults
/// where rinetd 0.73 and rinetd-uv disagree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// rinetd.conf text (rinetd 0.73 plus the rinetd-uv dialect): rinetd 0.73's defaults.
    #[default]
    Conf,
    /// rinetd-uv's YAML format: rinetd-uv's defaults (10 s UDP timeout, 5000 associations).
    Yaml,
}

/// One backend of a rule: where to connect, and its place in the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// Where to connect.
    pub endpoint: Endpoint,
    /// `name:` (YAML), for status reports and logs; `None` when not written.
    pub name: Option<String>,
    /// `weight:` (YAML, 1 to [`MAX_WEIGHT`]): share of new connections; 1 when not written.
    pub weight: u32,
    /// Per-backend `src:` (YAML); overrides the rule's `[src=...]`.
    pub src: Option<Host>,
    /// Per-backend `dns_refresh:`; `Some(ZERO)` turns refreshing off for this backend.
    pub dns_refresh: Option<Duration>,
    /// 1-based line of the backend in its file (the rule's line in a .conf file).
    pub line: usize,
}

/// Largest backend `weight` (as rinetd-uv).
pub const MAX_WEIGHT: u32 = 100;

impl Backend {
    /// A backend with default pool settings: what a .conf rule's single target becomes.
    pub fn plain(endpoint: Endpoint, line: usize) -> Self {
        Backend {
            endpoint,
            name: None,
            weight: 1,
            src: None,
            dns_refresh: None,
            line,
        }
    }
}

/// How a rule picks a backend for a new connection (`load_balancing.algorithm`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Algorithm {
    /// Smooth weighted round robin; the default.
    #[default]
    RoundRobin,
    /// Fewest active connections, weight as tie-breaker.
    LeastConn,
    /// Weighted random choice.
    Random,
    /// A hash of the client address, so one client keeps its backend.
    IpHash,
}

impl Algorithm {
    /// The names the YAML format spells the algorithms with.
    pub const NAMES: [&'static str; 4] = ["roundrobin", "leastconn", "random", "iphash"];

    /// The algorithm called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "roundrobin" => Some(Algorithm::RoundRobin),
            "leastconn" => Some(Algorithm::LeastConn),
            "random" => Some(Algorithm::Random),
            "iphash" => Some(Algorithm::IpHash),
            _ => None,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::RoundRobin => "roundrobin",
            Algorithm::LeastConn => "leastconn",
            Algorithm::Random => "random",
            Algorithm::IpHash => "iphash",
        })
    }
}

/// A rule's pool settings (`load_balancing:` in YAML; defaults in a .conf file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Balance {
    /// How to pick a backend.
    pub algorithm: Algorithm,
    /// Consecutive connect failures after which a backend counts as down (1 to 100).
    pub health_threshold: u32,
    /// How long a down backend is skipped before it is tried again (1 s to 1 day).
    pub recovery_timeout: Duration,
    /// How long a client sticks to its backend; zero turns affinity off (up to 30 days).
    pub affinity_ttl: Duration,
    /// Most clients remembered for affinity (100 to 10,000,000).
    pub affinity_max_entries: usize,
}

/// Default `health_threshold`, as rinetd-uv.
pub const DEFAULT_HEALTH_THRESHOLD: u32 = 3;
/// Default `recovery_timeout`, as rinetd-uv.
pub const DEFAULT_RECOVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `affinity_max_entries`, as rinetd-uv.
pub const DEFAULT_AFFINITY_MAX_ENTRIES: usize = 10_000;

impl Default for Balance {
    fn default() -> Self {
        Balance {
            algorithm: Algorithm::RoundRobin,
            health_threshold: DEFAULT_HEALTH_THRESHOLD,
            recovery_timeout: DEFAULT_RECOVERY_TIMEOUT,
            affinity_ttl: Duration::ZERO,
            affinity_max_entries: DEFAULT_AFFINITY_MAX_ENTRIES,
        }
    }
}

impl fmt::Display for Balance {
    /// `roundrobin, health 3 failures, recovery 30s[, affinity 300s (max 10000)]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, health {} failure{}, recovery {}s",
            self.algorithm,
            self.health_threshold,
            super::plural(self.health_threshold as usize),
            self.recovery_timeout.as_secs()
        )?;
        if !self.affinity_ttl.is_zero() {
            write!(
                f,
                ", affinity {}s (max {})",
                self.affinity_ttl.as_secs(),
                self.affinity_max_entries
            )?;
        }
        Ok(())
    }
}

/// Which address families a name that resolves to several addresses expands
/// to (`dns-multi-ip-proto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpFilter {
    /// IPv4 addresses only (rinetd-uv's default).
    Ipv4,
    /// IPv6 addresses only.
    Ipv6,
    /// Both families.
    Any,
}

impl fmt::Display for IpFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFilter::Ipv4 => "ipv4",
            IpFilter::Ipv6 => "ipv6",
            IpFilter::Any => "any",
        })
    }
}

/// The format of the status file (`statusformat`, `--status-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatusFormat {
    /// rinetd-uv's JSON document (its default).
    #[default]
    Json,
    /// rinetd-uv's human-readable report.
    Text,
}

impl StatusFormat {
    /// The names `--status-format` accepts.
    pub const NAMES: [&'static str; 2] = ["json", "text"];
}

impl std::str::FromStr for StatusFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(StatusFormat::Json),
            "text" => Ok(StatusFormat::Text),
            _ => Err(format!("expected json or text, not {s:?}")),
        }
    }
}

impl fmt::Display for StatusFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StatusFormat::Json => "json",
            StatusFormat::Text => "text",
        })
    }
}

/// The connection log's format (`logformat`, YAML `log_format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// rinetd's nine tab-separated fields (its default).
    #[default]
    Tab,
    /// The web server's common log format (what rinetd's `logcommon` asks for).
    Common,
    /// One JSON object per line (oi).
    Json,
}

impl LogFormat {
    /// The words `logformat` accepts.
    pub const NAMES: [&'static str; 3] = ["tab", "common", "json"];
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Tab => "tab",
            LogFormat::Common => "common",
            LogFormat::Json => "json",
        })
    }
}

/// The global settings rinetd-uv (and oi) added. Each is `None` when not
/// written, so `--check` shows only what the file says; how each is read,
/// its default and its documentation are its entry in the option table
/// (`config/settings/table.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Globals {
    /// `buffersize N` (1024 to 1 MiB): size of the copy buffers.
    pub buffer_size: Option<usize>,
    /// `connect-timeout N` (0 to 86400 s; 0 = the kernel's): default for rules without their own.
    pub connect_timeout: Option<Duration>,
    /// `dns-refresh N` (0 to 604800 s; 0 = off): how often backend names are looked up again.
    pub dns_refresh: Option<Duration>,
    /// `dns-multi-ip-expand on|off`: whether every address of a backend name becomes a backend.
    pub dns_multi_ip_expand: Option<bool>,
    /// `dns-multi-ip-proto ipv4|ipv6|any`: which addresses that expansion keeps.
    pub dns_multi_ip_proto: Option<IpFilter>,
    /// `listen-backlog N` (1 to 65535): the accept queue of every TCP listener.
    pub listen_backlog: Option<u32>,
    /// `max-udp-connections N` (1 to 1,000,000): the default of `[maxassoc=N]`.
    pub max_udp_connections: Option<usize>,
    /// `pool-min-free N` (0 to 10000): accepted for rinetd-uv; oi's pools size themselves.
    pub pool_min_free: Option<u32>,
    /// `pool-max-free N` (1 to 100000): accepted for rinetd-uv; oi's pools size themselves.
    pub pool_max_free: Option<u32>,
    /// `pool-trim-delay MS` (100 to 300000 ms): accepted for rinetd-uv; oi's pools size themselves.
    pub pool_trim_delay: Option<Duration>,
    /// `statusfile PATH`: where a status report is written (stored; not written yet).
    pub status_file: Option<PathBuf>,
    /// `statusinterval N` (1 to 86400 s): how often the status file is written.
    pub status_interval: Option<Duration>,
    /// `statusformat json|text`: the status file's format.
    pub status_format: Option<StatusFormat>,
    /// `logformat tab|common|json` (oi): the connection log's format; wins over `logcommon`.
    pub log_format: Option<LogFormat>,
    /// YAML `status.enabled`: whether the status file is written at all.
    pub status_enabled: Option<bool>,
    /// `statsloginterval N` (0 to 86400 s; 0 = off): how often a summary line is logged.
    pub stats_log_interval: Option<Duration>,
    /// `maxconn N` (oi, 1 to 1,000,000): most TCP connections open at once over all rules.
    pub max_connections: Option<usize>,
    /// `user NAME` (oi): who to run as after binding (`--user` wins; see `privileges`).
    pub user: Option<String>,
    /// `group NAME` (oi): the group to run as with it (`--group` wins).
    pub group: Option<String>,
    /// `metrics ADDR` (oi): where the Prometheus `/metrics` listener binds (`--metrics` wins).
    pub metrics: Option<std::net::SocketAddr>,
    /// `controlsocket PATH` (oi): the socket `oi status` and `oi connections` ask (`--socket` wins).
    pub control_socket: Option<PathBuf>,
    /// `watch on|off` (oi; YAML `watch`): reload when the file or an included one changes (`--watch` wins).
    pub watch: Option<bool>,
}

/// One `include` line and what it brought in, for `--check` and messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Include {
    /// The file the `include` line is in; `None` for the main file.
    pub from: Option<Arc<str>>,
    /// Its 1-based line.
    pub line: usize,
    /// The pattern as written.
    pub pattern: String,
    /// The files it matched, in the order they were read.
    pub files: Vec<Arc<str>>,
}
