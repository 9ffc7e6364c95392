//! One client's association on a `/udp` listener: its upstream (a connected
//! UDP socket or a TCP connection) and, for a UDP backend, the task that
//! carries the backend's replies back to that client. Its activity counters
//! (`activity.rs`) and reply half (`reply.rs`) are modules below this one,
//! which the UDP→TCP task shares.
//!
//! Hand-over state declared here: across `oi upgrade` an association
//! carries its upstream ([`Handed`]: its connected UDP socket, or its TCP
//! stream and the datagrams that waited in its queue) with its counters
//! ([`Carried`]); [`Association::start`] starts one from that or afresh
//! ([`Start`]), one way for both.

use super::activity::{Activity, Carried, Since};
use super::reply::{with_kept, Reply};
use super::udp_to_tcp::{self, Control, Pause, Paused, Queued};
use super::{backend_socket, batch, datagram_header, is_transient, BackendSocket, BATCH};
use crate::backends::Lease;
use crate::logfile::{Event, LogEvent};
use crate::net::bounds::ByteBudget;
use crate::route::edge::Origin;
use crate::route::shared::Shared;
use crate::route::{client_ip, Route};
use crate::stats::rate::Limit;
use crate::stats::{ConnKind, RuleStats};
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
    /// after a pause ([`TcpUpstream::carry`]).
    control: (
        async_channel::Sender<Paused>,
        async_channel::Receiver<Queued>,
    ),
}

impl TcpUpstream {
    /// A queue and a byte budget for a task paused as `pause` says.
    fn new(pause: Arc<Pause>) -> TcpUpstream {
        let (tx, rx) = async_channel::bounded(TCP_QUEUE);
        let (parked_tx, parked) = async_channel::bounded(1);
        TcpUpstream {
            queue: tx,
            budget: ByteBudget::new(ASSOC_QUEUE_BYTES),
            pause,
            parked,
            control: (parked_tx, rx),
        }
    }

    /// The task's [`Control`]: its end of the queue, the pause cell and
    /// the channel it gives its parts back by.
    fn control(&self) -> Control {
        Control {
            queue: self.control.1.clone(),
            pause: self.pause.clone(),
            parked: self.control.0.clone(),
        }
    }

    /// Spawns the task that carries a stream on from `paused`, its unsent
    /// bytes first: one handed over, or one kept here after an offer.
    fn carry(
        &self,
        ex: &Executor,
        paused: Paused,
        shared: &Arc<Shared>,
        route: &Arc<Route>,
    ) -> Task<()> {
        let task = udp_to_tcp::carry(paused, self.control(), shared.clone(), route.clone());
        ex.spawn(task)
    }
}

/// How an association starts: all that differs between one opened here
/// and one the previous oi handed over.
pub(crate) enum Start {
    /// Opened here, on its client's first datagram: its upstream goes to
    /// the backend the pool chooses (UDP: a new connected socket; TCP: a
    /// stream its task connects, the PROXY header first).
    Fresh {
        /// The listener's clock, which its associations are timed on.
        epoch: Instant,
    },
    /// Handed over by the previous oi (`oi upgrade`): its upstream and
    /// counters as they were there, counted on its backend's load as if
    /// chosen here.
    Handed {
        /// Its upstream.
        upstream: Handed,
        /// Its byte counts and idle time.
        carried: Carried,
    },
}

/// The upstream of an association the previous oi handed over.
pub(crate) enum Handed {
    /// UDP→UDP: its socket connected to the backend.
    Datagram(OwnedFd),
    /// UDP→TCP: its stream to the backend, and the datagrams that waited in
    /// its queue (the stream's next bytes).
    Stream(OwnedFd, Vec<u8>),
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
    /// Starts the association for `client` on `route` (see [`Start`]):
    /// lists it on `stats`, makes or takes up its upstream and spawns the
    /// task that carries replies back. Sends nothing yet (no empty "hello"
    /// datagram). `origin` is who the client is: `client` itself, or the
    /// addresses its PROXY header carried (`accept-proxy`); replies go to
    /// `client` from `listener` all the same.
    // One over clippy's count: the reply address and the origin are two
    // parameters on purpose, as they differ under `accept-proxy`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        ex: &Executor,
        route: Arc<Route>,
        shared: &Arc<Shared>,
        listener: &Arc<Async<UdpSocket>>,
        client: SocketAddr,
        origin: Origin,
        start: Start,
        stats: &Arc<RuleStats>,
    ) -> io::Result<Self> {
        let (since, handed) = match start {
            Start::Fresh { epoch } => (Since::Opened(epoch), None),
            Start::Handed { upstream, carried } => (Since::Handed(carried), Some(upstream)),
        };
        let activity = Activity::register(stats, ConnKind::Udp, origin.client, since);
        let activity = Arc::new(activity);
        let (up, reply) = Reply::with_limits(&route, listener, client, origin, &activity);
        // UDP→UDP: a header on every datagram; UDP→TCP: one at the start of
        // the stream (a handed-over stream had it in the previous oi).
        // Without a carried destination, it is the listening socket's
        // address (a wildcard address when the rule binds one: a datagram's
        // own destination would need IP_PKTINFO on every receive).
        let mut proxy = match &handed {
            Some(Handed::Stream(..)) => None,
            _ => datagram_header(&route, origin, || listener.get_ref().local_addr())?,
        };
        let ip = client_ip(origin.client);
        let (upstream, task) = match (handed, route.backend_proto) {
            (None, Proto::Udp) => {
                // Transparent: from the client's address and port.
                let from = Some(origin.client).filter(|_| route.transparent());
                udp_upstream(ex, &route, reply, ip, BackendSocket::Chosen(from))?
            }
            (Some(Handed::Datagram(socket)), _) => {
                let socket = Async::new_datagram(UdpSocket::from(socket))?;
                udp_upstream(ex, &route, reply, ip, BackendSocket::Handed(socket))?
            }
            (None, Proto::Tcp) => {
                let t = TcpUpstream::new(Pause::connecting());
                let dial = route.dial(Some(origin.client));
                // The header goes to the task, which sends it with the stream.
                let header = proxy.take();
                let task = udp_to_tcp::connect_then_carry(
                    t.control(),
                    route.clone(),
                    shared.clone(),
                    reply,
                    header,
                    dial,
                );
                (Upstream::Tcp(t), ex.spawn(task))
            }
            (Some(Handed::Stream(stream, unsent)), _) => {
                let stream = Async::new(TcpStream::from(stream))?;
                let peer = stream.get_ref().peer_addr().ok();
                let lease = peer.and_then(|addr| route.handed_lease(&activity.conn, addr));
                let paused = Paused {
                    stream,
                    lease,
                    reply,
                    unsent,
                };
                let t = TcpUpstream::new(Pause::running());
                let task = t.carry(ex, paused, shared, &route);
                (Upstream::Tcp(t), task)
            }
        };
        Ok(Association {
            upstream,
            activity,
            client_ip: ip,
            origin,
            proxy,
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
    /// again from `paused`, its unsent bytes first, as a handed-over
    /// stream's does ([`TcpUpstream::carry`]).
    pub(crate) fn resume_tcp(&mut self, ex: &Executor, paused: Paused) {
        let Upstream::Tcp(t) = &self.upstream else {
            return;
        };
        t.pause.rearm();
        self._task = t.carry(ex, paused, &self.shared, &self.route);
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
        with_kept(self.up.as_ref(), run, &self.activity, |kept| {
            self.forward_kept(kept);
        });
    }

    /// [`Association::forward_run`]'s datagrams that passed the rate limit.
    fn forward_kept(&self, kept: &[&[u8]]) {
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
        let mut line = self
            .route
            .event(self.client_ip, event, self.activity.bytes());
        line.flow = Some(self.activity.conn.flow());
        line
    }
}

/// A UDP→UDP association's upstream, its socket `from` where
/// [`BackendSocket`] says, and its reply task.
/// `client` is who the pool chooses for (the origin's address).
fn udp_upstream(
    ex: &Executor,
    route: &Route,
    reply: Reply,
    client: IpAddr,
    from: BackendSocket,
) -> io::Result<(Upstream, Task<()>)> {
    let conn = &reply.activity.conn;
    let (socket, peer, lease) = backend_socket(route, conn, client, from)?;
    let socket = Arc::new(socket);
    batch::enable_gro(socket.get_ref());
    let family = peer.map_or_else(
        || batch::Family::of_socket(socket.get_ref()),
        batch::Family::of,
    );
    let task = ex.spawn(udp_replies(socket.clone(), family, reply, lease));
    Ok((Upstream::Udp(socket), task))
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
    let mut pace = batch::Pace::default();
    loop {
        if !more {
            // `oi close` ends the association as a backend error would: the
            // client's next datagram opens a new one.
            let closed = async {
                reply.activity.conn.closed().await;
                Err(io::Error::other("closed by an operator (oi close)"))
            };
            if let Err(e) = socket.readable().or(closed).await {
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
            match batch::recv_runs(socket.get_ref(), family, &mut pace, each) {
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
