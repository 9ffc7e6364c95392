//! Reading a client's TLS server name without consuming a byte, for a
//! listener that rules share by server name (`[sni=...]`).
//!
//! The ClientHello is read with MSG_PEEK: the bytes stay in the socket, so
//! the chosen backend receives every one of them, and the pump (splice or
//! copy, whichever the rule uses) forwards them like any other. Bounded per
//! connection: at most [`MAX_HELLO`] bytes (one heap buffer, grown from
//! 2 KiB only for larger hellos, freed once routed) and [`HELLO_TIMEOUT`].
//!
//! Peeking leaves the socket readable, so waiting for the rest of a
//! ClientHello cut across segments cannot wait for readiness (it would
//! spin on bytes already seen; neither rustix nor socket2 offers
//! SO_RCVLOWAT). It waits on a timer instead, 1 ms doubling to 64 ms, and
//! each wake only counts the queued bytes (FIONREAD, no copy): it peeks and
//! parses again only once as many are queued as the record and handshake
//! lengths read so far say a whole hello takes
//! ([`client_hello::parse_wanting`]). So the work per ClientHello is linear
//! in its length: a hello in one record costs two peeks however slowly it
//! drips (one for its header, one once it is all there; three when the
//! first segment is shorter than the 5-byte header), one cut into
//! records of one byte about 40, and never more than [`MAX_PEEKS`], each of
//! at most [`MAX_HELLO`] bytes; the waits cost at most about 160 wakes over
//! the 10 s plus 7 after each peek. Peeking again on every new byte, as
//! before, re-read the whole buffer each time. A hello in one segment —
//! what clients send — costs one peek and no timer.

use crate::route::{Route, ServerNames};
use crate::stats::{Registered, RuleStats};
use futures_lite::FutureExt;
use oi_runtime::reactor::{Async, Timer};
use oi_wire::client_hello::{self, Hello};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// Most bytes of a ClientHello oi reads before giving up on the name.
/// Clients send 200 bytes to 2 KiB (post-quantum key shares included); the
/// TLS record limit is 16 KiB.
pub(crate) const MAX_HELLO: usize = 16 * 1024;

/// Longest wait for a whole ClientHello.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The first buffer; grown (once, to [`MAX_HELLO`]) only when a hello fills it.
const FIRST_BUFFER: usize = 2048;

/// Longest pause between two counts of the bytes of an incomplete ClientHello.
const MAX_PAUSE: Duration = Duration::from_millis(64);

/// Most peeks at one ClientHello: each looks only once the bytes the last
/// one asked for are there, and one cut into one-byte records, the worst
/// case, takes about 40 to 16 KiB.
pub(crate) const MAX_PEEKS: usize = 64;

/// Why no server name was read; each routes to the default rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unnamed {
    /// A whole ClientHello without a server name.
    NoName,
    /// The first bytes are not a TLS ClientHello.
    NotTls,
    /// Still incomplete after [`MAX_HELLO`] bytes.
    TooLarge,
    /// Still incomplete after [`HELLO_TIMEOUT`].
    TimedOut,
    /// Still incomplete after [`MAX_PEEKS`] peeks.
    TooManyPieces,
    /// The client closed (or the socket failed) before a whole ClientHello.
    Closed,
}

impl Unnamed {
    /// How log lines say it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Unnamed::NoName => "no server name in the ClientHello",
            Unnamed::NotTls => "not a TLS ClientHello",
            Unnamed::TooLarge => "ClientHello larger than 16 KiB",
            Unnamed::TimedOut => "no whole ClientHello within 10 s",
            Unnamed::TooManyPieces => "ClientHello in too many pieces",
            Unnamed::Closed => "closed before a whole ClientHello",
        }
    }
}

/// The route `client` goes to on a listener shared by server name, and the
/// name it asked for (for its log lines and `live`, its entry in the live
/// list); counted in `stats`, logged at debug level with `peer`. `Err`
/// (with the name, if one was read): no rule takes it and there is no
/// default, so it is to be closed.
pub(crate) async fn choose(
    client: &Async<TcpStream>,
    names: &ServerNames,
    stats: &RuleStats,
    live: &Registered,
    peer: crate::net::peer::Peer,
) -> Result<(Arc<Route>, Option<Arc<str>>), Option<Arc<str>>> {
    let read = server_name(client).await;
    let name: Option<Arc<str>> = read.as_deref().ok().map(Arc::from);
    let why = read.err().map_or("no rule's name matches", Unnamed::as_str);
    let Some((route, named)) = names.choose(name.as_deref()) else {
        stats.count(|c| &c.sni_unrouted);
        log::debug!("{peer}: {why}; no rule takes it and there is no default, closed");
        return Err(name);
    };
    if named {
        stats.count(|c| &c.sni_named);
    } else {
        stats.count(|c| &c.sni_default);
        log::debug!("{peer}: {why}; to the default rule");
    }
    if let Some(n) = &name {
        live.routed_by(n.clone());
    }
    Ok((route.clone(), name))
}

/// The server name `client` asks for, read without consuming anything.
async fn server_name(client: &Async<TcpStream>) -> Result<String, Unnamed> {
    let timeout = async {
        Timer::after(HELLO_TIMEOUT).await;
        Err(Unnamed::TimedOut)
    };
    let named = peek_hello(client).or(timeout).await;
    // The reactor is edge-triggered and a peek that waited consumed the edge
    // announcing the bytes still in the socket: the pump (a splice mover
    // waits for an edge before its first splice) must look without one.
    client.assume_readable();
    named
}

/// Peeks until the bytes decide (see the module docs for the waits).
async fn peek_hello(client: &Async<TcpStream>) -> Result<String, Unnamed> {
    let mut buf = vec![0u8; FIRST_BUFFER];
    for _ in 0..MAX_PEEKS {
        let n = client
            .read_with(|s| s.peek(&mut buf))
            .await
            .map_err(|_| Unnamed::Closed)?;
        if n == 0 {
            return Err(Unnamed::Closed);
        }
        let want = match client_hello::parse_wanting(&buf[..n]) {
            (Hello::Found(name), _) => return Ok(name),
            (Hello::NoSni, _) => return Err(Unnamed::NoName),
            (Hello::NotTls, _) => return Err(Unnamed::NotTls),
            (Hello::NeedMore, _) if n >= MAX_HELLO => return Err(Unnamed::TooLarge),
            (Hello::NeedMore, want) => want.clamp(n + 1, MAX_HELLO),
        };
        if want > buf.len() {
            buf.resize(MAX_HELLO, 0);
        }
        wait_for(client, want).await?;
    }
    Err(Unnamed::TooManyPieces)
}

/// Returns once `want` bytes are queued on `client`: at once when they
/// already are, else after the first timer wake that counts them.
async fn wait_for(client: &Async<TcpStream>, want: usize) -> Result<(), Unnamed> {
    let mut pause = Duration::from_millis(1);
    loop {
        let queued = rustix::io::ioctl_fionread(client.get_ref()).map_err(|_| Unnamed::Closed)?;
        if usize::try_from(queued).unwrap_or(usize::MAX) >= want {
            return Ok(());
        }
        Timer::after(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
