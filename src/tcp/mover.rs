//! What a direction mover (copy or splice) reports to the pump: how much it
//! may still move, what it moved, and why it stopped.

use crate::net::pipes::Pipe;

/// Which half of a direction's work failed; tells which peer misbehaved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Reading from the source.
    Read,
    /// Writing to the destination.
    Write,
}

/// The most a direction of a splicing connection reads with read(2) at a
/// time while its bursts are small; a read that fills it hands the
/// direction to splice (see [`Step::ToSplice`]).
///
/// Why copy small bursts at all: a short read(2) from a stream socket proves
/// its receive queue empty, a short splice(2) does not (it also stops when
/// the pipe runs out of slots, one per segment), so a spliced burst ends
/// with one more splice that fails with EAGAIN. For a 64-byte message that
/// is one call in four per direction (`benches/syscalls.sh`: 8.0 calls per
/// round trip splicing, 6.0 copying small bursts). Copying costs CPU per
/// byte where splice costs none, so the copied read is capped: 16 KiB
/// covers a request or a response of most protocols, and bulk flows, whose
/// bursts are larger, go on splicing.
pub(crate) const SMALL_BURST: usize = 16 * 1024;

/// Why a mover stopped without blocking.
pub(crate) enum Step {
    /// The source hit EOF and every byte read has been written.
    Eof,
    /// This poll's byte budget is spent; yield to other tasks.
    BudgetSpent,
    /// Splice cannot serve this direction: copy from now on, first
    /// forwarding whatever the given pipe still holds.
    Fallback(Option<Pipe>),
    /// A splicing direction's copy mover read a whole [`SMALL_BURST`] and
    /// wrote it out: more is likely behind it, splice from now on. Nothing
    /// is in flight; the source may still hold bytes (no edge will say so).
    ToSplice,
    /// The splice mover's last burst (edge to EAGAIN) was under
    /// [`SMALL_BURST`]: copy the next one. Nothing is in flight and the
    /// source is drained.
    ToCopy,
}

/// What one poll of a direction may still move, and what it has moved.
pub(crate) struct Meter<'a> {
    /// Bytes that may still be read before yielding.
    pub(crate) budget: usize,
    /// The direction's running total of bytes written to the destination.
    written: &'a mut u64,
    /// Set when any byte moved: re-arms the half-close idle timer.
    progress: &'a mut bool,
    /// The destination still has Nagle on, to be turned off before its
    /// second write (the direction's `nagle`, see `Dial::nodelay_later`).
    nagle: &'a mut bool,
}

impl<'a> Meter<'a> {
    /// A meter allowing `budget` bytes, adding to `written` and setting
    /// `progress`; `nagle`: the destination's TCP_NODELAY is still to set.
    pub(crate) fn new(
        budget: usize,
        written: &'a mut u64,
        progress: &'a mut bool,
        nagle: &'a mut bool,
    ) -> Self {
        Meter {
            budget,
            written,
            progress,
            nagle,
        }
    }

    /// Called before every write to the destination `to`: from the second
    /// write on (something was written already) Nagle must be off, since
    /// the first write's last segment may still be unacknowledged and
    /// Nagle would hold a small one behind it until the peer's delayed ACK
    /// (40 ms or more on Linux). One setsockopt, once per connection; a
    /// failure (a socket without Nagle) is not the connection's end.
    pub(crate) fn before_write(&mut self, to: &std::net::TcpStream) {
        if *self.nagle && *self.written > 0 {
            *self.nagle = false;
            if let Err(e) = rustix::net::sockopt::set_tcp_nodelay(to, true) {
                log::debug!("TCP_NODELAY on a backend: {e}");
            }
        }
    }

    /// Records `n` bytes written to the destination.
    pub(crate) fn wrote(&mut self, n: usize) {
        // Saturating: a counter, not a reason to panic (debug) or wrap (release).
        *self.written = self
            .written
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        *self.progress = true;
    }
}
