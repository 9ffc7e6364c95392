//! The TCP listener kind of the accept driver ([`super::driver`]), and what
//! happens to a TCP client once placed: who it is (the PROXY header,
//! `accept-proxy`), admission by its rule ([`crate::route::admit`]: here
//! for a listener of one rule, after the ClientHello for one shared by
//! server name), and the choice between TCP→TCP ([`crate::tcp`]) and
//! TCP→UDP ([`crate::udp`]).

use super::driver::{Acceptor, Admitted};
use crate::net::peer::Client;
use crate::route::admit::{self, Counts};
use crate::route::edge::{self, Origin};
use crate::route::limits::{Held, RuleLimits};
use crate::route::shared::Shared;
use crate::route::{client_ip, Bytes, Route};
use crate::stats::RuleStats;
use oi_config::Proto;
use oi_runtime::reactor::{Async, SharedListener};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

/// A TCP listener as the accept driver sees it.
pub(super) struct TcpAcceptor {
    /// This loop's listening socket.
    pub(super) listener: TcpSocket,
}

/// How an accept loop holds its listening socket.
pub(super) enum TcpSocket {
    /// A socket of its own: the only loop of its listener, or one member of
    /// an `SO_REUSEPORT` group passed in (shared with its `Running`, which
    /// copies it for `oi upgrade`).
    Own(std::sync::Arc<Async<TcpListener>>),
    /// The one socket of its listener, which every thread's loop accepts
    /// from and a busy thread leaves for a while (`reactor::accept`).
    Shared(SharedListener<TcpListener>),
}

impl Acceptor for TcpAcceptor {
    type Peer = SocketAddr;

    /// As rinetd names the client of a failed accept.
    const NOBODY: Client = Client::Ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED));

    async fn accept(&self) -> io::Result<(Async<TcpStream>, SocketAddr)> {
        match &self.listener {
            TcpSocket::Own(l) => l.read_with(accept_nonblocking).await,
            TcpSocket::Shared(l) => l.accept_with(accept_nonblocking).await,
        }
    }

    fn serve(client: Admitted<SocketAddr>) -> impl Future<Output = ()> + Send + 'static {
        connection(client)
    }
}

/// accept4(2) with `SOCK_NONBLOCK | SOCK_CLOEXEC`: the stream is registered
/// as it comes, without the `ioctl(FIONBIO)` that `Async::new` would make
/// (one system call per connection).
fn accept_nonblocking(listener: &TcpListener) -> io::Result<(Async<TcpStream>, SocketAddr)> {
    use rustix::net::{acceptfrom_with, SocketFlags};
    let (fd, peer) = acceptfrom_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?;
    let peer = peer
        .and_then(|p| SocketAddr::try_from(p).ok())
        .ok_or_else(|| io::Error::other("accepted a connection without an IP peer address"))?;
    Ok((Async::new_nonblocking(TcpStream::from(fd))?, peer))
}

/// Serves one accepted connection: PROXY header (`accept-proxy`), ACL
/// check, per-client limit, then TCP→TCP or TCP→UDP.
///
/// Everything up to the pump runs in a boxed future ([`setup`]), on the
/// heap only until the pump starts: the task then holds the pump's state
/// ([`crate::tcp::Open`]), the thread's count and this box's pointer, not
/// the setup's locals beside them (idle memory per connection, 1.58 ->
/// 1.04 KiB with benches/idle_memory.sh). `admitted` is taken apart
/// here, outside the futures: an async fn keeps its arguments for its
/// whole life, so taking it apart inside would hold every field twice.
fn connection(admitted: Admitted<SocketAddr>) -> impl Future<Output = ()> + Send + 'static {
    let Admitted {
        stream,
        peer,
        route,
        shared,
        stats,
        limits,
        guards: (placed, held),
    } = admitted;
    let setup = Box::pin(setup(held, stream, peer, route, shared, stats, limits));
    async move {
        // Counts the connection (for its thread, `--drain`, the limits and
        // tests) until every socket is closed: the sockets are in the setup
        // or in `Open`, both gone when the body ends, and what the future
        // captured drops only with the future. Naming `placed` is what makes
        // the future capture it.
        let _placed = &placed;
        // `let else`, not `if let`: the `Option` would be kept beside the
        // pump for the whole `if let` (192 bytes, -Zprint-type-sizes).
        let Some(open) = setup.await else {
            return;
        };
        crate::tcp::pumped(open).await;
    }
}

/// The setup of [`connection`], up to the pump: `None` when the connection
/// was refused, failed, or ended here (TCP→UDP runs to its end in here).
/// `held` (the limits' slots, with the per-client one once taken) comes
/// first so that it drops after the client socket (an async fn's arguments
/// drop in reverse order), or goes on with the connection in `Open`.
async fn setup(
    mut held: Held,
    client: Async<TcpStream>,
    peer: SocketAddr,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
    limits: Option<Arc<RuleLimits>>,
) -> Option<crate::tcp::Open<Held>> {
    let origin = if route.accept_proxy {
        match Box::pin(edge::accept_header(&client, peer, &route)).await {
            Ok(origin) => origin,
            Err(refused) => {
                log::debug!(
                    "{peer}: {} on {}: {}",
                    refused.event.as_str(),
                    route.bind,
                    refused.reason
                );
                let line = route.event(client_ip(peer), refused.event, Bytes::NONE);
                shared.log.log(line);
                return None;
            }
        }
    } else {
        Origin {
            client: peer,
            local: None,
        }
    };
    // From here on the client is who the header said it is, if there was one.
    let peer = origin.client;
    let ip = client_ip(peer);
    // A listener of one rule admits here; one shared by server name once
    // the ClientHello has chosen the rule (`tcp::open`).
    if !route.routes_by_name() {
        let counts = Counts::Listener(limits.as_ref());
        if let Err(refused) = admit::admit(&route, counts, &shared.limits, &mut held, ip) {
            log::debug!("{peer}: {} on {}", refused.as_str(), route.bind);
            stats.refused(refused.event());
            shared
                .log
                .log(route.event(ip, refused.event(), Bytes::NONE));
            return None;
        }
    }
    // Accepted sockets inherit SO_KEEPALIVE from the listener; a rule
    // with `keepalive=off` clears it (one call, only on such rules).
    if !route.keepalive() {
        if let Err(e) = socket2::SockRef::from(client.get_ref()).set_keepalive(false) {
            log::debug!("{peer}: cannot clear SO_KEEPALIVE: {e}");
        }
    }
    match route.backend_proto {
        // Not boxed apart: this whole setup is.
        Proto::Tcp => crate::tcp::open(held, client, Some(origin), route, shared, stats).await,
        Proto::Udp => {
            let start = crate::udp::TcpToUdp::Fresh { client, origin };
            Box::pin(crate::udp::tcp_to_udp(start, route, shared, stats)).await;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    /// Size of the future an async function of one argument returns,
    /// without calling it.
    fn future_size<A, F>(_: fn(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// An accepted TCP connection's task holds this future for its whole
    /// life, idle or not, so its size is most of an idle connection's
    /// memory. 1,624 bytes before the cuts, 928 after, 1,048
    /// with the per-thread reactor's inline registration (test build). Then
    /// the setup moved into a boxed future that hands the pump an `Open`
    /// (release build, -Zprint-type-sizes): 1,064 -> 592 bytes, and 496
    /// with a smaller pump, live guard and limits' slots; benches/
    /// idle_memory.sh 1.58 -> 1.04 KiB per idle connection. The bound leaves
    /// room for a field or two; growth past it should be a decision,
    /// measured with benches/idle_memory.sh.
    #[test]
    fn an_accepted_connections_future_stays_small() {
        let size = future_size(super::connection);
        assert!(
            size <= 528,
            "the connection future is {size} bytes, over its 528-byte budget"
        );
    }
}
