//! rinetd's connection log file, written by one dedicated thread.
//!
//! Connection tasks never touch the file: they send a [`LogEvent`] down a
//! channel (no lock, no syscall on the executor thread) and the writer thread
//! formats and appends it. The file is opened with `O_APPEND`, so logrotate's
//! `copytruncate` works, and [`LogHandle::reopen`] reopens it after a rename.

use chrono::{DateTime, Local};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::SystemTime;

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
    /// The client's address (IPv4-mapped addresses already unmapped).
    pub client: IpAddr,
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

/// A cheap, cloneable handle for sending log events; sending never blocks.
#[derive(Clone)]
pub struct LogHandle {
    /// Channel to the writer thread; `None` when logging to a file is off for good (tests).
    tx: Option<mpsc::Sender<Msg>>,
    /// Whether the writer has a file open. Without one, [`log`](Self::log)
    /// sends nothing: waking the writer thread twice per connection only to
    /// drop the lines cost a futex wake and a context switch each.
    /// Changes only when a reopen succeeds.
    has_file: Arc<AtomicBool>,
}

impl LogHandle {
    /// A handle that drops every event.
    pub fn disabled() -> Self {
        LogHandle {
            tx: None,
            has_file: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Starts the writer thread with no file open; call [`reopen`](Self::reopen) to open one.
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("oi-logfile".into())
            .spawn(move || writer(rx))?;
        Ok(LogHandle {
            tx: Some(tx),
            has_file: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Sends one event. Never blocks; lost only if the writer thread is gone.
    pub fn log(&self, ev: LogEvent) {
        if let Some(tx) = &self.tx {
            if self.has_file.load(Ordering::Relaxed) {
                let _ = tx.send(Msg::Line(ev));
            }
        }
    }

    /// Waits until every event sent so far is written (used on exit).
    /// Blocking: call it off the executor threads.
    pub fn flush(&self) {
        let Some(tx) = &self.tx else { return };
        let (done_tx, done_rx) = mpsc::channel();
        if tx.send(Msg::Flush(done_tx)).is_ok() {
            let _ = done_rx.recv();
        }
    }

    /// Reopens the log file (after logrotate, or for a new configuration) and waits
    /// until the writer has done it, so the caller can report an error.
    /// Blocking: call it off the executor threads.
    pub fn reopen(&self, path: Option<PathBuf>, format: Format) -> std::io::Result<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let opens = path.is_some();
        let (done_tx, done_rx) = mpsc::channel();
        tx.send(Msg::Reopen(path, format, done_tx))
            .map_err(|_| std::io::Error::other("log writer thread is gone"))?;
        done_rx
            .recv()
            .map_err(|_| std::io::Error::other("log writer thread is gone"))??;
        // A failed open keeps the previous file (see `writer`), so only success changes this.
        self.has_file.store(opens, Ordering::Relaxed);
        Ok(())
    }
}

/// Opens a log file for appending, creating it if needed.
fn open_append(path: &PathBuf) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// After writing a batch of connection lines, the writer waits this long
/// before taking the next batch. Events sent meanwhile queue up without waking
/// it (a parked receiver costs every sender a futex wake and a context
/// switch), so under load the thread wakes at most this often, and lines reach
/// the file at most this much later. An idle writer blocks on the channel.
const BATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(10);

/// The writer thread: formats lines and appends them, batching what is queued.
fn writer(rx: mpsc::Receiver<Msg>) {
    let mut file: Option<File> = None;
    let mut format = Format::Tab;
    let mut buf = String::with_capacity(4096);
    while let Ok(first) = rx.recv() {
        let mut lines = false;
        let mut next = Some(first);
        // Drain whatever is queued into one write(2).
        while let Some(msg) = next.take() {
            match msg {
                Msg::Line(ev) => {
                    format_line(&ev, format, &mut buf);
                    lines = true;
                }
                Msg::Reopen(path, fmt, done) => {
                    flush(&mut file, &mut buf);
                    format = fmt;
                    let result = match path {
                        Some(p) => open_append(&p).map(|f| file = Some(f)),
                        None => {
                            file = None;
                            Ok(())
                        }
                    };
                    let _ = done.send(result);
                }
                Msg::Flush(done) => {
                    flush(&mut file, &mut buf);
                    let _ = done.send(());
                }
            }
            if buf.len() < 64 * 1024 {
                next = rx.try_recv().ok();
            }
        }
        flush(&mut file, &mut buf);
        if lines {
            std::thread::sleep(BATCH_WINDOW);
        }
    }
}

/// Writes the pending lines to the file, if one is open; reports failures once per batch.
fn flush(file: &mut Option<File>, buf: &mut String) {
    if let (Some(f), false) = (file.as_mut(), buf.is_empty()) {
        if let Err(e) = f.write_all(buf.as_bytes()) {
            log::error!("cannot write to the log file: {e}");
        }
    }
    buf.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn event(ev: Event) -> LogEvent {
        LogEvent {
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            client: "127.0.0.2".parse().unwrap(),
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

    impl LogHandle {
        /// Logs the sample event with this outcome.
        fn log_test_event(&self, ev: Event) {
            self.log(event(ev));
        }
    }
}
