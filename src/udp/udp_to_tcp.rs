//! UDP→TCP: an association whose backend is a TCP stream (a `/udp`
//! listener with a TCP backend). The listener queues each client datagram
//! ([`Queued`]); one task per association connects, then writes the queue
//! to the stream in order and sends each read from the stream back to the
//! client as one datagram.
//!
//! `oi upgrade` hands such an association over (`docs/handover.md`): its
//! listener, which has stopped reading, asks the task to pause ([`Pause`]).
//! At a safe point (no datagram half-written to the stream, no reply
//! half-sent) the task takes what waits in its queue out as unsent bytes
//! and gives its stream back to the listener ([`Paused`]), which offers it
//! to the new oi and then lets it go or starts the task again where it
//! stopped ([`carry`], its unsent bytes first).
//!
//! Hand-over state declared here: [`Paused`], what a paused task gives
//! back (its stream, its lease, its reply half and the queued datagrams as
//! unsent bytes); the association hands the stream and those bytes over.

use super::reply::Reply;
use super::MAX_PAYLOAD;
use crate::backends::connect;
use crate::backends::Lease;
use crate::net::bounds::Charge;
use crate::route::shared::Shared;
use crate::route::{client_ip, Route};
use crate::stats::ConnectFailure;
use async_channel::{Receiver, Sender};
use atomic_waker::AtomicWaker;
use futures_lite::{AsyncWriteExt, FutureExt};
use oi_runtime::reactor::Async;
use oi_wire::proxy::Encoded;
use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::Poll;

/// A datagram on its way to a TCP backend: the association queues it, this
/// task writes it (here, not in `assoc`, so the queue's element is this
/// task's and only `assoc` depends on `udp_to_tcp`).
pub(crate) struct Queued {
    /// The payload, in an allocation of exactly its size: a pooled 64 KiB
    /// buffer per queued one-byte datagram is what let 8,000 sources pin 2.5 GB.
    bytes: Box<[u8]>,
    /// Its share of the association's budget, given back when written or dropped.
    _assoc: Charge,
    /// Its share of the process-wide budget, given back likewise.
    _total: Charge,
}

impl Queued {
    /// `payload`, copied into an allocation of its own size, holding its
    /// two charges until it is written or dropped.
    pub(super) fn new(payload: &[u8], assoc: Charge, total: Charge) -> Queued {
        Queued {
            bytes: payload.into(),
            _assoc: assoc,
            _total: total,
        }
    }

    /// The datagram's payload.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// [`Pause`] states: the task is still connecting (it cannot be paused:
/// it stays with the old oi, as a TCP connection that is still connecting).
const CONNECTING: u8 = 0;
/// The task pumps.
const RUNNING: u8 = 1;
/// The listener asks the task to pause at its next safe point.
const ASKED: u8 = 2;
/// The task has paused: its [`Paused`] is on its way to the listener.
const TAKEN: u8 = 3;

/// How the listener asks a UDP→TCP association's task to pause, and learns
/// whether it did: one state that only a compare-and-swap moves, so an ask
/// the listener withdraws (its wait ran out) and a pause the task commits
/// to can never both happen.
pub(crate) struct Pause {
    /// One of [`CONNECTING`], [`RUNNING`], [`ASKED`], [`TAKEN`].
    state: AtomicU8,
    /// The task, woken when asked.
    waker: AtomicWaker,
}

impl Pause {
    /// A cell for a task that connects first.
    pub(super) fn connecting() -> Arc<Pause> {
        Arc::new(Pause {
            state: AtomicU8::new(CONNECTING),
            waker: AtomicWaker::new(),
        })
    }

    /// A cell for a task with its stream already (handed over, or resumed).
    pub(super) fn running() -> Arc<Pause> {
        Arc::new(Pause {
            state: AtomicU8::new(RUNNING),
            waker: AtomicWaker::new(),
        })
    }

    /// Listener: asks the task to pause. `false` when it cannot be (still
    /// connecting, or asked already).
    pub(super) fn ask(&self) -> bool {
        let asked = self
            .state
            .compare_exchange(RUNNING, ASKED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if asked {
            self.waker.wake();
        }
        asked
    }

    /// Listener: withdraws an ask. `false` when the task has paused
    /// meanwhile: its [`Paused`] is on its way (sent without waiting).
    pub(super) fn withdraw(&self) -> bool {
        self.state
            .compare_exchange(ASKED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Listener: the task runs again (resumed after a pause).
    pub(super) fn rearm(&self) {
        self.state.store(RUNNING, Ordering::Release);
    }

    /// Task: connected; it may be asked now.
    fn connected(&self) {
        let _ =
            self.state
                .compare_exchange(CONNECTING, RUNNING, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Task: completes once asked with neither direction busy, having
    /// committed to pause (polled after the directions, so their progress
    /// in the same wake-up is seen).
    async fn asked(&self, busy: &Busy) {
        std::future::poll_fn(|cx| {
            self.waker.register(cx.waker());
            let idle = !busy.up.load(Ordering::Relaxed) && !busy.down.load(Ordering::Relaxed);
            let committed = idle
                && self
                    .state
                    .compare_exchange(ASKED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
            if committed {
                Poll::Ready(())
            } else {
                // Busy: the direction's own wake-up polls this again.
                Poll::Pending
            }
        })
        .await
    }
}

/// Whether a direction is in the middle of moving bytes it has taken.
#[derive(Default)]
struct Busy {
    /// A queued datagram is being written to the stream.
    up: AtomicBool,
    /// A read from the stream is being sent to the client.
    down: AtomicBool,
}

/// A paused UDP→TCP association's task, given back to its listener.
pub(crate) struct Paused {
    /// The stream to the backend.
    pub(super) stream: Async<TcpStream>,
    /// Counts the association on its backend while it lasts (none when a
    /// handed-over one's backend is no member here).
    pub(super) lease: Option<Lease>,
    /// How replies reach the client.
    pub(super) reply: Reply,
    /// The datagrams that waited in the queue, in order: the stream's next
    /// bytes.
    pub(super) unsent: Vec<u8>,
}

/// Where a task's parts go: the queue it reads, the pause cell, and the
/// channel its [`Paused`] goes back by.
pub(super) struct Control {
    /// Client datagrams, from the listener.
    pub(super) queue: Receiver<Queued>,
    /// Asks it to pause.
    pub(super) pause: Arc<Pause>,
    /// Where it gives its stream back when it pauses.
    pub(super) parked: Sender<Paused>,
}

/// Connects, then carries the association ([`carry`]).
pub(super) async fn connect_then_carry(
    control: Control,
    route: Arc<Route>,
    shared: Arc<Shared>,
    reply: Reply,
    proxy: Option<Encoded>,
    dial: connect::Dial,
) {
    let connect_timeout = route.connect_timeout(shared.settings.connect_timeout);
    let connected = async {
        let rule = reply.activity.conn.rule();
        let client = client_ip(reply.client);
        let counted = |e: &io::Error| rule.connect_failed(ConnectFailure::of(e));
        let connected = connect::through_pool(&route.pool, client, connect_timeout, dial, counted)
            .await
            .map_err(|e| {
                if let connect::ConnectError::LocalSocket(why) = &e {
                    rule.connect_failed(ConnectFailure::Other);
                    let peer = reply.client;
                    shared.local_socket_failed(&route.names.connect_host, &peer, why);
                }
                io::Error::other(e.to_string())
            })?;
        // UDP rules have IP backends only (the parsers refuse unix ones).
        if let Some(addr) = connected.addr {
            reply.activity.conn.connected(addr);
        }
        // Before the first queued datagram: the stream starts with it.
        if let Some(h) = &proxy {
            (&connected.stream).write_all(h.as_bytes()).await?;
        }
        Ok::<_, io::Error>(connected)
    }
    // `oi close` while it connects ends it as a failed connect would.
    .or(async {
        reply.activity.conn.closed().await;
        Err(io::Error::other(CLOSED))
    })
    .await;
    match connected {
        Ok(c) => {
            control.pause.connected();
            let paused = Paused {
                stream: c.stream,
                lease: Some(c.lease),
                reply,
                unsent: Vec::new(),
            };
            carry(paused, control, shared, route).await
        }
        Err(e) => {
            log::debug!("{} -> {}: {e}", reply.client, route.names.connect_host);
            reply.activity.end();
        }
    }
}

/// Why an association `oi close` ended says so in the debug log.
const CLOSED: &str = "closed by an operator (oi close)";

/// How [`carry`]'s directions ended.
enum Ended {
    /// The stream or the client's side ended (an error, or EOF).
    Done(io::Result<()>),
    /// Asked to pause, at a safe point.
    Pause,
}

/// Writes `from.unsent` then the queued datagrams to the stream in order,
/// and sends what the stream returns back as datagrams of at most one read
/// each, until the stream ends (then the association ends) or the listener
/// asks it to pause (then the task gives its parts back and returns).
pub(super) async fn carry(from: Paused, control: Control, shared: Arc<Shared>, route: Arc<Route>) {
    let Paused {
        stream,
        lease,
        reply,
        mut unsent,
    } = from;
    // `lease` counts the association on its backend while the stream lives.
    let datagrams = &shared.datagrams;
    // What the previous pause took out of the queue goes first (not
    // pausable: short, and a stuck write keeps it here as a stuck pump does).
    if !unsent.is_empty() {
        if let Err(e) = (&stream).write_all(&unsent).await {
            log::debug!("{} -> {}: {e}", reply.client, route.names.connect_host);
            return reply.activity.end();
        }
        unsent.clear();
    }
    let busy = Busy::default();
    let ended = {
        let to_backend = async {
            while let Ok(q) = control.queue.recv().await {
                busy.up.store(true, Ordering::Relaxed);
                let written = (&stream).write_all(q.bytes()).await;
                busy.up.store(false, Ordering::Relaxed);
                written?;
            }
            Ok::<(), io::Error>(())
        };
        let to_client = async {
            // Wait for an edge only once a read found the stream empty: the
            // reactor is edge-triggered, and a full read may leave bytes
            // behind that no edge announces again. Not drained at first: a
            // resumed task may come after its edge was consumed.
            let mut drained = false;
            loop {
                if drained {
                    stream.readable().await?;
                }
                let mut buf = datagrams.take();
                let read = (&mut stream.get_ref()).read(&mut buf[..MAX_PAYLOAD]);
                drained = false;
                let outcome = match read {
                    Ok(0) => Some(Ok(())),
                    Ok(n) => {
                        busy.down.store(true, Ordering::Relaxed);
                        reply.send(&buf[..n]).await;
                        busy.down.store(false, Ordering::Relaxed);
                        None
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        drained = true;
                        None
                    }
                    Err(e) => Some(Err(e)),
                };
                datagrams.give(buf);
                if let Some(done) = outcome {
                    return done;
                }
            }
        };
        let asked = async {
            control.pause.asked(&busy).await;
            Ended::Pause
        };
        // `oi close` ends the association as a backend error would: the
        // stream closes, and the client's next datagram opens a new one.
        let closed = async {
            reply.activity.conn.closed().await;
            Ended::Done(Err(io::Error::other(CLOSED)))
        };
        async { Ended::Done(to_backend.await) }
            .or(async { Ended::Done(to_client.await) })
            .or(asked)
            .or(closed)
            .await
    };
    match ended {
        Ended::Pause => {
            // This task returns: the one that resumes the parts (if `oi
            // upgrade` keeps them here) watches the close flag with its own waker.
            reply.activity.conn.unwatch();
            // The listener reads nothing while it offers: the queue holds
            // every datagram it passed on and the stream has not had.
            while let Ok(q) = control.queue.try_recv() {
                unsent.extend_from_slice(q.bytes());
            }
            let paused = Paused {
                stream,
                lease,
                reply,
                unsent,
            };
            // Capacity one, one pause at a time: never full.
            let _ = control.parked.try_send(paused);
        }
        Ended::Done(result) => {
            if let Err(e) = result {
                log::debug!("{} -> {}: {e}", reply.client, route.names.connect_host);
            }
            reply.activity.end();
        }
    }
}
