//! The PROXY protocol at the edges of a TCP connection: the header a trusted
//! upstream sends before its client's bytes (`accept-proxy`), read in the
//! accept path before the ACL check, and the header oi writes to a backend
//! before the first client byte (`proxy=v1|v2`), written by `tcp::open`
//! between connect and the pump. The protocol itself is [`oi_wire::proxy`].
//!
//! `accept-proxy` on a `/udp` listener (an oi extension) is the datagram
//! form: every datagram from a trusted source starts with a version 2 header,
//! which [`accept_datagram_header`] checks and strips.

use crate::logfile::Event;
use crate::route::{client_ip, Route};
use futures_lite::{AsyncWriteExt, FutureExt};
use oi_runtime::reactor::{Async, Timer};
use oi_wire::proxy::{self, Header, Parsed, ProxyVersion, Transport, HEADER_MAX};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long a client of an `accept-proxy` rule has to send its whole header.
/// A proxy writes the header with its first packet; 5 s covers a slow link
/// and bounds how long a silent or trickling client holds a slot.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Who a connection really is, after any PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    /// The client: the accepted peer, or the source a header carried.
    pub(crate) client: SocketAddr,
    /// The address the client connected to, when a header carried it (else
    /// the accepted socket's local address, looked up only if needed).
    pub(crate) local: Option<SocketAddr>,
}

/// Why a header was not accepted: the event to log and a reason for the debug line.
pub(crate) struct Refused {
    /// `proxy-untrusted` or `proxy-header-failed`.
    pub(crate) event: Event,
    /// What was wrong, for the debug log.
    pub(crate) reason: String,
}

/// Reads the PROXY header a client of an `accept-proxy` rule must send,
/// within [`HEADER_TIMEOUT`], from a source the route trusts. Consumes the
/// header's bytes exactly, so whatever the client sent after it is still in
/// the socket for the pump (splice or copy) to forward.
pub(crate) async fn accept_header(
    client: &Async<TcpStream>,
    peer: SocketAddr,
    route: &Route,
) -> Result<Origin, Refused> {
    let source = client_ip(peer);
    if !route.trusts_proxy(source) {
        return Err(Refused {
            event: Event::ProxyUntrusted,
            reason: format!("{source} matches no trust-proxy pattern"),
        });
    }
    let timeout = async {
        Timer::after(HEADER_TIMEOUT).await;
        Err(format!(
            "no complete PROXY header within {} s",
            HEADER_TIMEOUT.as_secs()
        ))
    };
    let header = read_header(client).or(timeout).await;
    match header {
        Ok(Header::Proxied {
            source,
            destination,
            ..
        }) => Ok(Origin {
            client: source,
            local: Some(destination),
        }),
        // LOCAL, UNKNOWN, AF_UNSPEC, AF_UNIX: the real endpoints stand.
        Ok(Header::Local) => Ok(Origin {
            client: peer,
            local: None,
        }),
        Err(reason) => Err(Refused {
            event: Event::ProxyHeaderFailed,
            reason,
        }),
    }
}

/// Reads one header: peeks at what has arrived, and consumes bytes only when
/// they are known to be header bytes (all of them while the header is
/// incomplete, exactly its length once complete). Consuming the incomplete
/// part also means the socket is empty again, so the next wait is for new
/// bytes, not a spin on bytes already seen.
async fn read_header(client: &Async<TcpStream>) -> Result<Header, String> {
    // On the heap, and only for `accept-proxy` connections: an array here
    // would be part of every connection task's future, header or not.
    let mut buf = vec![0u8; HEADER_MAX];
    let mut have = 0;
    loop {
        let Some(room) = buf.get_mut(have..).filter(|r| !r.is_empty()) else {
            // The decoder decides every input of HEADER_MAX bytes.
            return Err("PROXY header undecided after its largest size".into());
        };
        let peeked = client
            .read_with(|s| s.peek(room))
            .await
            .map_err(|e| format!("reading the PROXY header: {e}"))?;
        if peeked == 0 {
            return Err("connection closed before the PROXY header was complete".into());
        }
        let seen = have + peeked;
        let (header, take) = match proxy::parse(&buf[..seen]) {
            Parsed::Incomplete => (None, peeked),
            Parsed::Complete { header, length, .. } => (Some(header), length - have),
            Parsed::Invalid(why) => return Err(why.to_string()),
        };
        consume(client, &mut buf[have..have + take])
            .await
            .map_err(|e| format!("reading the PROXY header: {e}"))?;
        have += take;
        if let Some(header) = header {
            // Bytes after the header may be in the socket already, and the
            // edge that announced them was consumed here: the pump must look.
            client.assume_readable();
            return Ok(header);
        }
    }
}

/// Reads exactly `into.len()` bytes that a peek has shown are in the socket.
async fn consume(client: &Async<TcpStream>, into: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < into.len() {
        let n = client.read_with(|mut s| s.read(&mut into[done..])).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        done += n;
    }
    Ok(())
}

/// Writes the PROXY header of `version` for a unix socket client, which has
/// no address to carry: version 1 `PROXY UNKNOWN`, version 2 a `LOCAL`
/// header (the backend uses the connection's own addresses). The client
/// socket is not asked for anything (it is a unix socket: see `crate::sys::unix`).
pub(crate) async fn send_header_without_address(
    backend: &Async<TcpStream>,
    version: ProxyVersion,
) -> io::Result<()> {
    let header = match version {
        ProxyVersion::V1 => proxy::encode_v1_unknown(),
        ProxyVersion::V2 => proxy::encode_v2_local(),
    };
    let mut backend = backend;
    backend.write_all(header.as_bytes()).await?;
    backend.flush().await
}

/// Why a datagram on an `accept-proxy` `/udp` listener was dropped. Each
/// variant is a fixed reason or a copy of the decoder's verdict, so refusing
/// a flood allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DatagramRefused {
    /// The real peer matches no `trust-proxy` pattern.
    Untrusted,
    /// The datagram ends before its header does (or is empty).
    Truncated,
    /// A version 1 header: it has no way to describe UDP.
    Version1,
    /// A version 2 header describing a stream (TCP), not a datagram.
    Stream,
    /// Not a header at all, or a malformed one.
    Invalid(proxy::Invalid),
}

impl std::fmt::Display for DatagramRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatagramRefused::Untrusted => f.write_str("the source matches no trust-proxy pattern"),
            DatagramRefused::Truncated => f.write_str("the datagram ends inside its PROXY header"),
            DatagramRefused::Version1 => f.write_str("a PROXY v1 header (UDP needs v2)"),
            DatagramRefused::Stream => {
                f.write_str("a PROXY v2 header for a stream, not a datagram")
            }
            DatagramRefused::Invalid(why) => write!(f, "{why}"),
        }
    }
}

/// Checks the PROXY header every datagram must start with on an
/// `accept-proxy` `/udp` listener, and returns who it speaks for and the
/// payload after it. Accepted: a version 2 `PROXY` header over UDP (`DGRAM`,
/// IPv4 or IPv6), whose addresses become the origin; and a version 2 `LOCAL`
/// header (or `AF_UNSPEC`, `AF_UNIX`), with which the real peer stands, as
/// the specification says. A datagram is whole, so a header that has not
/// ended where the datagram does is refused, never waited for. Looks at the
/// datagram in place: nothing is copied or allocated.
pub(crate) fn accept_datagram_header<'a>(
    datagram: &'a [u8],
    peer: SocketAddr,
    route: &Route,
) -> Result<(Origin, &'a [u8]), DatagramRefused> {
    if !route.trusts_proxy(client_ip(peer)) {
        return Err(DatagramRefused::Untrusted);
    }
    let (header, length) = match proxy::parse(datagram) {
        Parsed::Complete {
            version: ProxyVersion::V1,
            ..
        } => return Err(DatagramRefused::Version1),
        Parsed::Complete { header, length, .. } => (header, length),
        Parsed::Incomplete => return Err(DatagramRefused::Truncated),
        Parsed::Invalid(why) => return Err(DatagramRefused::Invalid(why)),
    };
    let origin = match header {
        Header::Proxied {
            source,
            destination,
            transport: Transport::Datagram,
        } => Origin {
            client: source,
            local: Some(destination),
        },
        Header::Proxied { .. } => return Err(DatagramRefused::Stream),
        Header::Local => Origin {
            client: peer,
            local: None,
        },
    };
    // `length` is at most the bytes the decoder saw: `get` only for form's sake.
    let payload = datagram.get(length..).ok_or(DatagramRefused::Truncated)?;
    Ok((origin, payload))
}

/// Writes the PROXY header of `version` for `origin` to a just-connected
/// backend, before any client byte. `client` is the accepted socket, asked
/// for its local address when no header carried one. `write_all` on the
/// async socket waits on a full buffer and resumes a short write, though a
/// fresh connection's empty send buffer always takes the whole header.
pub(crate) async fn send_header(
    client: &Async<TcpStream>,
    backend: &Async<TcpStream>,
    version: ProxyVersion,
    origin: Origin,
) -> io::Result<()> {
    let local = match origin.local {
        Some(local) => local,
        None => client.get_ref().local_addr()?,
    };
    let header = proxy::encode(version, Transport::Stream, origin.client, local);
    let mut backend = backend;
    backend.write_all(header.as_bytes()).await?;
    backend.flush().await
}
