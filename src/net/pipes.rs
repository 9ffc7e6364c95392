//! Kernel pipes for the splice path, recycled between connections.
//!
//! A pipe is the kernel-side buffer splice(2) moves pages through. Creating one
//! costs three system calls (pipe2, F_SETPIPE_SZ, F_GETPIPE_SZ) and closing it
//! two more, so empty pipes go back to a small bounded lock-free pool instead.
//! Only empty pipes may be pooled: a pipe with bytes left in it would hand one
//! connection's data to another.

use concurrent_queue::ConcurrentQueue;
use rustix::pipe::{fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, PipeFlags};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The smallest pipe capacity asked for.
///
/// `cargo bench --bench pump` here, splice CPU per GiB by pipe size (medians
/// of 5 runs, one and four connections): 64 KiB 0.26–0.30, 256 KiB 0.19–0.23,
/// 1 MiB 0.12–0.16 CPU s/GiB; copying stayed at 0.34–0.54 whatever the
/// buffer size. Bigger is cheaper, but an unprivileged user's pipes share
/// `/proc/sys/fs/pipe-user-pages-soft` (64 MiB by default): past it the kernel
/// refuses F_SETPIPE_SZ and gives every new pipe two pages. 256 KiB keeps most
/// of the gain and leaves room for 256 busy directions under that limit (none
/// applies to root or CAP_SYS_RESOURCE).
pub const MIN_PIPE_SIZE: usize = 256 * 1024;

/// The pipe capacity to ask for: at least [`MIN_PIPE_SIZE`], more if
/// `--buffer-size` is larger, so splice never has less in flight than copying.
pub fn pipe_size(buffer_size: usize) -> usize {
    buffer_size.max(MIN_PIPE_SIZE)
}

/// The pipe capacity to ask for with `--buffer-size` = `buffer_size`, within
/// `/proc/sys/fs/pipe-max-size` (1 MiB by default): past it the kernel refuses
/// unprivileged users, and a pipe that cannot be sized is not used (see
/// [`PipePool::take`]), so asking for more would turn splicing off.
pub(crate) fn pipe_size_within_max(buffer_size: usize) -> usize {
    let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(1024 * 1024);
    pipe_size(buffer_size).min(max)
}

/// Empty pipes kept for reuse: enough for bursts of new busy directions, few
/// enough (32 × 256 KiB) to leave most of the per-user pipe budget to live ones.
pub const PIPES_KEPT: usize = 32;

/// One non-blocking, close-on-exec pipe and the capacity the kernel granted it.
#[derive(Debug)]
pub struct Pipe {
    /// Read end: splice from here into the destination socket.
    pub(crate) read: OwnedFd,
    /// Write end: splice from the source socket into here.
    pub(crate) write: OwnedFd,
    /// Bytes the pipe holds when full, as F_GETPIPE_SZ reported it.
    capacity: usize,
    /// The pool's count of existing pipes, decremented when this one closes.
    live: Arc<AtomicUsize>,
}

impl Pipe {
    /// Bytes the pipe can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Empty pipes shared by every connection of a server.
pub struct PipePool {
    /// Capacity asked of F_SETPIPE_SZ for each new pipe.
    want: usize,
    /// Empty pipes ready for reuse; bounded so a burst does not pin descriptors forever.
    free: ConcurrentQueue<Pipe>,
    /// Pipes that exist (pooled or held by a connection); tests check idle connections hold none.
    live: Arc<AtomicUsize>,
    /// Times a pipe could not be created and a direction fell back to copying.
    unavailable: AtomicU64,
    /// Set once a refused F_SETPIPE_SZ has been reported: it is logged once
    /// per pool, not once per connection.
    resize_refusal_logged: AtomicBool,
}

impl PipePool {
    /// A pool making pipes of about `want` bytes and keeping at most `keep` free ones.
    pub fn new(want: usize, keep: usize) -> Self {
        PipePool {
            want,
            free: ConcurrentQueue::bounded(keep.max(1)),
            live: Arc::new(AtomicUsize::new(0)),
            unavailable: AtomicU64::new(0),
            resize_refusal_logged: AtomicBool::new(false),
        }
    }

    /// An empty pipe from the pool, or a new one.
    ///
    /// Fails with the kernel's error when no pipe can be made: EMFILE or ENFILE
    /// when out of descriptors, EPERM or ENFILE at the per-user pipe limit,
    /// and when the new pipe cannot be given the wanted capacity (see `create`).
    pub fn take(&self) -> io::Result<Pipe> {
        if let Ok(pipe) = self.free.pop() {
            return Ok(pipe);
        }
        self.create().inspect_err(|_| {
            self.unavailable.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Returns a pipe that holds no bytes; dropped (closed) if the pool is full.
    pub fn give(&self, pipe: Pipe) {
        let _ = self.free.push(pipe);
    }

    /// Pipes that exist right now, pooled or in use.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Pipes held by connections right now (existing minus pooled).
    pub fn in_use(&self) -> usize {
        self.live().saturating_sub(self.free.len())
    }

    /// Pipes waiting in the pool (each holds two descriptors).
    pub fn pooled(&self) -> usize {
        self.free.len()
    }

    /// How many times a pipe could not be had since the pool was made.
    pub fn unavailable(&self) -> u64 {
        self.unavailable.load(Ordering::Relaxed)
    }

    /// Makes a pipe and sizes it; a pipe that cannot have the wanted size is
    /// closed and the caller copies instead.
    ///
    /// F_SETPIPE_SZ is refused above /proc/sys/fs/pipe-max-size and past the
    /// per-user soft limit (`fs.pipe-user-pages-soft`, EPERM), and the pipe
    /// keeps its default size, or two pages once past the limit. Such pipes
    /// used to be kept and pooled for good: after one burst, single-stream
    /// throughput fell from 16.7 to 8.5–10 Gbit/s and CPU per GiB tripled
    /// for the rest of the run. Copying through a 64 KiB buffer costs less
    /// than splicing through 8 KiB, so only full-size pipes are used.
    fn create(&self) -> io::Result<Pipe> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let sized = fcntl_setpipe_size(&write, self.want)
            .and_then(|_| fcntl_getpipe_size(&write))
            .map_err(io::Error::from)
            .and_then(|capacity| {
                if capacity >= self.want {
                    Ok(capacity)
                } else {
                    Err(io::Error::other(format!("granted only {capacity} bytes")))
                }
            });
        let capacity = match sized {
            Ok(capacity) => capacity,
            Err(e) => {
                if !self.resize_refusal_logged.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "cannot size a pipe to {} bytes ({e}): directions that cannot \
                         get one copy instead of splicing (raise fs.pipe-user-pages-soft, \
                         or run with CAP_SYS_RESOURCE); said once",
                        self.want
                    );
                }
                return Err(e);
            }
        };
        self.live.fetch_add(1, Ordering::Relaxed);
        Ok(Pipe {
            read,
            write,
            capacity,
            live: self.live.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn new_pipes_get_the_requested_capacity_and_are_nonblocking() {
        let pool = PipePool::new(256 * 1024, 4);
        let pipe = pool.take().expect("pipe");
        // The kernel rounds up to a power of two pages, never down (root or not,
        // 256 KiB is under the default pipe-max-size of 1 MiB).
        assert!(pipe.capacity() >= 256 * 1024, "{}", pipe.capacity());
        let mut buf = [0u8; 8];
        let err = rustix::io::read(&pipe.read, &mut buf).expect_err("empty pipe must not block");
        assert_eq!(err, rustix::io::Errno::AGAIN);
        let flags = rustix::io::fcntl_getfd(&pipe.read).expect("getfd");
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn given_back_pipes_are_reused() {
        let pool = PipePool::new(64 * 1024, 4);
        let pipe = pool.take().expect("pipe");
        let fd = pipe.read.as_raw_fd();
        assert_eq!((pool.live(), pool.in_use(), pool.pooled()), (1, 1, 0));
        pool.give(pipe);
        assert_eq!((pool.live(), pool.in_use(), pool.pooled()), (1, 0, 1));
        let again = pool.take().expect("pipe");
        assert_eq!(again.read.as_raw_fd(), fd);
        assert_eq!(pool.live(), 1);
    }

    #[test]
    fn full_pool_closes_extra_pipes() {
        let pool = PipePool::new(64 * 1024, 1);
        let a = pool.take().expect("pipe");
        let b = pool.take().expect("pipe");
        assert_eq!(pool.live(), 2);
        pool.give(a);
        pool.give(b);
        assert_eq!((pool.live(), pool.pooled()), (1, 1));
    }

    #[test]
    fn dropped_pipes_are_no_longer_live() {
        let pool = PipePool::new(64 * 1024, 1);
        drop(pool.take().expect("pipe"));
        assert_eq!((pool.live(), pool.in_use(), pool.unavailable()), (0, 0, 0));
    }

    #[test]
    fn refused_resize_gives_no_pipe_so_the_direction_copies() {
        // A size F_SETPIPE_SZ cannot take (rustix refuses it with EPERM, as the
        // kernel does past the per-user limit). Before, the pipe kept its
        // default size and was pooled for good, slowing every later
        // connection; now there is no pipe, and none is left open or pooled.
        let pool = PipePool::new(usize::MAX, 1);
        assert!(pool.take().is_err());
        assert!(pool.take().is_err(), "still refused, still no pipe");
        assert_eq!((pool.live(), pool.pooled(), pool.unavailable()), (0, 0, 2));
    }

    #[test]
    fn the_wanted_size_stays_within_pipe_max_size() {
        let max: usize = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .expect("pipe-max-size")
            .trim()
            .parse()
            .expect("number");
        assert_eq!(pipe_size_within_max(usize::MAX), max);
        assert_eq!(pipe_size_within_max(0), MIN_PIPE_SIZE.min(max));
    }
}
