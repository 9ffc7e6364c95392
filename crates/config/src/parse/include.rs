//! `include` lines: the files a pattern names, read in order as if their
//! text were written at the line, with the limits on depth, count and total
//! size, and include cycles refused with their chain.

use super::Parser;
use crate::bounded::Shown;
use crate::{Include, MAX_CONFIG_BYTES, MAX_INCLUDED_FILES, MAX_INCLUDE_DEPTH};
use std::sync::Arc;

impl Parser<'_> {
    /// `include PATTERN`: every file it names, in order, as if written here.
    pub(super) fn include(&mut self, line: usize, text: &str, pattern: &str) {
        let Some(source) = self.source.as_deref_mut() else {
            return self.error(
                line,
                "include is not available here (the text has no file to be relative to)".into(),
                text,
            );
        };
        let Some(from) = self.stack.last().cloned() else {
            return;
        };
        let files = match source.expand(&from, pattern) {
            Ok(f) => f,
            Err(e) => {
                let message = format!("cannot expand include pattern '{}': {e}", Shown(pattern));
                return self.error(line, message, text);
            }
        };
        let from_file = self.errors.file();
        if files.is_empty() {
            let message = format!("include pattern '{}' matches no files", Shown(pattern));
            self.warn(line, message, text);
        }
        // Recorded before the files are read, so outer includes come first.
        let record = self.config.includes.len();
        self.config.includes.push(Include {
            from: from_file.clone(),
            line,
            pattern: pattern.to_string(),
            files: Vec::new(),
        });
        for file in files {
            if let Some(at) = self.stack.iter().position(|f| f.key == file.key) {
                // Each name cut on its own: the chain is at most
                // MAX_INCLUDE_DEPTH + 1 names, and every one stays readable.
                let chain: Vec<String> = self.stack[at..]
                    .iter()
                    .chain(std::iter::once(&file))
                    .map(|f| Shown(&f.name).to_string())
                    .collect();
                let message = format!("include cycle (circular include): {}", chain.join(" -> "));
                self.error(line, message, text);
                continue;
            }
            if self.stack.len() >= MAX_INCLUDE_DEPTH {
                let message = format!(
                    "maximum include depth exceeded ({MAX_INCLUDE_DEPTH} files deep, the main file included): '{}' not read",
                    Shown(&file.name)
                );
                self.error(line, message, text);
                break;
            }
            if self.files_read >= MAX_INCLUDED_FILES {
                let message =
                    format!("more than {MAX_INCLUDED_FILES} included files; the rest are not read");
                self.error(line, message, text);
                break;
            }
            self.files_read += 1;
            let read = match self.source.as_deref_mut() {
                Some(source) => source.read(&file),
                None => return,
            };
            let body = match read {
                Ok(b) => b,
                Err(e) => {
                    let message = format!("cannot read included file '{}': {e}", Shown(&file.name));
                    self.error(line, message, text);
                    continue;
                }
            };
            self.total_bytes = self.total_bytes.saturating_add(body.len());
            if self.total_bytes as u64 > MAX_CONFIG_BYTES {
                let message = format!(
                    "included files exceed {} MiB ({MAX_CONFIG_BYTES} bytes) in all, the most oi reads: '{}' not read",
                    MAX_CONFIG_BYTES / (1024 * 1024),
                    Shown(&file.name)
                );
                self.error(line, message, text);
                break;
            }
            let name: Arc<str> = file.name.as_str().into();
            if let Some(r) = self.config.includes.get_mut(record) {
                r.files.push(name.clone());
            }
            self.stack.push(file);
            self.errors.set_file(Some(name));
            self.text(&body);
            self.errors.set_file(from_file.clone());
            self.stack.pop();
        }
    }
}
