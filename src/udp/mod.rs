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
//! ([`crate::shared::Shared::datagrams`]), so steady-state traffic allocates nothing.
//! Datagrams queued towards a TCP backend are the exception: each is copied
//! into an allocation of its own size and charged to two byte budgets (its
//! association's, [`ASSOC_QUEUE_BYTES`], and the process's,
//! [`crate::shared::UDP_QUEUE_TOTAL`]), so a slow backend cannot make one-byte
//! datagrams pin 64 KiB each.

mod assoc;
mod listener;
mod tcp_to_udp;

pub use assoc::ASSOC_QUEUE_BYTES;
pub(crate) use listener::serve;
pub(crate) use tcp_to_udp::tcp_to_udp;

use crate::backends::{BackendPool, Lease};
use async_io::Async;
use socket2::{Domain, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// The largest UDP payload (IPv4: 65,535 − 20 IP − 8 UDP header bytes); also the
/// most TCP→UDP reads at once, so each read fits in one datagram.
pub(crate) const MAX_PAYLOAD: usize = 65_507;

/// Datagrams one task moves before yielding: smol has no cooperative budget,
/// and one busy client must not starve the others on the same thread.
const BATCH: usize = 64;

/// The backend a new association or TCP→UDP connection from `client` uses:
/// the pool's choice (UDP has no connect to fail, so no failover), its first
/// address of the source address's family, that source, and the lease that
/// counts the use on the member until dropped.
fn pick_backend(
    pool: &BackendPool,
    client: IpAddr,
) -> io::Result<(SocketAddr, Option<IpAddr>, Lease)> {
    let no_address = || {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "no backend address of the source address's family",
        )
    };
    let lease = pool.attempts(client).next().ok_or_else(no_address)?;
    let member = lease.member();
    let src = member.src();
    let addr = member
        .addrs()
        .iter()
        .copied()
        .find(|a| src.is_none_or(|s| s.is_ipv4() == a.is_ipv4()))
        .ok_or_else(no_address)?;
    Ok((addr, src, lease))
}

/// A non-blocking UDP socket connected to `backend`, bound to `src` when given.
/// Connected, so the kernel only delivers datagrams from the backend to it.
fn connected_socket(backend: SocketAddr, src: Option<IpAddr>) -> io::Result<Async<UdpSocket>> {
    let socket = Socket::new(Domain::for_address(backend), Type::DGRAM.cloexec(), None)?;
    if let Some(ip) = src {
        socket.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
    }
    socket.connect(&SockAddr::from(backend))?;
    Async::new(UdpSocket::from(socket))
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
