//! An association's (or a TCP→UDP connection's) activity: its live entry
//! with the byte counts, when it last moved anything, and whether its
//! upstream has ended.
//!
//! Its own module, below `assoc`, `reply` and `tcp_to_udp`: all three read
//! and touch it, and in `assoc` it made `tcp_to_udp` and `reply` depend on
//! the association that owns them.
//!
//! Hand-over state declared here: [`Carried`], what a UDP flow's counters
//! carry across `oi upgrade` (its byte counts, its age and how long it had
//! been idle); a flow starts from it or afresh ([`Since`]) through one
//! constructor, [`Activity::register`].

use crate::route::Bytes;
use crate::stats::{ConnKind, ConnState, Registered, RuleStats};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a UDP flow's counters start.
pub(crate) enum Since {
    /// Opened here: counted as opened, active now. The instant is the clock
    /// its traffic is timed on (a listener's, shared by its associations).
    Opened(Instant),
    /// Handed over by the previous oi (`oi upgrade`): counted as resumed
    /// (its opening was counted there), from where it was.
    Handed(Carried),
}

/// What a UDP flow's counters carry across `oi upgrade`.
pub(crate) struct Carried {
    /// Payload bytes from the client so far.
    pub(crate) from_client: u64,
    /// Payload bytes to the client so far.
    pub(crate) to_client: u64,
    /// How long it has had no traffic either way: its idle deadline
    /// carries on from there.
    pub(crate) idle: Duration,
    /// How long it has been open: its live entry's age carries on.
    pub(crate) age: Duration,
}

/// Traffic counters shared by an association's owner and its task.
///
/// Invariant: `last_ms` only grows; it is the time of the latest datagram (or
/// TCP read) in either direction, so expiry sees traffic both ways.
pub(crate) struct Activity {
    /// Start of the clock `last_ms` counts on.
    epoch: Instant,
    /// Milliseconds after `epoch` of the last traffic either way.
    last_ms: AtomicU64,
    /// The entry in the live list, holding the payload bytes each way (the
    /// log's 7th and 8th fields): the log line and `oi connections` read the
    /// same counters, and dropping the activity ends the entry.
    pub(crate) conn: Registered,
    /// Set when the upstream has ended (TCP backend closed or failed, socket error).
    ended: AtomicBool,
}

impl Activity {
    /// Lists a flow of `kind` from `client` on `stats` (its live entry) and
    /// starts its counters `since` then. A handed-over flow's clock starts
    /// as long ago as it had been idle, so its idle deadline carries on;
    /// compare activities by [`Activity::last`], not by [`Activity::last_ms`].
    pub(crate) fn register(
        stats: &Arc<RuleStats>,
        kind: ConnKind,
        client: SocketAddr,
        since: Since,
    ) -> Self {
        let (conn, epoch, active) = match since {
            Since::Opened(epoch) => (stats.clone().register(kind, client), epoch, true),
            Since::Handed(carried) => {
                let conn = stats.register_resumed(kind, client, carried.age);
                conn.add_from_client(carried.from_client);
                conn.add_to_client(carried.to_client);
                let now = Instant::now();
                (conn, now.checked_sub(carried.idle).unwrap_or(now), false)
            }
        };
        let a = Activity {
            epoch,
            last_ms: AtomicU64::new(0),
            conn,
            ended: AtomicBool::new(false),
        };
        if active {
            a.touch();
        }
        a
    }

    /// Records traffic now.
    pub(crate) fn touch(&self) {
        // Saturating, not `as`: a truncated count would make an old association look new.
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Milliseconds after the epoch of the last traffic; smaller means idle longer.
    pub(crate) fn last_ms(&self) -> u64 {
        self.last_ms.load(Ordering::Relaxed)
    }

    /// How long there has been no traffic, as of `now`.
    pub(crate) fn idle(&self, now: Instant) -> Duration {
        let since = now.saturating_duration_since(self.epoch).as_millis();
        let now_ms = u64::try_from(since).unwrap_or(u64::MAX);
        Duration::from_millis(now_ms.saturating_sub(self.last_ms()))
    }

    /// The instant the last traffic happened.
    pub(crate) fn last(&self) -> Instant {
        // `last_ms` came from this epoch's clock, so this fits; checked all the same.
        self.epoch
            .checked_add(Duration::from_millis(self.last_ms()))
            .unwrap_or_else(Instant::now)
    }

    /// Whether the upstream has ended and the association only waits to be removed.
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// The bytes moved so far, for a log line.
    pub(crate) fn bytes(&self) -> Bytes {
        let (from_client, to_client) = self.conn.bytes();
        Bytes {
            from_client,
            to_client,
        }
    }

    /// Marks the upstream as ended.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Relaxed);
        self.conn.set_state(ConnState::Ended);
    }
}
