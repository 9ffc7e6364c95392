//! rinetd's connection log file, written by one dedicated thread.
//!
//! Connection tasks never touch the file: they send a [`LogEvent`] down a
//! channel (no lock, no syscall on the executor thread) and the writer thread
//! formats and appends it. The file is opened with `O_APPEND`, so logrotate's
//! `copytruncate` works, and [`LogHandle::rotate`] (SIGUSR1) and
//! [`LogHandle::reopen`] (reload) open the path again after a rename, so
//! logrotate's `create` does too.
//!
//! Nothing about the file may stall or swell the daemon:
//! - the queue to the writer holds at most [`LOG_QUEUE_LINES`] lines; past
//!   that, lines are dropped and counted, with one warning a minute;
//! - the file is opened with `O_NONBLOCK`, so a FIFO nobody reads fails at
//!   once (ENXIO) instead of blocking the open; a FIFO, socket or device
//!   that is open but not read stays non-blocking, and what it cannot take
//!   is dropped and counted. Regular files (where the flag means nothing)
//!   get it cleared. Before, a FIFO without a reader blocked the open on
//!   the reload path, and SIGTERM and SIGHUP were never read;
//! - the file is opened with `O_NOFOLLOW`: a symlink at the path is refused
//!   (logrotate moves or truncates log files, it never makes them links),
//!   so whoever can write to the log directory cannot make root append to
//!   another file;
//! - [`LogHandle::flush`] (exit) and [`LogHandle::reopen`] (start-up,
//!   reload) wait for the writer at most [`WRITER_WAIT`];
//! - write errors (a full disk wrote about 96 lines a second) are reported
//!   once a minute with a count of the ones not shown.

use crate::net::bounds::Every;
use chrono::{DateTime, Local};
use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use writer::writer;

pub use json::{Flow, MAX_JSON_LINE};

mod json;
mod writer;

/// Lines that may wait for the writer. A line is about 100 bytes queued
/// (the event and its channel slot), so the queue holds at most about 1.6 MB;
/// before this bound, a log reader that never read let it grow from 3.4 to
/// 33 MB over 94k connections, without end. At 10 ms between batches the
/// writer takes far more than 16,384 lines a batch when the file keeps up.
pub const LOG_QUEUE_LINES: usize = 16_384;

/// The longest [`LogHandle::flush`] and [`LogHandle::reopen`] wait for the
/// writer thread, whose write(2) to a stuck file (NFS, FUSE, a device) may
/// never return: past it, exit goes on and a reload reports an error.
pub const WRITER_WAIT: Duration = Duration::from_secs(2);

/// How often at most a warning about dropped lines or write errors is printed.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The largest write a pipe takes whole or not at all (POSIX `PIPE_BUF` on
/// Linux): lines go to a non-blocking FIFO in chunks of at most this, so a
/// full pipe refuses whole lines and never gets half of one.
const PIPE_BUF: usize = 4096;

/// What happened, spelled exactly as rinetd 0.73 writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The backend connect is starting.
    Opened,
    /// The backend side closed first (or never answered).
    DoneLocalClosed,
    /// The client side closed first.
    DoneRemoteClosed,
    /// accept(2) failed.
    AcceptFailed,
    /// The outgoing socket could not be created.
    LocalSocketFailed,
    /// Allow patterns exist and the client matched none.
    NotAllowed,
    /// A deny pattern matched the client.
    Denied,
    /// A PROXY header was malformed, oversized, cut short, or did not
    /// arrive within 5 s (`accept-proxy`); the connection was closed.
    ProxyHeaderFailed,
    /// A client of an `accept-proxy` rule matched no `trust-proxy` pattern.
    ProxyUntrusted,
    /// A connection limit was reached (global `maxconn`, the rule's
    /// `maxconn` or `maxconn-per-client`); the connection was closed.
    LimitReached,
    /// On a listener rules share by server name (`[sni=...]`) without a
    /// default rule: the server name matched no rule, or none was read.
    SniUnrouted,
    /// The client's TLS handshake with oi failed, took longer than
    /// `tls-handshake-timeout`, or found the rule's handshakes at their cap.
    TlsHandshakeFailed,
    /// oi's TLS handshake with the backend failed (`tls-connect`): an
    /// untrusted or expired certificate, a wrong name, or the backend's refusal.
    TlsBackendFailed,
    /// The client's certificate, verified, matched none of the rule's
    /// `tls-allow-subject` or `tls-allow-issuer` entries: closed after its
    /// handshake.
    TlsSubjectDenied,
}

impl Event {
    /// The text rinetd puts in its last field.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Opened => "opened",
            Event::DoneLocalClosed => "done-local-closed",
            Event::DoneRemoteClosed => "done-remote-closed",
            Event::AcceptFailed => "accept-failed -",
            Event::LocalSocketFailed => "local-socket-failed -",
            Event::NotAllowed => "not-allowed",
            Event::Denied => "denied",
            Event::ProxyHeaderFailed => "proxy-header-failed",
            Event::ProxyUntrusted => "proxy-untrusted",
            Event::LimitReached => "limit-reached",
            Event::SniUnrouted => "sni-unrouted",
            Event::TlsHandshakeFailed => "tls-handshake-failed",
            Event::TlsBackendFailed => "tls-backend-failed",
            Event::TlsSubjectDenied => "tls-subject-denied",
        }
    }
}

/// The rule fields a log line names, as written in the configuration.
///
/// Shared by every connection of a rule, and kept by open connections across
/// reloads so their last line still names their own rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleNames {
    /// Bind host as written (shared with the configuration).
    pub bind_host: std::sync::Arc<str>,
    /// Bind port number.
    pub bind_port: u16,
    /// Connect host as written (shared with the configuration).
    pub connect_host: std::sync::Arc<str>,
    /// Connect port number.
    pub connect_port: u16,
}

/// One line of the log file, before formatting.
#[derive(Clone, Debug)]
pub struct LogEvent {
    /// When it happened (taken by the sender, not the writer).
    pub time: SystemTime,
    /// The client's address (IPv4-mapped addresses already unmapped), or a
    /// unix socket client, printed `unix-client`.
    pub client: crate::net::peer::Client,
    /// Which rule.
    pub rule: Arc<RuleNames>,
    /// Bytes received from the client.
    pub from_client: u64,
    /// Bytes sent to the client.
    pub to_client: u64,
    /// What happened.
    pub event: Event,
    /// The TLS server name the client asked for, on a listener rules share
    /// by server name (`[sni=...]`); written as one more field at the end.
    pub server_name: Option<Arc<str>>,
    /// The subject of the certificate the client presented (`tls-client-ca`):
    /// `logformat json` writes it; rinetd's formats stay as they were.
    pub tls_subject: Option<Arc<str>>,
    /// The connection's id, rule name, backend and age, once it has a live
    /// entry: `logformat json` writes them (rinetd's formats have no place for them).
    pub flow: Option<Flow>,
}

/// Which of rinetd's two formats to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Nine tab-separated fields.
    Tab,
    /// Web-server common log format (`logcommon`).
    Common,
    /// One JSON object per line (`logformat json`).
    Json,
}

impl From<oi_config::LogFormat> for Format {
    fn from(f: oi_config::LogFormat) -> Self {
        match f {
            oi_config::LogFormat::Tab => Format::Tab,
            oi_config::LogFormat::Common => Format::Common,
            oi_config::LogFormat::Json => Format::Json,
        }
    }
}

/// Formats one event as a line (with its newline): rinetd's two formats
/// byte-compatible with rinetd 0.73, or JSON.
pub(crate) fn format_line(ev: &LogEvent, format: Format, out: &mut String) {
    match format {
        Format::Tab => rinetd_line(ev, false, out),
        Format::Common => rinetd_line(ev, true, out),
        Format::Json => json::format_json(ev, out),
    }
}

/// One line in rinetd's tab-separated format, or (`common`) its common log format.
fn rinetd_line(ev: &LogEvent, common: bool, out: &mut String) {
    use std::fmt::Write as _;
    let local: DateTime<Local> = ev.time.into();
    let r = &ev.rule;
    // rinetd's fields, then (oi) the routed server name as one more.
    let name = ev.server_name.as_deref();
    let (sep, name) = match (common, name) {
        (_, None) => ("", ""),
        (false, Some(n)) => ("\t", n),
        (true, Some(n)) => (" ", n),
    };
    // rinetd's date string ends in a space in both formats; keep it byte for byte.
    let _ = match common {
        false => writeln!(
            out,
            "{} \t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}{sep}{name}",
            local.format("%d/%b/%Y:%H:%M:%S"),
            ev.client,
            r.bind_host,
            r.bind_port,
            r.connect_host,
            r.connect_port,
            ev.from_client,
            ev.to_client,
            ev.event.as_str()
        ),
        true => writeln!(
            out,
            "{} - - [{}  {}] \"GET /rinetd-services/{}/{}/{}/{}/{} HTTP/1.0\" 200 {} - - - {}{sep}{name}",
            ev.client,
            local.format("%d/%b/%Y:%H:%M:%S"),
            local.format("%z"),
            r.bind_host,
            r.bind_port,
            r.connect_host,
            r.connect_port,
            ev.event.as_str(),
            ev.to_client,
            ev.from_client
        ),
    };
}

/// Messages to the writer thread.
enum Msg {
    /// Append one line.
    Line(LogEvent),
    /// Close the current file and open this one (or none) in this format.
    Reopen(Option<PathBuf>, Format, mpsc::Sender<std::io::Result<()>>),
    /// Report back once everything sent before has been written.
    Flush(mpsc::Sender<()>),
    /// Open the current file's path again (SIGUSR1, after logrotate moved
    /// the file); reports whether a file is configured.
    Rotate(mpsc::Sender<std::io::Result<bool>>),
}

/// What the senders and the writer thread share about the queue between them.
struct Queue {
    /// Lines sent and not yet taken by the writer; at most [`LOG_QUEUE_LINES`].
    lines: AtomicUsize,
    /// Lines lost: refused with the queue full, or refused by a non-blocking file.
    dropped: AtomicU64,
    /// Rate limit of the warning about dropped lines.
    warning: Every,
    /// Whether the writer has a file open. Without one, [`LogHandle::log`]
    /// sends nothing: waking the writer thread twice per connection only to
    /// drop the lines cost a futex wake and a context switch each.
    /// Set by the writer, only when an open succeeds or the file is closed.
    has_file: AtomicBool,
}

impl Queue {
    /// Counts `n` lost lines and warns at most once a minute.
    fn dropped(&self, n: u64, why: &str) {
        let total = self
            .dropped
            .fetch_add(n, Ordering::Relaxed)
            .saturating_add(n);
        if self.warning.ready() {
            log::warn!("log file: dropping lines, {why} ({total} dropped so far)");
        }
    }
}

/// Sends the writer thread the request `ask` makes around a reply channel
/// and waits for its answer, at most [`WRITER_WAIT`]: a writer stuck in a
/// write to the old file does the request once that write returns, and
/// this reports it as an error now.
fn ask_writer<T>(
    tx: &mpsc::Sender<Msg>,
    ask: impl FnOnce(mpsc::Sender<std::io::Result<T>>) -> Msg,
) -> std::io::Result<T> {
    let (done_tx, done_rx) = mpsc::channel();
    tx.send(ask(done_tx))
        .map_err(|_| std::io::Error::other("log writer thread is gone"))?;
    match done_rx.recv_timeout(WRITER_WAIT) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(std::io::Error::new(
            ErrorKind::TimedOut,
            format!(
                "the log writer has been stuck in a write for {WRITER_WAIT:?}; \
                 it reopens the file when that write returns"
            ),
        )),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(std::io::Error::other("log writer thread is gone"))
        }
    }
}

/// A cheap, cloneable handle for sending log events; sending never blocks.
#[derive(Clone)]
pub struct LogHandle {
    /// Channel to the writer thread; `None` when logging to a file is off for good (tests).
    tx: Option<mpsc::Sender<Msg>>,
    /// The queue's length bound, drop count and file state, shared with the writer.
    queue: Arc<Queue>,
}

/// A fresh queue state: empty, no file.
fn new_queue() -> Arc<Queue> {
    Arc::new(Queue {
        lines: AtomicUsize::new(0),
        dropped: AtomicU64::new(0),
        warning: Every::new(WARN_EVERY),
        has_file: AtomicBool::new(false),
    })
}

impl LogHandle {
    /// A handle that drops every event.
    pub fn disabled() -> Self {
        LogHandle {
            tx: None,
            queue: new_queue(),
        }
    }

    /// Starts the writer thread with no file open; call [`reopen`](Self::reopen) to open one.
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let queue = new_queue();
        let shared = queue.clone();
        std::thread::Builder::new()
            .name("oi-logfile".into())
            .spawn(move || writer(rx, &shared))?;
        Ok(LogHandle {
            tx: Some(tx),
            queue,
        })
    }

    /// Sends the event `make` makes, making it only when a file takes lines:
    /// for the lines every connection writes (opened, done). Without a log
    /// file that skips two clock reads and the rule names' reference count,
    /// an atomic add and subtract on a line every thread writes, per line
    /// Never blocks; dropped (and counted) when
    /// [`LOG_QUEUE_LINES`] lines already wait, or if the writer thread is gone.
    pub fn log_with(&self, make: impl FnOnce() -> LogEvent) {
        let Some(tx) = &self.tx else { return };
        if !self.queue.has_file.load(Ordering::Relaxed) {
            return;
        }
        let q = &self.queue;
        if q.lines.fetch_add(1, Ordering::Relaxed) >= LOG_QUEUE_LINES {
            q.lines.fetch_sub(1, Ordering::Relaxed);
            return q.dropped(1, "the writer is not keeping up with the file");
        }
        if tx.send(Msg::Line(make())).is_err() {
            q.lines.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Sends one event, as [`log_with`](Self::log_with).
    pub fn log(&self, ev: LogEvent) {
        self.log_with(|| ev);
    }

    /// Lines waiting for the writer right now (at most [`LOG_QUEUE_LINES`]).
    pub fn queued(&self) -> usize {
        self.queue.lines.load(Ordering::Relaxed)
    }

    /// Lines lost so far: refused with the queue full or by a file that
    /// could not take them without blocking.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped.load(Ordering::Relaxed)
    }

    /// Waits until every event sent so far is written (used on exit), at
    /// most [`WRITER_WAIT`]; returns whether the writer got there.
    /// Blocking: call it off the executor threads.
    pub fn flush(&self) -> bool {
        let Some(tx) = &self.tx else { return true };
        let (done_tx, done_rx) = mpsc::channel();
        if tx.send(Msg::Flush(done_tx)).is_err() {
            return true;
        }
        let done = done_rx.recv_timeout(WRITER_WAIT).is_ok();
        if !done {
            log::warn!(
                "log file: the writer has been stuck in a write for {WRITER_WAIT:?}; \
                 not waiting for it"
            );
        }
        done
    }

    /// Opens the log file's path again, as SIGUSR1 asks after logrotate
    /// moved the file away (`create`): lines written from now on go to the
    /// file at the path (made if missing, a symlink refused as at start-up),
    /// the moved file keeps what was written before. A failed open keeps the
    /// file open now. `Ok(false)`: no log file is configured, nothing done.
    /// Waits at most [`WRITER_WAIT`], as [`reopen`](Self::reopen).
    /// Blocking: call it off the executor threads.
    pub fn rotate(&self) -> std::io::Result<bool> {
        let Some(tx) = &self.tx else { return Ok(false) };
        ask_writer(tx, Msg::Rotate)
    }

    /// Reopens the log file (after logrotate, or for a new configuration) and
    /// waits until the writer has done it, at most [`WRITER_WAIT`], so the
    /// caller can report an error. A writer stuck in a write to the old file
    /// reopens once that write returns; this reports it as an error now.
    /// Blocking: call it off the executor threads.
    pub fn reopen(&self, path: Option<PathBuf>, format: Format) -> std::io::Result<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        ask_writer(tx, |done| Msg::Reopen(path, format, done))
    }
}

#[cfg(test)]
mod tests;
