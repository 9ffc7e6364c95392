//! Bounds on what a client of the metrics endpoint or the control socket can
//! make oi hold: a small request, a short time (and, in [`super::slots`], a
//! few connections per peer).

use async_io::Timer;
use futures_lite::{AsyncRead, AsyncReadExt, FutureExt};
use std::future::Future;
use std::io;
use std::time::Duration;

/// The largest request head read; a longer one is refused.
pub(super) const MAX_HEAD: usize = 8 * 1024;

/// How long reading a request or writing its answer may take.
pub(super) const TIMEOUT: Duration = Duration::from_secs(5);

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
