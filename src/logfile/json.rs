//! `logformat json`: one JSON object per line per event, fields in a fixed
//! order, written by hand (serde_json's `Value` would sort the keys and
//! allocate a map per line on the writer thread).
//!
//! Escaping: `"` and `\` are escaped, every control character (U+0000 to
//! U+001F, and U+007F) is written `\u00XX`, so a line never holds a raw
//! newline, tab or escape sequence a terminal would act on. Every text field
//! is a Rust `str` and so valid UTF-8 already: a server name that was not is
//! replaced (U+FFFD) where it is read from the ClientHello.
//!
//! Bounded: each text field is cut to [`MAX_FIELD`] bytes (at a character
//! boundary, before escaping, which at most sixfolds it), so no line is
//! longer than [`MAX_JSON_LINE`] bytes whatever the configuration or a
//! client sends (`the_longest_json_line_is_within_its_bound`).

use super::{Event, LogEvent};
use chrono::{DateTime, SecondsFormat, Utc};
use std::fmt::Write as _;

/// The most bytes of one text field a line carries (host names in the
/// configuration and the TLS server name are at most 255 bytes as DNS has
/// them; longer text is cut, not refused).
pub(super) const MAX_FIELD: usize = 255;

/// The longest line [`format_json`] writes, newline included: nine text
/// fields (time, rule, bind, connect, client, backend, server name, client
/// certificate subject, event)
/// of at most [`MAX_FIELD`] bytes each, sixfold when every byte is escaped,
/// plus the keys, the punctuation and four 20-digit numbers (under 512 bytes).
pub const MAX_JSON_LINE: usize = 9 * 6 * MAX_FIELD + 512;

/// What a log line knows about the connection beyond rinetd's fields, once
/// it has an entry in the live list (`oi connections`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    /// The id `oi connections` shows for it (unique in this process).
    pub id: u64,
    /// The rule's name as `oi connections` shows it (`host:port/proto`).
    pub rule: std::sync::Arc<str>,
    /// The backend address that answered, once one did.
    pub backend: Option<std::net::SocketAddr>,
    /// How long it has been open, in milliseconds.
    pub duration_ms: u64,
}

/// The event's word without rinetd's trailing ` -` (`accept-failed -`).
fn event_word(event: Event) -> &'static str {
    let s = event.as_str();
    s.strip_suffix(" -").unwrap_or(s)
}

/// Appends `"text"` to `out`, cut to [`MAX_FIELD`] bytes and escaped.
fn string(out: &mut String, text: &str) {
    let mut end = text.len().min(MAX_FIELD);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.push('"');
    for c in text[..end].chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c < ' ' || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `"key":` and the text, or `null`.
fn field(out: &mut String, key: &str, text: Option<&str>) {
    let _ = write!(out, ",\"{key}\":");
    match text {
        Some(t) => string(out, t),
        None => out.push_str("null"),
    }
}

/// Appends `"key":` and the number, or `null`.
fn number(out: &mut String, key: &str, n: Option<u64>) {
    let _ = match n {
        Some(n) => write!(out, ",\"{key}\":{n}"),
        None => write!(out, ",\"{key}\":null"),
    };
}

/// `host:port`, the host bracketed when it is an IPv6 literal.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Formats one event as a JSON object on one line (with its newline).
pub(super) fn format_json(ev: &LogEvent, out: &mut String) {
    let time: DateTime<Utc> = ev.time.into();
    out.push_str("{\"time\":");
    string(out, &time.to_rfc3339_opts(SecondsFormat::Millis, true));
    let flow = ev.flow.as_ref();
    number(out, "id", flow.map(|f| f.id));
    field(out, "rule", flow.map(|f| &*f.rule));
    let r = &ev.rule;
    field(out, "bind", Some(&host_port(&r.bind_host, r.bind_port)));
    field(
        out,
        "connect",
        Some(&host_port(&r.connect_host, r.connect_port)),
    );
    field(out, "client", Some(&ev.client.to_string()));
    let backend = flow.and_then(|f| f.backend).map(|b| b.to_string());
    field(out, "backend", backend.as_deref());
    field(out, "server_name", ev.server_name.as_deref());
    field(out, "tls_subject", ev.tls_subject.as_deref());
    number(out, "bytes_from_client", Some(ev.from_client));
    number(out, "bytes_to_client", Some(ev.to_client));
    number(out, "duration_ms", flow.map(|f| f.duration_ms));
    field(out, "event", Some(event_word(ev.event)));
    out.push_str("}\n");
}
