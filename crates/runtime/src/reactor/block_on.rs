//! Runs a future (an executor's `run`) on this thread, waiting on the
//! thread's own reactor whenever the future has nothing to do.

use super::accept::Load;
use super::{Reactor, WakeFlags};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// How many polls in a row may find the future already woken before the
/// thread looks for I/O events without sleeping: a busy executor (a pump
/// that spent its byte budget, a burst of spawned connections) must not
/// starve the sockets that wait for events, nor pay an `epoll_wait` per poll.
/// At 4, iperf3 -P8 through oi made 1,162 `epoll_wait(0)` per GiB and pumps
/// moved smaller chunks (13,852 system calls per GiB against async-io's
/// 9,317); at 16, 8,958 (strace -f -c, iperf3 -n 1G -P 8).
const BUSY_POLLS_PER_PEEK: u32 = 16;

/// Wakes the thread blocked in [`block_on`]: a flag when it runs, the
/// eventfd when it sleeps.
struct ThreadWaker {
    /// The reactor the thread drives.
    reactor: Arc<Reactor>,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.reactor.interrupt();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.reactor.interrupt();
    }
}

/// Runs `future` to completion on this thread, driving `reactor` (made for
/// this thread, with [`Reactor::new`]): sockets and timers first polled here
/// register with it.
pub fn block_on<T>(reactor: Arc<Reactor>, future: impl Future<Output = T>) -> T {
    let _entered = Reactor::enter(reactor.clone());
    let waker = Waker::from(Arc::new(ThreadWaker {
        reactor: reactor.clone(),
    }));
    // Only a runtime's threads share listeners (and judge their load).
    let load = reactor.seat.is_some().then(Load::new);
    drive(&mut Driven { reactor, load }, &waker, future)
}

/// What [`drive`] waits on: a reactor (or, in the model tests, a model of one).
pub(crate) trait Park {
    /// The flags its wakers set.
    fn flags(&self) -> &WakeFlags;

    /// One turn: waits for events (blocking when `block`, as
    /// [`WakeFlags::around_wait`] allows) and wakes the tasks they concern.
    fn turn(&mut self, block: bool);
}

/// Polls `future` with `waker` until it is ready, turning `park` whenever
/// the future has nothing to do: blocking when nothing woke it, and every
/// [`BUSY_POLLS_PER_PEEK`] polls in a row that something did, without.
pub(crate) fn drive<T>(park: &mut impl Park, waker: &Waker, future: impl Future<Output = T>) -> T {
    let mut cx = Context::from_waker(waker);
    let mut future = pin!(future);
    let mut busy = 0u32;
    loop {
        park.flags().clear();
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        if park.flags().woken() {
            busy += 1;
            if busy < BUSY_POLLS_PER_PEEK {
                continue;
            }
            busy = 0;
            park.turn(false);
        } else {
            busy = 0;
            park.turn(true);
        }
    }
}

/// A thread's own reactor, with the load it judges when in a runtime.
struct Driven {
    /// The reactor this thread drives.
    reactor: Arc<Reactor>,
    /// The thread's load, for a runtime's thread; `None` outside one.
    load: Option<Load>,
}

impl Park for Driven {
    #[inline(always)]
    fn flags(&self) -> &WakeFlags {
        &self.reactor.flags
    }

    // Inlined into `drive`'s two calls: a call of its own cost 12 more
    // user-space instructions per 64 B round trip than the loop this was
    // written in before (callgrind, benches/rtt_instructions.sh).
    #[inline(always)]
    fn turn(&mut self, block: bool) {
        let reactor = &self.reactor;
        if !block {
            turn(reactor, false);
            if let Some(l) = timed(&mut self.load) {
                if let Some(b) = l.note(Instant::now(), Duration::ZERO) {
                    reactor.set_busy(b);
                }
            }
            return;
        }
        match timed(&mut self.load) {
            Some(l) => {
                let from = Instant::now();
                turn(reactor, true);
                let now = Instant::now();
                if let Some(b) = l.note(now, now.saturating_duration_since(from)) {
                    reactor.set_busy(b);
                }
            }
            None => turn(reactor, true),
        }
    }
}

/// The thread's load, when the coming wait is to be timed (see
/// [`Load::timing`]); `None` outside a runtime or while nothing is judged.
fn timed(load: &mut Option<Load>) -> Option<&mut Load> {
    load.as_mut().and_then(|l| l.timing().then_some(l))
}

/// One reactor turn. `epoll_wait` fails only on a bad descriptor or buffer
/// (a bug, not a condition of the machine): say so and keep the thread
/// alive at a slow pace rather than spin.
fn turn(reactor: &Reactor, block: bool) {
    if let Err(e) = reactor.turn(block) {
        log::error!("waiting for events: {e}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
