//! What a direction mover (copy or splice) reports to the pump: how much it
//! may still move, what it moved, and why it stopped.

use crate::pipes::Pipe;

/// Which half of a direction's work failed; tells which peer misbehaved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Reading from the source.
    Read,
    /// Writing to the destination.
    Write,
}

/// Why a mover stopped without blocking.
pub(crate) enum Step {
    /// The source hit EOF and every byte read has been written.
    Eof,
    /// This poll's byte budget is spent; yield to other tasks.
    BudgetSpent,
    /// Splice cannot serve this direction: copy from now on, first
    /// forwarding whatever the given pipe still holds.
    Fallback(Option<Pipe>),
}

/// What one poll of a direction may still move, and what it has moved.
pub(crate) struct Meter<'a> {
    /// Bytes that may still be read before yielding.
    pub(crate) budget: usize,
    /// The direction's running total of bytes written to the destination.
    written: &'a mut u64,
    /// Set when any byte moved: re-arms the half-close idle timer.
    progress: &'a mut bool,
}

impl<'a> Meter<'a> {
    /// A meter allowing `budget` bytes, adding to `written` and setting `progress`.
    pub(crate) fn new(budget: usize, written: &'a mut u64, progress: &'a mut bool) -> Self {
        Meter {
            budget,
            written,
            progress,
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
