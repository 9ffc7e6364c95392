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

use super::assoc::Activity;
use super::{
    connected_socket, datagram_header, is_transient, pick_backend, send_datagram, BATCH,
    MAX_PAYLOAD,
};
use crate::buffers::BufferPool;
use crate::edge::Origin;
use crate::logfile::Event;
use crate::proxy::Encoded;
use crate::rate::Limit;
use crate::reactor::{Async, Timer};
use crate::route::{client_ip, Route};
use crate::shared::Shared;
use crate::stats::{ConnKind, ConnectFailure, RuleStats};

use futures_lite::{AsyncWriteExt, FutureExt};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Instant;

/// How a TCP→UDP connection ended; decides the log event.
enum End {
    /// The TCP client closed or failed: `done-remote-closed`.
    Client,
    /// Idle timeout or a backend socket error: `done-local-closed`.
    Local,
}

/// Forwards one TCP client to a `/udp` backend (ACL already checked).
/// `origin` is the client: the accepted peer, or what its PROXY header carried.
pub(crate) async fn tcp_to_udp(
    client: Async<TcpStream>,
    origin: Origin,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
) {
    let peer = origin.client;
    let ip = client_ip(peer);
    let activity = Activity::new(Instant::now(), stats.register(ConnKind::TcpToUdp, peer));
    let event = |event| route.event(ip, event, activity.bytes());
    shared.log.log(event(Event::Opened));
    // Transparent: from the client's address, a port the kernel picks (the
    // client's TCP port may be in use by another UDP flow of the same client).
    let from = Some(SocketAddr::new(peer.ip(), 0)).filter(|_| route.transparent());
    let socket = pick_backend(&route.pool, ip, from).and_then(|(backend, bind, lease)| {
        let s = connected_socket(backend, bind)?;
        activity.conn.connected(backend);
        Ok((s, lease))
    });
    // The address the client connected to: the accepted socket's own, unless
    // a header carried one.
    let header = socket.and_then(|s| {
        let h = datagram_header(&route, origin, || client.get_ref().local_addr())?;
        Ok((s, h))
    });
    // `_lease` counts the connection on its backend until it ends.
    let ((socket, _lease), header) = match header {
        Ok(s) => s,
        Err(e) => {
            stats.connect_failed(ConnectFailure::Other);
            shared.local_socket_failed(&route.names.connect_host, &peer, &e);
            return shared.log.log(event(Event::LocalSocketFailed));
        }
    };
    // TCP_NODELAY and SO_KEEPALIVE come with the client socket from its listener.
    let pool = &shared.datagrams;
    // Bandwidth limits: the stream waits for its bucket (as a TCP→TCP
    // direction does), datagrams from the backend over theirs are dropped
    // (as a UDP association's are).
    let (up, down) = route.rates.limits(&stats.rates, Some(ip));
    let up = up.as_ref().map(|l| (l, &*stats));
    let end = to_backend(&client, &socket, header.as_ref(), &activity, pool, up)
        .or(to_client(&client, &socket, &activity, pool, down.as_ref()))
        .or(idle(&activity, route.udp_timeout()))
        .await;
    let ev = match end {
        End::Client => Event::DoneRemoteClosed,
        End::Local => Event::DoneLocalClosed,
    };
    shared.log.log(event(ev));
}

/// Reads the stream and sends each read as one datagram (after `header`,
/// if any), until the client closes.
async fn to_backend(
    client: &Async<TcpStream>,
    socket: &Async<UdpSocket>,
    header: Option<&Encoded>,
    a: &Activity,
    pool: &BufferPool,
    limit: Option<(&Limit, &RuleStats)>,
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
        let (want, waited) = match limit {
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
                if let Some((limit, stats)) = limit {
                    let n = n as u64;
                    limit.charge(n, Instant::now());
                    if waited {
                        stats.count_by(|c| &c.rate_delayed_bytes, n);
                    }
                }
                a.touch();
                a.conn.add_from_client(n as u64);
                send(socket, header, &buf[..n]).await.err().map(|e| {
                    log::debug!("send to backend: {e}");
                    End::Local
                })
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                drained = true;
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

/// Waits until `limit`'s buckets hold a chunk worth reading (on a timer),
/// counting the wait; returns how much to read (at most `most`) and whether
/// it waited.
async fn allowance(limit: &Limit, stats: &RuleStats, most: usize) -> (usize, bool) {
    let began = Instant::now();
    let mut waited = false;
    loop {
        let now = Instant::now();
        let wait = limit.wait(now);
        if wait.is_zero() {
            if waited {
                let ms = now.saturating_duration_since(began).as_millis();
                stats.count_by(|c| &c.rate_wait_ms, u64::try_from(ms).unwrap_or(u64::MAX));
            }
            let available = usize::try_from(limit.available(now)).unwrap_or(usize::MAX);
            return (most.min(available).max(1), waited);
        }
        waited = true;
        Timer::after(wait.max(std::time::Duration::from_millis(1))).await;
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
) -> End {
    let mut client_w = client;
    // The last drain stopped at BATCH: more may wait with no edge to come
    // (the reactor is edge-triggered).
    let mut more = false;
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
                    if client_w.write_all(&buf[..n]).await.is_err() {
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
