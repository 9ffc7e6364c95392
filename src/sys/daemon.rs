//! rinetd drop-in mode: fork to the background and the pid file (syslog is
//! in `diagnostics`).
//!
//! The fork happens before any thread exists (the executor, the log writer
//! and async-io's reactor thread all start later), so the child is a clean
//! copy. The parent waits until the child has written its pid file and then
//! exits 0, which is what a `Type=forking` unit expects: when the parent is
//! gone, the pid file is there and every listener is bound.

use fork::Fork;
use std::io::{self, Read, Write};
use std::path::Path;

/// Where rinetd writes its pid when the configuration names no `pidlogfile`.
pub(crate) const DEFAULT_PIDFILE: &str = "/var/run/rinetd.pid";

/// Writes our pid, with a newline, replacing the file: a temporary file
/// renamed over it ([`crate::sys::safe_fs::replace`]), so a symlink or FIFO
/// planted at the path is replaced, never followed or waited on.
pub(crate) fn write_pidfile(path: &Path) -> io::Result<()> {
    crate::sys::safe_fs::replace(path, format!("{}\n", std::process::id()).as_bytes())
}

/// Forks into the background. Returns only in the daemon; the original
/// process exits 0 once the daemon reports that it is set up (pid file written),
/// or 1 if the daemon failed first. `setup` runs in the daemon before that report.
pub(crate) fn daemonize(setup: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    let (mut ready_rx, mut ready_tx) = pipe()?;
    match fork::fork()? {
        Fork::Parent(_) => {
            drop(ready_tx);
            let mut byte = [0u8; 1];
            let ok = matches!(ready_rx.read(&mut byte), Ok(1));
            std::process::exit(if ok { 0 } else { 1 });
        }
        Fork::Child => {
            drop(ready_rx);
            fork::setsid()?;
            fork::chdir()?;
            setup()?;
            fork::redirect_stdio()?;
            ready_tx.write_all(b"1")?;
            Ok(())
        }
    }
}

/// A CLOEXEC pipe as two files.
fn pipe() -> io::Result<(std::fs::File, std::fs::File)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((std::fs::File::from(r), std::fs::File::from(w)))
}
