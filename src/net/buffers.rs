//! A lock-free pool of byte buffers: TCP copy buffers and UDP datagram
//! buffers each have one, in [`crate::Shared`].
//!
//! A direction takes a buffer only while it has data in flight and gives it
//! back once drained, so idle connections hold none, and steady-state traffic
//! allocates nothing: buffers cycle through the pool.
//!
//! Each thread keeps one spare buffer, of the pool it gave to last, outside
//! the shared queue: a 64-byte round trip takes and gives a buffer twice,
//! and `take` and `give` through the queue ran 292 of the 3,050 user-space
//! instructions a round trip; with the spare, 144 (callgrind;
//! docs/performance.md, "Instructions per connection and per round
//! trip"). So a pool's free buffers are at most `keep` in its queue plus
//! at most one per thread.

use concurrent_queue::ConcurrentQueue;
use std::cell::RefCell;
use std::sync::{Arc, Weak};

/// A pool's free buffers, shared by every thread.
type FreeQueue = ConcurrentQueue<Box<[u8]>>;

/// Buffers of one size, recycled between connections.
pub struct BufferPool {
    /// Size of every buffer, from `--buffer-size`.
    size: usize,
    /// Free buffers; bounded so a burst of traffic does not pin memory
    /// forever. In an `Arc` so a thread's spare can name its pool weakly.
    free: Arc<FreeQueue>,
}

/// The one free buffer a thread keeps beside the shared queues.
struct Spare {
    /// The pool the buffer belongs to; weak, so a dropped pool's spare is
    /// freed, not handed back, when the thread next gives another pool's.
    owner: Weak<FreeQueue>,
    /// The buffer, when the thread holds one.
    buf: Option<Box<[u8]>>,
}

thread_local! {
    /// This thread's spare buffer (see the module comment).
    static SPARE: RefCell<Spare> = const {
        RefCell::new(Spare {
            owner: Weak::new(),
            buf: None,
        })
    };
}

impl BufferPool {
    /// A pool of `size`-byte buffers keeping at most `keep` free ones in
    /// its queue (and one per thread, see the module comment).
    pub fn new(size: usize, keep: usize) -> Self {
        BufferPool {
            size,
            free: Arc::new(ConcurrentQueue::bounded(keep.max(1))),
        }
    }

    /// Takes a free buffer: this thread's spare, else one from the queue,
    /// else a new one.
    pub fn take(&self) -> Box<[u8]> {
        let mine = Arc::as_ptr(&self.free);
        // `try_with`/`try_borrow_mut`: during a thread's exit, or from
        // inside this same function, the queue serves instead.
        let spare = SPARE
            .try_with(|s| {
                let mut s = s.try_borrow_mut().ok()?;
                if std::ptr::eq(s.owner.as_ptr(), mine) {
                    s.buf.take()
                } else {
                    None
                }
            })
            .ok()
            .flatten();
        spare.unwrap_or_else(|| {
            self.free
                .pop()
                .unwrap_or_else(|_| vec![0u8; self.size].into_boxed_slice())
        })
    }

    /// Free buffers waiting in the pool's queue now (for the statistics;
    /// the threads' spares are not counted).
    pub fn pooled(&self) -> usize {
        self.free.len()
    }

    /// Size of every buffer in bytes.
    pub fn buffer_size(&self) -> usize {
        self.size
    }

    /// Returns a buffer: it becomes this thread's spare if the thread holds
    /// none of this pool; else it goes to the queue, and is dropped if the
    /// queue is full.
    pub fn give(&self, buf: Box<[u8]>) {
        let mut buf = Some(buf);
        let _ = SPARE.try_with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                return;
            };
            if !std::ptr::eq(s.owner.as_ptr(), Arc::as_ptr(&self.free)) {
                // The spare belongs to another pool: back to it (when it
                // still exists), and the thread's spare is this pool's now.
                if let (Some(other), Some(queue)) = (s.buf.take(), s.owner.upgrade()) {
                    let _ = queue.push(other);
                }
                s.owner = Arc::downgrade(&self.free);
            }
            if s.buf.is_none() {
                s.buf = buf.take();
            }
        });
        if let Some(buf) = buf {
            let _ = self.free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused() {
        let pool = BufferPool::new(4096, 2);
        let a = pool.take();
        let ptr = a.as_ptr();
        assert_eq!(a.len(), 4096);
        pool.give(a);
        let again = pool.take();
        assert_eq!(again.as_ptr(), ptr);
    }

    #[test]
    fn full_pool_drops_extra_buffers() {
        let pool = BufferPool::new(16, 1);
        let given: Vec<_> = (0..3).map(|_| vec![0u8; 16].into_boxed_slice()).collect();
        let ptrs: Vec<_> = given.iter().map(|b| b.as_ptr()).collect();
        for buf in given {
            pool.give(buf);
        }
        // The first became this thread's spare, the second filled the
        // queue, the third was dropped.
        assert_eq!(pool.pooled(), 1);
        let (first, second) = (pool.take(), pool.take());
        assert_eq!((first.as_ptr(), second.as_ptr()), (ptrs[0], ptrs[1]));
        assert_eq!(pool.pooled(), 0);
    }

    #[test]
    fn a_thread_spare_never_serves_another_pool() {
        let small = BufferPool::new(16, 4);
        let large = BufferPool::new(32, 4);
        let a = small.take();
        let ptr = a.as_ptr();
        small.give(a);
        assert_eq!(large.take().len(), 32);
        // Giving to the other pool hands the spare back to its own queue.
        large.give(vec![0; 32].into_boxed_slice());
        assert_eq!(small.pooled(), 1);
        let again = small.take();
        assert_eq!((again.as_ptr(), again.len()), (ptr, 16));
    }

    #[test]
    fn a_dropped_pools_spare_gives_way_to_the_next_pool() {
        let gone = BufferPool::new(16, 4);
        gone.give(gone.take());
        drop(gone);
        let pool = BufferPool::new(16, 4);
        pool.give(vec![0; 16].into_boxed_slice());
        assert_eq!(
            pool.pooled(),
            0,
            "the given buffer is the thread's spare now"
        );
        SPARE.with(|s| {
            let s = s.borrow();
            assert!(std::ptr::eq(s.owner.as_ptr(), Arc::as_ptr(&pool.free)));
            assert!(s.buf.is_some());
        });
    }

    #[test]
    fn another_thread_takes_from_the_queue() {
        let pool = Arc::new(BufferPool::new(16, 4));
        pool.give(vec![0; 16].into_boxed_slice());
        pool.give(vec![0; 16].into_boxed_slice());
        let queued = pool.pooled();
        let other = Arc::clone(&pool);
        let taken = std::thread::spawn(move || other.take().len())
            .join()
            .expect("taking thread");
        assert_eq!((queued, taken, pool.pooled()), (1, 16, 0));
    }
}
