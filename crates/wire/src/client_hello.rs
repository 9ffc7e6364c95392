//! Reading the server name (SNI) out of the first bytes a TLS client sends,
//! and matching it against `[sni=...]` patterns. Pure: no I/O, no TLS
//! library, nothing decrypted; `tcp::sni` peeks the bytes and calls
//! [`parse_wanting`] once as many as it asked for have arrived. Fuzzed
//! (`fuzz/fuzz_targets/client_hello.rs`).
//!
//! The shape read (RFC 8446 5.1 and 4.1.2, RFC 6066 3): TLS records
//! (type 22 "handshake", version 3.x, a length of at most 2^14), whose
//! payloads joined are the handshake messages; the first must be a
//! ClientHello (type 1). Its body: version, 32 random bytes, session id,
//! cipher suites, compression methods, then the extensions; extension 0 is
//! `server_name`, a list whose `host_name` (type 0) entry is the name. The
//! ClientHello may be cut across several records, and the records across
//! TCP segments: [`parse`] says [`Hello::NeedMore`] until the whole message
//! is there.

/// What the bytes received so far say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// A ClientHello so far, but not all of it yet.
    NeedMore,
    /// A whole ClientHello naming this server (lowercased, no trailing dot).
    Found(String),
    /// A whole ClientHello without a usable server name (none, an empty
    /// one, or one that is not a host name).
    NoSni,
    /// Not the start of a TLS ClientHello.
    NotTls,
}

/// TLS record content type of handshake messages.
const HANDSHAKE: u8 = 22;
/// Handshake message type of a ClientHello.
const CLIENT_HELLO: u8 = 1;
/// Largest record payload a sender may use (RFC 8446 5.1: 2^14).
const MAX_RECORD: usize = 1 << 14;
/// Extension number of `server_name`.
const SERVER_NAME: u16 = 0;
/// `server_name` entry type of a DNS host name.
const HOST_NAME: u8 = 0;
/// Longest DNS name, in bytes.
const MAX_NAME: usize = 253;

/// Reads what `bytes` (everything the client has sent so far, from its
/// first byte) says about the server it asks for.
pub fn parse(bytes: &[u8]) -> Hello {
    parse_wanting(bytes).0
}

/// [`parse`], and, for [`Hello::NeedMore`], how many bytes (from the first)
/// a whole ClientHello takes at least, from the record and handshake
/// lengths read so far: no [`Hello::Found`] or [`Hello::NoSni`] comes from
/// fewer, so the peek loop looks again only once that many have arrived
/// (always more than `bytes.len()`). A hello in one record is announced
/// whole by its first 5 bytes; one cut into records of `p` bytes closes the
/// gap by at least `p / (p + 5)` per look (1/6 for one-byte records: about
/// 50 looks to 16 KiB). Malformed bytes past the first record header may be
/// seen as [`Hello::NotTls`] only then, which changes no route: both go to
/// the default rule.
pub fn parse_wanting(bytes: &[u8]) -> (Hello, usize) {
    let mut message = Vec::new();
    let mut rest = bytes;
    loop {
        // Where `rest` starts, and the payload bytes the message still needs
        // from there on (at least one until its header says how many).
        let at = bytes.len() - rest.len();
        let missing = |have: usize| -> usize {
            let mut head = [0u8; 4];
            let known = message.len() + have;
            if known < 4 {
                return 4 - known;
            }
            for (i, b) in head.iter_mut().enumerate() {
                *b = if i < message.len() {
                    message[i]
                } else {
                    rest[5 + i - message.len()]
                };
            }
            let body =
                usize::from(head[1]) << 16 | usize::from(head[2]) << 8 | usize::from(head[3]);
            (4 + body).saturating_sub(known)
        };
        // Payload beyond the current record costs a 5-byte header per record.
        let framed = |payload: usize| payload + 5 * payload.div_ceil(MAX_RECORD);
        // The record header: type, version, length.
        if rest.is_empty() {
            return (Hello::NeedMore, at + framed(missing(0).max(1)));
        }
        if rest[0] != HANDSHAKE {
            return (Hello::NotTls, 0);
        }
        if rest.len() >= 2 && rest[1] != 3 {
            return (Hello::NotTls, 0);
        }
        let Some(&[_, _, _, hi, lo]) = rest.get(..5) else {
            return (Hello::NeedMore, at + framed(missing(0).max(1)));
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        if len == 0 || len > MAX_RECORD {
            return (Hello::NotTls, 0);
        }
        let Some(payload) = rest.get(5..5 + len) else {
            // A partial record still tells a wrong handshake type apart.
            let have = &rest[5..];
            if message.is_empty() && have.first().is_some_and(|&t| t != CLIENT_HELLO) {
                return (Hello::NotTls, 0);
            }
            // The record first, then what the message needs past it.
            let end = at + 5 + len;
            let past = missing(have.len()).saturating_sub(len - have.len());
            return (Hello::NeedMore, end + framed(past));
        };
        message.extend_from_slice(payload);
        rest = &rest[5 + len..];
        // The handshake header: type and a 24-bit length.
        if message[0] != CLIENT_HELLO {
            return (Hello::NotTls, 0);
        }
        let Some(&[_, a, b, c]) = message.get(..4) else {
            continue;
        };
        let body_len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
        if let Some(body) = message.get(4..4 + body_len) {
            return (client_hello(body), 0);
        }
    }
}

/// Reads a whole ClientHello body.
fn client_hello(body: &[u8]) -> Hello {
    let mut r = Reader(body);
    let fields = (|| {
        r.take(2 + 32)?; // legacy_version, random
        r.vector(1)?; // legacy_session_id
        r.vector(2)?; // cipher_suites
        r.vector(1)?; // legacy_compression_methods
        Some(())
    })();
    if fields.is_none() {
        return Hello::NotTls;
    }
    if r.0.is_empty() {
        // No extensions at all (allowed before TLS 1.3).
        return Hello::NoSni;
    }
    let Some(extensions) = r.vector(2) else {
        return Hello::NotTls;
    };
    let mut ext = Reader(extensions);
    while !ext.0.is_empty() {
        let (Some(kind), Some(data)) = (ext.u16(), ext.vector(2)) else {
            return Hello::NotTls;
        };
        if kind == SERVER_NAME {
            return server_name(data);
        }
    }
    Hello::NoSni
}

/// Reads the `server_name` extension's data: its `host_name` entry.
fn server_name(data: &[u8]) -> Hello {
    let mut r = Reader(data);
    let Some(list) = r.vector(2) else {
        return Hello::NotTls;
    };
    let mut list = Reader(list);
    while !list.0.is_empty() {
        let (Some(kind), Some(name)) = (list.u8(), list.vector(2)) else {
            return Hello::NotTls;
        };
        if kind == HOST_NAME {
            return match host_name(name) {
                Some(name) => Hello::Found(name),
                None => Hello::NoSni,
            };
        }
    }
    Hello::NoSni
}

/// `name` lowercased, when it is a DNS name: letters, digits, `-`, `_` and
/// dots between non-empty labels; one trailing dot is dropped.
pub fn host_name(name: &[u8]) -> Option<String> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.split(|&b| b == b'.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then(|| String::from_utf8_lossy(name).to_ascii_lowercase())
}

/// A cursor over big-endian TLS fields.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    /// One byte.
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// A 16-bit number.
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a `width`-byte (1 or 2) length in front.
    fn vector(&mut self, width: usize) -> Option<&'a [u8]> {
        let len = match width {
            1 => usize::from(self.u8()?),
            _ => usize::from(self.u16()?),
        };
        self.take(len)
    }
}

/// One `[sni=...]` pattern: a host name, or `*.` and a suffix.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NamePattern {
    /// Exactly this name (lowercase).
    Exact(String),
    /// Any name with one or more labels in front of this suffix (lowercase,
    /// without the `*.`): `*.example.com` matches `a.example.com` and
    /// `a.b.example.com`, not `example.com`.
    Suffix(String),
}

impl NamePattern {
    /// Reads a pattern as written (`www.example.com`, `*.example.com`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (wild, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if text.ends_with('.') {
            return Err("a server name pattern ends without a dot".to_string());
        }
        let name = host_name(name.as_bytes()).ok_or_else(|| {
            "expected a host name (letters, digits, '-', '_' and dots) or '*.' and one".to_string()
        })?;
        Ok(if wild {
            NamePattern::Suffix(name)
        } else {
            NamePattern::Exact(name)
        })
    }

    /// Whether `name` (lowercase, as [`parse`] returns it) matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Exact(exact) => name == exact,
            NamePattern::Suffix(suffix) => name
                .strip_suffix(suffix.as_str())
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|head| !head.is_empty()),
        }
    }

    /// How specific it is: exact names first, then longer suffixes.
    pub fn rank(&self) -> (bool, usize) {
        match self {
            NamePattern::Exact(n) => (true, n.len()),
            NamePattern::Suffix(s) => (false, s.len()),
        }
    }
}

impl std::fmt::Display for NamePattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamePattern::Exact(n) => f.write_str(n),
            NamePattern::Suffix(s) => write!(f, "*.{s}"),
        }
    }
}

/// The index of the pattern `name` matches best: an exact name before any
/// suffix, a longer suffix before a shorter one, the first written on a tie.
pub fn best_match<'a>(
    patterns: impl IntoIterator<Item = &'a NamePattern>,
    name: &str,
) -> Option<usize> {
    let mut best: Option<(usize, (bool, usize))> = None;
    for (i, p) in patterns.into_iter().enumerate() {
        if p.matches(name) && best.is_none_or(|(_, rank)| p.rank() > rank) {
            best = Some((i, p.rank()));
        }
    }
    best.map(|(i, _)| i)
}

/// A minimal ClientHello in one record, naming `name` when given: what the
/// tests, the fuzz seeds and `benches/sni.sh` send. Real clients send more
/// extensions; the parser skips them the same way it skips `supported_versions`
/// here.
pub fn example(name: Option<&str>) -> Vec<u8> {
    let mut ext = Vec::new();
    // supported_versions: TLS 1.3 and 1.2, an extension to skip.
    ext.extend_from_slice(&[0x00, 0x2b, 0x00, 0x05, 0x04, 0x03, 0x04, 0x03, 0x03]);
    if let Some(name) = name {
        let n = name.as_bytes();
        let n_len = n.len() as u16;
        ext.extend_from_slice(&SERVER_NAME.to_be_bytes());
        ext.extend_from_slice(&(n_len + 5).to_be_bytes());
        ext.extend_from_slice(&(n_len + 3).to_be_bytes());
        ext.push(HOST_NAME);
        ext.extend_from_slice(&n_len.to_be_bytes());
        ext.extend_from_slice(n);
    }
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[0x5a; 32]); // random
    body.push(0); // no session id
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    body.extend_from_slice(&[0x01, 0x00]); // null compression
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut message = vec![CLIENT_HELLO, 0];
    message.extend_from_slice(&(body.len() as u16).to_be_bytes());
    message.extend_from_slice(&body);
    let mut record = vec![HANDSHAKE, 0x03, 0x01];
    record.extend_from_slice(&(message.len() as u16).to_be_bytes());
    record.extend_from_slice(&message);
    record
}

#[cfg(test)]
mod tests;
