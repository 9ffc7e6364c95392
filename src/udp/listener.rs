//! The `/udp` listener task: reads client datagrams, keeps the map of
//! associations, expires idle ones and enforces the per-rule cap. Its part
//! in `oi upgrade` (offering the associations, taking up handed-over ones,
//! serving on the ones kept) is `listener/upgrade.rs`.

mod upgrade;

use super::assoc::{Association, Start};
use super::{batch, is_transient, BATCH};
use crate::logfile::Event;
use crate::route::edge::{self, Origin};
use crate::route::shared::Shared;
use crate::route::{client_ip, Bytes, Route};
use crate::stats::RuleStats;
use arc_swap::ArcSwap;
use futures_lite::FutureExt;
use oi_runtime::executor::Executor;
use oi_runtime::reactor::{Async, Timer};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upgrade::{serve_kept, Counted, Offering};

/// Longest gap between expiry sweeps; an association ends at most this late.
const MAX_SWEEP: Duration = Duration::from_secs(1);

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

impl Listener {
    /// Reads datagrams and sweeps, forever.
    async fn run(&mut self) {
        let socket = self.socket.clone();
        batch::enable_gro(socket.get_ref());
        let family = batch::Family::of_socket(socket.get_ref());
        let mut pace = batch::Pace::default();
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
                    let abandoned = self.shared.parking.until_abandoned();
                    if self.offer(&ticket).await {
                        // The new oi serves this rule and reads its socket
                        // now: reading here too would give a client's
                        // datagrams to a second association. The task ends
                        // when the listener closes, with what stays here,
                        // unless the new oi fails its health question: then
                        // this one reads again (the associations it took
                        // are gone with it; their clients' next datagrams
                        // open new ones here).
                        let _ = abandoned.recv().await;
                        // As before any offer; the next hand-over decides again.
                        self.kept = false;
                        more = true;
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
        let opened = Association::start(
            &self.ex,
            route.clone(),
            &self.shared,
            &self.socket,
            peer,
            origin,
            Start::Fresh { epoch: self.epoch },
            &self.stats,
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
