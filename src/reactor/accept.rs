//! Accept that avoids a busy thread (issue 23): one listening socket per
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
//! - A thread that slept less than a tenth of the last [`WINDOW`] is busy:
//!   it takes its listening sockets out of its epoll set, if another thread
//!   is in and idle, so it does not take the connection either when it next
//!   looks for events. It puts them back once a window shows it idle
//!   again; adding reports a connection already waiting at once.
//! - Some thread always stays in: a thread leaves only when another one is
//!   in and idle, each publishing its state before looking at the others'.

use super::{lock, Reactor, Readiness};
use rustix::event::epoll::{self, EventData, EventFlags};
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
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
pub(crate) struct Board {
    /// One state per thread, by index.
    states: Vec<AtomicU8>,
}

impl Board {
    /// A board for `threads` threads, all in and idle.
    pub(crate) fn new(threads: usize) -> Arc<Self> {
        Arc::new(Board {
            states: (0..threads).map(|_| AtomicU8::new(IN_IDLE)).collect(),
        })
    }

    /// Whether thread `index` is busy (in or out).
    pub(crate) fn is_busy(&self, index: usize) -> bool {
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
    sockets: Vec<(u64, Arc<dyn AsFd + Send + Sync>)>,
}

/// The interest of a shared listening socket.
fn exclusive() -> EventFlags {
    EventFlags::IN | EventFlags::ET | EventFlags::EXCLUSIVE
}

impl Reactor {
    /// Registers a listening socket shared with the other threads (see the
    /// module docs); returns its key.
    pub(super) fn register_exclusive(
        &self,
        socket: Arc<dyn AsFd + Send + Sync>,
    ) -> io::Result<(u64, Arc<Mutex<Readiness>>)> {
        let (key, readiness) = self.new_source(false)?;
        let mut a = lock(&self.accepting);
        if !a.out {
            if let Err(e) = epoll::add(&self.epoll, &socket, EventData::new_u64(key), exclusive()) {
                drop(a);
                self.deregister(key);
                return Err(e.into());
            }
        }
        a.sockets.push((key, socket));
        Ok((key, readiness))
    }

    /// Takes a shared listening socket out of this reactor for good (its
    /// accept loop ended; the socket may stay open elsewhere).
    pub(super) fn deregister_exclusive(&self, key: u64) {
        let mut a = lock(&self.accepting);
        if let Some(i) = a.sockets.iter().position(|(k, _)| *k == key) {
            let (_, socket) = a.sockets.swap_remove(i);
            if !a.out {
                // Gone already if the socket closed meanwhile: nothing to undo.
                let _ = epoll::delete(&self.epoll, &socket);
            }
        }
        drop(a);
        self.deregister(key);
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
        let mut a = lock(&self.accepting);
        if !busy {
            if a.out {
                for (key, socket) in &a.sockets {
                    // Adding reports a connection already queued at once.
                    // Failing (no memory) leaves this thread out of that
                    // socket only; the others serve it.
                    let _ = epoll::add(&self.epoll, socket, EventData::new_u64(*key), exclusive());
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
        for (_, socket) in &a.sockets {
            let _ = epoll::delete(&self.epoll, socket);
        }
        a.out = true;
        state.store(OUT, Ordering::SeqCst);
        log::trace!("thread {me}: busy, out of its listeners' epoll sets");
    }
}

/// The driving thread's sleep over the current [`WINDOW`].
pub(super) struct Load {
    /// When the window began.
    start: Instant,
    /// How long the thread slept in `epoll_wait` since.
    slept: Duration,
}

impl Load {
    /// A window starting now.
    pub(super) fn new() -> Self {
        Load {
            start: Instant::now(),
            slept: Duration::ZERO,
        }
    }

    /// Adds `slept`; at the end of a window, whether the thread was busy
    /// in it (slept less than a tenth of it), and a new window begins.
    pub(super) fn note(&mut self, slept: Duration) -> Option<bool> {
        self.slept += slept;
        let now = Instant::now();
        let span = now.saturating_duration_since(self.start);
        if span < WINDOW {
            return None;
        }
        let busy = self.slept.saturating_mul(10) < span;
        self.start = now;
        self.slept = Duration::ZERO;
        Some(busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// Whether `reactor`'s epoll reported a source readable since the last
    /// look (one turn without waiting).
    fn heard(reactor: &Reactor, readiness: &Mutex<Readiness>) -> bool {
        reactor.turn(false).expect("epoll_wait");
        std::mem::take(&mut lock(readiness).readable)
    }

    #[test]
    fn a_busy_thread_leaves_while_another_is_idle_and_one_always_stays() {
        let board = Board::new(2);
        let r0 = Reactor::seated(board.clone(), 0).expect("epoll");
        let r1 = Reactor::seated(board.clone(), 1).expect("epoll");
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
    fn a_thread_marked_busy_sleeps_no_longer_than_a_window() {
        // Else a thread that fell asleep busy stays out of its listeners
        // until something of its own wakes it (goals.sh's -P8 on one thread).
        let board = Board::new(2);
        let r0 = Reactor::seated(board.clone(), 0).expect("epoll");
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
    fn a_window_with_less_than_a_tenth_asleep_is_busy() {
        let mut load = Load::new();
        load.start -= WINDOW;
        assert_eq!(load.note(Duration::ZERO), Some(true));
        load.start -= WINDOW;
        assert_eq!(load.note(WINDOW / 2), Some(false));
        // Within a window: no verdict yet.
        assert_eq!(load.note(Duration::ZERO), None);
    }
}
