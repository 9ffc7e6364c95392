//! Accept that avoids a busy thread: one listening socket per
//! port, watched by every executor thread's epoll with `EPOLLEXCLUSIVE`,
//! which a busy thread leaves until it catches up.
//!
//! # Why not one `SO_REUSEPORT` socket per thread
//!
//! The kernel hashes each new connection to one socket of a reuseport group,
//! whatever its thread is doing: connections that hash to the thread running
//! a bulk flow wait until its pumps yield, and the accept rate during one
//! iperf3 -P1 flow fell to 35–59% of the unloaded rate
//! (`benches/accept_busy.sh`).
//!
//! # How
//!
//! - Each thread's accept loop registers the one socket in its own epoll
//!   with `EPOLLEXCLUSIVE`: a new connection wakes one thread sleeping in
//!   `epoll_wait`, not all of them (no herd). A thread that is running
//!   rather than sleeping does not count as woken, so the kernel goes on to
//!   the next epoll set: an idle thread gets the connection first.
//! - The interest is level-triggered: a loop accepts one connection per
//!   report, and the thread's next `epoll_wait` reports the socket again
//!   while more are queued. Draining to `EAGAIN` (edge-triggered) ended
//!   every wake-up with a failed `accept4`, and a thread whose set was
//!   marked for a connection another thread took was told of it anyway;
//!   the kernel polls a level-triggered socket before reporting it.
//! - A thread that slept less than a tenth of the last [`WINDOW`] while a
//!   task on it spent its budget (a bulk flow) is busy:
//!   it takes its listening sockets out of its epoll set, if another thread
//!   is in and idle, so it does not take the connection either when it next
//!   looks for events. It puts them back once a window shows it idle
//!   again; adding reports a connection already waiting at once.
//! - Some thread always stays in: a thread leaves only when another one is
//!   in and idle, each publishing its state before looking at the others'.

use super::{Reactor, Readiness};
use parking_lot::Mutex;
use rustix::event::epoll::{self, EventData, EventFlags};
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The span over which a thread's load is judged.
pub(super) const WINDOW: Duration = Duration::from_millis(10);

/// A thread in its listeners' epoll sets, idle.
const IN_IDLE: u8 = 0;
/// A thread in its listeners' epoll sets, busy (no other thread was idle to take over).
const IN_BUSY: u8 = 1;
/// A busy thread out of its listeners' epoll sets.
const OUT: u8 = 2;

/// The executor threads of one runtime, each with its state ([`IN_IDLE`],
/// [`IN_BUSY`] or [`OUT`]): what a thread about to leave looks at.
pub struct Board {
    /// One state per thread, by index.
    states: Vec<AtomicU8>,
}

impl Board {
    /// A board for `threads` threads, all in and idle.
    pub fn new(threads: usize) -> Arc<Self> {
        Arc::new(Board {
            states: (0..threads).map(|_| AtomicU8::new(IN_IDLE)).collect(),
        })
    }

    /// Whether thread `index` is busy (in or out).
    pub fn is_busy(&self, index: usize) -> bool {
        self.states
            .get(index)
            .is_some_and(|s| s.load(Ordering::Relaxed) != IN_IDLE)
    }
}

/// The listening sockets registered with one reactor, and whether they are
/// in its epoll set now.
#[derive(Default)]
pub(super) struct Accepting {
    /// The thread is busy and took them out.
    out: bool,
    /// Each socket's key and a reference keeping it open while registered
    /// (to take it out and put it back).
    sockets: Vec<Listening>,
}

/// One listening socket of [`Accepting`].
struct Listening {
    /// Its key in the reactor.
    key: u64,
    /// The socket, kept open while registered.
    socket: Arc<dyn AsFd + Send + Sync>,
    /// Out of the epoll set while its accept loop backs off after an error
    /// ([`Reactor::step_aside`]): level-triggered, a socket with a queued
    /// connection this thread cannot take (out of descriptors) would make
    /// every `epoll_wait` return at once, and the thread spin.
    aside: bool,
}

/// The interest of a shared listening socket: level-triggered, so a
/// thread accepts one connection per report and the next `epoll_wait`
/// reports the socket again while connections are queued. The kernel polls
/// a level-triggered socket before reporting it, so a thread whose set was
/// marked ready for a connection another thread already took is not told
/// of it (edge-triggered, each such report and each drain to `EAGAIN` was
/// a failed `accept4`).
fn exclusive() -> EventFlags {
    EventFlags::IN | EventFlags::EXCLUSIVE
}

impl Reactor {
    /// Registers a listening socket shared with the other threads (see the
    /// module docs); returns its key.
    pub(super) fn register_exclusive(
        &self,
        socket: Arc<dyn AsFd + Send + Sync>,
    ) -> io::Result<(u64, Arc<Mutex<Readiness>>)> {
        let (key, readiness) = self.new_source(false)?;
        let mut a = self.accepting.lock();
        if !a.out {
            if let Err(e) = self.watch_shared(key, &socket) {
                drop(a);
                self.deregister(key);
                return Err(e.into());
            }
        }
        a.sockets.push(Listening {
            key,
            socket,
            aside: false,
        });
        Ok((key, readiness))
    }

    /// Adds a shared listening socket to this thread's epoll set with its
    /// interest ([`exclusive`]); adding reports a connection already queued.
    fn watch_shared(
        &self,
        key: u64,
        socket: &Arc<dyn AsFd + Send + Sync>,
    ) -> rustix::io::Result<()> {
        epoll::add(&self.epoll, socket, EventData::new_u64(key), exclusive())
    }

    /// Takes a shared listening socket out of this reactor for good (its
    /// accept loop ended; the socket may stay open elsewhere).
    pub(super) fn deregister_exclusive(&self, key: u64) {
        let mut a = self.accepting.lock();
        if let Some(i) = a.sockets.iter().position(|l| l.key == key) {
            let l = a.sockets.swap_remove(i);
            if !a.out && !l.aside {
                // Gone already if the socket closed meanwhile: nothing to undo.
                let _ = epoll::delete(&self.epoll, &l.socket);
            }
        }
        drop(a);
        self.deregister(key);
    }

    /// Takes a shared listening socket out of this thread's epoll set while
    /// its accept loop backs off after an error; [`step_back`](Self::step_back)
    /// puts it back. Costs two `epoll_ctl` per error, never per connection.
    pub(super) fn step_aside(&self, key: u64) {
        let mut a = self.accepting.lock();
        let out = a.out;
        if let Some(l) = a.sockets.iter_mut().find(|l| l.key == key && !l.aside) {
            if !out {
                let _ = epoll::delete(&self.epoll, &l.socket);
            }
            l.aside = true;
        }
    }

    /// Puts a socket [`step_aside`](Self::step_aside) took out back in (a
    /// connection still queued is reported at once). Nothing to do for one
    /// that is in.
    pub(super) fn step_back(&self, key: u64) {
        let mut a = self.accepting.lock();
        let out = a.out;
        if let Some(l) = a.sockets.iter_mut().find(|l| l.key == key && l.aside) {
            if !out {
                // Failing (no memory) leaves this thread out of the socket;
                // the other threads serve it.
                let _ = self.watch_shared(key, &l.socket);
            }
            l.aside = false;
        }
    }

    /// How long the driving thread may sleep, `timeout` at most (`None`:
    /// forever): no longer than a [`WINDOW`] while it is marked busy.
    ///
    /// A thread is judged when it wakes. One that went to sleep marked busy
    /// (its bulk flow ended within a window) would otherwise stay busy, and
    /// out of its listeners' epoll sets, until some event of its own woke
    /// it: with nothing to wake it, every new connection went to the other
    /// thread (in `benches/compare.sh`, all eight iperf3 -P8 streams ran on
    /// one thread after a -P1 run, and beside a bulk flow the other thread
    /// took 2 of 137 clock ticks). One wake-up a window after a busy spell
    /// ends is what the verdict costs.
    pub(super) fn capped(&self, timeout: Option<Duration>) -> Option<Duration> {
        let marked = self
            .seat
            .as_ref()
            .is_some_and(|(board, me)| board.is_busy(*me));
        match timeout {
            Some(t) if marked => Some(t.min(WINDOW)),
            None if marked => Some(WINDOW),
            other => other,
        }
    }

    /// Records whether the driving thread is busy, taking its listening
    /// sockets out of its epoll set or putting them back.
    pub(super) fn set_busy(&self, busy: bool) {
        let Some((board, me)) = &self.seat else {
            return;
        };
        let Some(state) = board.states.get(*me) else {
            return;
        };
        let mut a = self.accepting.lock();
        if !busy {
            if a.out {
                for l in a.sockets.iter().filter(|l| !l.aside) {
                    // Adding reports a connection already queued at once.
                    // Failing (no memory) leaves this thread out of that
                    // socket only; the others serve it.
                    let _ = self.watch_shared(l.key, &l.socket);
                }
                a.out = false;
                log::trace!("thread {me}: idle again, back in its listeners' epoll sets");
            }
            state.store(IN_IDLE, Ordering::SeqCst);
            return;
        }
        if a.out {
            return;
        }
        state.store(IN_BUSY, Ordering::SeqCst);
        let other_idle = board
            .states
            .iter()
            .enumerate()
            .any(|(i, s)| i != *me && s.load(Ordering::SeqCst) == IN_IDLE);
        if !other_idle || a.sockets.is_empty() {
            return;
        }
        for l in a.sockets.iter().filter(|l| !l.aside) {
            let _ = epoll::delete(&self.epoll, &l.socket);
        }
        a.out = true;
        state.store(OUT, Ordering::SeqCst);
        log::trace!("thread {me}: busy, out of its listeners' epoll sets");
    }
}

/// The driving thread's sleep over the current [`WINDOW`], timed only while
/// the thread may be busy.
pub(super) struct Load {
    /// When the current window began; `None` while no task on the thread
    /// spent its budget since it was last judged idle. Such a thread cannot
    /// be busy, so its waits are not timed: two clock reads per wait were
    /// about 300 instructions per 64 B round trip (callgrind,
    /// `benches/rtt_instructions.sh`).
    start: Option<Instant>,
    /// How long the thread slept in `epoll_wait` since.
    slept: Duration,
}

impl Load {
    /// No window yet: one starts when a task spends its budget.
    pub(super) fn new() -> Self {
        Load {
            start: None,
            slept: Duration::ZERO,
        }
    }

    /// Whether the coming wait is to be timed and noted: a window is
    /// running, or one starts now because a task spent its budget.
    pub(super) fn timing(&mut self) -> bool {
        self.timing_spent(super::budget_spent)
    }

    /// [`timing`](Self::timing), with where the budget flag comes from.
    fn timing_spent(&mut self, spent: impl FnOnce() -> bool) -> bool {
        if self.start.is_none() {
            if !spent() {
                return false;
            }
            self.start = Some(Instant::now());
            self.slept = Duration::ZERO;
        }
        true
    }

    /// Adds `slept`, ending at `now`; at the end of a window, whether the
    /// thread was busy in it. Busy: it slept less than a tenth of the window
    /// and a task on it spent its budget (a pump its bytes, a UDP task its
    /// batch: a bulk flow). A thread kept awake by many short connections is
    /// not busy in this sense: leaving and rejoining would cost an
    /// `epoll_ctl` pair each time and send it nothing it could not take
    /// (0.09 calls per connection in `benches/syscalls.sh` when low sleep
    /// alone was busy). A busy thread's windows go on, back to back, until
    /// one finds it idle; then timing stops.
    pub(super) fn note(&mut self, now: Instant, slept: Duration) -> Option<bool> {
        self.note_spent(now, slept, super::take_budget_spent)
    }

    /// [`note`](Self::note), with where the budget flag comes from.
    fn note_spent(
        &mut self,
        now: Instant,
        slept: Duration,
        spent: impl FnOnce() -> bool,
    ) -> Option<bool> {
        let start = self.start?;
        self.slept += slept;
        let span = now.saturating_duration_since(start);
        if span < WINDOW {
            return None;
        }
        let busy = spent() && self.slept.saturating_mul(10) < span;
        self.start = busy.then_some(now);
        self.slept = Duration::ZERO;
        Some(busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// Whether `reactor`'s epoll reported a source readable since the last
    /// look (one turn without waiting, by this thread as its driver).
    fn heard(reactor: &Arc<Reactor>, readiness: &Mutex<Readiness>) -> bool {
        let _driving = Reactor::enter(reactor.clone());
        reactor.turn(false).expect("epoll_wait");
        std::mem::take(&mut readiness.lock().readable)
    }

    #[test]
    fn a_busy_thread_leaves_while_another_is_idle_and_one_always_stays() {
        let board = Board::new(2);
        let r0 = Arc::new(Reactor::seated(board.clone(), 0).expect("epoll"));
        let r1 = Arc::new(Reactor::seated(board.clone(), 1).expect("epoll"));
        let l = Arc::new(TcpListener::bind("127.0.0.1:0").expect("bind"));
        l.set_nonblocking(true).expect("non-blocking");
        let addr = l.local_addr().expect("addr");
        let (k0, ready0) = r0.register_exclusive(l.clone()).expect("register");
        let (k1, ready1) = r1.register_exclusive(l.clone()).expect("register");

        // Thread 0 busy, thread 1 idle: 0 leaves, and only 1 hears a connection.
        r0.set_busy(true);
        assert!(board.is_busy(0) && !board.is_busy(1));
        let _c1 = TcpStream::connect(addr).expect("connect");
        assert!(
            !heard(&r0, &ready0),
            "the busy thread heard a new connection"
        );
        assert!(heard(&r1, &ready1), "the idle thread did not hear it");
        l.accept().expect("accept");

        // Thread 1 busy too: nobody idle to take over, so 1 stays in.
        r1.set_busy(true);
        let _c2 = TcpStream::connect(addr).expect("connect");
        assert!(heard(&r1, &ready1), "the last thread in left");
        l.accept().expect("accept");

        // Thread 0 idle again: back in, and a connection already queued is
        // reported at once.
        let _c3 = TcpStream::connect(addr).expect("connect");
        r0.set_busy(false);
        assert!(!board.is_busy(0));
        assert!(
            heard(&r0, &ready0),
            "a rejoining thread missed a queued connection"
        );

        r0.deregister_exclusive(k0);
        r1.deregister_exclusive(k1);
    }

    #[test]
    fn a_queued_connection_is_reported_until_taken_and_never_while_aside() {
        // Level-triggered: one accept per report, no drain to EAGAIN, and no
        // report of a connection that is not there.
        // Two seats, the other idle, so a busy spell takes this one out.
        let board = Board::new(2);
        let r0 = Arc::new(Reactor::seated(board.clone(), 0).expect("epoll"));
        let l = Arc::new(TcpListener::bind("127.0.0.1:0").expect("bind"));
        l.set_nonblocking(true).expect("non-blocking");
        let addr = l.local_addr().expect("addr");
        let (k0, ready0) = r0.register_exclusive(l.clone()).expect("register");
        let _c1 = TcpStream::connect(addr).expect("connect");
        let _c2 = TcpStream::connect(addr).expect("connect");
        assert!(heard(&r0, &ready0), "two queued, none reported");
        l.accept().expect("accept the first");
        assert!(heard(&r0, &ready0), "the second was not reported again");
        l.accept().expect("accept the second");
        assert!(!heard(&r0, &ready0), "an empty queue was reported");

        // Backing off after an error: out of the set, so no spin on a
        // connection this thread cannot take; back in, reported at once.
        let _c3 = TcpStream::connect(addr).expect("connect");
        r0.step_aside(k0);
        assert!(!heard(&r0, &ready0), "a socket stepped aside was reported");
        r0.set_busy(true);
        assert!(board.is_busy(0));
        r0.set_busy(false);
        assert!(
            !heard(&r0, &ready0),
            "rejoining after a busy spell put it back"
        );
        r0.step_back(k0);
        assert!(
            heard(&r0, &ready0),
            "the queued connection was not reported"
        );
        r0.deregister_exclusive(k0);
    }

    #[test]
    fn a_thread_marked_busy_sleeps_no_longer_than_a_window() {
        // Else a thread that fell asleep busy stays out of its listeners
        // until something of its own wakes it (goals.sh's -P8 on one thread).
        let board = Board::new(2);
        let r0 = Arc::new(Reactor::seated(board.clone(), 0).expect("epoll"));
        let l = Arc::new(TcpListener::bind("127.0.0.1:0").expect("bind"));
        let (k0, _) = r0.register_exclusive(l).expect("register");
        assert_eq!(r0.capped(None), None, "an idle thread may sleep forever");
        r0.set_busy(true);
        assert_eq!(r0.capped(None), Some(WINDOW));
        assert_eq!(r0.capped(Some(WINDOW * 5)), Some(WINDOW));
        let short = WINDOW / 2;
        assert_eq!(r0.capped(Some(short)), Some(short));
        // The next window judges it idle: back in, sleeping as long as it likes.
        r0.set_busy(false);
        assert_eq!(r0.capped(None), None);
        r0.deregister_exclusive(k0);
    }

    #[test]
    fn a_window_with_less_than_a_tenth_asleep_and_a_budget_spent_is_busy() {
        let mut load = Load::new();
        // Nothing spent: no window, nothing timed.
        assert!(!load.timing_spent(|| false));
        assert_eq!(
            load.note_spent(Instant::now(), Duration::ZERO, || true),
            None
        );
        // A budget spent: a window starts; within it, no verdict yet.
        assert!(load.timing_spent(|| true));
        let start = load.start.expect("a window");
        assert_eq!(load.note_spent(start, Duration::ZERO, || true), None);
        // Awake all window, a budget spent again: busy, and the next window runs.
        assert_eq!(
            load.note_spent(start + WINDOW, Duration::ZERO, || true),
            Some(true)
        );
        assert!(load.timing_spent(|| false));
        // Half the window asleep: idle, and timing stops.
        let start = load.start.expect("a window");
        assert_eq!(
            load.note_spent(start + WINDOW, WINDOW / 2, || true),
            Some(false)
        );
        assert!(!load.timing_spent(|| false));
        // Awake all window, but no task wanted more than its budget: idle.
        assert!(load.timing_spent(|| true));
        let start = load.start.expect("a window");
        assert_eq!(
            load.note_spent(start + WINDOW, Duration::ZERO, || false),
            Some(false)
        );
    }
}
