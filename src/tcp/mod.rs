//! TCP→TCP forwarding: connect to the backend, then move bytes both ways
//! until both directions are done.
//!
//! - `pump.rs`: the per-connection future, two directions each
//!   `Running → ShuttingDown → Done` (half-close aware);
//! - `copy.rs` and `splice.rs`: the two ways a direction moves bytes, through
//!   a pooled buffer or through a pooled pipe with splice(2), side by side and
//!   speaking the vocabulary of `mover.rs`.
//!
//! The accept loop (`listen`) has already placed the connection on a thread
//! and checked the ACLs.

mod copy;
mod mover;
mod pump;
pub(crate) mod splice;

use crate::connect::{self, ConnectError};
use crate::edge::{self, Origin};
use crate::logfile::Event;
use crate::route::{client_ip, Bytes, Route};
use crate::shared::Shared;
use async_io::Async;
use pump::{Pools, Pump, Side};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

/// Forwards one admitted client to the rule's backend, from the `opened`
/// log line to the `done-*` one. `origin` is who the client is (the peer, or
/// what a PROXY header said) and what a PROXY header sent on says.
pub(crate) async fn forward(
    client: Async<TcpStream>,
    origin: Origin,
    route: Arc<Route>,
    shared: Arc<Shared>,
) {
    let peer: SocketAddr = origin.client;
    let ip = client_ip(peer);
    shared.log.log(route.event(ip, Event::Opened, Bytes::NONE));
    let timeout = shared.settings.connect_timeout;
    let backend = match connect::connect(&route.backends, route.src, timeout).await {
        Ok(b) => b,
        Err(e) => {
            log::debug!("{peer} -> {}: {e}", route.names.connect_host);
            let ev = match e {
                ConnectError::LocalSocket(_) => Event::LocalSocketFailed,
                // rinetd logs a refused or unreachable backend this way; parsers count on it.
                ConnectError::Connect(_) => Event::DoneLocalClosed,
            };
            return shared.log.log(route.event(ip, ev, Bytes::NONE));
        }
    };
    // The PROXY header goes out before the pump starts, so it precedes every
    // client byte whether the pump then splices or copies.
    if let Some(version) = route.send_proxy {
        if let Err(e) = edge::send_header(&client, &backend, version, origin).await {
            log::debug!("{peer} -> {}: PROXY header: {e}", route.names.connect_host);
            return shared
                .log
                .log(route.event(ip, Event::DoneLocalClosed, Bytes::NONE));
        }
    }
    // Both sockets already have TCP_NODELAY and SO_KEEPALIVE: the client's
    // from its listener, the backend's from `connect`.
    let pools = Pools {
        buffers: &shared.buffers,
        pipes: &shared.pipes,
    };
    let splice = splice::use_splice(route.options.splice, shared.settings.splice);
    let outcome = Pump::new(
        &client,
        &backend,
        pools,
        splice,
        shared.settings.half_close_idle,
    )
    .await;
    let ev = match outcome.first_closed {
        Side::Backend => Event::DoneLocalClosed,
        Side::Client => Event::DoneRemoteClosed,
    };
    // One line per connection at debug level: who, which rule, which backend
    // address answered, the bytes, and how it ended.
    if log::log_enabled!(log::Level::Debug) {
        let backend_addr = backend.get_ref().peer_addr().ok();
        let ended = match &outcome.error {
            Some(e) => format!("{}, {e}", ev.as_str()),
            None => ev.as_str().to_string(),
        };
        log::debug!(
            "{peer} -> {}/tcp ({}:{} -> {}:{}): {} bytes from the client, {} to it; {ended}",
            backend_addr.map_or_else(|| "?".into(), |a| a.to_string()),
            route.names.bind_host,
            route.names.bind_port,
            route.names.connect_host,
            route.names.connect_port,
            outcome.from_client,
            outcome.to_client,
        );
    }
    let bytes = Bytes {
        from_client: outcome.from_client,
        to_client: outcome.to_client,
    };
    shared.log.log(route.event(ip, ev, bytes));
}
