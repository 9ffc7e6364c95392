//! A per-thread reactor under the executors (`crate::executor`): one epoll per executor
//! thread, sockets registered once, edge-triggered, and timers kept in the
//! thread's own queue: 6 system calls per 64 B round trip, not 16.1 (below).
//!
//! # Why not async-io's reactor
//!
//! async-io has one reactor for the process. Its epoll interest is oneshot,
//! so every readiness event costs an `epoll_ctl` to re-arm, and every wait
//! costs a `timerfd_settime`, an `epoll_ctl` for the timerfd, an eventfd read
//! and an `epoll_ctl` for the eventfd (the `polling` crate's wait path).
//! `strace -f` of a 64-byte ping-pong through oi counted 16.1 system calls
//! per round trip, of which 4 are the reads and writes that move the bytes
//! (docs/performance.md, "The wait path: a reactor of oi's own").
//!
//! Here each executor thread blocks in [`block_on`] on its own epoll:
//!
//! - a socket is added once (`EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET`)
//!   the first time it is polled, and removed by the kernel when it closes:
//!   no `epoll_ctl` per event, none per close;
//! - timers live in the thread's own queue ([`timer::TimerQueue`]) and the
//!   soonest becomes the `epoll_wait` timeout: no timerfd;
//! - a waker running on the thread that runs the task only sets a flag; the
//!   eventfd is written only when another thread wakes a sleeping one
//!   (`wake.rs`).
//!
//! # One thread per reactor, no fallback
//!
//! A source ([`Async`], [`SharedListener`]) or [`Timer`] registers with the
//! reactor of the thread that polls it first, and is polled from that
//! thread only: readiness is recorded by that thread's turn and consumed by
//! its tasks. Only a thread inside [`block_on`] drives a reactor (a
//! runtime's executor threads; a test's own `block_on`). A source polled on
//! any other thread, a control-plane thread under async-io or a plain test
//! thread, is refused (a debug build panics, see [`current`]): there is no
//! process-wide fallback reactor and no thread of its own for one.
//! `debug_assert!`s check that a registration and a timer are polled only
//! on their reactor's thread, and that a reactor turns only on its own.
//!
//! The data path uses this reactor: TCP listeners, client and backend
//! sockets, unix stream sockets carried as `TcpStream`, and UDP sockets
//! (listeners, associations, TCP->UDP streams; registered for reading only,
//! see [`Readiness::datagram`]). The control plane (signals, the control
//! socket, the metrics endpoint, the health probes) uses async-io's: see
//! the crate's notes.

mod accept;
mod block_on;
mod io;
mod timer;
mod wake;

pub use accept::Board;
pub use block_on::block_on;
#[cfg(all(test, shuttle))]
pub(crate) use block_on::{drive, Park};
#[cfg(all(test, shuttle))]
pub(crate) use io::Wait;
pub use io::{Async, SharedListener};
pub use timer::Timer;
use timer::{TimerId, TimerQueue};
pub(crate) use wake::WakeFlags;

// parking_lot's locks, not std's, here and in `accept` and `io`: a readiness
// lock is taken on every poll for readiness and every event, and std's lock
// and unlock each ask whether the thread is panicking (for poisoning, which a
// release build, aborting on panic, never sees): 207 of 2,978 user-space
// instructions per 64 B round trip (callgrind; docs/performance.md,
// "Instructions per connection and per round trip").
use parking_lot::Mutex;
use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::event::{eventfd, EventfdFlags};
use rustix::time::Timespec;
use std::cell::{Cell, RefCell};
use std::io as stdio;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

/// The epoll key of the reactor's own eventfd (sources use slab keys below it).
const WAKE_KEY: u64 = u64::MAX;

/// Events taken from the kernel per `epoll_wait`.
const EVENTS_PER_WAIT: usize = 256;

/// Readiness of one registered descriptor, and the tasks waiting on it.
///
/// One waiter per direction in the slots, as async-io's `poll_readable`: on
/// the TCP path each socket has one task reading it and one writing it. A
/// UDP listener has several writers (every association's reply task sends
/// from it): waiters of [`Async::readable`]/[`Async::writable`] that find
/// the slot taken by another task queue in `others`, and every waiter an
/// edge wakes sees it through the direction's tick.
#[derive(Default)]
pub struct Readiness {
    /// An edge reported readability that no poll has consumed yet.
    readable: bool,
    /// An edge reported writability that no poll has consumed yet.
    writable: bool,
    /// The peer has shut down its sending side (RDHUP or HUP): reading
    /// returns EOF from now on. Kept, never consumed: a short read may have
    /// taken the last bytes with the FIN behind them, and no edge comes after.
    /// Never set on a datagram socket.
    read_closed: bool,
    /// The socket failed or hung up (ERR or HUP): every operation returns
    /// at once from now on. Kept, never consumed. Never set on a datagram
    /// socket, whose errors belong to one datagram each (an ICMP error is
    /// read once by the next receive, and the socket goes on).
    broken: bool,
    /// A datagram socket: errors are not sticky, and writability is
    /// watched only while a writer waits (`out_armed`), because a UDP
    /// socket with EPOLLOUT in its interest reports an edge after every
    /// send, which would wake the thread once more per datagram.
    datagram: bool,
    /// A datagram socket's interest includes EPOLLOUT now.
    out_armed: bool,
    /// Per direction (0 read, 1 write): edges seen, in the low seven bits,
    /// wrapping: a waiter that saw the tick move was woken by an edge, even
    /// if another waiter consumed the flag first; and [`WAITS`], set while
    /// the slot's task waits for an edge. One byte each, so the six flags
    /// and both ticks share one word: `Readiness` is 48 bytes, not 56, and
    /// its `Arc` a 80-byte heap chunk, not 96, for each of a connection's
    /// two sockets: 32 bytes less per idle connection. A waiter woken by an
    /// edge is polled long before 128 more edges could bring the tick back
    /// round.
    ticks: [u8; 2],
    /// The task that reads, kept after an edge woke it: it waits again at
    /// its next `WouldBlock`, and the same task's waker is not cloned
    /// again (see [`Readiness::edge`]).
    reader: Option<Waker>,
    /// The task that writes, kept likewise.
    writer: Option<Waker>,
    /// Further waiters (`true`: to write) when the slot holds another task;
    /// boxed so the common one-waiter case costs one pointer, not a
    /// `Vec`'s three words, in every connection's two sockets.
    #[allow(clippy::box_collection)]
    others: Option<Box<Vec<(bool, Waker)>>>,
}

/// The bit of a [`Readiness`] tick byte that says the slot's task waits.
const WAITS: u8 = 0x80;

impl Readiness {
    /// Direction `i`'s edge count (seven bits, wrapping).
    fn tick(&self, i: usize) -> u8 {
        self.ticks[i] & !WAITS
    }

    /// Marks direction `i`'s slot task as waiting for an edge; says whether
    /// it already was ([`Readiness::edge`] clears the mark).
    fn set_waits(&mut self, i: usize) -> bool {
        let was = self.ticks[i] & WAITS != 0;
        self.ticks[i] |= WAITS;
        was
    }

    /// Records an edge in one direction and wakes its waiters: the slot's
    /// task in place, by reference, if it waits (it keeps its place, so its
    /// next wait clones nothing: a waker clone and a by-value wake were two
    /// atomic read-modify-writes on the task per wait, the by-reference wake
    /// is one); queued ones through `wake`. The wake runs under
    /// the reactor's locks: an executor's wake only queues the task (and
    /// may write another thread's eventfd), and takes none of them.
    pub(crate) fn edge(&mut self, write: bool, wake: &mut Vec<Waker>) {
        let i = usize::from(write);
        let waits = self.ticks[i] & WAITS != 0;
        // The count moves on (a carry out of its seven bits lands in `WAITS`
        // and goes with it), and the slot's task waits no more.
        self.ticks[i] = self.ticks[i].wrapping_add(1) & !WAITS;
        if write {
            self.writable = true;
        } else {
            self.readable = true;
        }
        if waits {
            let slot = if write { &self.writer } else { &self.reader };
            if let Some(w) = slot {
                w.wake_by_ref();
            }
        }
        if let Some(others) = &mut self.others {
            others.retain(|(w, waker)| {
                if *w == write {
                    wake.push(waker.clone());
                }
                *w != write
            });
        }
    }
}

/// The reactor's registered descriptors, by slot; a key is slot and generation.
#[derive(Default)]
struct Sources {
    /// Each slot's generation and, while in use, its readiness.
    slots: Vec<(u32, Option<Arc<Mutex<Readiness>>>)>,
    /// Slots free for reuse.
    free: Vec<u32>,
}

/// One epoll instance with its eventfd, registered sources and timers.
pub struct Reactor {
    /// The epoll instance.
    epoll: OwnedFd,
    /// Written by another thread to interrupt a wait.
    wake: OwnedFd,
    /// What each epoll key refers to.
    sources: Mutex<Sources>,
    /// Pending timers.
    timers: Mutex<TimerQueue>,
    /// Whether any timer is pending, stored under `timers`' lock after each
    /// change: a turn with none (a connection's steady traffic sets none)
    /// takes that lock neither before nor after its wait, four atomic
    /// read-modify-writes fewer per turn (44 -> 34 per 64 B round trip,
    /// benches/conn_footprint.sh).
    timers_pending: AtomicBool,
    /// Whether the driving thread sleeps or must go round again (see [`wake`]).
    flags: WakeFlags,
    /// The runtime's board of busy threads and this thread's index on it;
    /// `None` for a reactor outside a runtime (tests).
    seat: Option<(Arc<Board>, usize)>,
    /// Listening sockets shared with the other threads (see [`accept`]).
    accepting: Mutex<accept::Accepting>,
}

thread_local! {
    /// The reactor this thread drives, if it runs one (executor threads do).
    static CURRENT: RefCell<Option<Arc<Reactor>>> = const { RefCell::new(None) };
}

thread_local! {
    /// The event buffer and waker list of [`Reactor::turn`] on this thread,
    /// reused (empty between turns; taken out while a turn runs).
    static SCRATCH: Cell<(Vec<epoll::Event>, Vec<Waker>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

thread_local! {
    /// A pump on this thread spent its whole byte budget in one poll, or a
    /// UDP task its batch, since the last load verdict
    /// ([`accept::Load::note`]): the thread carries a flow that wants more
    /// than it gets.
    static BUDGET_SPENT: Cell<bool> = const { Cell::new(false) };
}

/// Records that a task on this thread spent its budget in one poll (a TCP
/// pump its bytes, a UDP listener or association its batch of datagrams).
pub fn note_budget_spent() {
    BUDGET_SPENT.with(|b| b.set(true));
}

/// Whether a task on this thread spent its budget since the last
/// [`take_budget_spent`], leaving the mark.
fn budget_spent() -> bool {
    BUDGET_SPENT.with(Cell::get)
}

/// Whether a task on this thread spent its budget since the last call.
fn take_budget_spent() -> bool {
    BUDGET_SPENT.with(|b| b.replace(false))
}

/// The reactor this thread drives, if it drives one: an executor thread
/// inside [`block_on`]. There is no fallback: a source or timer of this
/// crate polled on any other thread is a bug (see [`driving`]).
pub fn current() -> Option<Arc<Reactor>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The reactor a source or timer first polled now registers with: this
/// thread's. On a thread that drives none (a control-plane thread under
/// async-io, a plain test thread) that is a bug, not a case to serve: a
/// debug build panics, a release build returns the error (a timer never
/// fires), rather than register on a reactor no thread drives, or on
/// another thread's.
#[inline]
fn driving(what: &str) -> stdio::Result<Arc<Reactor>> {
    match current() {
        Some(reactor) => Ok(reactor),
        None => Err(no_reactor(what)),
    }
}

/// [`driving`]'s refusal: panics in a debug build, else the error.
#[cold]
#[inline(never)]
fn no_reactor(what: &str) -> stdio::Error {
    let thread = std::thread::current();
    let e = format!(
        "{what} polled on thread {:?}, which drives no oi reactor: only the runtime's \
         threads (oi_runtime::reactor::block_on, Runtime) may poll oi's sockets and timers",
        thread.name().unwrap_or("unnamed")
    );
    if cfg!(debug_assertions) {
        panic!("{e}");
    }
    stdio::Error::other(e)
}

/// Whether `reactor` is the one this thread drives.
fn is_current(reactor: &Reactor) -> bool {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .is_some_and(|r| std::ptr::eq(Arc::as_ptr(r), reactor))
    })
}

impl Reactor {
    /// A new epoll instance with its eventfd registered.
    pub fn new() -> stdio::Result<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(
            &epoll,
            &wake,
            EventData::new_u64(WAKE_KEY),
            EventFlags::IN | EventFlags::ET,
        )?;
        Ok(Reactor {
            epoll,
            wake,
            sources: Mutex::default(),
            timers: Mutex::default(),
            timers_pending: AtomicBool::new(false),
            flags: WakeFlags::new(),
            seat: None,
            accepting: Mutex::default(),
        })
    }

    /// A reactor for thread `index` of a runtime whose threads share `board`.
    pub fn seated(board: Arc<Board>, index: usize) -> stdio::Result<Self> {
        let mut r = Self::new()?;
        r.seat = Some((board, index));
        Ok(r)
    }

    /// Makes this thread drive `reactor` (for [`current`]) until the guard drops.
    pub fn enter(reactor: Arc<Reactor>) -> Entered {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(reactor));
        Entered { previous }
    }

    /// Registers `fd` once, edge-triggered for both directions (a datagram
    /// socket: for reading only, see [`Readiness::datagram`]); returns its key.
    fn register(
        &self,
        fd: impl AsFd,
        datagram: bool,
    ) -> stdio::Result<(u64, Arc<Mutex<Readiness>>)> {
        let (key, readiness) = self.new_source(datagram)?;
        if let Err(e) = epoll::add(
            &self.epoll,
            fd,
            EventData::new_u64(key),
            interest(datagram, false),
        ) {
            self.deregister(key);
            return Err(e.into());
        }
        Ok((key, readiness))
    }

    /// A new slot with fresh readiness; returns its key.
    fn new_source(&self, datagram: bool) -> stdio::Result<(u64, Arc<Mutex<Readiness>>)> {
        let readiness = Arc::new(Mutex::new(Readiness {
            datagram,
            ..Readiness::default()
        }));
        let key = {
            let mut s = self.sources.lock();
            let slot = match s.free.pop() {
                Some(slot) => slot,
                None => {
                    let slot = u32::try_from(s.slots.len())
                        .map_err(|_| stdio::Error::other("too many registered sockets"))?;
                    s.slots.push((0, None));
                    slot
                }
            };
            let entry = &mut s.slots[slot as usize];
            entry.1 = Some(readiness.clone());
            (u64::from(entry.0) << 32) | u64::from(slot)
        };
        Ok((key, readiness))
    }

    /// Forgets `key`; its descriptor is about to close (which removes it from
    /// the epoll set) or has been deleted from it.
    fn deregister(&self, key: u64) {
        let slot = (key & u64::from(u32::MAX)) as usize;
        let mut s = self.sources.lock();
        if let Some(entry) = s.slots.get_mut(slot) {
            entry.0 = entry.0.wrapping_add(1);
            entry.1 = None;
            if let Ok(slot) = u32::try_from(slot) {
                s.free.push(slot);
            }
        }
    }

    /// Adds a timer firing at `at`; returns its id. Only the driving
    /// thread adds timers (a timer registers with the reactor of the thread
    /// that first polls it), and it looks at its timers before it next
    /// sleeps: no interrupt is needed, even for a new soonest one.
    fn add_timer(self: &Arc<Self>, at: Instant, waker: Waker) -> TimerId {
        debug_assert!(is_current(self), "a timer added from another thread");
        let mut t = self.timers.lock();
        let (id, _soonest) = t.add(at, waker);
        self.timers_pending.store(true, Ordering::Release);
        id
    }

    /// Replaces the waker of timer `id`; false if it is no longer pending.
    fn update_timer(&self, id: TimerId, waker: &Waker) -> bool {
        self.timers.lock().update(id, waker)
    }

    /// Removes timer `id` if it is still pending.
    fn remove_timer(&self, id: TimerId) {
        let mut t = self.timers.lock();
        t.remove(id);
        self.timers_pending.store(!t.is_empty(), Ordering::Release);
    }

    /// Asks the driving thread to go round again; writes the eventfd only if
    /// it sleeps (or is about to).
    pub fn interrupt(&self) {
        if self.flags.interrupt() {
            // A full counter (never in practice) still leaves the eventfd readable.
            let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        }
    }

    /// Waits for events (blocking when `block`, up to the soonest timer),
    /// then wakes the tasks whose sockets or timers are ready.
    fn turn(&self, block: bool) -> stdio::Result<()> {
        debug_assert!(
            is_current(self),
            "a reactor turned by a thread that does not drive it"
        );
        // The wakes below may put tasks on this thread's own run queue.
        let _waking = crate::executor::MayWake::enter();
        // This thread's buffers, kept from turn to turn: a fresh event
        // buffer (3 KiB, past malloc's per-thread cache) and waker list per
        // turn cost about a tenth of the instructions a 64-byte round trip
        // runs in oi (callgrind: 6,793 -> 5,872 instructions; see
        // docs/performance.md, "Instructions per connection and per round
        // trip").
        let (mut events, mut wake) = SCRATCH.with(|s| s.take());
        events.clear();
        events.reserve(EVENTS_PER_WAIT);
        let waited = self.flags.around_wait(block, |may_block| {
            let timeout = if may_block {
                self.capped(self.next_timeout())
            } else {
                Some(Duration::ZERO)
            };
            let timeout = timeout.map(|d| {
                // Whole milliseconds, rounded up so a timer never fires early
                // and the thread never spins on a sub-millisecond remainder.
                let ms = d.as_nanos().div_ceil(1_000_000);
                Timespec {
                    tv_sec: i64::try_from(ms / 1000).unwrap_or(i64::MAX),
                    tv_nsec: ((ms % 1000) * 1_000_000) as _,
                }
            });
            epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                timeout.as_ref(),
            )
        });
        match waited {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                SCRATCH.with(|s| s.set((events, wake)));
                return Err(e.into());
            }
        }
        // One lock of the source table for the whole batch, and each
        // source's readiness updated under it rather than cloned out: per
        // event, that saves an `Arc` clone and drop and a lock and unlock,
        // four atomic read-modify-writes. Lock order: sources,
        // then a readiness; nothing locks a readiness and then the sources.
        let mut woken = false;
        if !events.is_empty() {
            let s = self.sources.lock();
            for ev in &events {
                let key = ev.data.u64();
                if key == WAKE_KEY {
                    woken = true;
                    continue;
                }
                let slot = (key & u64::from(u32::MAX)) as usize;
                let readiness = match s.slots.get(slot) {
                    Some((generation, Some(r))) if u64::from(*generation) == key >> 32 => r,
                    // Closed since the kernel queued the event.
                    _ => continue,
                };
                let flags = ev.flags;
                let broken = flags.intersects(EventFlags::ERR | EventFlags::HUP);
                let mut r = readiness.lock();
                if !r.datagram {
                    r.broken |= broken;
                    r.read_closed |= broken || flags.contains(EventFlags::RDHUP);
                }
                if broken || flags.intersects(EventFlags::IN | EventFlags::RDHUP | EventFlags::PRI)
                {
                    r.edge(false, &mut wake);
                }
                if broken || flags.contains(EventFlags::OUT) {
                    r.edge(true, &mut wake);
                }
            }
        }
        if woken {
            let mut buf = [0u8; 8];
            let _ = rustix::io::read(&self.wake, &mut buf);
        }
        self.fire_timers(&mut wake);
        for w in wake.drain(..) {
            w.wake();
        }
        SCRATCH.with(|s| s.set((events, wake)));
        Ok(())
    }

    /// How long the driving thread may sleep: until the soonest timer (`None`: forever).
    fn next_timeout(&self) -> Option<Duration> {
        if !self.timers_pending.load(Ordering::Acquire) {
            return None;
        }
        let at = self.timers.lock().next_deadline()?;
        Some(at.saturating_duration_since(Instant::now()))
    }

    /// Takes the wakers of every timer that is due.
    fn fire_timers(&self, into: &mut Vec<Waker>) {
        if !self.timers_pending.load(Ordering::Acquire) {
            return;
        }
        let mut t = self.timers.lock();
        t.fire(Instant::now(), into);
        self.timers_pending.store(!t.is_empty(), Ordering::Release);
    }
}

/// The epoll interest of a socket: both directions for a stream socket;
/// for a datagram socket, reading and, while a writer waits, writing.
fn interest(datagram: bool, out: bool) -> EventFlags {
    if datagram && !out {
        EventFlags::IN | EventFlags::ET
    } else {
        EventFlags::IN | EventFlags::OUT | EventFlags::RDHUP | EventFlags::ET
    }
}

/// Restores the thread's previous reactor when dropped.
pub struct Entered {
    /// What [`current`] returned before.
    previous: Option<Arc<Reactor>>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// A waker that counts its wakes: for the tests of the reactor and its timers.
#[cfg(test)]
#[derive(Default)]
pub struct WakeCount(pub std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl std::task::Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests;
