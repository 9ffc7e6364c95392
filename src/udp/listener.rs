//! The `/udp` listener task: reads client datagrams, keeps the map of
//! associations, expires idle ones and enforces the per-rule cap.

use super::assoc::Association;
use super::udp_to_tcp::Paused;
use super::{batch, is_transient, BATCH};
use crate::edge::{self, Origin};
use crate::handover::park::{self, Flow, HalfState, Handing, Parked, Ticket};
use crate::logfile::Event;
use crate::route::{client_ip, Bytes, Route};
use crate::shared::Shared;
use crate::stats::{ConnKind, RuleStats};
use arc_swap::ArcSwap;
use futures_lite::FutureExt;
use oi_runtime::executor::Executor;
use oi_runtime::reactor::{Async, Timer};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest gap between expiry sweeps; an association ends at most this late.
const MAX_SWEEP: Duration = Duration::from_secs(1);

/// How long `oi upgrade` waits for a listener's UDP→TCP associations to
/// pause (within the hand-over's [`park::PARK_WITHIN`]): a task gets there
/// at its next poll unless a write to its backend or client is stuck.
const PAUSE_WITHIN: Duration = Duration::from_secs(2);

/// Serves a `/udp` listener until the task is dropped (listener removed by a
/// reload, or server stopping); then every association ends and is logged.
pub(crate) async fn serve(
    ex: Arc<Executor>,
    socket: Arc<Async<UdpSocket>>,
    route: Arc<ArcSwap<Route>>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
) {
    let mut listener = Listener {
        ex,
        socket,
        route,
        shared,
        stats,
        assocs: HashMap::new(),
        epoch: Instant::now(),
        kept: false,
        offering: None,
    };
    listener.run().await
}

/// Why the listener task woke up.
enum Wake {
    /// The socket has datagrams (or an error) to read.
    Readable(io::Result<()>),
    /// Time to look for idle associations.
    Sweep,
    /// `oi upgrade` asks to offer the associations to the new oi.
    Stop,
}

/// A listener's state, owned by its one task.
struct Listener {
    /// Spawns association tasks.
    ex: Arc<Executor>,
    /// The listening socket; association tasks send replies from it.
    socket: Arc<Async<UdpSocket>>,
    /// The rule's current route; read once per new association, so a reload
    /// applies to new associations while existing ones keep theirs.
    route: Arc<ArcSwap<Route>>,
    /// Settings and the log.
    shared: Arc<Shared>,
    /// The rule's counters (the listener's, kept across reloads).
    stats: Arc<RuleStats>,
    /// Live associations by client address.
    /// Invariant: never more than the cap after `open` returns (the route's
    /// `maxassoc`, within the listener's share of the descriptor limit).
    assocs: HashMap<SocketAddr, Association>,
    /// Clock origin for the associations' activity timestamps.
    epoch: Instant,
    /// Set when `oi upgrade` offered associations and the new oi took none
    /// (it failed half-way, or lacks the rule): when this listener closes,
    /// they are served on ([`serve_kept`]) rather than ended. Never set
    /// when the new oi serves the rule, which reads the same socket.
    kept: bool,
    /// An offer to the new oi whose verdicts are not all applied yet.
    offering: Option<Offering>,
}

/// An offer's verdicts still to apply. Kept in the listener, not in
/// `offer`'s locals: the service closes the listeners as soon as the
/// hand-over ends, which may be before this task has run to read the
/// verdicts (its thread is busy, or the service's future ran first: with
/// the verdicts in `offer`'s locals, the four "dies taking" upgrade tests
/// lost the association the old oi should keep in 6 of 8 runs beside two
/// busy loops). A listener closed with an offer here applies the verdicts
/// in `drop`.
struct Offering {
    /// Each offered association's client, and the channel its verdict
    /// comes on (`true`: the new oi took it), in the order offered.
    answers: std::collections::VecDeque<(SocketAddr, async_channel::Receiver<bool>)>,
    /// The paused tasks of the UDP→TCP associations offered, by client.
    streams: HashMap<SocketAddr, Paused>,
    /// The new oi took at least one association.
    taken: bool,
}

impl Listener {
    /// Reads datagrams and sweeps, forever.
    async fn run(&mut self) {
        let socket = self.socket.clone();
        batch::enable_gro(socket.get_ref());
        let family = batch::Family::of_socket(socket.get_ref());
        // Started by `oi upgrade`: nothing is read before the associations
        // the previous oi handed over are in the map.
        self.shared.parking.released().await;
        self.resume_handed();
        let shared = self.shared.clone();
        let ticket = shared.parking.enter();
        let mut next_sweep = Instant::now() + self.sweep_period();
        let mut timer = Timer::at(next_sweep);
        // The last drain stopped at BATCH: datagrams may be waiting, and the
        // reactor is edge-triggered, so no edge would announce them again.
        let mut more = false;
        loop {
            // Checked on every wake, not only when the timer wins: under a
            // steady flood the socket is always readable.
            if Instant::now() >= next_sweep {
                self.sweep();
                next_sweep = Instant::now() + self.sweep_period();
                timer.set_at(next_sweep);
            }
            let wake = if more {
                Wake::Readable(Ok(()))
            } else {
                async { Wake::Readable(socket.readable().await) }
                    .or(async {
                        (&mut timer).await;
                        Wake::Sweep
                    })
                    .or(async {
                        std::future::poll_fn(|cx| ticket.slot.poll_stop(cx, &mut None)).await;
                        Wake::Stop
                    })
                    .await
            };
            match wake {
                Wake::Sweep => {}
                Wake::Stop => {
                    if self.offer(&ticket).await {
                        // The new oi serves this rule and reads its socket
                        // now: reading here too would give a client's
                        // datagrams to a second association. The task ends
                        // when the listener closes, with what stays here.
                        return futures_lite::future::pending().await;
                    }
                }
                Wake::Readable(Err(e)) => {
                    log::error!("UDP listener: {e}");
                    Timer::after(Duration::from_millis(100)).await;
                }
                Wake::Readable(Ok(())) => {
                    let mut moved = 0;
                    while moved < BATCH {
                        let each = |peer, run: &[&[u8]]| self.datagrams(run, peer);
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
                                log::debug!("UDP receive: {e}");
                                break;
                            }
                        }
                    }
                    more = moved >= BATCH;
                    if more {
                        oi_runtime::reactor::note_budget_spent();
                        futures_lite::future::yield_now().await;
                    }
                }
            }
        }
    }

    /// How often to sweep: a quarter of the current timeout, at most [`MAX_SWEEP`].
    fn sweep_period(&self) -> Duration {
        (self.route.load().udp_timeout() / 4).clamp(Duration::from_millis(10), MAX_SWEEP)
    }

    /// Passes a run of datagrams from one client to its association at once
    /// (one batched send), or one by one when each needs a look of its own
    /// (no association yet, or a PROXY header on every datagram).
    fn datagrams(&mut self, run: &[&[u8]], mut peer: SocketAddr) {
        if let SocketAddr::V6(v6) = &mut peer {
            v6.set_flowinfo(0);
        }
        let mut rest = run;
        // Bounded by the run: every turn takes at least one datagram.
        while let Some((first, tail)) = rest.split_first() {
            if let Some(a) = self.assocs.get(&peer) {
                if !a.activity.ended() && !a.route.accept_proxy {
                    return a.forward_run(rest);
                }
            }
            // Opens the association if needed (the rest of the run then
            // goes in one send), or strips this datagram's PROXY header.
            self.datagram(first, peer);
            rest = tail;
        }
    }

    /// Passes one client datagram to its association, opening one if needed.
    fn datagram(&mut self, datagram: &[u8], mut peer: SocketAddr) {
        if let SocketAddr::V6(v6) = &mut peer {
            // The flow label is not part of who the client is.
            v6.set_flowinfo(0);
        }
        if let Some(a) = self.assocs.get(&peer) {
            if !a.activity.ended() {
                if !a.route.accept_proxy {
                    return a.forward(datagram);
                }
                // Every datagram carries its header, checked under the
                // association's own route like the rest of it.
                let Some((origin, payload)) = self.strip_header(&a.route, datagram, peer) else {
                    return;
                };
                if origin == a.origin {
                    return a.forward(payload);
                }
                // The proxy now speaks for another client from the same
                // address and port (its client left, the port was reused):
                // that client gets an association of its own, after its own
                // ACL check, rather than riding on the last one's.
            }
            if let Some(a) = self.assocs.remove(&peer) {
                self.shared
                    .log
                    .log_with(|| a.log_event(Event::DoneLocalClosed));
            }
        }
        self.open(datagram, peer);
    }

    /// With `accept-proxy`: who the datagram speaks for, and its payload
    /// after the header. A datagram that does not qualify (untrusted source,
    /// missing or malformed header) is counted and dropped here, with a
    /// warning at most once a minute: it never reaches an association.
    fn strip_header<'a>(
        &self,
        route: &Route,
        datagram: &'a [u8],
        peer: SocketAddr,
    ) -> Option<(Origin, &'a [u8])> {
        match edge::accept_datagram_header(datagram, peer, route) {
            Ok(found) => Some(found),
            Err(why) => {
                self.shared
                    .udp_proxy_datagram_dropped(&self.stats, &route.bind, peer, &why);
                None
            }
        }
    }

    /// Opens an association for a new client (after the ACL check), evicting
    /// the oldest-idle one if the rule is at its cap, and forwards the first datagram.
    ///
    /// With `accept-proxy` the client is the one the datagram's header
    /// carries: the ACLs, the log lines, the statistics and a header sent on
    /// see it. The association is still keyed by, and replies still go to,
    /// the real peer (the proxy), unchanged: that is where the client's
    /// datagrams come from, and the only address a reply can reach it by.
    fn open(&mut self, datagram: &[u8], peer: SocketAddr) {
        let route = self.route.load_full();
        let (origin, payload) = if route.accept_proxy {
            match self.strip_header(&route, datagram, peer) {
                Some(found) => found,
                None => return,
            }
        } else {
            let origin = Origin {
                client: peer,
                local: None,
            };
            (origin, datagram)
        };
        let client = origin.client;
        let ip = client_ip(client);
        if let Err(refusal) = route.admit(ip) {
            log::debug!("{client}: {} on {}/udp", refusal.as_str(), route.bind);
            self.stats.refused(refusal);
            return self.shared.log.log(route.event(ip, refusal, Bytes::NONE));
        }
        // The rule's `maxassoc`, within this listener's share of the descriptors.
        let cap = route
            .max_assoc()
            .min(self.shared.udp_association_cap())
            .max(1);
        while self.assocs.len() >= cap {
            self.evict_oldest();
        }
        let opened = Association::open(
            &self.ex,
            route.clone(),
            &self.shared,
            &self.socket,
            peer,
            origin,
            self.epoch,
            self.stats.clone().register(ConnKind::Udp, client),
        );
        match opened {
            Ok(a) => {
                // As rinetd writes it: the opened line counts the first datagram.
                self.shared.log.log_with(|| {
                    let mut line = a.log_event(Event::Opened);
                    line.from_client = payload.len() as u64;
                    line
                });
                a.forward(payload);
                self.assocs.insert(peer, a);
            }
            Err(e) => {
                let rule = &route.names.connect_host;
                self.shared.local_socket_failed(rule, &client, &e);
                let failed = route.event(ip, Event::LocalSocketFailed, Bytes::NONE);
                self.shared.log.log(failed);
            }
        }
    }

    /// Ends the association idle the longest. O(associations), and only runs
    /// when the cap is reached.
    fn evict_oldest(&mut self) {
        let oldest = self
            .assocs
            .iter()
            .min_by_key(|(_, a)| a.activity.last())
            .map(|(k, _)| *k);
        if let Some(a) = oldest.and_then(|k| self.assocs.remove(&k)) {
            log::debug!("evicting the oldest-idle association of {}", a.route.bind);
            self.stats.udp_evicted();
            self.shared
                .log
                .log_with(|| a.log_event(Event::DoneLocalClosed));
        }
    }

    /// `oi upgrade`: offers every association to the new oi and waits
    /// (reading nothing: datagrams wait in the socket) for the verdicts.
    /// Those taken leave the map without a log line (the new oi logs their
    /// end); the others stay (a UDP→TCP one's task starts again). `true`:
    /// the new oi took some, so it serves this rule.
    async fn offer(&mut self, ticket: &Ticket<'_>) -> bool {
        let rule = self.route.load().bind.to_string();
        let started = park::now_secs();
        let mut parked = Vec::new();
        let mut answers = Vec::new();
        let streams = self.pause_streams().await;
        for (peer, paused) in &streams {
            let Some(a) = self.assocs.get(peer) else {
                continue;
            };
            let Ok(backend) = paused.stream.get_ref().as_fd().try_clone_to_owned() else {
                continue;
            };
            let (from_client, to_client) = a.activity.conn.bytes();
            let (verdict, answer) = park::verdict();
            parked.push(Parked {
                flow: Handing::Copied(Flow::UdpToTcp {
                    client: *peer,
                    backend,
                    origin: a.origin,
                    idle: a.activity.idle(Instant::now()),
                }),
                rule: rule.clone(),
                server_name: None,
                up: HalfState {
                    unsent: paused.unsent.clone(),
                    done: false,
                    bytes: from_client,
                },
                down: HalfState {
                    bytes: to_client,
                    ..HalfState::default()
                },
                started,
                verdict,
            });
            answers.push((*peer, answer));
        }
        for (peer, a) in &self.assocs {
            if a.activity.ended() {
                continue;
            }
            let Some((backend, origin, idle)) = a.take_state() else {
                continue;
            };
            let (from_client, to_client) = a.activity.conn.bytes();
            let (verdict, answer) = park::verdict();
            parked.push(Parked {
                flow: Handing::Copied(Flow::Datagram {
                    client: *peer,
                    backend,
                    origin,
                    idle,
                }),
                rule: rule.clone(),
                server_name: None,
                up: HalfState {
                    bytes: from_client,
                    ..HalfState::default()
                },
                down: HalfState {
                    bytes: to_client,
                    ..HalfState::default()
                },
                started,
                verdict,
            });
            answers.push((*peer, answer));
        }
        let offered = if parked.is_empty() {
            self.shared.parking.pass(ticket);
            false
        } else {
            self.shared.parking.park_many(ticket, parked)
        };
        if !offered {
            answers.clear();
        }
        self.offering = Some(Offering {
            answers: answers.into(),
            streams,
            taken: false,
        });
        // Each verdict is applied as soon as it is read, with no await in
        // between: a listener closed meanwhile finds the rest in `drop`.
        // Bounded: every turn removes one answer.
        while let Some(answer) = self.next_answer() {
            // A closed channel (the hand-over gave up) means: it stays.
            let taken = matches!(answer.recv().await, Ok(true));
            self.apply_verdict(taken);
        }
        self.finish_offering()
    }

    /// The channel of the next verdict of the offer in flight.
    fn next_answer(&self) -> Option<async_channel::Receiver<bool>> {
        let o = self.offering.as_ref()?;
        o.answers.front().map(|(_, answer)| answer.clone())
    }

    /// Applies the next verdict of the offer in flight: an association the
    /// new oi took leaves the map without a log line (the new oi logs its
    /// end); one it did not take stays.
    fn apply_verdict(&mut self, taken: bool) {
        let Some(o) = self.offering.as_mut() else {
            return;
        };
        let Some((peer, _)) = o.answers.pop_front() else {
            return;
        };
        if taken {
            if let Some(paused) = o.streams.remove(&peer) {
                // The new oi holds the same open stream: its edges must
                // stop waking this process's threads.
                paused.stream.leave_epoll();
            }
            self.assocs.remove(&peer);
            o.taken = true;
        }
    }

    /// Ends the offer in flight, all its verdicts applied: the UDP→TCP
    /// associations kept pump on here, their unsent bytes first. `true`:
    /// the new oi took some.
    fn finish_offering(&mut self) -> bool {
        let Some(o) = self.offering.take() else {
            return false;
        };
        for (peer, paused) in o.streams {
            if let Some(a) = self.assocs.get_mut(&peer) {
                a.resume_tcp(&self.ex, paused);
            }
        }
        self.kept = !o.taken;
        o.taken
    }

    /// A listener closed during an offer: applies the verdicts its task
    /// did not read. By the time the service closes the listeners after a
    /// hand-over, every verdict has been sent or its channel closed; one
    /// still undecided (the server stops in the middle of a hand-over)
    /// leaves nothing kept: the associations end with the listener.
    fn settle_offering(&mut self) {
        let mut undecided = false;
        // Bounded: every turn removes one answer.
        while let Some(answer) = self.next_answer() {
            let taken = match answer.try_recv() {
                Ok(taken) => taken,
                Err(async_channel::TryRecvError::Closed) => false,
                Err(async_channel::TryRecvError::Empty) => {
                    undecided = true;
                    false
                }
            };
            self.apply_verdict(taken);
        }
        self.finish_offering();
        if undecided {
            self.kept = false;
        }
    }

    /// `oi upgrade`: pauses every UDP→TCP association's task at its next
    /// safe point (all at once, waiting [`PAUSE_WITHIN`] at most) and
    /// returns their parts by client; one that does not pause in time, or
    /// is still connecting, pumps on and stays here.
    async fn pause_streams(&self) -> HashMap<SocketAddr, Paused> {
        let asked: Vec<_> = self
            .assocs
            .iter()
            .filter(|(_, a)| !a.activity.ended() && a.ask_pause())
            .map(|(peer, _)| *peer)
            .collect();
        let deadline = Instant::now() + PAUSE_WITHIN;
        let mut paused = HashMap::new();
        for peer in asked {
            if let Some(a) = self.assocs.get(&peer) {
                if let Some(p) = a.paused(deadline).await {
                    paused.insert(peer, p);
                }
            }
        }
        paused
    }

    /// Started by `oi upgrade`: the associations the previous oi handed over
    /// for this rule join the map, each where it was (its counters, its
    /// idle time, its backend socket and port).
    fn resume_handed(&mut self) {
        let route = self.route.load_full();
        for o in self.shared.parking.unstash(&route.bind.to_string()) {
            let (client, origin) = match &o.flow {
                Flow::Datagram { client, origin, .. } | Flow::UdpToTcp { client, origin, .. } => {
                    (*client, *origin)
                }
                _ => continue,
            };
            let conn = self.stats.register_resumed(ConnKind::Udp, origin.client);
            conn.add_from_client(o.up.bytes);
            conn.add_to_client(o.down.bytes);
            let resumed = match o.flow {
                Flow::UdpToTcp { backend, idle, .. } => Association::resumed_tcp(
                    &self.ex,
                    route.clone(),
                    &self.shared,
                    &self.socket,
                    client,
                    origin,
                    (backend, o.up.unsent),
                    idle,
                    conn,
                ),
                Flow::Datagram { backend, idle, .. } => Association::resumed(
                    &self.ex,
                    route.clone(),
                    &self.shared,
                    &self.socket,
                    client,
                    origin,
                    backend,
                    idle,
                    conn,
                ),
                _ => continue,
            };
            match resumed {
                Ok(a) => {
                    self.assocs.insert(client, a);
                }
                Err(e) => log::warn!("upgrade: cannot take up the association of {client}: {e}"),
            }
        }
    }

    /// Ends associations idle for their timeout, and those whose upstream ended.
    fn sweep(&mut self) {
        let now = Instant::now();
        let log = &self.shared.log;
        self.assocs.retain(|_, a| {
            let keep = !a.activity.ended() && a.activity.idle(now) < a.route.udp_timeout();
            if !keep {
                log.log_with(|| a.log_event(Event::DoneLocalClosed));
            }
            keep
        });
    }
}

impl Drop for Listener {
    /// The listener is gone (removed by a reload, or the server stops): its
    /// associations cannot receive from their clients any more, so they end
    /// too. After `oi upgrade`, those the new oi did not take (it failed
    /// half-way, or lacks the rule) are served on by a task of their own.
    fn drop(&mut self) {
        if self.offering.is_some() {
            self.settle_offering();
        }
        let live: HashMap<_, _> = self
            .assocs
            .drain()
            .filter(|(_, a)| !a.activity.ended())
            .collect();
        if self.kept && !live.is_empty() && self.shared.parking.keep_serving() {
            let counted = Counted(self.shared.clone());
            log::info!(
                "upgrade: {} UDP association(s) of {} the new oi did not take are served here until they end",
                live.len(),
                self.route.load().bind
            );
            self.ex
                .spawn(serve_kept(self.socket.clone(), live, counted))
                .detach();
            return;
        }
        for (_, a) in live {
            self.shared
                .log
                .log_with(|| a.log_event(Event::DoneLocalClosed));
        }
    }
}

/// Counts a [`serve_kept`] task in the parking until dropped.
struct Counted(Arc<Shared>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.parking.kept_ended();
    }
}

/// Under `accept-proxy`, a kept association's datagram without its
/// header, if the header is trusted and speaks for the association's own
/// client; else the datagram is counted and dropped, as the listener does.
fn kept_payload<'d>(
    shared: &Shared,
    a: &Association,
    datagram: &'d [u8],
    peer: SocketAddr,
) -> Option<&'d [u8]> {
    match edge::accept_datagram_header(datagram, peer, &a.route) {
        Ok((origin, payload)) if origin == a.origin => Some(payload),
        Ok((origin, _)) => {
            log::debug!(
                "{}/udp: {peer} now speaks for {}, not {}: dropped (this oi opens no association)",
                a.route.bind,
                origin.client,
                a.origin.client
            );
            None
        }
        Err(why) => {
            let stats = a.activity.conn.rule();
            shared.udp_proxy_datagram_dropped(stats, &a.route.bind, peer, &why);
            None
        }
    }
}

/// After `oi upgrade`: serves the associations the new oi did not take,
/// and only them (a datagram from any other client is dropped: this oi has
/// stopped accepting), until each has ended or been idle for its timeout;
/// the old oi exits after.
async fn serve_kept(
    socket: Arc<Async<UdpSocket>>,
    mut assocs: HashMap<SocketAddr, Association>,
    counted: Counted,
) {
    let shared = &counted.0;
    let family = batch::Family::of_socket(socket.get_ref());
    while !assocs.is_empty() {
        let _ = async { socket.readable().await.is_ok() }
            .or(async {
                Timer::after(MAX_SWEEP).await;
                true
            })
            .await;
        let mut moved = 0;
        while moved < BATCH {
            let each = |mut peer: SocketAddr, run: &[&[u8]]| {
                if let SocketAddr::V6(v6) = &mut peer {
                    v6.set_flowinfo(0);
                }
                let Some(a) = assocs.get(&peer) else {
                    return;
                };
                if !a.route.accept_proxy {
                    return a.forward_run(run);
                }
                // Each datagram carries its header, checked as the listener
                // checks it; one that speaks for another client is dropped
                // (this oi opens no association any more).
                for datagram in run {
                    if let Some(payload) = kept_payload(shared, a, datagram, peer) {
                        a.forward(payload);
                    }
                }
            };
            // The listener's socket has UDP_GRO on: read through the batch
            // module, which splits coalesced groups at their segment size.
            match batch::recv_runs(socket.get_ref(), family, each) {
                Ok(got) => {
                    moved += got.datagrams.max(1);
                    if got.drained {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if is_transient(&e) => moved += 1,
                Err(_) => break,
            }
        }
        let now = Instant::now();
        assocs.retain(|_, a| {
            let keep = !a.activity.ended() && a.activity.idle(now) < a.route.udp_timeout();
            if !keep {
                shared.log.log_with(|| a.log_event(Event::DoneLocalClosed));
            }
            keep
        });
    }
}
