//! A timer on the polling thread's reactor: an entry in its ordered map,
//! which becomes the `epoll_wait` timeout. No timerfd, no system call to set
//! or cancel one.

use super::{current, Reactor};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Fires once at a deadline (never, if it has none); the API of async-io's
/// `Timer` that oi uses.
pub(crate) struct Timer {
    /// When it fires; `None`: never.
    when: Option<Instant>,
    /// Where it waits and its id there, once polled.
    registered: Option<(Arc<Reactor>, u64)>,
}

impl Timer {
    /// A timer firing `after` from now (never, if that is past the end of time).
    pub(crate) fn after(after: Duration) -> Self {
        Timer {
            when: Instant::now().checked_add(after),
            registered: None,
        }
    }

    /// A timer firing at `at`.
    pub(crate) fn at(at: Instant) -> Self {
        Timer {
            when: Some(at),
            registered: None,
        }
    }

    /// A timer that never fires.
    pub(crate) fn never() -> Self {
        Timer {
            when: None,
            registered: None,
        }
    }

    /// Moves the deadline to `after` from now.
    pub(crate) fn set_after(&mut self, after: Duration) {
        self.cancel();
        self.when = Instant::now().checked_add(after);
    }

    /// Moves the deadline to `at`.
    pub(crate) fn set_at(&mut self, at: Instant) {
        self.cancel();
        self.when = Some(at);
    }

    /// Removes the pending entry, if any.
    fn cancel(&mut self) {
        if let (Some((reactor, id)), Some(at)) = (self.registered.take(), self.when) {
            reactor.remove_timer(at, id);
        }
    }
}

impl Future for Timer {
    type Output = Instant;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Instant> {
        let Some(at) = self.when else {
            return Poll::Pending;
        };
        if Instant::now() >= at {
            self.cancel();
            return Poll::Ready(at);
        }
        if let Some((reactor, id)) = &self.registered {
            if reactor.update_timer(at, *id, cx.waker()) {
                return Poll::Pending;
            }
        }
        // Not yet registered, or its entry fired while the deadline had not
        // quite passed by this clock reading: (re-)register.
        let reactor = current();
        let id = reactor.add_timer(at, cx.waker().clone());
        self.registered = Some((reactor, id));
        Poll::Pending
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.cancel();
    }
}
