//! Active health checks: one thread (`oi-probe`) probes every member of
//! every pool whose rule sets `check-interval`, and feeds the results to
//! the member's health (`backends/health.rs`), the same state failed
//! client connects feed.
//!
//! A probe connects (from the backend's `src` when set), writes
//! `check-send`, reads until the reply has `check-expect`'s length, and
//! closes; all within `check-timeout`. It is not client traffic: no
//! counter, no connection log line. A state change is logged ("backend X
//! is down: ...; 3 failed probes in a row", "is up again after 2 good
//! probes"); single failures only at debug level.
//!
//! The thread is a control-plane thread: smol's `LocalExecutor` under
//! `async_io::block_on`, its sockets and timers async-io's
//! (`connect::for_probe`, `unix::connect_for_probe`), never oi's data-plane
//! reactor (which only the runtime's threads drive; see `oi_runtime`).
//!
//! Bounds: one thread for the whole server, started with the first pool
//! that has a check; at most [`MAX_IN_FLIGHT`] probes (so descriptors) at
//! once, and none between probes: a socket exists only while its probe
//! runs. At most one probe per member is in flight. Members are spread
//! over the interval (each new one starts at a golden-ratio offset), so a
//! thousand backends at 1 s are a probe a millisecond, not a burst. The
//! thread holds pools weakly: a pool a reload replaced or removed (retired)
//! is forgotten when its next probe is due, even while connections from
//! before the reload still use it; the pool that replaced it shares its
//! members' health (`BackendPool::keep_state_of`) and brings its own
//! schedule.

use crate::backends::{reply, BackendPool, Change, Check, Member, Reply};
use async_io::Timer;
use futures_lite::{AsyncReadExt, AsyncWriteExt, FutureExt};
use smol::LocalExecutor;
use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Most probes in flight at once, over every pool: the thread's descriptor
/// bound. At a 2 s timeout that still probes 128 dead backends a second.
pub(crate) const MAX_IN_FLIGHT: usize = 256;

/// How often the thread looks for members a DNS refresh added.
const RESCAN: Duration = Duration::from_secs(1);

/// The server's prober: starts its thread with the first pool that has a check.
#[derive(Default)]
pub(crate) struct Prober {
    /// The thread's inbox, once it runs.
    sender: Mutex<Option<async_channel::Sender<Weak<BackendPool>>>>,
}

impl Prober {
    /// Probes `pool`'s members for as long as the pool lives, if its rule
    /// has a check; a pool shared by several listeners is taken once.
    pub(crate) fn watch(&self, pool: &Arc<BackendPool>) {
        if pool.check().is_none() || !pool.start_probing() {
            return;
        }
        let mut slot = self.sender.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            let (tx, rx) = async_channel::unbounded();
            let started = std::thread::Builder::new()
                .name("oi-probe".into())
                .spawn(move || {
                    let ex = Rc::new(LocalExecutor::new());
                    async_io::block_on(ex.run(schedule(rx, ex.clone())));
                });
            if let Err(e) = started {
                log::error!("cannot start the health check thread: {e}");
                return;
            }
            *slot = Some(tx);
        }
        if let Some(tx) = slot.as_ref() {
            let _ = tx.try_send(Arc::downgrade(pool));
        }
    }
}

/// One member's place in the schedule.
struct Due {
    /// When its next probe starts.
    at: Instant,
    /// Order of insertion, so equal times pop in a fixed order.
    seq: u64,
    /// Its pool (for the check and the log).
    pool: Weak<BackendPool>,
    /// The member.
    member: Weak<Member>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    /// Reversed: the heap's top is the earliest.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A watched pool.
struct Watched {
    /// The pool, while it lives.
    pool: Weak<BackendPool>,
    /// Its member list's generation when last scanned.
    generation: u64,
    /// The members scheduled (by address of their allocation).
    known: HashSet<usize>,
}

/// The schedule: pops members as they come due, starts their probes within
/// [`MAX_IN_FLIGHT`], and waits for the next due time, a new pool, or a
/// free slot. Ends when the server (the sender) is gone.
async fn schedule(inbox: async_channel::Receiver<Weak<BackendPool>>, ex: Rc<LocalExecutor<'_>>) {
    let mut heap: BinaryHeap<Due> = BinaryHeap::new();
    let mut pools: Vec<Watched> = Vec::new();
    let mut seq: u64 = 0;
    let in_flight = Rc::new(Cell::new(0usize));
    let freed = Rc::new(event_listener::Event::new());
    let mut rescan_at = Instant::now() + RESCAN;
    loop {
        let now = Instant::now();
        if now >= rescan_at {
            pools.retain(|w| w.pool.strong_count() > 0);
            for w in &mut pools {
                add_members(w, &mut heap, &mut seq, now);
            }
            rescan_at = now + RESCAN;
        }
        while in_flight.get() < MAX_IN_FLIGHT && heap.peek().is_some_and(|d| d.at <= now) {
            let Some(mut due) = heap.pop() else { break };
            let (Some(pool), Some(member)) = (due.pool.upgrade(), due.member.upgrade()) else {
                if let Some(w) = pools.iter_mut().find(|w| w.pool.ptr_eq(&due.pool)) {
                    w.known.remove(&(due.member.as_ptr() as usize));
                }
                continue;
            };
            let Some(check) = pool.check().cloned() else {
                continue;
            };
            // Replaced by a reload; connections from before may still use it.
            if pool.retired() {
                continue;
            }
            if member.state().start_probe() {
                in_flight.set(in_flight.get() + 1);
                let (in_flight, freed) = (in_flight.clone(), freed.clone());
                let check2 = check.clone();
                ex.spawn(async move {
                    let result = probe(&member, &check2).await;
                    member.state().end_probe();
                    report(&member, &check2, result);
                    drop(pool);
                    in_flight.set(in_flight.get().saturating_sub(1));
                    freed.notify(1);
                })
                .detach();
            }
            // Next round: one interval on, or from now when the thread fell behind.
            due.at = due
                .at
                .checked_add(check.interval)
                .filter(|&at| at > now)
                .unwrap_or_else(|| now + check.interval);
            heap.push(due);
        }
        let next = heap.peek().map_or(rescan_at, |d| d.at).min(rescan_at);
        let freed_slot = freed.listen();
        let saturated = in_flight.get() >= MAX_IN_FLIGHT;
        let timer = async {
            if saturated {
                freed_slot.await;
            } else {
                Timer::at(next).await;
            }
            None
        };
        match async { Some(inbox.recv().await) }.or(timer).await {
            Some(Ok(pool)) => {
                let mut w = Watched {
                    pool,
                    generation: u64::MAX,
                    known: HashSet::new(),
                };
                add_members(&mut w, &mut heap, &mut seq, Instant::now());
                pools.push(w);
            }
            Some(Err(_)) => return,
            None => {}
        }
    }
}

/// Schedules the members of `w`'s pool it has not seen, if the member list
/// changed since the last look; each starts at a golden-ratio fraction of
/// the interval, so however many there are, they are spread evenly.
fn add_members(w: &mut Watched, heap: &mut BinaryHeap<Due>, seq: &mut u64, now: Instant) {
    let Some(pool) = w.pool.upgrade().filter(|p| !p.retired()) else {
        return;
    };
    let Some(check) = pool.check() else { return };
    let generation = pool.generation();
    if generation == w.generation {
        return;
    }
    w.generation = generation;
    for m in pool.members().iter() {
        if !w.known.insert(Arc::as_ptr(m) as usize) {
            continue;
        }
        *seq = seq.wrapping_add(1);
        let fraction = (*seq as f64 * 0.618_033_988_749_895).fract();
        heap.push(Due {
            at: now + check.interval.mul_f64(fraction),
            seq: *seq,
            pool: w.pool.clone(),
            member: Arc::downgrade(m),
        });
    }
}

/// One probe of `member`: its round trip, or why it failed.
async fn probe(member: &Member, check: &Check) -> Result<Duration, String> {
    let started = Instant::now();
    let work = async {
        let mut stream = match member.unix() {
            Some(unix) => crate::sys::unix::connect_for_probe(unix, check.timeout)
                .await
                .map_err(|e| format!("cannot connect: {e}"))?,
            None => {
                let addrs = member.addrs().to_vec();
                crate::backends::connect::for_probe(&addrs, member.src(), check.timeout)
                    .await
                    .map(|(s, _)| s)
                    .map_err(|e| e.to_string())?
            }
        };
        if !check.send.is_empty() {
            stream
                .write_all(&check.send)
                .await
                .map_err(|e| format!("cannot send the probe: {e}"))?;
        }
        let mut got = vec![0u8; check.expect.len()];
        let mut n = 0;
        while reply(&check.expect, &got[..n]) == Reply::More {
            let read = stream
                .read(&mut got[n..])
                .await
                .map_err(|e| format!("cannot read the reply: {e}"))?;
            if read == 0 {
                return Err(format!("the backend closed after {n} bytes of the reply"));
            }
            n += read;
        }
        if reply(&check.expect, &got[..n]) == Reply::Differs {
            return Err(format!(
                "unexpected reply '{}'",
                String::from_utf8_lossy(&got[..n]).escape_debug()
            ));
        }
        Ok(started.elapsed())
    };
    let deadline = async {
        Timer::after(check.timeout).await;
        Err(format!("probe timed out after {}", seconds(check.timeout)))
    };
    work.or(deadline).await
}

/// `2s`, `1.5s`.
fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// Feeds one probe's result to the member's health, logging a change.
fn report(member: &Member, check: &Check, result: Result<Duration, String>) {
    let state = member.state();
    match result {
        Ok(rtt) => {
            if let Change::Up(n) = state.probe_passed(check.rise, rtt) {
                log::info!(
                    backend:% = member.label(), reason = "backend-up";
                    "backend {} is up again after {n} good probe{}",
                    member.label(),
                    if n == 1 { "" } else { "s" }
                );
            }
        }
        Err(why) => match state.probe_failed(check.fall) {
            Change::Down(n) => log::warn!(
                backend:% = member.label(), reason = "backend-down";
                "backend {} is down: {why}; {n} failed probe{} in a row",
                member.label(),
                if n == 1 { "" } else { "s" }
            ),
            _ => log::debug!("backend {}: probe failed: {why}", member.label()),
        },
    }
}
