//! A non-blocking descriptor on the per-thread reactor, with the part of
//! async-io's `Async` API the TCP path uses.
//!
//! Registration waits for the first poll, so a listener created on the main
//! thread and served by a worker's accept loop lands in the worker's epoll.
//! Readiness is consumed by the poll that reports it: after an operation
//! fails with `WouldBlock`, the next poll waits for a new edge (the same
//! contract as async-io's `poll_readable`).

use super::{driving, is_current, Reactor, Readiness};
use futures_lite::{AsyncRead, AsyncWrite};
use parking_lot::Mutex;
use std::future::Future;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

/// A descriptor's registration: its reactor, key and readiness.
struct Registration {
    /// The reactor whose epoll set holds the descriptor.
    reactor: Arc<Reactor>,
    /// Its key there.
    key: u64,
    /// Readiness the reactor records and polls consume.
    readiness: Arc<Mutex<Readiness>>,
}

impl Registration {
    /// Registered by `register` with the reactor this thread drives; refused
    /// (naming `what`) on a thread that drives none.
    fn here(
        what: &str,
        register: impl FnOnce(&Reactor) -> io::Result<(u64, Arc<Mutex<Readiness>>)>,
    ) -> io::Result<Registration> {
        let reactor = driving(what)?;
        let (key, readiness) = register(&reactor)?;
        Ok(Registration {
            reactor,
            key,
            readiness,
        })
    }
}

/// A non-blocking `T` registered (on first poll) with the polling thread's reactor.
pub struct Async<T: AsFd> {
    /// The descriptor; `None` only after [`Async::into_inner`].
    io: Option<T>,
    /// A datagram socket (see [`Readiness::datagram`]).
    datagram: bool,
    /// Set by the first poll.
    registration: OnceLock<io::Result<Registration>>,
}

impl<T: AsFd> Async<T> {
    /// Wraps `io`, making it non-blocking.
    pub fn new(io: T) -> io::Result<Self> {
        rustix::io::ioctl_fionbio(&io, true)?;
        Self::new_nonblocking(io)
    }

    /// Wraps a datagram socket `io`, making it non-blocking: errors are not
    /// sticky and writability is watched only while a writer waits.
    pub fn new_datagram(io: T) -> io::Result<Self> {
        let mut s = Self::new(io)?;
        s.datagram = true;
        Ok(s)
    }

    /// Wraps `io`, which must already be non-blocking. Never fails (the
    /// registration waits for the first poll); `Result` as async-io's.
    pub fn new_nonblocking(io: T) -> io::Result<Self> {
        Ok(Async {
            io: Some(io),
            datagram: false,
            registration: OnceLock::new(),
        })
    }

    /// The descriptor.
    pub fn get_ref(&self) -> &T {
        // Only `into_inner` (which consumes self) takes it out.
        self.io
            .as_ref()
            .expect("descriptor present until into_inner")
    }

    /// The registration, made now if this is the first poll.
    fn registration(&self) -> io::Result<&Registration> {
        let r = self.registration.get_or_init(|| {
            Registration::here("an oi socket", |r| {
                r.register(self.get_ref(), self.datagram)
            })
        });
        r.as_ref()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))
    }

    /// Ready once the descriptor has reported readability since the last
    /// poll that returned ready (consuming it), or ever reported that the
    /// peer stopped sending (EOF stays readable); otherwise waits for an edge.
    /// One waiter: a second task polling replaces the first one's waker.
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_ready(cx, false, &mut Wait::Slot)
    }

    /// As [`poll_readable`](Self::poll_readable), for writability.
    pub fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_ready(cx, true, &mut Wait::Slot)
    }

    /// One poll for readiness in one direction (`write`), waiting as `wait` says.
    fn poll_ready(
        &self,
        cx: &mut Context<'_>,
        write: bool,
        wait: &mut Wait,
    ) -> Poll<io::Result<()>> {
        poll_registered(
            self.registration()?,
            self.get_ref().as_fd(),
            cx,
            write,
            wait,
        )
    }

    /// Marks the descriptor readable, for a caller that stopped reading
    /// before it would block (a peek-driven header reader): the next
    /// [`poll_readable`](Self::poll_readable) returns ready instead of
    /// waiting for an edge that already came.
    pub fn assume_readable(&self) {
        if let Ok(reg) = self.registration() {
            reg.readiness.lock().readable = true;
        }
    }

    /// Registers the descriptor with this thread's reactor now rather than
    /// at its first poll, so the next `epoll_wait` already watches it. For a
    /// client whose backend is being connected: its first bytes and the
    /// connect's completion then come in one wait, not two. A failure is
    /// kept and returned by the first poll, as a lazy registration's would be.
    pub fn register_now(&self) {
        let _ = self.registration();
    }

    /// Whether the reactor has seen the descriptor fail or hang up (ERR or
    /// HUP; sticky on a stream socket): after a connect turned writable,
    /// whether it failed, without getsockopt(SO_ERROR).
    pub fn hung_up(&self) -> bool {
        match self.registration.get() {
            Some(Ok(reg)) => reg.readiness.lock().broken,
            _ => false,
        }
    }

    /// Takes the descriptor out of its epoll set now, for one whose open
    /// file lives on elsewhere (sent to another process by `oi upgrade`):
    /// closing this descriptor would not remove it, and every later edge
    /// would wake this thread for a socket it no longer serves.
    pub fn leave_epoll(&self) {
        if let Some(Ok(reg)) = self.registration.get() {
            // Not registered (never polled) or already gone: nothing to undo.
            let _ = rustix::event::epoll::delete(&reg.reactor.epoll, self.get_ref());
        }
    }

    /// Waits until the descriptor reports readability. Several tasks may
    /// wait at once; an edge wakes them all.
    pub fn readable(&self) -> Ready<'_, T> {
        Ready {
            io: self,
            write: false,
            wait: Wait::Fresh,
        }
    }

    /// Waits until the descriptor reports writability (as [`readable`](Self::readable)).
    pub fn writable(&self) -> Ready<'_, T> {
        Ready {
            io: self,
            write: true,
            wait: Wait::Fresh,
        }
    }

    /// Runs `op` until it does not fail with `WouldBlock`, waiting for
    /// readability in between.
    pub async fn read_with<R>(&self, mut op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        loop {
            match op(self.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable().await?,
                other => return other,
            }
        }
    }

    /// One `WouldBlock`-aware step of a read-like `op`, for `AsyncRead`.
    fn poll_op<R>(
        &self,
        cx: &mut Context<'_>,
        write: bool,
        mut op: impl FnMut(&T) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        loop {
            match op(self.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return Poll::Ready(other),
            }
            let ready = if write {
                self.poll_writable(cx)
            } else {
                self.poll_readable(cx)
            };
            std::task::ready!(ready)?;
        }
    }
}

/// One poll of `reg` (the registration of `fd`) for readiness in one
/// direction (`write`), waiting as `wait` says.
fn poll_registered(
    reg: &Registration,
    fd: BorrowedFd<'_>,
    cx: &mut Context<'_>,
    write: bool,
    wait: &mut Wait,
) -> Poll<io::Result<()>> {
    debug_assert!(
        is_current(&reg.reactor),
        "an oi socket polled on a thread other than its reactor's"
    );
    let mut r = reg.readiness.lock();
    r.poll(write, cx.waker(), wait, |out| {
        let flags = super::interest(true, out);
        let data = rustix::event::epoll::EventData::new_u64(reg.key);
        rustix::event::epoll::modify(&reg.reactor.epoll, fd, data, flags)
    })
}

impl Readiness {
    /// One poll for readiness in one direction (`write`) by the task of
    /// `waker`, waiting as `wait` says: the hand-off with [`Readiness::edge`],
    /// both under the readiness's lock. Ready if an edge came since the
    /// last poll that consumed one (consuming it), if the direction is
    /// closed or broken, or if an edge came since this waiter began to wait;
    /// otherwise the waker is left where the next edge wakes it. A datagram
    /// socket's writer asks `watch_out` to add EPOLLOUT to its interest
    /// (`true`) while it waits and to take it out (`false`) when done.
    ///
    /// One function with the epoll call passed in, not a verdict the caller
    /// acts on: returning one cost 44 more user-space instructions per 64 B
    /// round trip (callgrind, benches/rtt_instructions.sh, one thread).
    #[inline]
    pub(crate) fn poll(
        &mut self,
        write: bool,
        waker: &Waker,
        wait: &mut Wait,
        mut watch_out: impl FnMut(bool) -> rustix::io::Result<()>,
    ) -> Poll<io::Result<()>> {
        let i = usize::from(write);
        let ready = if write {
            std::mem::take(&mut self.writable) || self.broken
        } else {
            std::mem::take(&mut self.readable) || self.read_closed
        };
        let ticked = matches!(wait, Wait::Queued { tick, .. } if *tick != self.tick(i));
        if ready || ticked {
            if write && self.out_armed {
                // The wait is over: stop hearing of every send (see `datagram`).
                self.out_armed = false;
                watch_out(false)?;
            }
            return Poll::Ready(Ok(()));
        }
        if write && self.datagram && !self.out_armed {
            // Adding EPOLLOUT reports the current state at once if writable.
            watch_out(true)?;
            self.out_armed = true;
        }
        let tick = self.tick(i);
        // The slot keeps its task after an edge (see `Readiness::edge`): the
        // same task waits again without a clone, and another one takes the
        // slot unless its task waits now.
        let slot_waits = self.set_waits(i);
        let slot = if write {
            &mut self.writer
        } else {
            &mut self.reader
        };
        match slot {
            Some(w) if w.will_wake(waker) => {}
            Some(_) if slot_waits && !matches!(wait, Wait::Slot) => {
                // Another task waits here: queue beside it (once per task).
                let others = self.others.get_or_insert_with(Box::default);
                if !others
                    .iter()
                    .any(|(d, w)| *d == write && w.will_wake(waker))
                {
                    others.push((write, waker.clone()));
                }
            }
            slot => *slot = Some(waker.clone()),
        }
        if !matches!(wait, Wait::Slot) {
            *wait = Wait::Queued {
                tick,
                waker: waker.clone(),
            };
        }
        Poll::Pending
    }
}

/// A listening socket shared by every executor thread's accept loop: each
/// loop's own `SharedListener` registers it, on first poll, with its
/// thread's epoll, `EPOLLEXCLUSIVE`, and a busy thread takes it out of its
/// set for a while (see [`super::accept`]).
pub struct SharedListener<L: AsFd + Send + Sync + 'static> {
    /// The socket, shared with the other threads' loops and the listener table.
    socket: Arc<L>,
    /// Set by the first poll.
    registration: OnceLock<io::Result<Registration>>,
    /// This loop took the socket out of its thread's epoll set after an
    /// accept error ([`Reactor::step_aside`](super::Reactor)), so its next
    /// accept puts it back: known here, the accept path takes the
    /// reactor's lock only then, not once per connection.
    aside: AtomicBool,
}

impl<L: AsFd + Send + Sync + 'static> SharedListener<L> {
    /// One thread's handle on `socket`, made non-blocking.
    pub fn new(socket: Arc<L>) -> io::Result<Self> {
        rustix::io::ioctl_fionbio(&*socket, true)?;
        Ok(SharedListener {
            socket,
            registration: OnceLock::new(),
            aside: AtomicBool::new(false),
        })
    }

    /// The registration, made now if this is the first poll.
    fn registration(&self) -> io::Result<&Registration> {
        let r = self.registration.get_or_init(|| {
            Registration::here("an oi listening socket", |r| {
                let shared: Arc<dyn AsFd + Send + Sync> = self.socket.clone();
                r.register_exclusive(shared)
            })
        });
        r.as_ref()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))
    }

    /// Runs `op` once per report of readability, until it does not fail
    /// with `WouldBlock`.
    ///
    /// The socket's interest is level-triggered (see [`super::accept`]), so
    /// `op` (one accept) never has to drain the queue: a connection still
    /// queued is reported again by the thread's next `epoll_wait`, which it
    /// makes anyway. Draining to `EAGAIN` cost a failed `accept4` per
    /// wake-up, 0.65 per connection (`benches/syscalls.sh`).
    ///
    /// After any other error the socket leaves this thread's epoll set until
    /// the next call (the caller backs off in between): a connection this
    /// thread cannot take, out of descriptors, would otherwise be reported
    /// by every `epoll_wait` and the thread would spin.
    pub async fn accept_with<R>(&self, mut op: impl FnMut(&L) -> io::Result<R>) -> io::Result<R> {
        let reg = self.registration()?;
        if self.aside.swap(false, Ordering::Relaxed) {
            reg.reactor.step_back(reg.key);
        }
        loop {
            std::future::poll_fn(|cx| {
                poll_registered(reg, self.socket.as_fd(), cx, false, &mut Wait::Slot)
            })
            .await?;
            match op(&self.socket) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    reg.reactor.step_aside(reg.key);
                    self.aside.store(true, Ordering::Relaxed);
                    return Err(e);
                }
                ok => return ok,
            }
        }
    }
}

impl<L: AsFd + Send + Sync + 'static> Drop for SharedListener<L> {
    fn drop(&mut self) {
        if let Some(Ok(reg)) = self.registration.get() {
            reg.reactor.deregister_exclusive(reg.key);
        }
    }
}

/// How a poll for readiness waits.
pub(crate) enum Wait {
    /// In the direction's one slot, replacing whoever waited there
    /// (`poll_readable`/`poll_writable`).
    Slot,
    /// A [`Ready`] future not yet pending.
    Fresh,
    /// A [`Ready`] future pending since the direction's tick was `tick`,
    /// with the waker it left (to take out of the queue if dropped).
    Queued {
        /// The tick when it began to wait.
        tick: u8,
        /// Its waker.
        waker: Waker,
    },
}

/// Waits for readiness in one direction; see [`Async::readable`].
pub struct Ready<'a, T: AsFd> {
    /// The descriptor.
    io: &'a Async<T>,
    /// Which direction.
    write: bool,
    /// Whether and since when it waits.
    wait: Wait,
}

impl<T: AsFd> Future for Ready<'_, T> {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = this.io.poll_ready(cx, this.write, &mut this.wait);
        if polled.is_ready() {
            this.forget();
        }
        polled
    }
}

impl<T: AsFd> Ready<'_, T> {
    /// Takes this waiter out of the queue beside the slot, if it is there.
    fn forget(&mut self) {
        let Wait::Queued { waker, .. } = std::mem::replace(&mut self.wait, Wait::Fresh) else {
            return;
        };
        let Some(Ok(reg)) = self.io.registration.get() else {
            return;
        };
        let mut r = reg.readiness.lock();
        if let Some(others) = &mut r.others {
            let write = self.write;
            others.retain(|(d, w)| *d != write || !w.will_wake(&waker));
        }
    }
}

impl<T: AsFd> Drop for Ready<'_, T> {
    fn drop(&mut self) {
        self.forget();
    }
}

impl<T: AsFd> Drop for Async<T> {
    fn drop(&mut self) {
        // Closing the descriptor (when `io` drops, right after) removes it
        // from the epoll set: no `epoll_ctl` needed, only the slot.
        if let Some(Ok(reg)) = self.registration.get() {
            reg.reactor.deregister(reg.key);
        }
    }
}

impl<T: AsFd> AsyncRead for &Async<T>
where
    for<'a> &'a T: Read,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_op(cx, false, |mut t| t.read(buf))
    }
}

impl<T: AsFd> AsyncWrite for &Async<T>
where
    for<'a> &'a T: Write,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_op(cx, true, |mut t| t.write(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_op(cx, true, |mut t| t.flush())
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

impl<T: AsFd> AsyncRead for Async<T>
where
    for<'a> &'a T: Read,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut this: &Async<T> = &self;
        Pin::new(&mut this).poll_read(cx, buf)
    }
}

impl<T: AsFd> AsyncWrite for Async<T>
where
    for<'a> &'a T: Write,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut this: &Async<T> = &self;
        Pin::new(&mut this).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut this: &Async<T> = &self;
        Pin::new(&mut this).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut this: &Async<T> = &self;
        Pin::new(&mut this).poll_close(cx)
    }
}

impl<T: AsFd> AsFd for Async<T> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.get_ref().as_fd()
    }
}

impl<T: AsFd + std::fmt::Debug> std::fmt::Debug for Async<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Async").field("io", &self.io).finish()
    }
}
