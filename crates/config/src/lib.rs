//! The rinetd configuration: its data model, the pure parser and the resolver.
//!
//! `parse` turns text into a [`Config`] without touching the file system or DNS;
//! [`load`] adds the file; [`resolve`] turns names (hosts and services) into
//! socket addresses, which is the only step that blocks.
//!
//! This crate is everything oi knows about its configuration: the settings
//! table (one entry per rule option and global, from which both parsers,
//! `--check`'s text, the warnings and the reference pages come), the
//! rinetd.conf and YAML parsers, resolve, convert, and the ACL patterns.
//! I/O happens only at its edges: reading included files (through
//! [`IncludeSource`]) and the DNS lookups of [`resolve`].
#![forbid(unsafe_code)]

pub mod acl;
mod address;
mod bounded;
mod bytes;
pub mod cert_name;
mod checks;
pub mod convert;
pub mod hint;
mod include;
pub mod lint;
mod lookup;
mod model;
mod parse;
pub mod report;
mod resolve;
pub mod services;
pub mod settings;
mod sni;
mod unix;
mod values;
mod yaml;

pub use bounded::{Escaped, Shown};
pub use include::has_wildcards;
pub use include::{
    FsIncludes, IncludeSource, IncludedFile, MemIncludes, MAX_INCLUDED_FILES, MAX_INCLUDE_DEPTH,
};
pub use lookup::{LOOKUP_DEADLINE, LOOKUP_THREADS};
pub use model::{
    Algorithm, Backend, Balance, Format, Globals, Include, IpFilter, LogFormat, StatusFormat,
    DEFAULT_AFFINITY_MAX_ENTRIES, DEFAULT_HEALTH_THRESHOLD, DEFAULT_RECOVERY_TIMEOUT, MAX_WEIGHT,
};
pub use parse::{parse, parse_with_includes};
pub use resolve::{
    resolve, BindAddr, ResolvedBackend, ResolvedConfig, ResolvedRule, RuleDefaults,
    DEFAULT_DNS_REFRESH,
};
pub use settings::{Options, RuleOptions};
pub use unix::{UnixAddr, MAX_UNIX_PATH};
pub use yaml::parse_yaml;

use std::fmt;
use std::io::Read;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Largest configuration file oi reads, in bytes (16 MiB). A real rinetd.conf
/// is a few KiB; the cap keeps `-c /dev/zero` or a runaway generated file from
/// exhausting memory at start or on a reload, and bounds everything parsing
/// allocates.
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// Most forwarding rules one configuration may have, all files together (a
/// port range counts one rule per port; half the ports, `1-32768`, fit).
/// A rule costs about 1.5 KiB parsed and resolved together, before a
/// listener exists (32,768 rules peak at 52 MiB through `--check`), so this
/// keeps what any 16 MiB input can make a `--check` or a reload hold within
/// the 64 MiB of SECURITY.md; without it a few range lines made millions of
/// rules. Past it the file is refused, saying so once. Listeners are
/// budgeted separately: at most half the open-file limit.
pub const MAX_RULES: usize = 32_768;

/// The error for the rule that goes past [`MAX_RULES`].
pub fn too_many_rules() -> String {
    format!(
        "more than {MAX_RULES} forwarding rules (a port range counts one per port), the most oi takes; the rules after this one are not read"
    )
}

/// Longest piece of file text shown in one message, in characters, after
/// escaping (see [`Shown`]); longer text is cut and ends in `...`.
pub const MAX_SHOWN_CHARS: usize = 120;

/// Most problems listed for one line; further ones are counted in
/// `and N more errors on this line`.
pub const MAX_ERRORS_PER_LINE: usize = 5;

/// Most errors listed for one file; further ones are counted in `and N more errors`.
pub const MAX_ERRORS: usize = 100;

/// Most warnings kept for one file; further ones are counted
/// ([`Config::omitted_warnings`]).
pub const MAX_WARNINGS: usize = 100;

/// Largest `[timeout=N]`, in seconds (365 days). Far beyond any sensible UDP
/// idle time, and far below what overflows `Instant + Duration`.
pub const MAX_UDP_TIMEOUT_SECS: u64 = 365 * 24 * 60 * 60;

/// Largest `[maxassoc=N]`. Each association holds a socket and a task; a
/// million is beyond any single rule's file-descriptor budget.
pub const MAX_ASSOC_LIMIT: usize = 1_000_000;

/// Largest `connect-timeout`, in seconds (one day, as rinetd-uv).
pub const MAX_CONNECT_TIMEOUT_SECS: u64 = 86_400;

/// Largest `dns-refresh`, in seconds (one week, as rinetd-uv).
pub const MAX_DNS_REFRESH_SECS: u64 = 604_800;

/// Largest `mode=` for a unix socket file: the permission and sticky bits.
pub const MAX_SOCKET_MODE: u32 = 0o7777;

/// Default TCP listen backlog of a .conf file without `listen-backlog` (oi's
/// own; rinetd-uv uses 128).
pub const DEFAULT_LISTEN_BACKLOG: u32 = 1024;

/// Default UDP association idle timeout of a YAML file (rinetd-uv's; a .conf
/// file keeps rinetd 0.73's [`DEFAULT_UDP_TIMEOUT`]).
pub const DEFAULT_YAML_UDP_TIMEOUT: Duration = Duration::from_secs(10);

/// Default cap on UDP associations per rule of a YAML file (rinetd-uv's
/// `max_udp_connections` default; a .conf file keeps [`DEFAULT_MAX_ASSOC`]).
pub const DEFAULT_YAML_MAX_ASSOC: usize = 5000;

/// Transport protocol of one side of a forwarding rule (`/tcp` or `/udp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    /// Stream side; the default when no suffix is written.
    Tcp,
    /// Datagram side, written `/udp`.
    Udp,
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        })
    }
}

/// A host as written in a rule: a literal address, or a name resolved later.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A numeric IPv4 or IPv6 address (brackets already removed).
    Ip(IpAddr),
    /// A host name, looked up when the configuration is resolved; shared
    /// (with the side's `host_text` and every copy of the side) rather than
    /// copied: a backend name was held four times while parsed.
    Name(Arc<str>),
    /// A unix stream socket (`unix:/path` or `unix:@name`): nothing to look up.
    Unix(UnixAddr),
}

/// A port as written in a rule: a number, or a service name from /etc/services.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Port {
    /// A port number, 1 to 65535.
    Number(u16),
    /// A service name such as `http`, looked up for the side's protocol.
    Service(String),
    /// No port: the side is a unix socket ([`Host::Unix`]), written without one.
    None,
}

/// One side (bind or connect) of a forwarding rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Where to bind or connect.
    pub host: Host,
    /// The host exactly as written in the file; the log file prints it this
    /// way. Shared, as [`Host::Name`].
    pub host_text: Arc<str>,
    /// Which port, possibly still a service name.
    pub port: Port,
    /// Protocol of this side, from the `/tcp` or `/udp` suffix.
    pub proto: Proto,
}

/// Whether a rule may use the splice(2) zero-copy path (an oi extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SpliceMode {
    /// Use splice where the platform supports it and the benchmark favours it.
    #[default]
    Auto,
    /// Always try splice (falling back to copying when pipes cannot be had).
    On,
    /// Always copy through user-space buffers.
    Off,
}

impl SpliceMode {
    /// The names a configuration and the command line spell the modes with.
    pub const NAMES: [&'static str; 3] = ["auto", "on", "off"];
}

impl std::str::FromStr for SpliceMode {
    type Err = String;

    /// `auto`, `on` or `off`: the one parser for the option and the flag.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SpliceMode::Auto),
            "on" => Ok(SpliceMode::On),
            "off" => Ok(SpliceMode::Off),
            _ => Err(format!(
                "invalid splice mode '{}' (expected on, off or auto)",
                Shown(s)
            )),
        }
    }
}

/// Which of a rule's TCP sockets are Multipath TCP (`mptcp=`, an oi extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mptcp {
    /// Both: the listener accepts MPTCP clients, the backend is dialled with MPTCP.
    On,
    /// Neither (the default).
    Off,
    /// The listener only.
    Listen,
    /// The backend connections only.
    Connect,
}

impl Mptcp {
    /// The names a configuration spells the values with.
    pub const NAMES: [&'static str; 4] = ["on", "off", "listen", "connect"];

    /// Whether the listener's sockets are MPTCP.
    pub fn listens(self) -> bool {
        matches!(self, Mptcp::On | Mptcp::Listen)
    }

    /// Whether backend connections are MPTCP.
    pub fn connects(self) -> bool {
        matches!(self, Mptcp::On | Mptcp::Connect)
    }
}

impl std::str::FromStr for Mptcp {
    type Err = String;

    /// `on`, `off`, `listen` or `connect`; YAML's `true` and `false` too.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" | "true" | "yes" => Ok(Mptcp::On),
            "off" | "false" | "no" => Ok(Mptcp::Off),
            "listen" => Ok(Mptcp::Listen),
            "connect" => Ok(Mptcp::Connect),
            _ => Err(format!(
                "invalid mptcp '{}' (expected on, off, listen or connect){}",
                Shown(s),
                crate::hint::suggestion(s, &Mptcp::NAMES)
            )),
        }
    }
}

impl std::fmt::Display for Mptcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mptcp::On => "on",
            Mptcp::Off => "off",
            Mptcp::Listen => "listen",
            Mptcp::Connect => "connect",
        })
    }
}

/// The PROXY protocol version a rule sends to its backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProxyHeader {
    /// Version 1, the text header.
    V1,
    /// Version 2, the binary header.
    V2,
}

/// Default UDP association idle timeout, as in rinetd.
pub const DEFAULT_UDP_TIMEOUT: Duration = Duration::from_secs(72);
/// Default cap on live UDP associations per rule.
pub const DEFAULT_MAX_ASSOC: usize = 10_000;

/// How an allow/deny pattern matches a client address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatternKind {
    /// rinetd's `*` and `?` wildcards over the numeric address text.
    Wildcard,
    /// An address block (oi extension), such as `10.0.0.0/8` or `fe80::/10`.
    Cidr {
        /// The network address, with host bits as written.
        net: IpAddr,
        /// Prefix length in bits.
        prefix: u8,
    },
}

/// One `allow` or `deny` pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// The pattern as written; wildcard matching works on this text.
    pub text: String,
    /// How to match it.
    pub kind: PatternKind,
}

/// A set of allow and deny patterns, either global or belonging to one rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclRules {
    /// If non-empty, a client must match one of these.
    pub allow: Vec<Pattern>,
    /// A client matching one of these is refused.
    pub deny: Vec<Pattern>,
    /// `trust-proxy PATTERN` (oi): sources whose PROXY header an
    /// `[accept-proxy]` rule honours; placed like allow/deny.
    pub trust_proxy: Vec<Pattern>,
}

impl AclRules {
    /// True when neither allow nor deny patterns exist.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// One forwarding rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The file the rule is in when it came from an `include`; `None` for the main file.
    pub file: Option<Arc<str>>,
    /// 1-based line number in its file, for messages.
    pub line: usize,
    /// YAML `name:`; several `bind:` entries make several rules with one name.
    pub name: Option<String>,
    /// Where to listen.
    pub bind: Endpoint,
    /// Every backend, in file order; never empty, and the first is
    /// [`Rule::connect`] (read from here, not stored again: a copy per rule
    /// was 80 bytes of every rule).
    pub backends: Vec<Backend>,
    /// How to choose among `backends` (YAML `load_balancing:`).
    pub balance: Balance,
    /// Bracketed options (stored only when any is written).
    pub options: Options,
    /// allow/deny lines that follow this rule and apply to it only.
    pub acl: AclRules,
}

impl Rule {
    /// Where to forward: the first backend's endpoint, for code that knows
    /// one backend per rule. Both parsers make at least one backend.
    pub fn connect(&self) -> &Endpoint {
        &self.backends[0].endpoint
    }
}

/// A parsed configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Forwarding rules in file order.
    pub rules: Vec<Rule>,
    /// allow/deny lines before the first rule; they apply to every rule.
    pub global_acl: AclRules,
    /// `logfile PATH`: where rinetd-format connection logs go.
    pub logfile: Option<PathBuf>,
    /// `pidlogfile PATH`: where the daemon writes its pid.
    pub pidlogfile: Option<PathBuf>,
    /// `logcommon`: use the web-server common log format instead of tabs.
    pub logcommon: bool,
    /// Which format the file was written in (decides some defaults).
    pub format: Format,
    /// The global settings rinetd-uv added (`buffersize`, `connect-timeout`, ...).
    pub globals: Globals,
    /// Every `include` line, in the order read, with the files it brought in.
    pub includes: Vec<Include>,
    /// Accepted-but-suspicious lines (such as `timeout` on a TCP rule), shown by
    /// `--check`; at most [`MAX_WARNINGS`].
    pub warnings: Vec<ConfigError>,
    /// Warnings found beyond [`MAX_WARNINGS`]: counted so `--check` can say so, not kept.
    pub omitted_warnings: usize,
    /// Set by [`load_within`] when the rules counted went past its budget:
    /// how many were counted; `rules` is then empty (none was built).
    pub rules_over_budget: Option<usize>,
}

/// One problem found in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The included file the problem is in; `None` for the file [`ConfigErrors::file`] names.
    pub file: Option<Arc<str>>,
    /// 1-based line number; 0 for a problem with the whole file.
    pub line: usize,
    /// 1-based column (YAML files); 0 when not known.
    pub column: usize,
    /// What is wrong, without the line text; any file text in it is escaped and cut ([`Shown`]).
    pub message: String,
    /// The offending text (the line, trimmed, or the part at fault), already
    /// escaped and cut to [`MAX_SHOWN_CHARS`] so that storing it is cheap.
    pub text: String,
    /// Further problems found on the same line but not listed ([`MAX_ERRORS_PER_LINE`]).
    pub more: usize,
}

/// Every problem found in one configuration file, reported together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file name used as the prefix of each message.
    pub file: String,
    /// Errors in line order; at most [`MAX_ERRORS`].
    pub errors: Vec<ConfigError>,
    /// Errors found beyond [`MAX_ERRORS`]: counted, not listed.
    pub omitted: usize,
}

impl Config {
    /// The log file's format: `logformat`, else common with `logcommon`, else tab.
    pub fn log_format(&self) -> LogFormat {
        match (self.globals.log_format, self.logcommon) {
            (Some(f), _) => f,
            (None, true) => LogFormat::Common,
            (None, false) => LogFormat::Tab,
        }
    }
}

impl ConfigErrors {
    /// Formats one problem as `FILE:LINE: message: 'text'` (without the
    /// `and N more` line that [`ConfigError::more`] adds in the full report).
    /// FILE is the included file when the problem is in one; YAML problems
    /// add the column (`FILE:LINE:COLUMN:`); an empty text is left out.
    pub fn format_one(file: &str, e: &ConfigError) -> String {
        // An included file's name comes from a directory listing: escape it.
        let included = e.file.as_deref().map(|f| Shown(f).to_string());
        let file = included.as_deref().unwrap_or(file);
        let mut out = match (e.line, e.column) {
            (0, _) => format!("{file}: {}", e.message),
            (line, 0) => format!("{file}:{line}: {}", e.message),
            (line, column) => format!("{file}:{line}:{column}: {}", e.message),
        };
        if e.line != 0 && !e.text.is_empty() {
            out.push_str(&format!(": '{}'", e.text));
        }
        out
    }

    /// One error not tied to a line, such as an unreadable file.
    fn whole_file(file: &str, message: String) -> Self {
        ConfigErrors {
            file: file.to_string(),
            errors: vec![ConfigError {
                file: None,
                line: 0,
                column: 0,
                message,
                text: String::new(),
                more: 0,
            }],
            omitted: 0,
        }
    }

    /// How many errors were found, listed or not.
    pub fn count(&self) -> usize {
        let listed: usize = self.errors.iter().map(|e| 1 + e.more).sum();
        listed + self.omitted
    }

    /// Names the file these errors belong to.
    pub fn with_file(mut self, file: &str) -> Self {
        self.file = file.to_string();
        self
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            f.write_str(&Self::format_one(&self.file, e))?;
            if e.more > 0 {
                let s = plural(e.more);
                let included = e.file.as_deref().map(|f| Shown(f).to_string());
                let file = included.as_deref().unwrap_or(&self.file);
                write!(
                    f,
                    "\n{file}:{}: and {} more error{s} on this line",
                    e.line, e.more
                )?;
            }
        }
        if self.omitted > 0 {
            if !self.errors.is_empty() {
                writeln!(f)?;
            }
            let s = plural(self.omitted);
            write!(f, "{}: and {} more error{s}", self.file, self.omitted)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// `"s"` unless `n` is 1.
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Reads a configuration file: a regular file of at most [`MAX_CONFIG_BYTES`].
///
/// Devices, FIFOs, sockets and directories are refused with the reason: a
/// character device such as `/dev/zero` never ends, and a FIFO would block.
/// The open itself uses `O_NONBLOCK` so that opening a FIFO with no writer
/// returns at once instead of hanging the start or the reload; the type is then
/// checked on the opened descriptor (not the path), so nothing can be swapped
/// in between. The read is capped too, for files that grow while being read or
/// that report no size (as /proc files do).
pub fn read_limited(path: &Path) -> Result<Vec<u8>, String> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::fs::FileTypeExt;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rustix::fs::open(path, flags, Mode::empty())
        .map_err(|e| std::io::Error::from(e).to_string())?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let kind = meta.file_type();
    let refused = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else if !kind.is_file() {
        Some("not a regular file")
    } else {
        None
    };
    if let Some(what) = refused {
        return Err(format!(
            "is {what}; the configuration must be a regular file"
        ));
    }
    let too_large = || {
        format!(
            "larger than {} MiB ({MAX_CONFIG_BYTES} bytes), the most oi reads",
            MAX_CONFIG_BYTES / (1024 * 1024)
        )
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    // Sized once (at most the cap and a byte), not grown by doubling.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).saturating_add(1));
    // One byte past the cap tells "exactly at the cap" from "too large".
    (&file)
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Reads and parses a configuration file, with every file it includes.
/// Errors carry the path as given (included files as found from it).
///
/// The format follows the extension, as in rinetd-uv: `.yaml` and `.yml` are
/// YAML ([`parse_yaml`]), anything else is rinetd.conf text, whose `include`
/// lines read further files through [`FsIncludes`]. A reload calls this too,
/// so it re-reads every included file.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_within(path, None)
}

/// [`load`], stopping before any rule is built when a rinetd.conf file's
/// first pass counts more than `rule_budget` rules: the result then has no
/// rules and [`Config::rules_over_budget`] says how many were counted. What a
/// reload refused by the descriptor budget calls, so the rules it refuses
/// cost a scan rather than memory the allocator keeps afterwards. (A YAML
/// file is built and counted after.)
pub fn load_within(path: &Path, rule_budget: Option<usize>) -> Result<Config, ConfigErrors> {
    match load_partial_within(path, rule_budget)? {
        (config, None) => Ok(config),
        (_, Some(errors)) => Err(errors),
    }
}

/// Reads a configuration for `--check`: `Ok((config, None))` when it parses,
/// `Ok((what parsed, Some(errors)))` when some rinetd.conf lines did not (so
/// the names of the good rules can still be looked up in the same run), and
/// `Err` when there is nothing to go on (unreadable, or YAML with errors).
pub fn load_partial(path: &Path) -> Result<(Config, Option<ConfigErrors>), ConfigErrors> {
    load_partial_within(path, None)
}

/// [`load_partial`] under a rule budget, as [`load_within`].
fn load_partial_within(
    path: &Path,
    rule_budget: Option<usize>,
) -> Result<(Config, Option<ConfigErrors>), ConfigErrors> {
    let mut includes = FsIncludes::new(path);
    load_read(path, read_limited(path), &mut includes, rule_budget)
}

/// [`load_partial`]'s work on the main file's bytes already read (`bytes`:
/// them, or why they could not be read, as [`read_limited`] says), reading
/// included files through `includes`, under `rule_budget` as
/// [`load_within`]: for a caller that must know exactly what a load read
/// (`--watch` keeps a digest of what the last good reload read).
pub fn load_read(
    path: &Path,
    bytes: Result<Vec<u8>, String>,
    includes: &mut dyn IncludeSource,
    rule_budget: Option<usize>,
) -> Result<(Config, Option<ConfigErrors>), ConfigErrors> {
    let file = path.display().to_string();
    let text = bytes
        .map_err(|e| ConfigErrors::whole_file(&file, format!("cannot read configuration: {e}")))?;
    // rinetd reads bytes: paths keep theirs, a stray Latin-1 comment is
    // fine, and bytes that are not UTF-8 anywhere else are an error naming
    // the line (before, they became U+FFFD silently).
    let text = bytes::decode(&text, is_yaml(path)).map_err(|e| ConfigErrors {
        file: file.clone(),
        errors: vec![ConfigError {
            file: None,
            line: e.line,
            column: 0,
            message: e.message,
            text: Shown(&e.text).to_string(),
            more: 0,
        }],
        omitted: 0,
    })?;
    if is_yaml(path) {
        return parse_yaml(&text)
            .map(|c| (c, None))
            .map_err(|e| e.with_file(&file));
    }
    let (config, errors) = parse::parse_with_includes_partial(&text, includes, rule_budget);
    Ok((config, errors.map(|e| e.with_file(&file))))
}

/// Whether `path` names a YAML file (`.yaml` or `.yml`, any case).
pub fn is_yaml(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

/// Loads and resolves a configuration file; the whole pipeline a start or a
/// reload runs. Blocks on DNS: call it off the executor threads.
pub fn load_resolved(path: &Path) -> Result<ResolvedConfig, ConfigErrors> {
    let config = load(path)?;
    let file = path.display().to_string();
    resolve(config, &services::Services::system()).map_err(|e| e.with_file(&file))
}

#[cfg(test)]
mod tests;
