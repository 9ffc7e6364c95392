//! Bounded waiting (every loop ends, with a message saying what never
//! happened) and counting what the process holds.

use std::path::Path;
use std::time::{Duration, Instant};

/// How long any wait may take before the test fails: generous, for loaded CI machines.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Polls `cond` until it holds; fails the test after [`PATIENCE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Polls `cond` until it holds or `limit` passes; returns whether it held.
pub fn holds_within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `path` until its text satisfies `done` or [`PATIENCE`] passes; returns
/// the last text read (the caller asserts on it, so a failure shows the file).
pub fn wait_for_file(path: &Path, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if done(&text) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `path` holds at least `n` lines (or [`PATIENCE`] passes) and returns them.
pub fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    wait_for_file(path, |t| t.lines().count() >= n)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Descriptors this process has open (the directory handle used to count
/// them and the port reservation locks of `free_port` excluded).
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                std::fs::read_link(e.path()).map_or(true, |t| !super::ports::is_port_lock(&t))
            })
            .count()
            .saturating_sub(1)
    })
}

/// What each open descriptor of this process points at, for failure messages.
pub fn fd_targets() -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/fd").map_or(Vec::new(), |d| {
        d.flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .collect()
    })
}

/// VmRSS of process `pid`, in KiB.
pub fn vm_rss_kib(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
