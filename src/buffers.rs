//! A lock-free pool of byte buffers: TCP copy buffers and UDP datagram
//! buffers each have one, in [`crate::Shared`].
//!
//! A direction takes a buffer only while it has data in flight and gives it
//! back once drained, so idle connections hold none, and steady-state traffic
//! allocates nothing: buffers cycle through the pool.

use concurrent_queue::ConcurrentQueue;

/// Buffers of one size, recycled between connections.
pub struct BufferPool {
    /// Size of every buffer, from `--buffer-size`.
    size: usize,
    /// Free buffers; bounded so a burst of traffic does not pin memory forever.
    free: ConcurrentQueue<Box<[u8]>>,
}

impl BufferPool {
    /// A pool of `size`-byte buffers keeping at most `keep` free ones.
    pub fn new(size: usize, keep: usize) -> Self {
        BufferPool {
            size,
            free: ConcurrentQueue::bounded(keep.max(1)),
        }
    }

    /// Takes a free buffer, or allocates one when the pool is empty.
    pub fn take(&self) -> Box<[u8]> {
        self.free
            .pop()
            .unwrap_or_else(|_| vec![0u8; self.size].into_boxed_slice())
    }

    /// Free buffers waiting in the pool now (for the statistics).
    pub fn pooled(&self) -> usize {
        self.free.len()
    }

    /// Size of every buffer in bytes.
    pub fn buffer_size(&self) -> usize {
        self.size
    }

    /// Returns a buffer; dropped if the pool is full.
    pub fn give(&self, buf: Box<[u8]>) {
        let _ = self.free.push(buf);
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
        pool.give(vec![0; 16].into_boxed_slice());
        pool.give(vec![0; 16].into_boxed_slice());
        assert_eq!(pool.free.len(), 1);
    }
}
