//! TCP→UDP: one connected UDP socket per accepted TCP connection.
//!
//! Each read from the TCP stream (at most [`MAX_PAYLOAD`] bytes) becomes one
//! datagram; each datagram from the backend is written to the stream. The
//! connection ends when the client closes (or fails) or after the rule's
//! timeout with no traffic either way.
//!
//! With `proxy=` on the rule, every datagram starts with a PROXY v2 header
//! (`DGRAM`) naming the client and the address it connected to, built once
//! per connection and sent with each read as UDP associations send theirs;
//! each read is then shorter by the header's length, so header and read
//! still fit in one datagram.
//!
//! Hand-over state declared here: across `oi upgrade` a connection carries
//! its client's socket, its connected UDP socket, who its client is, its
//! counters and age ([`Carried`]) and its own bandwidth buckets' state
//! (`park::Flow::TcpToUdp`, made by [`offer`]); [`tcp_to_udp`] runs one started from that or afresh
//! ([`Start`]), one way for both.

use super::activity::{Activity, Carried, Since};
use super::{
    backend_socket, datagram_header, is_transient, send_datagram, BackendSocket, BATCH, MAX_PAYLOAD,
};
use crate::logfile::Event;
use crate::net::buffers::BufferPool;
use crate::route::edge::Origin;
use crate::route::park::{self, HalfState, Offered, Parked, Ticket};
use crate::route::shared::Shared;
use crate::route::{client_ip, Route};
use crate::stats::rate::Limit;
use crate::stats::{ConnKind, ConnectFailure, RuleStats};
use oi_runtime::reactor::{Async, Timer};
use oi_wire::proxy::Encoded;

use futures_lite::{AsyncWriteExt, FutureExt};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

/// How a TCP→UDP connection ended; decides the log event.
enum End {
    /// The TCP client closed or failed: `done-remote-closed`.
    Client,
    /// Idle timeout or a backend socket error: `done-local-closed`.
    Local,
    /// `oi upgrade` asks it to stop, at a safe point.
    Stop,
}

impl End {
    /// The event its end logs.
    fn event(&self) -> Event {
        match self {
            End::Client => Event::DoneRemoteClosed,
            End::Local | End::Stop => Event::DoneLocalClosed,
        }
    }
}

/// How a TCP→UDP connection starts: all that differs between one accepted
/// here and one the previous oi handed over.
pub(crate) enum Start {
    /// Accepted here (ACL already checked): it gets a new socket to the
    /// backend the pool chooses, and logs its `opened` line.
    Fresh {
        /// The TCP client.
        client: Async<TcpStream>,
        /// Who the client is: the accepted peer, or what its PROXY header
        /// carried.
        origin: Origin,
    },
    /// Handed over by the previous oi (`oi upgrade`): it carries on with
    /// its sockets, counters and idle time, counted on its backend's load
    /// as if chosen here.
    Handed(Offered),
}

/// Forwards one TCP client to a `/udp` backend, started as `start` says,
/// until it ends (its end logged here) or `oi upgrade` hands it to the new
/// oi (which logs its end).
pub(crate) async fn tcp_to_udp(
    start: Start,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
) {
    let (client, origin, backend, since, owed) = match start {
        Start::Fresh { client, origin } => {
            // Transparent: from the client's address, a port the kernel
            // picks (the client's TCP port may be in use by another UDP
            // flow of the same client).
            let from = Some(SocketAddr::new(origin.client.ip(), 0)).filter(|_| route.transparent());
            let (chosen, since) = (BackendSocket::Chosen(from), Since::Opened(Instant::now()));
            (client, origin, chosen, since, (0, 0))
        }
        Start::Handed(a) => match handed(a, &route) {
            Some(parts) => parts,
            None => return,
        },
    };
    let fresh = matches!(since, Since::Opened(_));
    let ip = client_ip(origin.client);
    let activity = Activity::register(&stats, ConnKind::TcpToUdp, origin.client, since);
    let event = |event| {
        let mut line = route.event(ip, event, activity.bytes());
        line.flow = Some(activity.conn.flow());
        line
    };
    if fresh {
        shared.log.log_with(|| event(Event::Opened));
    }
    // The address the client connected to: the accepted socket's own, unless
    // a header carried one.
    let socket = backend_socket(&route, &activity.conn, ip, backend).and_then(|(s, _, lease)| {
        let h = datagram_header(&route, origin, || client.get_ref().local_addr())?;
        Ok((s, lease, h))
    });
    // `_lease` counts the connection on its backend until it ends.
    let (socket, _lease, header) = match socket {
        Ok(s) => s,
        Err(e) if !fresh => {
            return log::warn!(
                "upgrade: cannot take up a connection on {}: {e}",
                route.bind
            )
        }
        Err(e) => {
            stats.connect_failed(ConnectFailure::Other);
            shared.local_socket_failed(&route.names.connect_host, &origin.client, &e);
            return shared.log.log(event(Event::LocalSocketFailed));
        }
    };
    // TCP_NODELAY and SO_KEEPALIVE come with the client socket from its listener.
    // Bandwidth limits: the stream waits for its bucket (as a TCP→TCP
    // direction does), datagrams from the backend over theirs are dropped
    // (as a UDP association's are).
    let (mut up, down) = route.rates.limits(&stats.rates, Some(ip));
    // A handed-over connection's own buckets owe what they did there.
    let now = Instant::now();
    for (limit, ns) in [(&up, owed.0), (&down, owed.1)] {
        if let Some(l) = limit {
            l.owe_own(ns, now);
        }
    }
    let flow = Flow {
        client: &client,
        socket: &socket,
        header: header.as_ref(),
        activity: &activity,
        origin,
    };
    let limits = (up.as_mut(), down.as_ref());
    if let Some(end) = carry(&flow, &route, &shared, &stats, limits).await {
        shared.log.log_with(|| event(end.event()));
    }
}

/// What [`tcp_to_udp`] starts a connection from: its client, who it is,
/// its backend socket, where its counters start, and how far its own
/// bandwidth buckets (up, down) are from full, in ns.
type Parts = (Async<TcpStream>, Origin, BackendSocket, Since, (u64, u64));

/// A handed-over connection's [`Parts`]. `None` (and a warning) when it
/// cannot be taken up.
fn handed(a: Offered, route: &Route) -> Option<Parts> {
    let park::Flow::TcpToUdp {
        client,
        backend,
        origin,
        idle,
    } = a.flow
    else {
        log::warn!("upgrade: a connection on {} is not TCP->UDP", route.bind);
        return None;
    };
    let (client, backend) = match (
        Async::new(TcpStream::from(client)),
        Async::new_datagram(UdpSocket::from(backend)),
    ) {
        (Ok(c), Ok(s)) => (c, s),
        (Err(e), _) | (_, Err(e)) => {
            log::warn!(
                "upgrade: cannot take up a connection on {}: {e}",
                route.bind
            );
            return None;
        }
    };
    let carried = Carried {
        from_client: a.up.bytes,
        to_client: a.down.bytes,
        idle,
        age: a.age,
    };
    let backend = BackendSocket::Handed(backend);
    let owed = (a.up.owed_ns, a.down.owed_ns);
    Some((client, origin, backend, Since::Handed(carried), owed))
}

/// One TCP→UDP connection's parts, as [`carry`] runs them.
struct Flow<'a> {
    /// The TCP client.
    client: &'a Async<TcpStream>,
    /// The UDP socket connected to the backend.
    socket: &'a Async<UdpSocket>,
    /// The PROXY header each datagram starts with (`proxy=`).
    header: Option<&'a Encoded>,
    /// Its counters and last traffic.
    activity: &'a Activity,
    /// Who the client is, for a hand-over.
    origin: Origin,
}

/// Whether a direction holds bytes it has read and not yet passed on: an
/// `oi upgrade` pauses the connection only when neither does.
#[derive(Default)]
struct Busy {
    /// Client → backend: a read waits to be sent as a datagram.
    up: AtomicBool,
    /// Backend → client: a datagram is being written to the stream.
    down: AtomicBool,
}

/// Runs both directions and the idle timer until the connection ends
/// (`Some`), or until `oi upgrade` hands it to the new oi (`None`: the new
/// oi logs its end). `limits`: the bandwidth limits (up, down).
async fn carry(
    f: &Flow<'_>,
    route: &Route,
    shared: &Shared,
    stats: &RuleStats,
    limits: (Option<&mut Limit>, Option<&Limit>),
) -> Option<End> {
    let pool = &shared.datagrams;
    let ticket = shared.parking.enter();
    let busy = Busy::default();
    let (mut up_limit, down_limit) = limits;
    loop {
        // Dropped mid-wait when another branch ends first, `to_backend`
        // leaves its turn in the `Limit`, which outlives it: the next one
        // takes it up, or the connection's end gives it back.
        let up = up_limit.as_deref_mut().map(|l| (l, stats));
        let end = to_backend(f.client, f.socket, f.header, f.activity, pool, up, &busy.up)
            .or(to_client(
                f.client, f.socket, f.activity, pool, down_limit, &busy.down,
            ))
            .or(idle(f.activity, route.udp_timeout()))
            .or(closed(f.activity))
            .or(stop(&ticket, &busy))
            .await;
        if !matches!(end, End::Stop) {
            return Some(end);
        }
        // Paused, the stream holds no turn: what the buckets owe goes to
        // the new oi without it (as a paused TCP direction's, `tcp/pump.rs`).
        if let Some(l) = up_limit.as_deref_mut() {
            l.release();
        }
        if offer(f, route, shared, &ticket, (up_limit.as_deref(), down_limit)).await {
            f.activity.conn.handed_on();
            return None;
        }
    }
}

/// Completes when a hand-over asks this connection to stop and neither
/// direction holds bytes (polled last: after the directions have moved).
async fn stop(ticket: &Ticket<'_>, busy: &Busy) -> End {
    std::future::poll_fn(|cx| match ticket.slot.poll_stop(cx, &mut None) {
        Poll::Ready(())
            if !busy.up.load(Ordering::Relaxed) && !busy.down.load(Ordering::Relaxed) =>
        {
            Poll::Ready(End::Stop)
        }
        // Busy: a direction is writing; its wake-up polls this again.
        _ => Poll::Pending,
    })
    .await
}

/// Offers the paused connection to the new oi, with what its own
/// bandwidth buckets (`limits`: up, down) owe; `true` once it has it.
async fn offer(
    f: &Flow<'_>,
    route: &Route,
    shared: &Shared,
    ticket: &Ticket<'_>,
    limits: (Option<&Limit>, Option<&Limit>),
) -> bool {
    let (Ok(client), Ok(backend)) = (
        f.client.get_ref().as_fd().try_clone_to_owned(),
        f.socket.get_ref().as_fd().try_clone_to_owned(),
    ) else {
        shared.parking.decline(ticket);
        return false;
    };
    let (from_client, to_client) = f.activity.conn.bytes();
    let now = Instant::now();
    let owed = |l: Option<&Limit>| l.map_or(0, |l| l.owed_own(now));
    let (verdict, answer) = park::verdict();
    let parked = Parked {
        flow: park::Handing::Copied(park::Flow::TcpToUdp {
            client,
            backend,
            origin: f.origin,
            idle: f.activity.idle(Instant::now()),
        }),
        rule: route.bind.to_string(),
        server_name: None,
        up: HalfState {
            bytes: from_client,
            owed_ns: owed(limits.0),
            ..HalfState::default()
        },
        down: HalfState {
            bytes: to_client,
            owed_ns: owed(limits.1),
            ..HalfState::default()
        },
        age: f.activity.conn.age(),
        verdict,
    };
    if !shared.parking.park(ticket, parked) {
        return false;
    }
    // A closed channel (the hand-over gave up) means: it goes on here.
    matches!(answer.recv().await, Ok(true))
}

/// Reads the stream and sends each read as one datagram (after `header`,
/// if any), until the client closes.
async fn to_backend(
    client: &Async<TcpStream>,
    socket: &Async<UdpSocket>,
    header: Option<&Encoded>,
    a: &Activity,
    pool: &BufferPool,
    mut limit: Option<(&mut Limit, &RuleStats)>,
    busy: &AtomicBool,
) -> End {
    // At most 52 bytes (an IPv6 header), so this never underflows.
    let most = MAX_PAYLOAD.saturating_sub(header.map_or(0, |h| h.as_bytes().len()));
    // The client's socket is edge-triggered: wait for a new edge only once
    // a read has emptied it (a full read may leave bytes that no edge reports).
    let mut drained = false;
    loop {
        if drained && client.readable().await.is_err() {
            return End::Client;
        }
        let (want, waited) = match &mut limit {
            Some((limit, stats)) => allowance(limit, stats, most).await,
            None => (most, false),
        };
        let mut buf = pool.take();
        let read = (&mut client.get_ref()).read(&mut buf[..want]);
        let end = match read {
            Ok(0) => Some(End::Client),
            Ok(n) => {
                // Maybe more behind it: read again before waiting for an edge.
                drained = false;
                if let Some((limit, stats)) = &mut limit {
                    let n = n as u64;
                    limit.moved(n);
                    if waited {
                        stats.count_by(|c| &c.rate_delayed_bytes, n);
                    }
                }
                a.touch();
                a.conn.add_from_client(n as u64);
                busy.store(true, Ordering::Relaxed);
                let sent = send(socket, header, &buf[..n]).await;
                busy.store(false, Ordering::Relaxed);
                sent.err().map(|e| {
                    log::debug!("send to backend: {e}");
                    End::Local
                })
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                drained = true;
                // Nothing to read: the rest of the turn goes back to the
                // streams waiting behind this one.
                if let Some((limit, _)) = &mut limit {
                    limit.release();
                }
                None
            }
            Err(_) => Some(End::Client),
        };
        pool.give(buf);
        if let Some(end) = end {
            return end;
        }
    }
}

/// Waits for this stream's turn at `limit`'s buckets (on a timer; see
/// "Fair shares" in `stats/rate.rs`), counting the wait; returns how much to
/// read (at most `most`, at least 1) and whether it waited.
async fn allowance(limit: &mut Limit, stats: &RuleStats, most: usize) -> (usize, bool) {
    let began = Instant::now();
    let mut waited = false;
    loop {
        let now = Instant::now();
        match limit.turn(now) {
            Ok(allowed) => {
                if waited {
                    let ms = now.saturating_duration_since(began).as_millis();
                    stats.count_by(|c| &c.rate_wait_ms, u64::try_from(ms).unwrap_or(u64::MAX));
                }
                let allowed = usize::try_from(allowed).unwrap_or(usize::MAX);
                return (most.min(allowed).max(1), waited);
            }
            Err(due) => {
                waited = true;
                Timer::at(due.max(now + std::time::Duration::from_millis(1))).await;
            }
        }
    }
}

/// Sends one datagram, waiting while the socket buffer is full. A datagram
/// refused because of an earlier ICMP error is dropped, as the network would.
async fn send(
    socket: &Async<UdpSocket>,
    header: Option<&Encoded>,
    payload: &[u8],
) -> io::Result<()> {
    loop {
        match send_datagram(socket, header, payload) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => socket.writable().await?,
            Err(e) if is_transient(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Writes every datagram from the backend to the stream, until writing fails.
async fn to_client(
    client: &Async<TcpStream>,
    socket: &Async<UdpSocket>,
    a: &Activity,
    pool: &BufferPool,
    limit: Option<&Limit>,
    busy: &AtomicBool,
) -> End {
    let mut client_w = client;
    // The last drain stopped at BATCH: more may wait with no edge to come
    // (the reactor is edge-triggered). True at first: this future is made
    // again when a paused hand-over resumes, possibly after its edge was
    // consumed with datagrams left behind.
    let mut more = true;
    loop {
        if !more && socket.readable().await.is_err() {
            return End::Local;
        }
        let mut buf = pool.take();
        let mut end = None;
        let mut moved = 0;
        while moved < BATCH {
            moved += 1;
            match socket.get_ref().recv(&mut buf) {
                Ok(n) => {
                    a.touch();
                    if let Some(limit) = limit {
                        if !limit.try_take(n as u64, Instant::now()) {
                            a.conn.rule().count(|c| &c.rate_dropped_datagrams);
                            continue;
                        }
                    }
                    busy.store(true, Ordering::Relaxed);
                    let written = client_w.write_all(&buf[..n]).await;
                    busy.store(false, Ordering::Relaxed);
                    if written.is_err() {
                        end = Some(End::Client);
                        break;
                    }
                    a.conn.add_to_client(n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    moved = 0;
                    break;
                }
                Err(e) if is_transient(&e) => {}
                Err(e) => {
                    log::debug!("receive from backend: {e}");
                    end = Some(End::Local);
                    break;
                }
            }
        }
        pool.give(buf);
        if let Some(end) = end {
            return end;
        }
        more = moved == BATCH;
        if more {
            futures_lite::future::yield_now().await;
        }
    }
}

/// Completes once `oi close` asks for this connection to end (or its
/// backend is disabled): both sockets close, as on an idle timeout.
async fn closed(a: &Activity) -> End {
    a.conn.closed().await;
    log::debug!("{}: closed by an operator (oi close)", a.conn.client());
    End::Local
}

/// Completes once there has been no traffic either way for `timeout`.
async fn idle(a: &Activity, timeout: std::time::Duration) -> End {
    loop {
        // Checked: the timeout comes from the configuration, and an instant
        // past what the clock can hold means "never", not a panic.
        match a.last().checked_add(timeout) {
            Some(at) => Timer::at(at).await,
            None => Timer::never().await,
        };
        if a.idle(Instant::now()) >= timeout {
            return End::Local;
        }
    }
}
