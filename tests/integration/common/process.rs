//! The real `oi` binary as a child process, with a NOTIFY_SOCKET the test listens on.
//!
//! Two threads per process turn what oi says into events on one channel: its
//! sd_notify datagrams and the end of its stderr (oi exited, or closed it when
//! becoming a daemon). So start-up waits on events, not by polling, ends as
//! soon as oi exits, and a failure carries oi's exit status and stderr.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long oi may take to say READY=1 (or the next notification): generous,
/// for a machine busy with other tests and builds.
pub const READY_PATIENCE: Duration = Duration::from_secs(60);

/// How much of oi's stderr a failure message quotes (its end).
const STDERR_QUOTE: usize = 8 * 1024;

/// What the helper threads report.
enum Event {
    /// One sd_notify datagram.
    Notify(String),
    /// oi's stderr reached its end.
    StderrClosed,
}

/// The real `oi` binary, started with a NOTIFY_SOCKET the test listens on.
pub struct OiProcess {
    /// The child process.
    pub child: std::process::Child,
    /// Notifications and the end of stderr, in the order they happened, and
    /// notifications received while looking for something else (none is lost).
    events: Mutex<(Receiver<Event>, VecDeque<String>)>,
    /// Everything oi wrote to stderr so far.
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The stderr reader, joined by `stop` so the text is complete.
    stderr_thread: Option<std::thread::JoinHandle<()>>,
    /// Dropped with the process: the notify reader thread exits when it is gone.
    _alive: Arc<()>,
}

impl OiProcess {
    /// Starts `oi -c conf` plus `args`, and waits for READY=1.
    pub fn start(dir: &std::path::Path, conf: &std::path::Path, args: &[&str]) -> Self {
        Self::start_program(
            std::path::Path::new(env!("CARGO_BIN_EXE_oi")),
            dir,
            conf,
            args,
        )
    }

    /// Like `start`, running `program` (a link to oi under another name).
    pub fn start_program(
        program: &std::path::Path,
        dir: &std::path::Path,
        conf: &std::path::Path,
        args: &[&str],
    ) -> Self {
        let mut command = std::process::Command::new(program);
        command.arg("-c").arg(conf).args(args);
        let p = Self::spawn(command, dir);
        p.wait_ready();
        p
    }

    /// Starts `command` (oi, or a program that runs oi, such as
    /// `systemd-socket-activate`) with NOTIFY_SOCKET set to a socket in
    /// `dir` and RUST_LOG=info, without waiting for anything.
    pub fn spawn(mut command: std::process::Command, dir: &std::path::Path) -> Self {
        let sock_path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&sock_path);
        let notify = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("notify socket");
        // The reader wakes this often to see whether the test still wants it.
        notify
            .set_read_timeout(Some(Duration::from_millis(250)))
            .expect("timeout");
        let program = command.get_program().to_string_lossy().into_owned();
        command
            .env("NOTIFY_SOCKET", &sock_path)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut child =
            spawn_written(&mut command).unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        let (tx, events) = std::sync::mpsc::channel();
        let alive = Arc::new(());
        let weak = Arc::downgrade(&alive);
        let notify_tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while weak.strong_count() > 0 {
                if let Ok(n) = notify.recv(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    if notify_tx.send(Event::Notify(text)).is_err() {
                        return;
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_thread = child.stderr.take().map(|mut e| {
            let text = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n @ 1..) = e.read(&mut buf) {
                    text.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend_from_slice(&buf[..n]);
                }
                let _ = tx.send(Event::StderrClosed);
            })
        });
        OiProcess {
            child,
            events: Mutex::new((events, VecDeque::new())),
            stderr,
            stderr_thread,
            _alive: alive,
        }
    }

    /// Waits for oi's first notification, which must be READY=1.
    pub fn wait_ready(&self) {
        let first = self.next_notify();
        if !first.contains("READY=1") {
            self.fail(&format!(
                "oi's first notification is not READY=1: {first:?}"
            ));
        }
    }

    /// The next sd_notify message; fails the test, with oi's exit status and
    /// stderr, when oi exits first or none comes within [`READY_PATIENCE`].
    pub fn next_notify(&self) -> String {
        let mut guard = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let (events, pending) = &mut *guard;
        if let Some(m) = pending.pop_front() {
            return m;
        }
        let deadline = Instant::now() + READY_PATIENCE;
        let mut stderr_closed = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // Once stderr has closed, look at the process now and then: a
            // daemon's parent exits 0 and its child still notifies.
            let wait = if stderr_closed {
                left.min(Duration::from_millis(100))
            } else {
                left
            };
            match events.recv_timeout(wait) {
                Ok(Event::Notify(m)) => return m,
                Ok(Event::StderrClosed) => stderr_closed = true,
                Err(RecvTimeoutError::Timeout) if left > Duration::ZERO => {}
                Err(_) => self.fail(&format!(
                    "no sd_notify message within {} s",
                    READY_PATIENCE.as_secs()
                )),
            }
            if stderr_closed {
                if let Some(status) = self.exit_status() {
                    // A last message may have raced the exit.
                    if let Ok(Event::Notify(m)) = events.recv_timeout(Duration::from_millis(50)) {
                        return m;
                    }
                    if status != Some(0) {
                        self.fail("oi exited before the expected sd_notify message");
                    }
                }
            }
        }
    }

    /// The next sd_notify message if one comes within `limit`, else `None`
    /// (oi may have exited meanwhile: the caller looks).
    pub fn notify_within(&self, limit: Duration) -> Option<String> {
        let mut guard = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let (events, pending) = &mut *guard;
        if let Some(m) = pending.pop_front() {
            return Some(m);
        }
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Ok(Event::Notify(m)) => return Some(m),
                Ok(Event::StderrClosed) if left > Duration::ZERO => {}
                _ => return None,
            }
        }
    }

    /// Panics with `what`, oi's exit status (if it has exited) and the end of its stderr.
    pub fn fail(&self, what: &str) -> ! {
        let status = match self.exit_status() {
            Some(Some(code)) => format!("exited with status {code}"),
            Some(None) => "was killed by a signal".to_string(),
            None => "is still running".to_string(),
        };
        panic!(
            "{what}\noi (pid {}) {status}; its stderr{}:\n{}",
            self.child.id(),
            if self.stderr_len() > STDERR_QUOTE {
                format!(" (last {STDERR_QUOTE} bytes)")
            } else {
                String::new()
            },
            self.stderr_tail()
        );
    }

    /// Whether oi has exited (`Some`), with its exit code if it exited
    /// normally; the process stays waitable, so `child.wait` still works.
    fn exit_status(&self) -> Option<Option<i32>> {
        use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
        let pid = Pid::from_raw(self.child.id() as i32)?;
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        match waitid(WaitId::Pid(pid), options) {
            Ok(Some(s)) => Some(s.exit_status()),
            _ => None,
        }
    }

    /// Bytes oi has written to stderr so far.
    fn stderr_len(&self) -> usize {
        self.stderr.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The last [`STDERR_QUOTE`] bytes oi has written to stderr so far.
    pub fn stderr_tail(&self) -> String {
        let all = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        let from = all.len().saturating_sub(STDERR_QUOTE);
        String::from_utf8_lossy(&all[from..]).into_owned()
    }

    /// Waits (bounded) for the process to exit; `None` if it still runs after `limit`.
    pub fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.stderr_read_to_end();
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            // Stderr's end wakes this at once when oi exits; notifications
            // that arrive meanwhile are kept for `next_notify`.
            let mut guard = self.events.lock().unwrap_or_else(|p| p.into_inner());
            let (events, pending) = &mut *guard;
            match events.recv_timeout(Duration::from_millis(20)) {
                Ok(Event::Notify(m)) => pending.push_back(m),
                Ok(Event::StderrClosed) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Waits until the stderr reader has read to the end, so everything oi
    /// wrote before it exited is in [`Self::stderr_tail`]: on a loaded machine
    /// the exit was seen first and a `--check` report came back empty (20-run
    /// series, `lookups::`). Bounded: a process oi left behind (a daemon's
    /// child) may hold stderr open.
    fn stderr_read_to_end(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self
            .stderr_thread
            .as_ref()
            .is_some_and(|t| !t.is_finished())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("kill");
    }

    /// Sends SIGHUP and waits until the reload is done (RELOADING=1, then READY=1).
    pub fn reload(&self) {
        self.signal(rustix::process::Signal::HUP);
        let a = self.next_notify();
        if !a.contains("RELOADING=1") {
            self.fail(&format!("after SIGHUP, expected RELOADING=1, got {a:?}"));
        }
        let b = self.next_notify();
        if !b.contains("READY=1") {
            self.fail(&format!("after RELOADING=1, expected READY=1, got {b:?}"));
        }
    }

    /// SIGTERM, wait for exit, and return (exit status, everything written to stderr).
    pub fn stop(self) -> (std::process::ExitStatus, String) {
        self.signal(rustix::process::Signal::TERM);
        self.stop_after_signal()
    }

    /// Waits for an exit already asked for; returns (exit status, stderr).
    pub fn stop_after_signal(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("wait");
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
        let err = String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(|p| p.into_inner()))
            .into_owned();
        (status, err)
    }
}

impl Drop for OiProcess {
    fn drop(&mut self) {
        // A test that fails while oi runs shows what oi said.
        if std::thread::panicking() && self.stderr_thread.is_some() {
            eprintln!(
                "--- oi (pid {}) stderr, last {STDERR_QUOTE} bytes at most:\n{}",
                self.child.id(),
                self.stderr_tail()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `command`, whose program a test may just have written (a wrapper
/// script, a copied binary). Another test thread that forks between that
/// file's open and close hands its child the writable descriptor until the
/// child execs, and exec(2) of a file open for writing fails with ETXTBSY
/// ("Text file busy"; seen once in CI, in `dns_refresh`). The window is
/// another thread's fork-to-exec, which nothing here can wait on, so the
/// spawn is retried a bounded number of times, a millisecond apart.
pub fn spawn_written(command: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 200 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            other => return other,
        }
    }
}
