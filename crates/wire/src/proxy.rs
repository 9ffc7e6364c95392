//! The PROXY protocol, versions 1 (text) and 2 (binary), as haproxy's
//! `proxy-protocol.txt` defines them: encoding the header oi sends to a
//! backend, and decoding the header a trusted upstream sends to oi.
//!
//! Pure: no I/O. The decoder works on whatever prefix of the stream has
//! arrived and says one of three things ([`Parsed`]): it needs more bytes,
//! the header is complete (with its exact length, so the caller consumes
//! that many bytes and not one more), or the bytes cannot be a header (with
//! the reason). It never looks past [`HEADER_MAX`] bytes, so a reader never
//! has to buffer more than that.
//!
//! Bounds: a version 1 header is at most 107 bytes including its CRLF (the
//! specification's own limit). A version 2 header is the 16 fixed bytes plus
//! at most 216 bytes of addresses (the largest block, AF_UNIX) plus at most
//! [`V2_TLV_MAX`] bytes of TLVs; a longer length field is refused. TLVs are
//! skipped, not interpreted (oi uses none of them).

use std::fmt;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Which version of the protocol to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProxyVersion {
    /// Human-readable, TCP only: `PROXY TCP4 src dst sport dport\r\n`.
    V1,
    /// Binary, with a 12-byte signature; also describes UDP.
    V2,
}

/// The transport of the connection a header describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// TCP (`SOCK_STREAM`).
    Stream,
    /// UDP (`SOCK_DGRAM`); version 2 only.
    Datagram,
}

/// What a complete header says about the connection it precedes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    /// The original connection: the client (`source`) and the address it
    /// connected to (`destination`).
    Proxied {
        /// The original client.
        source: SocketAddr,
        /// The address the original client connected to.
        destination: SocketAddr,
        /// Whether the original connection was TCP or UDP.
        transport: Transport,
    },
    /// No address information: version 2 `LOCAL` (a health check from the
    /// proxy itself), version 1 `UNKNOWN`, or version 2 `PROXY` over
    /// `AF_UNSPEC` or `AF_UNIX`. The specification says to use the
    /// connection's real endpoints then.
    Local,
}

/// The outcome of looking at the first bytes of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Every byte so far belongs to a header that is not complete yet: the
    /// caller may consume them all and wait for more.
    Incomplete,
    /// A whole header.
    Complete {
        /// What it says.
        header: Header,
        /// Which version it was written in.
        version: ProxyVersion,
        /// Its length in bytes; the connection's own data starts after it.
        length: usize,
    },
    /// The bytes are not a valid header.
    Invalid(Invalid),
}

/// Why bytes are not a valid PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The stream starts with neither `PROXY ` nor the version 2 signature.
    Signature,
    /// No CRLF within the first 107 bytes of a version 1 header.
    V1TooLong,
    /// A version 1 header that does not follow the grammar; says where.
    V1Syntax(&'static str),
    /// A version 2 header whose version nibble is not 2.
    V2Version(u8),
    /// A version 2 header whose command nibble is neither LOCAL nor PROXY.
    V2Command(u8),
    /// A version 2 address family and protocol byte the specification does not define.
    V2Family(u8),
    /// A version 2 length past oi's bound ([`V2_ADDRESS_MAX`] + [`V2_TLV_MAX`]).
    V2TooLong(usize),
    /// A version 2 length too short for the addresses its family byte announces.
    V2Short {
        /// The family and protocol byte.
        family: u8,
        /// The length field.
        length: usize,
    },
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::Signature => write!(f, "not a PROXY protocol header (bad signature)"),
            Invalid::V1TooLong => write!(f, "PROXY v1 header longer than {V1_MAX} bytes"),
            Invalid::V1Syntax(what) => write!(f, "malformed PROXY v1 header: {what}"),
            Invalid::V2Version(b) => write!(f, "PROXY v2 header with version {}", b >> 4),
            Invalid::V2Command(b) => write!(f, "PROXY v2 header with command {}", b & 0x0f),
            Invalid::V2Family(b) => write!(
                f,
                "PROXY v2 header with unknown family/protocol byte {b:#04x}"
            ),
            Invalid::V2TooLong(n) => write!(
                f,
                "PROXY v2 header announces {n} bytes after the fixed part, more than {}",
                V2_ADDRESS_MAX + V2_TLV_MAX
            ),
            Invalid::V2Short { family, length } => write!(
                f,
                "PROXY v2 header announces {length} bytes, too few for family {family:#04x}"
            ),
        }
    }
}

/// The longest version 1 header, CRLF included (the specification's limit).
pub const V1_MAX: usize = 107;

/// The version 2 signature: `\r\n\r\n\0\r\nQUIT\n`.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Signature, version/command, family/protocol and the 16-bit length.
pub const V2_FIXED: usize = 16;

/// The largest version 2 address block (two 108-byte AF_UNIX paths).
pub const V2_ADDRESS_MAX: usize = 216;

/// TLV bytes oi accepts after the addresses before calling a header
/// oversized. Real proxies send a few dozen (ALPN, authority, CRC32C, a
/// unique ID of at most 128); 1 KiB leaves room and bounds what a reader holds.
pub const V2_TLV_MAX: usize = 1024;

/// The most bytes the decoder ever needs to see: a reader's buffer size.
pub const HEADER_MAX: usize = V2_FIXED + V2_ADDRESS_MAX + V2_TLV_MAX;

/// Address block length of `AF_INET`: two addresses, two ports.
const V2_INET_LEN: usize = 12;
/// Address block length of `AF_INET6`.
const V2_INET6_LEN: usize = 36;

/// Version 2 command `LOCAL` (with the version nibble).
const V2_LOCAL: u8 = 0x20;
/// Version 2 command `PROXY` (with the version nibble).
const V2_PROXY: u8 = 0x21;

/// The v1 prefix every header starts with.
const V1_PREFIX: &[u8] = b"PROXY ";

/// Looks at the first bytes of a stream (everything received so far; bytes
/// past the header are allowed and ignored) and says whether they start with
/// a PROXY header of either version.
pub fn parse(buf: &[u8]) -> Parsed {
    let Some(&first) = buf.first() else {
        return Parsed::Incomplete;
    };
    if first == V1_PREFIX[0] {
        parse_v1(buf)
    } else if first == V2_SIGNATURE[0] {
        parse_v2(buf)
    } else {
        Parsed::Invalid(Invalid::Signature)
    }
}

/// True when the shorter of `buf` and `want` is a prefix of the other.
fn agrees(buf: &[u8], want: &[u8]) -> bool {
    let n = buf.len().min(want.len());
    buf[..n] == want[..n]
}

/// Version 1: `PROXY` SP (`TCP4` | `TCP6`) SP src SP dst SP sport SP dport
/// CRLF, or `PROXY UNKNOWN` followed by anything up to the CRLF.
fn parse_v1(buf: &[u8]) -> Parsed {
    if !agrees(buf, V1_PREFIX) {
        return Parsed::Invalid(Invalid::Signature);
    }
    let seen = buf.len().min(V1_MAX);
    for i in 0..seen {
        match buf[i] {
            b'\r' => {
                let length = i + 2;
                if length > V1_MAX {
                    return Parsed::Invalid(Invalid::V1TooLong);
                }
                return match buf.get(i + 1) {
                    None => Parsed::Incomplete,
                    Some(b'\n') => match v1_line(&buf[..i]) {
                        Ok(header) => Parsed::Complete {
                            header,
                            version: ProxyVersion::V1,
                            length,
                        },
                        Err(what) => Parsed::Invalid(Invalid::V1Syntax(what)),
                    },
                    Some(_) => Parsed::Invalid(Invalid::V1Syntax("CR not followed by LF")),
                };
            }
            // Printable ASCII only: a stray LF or binary byte is refused at
            // once instead of after 107 bytes or the timeout.
            0x20..=0x7e => {}
            _ => return Parsed::Invalid(Invalid::V1Syntax("a byte that is not printable ASCII")),
        }
    }
    if seen == V1_MAX {
        Parsed::Invalid(Invalid::V1TooLong)
    } else {
        Parsed::Incomplete
    }
}

/// Parses a version 1 line without its CRLF (already known to be printable ASCII).
fn v1_line(line: &[u8]) -> Result<Header, &'static str> {
    // Printable ASCII is valid UTF-8; checked anyway rather than assumed.
    let text = std::str::from_utf8(line).map_err(|_| "not ASCII")?;
    let rest = text.strip_prefix("PROXY ").ok_or("no PROXY prefix")?;
    let mut fields = rest.split(' ');
    let family = fields.next().unwrap_or_default();
    // "the receiver must ignore anything presented before the CRLF is found"
    if family == "UNKNOWN" {
        return Ok(Header::Local);
    }
    let v6 = match family {
        "TCP4" => false,
        "TCP6" => true,
        _ => return Err("protocol is not TCP4, TCP6 or UNKNOWN"),
    };
    let (Some(src), Some(dst), Some(sport), Some(dport), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err("not exactly four fields after the protocol");
    };
    let ip = |s: &str| -> Result<IpAddr, &'static str> {
        if v6 {
            s.parse::<Ipv6Addr>()
                .map(IpAddr::V6)
                .map_err(|_| "bad IPv6 address")
        } else {
            s.parse::<Ipv4Addr>()
                .map(IpAddr::V4)
                .map_err(|_| "bad IPv4 address")
        }
    };
    Ok(Header::Proxied {
        source: SocketAddr::new(ip(src)?, v1_port(sport)?),
        destination: SocketAddr::new(ip(dst)?, v1_port(dport)?),
        transport: Transport::Stream,
    })
}

/// A decimal port: 1 to 5 digits, no sign, at most 65535.
fn v1_port(s: &str) -> Result<u16, &'static str> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("bad port");
    }
    s.parse().map_err(|_| "port out of range")
}

/// Version 2: signature, version/command, family/protocol, length, addresses, TLVs.
fn parse_v2(buf: &[u8]) -> Parsed {
    if !agrees(buf, &V2_SIGNATURE) {
        return Parsed::Invalid(Invalid::Signature);
    }
    // Refuse a bad version or command byte as soon as it arrives.
    if let Some(&ver_cmd) = buf.get(12) {
        if ver_cmd >> 4 != 2 {
            return Parsed::Invalid(Invalid::V2Version(ver_cmd));
        }
        if ver_cmd != V2_LOCAL && ver_cmd != V2_PROXY {
            return Parsed::Invalid(Invalid::V2Command(ver_cmd));
        }
    }
    let [Some(&ver_cmd), Some(&family), Some(&hi), Some(&lo)] =
        [buf.get(12), buf.get(13), buf.get(14), buf.get(15)]
    else {
        return Parsed::Incomplete;
    };
    let length = usize::from(u16::from_be_bytes([hi, lo]));
    if length > V2_ADDRESS_MAX + V2_TLV_MAX {
        return Parsed::Invalid(Invalid::V2TooLong(length));
    }
    // LOCAL: the receiver ignores the address block, whatever it says.
    let needed = if ver_cmd == V2_LOCAL {
        0
    } else {
        match family {
            0x00 => 0,
            0x11 | 0x12 => V2_INET_LEN,
            0x21 | 0x22 => V2_INET6_LEN,
            0x31 | 0x32 => V2_ADDRESS_MAX,
            _ => return Parsed::Invalid(Invalid::V2Family(family)),
        }
    };
    if length < needed {
        return Parsed::Invalid(Invalid::V2Short { family, length });
    }
    let total = V2_FIXED + length;
    let Some(body) = buf.get(V2_FIXED..total) else {
        return Parsed::Incomplete;
    };
    let complete = |header| Parsed::Complete {
        header,
        version: ProxyVersion::V2,
        length: total,
    };
    if ver_cmd == V2_LOCAL {
        return complete(Header::Local);
    }
    let transport = if family & 0x0f == 0x02 {
        Transport::Datagram
    } else {
        Transport::Stream
    };
    let header = match family >> 4 {
        1 => {
            let ip = |at: usize| Ipv4Addr::new(body[at], body[at + 1], body[at + 2], body[at + 3]);
            Header::Proxied {
                source: SocketAddr::new(ip(0).into(), be16(body, 8)),
                destination: SocketAddr::new(ip(4).into(), be16(body, 10)),
                transport,
            }
        }
        2 => {
            let ip = |at: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&body[at..at + 16]);
                Ipv6Addr::from(a)
            };
            Header::Proxied {
                source: SocketAddr::new(ip(0).into(), be16(body, 32)),
                destination: SocketAddr::new(ip(16).into(), be16(body, 34)),
                transport,
            }
        }
        // AF_UNSPEC, AF_UNIX: nothing an IP ACL or log line can use.
        _ => Header::Local,
    };
    complete(header)
}

/// The big-endian u16 at `at` (the caller checked the length).
fn be16(body: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([body[at], body[at + 1]])
}

/// An encoded header, on the stack: the longest oi writes is a version 1
/// TCP6 line (at most 104 bytes); version 2 without TLVs is at most 52.
#[derive(Clone, Copy)]
pub struct Encoded {
    /// The header's bytes; only the first `len` are used.
    bytes: [u8; V1_MAX],
    /// How many bytes of `bytes` the header takes.
    len: usize,
}

impl Encoded {
    /// The header's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Appends `data` (the caller keeps within [`V1_MAX`] bytes).
    fn push(&mut self, data: &[u8]) {
        let end = self.len + data.len();
        self.bytes[self.len..end].copy_from_slice(data);
        self.len = end;
    }

    /// Nothing yet.
    fn empty() -> Self {
        Encoded {
            bytes: [0; V1_MAX],
            len: 0,
        }
    }
}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Encoded").field(&self.as_bytes()).finish()
    }
}

/// Both addresses in one family, as both versions need: IPv4-mapped IPv6
/// addresses become IPv4; if one is still IPv6 (a dual-stack listener and a
/// real IPv6 client), the IPv4 one is written IPv4-mapped.
fn same_family(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    let unmap = |s: SocketAddr| match s.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), s.port()),
            None => SocketAddr::new(v6.into(), s.port()),
        },
        IpAddr::V4(_) => s,
    };
    let (a, b) = (unmap(a), unmap(b));
    if a.is_ipv4() == b.is_ipv4() {
        return (a, b);
    }
    let map = |s: SocketAddr| match s.ip() {
        IpAddr::V4(v4) => SocketAddr::new(v4.to_ipv6_mapped().into(), s.port()),
        IpAddr::V6(_) => s,
    };
    (map(a), map(b))
}

/// The header telling a backend that `source` connected to `destination`
/// over `transport`. Version 1 cannot describe UDP: asked to, it writes
/// `PROXY UNKNOWN\r\n` (the UDP paths always ask for version 2).
pub fn encode(
    version: ProxyVersion,
    transport: Transport,
    source: SocketAddr,
    destination: SocketAddr,
) -> Encoded {
    let (src, dst) = same_family(source, destination);
    match version {
        ProxyVersion::V1 if transport == Transport::Datagram => encode_v1_unknown(),
        ProxyVersion::V1 => {
            let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
            let mut out = Encoded::empty();
            let mut cursor = std::io::Cursor::new(&mut out.bytes[..]);
            let written = write!(
                cursor,
                "PROXY {family} {} {} {} {}\r\n",
                src.ip(),
                dst.ip(),
                src.port(),
                dst.port()
            );
            // Cannot fail: the longest line (two 39-character IPv6
            // addresses, two 5-digit ports) is 104 bytes. Were it to, a
            // truncated line must not go out; UNKNOWN is still a valid header.
            match (written, usize::try_from(cursor.position())) {
                (Ok(()), Ok(len)) => {
                    out.len = len;
                    out
                }
                _ => encode_v1_unknown(),
            }
        }
        ProxyVersion::V2 => {
            let proto = match transport {
                Transport::Stream => 0x01,
                Transport::Datagram => 0x02,
            };
            let mut out = Encoded::empty();
            out.push(&V2_SIGNATURE);
            match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    out.push(&[V2_PROXY, 0x10 | proto]);
                    out.push(&(V2_INET_LEN as u16).to_be_bytes());
                    out.push(&s.octets());
                    out.push(&d.octets());
                }
                (s, d) => {
                    let v6 = |ip: IpAddr| match ip {
                        IpAddr::V6(v6) => v6,
                        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    };
                    out.push(&[V2_PROXY, 0x20 | proto]);
                    out.push(&(V2_INET6_LEN as u16).to_be_bytes());
                    out.push(&v6(s).octets());
                    out.push(&v6(d).octets());
                }
            }
            out.push(&src.port().to_be_bytes());
            out.push(&dst.port().to_be_bytes());
            out
        }
    }
}

/// `PROXY UNKNOWN\r\n`: a version 1 header without addresses.
pub fn encode_v1_unknown() -> Encoded {
    let mut out = Encoded::empty();
    out.push(b"PROXY UNKNOWN\r\n");
    out
}

/// A version 2 `LOCAL` header (no addresses: the proxy speaking for itself).
pub fn encode_v2_local() -> Encoded {
    let mut out = Encoded::empty();
    out.push(&V2_SIGNATURE);
    out.push(&[V2_LOCAL, 0x00, 0x00, 0x00]);
    out
}

#[cfg(test)]
mod tests;
