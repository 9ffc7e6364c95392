//! Outgoing TCP connections to a rule's backend.

use crate::backends::{BackendPool, Lease};
use futures_lite::FutureExt;
use oi_runtime::reactor::{Async, Timer};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// Why a backend connection could not be made.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// The local socket could not be created or bound (rinetd's `local-socket-failed`).
    LocalSocket(io::Error),
    /// Every backend address refused, timed out or failed; the last error is kept.
    Connect(io::Error),
}

impl super::Member {
    /// Which of the rule's backends (file order) it is one of: what
    /// `tls-connect` verifies it for (`tls::connect`).
    pub(crate) fn backend(&self) -> usize {
        self.group
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::LocalSocket(e) => write!(f, "cannot create the outgoing socket: {e}"),
            ConnectError::Connect(e) => write!(f, "cannot connect to the backend: {e}"),
        }
    }
}

/// How a rule's outgoing sockets are made, beyond the address they go to.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Dial {
    /// SO_KEEPALIVE on the socket (`keepalive`, on unless turned off).
    pub(crate) keepalive: bool,
    /// `transparent`: the client's address (port 0: the kernel picks one),
    /// bound with IP_TRANSPARENT so the backend sees the client; wins over
    /// a member's `src`, and skips backend addresses of the other family.
    pub(crate) from: Option<SocketAddr>,
    /// `mptcp=on|connect`: open the socket with IPPROTO_MPTCP (plain TCP
    /// where the kernel refuses).
    pub(crate) mptcp: bool,
    /// TCP_NODELAY is left to the caller, which sets it before the
    /// socket's second write (the pump, through `Meter::before_write`): a
    /// connection that writes its backend once (one request) saves the
    /// setsockopt. Safe because Linux's Nagle test holds a partial segment
    /// only while an earlier partial segment is unacknowledged (Minshall's
    /// rule, `tcp_nagle_check`), and before the first write there is none.
    pub(crate) nodelay_later: bool,
}

/// A connection to one of a pool's members.
pub(crate) struct Connected {
    /// The stream to the backend.
    pub(crate) stream: Async<TcpStream>,
    /// The address that answered (no getpeername needed to learn it);
    /// `None` for a unix socket backend.
    pub(crate) addr: Option<SocketAddr>,
    /// The member, counted as in use until the connection drops this.
    pub(crate) lease: Lease,
}

/// Connects `client`'s connection to a member of `pool`: the one the pool
/// chooses, then, if that fails, each other eligible member in turn, so one
/// dead backend never costs a client its connection. Every failed member is
/// reported to the pool (its health) and to `failed` (the counters). Each
/// address gets `timeout`; `dial` says how the socket is made (TCP only). A
/// `unix:` member is connected as a unix stream socket.
pub(crate) async fn through_pool(
    pool: &BackendPool,
    client: IpAddr,
    timeout: Duration,
    dial: Dial,
    mut failed: impl FnMut(&io::Error),
) -> Result<Connected, ConnectError> {
    let mut last: Option<io::Error> = None;
    for lease in pool.attempts(client) {
        let member = lease.member();
        let attempt = match member.unix() {
            Some(unix) => crate::sys::unix::connect(unix, timeout)
                .await
                .map(|stream| (stream, None))
                .map_err(ConnectError::Connect),
            None => dial_addrs(&member.addrs(), member.src(), timeout, dial)
                .await
                .map(|(stream, addr)| (stream, Some(addr))),
        };
        match attempt {
            Ok((stream, addr)) => {
                pool.succeeded(member);
                return Ok(Connected {
                    stream,
                    addr,
                    lease,
                });
            }
            // Not the backend's fault: no other member would fare better.
            Err(ConnectError::LocalSocket(e)) => return Err(ConnectError::LocalSocket(e)),
            Err(ConnectError::Connect(e)) => {
                pool.failed(member);
                failed(&e);
                if pool.members().len() > 1 {
                    log::debug!(
                        "{client}: backend {} failed ({e}), trying the next",
                        member.label()
                    );
                }
                last = Some(e);
            }
        }
    }
    Err(ConnectError::Connect(
        last.unwrap_or_else(|| nothing_tried(pool)),
    ))
}

/// Why a connection found no member to try: none in service (an
/// operator's `oi backend`), else no address.
fn nothing_tried(pool: &BackendPool) -> io::Error {
    if pool.none_in_service() {
        return io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "every backend is drained, disabled or of weight 0",
        );
    }
    no_address()
}

/// A health probe's connection to the first of `addrs` that answers within
/// `timeout` each, from `src` if given (addresses of the other family are
/// skipped): its sockets made and connected as a forwarded connection's are
/// ([`source`], [`sockets`], [`issue_connect`]; `Dial`'s defaults, so
/// keepalive off), then registered with async-io's reactor: the probe
/// thread is a control-plane thread, which drives no oi reactor (see
/// `oi_runtime`'s notes). Returns the stream and the address that answered.
pub(crate) async fn for_probe(
    addrs: &[SocketAddr],
    src: Option<IpAddr>,
    timeout: Duration,
) -> Result<(async_io::Async<TcpStream>, SocketAddr), ConnectError> {
    let dial = Dial::default();
    let from = source(addrs, src, dial)?;
    let mut last: Option<io::Error> = None;
    for (addr, socket) in sockets(addrs, from, dial) {
        let socket = socket.map_err(ConnectError::LocalSocket)?;
        let attempt = async {
            let in_progress = issue_connect(&socket, addr)?;
            // Created with SOCK_NONBLOCK: registered as it is.
            let stream = async_io::Async::new_nonblocking(TcpStream::from(socket))?;
            if in_progress {
                let answered = async {
                    stream.writable().await?;
                    if let Some(e) = stream.get_ref().take_error()? {
                        return Err(e);
                    }
                    // Writable with no error, yet not connected: see `finish_connect`.
                    stream.get_ref().peer_addr().map(drop)
                };
                let deadline = async {
                    async_io::Timer::after(timeout).await;
                    Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
                };
                answered.or(deadline).await?;
            }
            Ok(stream)
        };
        match attempt.await {
            Ok(stream) => return Ok((stream, addr)),
            Err(e) => {
                log::debug!("probe: connect to {addr} failed: {e}");
                last = Some(e);
            }
        }
    }
    Err(ConnectError::Connect(last.unwrap_or_else(no_address)))
}

/// The error of a connect that had no address to try: made only then
/// (`last.unwrap_or_else(no_address)`), since an `io::Error` with a message
/// allocates, and the two made up front on every connection were six
/// allocations (callgrind).
fn no_address() -> io::Error {
    io::Error::new(io::ErrorKind::AddrNotAvailable, "no backend address")
}

/// Connects to the first of `addrs` that answers within `timeout` each,
/// from `src` if given (addresses of the other family are skipped), with
/// every way of making the socket that `dial` gives, on this thread's oi
/// reactor. Returns the stream and the address that answered (no
/// getpeername needed to learn it).
///
/// Its loop is written out here and in [`for_probe`], not shared through a
/// function taking the connect step as a closure: that cost 131 more
/// user-space instructions per connection, and 48 more in `memcpy`
/// (callgrind, benches/rtt_instructions.sh, one thread).
async fn dial_addrs(
    addrs: &[SocketAddr],
    src: Option<IpAddr>,
    timeout: Duration,
    dial: Dial,
) -> Result<(Async<TcpStream>, SocketAddr), ConnectError> {
    let from = source(addrs, src, dial)?;
    let mut last: Option<io::Error> = None;
    for (addr, socket) in sockets(addrs, from, dial) {
        let socket = socket.map_err(ConnectError::LocalSocket)?;
        let outcome = match start_connect(socket, addr) {
            Ok(Started::Connected(stream)) => Ok(stream),
            // Only a connect still in flight gets a timer (an entry in the
            // thread's timer queue: no system call).
            Ok(Started::InProgress(stream)) => {
                let deadline = async {
                    Timer::after(timeout).await;
                    Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
                };
                finish_connect(stream).or(deadline).await
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(stream) => return Ok((stream, addr)),
            Err(e) => {
                log::debug!("connect to {addr} failed: {e}");
                last = Some(e);
            }
        }
    }
    Err(ConnectError::Connect(last.unwrap_or_else(no_address)))
}

/// The address a connection's sockets are bound to: with `transparent`,
/// the client's (port 0), which fails, as not the backend's fault, when no
/// backend address is of its family; else `src`'s (port 0), if given.
fn source(
    addrs: &[SocketAddr],
    src: Option<IpAddr>,
    dial: Dial,
) -> Result<Option<SocketAddr>, ConnectError> {
    let Some(client) = dial.from else {
        return Ok(src.map(|ip| SocketAddr::new(ip, 0)));
    };
    let from = SocketAddr::new(crate::net::peer::unmapped(client), 0);
    if !addrs.iter().any(|a| a.is_ipv4() == from.is_ipv4()) {
        // Not the backend's fault: no member can be reached from there.
        return Err(ConnectError::LocalSocket(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("transparent: the backend has no address of client {client}'s family"),
        )));
    }
    Ok(Some(from))
}

/// The sockets to try, in order: for each of `addrs` of `from`'s family
/// (all of them without a `from`), one made as `dial` says ([`new_socket`]),
/// made when the loop reaches it. A socket that cannot be made is not the
/// backend's fault: the loops end there.
fn sockets(
    addrs: &[SocketAddr],
    from: Option<SocketAddr>,
    dial: Dial,
) -> impl Iterator<Item = (SocketAddr, io::Result<Socket>)> + '_ {
    let transparent = dial.from.is_some();
    addrs
        .iter()
        .filter(move |a| from.is_none_or(|f| f.is_ipv4() == a.is_ipv4()))
        .map(move |&addr| (addr, new_socket(addr, from, transparent, dial)))
}

/// A non-blocking socket for `addr`'s family, bound to `from` when given,
/// with IP_TRANSPARENT first when `transparent` (`from` is then not one of
/// this host's addresses); keepalive and MPTCP as `dial` says.
fn new_socket(
    addr: SocketAddr,
    from: Option<SocketAddr>,
    transparent: bool,
    dial: Dial,
) -> io::Result<Socket> {
    // SOCK_NONBLOCK at creation saves the two fcntl calls set_nonblocking makes.
    let kind = Type::STREAM.nonblocking().cloexec();
    let socket = crate::sys::mptcp::stream(Domain::for_address(addr), kind, dial.mptcp)?;
    // Every forwarded socket: no Nagle delay (small messages go out at once),
    // now or before the second write (`nodelay_later`), keepalive on (dead
    // peers are noticed) unless the rule says `keepalive=off`. Accepted
    // sockets get both from their listener.
    if !dial.nodelay_later {
        socket.set_tcp_nodelay(true)?;
    }
    if dial.keepalive {
        socket.set_keepalive(true)?;
    }
    if let Some(from) = from {
        if transparent {
            set_transparent(&socket, from)?;
        }
        socket
            .bind(&SockAddr::from(from))
            .map_err(|e| io::Error::new(e.kind(), format!("bind to {from}: {e}")))?;
    }
    Ok(socket)
}

/// IP_TRANSPARENT (IPV6_TRANSPARENT for an IPv6 `from`) on `socket`, so it
/// may bind `from`, an address this host does not have. Needs
/// CAP_NET_ADMIN or CAP_NET_RAW: the error says so.
pub(crate) fn set_transparent(socket: &Socket, from: SocketAddr) -> io::Result<()> {
    let set = if from.is_ipv4() {
        socket.set_ip_transparent_v4(true)
    } else {
        socket.set_ip_transparent_v6(true)
    };
    set.map_err(|e| {
        let why = if e.kind() == io::ErrorKind::PermissionDenied {
            " (transparent needs CAP_NET_ADMIN or CAP_NET_RAW)"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("IP_TRANSPARENT: {e}{why}"))
    })
}

/// Where a non-blocking connect stands right after it was issued.
enum Started {
    /// Already established (typical on loopback, where the handshake runs
    /// inside the connect call): no need to wait for writability.
    Connected(Async<TcpStream>),
    /// Still in progress: wait with [`finish_connect`].
    InProgress(Async<TcpStream>),
}

/// Issues a non-blocking connect and wraps the socket for the reactor.
///
/// EINPROGRESS does not mean "not yet connected": on loopback the handshake
/// usually completes inside the connect call. It is not asked
/// (getsockopt(SO_ERROR) and getpeername were two system calls per
/// connection): [`finish_connect`] hears the answer from the reactor, in the
/// same `epoll_wait` that brings the client's first bytes.
fn start_connect(socket: Socket, addr: SocketAddr) -> io::Result<Started> {
    let in_progress = issue_connect(&socket, addr)?;
    // Created with SOCK_NONBLOCK: no ioctl(FIONBIO) needed to register it.
    let stream = Async::new_nonblocking(TcpStream::from(socket))?;
    Ok(if in_progress {
        Started::InProgress(stream)
    } else {
        Started::Connected(stream)
    })
}

/// Issues a non-blocking connect of `socket` to `addr`: true while it is
/// still in progress (EINPROGRESS), false if it already completed.
fn issue_connect(socket: &Socket, addr: SocketAddr) -> io::Result<bool> {
    match socket.connect(&SockAddr::from(addr)) {
        Ok(()) => Ok(false),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {
            Ok(true)
        }
        Err(e) => Err(e),
    }
}

/// Waits until an in-progress connect completes or fails.
///
/// A connecting TCP socket reports no writability until the handshake is
/// done (tcp_poll reports nothing in SYN_SENT), and a failed connect
/// reports ERR or HUP with it. So writable without either is connected,
/// with no system call to ask; only a failure asks SO_ERROR why.
async fn finish_connect(stream: Async<TcpStream>) -> io::Result<Async<TcpStream>> {
    stream.writable().await?;
    if stream.hung_up() {
        if let Some(e) = stream.get_ref().take_error()? {
            return Err(e);
        }
        // A failed connect can also show with no pending error: getpeername
        // fails (ENOTCONN) unless it did connect and the peer left since.
        stream.get_ref().peer_addr()?;
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::net::TcpListener;
    use std::sync::Arc;

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// Runs `f` on this thread with an oi reactor of its own: the data
    /// path's sockets and timers are polled only on such a thread.
    fn on_oi<T>(f: impl Future<Output = T>) -> T {
        let reactor = oi_runtime::reactor::Reactor::new().expect("epoll");
        oi_runtime::reactor::block_on(Arc::new(reactor), f)
    }

    /// [`dial_addrs`] from no particular address, keepalive as given.
    async fn connect(
        addrs: &[SocketAddr],
        keepalive: bool,
    ) -> Result<(Async<TcpStream>, SocketAddr), ConnectError> {
        let dial = Dial {
            keepalive,
            ..Dial::default()
        };
        dial_addrs(addrs, None, TIMEOUT, dial).await
    }

    #[test]
    fn connects_to_a_listening_backend() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local_addr");
        let stream = on_oi(connect(&[addr], true)).expect("connect");
        let (stream, reached) = stream;
        assert_eq!(reached, addr);
        assert_eq!(stream.get_ref().peer_addr().expect("peer"), addr);
    }

    #[test]
    fn keepalive_is_set_unless_the_rule_turns_it_off() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local_addr");
        for want in [true, false] {
            let (stream, _) = on_oi(connect(&[addr], want)).expect("connect");
            let got = socket2::SockRef::from(stream.get_ref())
                .keepalive()
                .expect("getsockopt");
            assert_eq!(got, want);
        }
    }

    #[test]
    fn refused_backend_reports_connection_refused_and_next_address_is_tried() {
        // A port that was just free: nothing listens there any more.
        let closed = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind");
        match on_oi(connect(&[closed], true)) {
            Err(ConnectError::Connect(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}")
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("connected to a closed port"),
        }
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let open = listener.local_addr().expect("local_addr");
        let stream = on_oi(connect(&[closed, open], true)).expect("fallback");
        let (stream, reached) = stream;
        assert_eq!(reached, open, "the address that answered is reported");
        assert_eq!(stream.get_ref().peer_addr().expect("peer"), open);
    }

    /// The probe thread's connect (async-io's reactor, no oi reactor on the
    /// thread): from the member's `src`, to the next address when one is
    /// refused.
    #[test]
    fn a_probe_connects_from_the_members_source_address_on_async_io() {
        let closed = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let open = listener.local_addr().expect("local_addr");
        let src: IpAddr = "127.0.0.2".parse().expect("address");
        let (stream, reached) =
            async_io::block_on(for_probe(&[closed, open], Some(src), TIMEOUT)).expect("connect");
        assert_eq!(reached, open);
        let (_, peer) = listener.accept().expect("accept");
        assert_eq!(peer.ip(), src, "the probe did not come from src");
        assert_eq!(stream.get_ref().local_addr().expect("local").ip(), src);
        assert!(
            oi_runtime::reactor::current().is_none(),
            "the probe's thread drives no oi reactor"
        );
    }

    /// A backend whose accept queue is full drops the SYN: the probe's
    /// connect waits in SYN_SENT until its timeout, and says so.
    #[test]
    fn a_probe_connect_nobody_answers_times_out_within_the_probe_timeout() {
        let (addr, _full) = full_listener();
        let limit = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let outcome = async_io::block_on(for_probe(&[addr], None, limit));
        let took = started.elapsed();
        match outcome {
            Err(ConnectError::Connect(e)) => assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}"),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("connected to a full accept queue"),
        }
        assert!(took >= limit, "gave up early: {took:?}");
        assert!(took < limit * 10, "took {took:?}");
    }

    /// A listener with a backlog of 0 whose one queue slot is taken by a
    /// connection nobody accepts: the kernel drops every further SYN.
    /// Returns its address and what keeps it so.
    fn full_listener() -> (SocketAddr, (Socket, TcpStream)) {
        let l = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        l.bind(&SockAddr::from(SocketAddr::from(([127, 0, 0, 1], 0))))
            .expect("bind");
        l.listen(0).expect("listen");
        let addr = l
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("address");
        let filler = TcpStream::connect(addr).expect("the one queue slot");
        (addr, (l, filler))
    }
}
