//! The status file, replaced whole on every write: written to a temporary
//! file in the same directory, then renamed over the old one, so a reader
//! sees the previous file or the new one, never part of one.

use super::{format, StatusFormat};
use crate::stats::Snapshot;
use std::io::{self, Write};
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

    /// Temporary file beside the target, then rename(2) over it.
    fn replace(&self, bytes: &[u8]) -> io::Result<()> {
        let name = self
            .path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.tmp", std::process::id()));
        let tmp = self.path.with_file_name(tmp_name);
        let written = std::fs::File::create(&tmp).and_then(|mut f| f.write_all(bytes));
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &self.path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(())
    }
}
