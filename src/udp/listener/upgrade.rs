//! A `/udp` listener's part in `oi upgrade`: offering its associations to
//! the new oi (UDP→TCP ones paused at a safe point first) and applying the
//! verdicts, taking up those the previous oi handed over, and serving on
//! the ones the new oi did not take after the listener closes.

use super::{Listener, MAX_SWEEP};
use crate::logfile::Event;
use crate::route::edge;
use crate::route::park::{self, Flow, HalfState, Handing, Parked, Ticket};
use crate::route::shared::Shared;
use crate::udp::activity::Carried;
use crate::udp::assoc::{Association, Handed, Start};
use crate::udp::udp_to_tcp::Paused;
use crate::udp::{batch, is_transient, BATCH};
use futures_lite::FutureExt;
use oi_runtime::reactor::{Async, Timer};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long `oi upgrade` waits for a listener's UDP→TCP associations to
/// pause (within the hand-over's [`park::PARK_WITHIN`]): a task gets there
/// at its next poll unless a write to its backend or client is stuck.
const PAUSE_WITHIN: Duration = Duration::from_secs(2);

/// An offer's verdicts still to apply. Kept in the listener, not in
/// `offer`'s locals: the service closes the listeners as soon as the
/// hand-over ends, which may be before this task has run to read the
/// verdicts (its thread is busy, or the service's future ran first: with
/// the verdicts in `offer`'s locals, the four "dies taking" upgrade tests
/// lost the association the old oi should keep in 6 of 8 runs beside two
/// busy loops). A listener closed with an offer here applies the verdicts
/// in `drop`.
pub(super) struct Offering {
    /// Each offered association's client, and the channel its verdict
    /// comes on (`true`: the new oi took it), in the order offered.
    answers: std::collections::VecDeque<(SocketAddr, async_channel::Receiver<bool>)>,
    /// The paused tasks of the UDP→TCP associations offered, by client.
    streams: HashMap<SocketAddr, Paused>,
    /// The new oi took at least one association.
    taken: bool,
}

impl Listener {
    /// `oi upgrade`: offers every association to the new oi and waits
    /// (reading nothing: datagrams wait in the socket) for the verdicts.
    /// Those taken leave the map without a log line (the new oi logs their
    /// end); the others stay (a UDP→TCP one's task starts again). `true`:
    /// the new oi took some, so it serves this rule.
    pub(super) async fn offer(&mut self, ticket: &Ticket<'_>) -> bool {
        let rule = self.route.load().bind.to_string();
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
                    bytes: from_client,
                    ..HalfState::default()
                },
                down: HalfState {
                    bytes: to_client,
                    ..HalfState::default()
                },
                age: a.activity.conn.age(),
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
                age: a.activity.conn.age(),
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
            if let Some(a) = self.assocs.remove(&peer) {
                a.activity.conn.handed_on();
            }
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
    pub(super) fn settle_offering(&mut self) {
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
    pub(super) fn resume_handed(&mut self) {
        let route = self.route.load_full();
        for o in self.shared.parking.unstash(&route.bind.to_string()) {
            let (client, origin, upstream, idle) = match o.flow {
                Flow::Datagram {
                    client,
                    origin,
                    backend,
                    idle,
                } => (client, origin, Handed::Datagram(backend), idle),
                Flow::UdpToTcp {
                    client,
                    origin,
                    backend,
                    idle,
                } => (client, origin, Handed::Stream(backend, o.up.unsent), idle),
                _ => continue,
            };
            let carried = Carried {
                from_client: o.up.bytes,
                to_client: o.down.bytes,
                idle,
                age: o.age,
            };
            let resumed = Association::start(
                &self.ex,
                route.clone(),
                &self.shared,
                &self.socket,
                client,
                origin,
                Start::Handed { upstream, carried },
                &self.stats,
            );
            match resumed {
                Ok(a) => {
                    self.assocs.insert(client, a);
                }
                Err(e) => log::warn!("upgrade: cannot take up the association of {client}: {e}"),
            }
        }
    }
}

/// Counts a [`serve_kept`] task in the parking until dropped.
pub(super) struct Counted(pub(super) Arc<Shared>);

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
pub(super) async fn serve_kept(
    socket: Arc<Async<UdpSocket>>,
    mut assocs: HashMap<SocketAddr, Association>,
    counted: Counted,
) {
    let shared = &counted.0;
    let family = batch::Family::of_socket(socket.get_ref());
    let mut pace = batch::Pace::default();
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
            match batch::recv_runs(socket.get_ref(), family, &mut pace, each) {
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
