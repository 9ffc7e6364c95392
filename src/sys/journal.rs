//! systemd's journal, spoken natively: when oi's stderr is the journal's
//! stream (`JOURNAL_STREAM`, "DEV:INODE", names the file stderr is), each
//! diagnostic line goes to journald's socket as one datagram of fields
//! instead (systemd's "Native Journal Protocol"): its own PRIORITY (so
//! `journalctl -p err` finds the errors, which a stream gives all one
//! priority), SYSLOG_IDENTIFIER, MESSAGE, CODE_FILE and CODE_LINE, and the
//! `OI_*` fields a call site names (`log::error!(rule:% = r; "...")` gives
//! `OI_RULE=`).
//!
//! Never blocking, never losing a line silently, bounded: the socket is
//! non-blocking and each line is one send(2); a line the socket refuses
//! (journald gone or full: EAGAIN, ECONNREFUSED) or longer than
//! [`MAX_DATAGRAM`] is written to stderr instead, which journald reads too
//! (at the stream's one priority). No memfd for over-size lines: passing
//! one needs SCM_RIGHTS ancillary data, and oi's lines are a few hundred bytes.
//!
//! The socket's path is [`JOURNAL_SOCKET`] and nothing else: the tests put
//! theirs there in a mount namespace of their own.

use log::kv::{Key, Value, VisitSource};
use log::{Level, Record};
use std::io;
use std::os::unix::net::UnixDatagram;

/// Where journald listens for native messages (systemd's fixed path).
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// The longest datagram sent, in bytes: a longer line goes to stderr. Far
/// above any line oi writes, and under the default socket send buffer
/// (net.core.wmem_default, 208 KiB), which caps a unix datagram.
pub(super) const MAX_DATAGRAM: usize = 64 * 1024;

/// A connected, non-blocking socket to journald.
pub(super) struct Journal {
    /// Connected to [`JOURNAL_SOCKET`].
    socket: UnixDatagram,
    /// SYSLOG_IDENTIFIER: `oi`, or `rinetd` in drop-in mode (as syslog's tag).
    identifier: &'static str,
}

impl Journal {
    /// The journal, when `JOURNAL_STREAM` names oi's stderr and journald's
    /// socket takes a connection; `None` otherwise (then stderr, as ever).
    pub(super) fn connect(identifier: &'static str) -> Option<Journal> {
        let stream = std::env::var("JOURNAL_STREAM").ok()?;
        if !names_stderr(&stream) {
            return None;
        }
        let socket = UnixDatagram::unbound().ok()?;
        socket.connect(JOURNAL_SOCKET).ok()?;
        socket.set_nonblocking(true).ok()?;
        Some(Journal { socket, identifier })
    }

    /// Sends one record, shown as `message` (escaped by the caller); an
    /// error (or a line over [`MAX_DATAGRAM`]) means the caller writes it to
    /// stderr.
    pub(super) fn send(&self, record: &Record<'_>, message: &str) -> io::Result<()> {
        let fields = Fields {
            priority: priority(record.level()),
            identifier: self.identifier,
            message,
            file: record.file(),
            line: record.line(),
            source: Some(record.key_values()),
        };
        self.send_fields(&fields)
    }

    /// Sends `message` at error priority (a start-up failure, which the
    /// diagnostics print without a log prefix).
    pub(super) fn send_error(&self, message: &str) -> io::Result<()> {
        let fields = Fields {
            priority: priority(Level::Error),
            identifier: self.identifier,
            message,
            file: None,
            line: None,
            source: None,
        };
        self.send_fields(&fields)
    }

    /// Encodes and sends `fields` as one datagram.
    fn send_fields(&self, fields: &Fields<'_>) -> io::Result<()> {
        let datagram = fields.encode();
        if datagram.len() > MAX_DATAGRAM {
            return Err(io::Error::other("longer than a journal datagram"));
        }
        self.socket.send(&datagram).map(|_| ())
    }
}

/// syslog's severity for a level, as journald's PRIORITY wants it.
fn priority(level: Level) -> u8 {
    match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

/// Whether `JOURNAL_STREAM`'s "DEV:INODE" is the file oi's stderr is
/// (systemd sets it for a service whose stderr is the journal; a child
/// that inherited the variable but not the stream keeps its stderr).
fn names_stderr(stream: &str) -> bool {
    let Some((dev, ino)) = stream.trim().split_once(':') else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(std::io::stderr()) else {
        return false;
    };
    dev.parse() == Ok(stat.st_dev) && ino.parse() == Ok(stat.st_ino)
}

/// One journal entry before encoding.
pub(super) struct Fields<'a> {
    /// PRIORITY: syslog's severity.
    pub(super) priority: u8,
    /// SYSLOG_IDENTIFIER.
    pub(super) identifier: &'a str,
    /// MESSAGE.
    pub(super) message: &'a str,
    /// CODE_FILE: the call site's source file.
    pub(super) file: Option<&'a str>,
    /// CODE_LINE: its line.
    pub(super) line: Option<u32>,
    /// The call site's key-value pairs, each written `OI_KEY=`.
    pub(super) source: Option<&'a dyn log::kv::Source>,
}

impl Fields<'_> {
    /// The datagram: one `NAME=value\n` per field, or, for a value with a
    /// newline, `NAME\n`, its length as 64-bit little-endian, the value and `\n`.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.message.len() + 128);
        field(&mut out, "PRIORITY", &self.priority.to_string());
        field(&mut out, "SYSLOG_IDENTIFIER", self.identifier);
        field(&mut out, "MESSAGE", self.message);
        if let Some(file) = self.file {
            field(&mut out, "CODE_FILE", file);
        }
        if let Some(line) = self.line {
            field(&mut out, "CODE_LINE", &line.to_string());
        }
        if let Some(source) = self.source {
            let _ = source.visit(&mut OiFields(&mut out));
        }
        out
    }
}

/// Writes each key-value pair as `OI_KEY=value`.
struct OiFields<'a>(&'a mut Vec<u8>);

impl<'kvs> VisitSource<'kvs> for OiFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), log::kv::Error> {
        if let Some(name) = field_name(key.as_str()) {
            field(self.0, &name, &value.to_string());
        }
        Ok(())
    }
}

/// `OI_` and the key in upper case, when the key is made of ASCII letters,
/// digits and `_` (journald's field names: A-Z, 0-9, `_`, at most 64
/// characters, not starting with `_`); `None` for any other key.
fn field_name(key: &str) -> Option<String> {
    let ok = !key.is_empty()
        && key.len() <= 61
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then(|| format!("OI_{}", key.to_ascii_uppercase()))
}

/// Appends one field, binary-safe when the value holds a newline.
fn field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    if value.contains('\n') {
        out.push(b'\n');
        let len = u64::try_from(value.len()).unwrap_or(u64::MAX);
        out.extend_from_slice(&len.to_le_bytes());
    } else {
        out.push(b'=');
    }
    out.extend_from_slice(value.as_bytes());
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a datagram back into (name, value) pairs, both encodings.
    fn decode(mut d: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        while !d.is_empty() {
            let nl = d.iter().position(|&b| b == b'\n').expect("a newline");
            let line = &d[..nl];
            if let Some(eq) = line.iter().position(|&b| b == b'=') {
                let name = String::from_utf8(line[..eq].to_vec()).expect("name");
                out.push((name, line[eq + 1..].to_vec()));
                d = &d[nl + 1..];
            } else {
                let name = String::from_utf8(line.to_vec()).expect("name");
                let len = u64::from_le_bytes(d[nl + 1..nl + 9].try_into().expect("8 bytes"));
                let len = usize::try_from(len).expect("length");
                let value = d[nl + 9..nl + 9 + len].to_vec();
                assert_eq!(d[nl + 9 + len], b'\n', "a value ends with a newline");
                out.push((name, value));
                d = &d[nl + 10 + len..];
            }
        }
        out
    }

    #[test]
    fn a_record_becomes_priority_identifier_message_code_and_oi_fields() {
        let kvs: &[(&str, &str)] = &[
            ("rule", "0.0.0.0:80/tcp"),
            ("reason", "x"),
            ("bad-key", "y"),
        ];
        let args = format_args!("two\nlines");
        let record = Record::builder()
            .level(Level::Warn)
            .args(args)
            .file(Some("src/a.rs"))
            .line(Some(7))
            .key_values(&kvs)
            .build();
        let fields = Fields {
            priority: priority(record.level()),
            identifier: "oi",
            message: &record.args().to_string(),
            file: record.file(),
            line: record.line(),
            source: Some(record.key_values()),
        };
        let got = decode(&fields.encode());
        let want: Vec<(String, Vec<u8>)> = [
            ("PRIORITY", "4"),
            ("SYSLOG_IDENTIFIER", "oi"),
            ("MESSAGE", "two\nlines"),
            ("CODE_FILE", "src/a.rs"),
            ("CODE_LINE", "7"),
            ("OI_RULE", "0.0.0.0:80/tcp"),
            ("OI_REASON", "x"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(
            [
                Level::Error,
                Level::Warn,
                Level::Info,
                Level::Debug,
                Level::Trace
            ]
            .map(priority),
            [3, 4, 6, 7, 7]
        );
    }

    #[test]
    fn field_names_are_what_journald_accepts() {
        assert_eq!(field_name("rule").as_deref(), Some("OI_RULE"));
        assert_eq!(field_name("server_name").as_deref(), Some("OI_SERVER_NAME"));
        for bad in ["", "a-b", "a=b", "é", &"x".repeat(62)] {
            assert_eq!(field_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_a_journal_stream_naming_stderr_counts() {
        let stat = rustix::fs::fstat(std::io::stderr()).expect("fstat stderr");
        assert!(names_stderr(&format!("{}:{}", stat.st_dev, stat.st_ino)));
        assert!(!names_stderr(&format!(
            "{}:{}",
            stat.st_dev,
            stat.st_ino ^ 1
        )));
        for bad in ["", "1", "a:b", ":", "1:2:3"] {
            assert!(!names_stderr(bad), "{bad:?}");
        }
    }
}
