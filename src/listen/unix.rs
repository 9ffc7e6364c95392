//! The unix socket listener kind of the accept driver ([`super::driver`]),
//! and what a unix client goes through once admitted and placed: nothing but
//! forwarding. No ACL check, per-client limit or `accept-proxy`: a unix
//! client has no address to match, count or trust (the parsers and
//! `--check` say so); the socket file's mode is the access control.

use super::driver::{Acceptor, Admitted};
use crate::net::peer::{Client, Peer};
use crate::sys::unix::SocketFile;
use oi_config::Proto;
use oi_runtime::reactor::Async;
use std::future::Future;
use std::io;
use std::net::TcpStream;
use std::os::unix::net::UnixListener;

/// A unix socket listener as the accept driver sees it. One loop per
/// listener: a unix socket has no `SO_REUSEPORT` group.
pub(super) struct UnixAcceptor {
    /// The listening socket. Declared before `file`, so dropped first: the
    /// file goes only once nothing can accept on it.
    pub(super) listener: std::sync::Arc<Async<UnixListener>>,
    /// The socket file, removed when the loop is dropped (the listener
    /// closes: exit, or a reload without the rule); `None` for an abstract socket.
    #[expect(dead_code, reason = "held only for its Drop, which removes the file")]
    pub(super) file: Option<SocketFile>,
}

/// A unix client: it has no address (its socket is unnamed).
#[derive(Clone, Copy, Debug)]
pub(super) struct UnixPeer;

impl From<UnixPeer> for Peer {
    fn from(_: UnixPeer) -> Peer {
        Peer::Unix
    }
}

impl Acceptor for UnixAcceptor {
    type Peer = UnixPeer;

    const NOBODY: Client = Client::Unix;

    async fn accept(&self) -> io::Result<(Async<TcpStream>, UnixPeer)> {
        let stream = self.listener.read_with(crate::sys::unix::accept).await?;
        Ok((stream, UnixPeer))
    }

    fn serve(client: Admitted<UnixPeer>) -> impl Future<Output = ()> + Send + 'static {
        connection(client)
    }
}

/// Serves one unix client: forwarded as a TCP client is, from `unix-client`.
fn connection(admitted: Admitted<UnixPeer>) -> impl Future<Output = ()> + Send + 'static {
    let Admitted {
        stream: client,
        route,
        shared,
        stats,
        guards,
        ..
    } = admitted;
    // Boxed, and on the heap only until the pump starts (see `tcp::Open`).
    let setup = match route.backend_proto {
        // No origin: a unix client has no address. The guards drop after
        // both sockets (see `tcp::Open`).
        Proto::Tcp => Some(Box::pin(crate::tcp::open(
            guards, client, None, route, shared, stats,
        ))),
        // The parsers refuse a unix listener with a UDP backend.
        Proto::Udp => {
            log::error!(
                "{}: a unix socket listener cannot forward to UDP",
                route.bind
            );
            None
        }
    };
    async move {
        // `let else`, not `if let`: see `accept::connection`.
        let Some(setup) = setup else {
            return;
        };
        let Some(open) = setup.await else {
            return;
        };
        crate::tcp::pumped(open).await;
    }
}
