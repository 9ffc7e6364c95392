//! rinetd's connection log file, written by one dedicated thread.
//!
//! Connection tasks never touch the file: they send a [`LogEvent`] down a
//! channel (no lock, no syscall on the executor thread) and the writer thread
//! formats and appends it. The file is opened with `O_APPEND`, so logrotate's
//! `copytruncate` works, and [`LogHandle::reopen`] reopens it after a rename.
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
//! - [`LogHandle::flush`] (exit) and [`LogHandle::reopen`] (start-up,
//!   reload) wait for the writer at most [`WRITER_WAIT`];
//! - write errors (a full disk wrote about 96 lines a second) are reported
//!   once a minute with a count of the ones not shown.

use crate::bounds::Every;
use chrono::{DateTime, Local};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

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
        }
    }
}

/// The rule fields a log line names, as written in the configuration.
///
/// Shared by every connection of a rule, and kept by open connections across
/// reloads so their last line still names their own rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleNames {
    /// Bind host as written.
    pub bind_host: String,
    /// Bind port number.
    pub bind_port: u16,
    /// Connect host as written.
    pub connect_host: String,
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
    pub client: crate::peer::Client,
    /// Which rule.
    pub rule: Arc<RuleNames>,
    /// Bytes received from the client.
    pub from_client: u64,
    /// Bytes sent to the client.
    pub to_client: u64,
    /// What happened.
    pub event: Event,
}

/// Which of rinetd's two formats to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Nine tab-separated fields.
    Tab,
    /// Web-server common log format (`logcommon`).
    Common,
}

/// Formats one event as a line (with its newline), byte-compatible with rinetd 0.73.
pub(crate) fn format_line(ev: &LogEvent, format: Format, out: &mut String) {
    use std::fmt::Write as _;
    let local: DateTime<Local> = ev.time.into();
    let r = &ev.rule;
    // rinetd's date string ends in a space in both formats; keep it byte for byte.
    let _ = match format {
        Format::Tab => writeln!(
            out,
            "{} \t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
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
        Format::Common => writeln!(
            out,
            "{} - - [{}  {}] \"GET /rinetd-services/{}/{}/{}/{}/{} HTTP/1.0\" 200 {} - - - {}",
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

    /// Sends one event. Never blocks; dropped (and counted) when
    /// [`LOG_QUEUE_LINES`] lines already wait, or if the writer thread is gone.
    pub fn log(&self, ev: LogEvent) {
        let Some(tx) = &self.tx else { return };
        if !self.queue.has_file.load(Ordering::Relaxed) {
            return;
        }
        let q = &self.queue;
        if q.lines.fetch_add(1, Ordering::Relaxed) >= LOG_QUEUE_LINES {
            q.lines.fetch_sub(1, Ordering::Relaxed);
            return q.dropped(1, "the writer is not keeping up with the file");
        }
        if tx.send(Msg::Line(ev)).is_err() {
            q.lines.fetch_sub(1, Ordering::Relaxed);
        }
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

    /// Reopens the log file (after logrotate, or for a new configuration) and
    /// waits until the writer has done it, at most [`WRITER_WAIT`], so the
    /// caller can report an error. A writer stuck in a write to the old file
    /// reopens once that write returns; this reports it as an error now.
    /// Blocking: call it off the executor threads.
    pub fn reopen(&self, path: Option<PathBuf>, format: Format) -> std::io::Result<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let (done_tx, done_rx) = mpsc::channel();
        tx.send(Msg::Reopen(path, format, done_tx))
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
}

/// An open log file, and how to write to it.
struct LogFile {
    /// The file, opened for appending.
    file: File,
    /// Not a regular file (a FIFO, socket or device): it stays non-blocking,
    /// and lines go in whole-line chunks of at most [`PIPE_BUF`].
    nonblocking: bool,
}

/// Opens a log file for appending, creating it if needed, without ever
/// blocking in open(2) (see the module documentation).
fn open_append(path: &PathBuf) -> std::io::Result<LogFile> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "{}: a FIFO nobody reads (oi does not wait for a reader)",
                        path.display()
                    ),
                )
            } else {
                e
            }
        })?;
    let nonblocking = !file.metadata()?.file_type().is_file();
    if !nonblocking {
        // O_NONBLOCK means nothing for a regular file; cleared so it is what it looks like.
        fcntl_setfl(&file, fcntl_getfl(&file)? - OFlags::NONBLOCK)?;
    }
    Ok(LogFile { file, nonblocking })
}

/// After writing a batch of connection lines, the writer waits this long
/// before taking the next batch. Events sent meanwhile queue up without waking
/// it (a parked receiver costs every sender a futex wake and a context
/// switch), so under load the thread wakes at most this often, and lines reach
/// the file at most this much later. An idle writer blocks on the channel.
const BATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(10);

/// The writer thread's state.
struct Writer<'a> {
    /// The open file, if any.
    file: Option<LogFile>,
    /// Formatted lines not yet written.
    buf: String,
    /// Shared with the senders: the line count, drops and file state.
    queue: &'a Queue,
    /// Write errors are reported at most once per [`WARN_EVERY`].
    errors: Suppressor,
}

/// The writer thread: formats lines and appends them, batching what is queued.
fn writer(rx: mpsc::Receiver<Msg>, queue: &Queue) {
    let mut w = Writer {
        file: None,
        buf: String::with_capacity(4096),
        queue,
        errors: Suppressor::new(WARN_EVERY),
    };
    let mut format = Format::Tab;
    while let Ok(first) = rx.recv() {
        let mut lines = false;
        let mut next = Some(first);
        // Drain whatever is queued into one write(2).
        while let Some(msg) = next.take() {
            match msg {
                Msg::Line(ev) => {
                    queue.lines.fetch_sub(1, Ordering::Relaxed);
                    format_line(&ev, format, &mut w.buf);
                    lines = true;
                }
                Msg::Reopen(path, fmt, done) => {
                    w.flush();
                    format = fmt;
                    let result = match path {
                        // A failed open keeps the previous file.
                        Some(p) => open_append(&p).map(|f| w.file = Some(f)),
                        None => {
                            w.file = None;
                            Ok(())
                        }
                    };
                    queue.has_file.store(w.file.is_some(), Ordering::Relaxed);
                    let _ = done.send(result);
                }
                Msg::Flush(done) => {
                    w.flush();
                    let _ = done.send(());
                }
            }
            if w.buf.len() < 64 * 1024 {
                next = rx.try_recv().ok();
            }
        }
        w.flush();
        if lines {
            std::thread::sleep(BATCH_WINDOW);
        }
    }
}

impl Writer<'_> {
    /// Writes the pending lines to the file, if one is open. Lines a
    /// non-blocking file cannot take now are dropped and counted; write
    /// errors are counted and reported at most once a minute.
    fn flush(&mut self) {
        let failed = match self.file.as_mut() {
            Some(f) => write_lines(f, &self.buf).err(),
            None => None,
        };
        self.buf.clear();
        let Some((e, lost)) = failed else { return };
        let lost = u64::try_from(lost).unwrap_or(u64::MAX);
        if e.kind() == ErrorKind::WouldBlock {
            let why = "the log file (a FIFO, socket or device) is not being read";
            return self.queue.dropped(lost, why);
        }
        self.queue.dropped.fetch_add(lost, Ordering::Relaxed);
        if let Some(held) = self.errors.report(Instant::now()) {
            log::error!(
                "cannot write to the log file: {e} ({held} more write errors \
                 since the last report not shown; at most one report a minute)"
            );
        }
    }
}

/// Writes `text` (whole lines) to `f`; on failure, the error and how many
/// lines were not written (a partly written one counts as lost).
fn write_lines(f: &mut LogFile, text: &str) -> Result<(), (std::io::Error, usize)> {
    let mut rest = text;
    // Each round writes a non-empty chunk or returns, so this ends.
    while !rest.is_empty() {
        let chunk = if f.nonblocking {
            whole_lines(rest, PIPE_BUF)
        } else {
            rest
        };
        if let Err(e) = f.file.write_all(chunk.as_bytes()) {
            return Err((e, rest.lines().count()));
        }
        rest = &rest[chunk.len()..];
    }
    Ok(())
}

/// The longest prefix of `text` made of whole lines and at most `max` bytes;
/// a single longer line whole (written as it is, it may be split).
fn whole_lines(text: &str, max: usize) -> &str {
    let head = text.get(..max.min(text.len())).unwrap_or(text);
    if head.len() == text.len() {
        return text;
    }
    match head.rfind('\n') {
        Some(end) => &text[..=end],
        None => text.find('\n').map_or(text, |end| &text[..=end]),
    }
}

/// Lets one error report through per period and counts the ones held back.
struct Suppressor {
    /// Length of a period.
    period: Duration,
    /// When the last report went out.
    last: Option<Instant>,
    /// Errors held back since then.
    held: u64,
}

impl Suppressor {
    /// Nothing reported yet.
    fn new(period: Duration) -> Self {
        Suppressor {
            period,
            last: None,
            held: 0,
        }
    }

    /// An error at `now`: `Some(errors held back since the last report)` if
    /// this one should be reported, `None` if it is held back.
    fn report(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= self.period);
        if due {
            self.last = Some(now);
            Some(std::mem::take(&mut self.held))
        } else {
            self.held = self.held.saturating_add(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn event(ev: Event) -> LogEvent {
        LogEvent {
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            client: crate::peer::Client::Ip("127.0.0.2".parse().unwrap()),
            rule: Arc::new(RuleNames {
                bind_host: "0.0.0.0".into(),
                bind_port: 80,
                connect_host: "backend".into(),
                connect_port: 8080,
            }),
            from_client: 12,
            to_client: 345,
            event: ev,
        }
    }

    #[test]
    fn tab_format_has_nine_fields_and_rinetd_spacing() {
        let mut s = String::new();
        format_line(&event(Event::DoneRemoteClosed), Format::Tab, &mut s);
        let fields: Vec<&str> = s.trim_end_matches('\n').split('\t').collect();
        assert_eq!(fields.len(), 9);
        assert!(
            fields[0].ends_with(' '),
            "date keeps rinetd's trailing space"
        );
        assert_eq!(
            &fields[1..],
            [
                "127.0.0.2",
                "0.0.0.0",
                "80",
                "backend",
                "8080",
                "12",
                "345",
                "done-remote-closed"
            ]
        );
    }

    #[test]
    fn common_format_matches_rinetd() {
        let mut s = String::new();
        format_line(&event(Event::Opened), Format::Common, &mut s);
        let (head, tail) = s.split_once('[').unwrap();
        assert_eq!(head, "127.0.0.2 - - ");
        let (date, rest) = tail.split_once(']').unwrap();
        // "DD/Mon/YYYY:HH:MM:SS  +HHMM": rinetd's date string, its space, then the offset.
        assert_eq!(date.len(), 20 + 2 + 5, "{date:?}");
        assert_eq!(
            rest,
            " \"GET /rinetd-services/0.0.0.0/80/backend/8080/opened HTTP/1.0\" 200 345 - - - 12\n"
        );
    }

    #[test]
    fn failure_events_are_spelled_like_rinetd() {
        assert_eq!(Event::AcceptFailed.as_str(), "accept-failed -");
        assert_eq!(Event::LocalSocketFailed.as_str(), "local-socket-failed -");
        assert_eq!(Event::NotAllowed.as_str(), "not-allowed");
        assert_eq!(Event::Denied.as_str(), "denied");
    }

    #[test]
    fn lines_go_to_the_open_file_only_and_a_failed_reopen_keeps_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = dir.path().join("first.log");
        let log = LogHandle::start().expect("writer");
        log.log_test_event(Event::Opened); // no file yet: dropped
        log.reopen(Some(first.clone()), Format::Tab).expect("open");
        log.log_test_event(Event::Denied);
        let missing = dir.path().join("no-such-dir").join("x.log");
        assert!(log.reopen(Some(missing), Format::Tab).is_err());
        log.log_test_event(Event::NotAllowed); // still goes to first.log
        log.reopen(None, Format::Tab).expect("close");
        log.log_test_event(Event::AcceptFailed); // no file: dropped
        log.flush();
        let text = std::fs::read_to_string(&first).expect("read log");
        let events: Vec<&str> = text.lines().filter_map(|l| l.rsplit('\t').next()).collect();
        assert_eq!(events, ["denied", "not-allowed"]);
    }

    #[test]
    fn a_stuck_writer_bounds_the_queue_and_does_not_hold_up_exit_or_reload() {
        // A writer that never takes anything (as one stuck in write(2) on a
        // dead NFS mount): the channel's receiver is kept, no thread reads it.
        let (tx, _stuck) = mpsc::channel();
        let log = LogHandle {
            tx: Some(tx),
            queue: new_queue(),
        };
        log.queue.has_file.store(true, Ordering::Relaxed);
        let sent = LOG_QUEUE_LINES + 5_000;
        for _ in 0..sent {
            log.log_test_event(Event::Opened);
        }
        assert_eq!(log.queued(), LOG_QUEUE_LINES);
        assert_eq!(log.dropped(), 5_000);
        // Both give up after WRITER_WAIT instead of waiting for ever.
        assert!(!log.flush());
        let err = log.reopen(None, Format::Tab).expect_err("writer stuck");
        assert_eq!(err.kind(), ErrorKind::TimedOut);
    }

    #[test]
    fn write_errors_are_reported_once_a_period_with_the_count_held_back() {
        let mut s = Suppressor::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(s.report(t0), Some(0));
        for i in 1..=95 {
            assert_eq!(s.report(t0 + Duration::from_millis(i * 10)), None);
        }
        assert_eq!(s.report(t0 + Duration::from_secs(60)), Some(95));
        assert_eq!(s.report(t0 + Duration::from_secs(61)), None);
    }

    #[test]
    fn a_full_disk_loses_and_counts_lines_without_stopping_the_writer() {
        // /dev/full fails every write with ENOSPC.
        let log = LogHandle::start().expect("writer");
        log.reopen(Some(PathBuf::from("/dev/full")), Format::Tab)
            .expect("open /dev/full");
        for _ in 0..10 {
            log.log_test_event(Event::Opened);
        }
        assert!(log.flush());
        assert_eq!(log.dropped(), 10);
    }

    #[test]
    fn chunks_for_a_pipe_are_whole_lines() {
        assert_eq!(whole_lines("ab\ncd\nef\n", 6), "ab\ncd\n");
        assert_eq!(whole_lines("ab\ncd\n", 100), "ab\ncd\n");
        assert_eq!(
            whole_lines("abcdef\ngh\n", 3),
            "abcdef\n",
            "one long line whole"
        );
        assert_eq!(whole_lines("abc", 2), "abc");
    }

    impl LogHandle {
        /// Logs the sample event with this outcome.
        fn log_test_event(&self, ev: Event) {
            self.log(event(ev));
        }
    }
}
