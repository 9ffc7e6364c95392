//! Unix stream sockets at either end of a TCP rule: binding a listener
//! (clearing a stale socket file first, applying `mode`, removing the file
//! when the listener closes), accepting clients and connecting to a backend.
//!
//! # How a unix stream travels: as a `TcpStream`
//!
//! The pump, its movers, `tcp::open`, `tcp::pumped` and `edge` are typed to
//! `Async<TcpStream>`. A connected unix stream socket is carried in the same
//! type (`TcpStream::from(OwnedFd)`, safe code) rather than making all of
//! them generic, because every call the data path makes on a forwarded
//! socket is the same system call on either kind: `read`/`recv`,
//! `write`/`send`, `shutdown(SHUT_WR)`, `splice` (both are sockets to
//! splice), `recv(MSG_PEEK)`, and readiness through epoll. The invariant
//! that keeps this honest: **no TCP-only call is made on a stream that may
//! be a unix socket.** Audited (every call on a forwarded stream):
//!
//! - `set_nodelay` / `set_keepalive`: TCP sockets inherit both from their
//!   listener (`listen::bind`) or get them in `connect::new_socket`, but
//!   for TCP_NODELAY on a backend dialled with `Dial::nodelay_later`, which
//!   the pump sets before its second write (`Meter::before_write`) only
//!   when `tcp::pumped` saw a backend address in the live entry: a unix
//!   backend never has one. Unix sockets come only from here.
//! - `peer_addr`: only in `connect.rs`, on sockets it created for TCP.
//! - `local_addr`: only in `edge::send_header`, on the client socket of an
//!   IP client; `tcp::open` has no `Origin` for a unix client and sends
//!   it `edge::send_header_without_address` instead.
//! - `accept-proxy` (reading a header, trusting by IP) is not offered to
//!   unix clients (`listen/unix.rs` skips it; the parsers warn).
//! - `take_error`: `SO_ERROR` exists on every socket.

use oi_config::UnixAddr;
use oi_runtime::reactor::{Async, Timer};
use rustix::io::Errno;
use rustix::net::{SocketAddrUnix, SocketFlags};
use std::future::Future;
use std::io;
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

pub(crate) use crate::sys::safe_fs::{stream_socket, SocketFile};

/// The kernel's address for `addr`.
fn socket_addr(addr: &UnixAddr) -> io::Result<SocketAddrUnix> {
    match addr {
        UnixAddr::Path(p) => SocketAddrUnix::new(p.as_path()),
        UnixAddr::Abstract(name) => SocketAddrUnix::new_abstract_name(name.as_bytes()),
    }
    .map_err(io::Error::from)
}

/// A listening unix socket and, for a path (not an abstract name), the
/// file it made, removed when this is dropped.
pub(crate) struct UnixBound {
    /// The listening socket (non-blocking, close-on-exec).
    pub(crate) listener: UnixListener,
    /// The socket file; `None` for an abstract socket, which has none.
    pub(crate) file: Option<SocketFile>,
}

/// Binds and listens on `addr` with `backlog`. For a path (see
/// [`crate::sys::safe_fs::bind_unix`]): a stale socket file (a socket nothing
/// answers on, left by a process that died) is removed first; anything else
/// at the path is refused and left alone: a socket something listens on, a
/// regular file, a directory, a symlink. The file is created with `mode`
/// (the umask is set around `bind`), so no client can connect while it has
/// wider permissions, and nothing is changed by path afterwards.
pub(crate) fn bind(addr: &UnixAddr, mode: Option<u32>, backlog: i32) -> io::Result<UnixBound> {
    let fd = stream_socket()?;
    let file = match addr {
        UnixAddr::Path(path) => Some(crate::sys::safe_fs::bind_unix(&fd, path, mode)?),
        UnixAddr::Abstract(_) => {
            rustix::net::bind(&fd, &socket_addr(addr)?)?;
            None
        }
    };
    rustix::net::listen(&fd, backlog)?;
    Ok(UnixBound {
        listener: UnixListener::from(fd),
        file,
    })
}

/// Accepts one client: the connected stream as the data path carries it
/// (see the module docs), non-blocking and close-on-exec from accept4.
pub(crate) fn accept(listener: &UnixListener) -> io::Result<Async<TcpStream>> {
    let fd = rustix::net::accept_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?;
    Async::new_nonblocking(TcpStream::from(fd))
}

/// First pause before connecting again to a backend whose backlog is full.
const FIRST_RETRY: Duration = Duration::from_millis(1);
/// Longest pause between those attempts.
const LAST_RETRY: Duration = Duration::from_millis(100);

/// Connects to a unix socket backend within `timeout`. A unix connect does
/// not wait in the kernel when non-blocking: it is done, refused, or the
/// listener's backlog is full (EAGAIN), when it is simply tried again, with
/// a growing pause, until `timeout` runs out: the timeout a TCP connect
/// honours bounds this one too.
pub(crate) async fn connect(addr: &UnixAddr, timeout: Duration) -> io::Result<Async<TcpStream>> {
    let fd = connect_fd(addr, timeout, Timer::after).await?;
    Async::new_nonblocking(TcpStream::from(fd))
}

/// A health probe's [`connect`], waiting and registered on async-io's
/// reactor: the probe thread drives no oi reactor (see `oi_runtime`'s notes).
pub(crate) async fn connect_for_probe(
    addr: &UnixAddr,
    timeout: Duration,
) -> io::Result<async_io::Async<TcpStream>> {
    let fd = connect_fd(addr, timeout, async_io::Timer::after).await?;
    async_io::Async::new_nonblocking(TcpStream::from(fd))
}

/// [`connect`]'s loop, pausing with `pause` (a timer of the caller's
/// reactor): the connected socket, non-blocking and close-on-exec.
async fn connect_fd<P: Future<Output = Instant>>(
    addr: &UnixAddr,
    timeout: Duration,
    pause_for: impl Fn(Duration) -> P,
) -> io::Result<OwnedFd> {
    let sockaddr = socket_addr(addr)?;
    let started = Instant::now();
    let mut pause = FIRST_RETRY;
    loop {
        let fd = stream_socket()?;
        match rustix::net::connect(&fd, &sockaddr) {
            Ok(()) => return Ok(fd),
            Err(Errno::AGAIN) if started.elapsed() < timeout => {
                pause_for(pause).await;
                pause = (pause * 2).min(LAST_RETRY);
            }
            Err(Errno::AGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connect timed out (the backend's backlog stayed full)",
                ))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    /// Runs `f` on this thread with an oi reactor of its own: the data
    /// path's sockets and timers are polled only on such a thread.
    fn on_oi<T>(f: impl std::future::Future<Output = T>) -> T {
        let reactor = oi_runtime::reactor::Reactor::new().expect("epoll");
        oi_runtime::reactor::block_on(std::sync::Arc::new(reactor), f)
    }

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "oi-unix-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[test]
    fn a_stale_file_is_replaced_a_live_socket_and_a_regular_file_are_refused() {
        let d = dir();
        let path = d.join("s.sock");
        // Stale: bound, never listening, closed.
        drop(std::os::unix::net::UnixListener::bind(&path).expect("first"));
        assert!(path.exists(), "the stale file is there");
        let addr = UnixAddr::Path(path.clone());
        let bound = bind(&addr, Some(0o640), 16).expect("a stale file is replaced");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        let again = bind(&addr, None, 16).err().expect("live socket");
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse, "{again}");
        drop(bound);
        assert!(!path.exists(), "removed when the listener closes");
        std::fs::write(&path, b"keep me").expect("regular file");
        let refused = bind(&addr, None, 16).err().expect("a regular file");
        assert!(refused.to_string().contains("is not a socket"), "{refused}");
        assert_eq!(std::fs::read(&path).expect("still there"), b"keep me");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_backend_whose_queue_stays_full_times_out_within_the_connect_timeout() {
        let d = dir();
        let path = d.join("full.sock");
        // Backlog 0: the listener queues one connection and refuses more with EAGAIN.
        let l = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)
            .expect("socket");
        l.bind(&socket2::SockAddr::unix(&path).expect("addr"))
            .expect("bind");
        l.listen(0).expect("listen");
        let addr = UnixAddr::Path(path);
        let mut queued = Vec::new();
        // Bounded: the queue is full after a connection or two.
        for _ in 0..8 {
            let fd = stream_socket().expect("socket");
            match rustix::net::connect(&fd, &socket_addr(&addr).expect("addr")) {
                Ok(()) => queued.push(fd),
                Err(Errno::AGAIN) => break,
                Err(e) => panic!("filling the queue: {e}"),
            }
        }
        let limit = Duration::from_millis(200);
        let started = Instant::now();
        let e = on_oi(connect(&addr, limit)).expect_err("queue full");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(
            started.elapsed() >= limit,
            "gave up early: {:?}",
            started.elapsed()
        );
        assert!(
            started.elapsed() < limit * 10,
            "took {:?}",
            started.elapsed()
        );
        drop((l, queued));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn connects_and_carries_bytes_through_the_tcp_stream_type() {
        let d = dir();
        let addr = UnixAddr::Path(d.join("b.sock"));
        let bound = bind(&addr, None, 16).expect("bind");
        bound.listener.set_nonblocking(false).expect("blocking");
        on_oi(async {
            let mut stream = connect(&addr, Duration::from_secs(5))
                .await
                .expect("connect");
            let (mut server, _) = bound.listener.accept().expect("accept");
            futures_lite::AsyncWriteExt::write_all(&mut stream, b"hi")
                .await
                .expect("write");
            let mut b = [0u8; 2];
            server.read_exact(&mut b).expect("read");
            assert_eq!(&b, b"hi");
            server.write_all(b"yo").expect("write back");
            futures_lite::AsyncReadExt::read_exact(&mut stream, &mut b)
                .await
                .expect("read");
            assert_eq!(&b, b"yo");
        });
        // The health probe's connect, on async-io's reactor.
        let mut probe = async_io::block_on(connect_for_probe(&addr, Duration::from_secs(5)))
            .expect("the probe's connect");
        let (mut server, _) = bound.listener.accept().expect("accept the probe");
        async_io::block_on(futures_lite::AsyncWriteExt::write_all(&mut probe, b"ok"))
            .expect("probe write");
        let mut b = [0u8; 2];
        server.read_exact(&mut b).expect("read the probe");
        assert_eq!(&b, b"ok");
        let missing = UnixAddr::Path(d.join("none.sock"));
        let e = on_oi(connect(&missing, Duration::from_secs(5))).expect_err("no socket");
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
