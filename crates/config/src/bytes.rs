//! Configuration bytes that are not UTF-8. rinetd reads its file as bytes
//! and opens the paths in it as the exact bytes written; oi's parsers work
//! on text. So a rinetd.conf that is not UTF-8 is decoded with each invalid
//! byte carried as a private-use character (U+10FF00 plus the byte), which
//! [`path`] turns back into that byte: `logfile /var/log/x\xff.log` opens
//! `x\xff.log`, not `x\u{FFFD}.log` (before, oi wrote to a different file
//! than configured and `--check` passed). Such bytes are accepted only where
//! a path is: the value of `logfile`, `pidlogfile`, `statusfile` and
//! `controlsocket`, a `unix:` address, and comments. Anywhere else (host
//! names, options, YAML, which is text by definition) they are an error
//! naming the line. A file that holds one of those private-use characters
//! itself is refused, so the mapping is never ambiguous.

use std::borrow::Cow;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// First of the 256 private-use characters that stand for raw bytes.
const BASE: u32 = 0x10_FF00;

/// Directives whose value is a path (and may hold any bytes but NUL).
const PATH_WORDS: [&str; 4] = ["logfile", "pidlogfile", "statusfile", "controlsocket"];

/// A line that holds bytes it may not.
#[derive(Debug, PartialEq, Eq)]
pub struct NotText {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
    /// The line, invalid bytes shown as U+FFFD (escaped and cut by the caller).
    pub text: String,
}

/// Decodes a configuration file: borrowed when it is UTF-8; otherwise, for
/// rinetd.conf (`yaml` false), with raw bytes carried as described in the
/// module documentation, or an error for the first line that may not hold them.
pub fn decode(bytes: &[u8], yaml: bool) -> Result<Cow<'_, str>, NotText> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        if let Some(line) = reserved_line(text) {
            return Err(NotText {
                line,
                message: format!(
                    "holds a character in U+{BASE:X}..U+10FFFF, which oi reserves for bytes that are not UTF-8"
                ),
                text: text.lines().nth(line - 1).unwrap_or("").to_string(),
            });
        }
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(bytes.len());
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = escape(raw);
        if line.len() != raw.len() || std::str::from_utf8(raw).is_err() {
            let not_text = |message: &str| NotText {
                line: i + 1,
                message: message.to_string(),
                text: String::from_utf8_lossy(raw).into_owned(),
            };
            if yaml {
                return Err(not_text("not UTF-8 (YAML is text)"));
            }
            if reserved_line(&line).is_some() && std::str::from_utf8(raw).is_ok() {
                return Err(not_text(
                    "holds a character oi reserves for bytes that are not UTF-8",
                ));
            }
            if !may_hold_bytes(&line) {
                return Err(not_text(
                    "not UTF-8 outside a path (only the value of logfile, pidlogfile, \
                     statusfile, controlsocket or a unix: address may hold other bytes)",
                ));
            }
        }
        out.push_str(&line);
    }
    Ok(Cow::Owned(out))
}

/// The first line (1-based) that holds a reserved character.
fn reserved_line(text: &str) -> Option<usize> {
    text.lines()
        .position(|l| l.chars().any(|c| u32::from(c) >= BASE))
        .map(|i| i + 1)
}

/// `raw` with every byte that is not part of valid UTF-8 as its private-use character.
fn escape(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for chunk in raw.utf8_chunks() {
        out.push_str(chunk.valid());
        for &b in chunk.invalid() {
            out.push(char::from_u32(BASE + u32::from(b)).unwrap_or(char::REPLACEMENT_CHARACTER));
        }
    }
    out
}

/// Whether the raw bytes in `line` (already escaped) sit where a path is.
fn may_hold_bytes(line: &str) -> bool {
    let is_raw = |c: char| u32::from(c) >= BASE;
    let mut words = line.split_ascii_whitespace();
    let Some(first) = words.next() else {
        return true;
    };
    if first.starts_with('#') {
        return true;
    }
    if PATH_WORDS.contains(&first) && !first.chars().any(is_raw) {
        return true;
    }
    // A rule: raw bytes only in `unix:` words, or in the comment.
    let code = line.split_once('#').map_or(line, |(before, _)| before);
    code.split_ascii_whitespace()
        .filter(|w| w.chars().any(is_raw))
        .all(|w| w.starts_with("unix:"))
}

/// A path as the exact bytes written: private-use characters from
/// [`decode`] become their bytes again.
pub fn path(text: &str) -> PathBuf {
    if !text.chars().any(|c| u32::from(c) >= BASE) {
        return PathBuf::from(text);
    }
    let mut bytes = Vec::with_capacity(text.len());
    let mut buf = [0u8; 4];
    for c in text.chars() {
        match u32::from(c)
            .checked_sub(BASE)
            .and_then(|b| u8::try_from(b).ok())
        {
            Some(b) => bytes.push(b),
            None => bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
        }
    }
    PathBuf::from(OsString::from_vec(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn paths_keep_their_bytes_and_other_values_refuse_them() {
        let text = decode(b"logfile /var/log/x\xff.log\n# caf\xe9\n", false).expect("a path");
        let line = text.lines().next().expect("line");
        let p = path(line.strip_prefix("logfile ").expect("value"));
        assert_eq!(p.as_os_str().as_bytes(), b"/var/log/x\xff.log");
        assert!(decode(b"0.0.0.0 80 unix:/run/\xfe.sock 0\n", false).is_ok());
        let e = decode(b"logfile /a\n0.0.0.0 80 h\xe9st 80\n", false).expect_err("host");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("not UTF-8 outside a path"), "{e:?}");
        assert!(e.text.contains('\u{FFFD}'), "{e:?}");
        let e = decode(b"rules: []\n# \xff\n", true).expect_err("yaml");
        assert_eq!(
            (e.line, e.message.as_str()),
            (2, "not UTF-8 (YAML is text)")
        );
        let e = decode("logfile /a\u{10FF41}\n".as_bytes(), false).expect_err("reserved");
        assert_eq!(e.line, 1);
        assert_eq!(path("/plain").as_os_str().as_bytes(), b"/plain");
    }
}
