//! The status file, replaced whole on every write: written to a temporary
//! file in the same directory, then renamed over the old one, so a reader
//! sees the previous file or the new one, never part of one. The temporary
//! file's name is random and it is created exclusively, without following a
//! symlink (see [`crate::sys::safe_fs`]).

use super::{format, StatusFormat};
use crate::stats::Snapshot;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Where and how the status file is written.
#[derive(Clone)]
pub(super) struct StatusFile {
    /// The file (`statusfile`).
    path: PathBuf,
    /// JSON or text (`statusformat`).
    format: StatusFormat,
    /// Set while writing fails, so a failure is logged once, not every interval.
    failing: Arc<AtomicBool>,
}

impl StatusFile {
    pub(super) fn new(path: PathBuf, format: StatusFormat) -> Self {
        StatusFile {
            path,
            format,
            failing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Writes `s`; a failure is logged (once per run of failures) and not fatal.
    pub(super) fn write(&self, s: &Snapshot) {
        let text = match self.format {
            StatusFormat::Json => {
                let mut t = format::status_json(s).to_string();
                t.push('\n');
                t
            }
            StatusFormat::Text => format::status_text(s),
        };
        match self.replace(text.as_bytes()) {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    log::info!("writing the status file {} again", self.path.display());
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    log::error!("cannot write the status file {}: {e}", self.path.display());
                }
            }
        }
    }

    /// A temporary file beside the target, then rename(2) over it; see
    /// [`crate::sys::safe_fs::replace`] for why nothing planted there is followed.
    fn replace(&self, bytes: &[u8]) -> io::Result<()> {
        crate::sys::safe_fs::replace(&self.path, bytes)
    }
}
