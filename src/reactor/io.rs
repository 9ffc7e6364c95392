//! A non-blocking descriptor on the per-thread reactor, with the part of
//! async-io's `Async` API the TCP path uses.
//!
//! Registration waits for the first poll, so a listener created on the main
//! thread and served by a worker's accept loop lands in the worker's epoll.
//! Readiness is consumed by the poll that reports it: after an operation
//! fails with `WouldBlock`, the next poll waits for a new edge (the same
//! contract as async-io's `poll_readable`).

use super::{current, lock, Reactor, Readiness};
use futures_lite::{AsyncRead, AsyncWrite};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

/// A descriptor's registration: its reactor, key and readiness.
struct Registration {
    /// The reactor whose epoll set holds the descriptor.
    reactor: Arc<Reactor>,
    /// Its key there.
    key: u64,
    /// Readiness the reactor records and polls consume.
    readiness: Arc<Mutex<Readiness>>,
}

/// A non-blocking `T` registered (on first poll) with the polling thread's reactor.
pub(crate) struct Async<T: AsFd> {
    /// The descriptor; `None` only after [`Async::into_inner`].
    io: Option<T>,
    /// Set by the first poll.
    registration: OnceLock<io::Result<Registration>>,
}

impl<T: AsFd> Async<T> {
    /// Wraps `io`, making it non-blocking.
    pub(crate) fn new(io: T) -> io::Result<Self> {
        rustix::io::ioctl_fionbio(&io, true)?;
        Self::new_nonblocking(io)
    }

    /// Wraps `io`, which must already be non-blocking. Never fails (the
    /// registration waits for the first poll); `Result` as async-io's.
    pub(crate) fn new_nonblocking(io: T) -> io::Result<Self> {
        Ok(Async {
            io: Some(io),
            registration: OnceLock::new(),
        })
    }

    /// The descriptor.
    pub(crate) fn get_ref(&self) -> &T {
        // Only `into_inner` (which consumes self) takes it out.
        self.io
            .as_ref()
            .expect("descriptor present until into_inner")
    }

    /// The registration, made now if this is the first poll.
    fn registration(&self) -> io::Result<&Registration> {
        let r = self.registration.get_or_init(|| {
            let reactor = current();
            let (key, readiness) = reactor.register(self.get_ref())?;
            Ok(Registration {
                reactor,
                key,
                readiness,
            })
        });
        r.as_ref()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))
    }

    /// Ready once the descriptor has reported readability since the last
    /// poll that returned ready (consuming it), or ever reported that the
    /// peer stopped sending (EOF stays readable); otherwise waits for an edge.
    pub(crate) fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let reg = self.registration()?;
        let mut r = lock(&reg.readiness);
        if std::mem::take(&mut r.readable) || r.read_closed {
            return Poll::Ready(Ok(()));
        }
        match &mut r.reader {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// As [`poll_readable`](Self::poll_readable), for writability.
    pub(crate) fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let reg = self.registration()?;
        let mut r = lock(&reg.readiness);
        if std::mem::take(&mut r.writable) || r.broken {
            return Poll::Ready(Ok(()));
        }
        match &mut r.writer {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Marks the descriptor readable, for a caller that stopped reading
    /// before it would block (a peek-driven header reader): the next
    /// [`poll_readable`](Self::poll_readable) returns ready instead of
    /// waiting for an edge that already came.
    pub(crate) fn assume_readable(&self) {
        if let Ok(reg) = self.registration() {
            lock(&reg.readiness).readable = true;
        }
    }

    /// Takes the descriptor out of its epoll set now, for one whose open
    /// file lives on elsewhere (sent to another process by `oi upgrade`):
    /// closing this descriptor would not remove it, and every later edge
    /// would wake this thread for a socket it no longer serves.
    pub(crate) fn leave_epoll(&self) {
        if let Some(Ok(reg)) = self.registration.get() {
            // Not registered (never polled) or already gone: nothing to undo.
            let _ = rustix::event::epoll::delete(&reg.reactor.epoll, self.get_ref());
        }
    }

    /// Waits until the descriptor reports readability.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_readable(cx)).await
    }

    /// Waits until the descriptor reports writability.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_writable(cx)).await
    }

    /// Runs `op` until it does not fail with `WouldBlock`, waiting for
    /// readability in between.
    pub(crate) async fn read_with<R>(
        &self,
        mut op: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
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
