//! The writer thread: owns the log file, takes lines off the queue in
//! batches, and writes whole lines without ever blocking on the file.

use super::{format_line, Format, Msg, Queue, PIPE_BUF, WARN_EVERY};
use std::fs::File;
use std::io::ErrorKind;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// An open log file, and how to write to it.
struct LogFile {
    /// The file, opened for appending.
    file: File,
    /// Not a regular file (a FIFO, socket or device): it stays non-blocking,
    /// and lines go in whole-line chunks of at most [`PIPE_BUF`].
    nonblocking: bool,
}

/// Opens a log file for appending, creating it if needed, without ever
/// blocking in open(2) and without following a symlink (see the module
/// documentation and [`crate::sys::safe_fs::open_append`]).
fn open_append(path: &std::path::Path) -> std::io::Result<LogFile> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let file = crate::sys::safe_fs::open_append(path)?;
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
pub(super) fn writer(rx: mpsc::Receiver<Msg>, queue: &Queue) {
    let mut w = Writer {
        file: None,
        buf: String::with_capacity(4096),
        queue,
        errors: Suppressor::new(WARN_EVERY),
    };
    let mut format = Format::Tab;
    // The open file's path, for `Rotate`.
    let mut path: Option<std::path::PathBuf> = None;
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
                Msg::Reopen(to, fmt, done) => {
                    w.flush();
                    format = fmt;
                    let result = match to {
                        // A failed open keeps the previous file (and its path).
                        Some(p) => open_append(&p).map(|f| {
                            w.file = Some(f);
                            path = Some(p);
                        }),
                        None => {
                            w.file = None;
                            path = None;
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
                Msg::Rotate(done) => {
                    w.flush();
                    // A failed open keeps the file open now.
                    let result = match &path {
                        Some(p) => open_append(p).map(|f| w.file = Some(f)).map(|()| true),
                        None => Ok(false),
                    };
                    let _ = done.send(result);
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
                reason = "log-write-failed";
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
pub(super) fn whole_lines(text: &str, max: usize) -> &str {
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
pub(super) struct Suppressor {
    /// Length of a period.
    period: Duration,
    /// When the last report went out.
    last: Option<Instant>,
    /// Errors held back since then.
    held: u64,
}

impl Suppressor {
    /// Nothing reported yet.
    pub(super) fn new(period: Duration) -> Self {
        Suppressor {
            period,
            last: None,
            held: 0,
        }
    }

    /// An error at `now`: `Some(errors held back since the last report)` if
    /// this one should be reported, `None` if it is held back.
    pub(super) fn report(&mut self, now: Instant) -> Option<u64> {
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
