//! oi's own diagnostics (start, reload, errors; not the connection log):
//! one logger, installed once at start-up, writing to stderr and, in daemon
//! and drop-in mode, to syslog. Under systemd, when `JOURNAL_STREAM` says
//! stderr is the journal, lines go to journald's socket instead, each with
//! its priority and fields (`super::journal`); a line that socket refuses
//! goes to stderr as before.
//!
//! The sink is decided with the fork: before it, a daemon reports to both
//! stderr (still the terminal or the service manager) and syslog; after it,
//! the daemon (stdio on /dev/null) reports to syslog alone, under its own pid.
//! Syslog messages are written here in the traditional local format
//! (`<PRI>Mmm dd hh:mm:ss TAG[PID]: MESSAGE`) on a non-blocking datagram
//! socket: a stalled syslog daemon drops messages, it never stalls forwarding.

use super::journal::Journal;
use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::{self, Write};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Where syslog listens, unless `OI_SYSLOG_SOCKET` names another socket (for
/// tests and systems with syslog elsewhere).
const SYSLOG_SOCKET: &str = "/dev/log";

/// Syslog facility `daemon`, as rinetd logs.
const FACILITY_DAEMON: u8 = 3;

/// The longest message sent to syslog, in bytes; longer ones are cut (a
/// datagram must fit the socket's buffer, and syslog daemons cut at 1–8 KiB).
const MAX_SYSLOG_MESSAGE: usize = 2048;

/// The installed logger, so the daemon can switch its sink after the fork.
static LOGGER: OnceLock<Diagnostics> = OnceLock::new();

/// The one logger.
struct Diagnostics {
    /// Formats for stderr, and filters every record by `RUST_LOG`.
    stderr: env_logger::Logger,
    /// Whether records go to stderr, or the journal in its place (off in a
    /// daemon after the fork).
    to_stderr: AtomicBool,
    /// journald's socket, when stderr is the journal's stream: records go
    /// there with their priority, and to stderr only when it refuses one.
    journal: Option<Journal>,
    /// The syslog socket, when syslog is a sink.
    syslog: Mutex<Option<Syslog>>,
}

/// A connected syslog socket and how messages are tagged.
struct Syslog {
    /// Connected to the syslog socket; non-blocking.
    socket: UnixDatagram,
    /// The program name messages carry (`oi`, or `rinetd` in drop-in mode).
    tag: &'static str,
    /// The pid messages carry (the daemon's own after the fork).
    pid: u32,
    /// Messages dropped because the socket was full or gone, reported with the next one sent.
    dropped: AtomicU64,
}

/// Installs the logger: stderr, plus syslog tagged `program` when `syslog` is
/// set. `RUST_LOG` sets the level (default `info`); a value that is not made
/// of levels and `target=level` pairs is reported and replaced by `info`.
/// Only the first call installs anything.
pub(crate) fn init(program: &'static str, syslog: bool) {
    let (filters, bad) = filters_from(std::env::var("RUST_LOG").ok().as_deref());
    let stderr = env_logger::Builder::new()
        .parse_filters(&filters)
        .format(write_stderr_line)
        .build();
    let max = stderr.filter();
    let logger = Diagnostics {
        stderr,
        to_stderr: AtomicBool::new(true),
        journal: Journal::connect(program),
        syslog: Mutex::new(if syslog {
            Syslog::connect(program)
        } else {
            None
        }),
    };
    if LOGGER.set(logger).is_err() {
        return;
    }
    if let Some(installed) = LOGGER.get() {
        if log::set_logger(installed).is_ok() {
            log::set_max_level(max);
        }
    }
    if let Some(bad) = bad {
        log::warn!(
            "RUST_LOG: '{}' is not a level (error, warn, info, debug, trace, off) or target=level; using info",
            bad.escape_default()
        );
    }
}

/// A start-up failure: printed to stderr as it is (no log prefix, as a
/// command-line tool prints errors), and sent to syslog when syslog is a sink.
pub(crate) fn report(message: &str) {
    let journal = LOGGER.get().and_then(|l| l.journal.as_ref());
    if journal.is_none_or(|j| j.send_error(message).is_err()) {
        eprintln!("{message}");
    }
    if let Some(logger) = LOGGER.get() {
        if let Ok(syslog) = logger.syslog.lock() {
            if let Some(syslog) = syslog.as_ref() {
                for line in message.lines() {
                    syslog.send(Level::Error, line);
                }
            }
        }
    }
}

/// After the daemon's fork: syslog only, reconnected under the daemon's own pid.
pub(crate) fn daemonized(program: &'static str) {
    if let Some(logger) = LOGGER.get() {
        logger.to_stderr.store(false, Ordering::Relaxed);
        if let Ok(mut syslog) = logger.syslog.lock() {
            *syslog = Syslog::connect(program);
        }
    }
}

/// One stderr line, as env_logger's default format writes it
/// (`[2026-11-27T07:45:00Z INFO  oxidinetd::process::service] message`, the level
/// coloured on a terminal, later lines of a message indented by four
/// spaces), with the UTC timestamp from chrono, which oi already links.
/// env_logger's own timestamp needs its `humantime` feature, and with it
/// the jiff crate: 20 to 25 s of compile time in each of CI's three builds
/// (test, release, fuzz), for this one line.
fn write_stderr_line(buf: &mut env_logger::fmt::Formatter, record: &Record<'_>) -> io::Result<()> {
    let level = buf.default_level_style(record.level());
    let time = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    write!(buf, "[{time} {level}{:<5}{level:#}", record.level())?;
    if !record.target().is_empty() {
        write!(buf, " {}", record.target())?;
    }
    let message = message_of(record);
    let mut lines = message.split('\n');
    write!(buf, "] {}", lines.next().unwrap_or_default())?;
    for line in lines {
        write!(buf, "\n    {line}")?;
    }
    writeln!(buf)
}

/// A record's message as every sink shows it: control characters but the
/// newline (which the sinks lay out as continuation lines), and the
/// characters that reorder or hide text, escaped. Messages carry text from
/// outside (a YAML backend's `name:`, a server name, a peer's error) and are
/// read on terminals, where an escape sequence would act; backslashes stay
/// as they are, so text a message already escaped is not escaped twice.
fn message_of(record: &Record<'_>) -> String {
    use std::fmt::Write as _;
    let raw = record.args().to_string();
    let acts = |c: char| c != '\n' && (c.is_control() || is_format_control(c));
    if !raw.chars().any(acts) {
        return raw;
    }
    let mut out = String::with_capacity(raw.len() + 8);
    for c in raw.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_ascii_control() && c != '\n' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if acts(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Bidirectional overrides and isolates, and zero-width characters: they
/// are not `char::is_control` but change how the text around them reads.
fn is_format_control(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// The filter string to use for `rust_log`, and the first bad directive if
/// there was one (then the whole value is replaced by `info`).
fn filters_from(rust_log: Option<&str>) -> (String, Option<String>) {
    let Some(value) = rust_log.map(str::trim).filter(|v| !v.is_empty()) else {
        return ("info".into(), None);
    };
    let is_level = |s: &str| s.parse::<LevelFilter>().is_ok();
    for directive in value.split(',').map(str::trim) {
        let ok = match directive.split_once('=') {
            Some((target, level)) => !target.trim().is_empty() && is_level(level.trim()),
            None => is_level(directive),
        };
        if !ok {
            let shown: String = directive.chars().take(60).collect();
            return ("info".into(), Some(shown));
        }
    }
    (value.to_string(), None)
}

impl Syslog {
    /// Connects to the syslog socket; `None` (and nothing logged there) when there is none.
    fn connect(tag: &'static str) -> Option<Syslog> {
        let path = std::env::var_os("OI_SYSLOG_SOCKET")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(SYSLOG_SOCKET));
        let socket = UnixDatagram::unbound().ok()?;
        socket.connect(&path).ok()?;
        socket.set_nonblocking(true).ok()?;
        Some(Syslog {
            socket,
            tag,
            pid: std::process::id(),
            dropped: AtomicU64::new(0),
        })
    }

    /// Sends one message; drops it (and counts the drop) if syslog cannot take it now.
    fn send(&self, level: Level, message: &str) {
        let severity: u8 = match level {
            Level::Error => 3,
            Level::Warn => 4,
            Level::Info => 6,
            Level::Debug | Level::Trace => 7,
        };
        let time = chrono::Local::now().format("%b %e %H:%M:%S");
        let mut line = format!(
            "<{}>{time} {}[{}]: ",
            FACILITY_DAEMON * 8 + severity,
            self.tag,
            self.pid
        );
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            line.push_str(&format!("({dropped} earlier messages dropped) "));
        }
        line.push_str(message);
        let mut end = line.len().min(MAX_SYSLOG_MESSAGE);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        if self.socket.send(&line.as_bytes()[..end]).is_err() {
            self.dropped.fetch_add(dropped + 1, Ordering::Relaxed);
        }
    }
}

impl Log for Diagnostics {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.stderr.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.stderr.matches(record) {
            return;
        }
        if self.to_stderr.load(Ordering::Relaxed) {
            let sent = self
                .journal
                .as_ref()
                .is_some_and(|j| j.send(record, &message_of(record)).is_ok());
            if !sent {
                self.stderr.log(record);
            }
        }
        if let Ok(syslog) = self.syslog.lock() {
            if let Some(syslog) = syslog.as_ref() {
                syslog.send(record.level(), &message_of(record));
            }
        }
    }

    fn flush(&self) {
        self.stderr.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message a record of `args` is shown with.
    fn shown(args: std::fmt::Arguments<'_>) -> String {
        message_of(&Record::builder().args(args).build())
    }

    #[test]
    fn messages_show_control_and_reordering_characters_escaped() {
        assert_eq!(shown(format_args!("plain \\x1b text")), "plain \\x1b text");
        assert_eq!(
            shown(format_args!("a\u{1b}[31mb\u{7}\tc\rd")),
            "a\\x1b[31mb\\x07\\tc\\rd"
        );
        assert_eq!(shown(format_args!("two\nlines")), "two\nlines");
        assert_eq!(
            shown(format_args!("x\u{202e}y\u{85}z")),
            "x\\u{202e}y\\u{85}z"
        );
        assert_eq!(shown(format_args!("caf\u{e9}")), "caf\u{e9}");
    }

    #[test]
    fn levels_and_target_levels_are_kept() {
        assert_eq!(filters_from(None), ("info".into(), None));
        assert_eq!(filters_from(Some("  ")), ("info".into(), None));
        assert_eq!(filters_from(Some("debug")), ("debug".into(), None));
        assert_eq!(
            filters_from(Some("warn,oxidinetd=trace")),
            ("warn,oxidinetd=trace".into(), None)
        );
    }

    #[test]
    fn a_bogus_value_falls_back_to_info_and_is_named() {
        assert_eq!(
            filters_from(Some("bogus")),
            ("info".into(), Some("bogus".into()))
        );
        assert_eq!(
            filters_from(Some("info,oxidinetd=loud")),
            ("info".into(), Some("oxidinetd=loud".into()))
        );
        assert_eq!(filters_from(Some("=debug")).1, Some("=debug".into()));
    }

    #[test]
    fn syslog_lines_carry_facility_severity_tag_and_pid_and_are_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.sock");
        let server = UnixDatagram::bind(&path).expect("bind");
        let socket = UnixDatagram::unbound().expect("socket");
        socket.connect(&path).expect("connect");
        let syslog = Syslog {
            socket,
            tag: "rinetd",
            pid: 42,
            dropped: AtomicU64::new(0),
        };
        syslog.send(Level::Error, "invalid syntax at line 9");
        let mut buf = vec![0u8; 8192];
        let n = server.recv(&mut buf).expect("message");
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(text.starts_with("<27>"), "daemon.err: {text}");
        assert!(
            text.ends_with(" rinetd[42]: invalid syntax at line 9"),
            "{text}"
        );
        syslog.send(Level::Info, &"x".repeat(10_000));
        let n = server.recv(&mut buf).expect("message");
        assert_eq!(n, MAX_SYSLOG_MESSAGE);
        assert!(buf[..n].starts_with(b"<30>"), "daemon.info");
    }
}
