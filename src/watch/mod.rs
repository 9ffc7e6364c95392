//! `--watch` / `watch on`: reload when the configuration changes on disk.
//!
//! One thread (`oi-watch`) holds one inotify descriptor with one watch per
//! directory the configuration's files are in ([`scan`] says which, and
//! which names in each matter). Idle, it blocks in `poll` with no timeout:
//! an unchanged configuration costs no wake-up. A change that matters
//! starts the debounce: once [`QUIET`] has passed with no further change
//! that matters (or [`MAX_DELAY`] after the first, for a file that never
//! stops changing), it scans again; when the digest differs, it asks the
//! service for a reload down the same path SIGHUP takes (so a bad file
//! keeps the running configuration), and the watches follow the new scan
//! (new includes watched, removed ones dropped). An unchanged digest (a
//! `touch`, a rename of an unrelated file in a glob directory) reloads
//! nothing.
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

/// The digest of everything a reload of the configuration at `path` would
/// read (real paths, glob listings, contents).
pub(crate) fn digest(path: &std::path::Path) -> u64 {
    scan(path).digest
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
    /// `loaded` is [`digest`] taken before the running configuration was
    /// read: when the files differ from it now, a reload is asked for at once.
    pub(crate) fn start(
        path: PathBuf,
        changed: Sender<()>,
        loaded: Option<u64>,
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
        };
        state.rewatch(first.dirs);
        if loaded.is_some_and(|d| d != first.digest) {
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
    /// The digest of the last scan: a reload is asked for when it changes.
    digest: u64,
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
            if now.digest == self.digest {
                log::debug!("{}: changes seen, same content", self.path.display());
                continue;
            }
            self.digest = now.digest;
            log::info!("{} changed: reloading", self.path.display());
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
