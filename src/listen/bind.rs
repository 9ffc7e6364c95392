//! Turning rules into bound sockets, before anything serves them: start-up
//! fails cleanly on a port in use, and tests can bind port 0 and read the
//! address back.

use oi_config::{BindAddr, Proto, ResolvedRule};
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};

/// A socket bound for one rule, not yet serving.
pub enum BoundSocket {
    /// A listening TCP socket.
    Tcp(TcpListener),
    /// A bound UDP socket.
    Udp(UdpSocket),
    /// A listening unix stream socket, with its file (removed when it closes).
    Unix(UnixSocket),
    /// Several TCP listeners on one address, all passed in (an earlier oi's
    /// `SO_REUSEPORT` group): each gets an accept loop, so none is closed
    /// with connections in its queue.
    TcpGroup(TcpGroup),
}

/// TCP listeners of one `SO_REUSEPORT` group, passed in: opaque outside the crate.
pub struct TcpGroup {
    /// The first listener: the one siblings would be made from.
    pub(crate) first: TcpListener,
    /// The other members, each served by a loop of its own.
    pub(crate) rest: Vec<TcpListener>,
}

/// A listening unix socket as `serve` takes it: opaque outside the crate.
pub struct UnixSocket {
    /// The listener, and the file it made.
    pub(crate) bound: crate::sys::unix::UnixBound,
    /// Where it listens: the listener's identity across reloads.
    pub(crate) addr: oi_config::UnixAddr,
}

impl BoundSocket {
    /// The address the socket is bound to (with the real port when bound
    /// to 0); an error for a unix socket, which has no IP address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            BoundSocket::Tcp(l) => l.local_addr(),
            BoundSocket::TcpGroup(g) => g.first.local_addr(),
            BoundSocket::Udp(s) => s.local_addr(),
            BoundSocket::Unix(u) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{} has no IP address", u.addr),
            )),
        }
    }

    /// Where the socket listens: the IP address (port as bound) or the unix socket.
    pub fn bind_addr(&self) -> io::Result<BindAddr> {
        match self {
            BoundSocket::Unix(u) => Ok(BindAddr::Unix(u.addr.clone())),
            _ => self.local_addr().map(BindAddr::Ip),
        }
    }
}

/// Binds one rule's listening socket (non-blocking, close-on-exec).
///
/// A TCP listener is the first of an `SO_REUSEPORT` group: each executor
/// thread gets a socket of its own in the group ([`sibling`]), and the kernel
/// hands every new connection to exactly one of them, so a connection wakes
/// one thread. With one descriptor duplicated per thread in a shared epoll,
/// every connection woke every thread and all but one failed `accept4`: 1.0,
/// 6.2 and 21.2 failed calls per connection at 2, 16 and 64 threads
/// (`THREADS="2 16 64" benches/syscalls.sh`).
///
/// `SO_REUSEPORT` lets any later socket of the same user with the option set
/// join the group and take a share of the connections: a second oi started
/// by mistake would serve silently beside the first. So a plain socket
/// (`SO_REUSEADDR` only) is bound first as a probe. It fails with "Address
/// already in use" when anything listens on the address, `SO_REUSEPORT` or
/// not, and only then, with nothing there, is the group created. Every oi
/// probes, so a second oi fails at start-up as it did before.
pub fn bind(rule: &ResolvedRule) -> io::Result<BoundSocket> {
    use socket2::{Domain, Socket, Type};
    let addr = match &rule.bind {
        BindAddr::Ip(addr) => *addr,
        BindAddr::Unix(unix) => {
            let backlog = i32::try_from(rule.listen_backlog()).unwrap_or(i32::MAX);
            let bound = crate::sys::unix::bind(unix, rule.settings().mode, backlog)?;
            return Ok(BoundSocket::Unix(UnixSocket {
                bound,
                addr: unix.clone(),
            }));
        }
    };
    let domain = Domain::for_address(addr);
    match rule.rule.bind.proto {
        Proto::Tcp => {
            let probe = Socket::new(domain, Type::STREAM.cloexec(), None)?;
            // Restarting must not fail while old connections sit in TIME_WAIT.
            probe.set_reuse_address(true)?;
            probe.bind(&addr.into())?;
            // The port the kernel chose, when the rule says 0 (tests).
            let chosen = probe.local_addr()?.as_socket().unwrap_or(addr);
            drop(probe);
            // Pending connections the kernel queues before accept (`listen-backlog`).
            let backlog = i32::try_from(rule.listen_backlog()).unwrap_or(i32::MAX);
            let mptcp = rule.settings().mptcp.is_some_and(|m| m.listens());
            Ok(BoundSocket::Tcp(reuseport_listener(
                chosen, backlog, mptcp,
            )?))
        }
        Proto::Udp => {
            let s = Socket::new(domain, Type::DGRAM.cloexec(), None)?;
            s.bind(&addr.into())?;
            s.set_nonblocking(true)?;
            Ok(BoundSocket::Udp(s.into()))
        }
    }
}

/// Another socket in `listener`'s `SO_REUSEPORT` group, for another
/// executor thread; MPTCP when `listener` is.
pub(crate) fn sibling(listener: &TcpListener, backlog: i32) -> io::Result<TcpListener> {
    let mptcp = crate::sys::mptcp::is_mptcp(socket2::SockRef::from(listener));
    reuseport_listener(listener.local_addr()?, backlog, mptcp)
}

/// A non-blocking, close-on-exec TCP listener on `addr` in its
/// `SO_REUSEPORT` group; MPTCP when `mptcp` (and the kernel allows it).
fn reuseport_listener(addr: SocketAddr, backlog: i32, mptcp: bool) -> io::Result<TcpListener> {
    use socket2::{Domain, Type};
    let s = crate::sys::mptcp::stream(Domain::for_address(addr), Type::STREAM.cloexec(), mptcp)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    // Accepted sockets inherit both from the listener (Linux copies the
    // listener's socket into each accepted one): two setsockopt calls per
    // connection saved.
    s.set_tcp_nodelay(true)?;
    s.set_keepalive(true)?;
    s.bind(&addr.into())?;
    s.listen(backlog)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// The message for a rule whose socket could not be bound, naming its line.
pub(crate) fn bind_error(file: &str, rule: &ResolvedRule, e: &io::Error) -> String {
    // A rule from an included file names that file.
    let file = rule.rule.file.as_deref().unwrap_or(file);
    format!(
        "{file}:{}: cannot bind {}: {e}",
        rule.rule.line,
        rule.bind.with_proto(rule.rule.bind.proto)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_rule(bind: SocketAddr) -> ResolvedRule {
        let backend: SocketAddr = "127.0.0.1:9".parse().expect("literal");
        ResolvedRule::between(bind, Proto::Tcp, backend, Proto::Tcp)
    }

    fn port_zero() -> SocketAddr {
        "127.0.0.1:0".parse().expect("literal")
    }

    #[test]
    fn a_second_bind_of_a_listening_address_fails_as_without_reuseport() {
        let first = bind(&tcp_rule(port_zero())).expect("first");
        let addr = first.local_addr().expect("addr");
        let again = bind(&tcp_rule(addr))
            .err()
            .expect("a second oi must not share the port");
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse, "{again}");
        // Its own siblings do join the group.
        let BoundSocket::Tcp(listener) = &first else {
            panic!("tcp")
        };
        let sibling = sibling(listener, 16).expect("sibling");
        assert_eq!(sibling.local_addr().expect("addr"), addr);
    }

    #[test]
    fn a_port_held_by_another_reuseport_program_is_refused() {
        use socket2::{Domain, Socket, Type};
        let other = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        other.set_reuse_address(true).expect("reuseaddr");
        other.set_reuse_port(true).expect("reuseport");
        other.bind(&port_zero().into()).expect("bind");
        other.listen(16).expect("listen");
        let addr = other
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("addr");
        let ours = bind(&tcp_rule(addr))
            .err()
            .expect("must not join another program's group");
        assert_eq!(ours.kind(), io::ErrorKind::AddrInUse, "{ours}");
    }

    #[test]
    fn accepted_sockets_inherit_nodelay_and_keepalive() {
        let BoundSocket::Tcp(l) = bind(&tcp_rule(port_zero())).expect("bind") else {
            panic!("tcp")
        };
        let _client = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        l.set_nonblocking(false).expect("blocking");
        let (accepted, _) = l.accept().expect("accept");
        let s = socket2::SockRef::from(&accepted);
        assert!(s.tcp_nodelay().expect("nodelay"), "TCP_NODELAY inherited");
        assert!(s.keepalive().expect("keepalive"), "SO_KEEPALIVE inherited");
    }

    #[test]
    fn each_connection_goes_to_one_socket_of_the_group() {
        let first = bind(&tcp_rule(port_zero())).expect("bind");
        let BoundSocket::Tcp(a) = first else {
            panic!("tcp")
        };
        // The same backlog as the first socket: the kernel may hash most of the
        // clients to one queue, and a full queue drops their SYNs.
        let b = sibling(&a, 1024).expect("sibling");
        let addr = a.local_addr().expect("addr");
        let clients: Vec<_> = (0..32)
            .map(|_| std::net::TcpStream::connect(addr).expect("connect"))
            .collect();
        let mut accepted = 0;
        for l in [&a, &b] {
            // Non-blocking: count what each queue holds; nothing is accepted twice.
            while l.accept().is_ok() {
                accepted += 1;
            }
        }
        assert_eq!(accepted, clients.len());
    }
}
