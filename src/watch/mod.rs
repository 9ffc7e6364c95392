//! `--watch` / `watch on`: reload when the configuration changes on disk.
//!
//! One thread (`oi-watch`) holds one inotify descriptor with one watch per
//! directory the configuration's files are in ([`scan`] says which, and
//! which names in each matter). Idle, it blocks in `poll` with no timeout:
//! an unchanged configuration costs no wake-up. A change that matters
//! starts the debounce: once [`QUIET`] has passed with no further change
//! that matters (or [`MAX_DELAY`] after the first, for a file that never
//! stops changing), it scans again; when the digest says a reload is due
//! ([`due`]), it asks the service for a reload down the same path SIGHUP
//! takes (so a bad file keeps the running configuration), and the watches
//! follow the new scan (new includes watched, removed ones dropped).
//!
//! A reload is due when the files differ from what the last *successful*
//! reload read ([`Reads`]: each reload records the digest of its own read),
//! not merely from the watcher's last scan: a reload queued behind an
//! upgrade may read a half-written file and fail, and the file then
//! rewritten as the watcher last saw it must still be loaded. A `touch`, a
//! rename of an unrelated file in a glob directory, or a broken file that
//! stays as the failed reload read it reloads nothing.
//!
//! Bounded: one inotify descriptor and one pipe, one watch per directory
//! (at most [`MAX_WATCHED_DIRS`]), events read through one 4 KiB buffer, at
//! most [`MAX_READS_PER_WAKE`] buffers per wake-up; the kernel's queue
//! (`fs.inotify.max_queued_events`) bounds the rest, and its overflow is
//! treated as a change.

mod scan;

use async_channel::{Sender, TrySendError};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fd::OwnedFd;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use scan::{scan, Interest};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the files must stay unchanged before oi looks at them: an
/// editor's save or a ConfigMap swap is several events within a few
/// milliseconds; 200 ms takes them as one and is still quick to a person.
pub(crate) const QUIET: Duration = Duration::from_millis(200);

/// The longest a change waits for [`QUIET`]: a file rewritten without
/// pause (or a busy glob directory) is still looked at within 2 s.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(2);

/// Most directories watched at once; past it the rest are not watched (and
/// a warning says so). 1,024 included files at most, each in at most a few
/// directories, stay below it; the kernel's `fs.inotify.max_user_watches`
/// is the other bound, and a refused watch is a warning too.
pub(crate) const MAX_WATCHED_DIRS: usize = 4096;

/// Most buffers of events read per wake-up; more wait for the next
/// `poll`, which returns at once.
const MAX_READS_PER_WAKE: usize = 16;

/// Bytes of the buffer events are read into (room for at least one event
/// with the longest name, 16 + 256 bytes, many times over).
const EVENT_BUFFER: usize = 4096;

/// What the watcher asks of a directory: every way a name in it can come to
/// mean another file or other text, and the directory itself going away.
fn watch_flags() -> WatchFlags {
    WatchFlags::CLOSE_WRITE
        | WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::EXCL_UNLINK
}

/// Loads the configuration at `path` as [`oi_config::load_within`] does,
/// and returns with it the digest of everything that load read (real paths,
/// glob listings, contents), for [`Reads`].
pub(crate) fn load(
    path: &std::path::Path,
    rule_budget: Option<usize>,
) -> (Result<oi_config::Config, oi_config::ConfigErrors>, u64) {
    let (config, read) = scan::load(path, rule_budget);
    (config, read.digest)
}

/// What the last reloads read, shared by the service (which records each
/// reload's outcome) and the watcher (which decides from it).
#[derive(Clone)]
pub(crate) struct Reads(Arc<Mutex<LastReads>>);

/// The digests of the last reloads' reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LastReads {
    /// What the running configuration was read from: the start's load or
    /// the last successful reload's.
    good: u64,
    /// What the last reload read when it failed (`None` after a success): a
    /// broken file left as it is is not reloaded again and again.
    failed: Option<u64>,
}

impl Reads {
    /// The running configuration was read from files with digest `good`.
    pub(crate) fn new(good: u64) -> Reads {
        Reads(Arc::new(Mutex::new(LastReads { good, failed: None })))
    }

    /// Records a reload that read files with digest `read`, and whether it
    /// took effect.
    pub(crate) fn record(&self, read: u64, ok: bool) {
        // A poisoned lock still holds two plain numbers: use them.
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            *last = LastReads {
                good: read,
                failed: None,
            };
        } else {
            last.failed = Some(read);
        }
    }

    /// The digests as they are now.
    fn get(&self) -> LastReads {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether files whose digest is `now` (the watcher's last scan before it
/// being `before`) are to be reloaded: never when they are what the running
/// configuration was read from; otherwise when they changed since the last
/// scan, or when they are not what the last failed reload read (that reload
/// may have read a half-written file the scans never saw).
fn due(now: u64, before: u64, last: LastReads) -> bool {
    now != last.good && (now != before || last.failed != Some(now))
}

/// A running watcher. Dropping it stops the thread (closing the pipe wakes
/// it) and waits for it, which takes at most one scan.
pub(crate) struct Watcher {
    /// The write end of the stop pipe: closing it ends the thread.
    stop: Option<OwnedFd>,
    /// The `oi-watch` thread.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Watches the configuration at `path` (absolute) and everything it
    /// includes; each change sends one `()` down `changed` (a full channel
    /// already holds a reload request, which is enough). The watches are in
    /// place when this returns, so a change right after READY=1 is seen.
    /// `reads` says what the running configuration was read from: when the
    /// files differ from it now (and are not what a reload just failed on),
    /// a reload is asked for at once.
    pub(crate) fn start(
        path: PathBuf,
        changed: Sender<()>,
        reads: Reads,
    ) -> std::io::Result<Watcher> {
        let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        let (stop_read, stop_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let first = scan(&path);
        let mut state = State {
            inotify,
            path,
            watched: BTreeMap::new(),
            interest: BTreeMap::new(),
            digest: first.digest,
            reads,
        };
        state.rewatch(first.dirs);
        if due(first.digest, first.digest, state.reads.get()) {
            log::info!(
                "{} changed while oi started: reloading",
                state.path.display()
            );
            let _ = changed.try_send(());
        }
        log::info!(
            "watching {} ({} file(s), {} director{}) for changes",
            state.path.display(),
            first.files,
            state.watched.len(),
            if state.watched.len() == 1 { "y" } else { "ies" }
        );
        let thread = std::thread::Builder::new()
            .name("oi-watch".into())
            .spawn(move || state.run(&stop_read, &changed))?;
        Ok(Watcher {
            stop: Some(stop_write),
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What one wait for events found.
enum Wake {
    /// The stop pipe closed: the watcher is being dropped.
    Stop,
    /// Nothing came before the timeout.
    Timeout,
    /// Events came, none that matter.
    Nothing,
    /// A change that matters.
    Changed,
}

/// The watcher thread's state.
struct State {
    /// The inotify descriptor (non-blocking; `poll` does the waiting).
    inotify: OwnedFd,
    /// The configuration file, absolute, as given.
    path: PathBuf,
    /// Watched directories, by real path, and their watch descriptors.
    watched: BTreeMap<PathBuf, i32>,
    /// What matters under each watch descriptor (merged when two paths
    /// are one directory, and so one descriptor).
    interest: BTreeMap<i32, Interest>,
    /// The digest of the last scan: a change since it is one input of [`due`].
    digest: u64,
    /// What the last reloads read: the other inputs of [`due`].
    reads: Reads,
}

impl State {
    /// Waits for changes until the stop pipe closes.
    fn run(mut self, stop: &OwnedFd, changed: &Sender<()>) {
        let mut buf = [MaybeUninit::<u8>::uninit(); EVENT_BUFFER];
        loop {
            // Idle: no timeout, so a configuration that does not change
            // costs no wake-up at all.
            match self.wait(stop, None, &mut buf) {
                Wake::Stop => return,
                Wake::Changed => {}
                Wake::Timeout | Wake::Nothing => continue,
            }
            let first = Instant::now();
            let mut last = first;
            loop {
                let due = (last + QUIET).min(first + MAX_DELAY);
                let left = due.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match self.wait(stop, Some(left), &mut buf) {
                    Wake::Stop => return,
                    Wake::Timeout => break,
                    Wake::Nothing => {}
                    Wake::Changed => last = Instant::now(),
                }
            }
            let now = scan(&self.path);
            self.rewatch(now.dirs);
            let before = std::mem::replace(&mut self.digest, now.digest);
            if !due(now.digest, before, self.reads.get()) {
                log::debug!("{}: changes seen, nothing to reload", self.path.display());
                continue;
            }
            if now.digest == before {
                log::info!(
                    "{} is not what the last reload read: reloading",
                    self.path.display()
                );
            } else {
                log::info!("{} changed: reloading", self.path.display());
            }
            if let Err(TrySendError::Closed(())) = changed.try_send(()) {
                return;
            }
        }
    }

    /// Waits up to `timeout` (`None`: for ever) for events, and reads them.
    fn wait(&self, stop: &OwnedFd, timeout: Option<Duration>, buf: &mut [MaybeUninit<u8>]) -> Wake {
        // A timeout past Timespec's range cannot happen (at most MAX_DELAY).
        let timeout = timeout.and_then(|t| Timespec::try_from(t).ok());
        let mut fds = [
            PollFd::new(&self.inotify, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => return Wake::Timeout,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Wake::Nothing,
            Err(e) => {
                // Not expected on these two descriptors; stop rather than spin.
                log::error!("watching the configuration: poll: {e}; SIGHUP still reloads");
                return Wake::Stop;
            }
        }
        if !fds[1].revents().is_empty() {
            return Wake::Stop;
        }
        self.read_events(buf)
    }

    /// Reads the pending events (at most [`MAX_READS_PER_WAKE`] buffers
    /// full; a buffer once read is always handled whole, so no event read
    /// is lost) and says whether one matters.
    fn read_events(&self, buf: &mut [MaybeUninit<u8>]) -> Wake {
        let whole =
            ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF | ReadFlags::UNMOUNT;
        let mut reader = inotify::Reader::new(&self.inotify, buf);
        let mut found = Wake::Nothing;
        let mut reads = 0;
        loop {
            if reader.is_buffer_empty() {
                if reads == MAX_READS_PER_WAKE {
                    break;
                }
                reads += 1;
            }
            let event = match reader.next() {
                Ok(e) => e,
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => break,
                Err(e) => {
                    log::warn!("watching the configuration: reading events: {e}");
                    break;
                }
            };
            let flags = event.events();
            // Events of a watch already dropped (its IGNORED among them) do
            // not matter; an overflow (no watch) may have hidden anything.
            let matters = flags.contains(ReadFlags::QUEUE_OVERFLOW)
                || self.interest.get(&event.wd()).is_some_and(|interest| {
                    flags.intersects(whole)
                        || event
                            .file_name()
                            .is_some_and(|n| interest.covers(OsStr::from_bytes(n.to_bytes())))
                });
            if matters {
                found = Wake::Changed;
            }
        }
        found
    }

    /// Makes the watched directories `dirs`: adds the new ones, drops the
    /// ones no longer needed. Adding a directory already watched returns
    /// its descriptor again (and renews a watch on one recreated under the
    /// same name).
    fn rewatch(&mut self, dirs: BTreeMap<PathBuf, Interest>) {
        let mut watched = BTreeMap::new();
        let mut interest: BTreeMap<i32, Interest> = BTreeMap::new();
        let total = dirs.len();
        for (dir, want) in dirs.into_iter().take(MAX_WATCHED_DIRS) {
            match inotify::add_watch(&self.inotify, &dir, watch_flags()) {
                Ok(wd) => {
                    match interest.get_mut(&wd) {
                        Some(have) => have.merge(&want),
                        None => {
                            interest.insert(wd, want);
                        }
                    }
                    watched.insert(dir, wd);
                }
                // Gone since the scan: the next change in its parent is seen.
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => log::warn!(
                    "cannot watch {} for changes: {e}; SIGHUP still reloads",
                    dir.display()
                ),
            }
        }
        if total > MAX_WATCHED_DIRS {
            log::warn!(
                "the configuration is in {total} directories; watching the first {MAX_WATCHED_DIRS}"
            );
        }
        let kept: BTreeSet<i32> = watched.values().copied().collect();
        for (dir, wd) in &self.watched {
            if !kept.contains(wd) {
                // EINVAL: the kernel already dropped it (the directory went).
                let _ = inotify::remove_watch(&self.inotify, *wd);
                log::debug!("no longer watching {}", dir.display());
            }
        }
        self.watched = watched;
        self.interest = interest;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running configuration came from files `A`.
    const A: u64 = 1;
    /// A valid edit.
    const B: u64 = 2;
    /// A half-written file.
    const H: u64 = 3;

    fn last(good: u64, failed: Option<u64>) -> LastReads {
        LastReads { good, failed }
    }

    #[test]
    fn a_reload_that_read_other_files_than_the_scan_does_not_hide_them() {
        // The watcher scanned B and asked for a reload; it read H and
        // failed; the file is rewritten as B: same scan as before, yet B
        // is not what serves, nor what failed.
        assert!(due(B, B, last(A, Some(H))));
        // Nor when no reload has finished yet (the request may be queued).
        assert!(due(B, B, last(A, None)));
    }

    #[test]
    fn what_serves_and_what_failed_unchanged_are_not_reloaded() {
        // A touch of the running files.
        assert!(!due(A, A, last(A, None)));
        // Back to what serves after a failed edit.
        assert!(!due(A, H, last(A, Some(H))));
        // A broken file left as the failed reload read it: no loop.
        assert!(!due(H, H, last(A, Some(H))));
        // A broken file changed to another broken file: one more reload.
        assert!(due(H + 1, H, last(A, Some(H))));
        // The same broken file written again after a change elsewhere.
        assert!(due(H, B, last(A, Some(H))));
    }

    #[test]
    fn reads_record_successes_and_failures() {
        let reads = Reads::new(A);
        reads.record(H, false);
        assert_eq!(reads.get(), last(A, Some(H)));
        reads.record(B, true);
        assert_eq!(reads.get(), last(B, None));
    }
}
