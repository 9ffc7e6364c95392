//! UDP forwarding: `/udp` listeners with per-client associations, and the two
//! cross-protocol directions rinetd allows (UDP→TCP and TCP→UDP).
//!
//! Design, per `/udp` listener ([`serve`]):
//! - one task owns the listening socket and a map client address → association;
//!   it reads client datagrams and hands each to its association's upstream
//!   (a connected UDP socket, or a queue into a TCP connection), so no task is
//!   spawned per datagram;
//! - one task per association waits on its upstream and sends what comes back
//!   to exactly its client, from the listening socket;
//! - the listener task also expires idle associations (no traffic either way
//!   for the rule's `[timeout=N]`) and evicts the oldest-idle one when the
//!   rule's `[maxassoc=N]` cap is reached, so descriptors stay bounded.
//!
//! Buffers are 65,536 bytes (every IPv4/IPv6 UDP payload fits, the largest
//! being 65,507 bytes over IPv4) and come from the server's datagram pool
//! ([`crate::route::shared::Shared::datagrams`]), so steady-state traffic allocates nothing.
//! Datagrams queued towards a TCP backend are the exception: each is copied
//! into an allocation of its own size and charged to two byte budgets (its
//! association's, [`ASSOC_QUEUE_BYTES`], and the process's,
//! [`crate::route::shared::UDP_QUEUE_TOTAL`]), so a slow backend cannot make one-byte
//! datagrams pin 64 KiB each.

mod activity;
mod assoc;
mod batch;
mod listener;
mod reply;
mod tcp_to_udp;
mod udp_to_tcp;

pub use assoc::ASSOC_QUEUE_BYTES;
pub(crate) use listener::serve;
pub(crate) use tcp_to_udp::{tcp_to_udp, Start as TcpToUdp};

use crate::backends::{BackendPool, Lease};
use crate::route::edge::Origin;
use crate::route::Route;
use crate::stats::Registered;
use oi_runtime::reactor::Async;
use oi_wire::proxy::{self, Encoded, ProxyVersion, Transport};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// The largest UDP payload (IPv4: 65,535 − 20 IP − 8 UDP header bytes); also the
/// most TCP→UDP reads at once, so each read fits in one datagram.
pub(crate) const MAX_PAYLOAD: usize = 65_507;

/// Datagrams one task moves before yielding: smol has no cooperative budget,
/// and one busy client must not starve the others on the same thread.
const BATCH: usize = 64;

/// The address a backend socket binds before it connects, if any.
#[derive(Clone, Copy, Debug)]
enum Bind {
    /// The member's `src`, port 0 (one of this host's addresses).
    Local(SocketAddr),
    /// `transparent`: the client's address (for an association, its port
    /// too), with IP_TRANSPARENT.
    Transparent(SocketAddr),
}

/// The backend a new association or TCP→UDP connection from `client` uses:
/// the pool's choice (UDP has no connect to fail, so no failover), its first
/// address of the source address's family, what to bind, and the lease that
/// counts the use on the member until dropped. `transparent` is the address
/// to send from under `transparent` (it wins over the member's `src`).
fn pick_backend(
    pool: &BackendPool,
    client: IpAddr,
    transparent: Option<SocketAddr>,
) -> io::Result<(SocketAddr, Option<Bind>, Lease)> {
    let no_address = || {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "no backend address of the source address's family",
        )
    };
    let lease = pool.attempts(client).next().ok_or_else(no_address)?;
    let member = lease.member();
    let bind = match transparent {
        Some(from) => {
            let ip = crate::net::peer::unmapped(from);
            Some(Bind::Transparent(SocketAddr::new(ip, from.port())))
        }
        None => member.src().map(|ip| Bind::Local(SocketAddr::new(ip, 0))),
    };
    let family = bind.map(|b| match b {
        Bind::Local(a) | Bind::Transparent(a) => a.is_ipv4(),
    });
    let addr = member
        .addrs()
        .iter()
        .copied()
        .find(|a| family.is_none_or(|v4| v4 == a.is_ipv4()))
        .ok_or_else(no_address)?;
    Ok((addr, bind, lease))
}

/// Where a UDP flow's connected backend socket comes from.
enum BackendSocket {
    /// A new one, connected to the backend the pool chooses; the address
    /// to send from under `transparent`, as [`pick_backend`] takes it.
    Chosen(Option<SocketAddr>),
    /// The one a previous oi handed over (`oi upgrade`).
    Handed(Async<UdpSocket>),
}

/// A UDP flow's connected backend socket, recorded with its backend on the
/// flow's live entry `conn`; the backend's address (`None`: a handed-over
/// socket that cannot say); and the lease that counts the flow on its
/// backend while it lasts (`None`: a handed-over one's backend the rule no
/// longer lists). `client` is who the pool chooses for.
fn backend_socket(
    route: &Route,
    conn: &Registered,
    client: IpAddr,
    from: BackendSocket,
) -> io::Result<(Async<UdpSocket>, Option<SocketAddr>, Option<Lease>)> {
    match from {
        BackendSocket::Chosen(transparent) => {
            let (backend, bind, lease) = pick_backend(&route.pool, client, transparent)?;
            let socket = connected_socket(backend, bind)?;
            conn.connected(backend);
            Ok((socket, Some(backend), Some(lease)))
        }
        BackendSocket::Handed(socket) => {
            let peer = socket.get_ref().peer_addr().ok();
            let lease = peer.and_then(|addr| route.handed_lease(conn, addr));
            Ok((socket, peer, lease))
        }
    }
}

/// A non-blocking UDP socket connected to `backend`, bound as `bind` says.
/// Connected, so the kernel only delivers datagrams from the backend to it.
fn connected_socket(backend: SocketAddr, bind: Option<Bind>) -> io::Result<Async<UdpSocket>> {
    let socket = Socket::new(Domain::for_address(backend), Type::DGRAM.cloexec(), None)?;
    match bind {
        None => {}
        Some(Bind::Local(from)) => socket.bind(&SockAddr::from(from))?,
        Some(Bind::Transparent(from)) => {
            crate::backends::connect::set_transparent(&socket, from)?;
            socket
                .bind(&SockAddr::from(from))
                .map_err(|e| io::Error::new(e.kind(), format!("bind to {from}: {e}")))?;
        }
    }
    socket.connect(&SockAddr::from(backend))?;
    Async::new_datagram(UdpSocket::from(socket))
}

/// The PROXY header for what `origin` sends through a rule with `proxy=`,
/// built once per association or TCP→UDP connection; `None` without `proxy=`.
/// Version 2 with the `DGRAM` protocol whatever the rule says: version 1
/// has no UDP (the parsers refuse `proxy=v1` on a rule with a UDP side,
/// listener or backend; a route made in code may still ask for it). The destination is the one a client's
/// own header carried, else `local()`: the socket the client reached.
fn datagram_header(
    route: &Route,
    origin: Origin,
    local: impl FnOnce() -> io::Result<SocketAddr>,
) -> io::Result<Option<Encoded>> {
    if route.send_proxy.is_none() {
        return Ok(None);
    }
    let local = match origin.local {
        Some(l) => l,
        None => local()?,
    };
    Ok(Some(proxy::encode(
        ProxyVersion::V2,
        Transport::Datagram,
        origin.client,
        local,
    )))
}

/// Sends one datagram to a UDP backend, after the PROXY header if there is
/// one: one `sendmsg` of two slices, so the payload is not copied. A header
/// that makes the datagram too large fails as EMSGSIZE.
fn send_datagram(
    socket: &Async<UdpSocket>,
    header: Option<&Encoded>,
    payload: &[u8],
) -> io::Result<usize> {
    match header {
        None => socket.get_ref().send(payload),
        Some(h) => {
            let parts = [IoSlice::new(h.as_bytes()), IoSlice::new(payload)];
            socket2::SockRef::from(socket.get_ref()).send_vectored(&parts)
        }
    }
}

/// Errors a connected UDP socket reports for an earlier datagram (an ICMP
/// "port unreachable" while the backend is down); the socket stays usable.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::Interrupted
    ) || e.raw_os_error() == Some(rustix::io::Errno::HOSTUNREACH.raw_os_error())
        || e.raw_os_error() == Some(rustix::io::Errno::NETUNREACH.raw_os_error())
}
