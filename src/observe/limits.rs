//! Bounds on what a client of the metrics endpoint or the control socket can
//! make oi hold: a few connections at once, a small request, a short time.

use async_io::Timer;
use futures_lite::{AsyncRead, AsyncReadExt, FutureExt};
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Requests served at once per endpoint; more are closed unanswered. A
/// scraper or an operator needs one or two.
pub(super) const MAX_CLIENTS: usize = 8;

/// The largest request head read; a longer one is refused.
pub(super) const MAX_HEAD: usize = 8 * 1024;

/// How long reading a request or writing its answer may take.
pub(super) const TIMEOUT: Duration = Duration::from_secs(5);

/// Counts requests in flight against [`MAX_CLIENTS`].
pub(super) struct Gate {
    /// Requests in flight.
    inside: Arc<AtomicUsize>,
    /// The most at once.
    max: usize,
}

/// One request's place inside a [`Gate`]; released on drop.
pub(super) struct Pass {
    /// The gate's count.
    inside: Arc<AtomicUsize>,
}

impl Gate {
    pub(super) fn new(max: usize) -> Self {
        Gate {
            inside: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// A pass, unless `max` requests are in flight.
    pub(super) fn enter(&self) -> Option<Pass> {
        let mut now = self.inside.load(Ordering::Relaxed);
        loop {
            if now >= self.max {
                return None;
            }
            match self
                .inside
                .compare_exchange(now, now + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(Pass {
                        inside: self.inside.clone(),
                    })
                }
                Err(v) => now = v,
            }
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.inside.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs `f` for at most [`TIMEOUT`].
pub(super) async fn bounded<T>(f: impl Future<Output = T>) -> io::Result<T> {
    async { Ok(f.await) }
        .or(async {
            Timer::after(TIMEOUT).await;
            Err(io::Error::new(io::ErrorKind::TimedOut, "request timed out"))
        })
        .await
}

/// Reads until `end` appears, at most [`MAX_HEAD`] bytes and [`TIMEOUT`].
pub(super) async fn read_head(
    stream: &mut (impl AsyncRead + Unpin),
    end: &[u8],
) -> io::Result<Vec<u8>> {
    bounded(async {
        let mut head = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(head);
            }
            head.extend_from_slice(&chunk[..n]);
            if head.windows(end.len()).any(|w| w == end) {
                return Ok(head);
            }
            if head.len() > MAX_HEAD {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "request head too long",
                ));
            }
        }
    })
    .await?
}
