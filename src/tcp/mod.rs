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
//!
//! Hand-over state declared here: across `oi upgrade` a connection carries
//! its two sockets, each direction's unsent bytes, half-close and byte
//! count and own bandwidth buckets (`pump::Half`, converted to the wire's
//! in `handed.rs`), its age (its live entry's) and the server name that
//! routed it. One accepted here ([`open`])
//! and one handed over ([`adopted`]) both run as one [`Open`] in [`pumped`].

mod copy;
mod handed;
mod mover;
mod pump;
pub(crate) mod sni;
pub(crate) mod splice;

use crate::backends::connect::{self, ConnectError};
use crate::backends::Lease;
use crate::logfile::Event;
use crate::net::peer::Peer;
use crate::route::admit::{admit, Counts};
use crate::route::edge::{self, Origin};
use crate::route::limits::Held;
use crate::route::shared::Shared;
use crate::route::{Bytes, Route};
use crate::stats::{
    ConnKind, ConnState, ConnectFailure, Registered, RuleStats, TlsFailure, TlsSide,
};
use oi_runtime::reactor::Async;
use pump::{Half, Limits, Pump, PumpOutcome, Side};
use std::future::Future;
use std::net::TcpStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// What a TCP→TCP connection keeps while its pump runs: all that the
/// pump, a hand-over and the last log lines need, and nothing that can be
/// read back from the live entry (client, server name, backend address) or
/// that only the setup needed (the origin, the connect's state).
///
/// Why: before this split, one future ran the connection from its
/// accept to its end and kept every local of its setup (the PROXY header's
/// `Origin`, the connect's result, copies of the peer) beside the pump, 1,064
/// bytes per idle connection in the release build. The setup now runs in a
/// boxed future, on the heap only until the pump starts, and hands this over.
///
/// Fields drop in order: both sockets close before `guards` (the limits'
/// slots) let go, so a connection is counted until its sockets are closed.
pub(crate) struct Open<G> {
    /// The client's socket.
    client: Async<TcpStream>,
    /// The backend's socket.
    backend: Async<TcpStream>,
    /// Listed and counted until the connection ends; also where its log
    /// lines read the client, server name and backend address from.
    live: Registered,
    /// Counts the connection on its backend (least connections) until it
    /// ends; `None` for a handed-over connection whose backend the rule no
    /// longer lists.
    lease: Option<Lease>,
    /// The rule that serves it (the one its server name chose, on a
    /// listener shared by server name).
    route: Arc<Route>,
    /// Settings, pools, the log and the hand-over's parking.
    shared: Arc<Shared>,
    /// A connection handed over by the previous oi: what its directions
    /// had not sent yet, and how far they were (boxed: one word in every
    /// other connection).
    resumed: Option<Box<(Half, Half)>>,
    /// The TLS oi speaks to the client (`tls-cert`) and to the backend
    /// (`tls-connect`), both handshakes done; such a connection runs
    /// [`crate::tls::pump`] (boxed: one word in every other connection).
    tls: Option<Box<Sessions>>,
    /// Held until both sockets are closed (the limits' slots).
    #[expect(dead_code, reason = "held only for its Drop, after the sockets'")]
    guards: G,
}

/// rustls's state of a connection oi speaks TLS on, one per side.
pub(crate) struct Sessions {
    /// Towards the client; `None`: plain.
    client: Option<rustls::Connection>,
    /// Towards the backend; `None`: plain.
    backend: Option<rustls::Connection>,
}

/// A connection's setup: its `opened` line, the server name (on a listener
/// shared by server name), the backend's connect, the PROXY header sent on.
/// `origin` is who the client is (the peer, or what a PROXY header said) and
/// what a PROXY header sent on says; `None` for a client of a unix socket
/// listener, which has no address. `None` when it ended here (its log line
/// written); else what [`pumped`] runs.
///
/// Run boxed (see [`Open`]). `guards` is the first argument so that, when
/// the connection ends here, it drops after the client socket (an async
/// fn's arguments drop in reverse order).
pub(crate) async fn open<G: Guards>(
    mut guards: G,
    client: Async<TcpStream>,
    origin: Option<Origin>,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
) -> Option<Open<G>> {
    let peer = origin.map_or(Peer::Unix, |o| Peer::Ip(o.client));
    let ip = peer.client();
    let kind = conn_kind(peer, &route);
    // Listed and counted until the connection ends (after its sockets have
    // closed: locals drop in reverse order, and `Open` drops it after them).
    // On a listener rules share by server name, counted opened only once
    // routed, on the rule its name chose (`Registered::route_to`).
    let mut live = match route.sni {
        None => stats.register(kind, peer),
        Some(_) => stats.register_unrouted(kind, peer),
    };
    // A listener rules share by server name: the ClientHello picks the
    // rule (peeked, so every byte still reaches the backend), and that rule
    // admits the client, with its own ACL and limits (`route::admit`; a unix
    // listener is never shared by name). A refusal counts on that rule,
    // where its allow/deny or limit is.
    let (route, server_name) = match route.sni.clone() {
        None => (route, None),
        Some(names) => {
            let chosen = sni::choose(&client, &names, live.rule(), &live, peer);
            let (routed, name) = match Box::pin(chosen).await {
                Ok(routed) => routed,
                Err(name) => {
                    // No rule here is for that name, so neither is any
                    // certificate: a TLS listener counts it as such.
                    if matches!(&route.tls, Ok(Some(t)) if t.server.is_some()) {
                        live.rule()
                            .tls_failed(TlsSide::Client, TlsFailure::UnknownName);
                    }
                    let mut line = route.event(ip, Event::SniUnrouted, Bytes::NONE);
                    line.server_name = name;
                    shared.log.log(line);
                    return None;
                }
            };
            if let Some(origin) = origin {
                let client = crate::route::client_ip(origin.client);
                let held = guards.held();
                if let Err(refused) = admit(&routed, Counts::Routed, &shared.limits, held, client) {
                    log::debug!("{peer}: {} on {}", refused.as_str(), routed.bind);
                    routed
                        .stats
                        .get()
                        .unwrap_or(live.rule())
                        .refused(refused.event());
                    let mut line = routed.event(ip, refused.event(), Bytes::NONE);
                    line.server_name = name;
                    shared.log.log(line);
                    return None;
                }
            }
            (routed, name)
        }
    };
    if let Some(counters) = route.stats.get() {
        live.route_to(counters);
    }
    let stats = live.rule();
    // Every log line of the connection names the server name it was routed by.
    let event = |event: Event, bytes: Bytes| {
        let mut line = route.event(ip, event, bytes);
        line.server_name = server_name.clone();
        line.tls_subject = live.tls_subject();
        line.flow = Some(live.flow());
        line
    };
    shared.log.log_with(|| event(Event::Opened, Bytes::NONE));
    // Watched from now on: the wait for the backend's connect also
    // hears the client's first bytes (one `epoll_wait` per connection
    // fewer, benches/syscalls.sh).
    client.register_now();
    // TLS from the client ends here, before the backend is dialled: a
    // client that never finishes its handshake costs no backend connection.
    let tls = match &route.tls {
        Ok(tls) => tls.clone(),
        Err(why) => {
            log::warn!(
                "{peer}: rule {} has no usable TLS files ({why}): closed",
                route.bind
            );
            shared
                .log
                .log(event(Event::TlsHandshakeFailed, Bytes::NONE));
            return None;
        }
    };
    let client_tls = match &tls {
        None => None,
        Some(t) => match Box::pin(crate::tls::accept(t, &client)).await {
            Ok(conn) => {
                if let Some(c) = &conn {
                    stats.tls_done(TlsSide::Client, crate::tls::seen::resumed(c));
                    if let Some(subject) = crate::tls::seen::client_subject(c) {
                        live.client_subject(subject.into());
                    }
                }
                conn
            }
            Err(why) => {
                stats.tls_failed(TlsSide::Client, why.class);
                log::info!(reason = "tls-handshake-failed"; "{peer}: TLS handshake with the client on {}: {why}", route.bind);
                shared
                    .log
                    .log(event(Event::TlsHandshakeFailed, Bytes::NONE));
                return None;
            }
        },
    };
    // A verified client certificate the rule's subject or issuer lists do
    // not admit: closed before the backend is dialled, counted as refused.
    if let (Some(t), Some(conn)) = (&tls, &client_tls) {
        if let Err(who) = crate::tls::admits_client(t, conn) {
            log::info!(reason = "tls-subject-denied"; "{peer}: client certificate not allowed on {}: {who}", route.bind);
            stats.refused(Event::TlsSubjectDenied);
            shared.log.log(event(Event::TlsSubjectDenied, Bytes::NONE));
            return None;
        }
    }
    let timeout = route.connect_timeout(shared.settings.connect_timeout);
    let counted = |e: &std::io::Error| stats.connect_failed(ConnectFailure::of(e));
    // A unix client has no address: iphash and affinity see them all as one.
    let key = ip.ip().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
    let mut dial = route.dial(origin.map(|o| o.client));
    dial.nodelay_later = nodelay_later(&route);
    // Not boxed apart: this whole setup is (see `Open`).
    let connected = connect::through_pool(&route.pool, key, timeout, dial, counted).await;
    let (backend, lease) = match connected {
        Ok(c) => {
            match c.addr {
                Some(addr) => live.connected(addr),
                // A unix backend has no per-address counters.
                None => live.set_state(ConnState::Open),
            }
            (c.stream, c.lease)
        }
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
            shared.log.log(event(ev, Bytes::NONE));
            return None;
        }
    };
    // The PROXY header goes out before the pump starts, so it precedes every
    // client byte whether the pump then splices or copies.
    if let Some(version) = route.send_proxy {
        let sent = match origin {
            Some(origin) => Box::pin(edge::send_header(&client, &backend, version, origin)).await,
            None => Box::pin(edge::send_header_without_address(&backend, version)).await,
        };
        if let Err(e) = sent {
            log::debug!("{peer} -> {}: PROXY header: {e}", route.names.connect_host);
            shared.log.log(event(Event::DoneLocalClosed, Bytes::NONE));
            return None;
        }
    }
    // TLS to the backend begins once it has answered (after a PROXY
    // header, which the backend reads before its handshake, as stunnel's).
    let backend_tls = match &tls {
        None => None,
        Some(t) => {
            let deadline = timeout;
            // Verified for its own host name (a pool's backends may differ).
            let which = lease.member().backend();
            match Box::pin(crate::tls::connect(t, &backend, deadline, which)).await {
                Ok(conn) => {
                    if let Some(c) = &conn {
                        stats.tls_done(TlsSide::Backend, crate::tls::seen::resumed(c));
                    }
                    conn
                }
                Err(why) => {
                    stats.tls_failed(TlsSide::Backend, why.class);
                    log::warn!(
                        reason = "tls-backend-failed";
                        "{peer} -> {}: TLS to the backend failed: {why}",
                        route.names.connect_host
                    );
                    shared.log.log(event(Event::TlsBackendFailed, Bytes::NONE));
                    return None;
                }
            }
        }
    };
    let tls = (client_tls.is_some() || backend_tls.is_some()).then(|| {
        Box::new(Sessions {
            client: client_tls,
            backend: backend_tls,
        })
    });
    Some(Open {
        client,
        backend,
        live,
        lease: Some(lease),
        route,
        shared,
        resumed: None,
        tls,
        guards,
    })
}

/// What a connection holds until its sockets are closed (the limits' slots,
/// with the thread's count on a unix listener's connections), and where
/// the rule a server name chose adds its own.
pub(crate) trait Guards {
    /// The limits' slots.
    fn held(&mut self) -> &mut Held;
}

impl Guards for Held {
    fn held(&mut self) -> &mut Held {
        self
    }
}

impl Guards for (oi_runtime::Placed, Held) {
    fn held(&mut self) -> &mut Held {
        &mut self.1
    }
}

/// How a connection from `peer` on `route` is counted: as unix when either
/// side is a unix socket. rinetd-uv counts a TCP client forwarded to a unix
/// backend as unix (its status file's `total_unix`), and a unix listener's
/// clients are unix too.
fn conn_kind(peer: Peer, route: &Route) -> ConnKind {
    match (peer, &route.unix_backend) {
        (Peer::Ip(_), None) => ConnKind::Tcp,
        _ => ConnKind::Unix,
    }
}

/// Whether a rule's backend sockets are dialled without TCP_NODELAY, for
/// the pump to set before its second write (`connect::Dial::nodelay_later`):
/// one setsockopt fewer per connection that sends its backend one burst
/// (`benches/syscalls.sh`). Not with a PROXY header, which is a first
/// write of its own before the pump's.
fn nodelay_later(route: &Route) -> bool {
    route.send_proxy.is_none()
}

/// Pumps an [`Open`] connection to its end and logs it (its `done-*`
/// line), or gives it to the new oi on `oi upgrade` (which then logs its
/// end). A function returning an async block that captures `open` once and
/// borrows it in place: everything an idle connection's task holds is
/// `open`, the pump and the hand-over's hook.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would hold `open` twice (its argument and its local)"
)]
pub(crate) fn pumped<G: Send + Sync>(mut open: Open<G>) -> impl Future<Output = ()> + Send {
    async move {
        if let Some(sessions) = open.tls.take() {
            // Boxed: rustls's state and the TLS pump stay out of every
            // other connection's future (`an_accepted_connections_future_stays_small`).
            let outcome = Box::pin(tls_pumped(&open, sessions)).await;
            ended(&open, outcome);
            return;
        }
        // Made in a block: what only the making needs is not kept across
        // the pump's await beside it.
        let mut published = {
            let resumed = open.resumed.take();
            let live = &open.live;
            let stats = live.rule();
            let ip = live.client().client();
            // Both sockets already have SO_KEEPALIVE (the client's from
            // its listener, the backend's from `connect`), and the client
            // has TCP_NODELAY from its listener. A TCP backend dialled with
            // `nodelay_later` gets TCP_NODELAY from the pump before its
            // second write; so does a handed-over one, which the old oi may
            // have dialled so.
            let nagle =
                live.backend().is_some() && (resumed.is_some() || nodelay_later(&open.route));
            let shared = &*open.shared;
            let splice = splice::use_splice(open.route.splice(shared.settings.splice));
            let pump = Pump::new(
                &open.client,
                &open.backend,
                shared,
                splice,
                Limits {
                    directions: open.route.rates.limits(&stats.rates, ip.ip()),
                    stats,
                },
                nagle,
            );
            let mut published = Published { pump, live };
            if let Some(halves) = resumed {
                let (up, down) = *halves;
                published.pump.adopt(up, down);
            }
            published
        };
        // `oi upgrade` may pause the pump and give the connection to the new oi,
        // which then logs its end.
        let ran = handed::run(&mut published, &open).await;
        let live = &open.live;
        let Some(outcome) = ran else {
            live.handed_on();
            log::debug!(
                "{} -> {}: handed over to the new oi",
                live.client(),
                open.route.names.connect_host
            );
            return;
        };
        ended(&open, outcome);
    }
}

/// Logs the end of a pumped connection (its `done-*` line and the debug
/// line), from how its pump ended.
fn ended<G>(open: &Open<G>, outcome: PumpOutcome) {
    let live = &open.live;
    live.publish(outcome.from_client, outcome.to_client, ConnState::Open);
    let ev = match outcome.first_closed {
        Side::Backend => Event::DoneLocalClosed,
        Side::Client => Event::DoneRemoteClosed,
    };
    let route = &open.route;
    // One line per connection at debug level: who, which rule, which backend
    // address answered, the bytes, and how it ended.
    if log::log_enabled!(log::Level::Debug) {
        let ended = match &outcome.error {
            Some(e) => format!("{}, {e}", ev.as_str()),
            None => ev.as_str().to_string(),
        };
        // Read back from the live entry: a copy kept across the pump
        // would add its bytes to every idle connection.
        let reached = match (live.backend(), &open.lease) {
            (Some(addr), _) => format!("{addr}/tcp"),
            (None, Some(lease)) => lease.member().label().to_string(),
            (None, None) => "?".to_string(),
        };
        let text = format!(
            "{} -> {reached} ({}:{} -> {}:{}): {} bytes from the client, {} to it; {ended}",
            live.client(),
            route.names.bind_host,
            route.names.bind_port,
            route.names.connect_host,
            route.names.connect_port,
            outcome.from_client,
            outcome.to_client,
        );
        // The client certificate's subject, when it showed one, as the
        // journal's OI_TLS_SUBJECT.
        match live.tls_subject() {
            Some(subject) => log::debug!(
                rule:% = route.bind, client:% = live.client(), backend:% = reached,
                reason = ev.as_str(), tls_subject:% = subject; "{text}"
            ),
            None => log::debug!(
                rule:% = route.bind, client:% = live.client(), backend:% = reached,
                reason = ev.as_str(); "{text}"
            ),
        }
    }
    let bytes = Bytes {
        from_client: outcome.from_client,
        to_client: outcome.to_client,
    };
    open.shared.log.log_with(|| {
        let mut line = route.event(live.client().client(), ev, bytes);
        line.server_name = live.server_name();
        line.tls_subject = live.tls_subject();
        line.flow = Some(live.flow());
        line
    });
}

/// Pumps a connection oi speaks TLS on (`crate::tls::pump`), within the
/// rule's bandwidth limits: no splice, and no hand-over: rustls's state
/// cannot be carried to the new oi, so such a connection runs in the old
/// one to its end.
async fn tls_pumped<G>(open: &Open<G>, mut sessions: Box<Sessions>) -> PumpOutcome {
    use crate::tls::pump::{run, End};
    let client = End {
        socket: &open.client,
        tls: sessions.client.as_mut(),
    };
    let backend = End {
        socket: &open.backend,
        tls: sessions.backend.as_mut(),
    };
    let stats = open.live.rule();
    let ip = open.live.client().client();
    let limits = open.route.rates.limits(&stats.rates, ip.ip());
    let outcome = run(client, backend, limits, stats).await;
    PumpOutcome {
        from_client: outcome.from_client,
        to_client: outcome.to_client,
        first_closed: if outcome.client_first {
            Side::Client
        } else {
            Side::Backend
        },
        error: outcome.error,
    }
}

/// Forwards a connection the previous oi handed over (`oi upgrade`): its
/// unsent bytes go out first, then it is pumped as an accepted one is ([`pumped`]), from
/// the byte counts it had; its end is logged here, as rinetd logs one.
/// Counted on its backend's load as if chosen here.
pub(crate) async fn adopted(
    a: crate::route::park::Offered,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
) {
    let crate::route::park::Flow::Stream { client, backend } = a.flow else {
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
    let live = stats.register_resumed(conn_kind(peer, &route), peer, a.age);
    if let Some(name) = a.server_name.as_deref() {
        live.routed_by(Arc::from(name));
    }
    // Counted on its backend's load (least connections) while it lasts.
    let lease = match backend.get_ref().peer_addr() {
        Ok(addr) => route.handed_lease(&live, addr),
        Err(_) => {
            live.set_state(ConnState::Open);
            None
        }
    };
    log::debug!(
        "{peer}: taken over on {} (open for {:?}; {} + {} unsent bytes)",
        route.bind,
        a.age,
        a.up.unsent.len(),
        a.down.unsent.len()
    );
    let open = Open {
        client,
        backend,
        live,
        lease,
        route,
        shared,
        resumed: Some(Box::new((a.up.into(), a.down.into()))),
        tls: None,
        guards: (),
    };
    pumped(open).await;
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
            // `oi close` (or a disabled backend's grace ending): one atomic
            // load per poll; the first keeps the waker it wakes.
            if this.live.close_asked(cx) {
                let why = std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "closed by an operator (oi close, or its backend disabled)",
                );
                return Poll::Ready(this.pump.abort(why));
            }
        }
        polled
    }
}
