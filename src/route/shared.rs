//! What every listener and connection of one server shares: the settings from
//! the command line, the buffer and pipe pools, and the connection log.

use crate::backends::Refresher;
use crate::logfile::LogHandle;
use crate::net::bounds::{ByteBudget, Every};
use crate::net::buffers::BufferPool;
use crate::net::pipes::{self, PipePool};
use crate::route::limits::GlobalLimit;
use crate::stats::{Pools, RuleStats, Snapshot, Stats};
use oi_config::SpliceMode;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Engine settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Size of each copy buffer (`--buffer-size`).
    pub buffer_size: usize,
    /// Per-address backend connect timeout (`--connect-timeout`).
    pub connect_timeout: Duration,
    /// Idle limit for half-closed connections (`--half-close-timeout`).
    pub half_close_idle: Duration,
    /// Whether connections splice (`--splice`); a rule's `[splice=...]` overrides it.
    pub splice: SpliceMode,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            buffer_size: 64 * 1024,
            connect_timeout: Duration::from_secs(10),
            half_close_idle: Duration::from_secs(60),
            splice: SpliceMode::Auto,
        }
    }
}

/// Copy buffers kept for reuse: enough for a burst of busy directions.
const BUFFERS_KEPT: usize = 1024;

/// Datagram buffers kept for reuse by the UDP paths.
const DATAGRAM_BUFFERS_KEPT: usize = 256;

/// Size of every datagram buffer: larger than any UDP payload (the largest is
/// 65,507 bytes over IPv4), whatever `--buffer-size` says.
pub(crate) const DATAGRAM_BUFFER: usize = 65_536;

/// Bytes of client datagrams all UDP→TCP associations together may hold
/// queued while their backends connect or stall. Before this bound, 8,000
/// sources × 16 one-byte datagrams against a backend slow to accept pinned
/// 2.5 GB (each datagram held a 64 KiB buffer); now at most this much.
pub const UDP_QUEUE_TOTAL: usize = 16 * 1024 * 1024;

/// How often at most a "dropping datagrams" warning is printed.
const DROP_WARNING_EVERY: Duration = Duration::from_secs(60);

/// State shared by every listener and connection of one server.
pub struct Shared {
    /// Command-line settings.
    pub settings: Settings,
    /// Copy buffers for TCP, recycled between connections.
    pub buffers: BufferPool,
    /// Pipes for splice, recycled between connections.
    pub pipes: PipePool,
    /// Datagram-sized buffers for the UDP paths, recycled between datagrams.
    pub datagrams: BufferPool,
    /// Where rinetd log events go.
    pub log: LogHandle,
    /// Counters per rule, per live connection and for the process: what
    /// the status file, the metrics and `oi status` read.
    pub stats: Stats,
    /// Bytes queued towards TCP backends by every UDP→TCP association
    /// together, limited to [`UDP_QUEUE_TOTAL`].
    pub(crate) udp_queue: Arc<ByteBudget>,
    /// Every pumping TCP connection, so `oi upgrade` can pause them and
    /// hand them to the new oi.
    pub(crate) parking: crate::route::park::Parking,
    /// Client datagrams dropped because an upstream could not take them
    /// (queue or byte budget full): for the statistics, and the warning.
    udp_dropped: AtomicU64,
    /// Rate limit of the warning about dropped datagrams.
    udp_drop_warning: Every,
    /// Rate limit of that warning: a flood of bad datagrams prints one line
    /// a minute, not one each.
    udp_proxy_warning: Every,
    /// Rate limit of the warning about a client whose outgoing socket could
    /// not be made (`transparent` without CAP_NET_ADMIN fails every client:
    /// one line a minute, each client still gets its log-file line).
    local_socket_warning: Every,
    /// The most associations one `/udp` listener may hold, whatever its
    /// `maxassoc` says: its share of the descriptor limit, set by the
    /// listener set (`listen::udp_assoc_share`) when the UDP listeners change.
    udp_assoc_cap: AtomicUsize,
    /// The global `maxconn`: the process's open TCP connections, their
    /// limit, and the refusals by any limit (`crate::route::limits`).
    pub(crate) limits: GlobalLimit,
    /// Looks backend names up again, on a thread of its own (`dns-refresh`).
    pub(crate) dns: Refresher,
    /// Probes backends of rules with `check-interval`, on a thread of its own.
    pub(crate) probes: crate::backends::probe::Prober,
}

impl Shared {
    /// Shared state for a server with these settings and log.
    pub fn new(settings: Settings, log: LogHandle) -> Arc<Self> {
        let want = pipes::pipe_size_within_max(settings.buffer_size);
        let pipes = PipePool::new(want, pipes::PIPES_KEPT);
        Self::with_pipe_pool(settings, log, pipes)
    }

    /// Like [`new`](Self::new) with a given pipe pool: tests use a pool whose
    /// pipes cannot be sized, to see connections fall back to copying.
    pub fn with_pipe_pool(settings: Settings, log: LogHandle, pipes: PipePool) -> Arc<Self> {
        Arc::new(Shared {
            buffers: BufferPool::new(settings.buffer_size, BUFFERS_KEPT),
            pipes,
            datagrams: BufferPool::new(DATAGRAM_BUFFER, DATAGRAM_BUFFERS_KEPT),
            settings,
            log,
            stats: Stats::default(),
            udp_queue: ByteBudget::new(UDP_QUEUE_TOTAL),
            parking: Default::default(),
            udp_dropped: AtomicU64::new(0),
            udp_drop_warning: Every::new(DROP_WARNING_EVERY),
            udp_proxy_warning: Every::new(DROP_WARNING_EVERY),
            local_socket_warning: Every::new(DROP_WARNING_EVERY),
            udp_assoc_cap: AtomicUsize::new(usize::MAX),
            limits: GlobalLimit::default(),
            dns: Refresher::default(),
            probes: crate::backends::probe::Prober::default(),
        })
    }

    /// Every counter, as of now (see [`Stats::snapshot`]).
    pub fn snapshot(&self) -> Snapshot {
        self.stats.snapshot(Pools {
            buffers: &self.buffers,
            datagrams: &self.datagrams,
            pipes: &self.pipes,
            udp_dropped: self.udp_datagrams_dropped(),
            udp_queued: self.udp_queued_bytes(),
            log_queued: self.log.queued(),
            log_dropped: self.log.dropped(),
        })
    }

    /// Bytes of client datagrams queued towards TCP backends right now (at
    /// most [`UDP_QUEUE_TOTAL`]).
    pub fn udp_queued_bytes(&self) -> usize {
        self.udp_queue.used()
    }

    /// Client datagrams dropped so far because their upstream could not take them.
    pub fn udp_datagrams_dropped(&self) -> u64 {
        self.udp_dropped.load(Ordering::Relaxed)
    }

    /// The most associations one `/udp` listener may hold now, from the
    /// descriptor limit (before any listener starts: no limit).
    pub fn udp_association_cap(&self) -> usize {
        self.udp_assoc_cap.load(Ordering::Relaxed)
    }

    /// Sets the per-listener association cap (see [`udp_association_cap`](Self::udp_association_cap)).
    pub(crate) fn set_udp_association_cap(&self, cap: usize) {
        self.udp_assoc_cap.store(cap, Ordering::Relaxed);
    }

    /// Sets the global limit on open TCP connections (the configuration's
    /// `maxconn N` line; `None`: no limit), at start-up and on every reload.
    /// Connections already open stay open; new ones are refused with
    /// `limit-reached` while the count is at the limit.
    pub fn set_max_connections(&self, max: Option<usize>) {
        self.limits.set(max);
    }

    /// The global limit on open TCP connections, if any.
    pub fn max_connections(&self) -> Option<usize> {
        self.limits.get()
    }

    /// TCP connections counted against the global limit now (counted
    /// whether or not a limit is set).
    pub fn limited_connections_open(&self) -> usize {
        self.limits.open()
    }

    /// Connections refused by any limit (global, a rule's `maxconn` or
    /// `maxconn-per-client`) since start.
    pub fn connections_refused_by_limits(&self) -> u64 {
        self.limits.refused()
    }

    /// Datagrams `accept-proxy` `/udp` listeners have dropped so far for
    /// want of a valid PROXY header from a trusted source.
    /// Counted per rule and in total in [`Stats`] (the one count the status
    /// file, the metrics and `oi status` read).
    pub fn udp_proxy_datagrams_dropped(&self) -> u64 {
        self.stats.udp_proxy_dropped()
    }

    /// Counts one datagram an `accept-proxy` `/udp` listener dropped, in
    /// its rule's counters (`rule`) and the process's, warning at most once
    /// a minute. `why` is formatted only then.
    pub(crate) fn udp_proxy_datagram_dropped(
        &self,
        rule: &RuleStats,
        listener: &dyn std::fmt::Display,
        peer: SocketAddr,
        why: &dyn std::fmt::Display,
    ) {
        let n = rule.udp_proxy_dropped();
        if self.udp_proxy_warning.ready() {
            log::warn!(
                rule:% = listener, client:% = peer.ip(), reason = "proxy-header-failed";
                "{listener}/udp: dropping a datagram from {peer}: {why} ({n} dropped so far \
                 for want of a trusted PROXY header); next warning in a minute at the earliest"
            );
        }
    }

    /// Reports that `client`'s outgoing socket on rule `rule` could not be
    /// made (`why`): a warning at most once a minute, else a debug line. The
    /// caller closes that client only and logs `local-socket-failed`.
    pub(crate) fn local_socket_failed(
        &self,
        rule: &dyn std::fmt::Display,
        client: &dyn std::fmt::Display,
        why: &dyn std::fmt::Display,
    ) {
        if self.local_socket_warning.ready() {
            log::warn!(
                rule:% = rule, client:% = client, reason = "local-socket-failed";
                "{client} -> {rule}: cannot make the backend socket: {why}; the client is \
                 closed (local-socket-failed); next warning in a minute at the earliest"
            );
        } else {
            log::debug!("{client} -> {rule}: cannot make the backend socket: {why}");
        }
    }

    /// Counts one dropped client datagram, warning at most once a minute.
    pub(crate) fn udp_datagram_dropped(&self, why: &str) {
        let n = self
            .udp_dropped
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if self.udp_drop_warning.ready() {
            log::warn!(
                "dropping client datagrams: {why} ({n} dropped so far, {} bytes queued \
                 towards TCP backends, limit {}); next warning in a minute at the earliest",
                self.udp_queue.used(),
                self.udp_queue.limit()
            );
        }
    }
}
