//! UDP forwarding. (Skeleton: the association engine lands with issue 6.)

use crate::server::{Route, Shared};
use arc_swap::ArcSwap;
use async_io::Async;
use smol::Executor;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;

/// Serves a `/udp` listener.
pub async fn serve(
    _ex: Arc<Executor<'static>>,
    socket: Async<UdpSocket>,
    _route: Arc<ArcSwap<Route>>,
    _shared: Arc<Shared>,
) {
    log::error!(
        "UDP forwarding is not implemented yet; {:?} is bound but idle",
        socket.get_ref().local_addr()
    );
    futures_lite::future::pending::<()>().await
}

/// Forwards one TCP client to a `/udp` backend.
pub async fn tcp_to_udp(
    _client: Async<TcpStream>,
    peer: SocketAddr,
    _route: Arc<Route>,
    _shared: Arc<Shared>,
) {
    log::error!("{peer}: TCP to UDP forwarding is not implemented yet");
}
