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
mod handed;
mod mover;
mod pump;
pub(crate) mod sni;
pub(crate) mod splice;
mod throttle;

use crate::connect::{self, ConnectError};
use crate::edge::{self, Origin};
use crate::logfile::Event;
use crate::peer::Peer;
use crate::reactor::Async;
use crate::route::{Bytes, Route};
use crate::shared::Shared;
use crate::stats::{ConnKind, ConnState, ConnectFailure, Registered, RuleStats};
use pump::{Limits, Pools, Pump, PumpOutcome, Side};
use std::future::Future;
use std::net::TcpStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Forwards one admitted client to the rule's backend, from the `opened`
/// log line to the `done-*` one. `origin` is who the client is (the peer, or
/// what a PROXY header said) and what a PROXY header sent on says; `None`
/// for a client of a unix socket listener, which has no address.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would hold its arguments twice (see the body)"
)]
pub(crate) fn forward(
    client: Async<TcpStream>,
    origin: Option<&Origin>,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
) -> impl Future<Output = ()> + '_ {
    // A function returning an async block, not an async fn: an async fn
    // keeps its arguments beside the locals it moves them into, in every
    // idle connection's task (issue 23).
    async move {
        let peer = origin.map_or(Peer::Unix, |o| Peer::Ip(o.client));
        let ip = peer.client();
        let started = handed::now();
        // Counted as unix when either side is a unix socket: rinetd-uv counts a
        // TCP client forwarded to a unix backend as unix (its status file's
        // `total_unix`), and a unix listener's clients are unix too.
        let kind = match (peer, &route.unix_backend) {
            (Peer::Ip(_), None) => ConnKind::Tcp,
            _ => ConnKind::Unix,
        };
        // Listed and counted until this function returns (after the sockets it
        // declares later have closed, as locals drop in reverse order).
        let live = stats.register(kind, peer);
        // A listener rules share by server name: the ClientHello picks the
        // rule (peeked, so every byte still reaches the backend).
        let (route, server_name) = match route.sni.clone() {
            None => (route, None),
            Some(names) => {
                match Box::pin(sni::choose(&client, &names, &stats, &live, peer)).await {
                    Ok(routed) => routed,
                    Err(name) => {
                        let mut line = route.event(ip, Event::SniUnrouted, Bytes::NONE);
                        line.server_name = name;
                        return shared.log.log(line);
                    }
                }
            }
        };
        // Every log line of the connection names the server name it was routed by.
        let event = |event: Event, bytes: Bytes| {
            let mut line = route.event(peer.client(), event, bytes);
            line.server_name = server_name.clone();
            line
        };
        shared.log.log(event(Event::Opened, Bytes::NONE));
        // Watched from now on: the wait for the backend's connect also
        // hears the client's first bytes (one `epoll_wait` per connection
        // fewer, benches/syscalls.sh).
        client.register_now();
        let timeout = route.connect_timeout(shared.settings.connect_timeout);
        let counted = |e: &std::io::Error| stats.connect_failed(ConnectFailure::of(e));
        // A unix client has no address: iphash and affinity see them all as one.
        let key = ip.ip().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
        let dial = route.dial(origin.map(|o| o.client));
        let connected = Box::pin(connect::through_pool(
            &route.pool,
            key,
            timeout,
            dial,
            counted,
        ))
        .await
        .map(|c| (c.stream, c.addr, c.lease));
        // `lease` counts the connection on its backend (least connections) until it ends.
        let (backend, backend_addr, lease) = match connected {
            Ok(c) => c,
            Err(e) => {
                let ev = match &e {
                    ConnectError::LocalSocket(why) => {
                        shared.local_socket_failed(&route.names.connect_host, &peer, why);
                        stats.connect_failed(ConnectFailure::Other);
                        Event::LocalSocketFailed
                    }
                    // rinetd logs a refused or unreachable backend this way;
                    // parsers count on it. Each failed attempt was counted.
                    ConnectError::Connect(_) => {
                        log::debug!("{peer} -> {}: {e}", route.names.connect_host);
                        Event::DoneLocalClosed
                    }
                };
                return shared.log.log(event(ev, Bytes::NONE));
            }
        };
        match backend_addr {
            Some(addr) => live.connected(addr),
            // A unix backend has no per-address counters.
            None => live.set_state(ConnState::Open),
        }
        // The PROXY header goes out before the pump starts, so it precedes every
        // client byte whether the pump then splices or copies.
        if let Some(version) = route.send_proxy {
            let sent = match origin {
                Some(origin) => {
                    Box::pin(edge::send_header(&client, &backend, version, *origin)).await
                }
                None => Box::pin(edge::send_header_without_address(&backend, version)).await,
            };
            if let Err(e) = sent {
                log::debug!("{peer} -> {}: PROXY header: {e}", route.names.connect_host);
                return shared.log.log(event(Event::DoneLocalClosed, Bytes::NONE));
            }
        }
        // Both sockets already have TCP_NODELAY and SO_KEEPALIVE: the client's
        // from its listener, the backend's from `connect`.
        let pools = Pools {
            buffers: &shared.buffers,
            pipes: &shared.pipes,
        };
        let splice = splice::use_splice(route.splice(shared.settings.splice));
        let pump = Pump::new(
            &client,
            &backend,
            pools,
            splice,
            shared.settings.half_close_idle,
            Limits {
                directions: route.rates.limits(&stats.rates, ip.ip()),
                stats: &stats,
            },
        );
        let mut published = Published { pump, live: &live };
        // `oi upgrade` may pause the pump and give the connection to the new oi,
        // which then logs its end.
        let ran = handed::run(
            &mut published,
            &client,
            &backend,
            &shared,
            &route.bind,
            started,
        )
        .await;
        let Some(outcome) = ran else {
            log::debug!(
                "{peer} -> {}: handed over to the new oi",
                route.names.connect_host
            );
            return;
        };
        live.publish(outcome.from_client, outcome.to_client, ConnState::Open);
        let ev = match outcome.first_closed {
            Side::Backend => Event::DoneLocalClosed,
            Side::Client => Event::DoneRemoteClosed,
        };
        // One line per connection at debug level: who, which rule, which backend
        // address answered, the bytes, and how it ended.
        if log::log_enabled!(log::Level::Debug) {
            let ended = match &outcome.error {
                Some(e) => format!("{}, {e}", ev.as_str()),
                None => ev.as_str().to_string(),
            };
            // Read back from the live entry: a copy kept across the pump
            // would add its bytes to every idle connection.
            let reached = match live.backend() {
                Some(addr) => format!("{addr}/tcp"),
                None => lease.member().label().to_string(),
            };
            log::debug!(
                "{peer} -> {reached} ({}:{} -> {}:{}): {} bytes from the client, {} to it; {ended}",
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
        shared.log.log(event(ev, bytes));
    }
}

/// Forwards a connection the previous oi handed over (`oi upgrade`): its
/// unsent bytes go out first, then it is pumped as [`forward`] pumps, from
/// the byte counts it had; its end is logged here, as rinetd logs one.
/// Counted on its backend's load as if chosen here.
pub(crate) async fn adopted(
    a: crate::handover::park::Offered,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
) {
    let crate::handover::park::Flow::Stream { client, backend } = a.flow else {
        return log::warn!("upgrade: a connection on {} is not a stream", route.bind);
    };
    let (client, backend) = match (
        Async::new(TcpStream::from(client)),
        Async::new(TcpStream::from(backend)),
    ) {
        (Ok(c), Ok(b)) => (c, b),
        (Err(e), _) | (_, Err(e)) => {
            return log::warn!(
                "upgrade: cannot take up a connection on {}: {e}",
                route.bind
            )
        }
    };
    // A unix socket has no IP peer: such a client is a unix one.
    let peer = client.get_ref().peer_addr().map_or(Peer::Unix, Peer::Ip);
    let ip = peer.client();
    let kind = match (peer, &route.unix_backend) {
        (Peer::Ip(_), None) => ConnKind::Tcp,
        _ => ConnKind::Unix,
    };
    let live = stats.register_resumed(kind, peer);
    // Counted on its backend's load (least connections) while it lasts.
    let _lease = match backend.get_ref().peer_addr() {
        Ok(addr) => {
            live.reconnected(addr);
            route.pool.lease_of(addr)
        }
        Err(_) => {
            live.set_state(ConnState::Open);
            None
        }
    };
    log::debug!(
        "{peer}: taken over on {} (open since {} s after the epoch; {} + {} unsent bytes)",
        route.bind,
        a.started,
        a.up.unsent.len(),
        a.down.unsent.len()
    );
    let pools = Pools {
        buffers: &shared.buffers,
        pipes: &shared.pipes,
    };
    let splice = splice::use_splice(route.splice(shared.settings.splice));
    let mut pump = Pump::new(
        &client,
        &backend,
        pools,
        splice,
        shared.settings.half_close_idle,
        Limits {
            directions: route.rates.limits(&stats.rates, ip.ip()),
            stats: &stats,
        },
    );
    pump.adopt(a.up.into(), a.down.into());
    let mut published = Published { pump, live: &live };
    let rule = &route.bind;
    let ran = handed::run(&mut published, &client, &backend, &shared, rule, a.started).await;
    let Some(outcome) = ran else {
        return;
    };
    live.publish(outcome.from_client, outcome.to_client, ConnState::Open);
    let ev = match outcome.first_closed {
        Side::Backend => Event::DoneLocalClosed,
        Side::Client => Event::DoneRemoteClosed,
    };
    let bytes = Bytes {
        from_client: outcome.from_client,
        to_client: outcome.to_client,
    };
    shared.log.log(route.event(ip, ev, bytes));
}

/// A pump that, after each poll, stores its byte totals and half-close
/// state into the connection's live entry when they changed: two relaxed
/// stores to the connection's own cache line per poll that moved bytes,
/// never a shared counter, so a long transfer's bytes show while it runs.
/// What was published is read back from the entry (its own cache line, one
/// writer) rather than kept here: a copy would add its bytes to every
/// connection's state.
struct Published<'a> {
    /// The connection's pump.
    pump: Pump<'a>,
    /// Its live entry.
    live: &'a Registered,
}

impl Future for Published<'_> {
    type Output = PumpOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PumpOutcome> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.pump).poll(cx);
        if polled.is_pending() {
            let (from, to, client_done, backend_done) = this.pump.progress();
            let state = match (client_done, backend_done) {
                (true, false) => ConnState::ClientClosed,
                (false, true) => ConnState::BackendClosed,
                _ => ConnState::Open,
            };
            if this.live.published() != (from, to, state) {
                this.live.publish(from, to, state);
            }
        }
        polled
    }
}
