//! One client's association on a `/udp` listener: its upstream (a connected
//! UDP socket or a TCP connection) and, for a UDP backend, the task that
//! carries the backend's replies back to that client. Its activity counters
//! (`activity.rs`) and reply half (`reply.rs`) are modules below this one,
//! which the UDP→TCP task shares.

use super::activity::Activity;
use super::reply::{within, Reply};
use super::udp_to_tcp::{self, Control, Pause, Paused, Queued};
use super::{batch, connected_socket, datagram_header, is_transient, pick_backend, BATCH};
use crate::backends::Lease;
use crate::logfile::{Event, LogEvent};
use crate::net::bounds::ByteBudget;
use crate::route::edge::Origin;
use crate::route::shared::Shared;
use crate::route::{client_ip, Route};
use crate::stats::rate::Limit;
use crate::stats::Registered;
use async_task::Task;
use futures_lite::FutureExt;
use oi_config::Proto;
use oi_runtime::executor::Executor;
use oi_runtime::reactor::Async;
use oi_wire::proxy::Encoded;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Datagrams queued towards a TCP backend (UDP→TCP) before newer ones are dropped:
/// covers the connect and short stalls without letting one slow backend pin much memory.
const TCP_QUEUE: usize = 16;

/// Bytes one UDP→TCP association may hold queued (payloads plus
/// [`QUEUE_OVERHEAD`] each): two of the largest datagrams, so one always fits
/// (a 64 KiB budget could not hold a 65,507-byte payload and its overhead).
/// All associations together are held to [`crate::route::shared::UDP_QUEUE_TOTAL`].
pub const ASSOC_QUEUE_BYTES: usize = 128 * 1024;

/// What a queued datagram costs besides its payload, charged to the budgets:
/// the allocation's header and rounding plus its slot in the channel
/// (16 + 24 bytes, rounded up), so a flood of one-byte datagrams is not free.
pub(crate) const QUEUE_OVERHEAD: usize = 64;

/// Where an association sends its client's datagrams.
enum Upstream {
    /// A UDP socket connected to the backend (UDP→UDP).
    Udp(Arc<Async<UdpSocket>>),
    /// The queue into the task that owns the TCP connection (UDP→TCP).
    Tcp(TcpUpstream),
}

/// A UDP→TCP association's side of its task.
struct TcpUpstream {
    /// The queue the task writes to the stream.
    queue: async_channel::Sender<Queued>,
    /// The byte budget ([`ASSOC_QUEUE_BYTES`]) of what waits in the queue.
    budget: Arc<ByteBudget>,
    /// `oi upgrade` asks the task to pause here.
    pause: Arc<Pause>,
    /// Where the paused task gives its parts back.
    parked: async_channel::Receiver<Paused>,
    /// The task's end of `parked` and its queue, kept to start it again
    /// after a pause ([`Association::resume_tcp`]).
    control: (
        async_channel::Sender<Paused>,
        async_channel::Receiver<Queued>,
    ),
}

impl TcpUpstream {
    /// A queue, a pause cell and their task's [`Control`].
    fn new(pause: Arc<Pause>) -> (TcpUpstream, Control) {
        let (tx, rx) = async_channel::bounded(TCP_QUEUE);
        let (parked_tx, parked) = async_channel::bounded(1);
        let control = Control {
            queue: rx.clone(),
            pause: pause.clone(),
            parked: parked_tx.clone(),
        };
        let upstream = TcpUpstream {
            queue: tx,
            budget: ByteBudget::new(ASSOC_QUEUE_BYTES),
            pause,
            parked,
            control: (parked_tx, rx),
        };
        (upstream, control)
    }

    /// The task's [`Control`] again, to start it after a pause.
    fn control(&self) -> Control {
        Control {
            queue: self.control.1.clone(),
            pause: self.pause.clone(),
            parked: self.control.0.clone(),
        }
    }
}

/// One client address's association, owned by its listener's map.
pub(crate) struct Association {
    /// Where the client's datagrams go.
    upstream: Upstream,
    /// Counters shared with the reply task; decide expiry and the done line.
    pub(crate) activity: Arc<Activity>,
    /// The route at creation: its names go in the log and its timeout applies,
    /// even after a reload swaps the listener's route.
    pub(crate) route: Arc<Route>,
    /// The client as the log prints it (the carried one, with `accept-proxy`).
    client_ip: IpAddr,
    /// Who the client is: the peer, or what its PROXY header carried. A
    /// datagram carrying someone else ends this association (see the listener).
    pub(crate) origin: Origin,
    /// The PROXY v2 header (DGRAM) prepended to every datagram sent to a UDP
    /// backend (`proxy=` on a UDP→UDP rule, an oi extension); built once.
    proxy: Option<Encoded>,
    /// The process-wide queue budget and drop counter.
    shared: Arc<Shared>,
    /// The bandwidth limit on client datagrams (`rate`, `rate-up`,
    /// `rule-rate`, `client-rate`); one over it is dropped and counted.
    up: Option<Limit>,
    /// Carries replies back; dropping the association cancels it and closes the upstream.
    _task: Task<()>,
}

impl Association {
    /// Opens the association for `client` on `route`: creates the upstream and
    /// spawns the reply task. Sends nothing yet (no empty "hello" datagram).
    /// `origin` is who the client is: `client` itself, or the addresses its
    /// PROXY header carried (`accept-proxy`); replies go to `client` all the same.
    // One over clippy's count: the reply address and the origin are two
    // parameters on purpose, as they differ under `accept-proxy`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        ex: &Executor,
        route: Arc<Route>,
        shared: &Arc<Shared>,
        listener: &Arc<Async<UdpSocket>>,
        client: SocketAddr,
        origin: Origin,
        epoch: Instant,
        conn: Registered,
    ) -> io::Result<Self> {
        let activity = Arc::new(Activity::new(epoch, conn));
        let (up, reply) = Reply::with_limits(&route, listener, client, origin, &activity);
        // UDP→UDP: a header on every datagram; UDP→TCP: one at the start of
        // the stream. Without a carried destination, it is the listening
        // socket's address (a wildcard address when the rule binds one: a
        // datagram's own destination would need IP_PKTINFO on every receive).
        let proxy = datagram_header(&route, origin, || listener.get_ref().local_addr())?;
        let (upstream, task) = match route.backend_proto {
            Proto::Udp => {
                // Transparent: from the client's address and port.
                let from = Some(origin.client).filter(|_| route.transparent());
                let (backend, bind, lease) =
                    pick_backend(&route.pool, client_ip(origin.client), from)?;
                let socket = Arc::new(connected_socket(backend, bind)?);
                batch::enable_gro(socket.get_ref());
                activity.conn.connected(backend);
                let family = batch::Family::of(backend);
                let task = ex.spawn(udp_replies(socket.clone(), family, reply, Some(lease)));
                (Upstream::Udp(socket), task)
            }
            Proto::Tcp => {
                let (upstream, control) = TcpUpstream::new(Pause::connecting());
                let dial = route.dial(Some(origin.client));
                let task = ex.spawn(udp_to_tcp::connect_then_carry(
                    control,
                    route.clone(),
                    shared.clone(),
                    reply,
                    proxy,
                    dial,
                ));
                (Upstream::Tcp(upstream), task)
            }
        };
        Ok(Association {
            upstream,
            activity,
            client_ip: client_ip(origin.client),
            origin,
            // UDP→TCP's header went to its task with the stream.
            proxy: proxy.filter(|_| route.backend_proto == Proto::Udp),
            route,
            shared: shared.clone(),
            up,
            _task: task,
        })
    }

    /// `oi upgrade`: a copy of the connected socket of a UDP→UDP
    /// association, to hand to the new oi with the association's
    /// counters, who its client is and how long it has been idle. `None`
    /// for UDP→TCP (its stream and queue stay here) or without a descriptor.
    pub(crate) fn take_state(&self) -> Option<(OwnedFd, Origin, Duration)> {
        let Upstream::Udp(socket) = &self.upstream else {
            return None;
        };
        let fd = socket.get_ref().as_fd().try_clone_to_owned().ok()?;
        Some((fd, self.origin, self.activity.idle(Instant::now())))
    }

    /// `oi upgrade`: asks a UDP→TCP association's task to pause at its
    /// next safe point. `false` for UDP→UDP ([`Association::take_state`]),
    /// and for one still connecting to its backend (it stays here).
    pub(crate) fn ask_pause(&self) -> bool {
        match &self.upstream {
            Upstream::Tcp(t) => t.pause.ask(),
            Upstream::Udp(_) => false,
        }
    }

    /// `oi upgrade`: the paused task's parts, once [`Association::ask_pause`]
    /// was answered; `None` when `deadline` passes first (the ask is
    /// withdrawn and the task pumps on here).
    pub(crate) async fn paused(&self, deadline: Instant) -> Option<Paused> {
        let Upstream::Tcp(t) = &self.upstream else {
            return None;
        };
        let got = async { t.parked.recv().await.ok() }
            .or(async {
                oi_runtime::reactor::Timer::at(deadline).await;
                None
            })
            .await;
        if got.is_some() || t.pause.withdraw() {
            return got;
        }
        // The task paused as the wait ran out: its parts are in the channel.
        t.parked.try_recv().ok()
    }

    /// `oi upgrade` kept this UDP→TCP association here: its task starts
    /// again from `paused`, its unsent bytes first.
    pub(crate) fn resume_tcp(&mut self, ex: &Executor, paused: Paused) {
        let Upstream::Tcp(t) = &self.upstream else {
            return;
        };
        t.pause.rearm();
        let task = udp_to_tcp::carry(paused, t.control(), self.shared.clone(), self.route.clone());
        self._task = ex.spawn(task);
    }

    /// A UDP→TCP association a previous oi handed over (`oi upgrade`):
    /// `stream` is its connected TCP socket and `unsent` the datagrams that
    /// waited in its queue, written first; as [`Association::resumed`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resumed_tcp(
        ex: &Executor,
        route: Arc<Route>,
        shared: &Arc<Shared>,
        listener: &Arc<Async<UdpSocket>>,
        client: SocketAddr,
        origin: Origin,
        (stream, unsent): (OwnedFd, Vec<u8>),
        idle: Duration,
        conn: Registered,
    ) -> io::Result<Self> {
        let stream = Async::new(TcpStream::from(stream))?;
        let lease = stream.get_ref().peer_addr().ok().and_then(|addr| {
            conn.reconnected(addr);
            route.pool.lease_of(addr)
        });
        let activity = Arc::new(Activity::resumed(conn, idle));
        let (up, reply) = Reply::with_limits(&route, listener, client, origin, &activity);
        let (upstream, control) = TcpUpstream::new(Pause::running());
        let paused = Paused {
            stream,
            lease,
            reply,
            unsent,
        };
        let task = ex.spawn(udp_to_tcp::carry(
            paused,
            control,
            shared.clone(),
            route.clone(),
        ));
        Ok(Association {
            upstream: Upstream::Tcp(upstream),
            activity,
            client_ip: client_ip(origin.client),
            origin,
            // Its header went at the start of the stream, in the previous oi.
            proxy: None,
            route,
            shared: shared.clone(),
            up,
            _task: task,
        })
    }

    /// An association a previous oi handed over (`oi upgrade`): `backend`
    /// is its connected socket, `idle` how long it had no traffic; replies
    /// go to `client` from `listener` as before. Counted on its backend's
    /// load as if chosen here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resumed(
        ex: &Executor,
        route: Arc<Route>,
        shared: &Arc<Shared>,
        listener: &Arc<Async<UdpSocket>>,
        client: SocketAddr,
        origin: Origin,
        backend: OwnedFd,
        idle: Duration,
        conn: Registered,
    ) -> io::Result<Self> {
        let socket = Arc::new(Async::new_datagram(UdpSocket::from(backend))?);
        batch::enable_gro(socket.get_ref());
        let peer = socket.get_ref().peer_addr().ok();
        let lease = peer.and_then(|addr| {
            conn.reconnected(addr);
            route.pool.lease_of(addr)
        });
        let family = peer.map_or_else(
            || batch::Family::of_socket(socket.get_ref()),
            batch::Family::of,
        );
        let activity = Arc::new(Activity::resumed(conn, idle));
        let (up, reply) = Reply::with_limits(&route, listener, client, origin, &activity);
        let proxy = datagram_header(&route, origin, || listener.get_ref().local_addr())?;
        let task = ex.spawn(udp_replies(socket.clone(), family, reply, lease));
        Ok(Association {
            upstream: Upstream::Udp(socket),
            activity,
            client_ip: client_ip(origin.client),
            origin,
            proxy,
            route,
            shared: shared.clone(),
            up,
            _task: task,
        })
    }

    /// Passes one client datagram on; see [`Association::forward_run`].
    pub(crate) fn forward(&self, payload: &[u8]) {
        self.forward_run(&[payload]);
    }

    /// Passes a run of client datagrams on, in order (to a UDP backend in one
    /// batched send). Never waits: a datagram the upstream cannot take right
    /// now is dropped, as a congested UDP path would drop it, so one slow
    /// backend cannot stall the other clients of the listener.
    pub(crate) fn forward_run(&self, run: &[&[u8]]) {
        self.activity.touch();
        let mut kept: [&[u8]; batch::RUN_MAX] = [&[]; batch::RUN_MAX];
        let mut n = 0;
        for payload in run.iter().take(batch::RUN_MAX) {
            if within(self.up.as_ref(), payload, &self.activity) {
                kept[n] = payload;
                n += 1;
            }
        }
        let kept = &kept[..n];
        match &self.upstream {
            Upstream::Udp(socket) => {
                let header = self.proxy.as_ref().map(|h| h.as_bytes());
                let sent = batch::send_run(socket.get_ref(), None, header, kept);
                if let Some(e) = sent.error.filter(|e| !is_transient(e)) {
                    log::debug!("{}: send to backend: {e}", self.client_ip);
                }
                self.activity.conn.add_from_client(sent.bytes);
            }
            Upstream::Tcp(TcpUpstream { queue, budget, .. }) => {
                for payload in kept {
                    if self.enqueue(queue, budget, payload) {
                        self.activity.conn.add_from_client(payload.len() as u64);
                    }
                }
            }
        }
    }

    /// Queues a datagram for the TCP backend if the queue, the association's
    /// byte budget and the process-wide one all have room; otherwise drops it
    /// and counts the drop.
    fn enqueue(
        &self,
        queue: &async_channel::Sender<Queued>,
        budget: &Arc<ByteBudget>,
        payload: &[u8],
    ) -> bool {
        let cost = payload.len().saturating_add(QUEUE_OVERHEAD);
        let Some(assoc) = budget.try_take(cost) else {
            self.shared
                .udp_datagram_dropped("a TCP backend is not keeping up");
            return false;
        };
        let Some(total) = self.shared.udp_queue.try_take(cost) else {
            self.shared
                .udp_datagram_dropped("the process-wide queue budget is full");
            return false;
        };
        let queued = Queued::new(payload, assoc, total);
        // Dropping a refused datagram gives its charges back.
        if queue.try_send(queued).is_err() {
            self.shared
                .udp_datagram_dropped("a TCP backend is not keeping up");
            return false;
        }
        true
    }

    /// A log line about this association, with its byte counts.
    pub(crate) fn log_event(&self, event: Event) -> LogEvent {
        self.route
            .event(self.client_ip, event, self.activity.bytes())
    }
}

/// UDP→UDP: reads the backend's datagrams and sends each to the client.
///
/// `_lease` counts the association on its backend until the task ends
/// (none when a handed-over one's backend is no member here).
async fn udp_replies(
    socket: Arc<Async<UdpSocket>>,
    family: batch::Family,
    reply: Reply,
    _lease: Option<Lease>,
) {
    // The last drain stopped before the socket was empty (at BATCH, or
    // for a full listening socket): more may wait with no edge to come (the
    // reactor is edge-triggered).
    let mut more = false;
    loop {
        if !more {
            if let Err(e) = socket.readable().await {
                log::debug!("backend socket for {}: {e}", reply.client);
                return reply.activity.end();
            }
        }
        // Received into the thread's batch buffer and sent on before any
        // wait, so idle associations hold no buffer.
        let mut moved = 0;
        let mut dropped = 0;
        let mut failed = None;
        while moved < BATCH && dropped == 0 {
            let each = |_, run: &[&[u8]]| dropped += reply.send_run(run);
            match batch::recv_runs(socket.get_ref(), family, each) {
                Ok(got) => {
                    moved += got.datagrams.max(1);
                    if got.drained {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if is_transient(&e) => moved += 1,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            log::debug!("backend socket for {}: {e}", reply.client);
            return reply.activity.end();
        }
        if dropped > 0 {
            // The listening socket's buffer is full: read no more from the
            // backend until it drains (the backend socket's own buffer
            // holds, then drops, what comes meanwhile).
            let rule = reply.activity.conn.rule();
            rule.count_by(|c| &c.udp_replies_dropped, dropped as u64);
            if reply.listener.writable().await.is_err() {
                return reply.activity.end();
            }
        }
        more = dropped > 0 || moved >= BATCH;
        if dropped == 0 && more {
            oi_runtime::reactor::note_budget_spent();
            futures_lite::future::yield_now().await;
        }
    }
}
