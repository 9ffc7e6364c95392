//! One client's association on a `/udp` listener: its activity counters, its
//! upstream (a connected UDP socket or a TCP connection) and the task that
//! carries the backend's replies back to that client.

use super::{connected_socket, is_transient, pick_backend, pool, BATCH, MAX_PAYLOAD};
use crate::config::{Proto, DEFAULT_UDP_TIMEOUT};
use crate::connect;
use crate::logfile::{Event, LogEvent};
use crate::server::Route;
use async_io::Async;
use futures_lite::{AsyncWriteExt, FutureExt};
use smol::{Executor, Task};
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Datagrams queued towards a TCP backend (UDP→TCP) before newer ones are dropped:
/// covers the connect and short stalls without letting one slow backend pin much memory.
const TCP_QUEUE: usize = 16;

/// The idle limit a route gives its associations.
pub fn timeout_of(route: &Route) -> Duration {
    route
        .rule
        .rule
        .options
        .timeout
        .unwrap_or(DEFAULT_UDP_TIMEOUT)
}

/// Traffic counters shared by an association's owner and its task.
///
/// Invariant: `last_ms` only grows; it is the time of the latest datagram (or
/// TCP read) in either direction, so expiry sees traffic both ways.
pub struct Activity {
    /// Start of the clock `last_ms` counts on.
    epoch: Instant,
    /// Milliseconds after `epoch` of the last traffic either way.
    last_ms: AtomicU64,
    /// Payload bytes from the client towards the backend (the log's 7th field).
    pub from_client: AtomicU64,
    /// Payload bytes from the backend to the client (the log's 8th field).
    pub to_client: AtomicU64,
    /// Set when the upstream has ended (TCP backend closed or failed, socket error).
    ended: AtomicBool,
}

impl Activity {
    /// Fresh counters, active now.
    pub fn new(epoch: Instant) -> Self {
        let a = Activity {
            epoch,
            last_ms: AtomicU64::new(0),
            from_client: AtomicU64::new(0),
            to_client: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        };
        a.touch();
        a
    }

    /// Records traffic now.
    pub fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Milliseconds after the epoch of the last traffic; smaller means idle longer.
    pub fn last_ms(&self) -> u64 {
        self.last_ms.load(Ordering::Relaxed)
    }

    /// How long there has been no traffic, as of `now`.
    pub fn idle(&self, now: Instant) -> Duration {
        let now_ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        Duration::from_millis(now_ms.saturating_sub(self.last_ms()))
    }

    /// The instant the last traffic happened.
    pub fn last(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_ms())
    }

    /// Whether the upstream has ended and the association only waits to be removed.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// Marks the upstream as ended.
    pub fn end(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }
}

/// A datagram on its way to a TCP backend, in a pooled buffer.
pub struct Queued {
    /// Pooled buffer; returned to the pool once written.
    buf: Box<[u8]>,
    /// Payload length within `buf`.
    len: usize,
}

/// Where an association sends its client's datagrams.
enum Upstream {
    /// A UDP socket connected to the backend (UDP→UDP).
    Udp(Arc<Async<UdpSocket>>),
    /// The queue into the task that owns the TCP connection (UDP→TCP).
    Tcp(async_channel::Sender<Queued>),
}

/// One client address's association, owned by its listener's map.
pub struct Association {
    /// Where the client's datagrams go.
    upstream: Upstream,
    /// Counters shared with the reply task; decide expiry and the done line.
    pub activity: Arc<Activity>,
    /// The route at creation: its names go in the log and its timeout applies,
    /// even after a reload swaps the listener's route.
    pub route: Arc<Route>,
    /// The client as the log prints it.
    client_ip: IpAddr,
    /// Carries replies back; dropping the association cancels it and closes the upstream.
    _task: Task<()>,
}

impl Association {
    /// Opens the association for `client` on `route`: creates the upstream and
    /// spawns the reply task. Sends nothing yet (no empty "hello" datagram).
    pub fn open(
        ex: &Executor<'static>,
        route: Arc<Route>,
        listener: &Arc<Async<UdpSocket>>,
        client: SocketAddr,
        client_ip: IpAddr,
        epoch: Instant,
        connect_timeout: Duration,
    ) -> io::Result<Self> {
        let activity = Arc::new(Activity::new(epoch));
        let reply = Reply {
            listener: listener.clone(),
            client,
            activity: activity.clone(),
        };
        let (upstream, task) = match route.rule.rule.connect.proto {
            Proto::Udp => {
                let backend = pick_backend(&route.rule.connect, route.rule.src)?;
                let socket = Arc::new(connected_socket(backend, route.rule.src)?);
                let task = ex.spawn(udp_replies(socket.clone(), reply));
                (Upstream::Udp(socket), task)
            }
            Proto::Tcp => {
                let (tx, rx) = async_channel::bounded(TCP_QUEUE);
                let task = ex.spawn(tcp_upstream(rx, route.clone(), connect_timeout, reply));
                (Upstream::Tcp(tx), task)
            }
        };
        Ok(Association {
            upstream,
            activity,
            route,
            client_ip,
            _task: task,
        })
    }

    /// Passes one client datagram on. Never waits: a datagram the upstream cannot
    /// take right now is dropped, as a congested UDP path would drop it, so one
    /// slow backend cannot stall the other clients of the listener.
    pub fn forward(&self, payload: &[u8]) {
        self.activity.touch();
        let sent = match &self.upstream {
            Upstream::Udp(socket) => match socket.get_ref().send(payload) {
                Ok(_) => true,
                Err(e) => {
                    if !is_transient(&e) && e.kind() != io::ErrorKind::WouldBlock {
                        log::debug!("{}: send to backend: {e}", self.client_ip);
                    }
                    false
                }
            },
            Upstream::Tcp(queue) => {
                let mut buf = pool().take();
                buf[..payload.len()].copy_from_slice(payload);
                let len = payload.len();
                match queue.try_send(Queued { buf, len }) {
                    Ok(()) => true,
                    Err(e) => {
                        pool().give(e.into_inner().buf);
                        false
                    }
                }
            }
        };
        if sent {
            let n = payload.len() as u64;
            self.activity.from_client.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A log line about this association, with its byte counts.
    pub fn log_event(&self, event: Event) -> LogEvent {
        LogEvent {
            time: SystemTime::now(),
            client: self.client_ip,
            rule: self.route.names.clone(),
            from_client: self.activity.from_client.load(Ordering::Relaxed),
            to_client: self.activity.to_client.load(Ordering::Relaxed),
            event,
        }
    }
}

/// How replies reach the client: from the listening socket, to exactly this address.
struct Reply {
    /// The listening socket, shared with the listener task.
    listener: Arc<Async<UdpSocket>>,
    /// The one client this association serves.
    client: SocketAddr,
    /// Counters shared with the association.
    activity: Arc<Activity>,
}

impl Reply {
    /// Sends one reply datagram, waiting only if the listening socket's buffer is full.
    async fn send(&self, payload: &[u8]) {
        self.activity.touch();
        for _ in 0..2 {
            match self.listener.get_ref().send_to(payload, self.client) {
                Ok(_) => {
                    let n = payload.len() as u64;
                    self.activity.to_client.fetch_add(n, Ordering::Relaxed);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.listener.writable().await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    log::debug!("reply to {}: {e}", self.client);
                    return;
                }
            }
        }
    }
}

/// UDP→UDP: reads the backend's datagrams and sends each to the client.
async fn udp_replies(socket: Arc<Async<UdpSocket>>, reply: Reply) {
    loop {
        if let Err(e) = socket.readable().await {
            log::debug!("backend socket for {}: {e}", reply.client);
            return reply.activity.end();
        }
        // The buffer is held only while draining, so idle associations hold none.
        let mut buf = pool().take();
        let mut moved = 0;
        let mut failed = None;
        while moved < BATCH {
            match socket.get_ref().recv(&mut buf) {
                Ok(n) => reply.send(&buf[..n]).await,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if is_transient(&e) => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            moved += 1;
        }
        pool().give(buf);
        if let Some(e) = failed {
            log::debug!("backend socket for {}: {e}", reply.client);
            return reply.activity.end();
        }
        if moved == BATCH {
            futures_lite::future::yield_now().await;
        }
    }
}

/// UDP→TCP: connects, then writes queued datagrams to the stream in order and
/// sends what the stream returns back as datagrams of at most one read each.
async fn tcp_upstream(
    queue: async_channel::Receiver<Queued>,
    route: Arc<Route>,
    connect_timeout: Duration,
    reply: Reply,
) {
    let result = async {
        let stream = connect::connect(&route.rule.connect, route.rule.src, connect_timeout)
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        connect::tune(stream.get_ref());
        let to_backend = async {
            while let Ok(q) = queue.recv().await {
                let written = (&stream).write_all(&q.buf[..q.len]).await;
                pool().give(q.buf);
                written?;
            }
            Ok(())
        };
        let to_client = async {
            loop {
                stream.readable().await?;
                let mut buf = pool().take();
                let read = (&mut stream.get_ref()).read(&mut buf[..MAX_PAYLOAD]);
                let outcome = match read {
                    Ok(0) => Some(Ok(())),
                    Ok(n) => {
                        reply.send(&buf[..n]).await;
                        None
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                    Err(e) => Some(Err(e)),
                };
                pool().give(buf);
                if let Some(done) = outcome {
                    return done;
                }
            }
        };
        to_backend.or(to_client).await
    }
    .await;
    if let Err(e) = result {
        log::debug!("{} -> {}: {e}", reply.client, route.names.connect_host);
    }
    reply.activity.end();
}
