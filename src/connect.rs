//! Outgoing TCP connections to a rule's backend.

use async_io::{Async, Timer};
use futures_lite::FutureExt;
use socket2::{Domain, SockAddr, SockRef, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// Why a backend connection could not be made.
#[derive(Debug)]
pub enum ConnectError {
    /// The local socket could not be created or bound (rinetd's `local-socket-failed`).
    LocalSocket(io::Error),
    /// Every backend address refused, timed out or failed; the last error is kept.
    Connect(io::Error),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::LocalSocket(e) => write!(f, "cannot create the outgoing socket: {e}"),
            ConnectError::Connect(e) => write!(f, "cannot connect to the backend: {e}"),
        }
    }
}

/// Connects to the first of `addrs` that answers within `timeout` each,
/// from `src` if given (addresses of the other family are skipped).
pub async fn connect(
    addrs: &[SocketAddr],
    src: Option<IpAddr>,
    timeout: Duration,
) -> Result<Async<TcpStream>, ConnectError> {
    let mut last = io::Error::new(io::ErrorKind::AddrNotAvailable, "no backend address");
    for &addr in addrs {
        if let Some(src) = src {
            if src.is_ipv4() != addr.is_ipv4() {
                continue;
            }
        }
        let socket = new_socket(addr, src).map_err(ConnectError::LocalSocket)?;
        let attempt = connect_one(socket, addr);
        let deadline = async {
            Timer::after(timeout).await;
            Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
        };
        match attempt.or(deadline).await {
            Ok(stream) => return Ok(stream),
            Err(e) => {
                log::debug!("connect to {addr} failed: {e}");
                last = e;
            }
        }
    }
    Err(ConnectError::Connect(last))
}

/// A non-blocking socket for `addr`'s family, bound to `src` when given.
fn new_socket(addr: SocketAddr, src: Option<IpAddr>) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), None)?;
    socket.set_nonblocking(true)?;
    if let Some(ip) = src {
        socket.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
    }
    Ok(socket)
}

/// Starts a non-blocking connect and waits until it completes or fails.
async fn connect_one(socket: Socket, addr: SocketAddr) -> io::Result<Async<TcpStream>> {
    match socket.connect(&SockAddr::from(addr)) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
        Err(e) => return Err(e),
    }
    let stream = Async::new(TcpStream::from(socket))?;
    stream.writable().await?;
    if let Some(e) = stream.get_ref().take_error()? {
        return Err(e);
    }
    // A failed connect can also show as writable with no pending error on some kernels.
    stream.get_ref().peer_addr()?;
    Ok(stream)
}

/// Sets the options every forwarded socket gets: no Nagle delay, keepalive on.
pub fn tune(stream: &TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        log::debug!("TCP_NODELAY: {e}");
    }
    if let Err(e) = SockRef::from(stream).set_keepalive(true) {
        log::debug!("SO_KEEPALIVE: {e}");
    }
}
