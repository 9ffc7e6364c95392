//! Runs a future (an executor's `run`) on this thread, waiting on the
//! thread's own reactor whenever the future has nothing to do.

use super::accept::Load;
use super::Reactor;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
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
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let mut busy = 0u32;
    // Only a runtime's threads share listeners (and judge their load).
    let mut load = reactor.seat.is_some().then(Load::new);
    loop {
        reactor.woken.store(false, Ordering::SeqCst);
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        if reactor.woken.load(Ordering::SeqCst) {
            busy += 1;
            if busy < BUSY_POLLS_PER_PEEK {
                continue;
            }
            busy = 0;
            turn(&reactor, false);
            if let Some(l) = timed(&mut load) {
                if let Some(b) = l.note(Instant::now(), Duration::ZERO) {
                    reactor.set_busy(b);
                }
            }
        } else {
            busy = 0;
            match timed(&mut load) {
                Some(l) => {
                    let from = Instant::now();
                    turn(&reactor, true);
                    let now = Instant::now();
                    if let Some(b) = l.note(now, now.saturating_duration_since(from)) {
                        reactor.set_busy(b);
                    }
                }
                None => turn(&reactor, true),
            }
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
