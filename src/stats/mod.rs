//! Counters: per rule, per backend address, per live connection, and for the
//! whole process; and the [`Snapshot`] every way of watching oi reads.
//!
//! # Cost on the forwarding path
//!
//! Nothing here is written per read or write. A connection touches its rule's
//! and the process's counters once when it opens and once when it ends, and
//! registers itself in the live list ([`Live`]) under one shard lock at each
//! end. While it runs, the TCP pump stores its running byte totals into the
//! connection's own [`Traffic`] once per poll (a plain relaxed store to a
//! cache line only that connection's thread writes); a snapshot reads them.
//! So a long transfer's bytes are visible while it runs, and the counters of
//! a rule cost nothing per byte.
//!
//! # Rule identity
//!
//! A rule's counters belong to its listener (same bind address, port and
//! protocol), so they survive a reload that keeps the listener and go when
//! the listener goes. Connections still open on a removed rule keep its
//! [`RuleStats`] alive and report into it; the process totals still count them.
//!
//! # Monotonic byte counters
//!
//! A rule's bytes are "bytes of ended connections + bytes of live ones". A
//! connection that ends leaves the live list first and adds its bytes to the
//! ended total just after, so a snapshot taken in between would see a dip;
//! every byte counter a snapshot reports is therefore the highest value any
//! snapshot has reported (`fetch_max` on a field only snapshots write).

mod live;

pub use live::{ConnInfo, ConnKind, ConnState};
pub(crate) use live::{Live, Registered};

use crate::backends::BackendPool;
use crate::config::Proto;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Why a backend connection failed, as the counters split it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnectFailure {
    /// ECONNREFUSED: nothing listens there.
    Refused,
    /// The connect timeout (`--connect-timeout`) passed.
    Timeout,
    /// EHOSTUNREACH / ENETUNREACH.
    Unreachable,
    /// Anything else, including a local socket that could not be made.
    Other,
}

impl ConnectFailure {
    /// Classifies an error from a connect.
    pub(crate) fn of(e: &std::io::Error) -> Self {
        use rustix::io::Errno;
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => ConnectFailure::Refused,
            std::io::ErrorKind::TimedOut => ConnectFailure::Timeout,
            _ if e.raw_os_error() == Some(Errno::HOSTUNREACH.raw_os_error())
                || e.raw_os_error() == Some(Errno::NETUNREACH.raw_os_error()) =>
            {
                ConnectFailure::Unreachable
            }
            _ => ConnectFailure::Other,
        }
    }
}

/// Counters a rule and the process both keep (the process's are the sum of
/// every rule's, removed ones included). Touched once per connection open or
/// close, never per byte moved.
#[derive(Default)]
pub(crate) struct Counters {
    /// TCP connections open now (accepted on a TCP listener, past the ACL).
    active_tcp: AtomicU64,
    /// UDP associations open now.
    active_udp: AtomicU64,
    /// TCP connections admitted since start.
    opened_tcp: AtomicU64,
    /// Unix socket clients connected now (rinetd-uv's `active_unix`).
    active_unix: AtomicU64,
    /// Unix socket clients admitted since start (`total_unix`).
    opened_unix: AtomicU64,
    /// UDP associations opened since start.
    opened_udp: AtomicU64,
    /// Bytes from clients, of connections that have ended (live ones are in [`Live`]).
    ended_from_client: AtomicU64,
    /// Bytes to clients, of connections that have ended.
    ended_to_client: AtomicU64,
    /// Clients refused because no `allow` pattern matched.
    not_allowed: AtomicU64,
    /// Clients refused by a `deny` pattern.
    denied: AtomicU64,
    /// Backend connects refused.
    connect_refused: AtomicU64,
    /// Backend connects timed out.
    connect_timeout: AtomicU64,
    /// Backend unreachable (host or network).
    connect_unreachable: AtomicU64,
    /// Backend connects failed otherwise (or the outgoing socket could not be made).
    connect_other: AtomicU64,
    /// UDP associations ended to make room under the rule's cap.
    udp_evicted: AtomicU64,
    /// TCP connections refused with `limit-reached` (the global `maxconn`,
    /// the rule's `maxconn` or `maxconn-per-client`): a limit set too low
    /// looks like an outage, so it must be visible next to the ACL refusals.
    limit_reached: AtomicU64,
    /// Datagrams an `accept-proxy` `/udp` listener dropped (untrusted source,
    /// no valid PROXY v2 header): they leave no log line, so this is the
    /// only trace of a misconfigured proxy.
    udp_proxy_dropped: AtomicU64,
    /// Highest bytes-from-clients value a snapshot reported (see the module docs).
    seen_from_client: AtomicU64,
    /// Highest bytes-to-clients value a snapshot reported.
    seen_to_client: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterValues {
    /// TCP connections open now.
    pub active_tcp: u64,
    /// UDP associations open now.
    pub active_udp: u64,
    /// TCP connections admitted since start (or since the rule appeared).
    pub opened_tcp: u64,
    /// UDP associations opened.
    pub opened_udp: u64,
    /// Unix socket clients connected now (forwarded to a TCP or unix backend).
    pub active_unix: u64,
    /// Unix socket clients admitted.
    pub opened_unix: u64,
    /// Bytes received from clients and sent on to backends (live connections included).
    pub from_client: u64,
    /// Bytes received from backends and sent to clients (live connections included).
    pub to_client: u64,
    /// Clients refused: no `allow` matched.
    pub not_allowed: u64,
    /// Clients refused by a `deny`.
    pub denied: u64,
    /// Backend connects refused.
    pub connect_refused: u64,
    /// Backend connects timed out.
    pub connect_timeout: u64,
    /// Backend unreachable.
    pub connect_unreachable: u64,
    /// Other backend connect failures.
    pub connect_other: u64,
    /// UDP associations evicted by the cap.
    pub udp_evicted: u64,
    /// TCP connections refused by a connection limit (`limit-reached`).
    pub limit_reached: u64,
    /// Datagrams dropped by `accept-proxy` on a `/udp` listener.
    pub udp_proxy_dropped: u64,
}

impl CounterValues {
    /// Connections and associations open now.
    pub fn active(&self) -> u64 {
        self.active_tcp
            .saturating_add(self.active_udp)
            .saturating_add(self.active_unix)
    }

    /// Connections and associations opened.
    pub fn opened(&self) -> u64 {
        self.opened_tcp
            .saturating_add(self.opened_udp)
            .saturating_add(self.opened_unix)
    }

    /// Backend connects that failed, whatever the reason.
    pub fn connect_failed(&self) -> u64 {
        [
            self.connect_refused,
            self.connect_timeout,
            self.connect_unreachable,
            self.connect_other,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// ACL refusals, both kinds.
    pub fn refused(&self) -> u64 {
        self.not_allowed.saturating_add(self.denied)
    }
}

/// Relaxed load: every counter is independent, and a snapshot is a sample.
fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Adds one.
fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// Subtracts one, never below zero (a counter, not a reason to wrap).
fn drop_one(a: &AtomicU64) {
    let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
}

impl Counters {
    /// Values, with bytes of ended connections plus `live` bytes, reported
    /// no lower than any earlier snapshot.
    /// Bytes of connections that have ended: (from clients, to clients).
    fn ended_bytes(&self) -> (u64, u64) {
        (get(&self.ended_from_client), get(&self.ended_to_client))
    }

    /// The values, given the ended bytes read before the live list was
    /// copied (see [`Stats::snapshot`]) and the listed connections' bytes.
    fn values(&self, ended: (u64, u64), live_from: u64, live_to: u64) -> CounterValues {
        let from = ended.0.saturating_add(live_from);
        let to = ended.1.saturating_add(live_to);
        let from = self
            .seen_from_client
            .fetch_max(from, Ordering::Relaxed)
            .max(from);
        let to = self.seen_to_client.fetch_max(to, Ordering::Relaxed).max(to);
        CounterValues {
            active_tcp: get(&self.active_tcp),
            active_udp: get(&self.active_udp),
            opened_tcp: get(&self.opened_tcp),
            opened_udp: get(&self.opened_udp),
            active_unix: get(&self.active_unix),
            opened_unix: get(&self.opened_unix),
            from_client: from,
            to_client: to,
            not_allowed: get(&self.not_allowed),
            denied: get(&self.denied),
            connect_refused: get(&self.connect_refused),
            connect_timeout: get(&self.connect_timeout),
            connect_unreachable: get(&self.connect_unreachable),
            connect_other: get(&self.connect_other),
            udp_evicted: get(&self.udp_evicted),
            limit_reached: get(&self.limit_reached),
            udp_proxy_dropped: get(&self.udp_proxy_dropped),
        }
    }

    fn opened(&self, kind: ConnKind) {
        let (opened, active) = self.of(kind);
        bump(opened);
        bump(active);
    }

    /// The (opened, active) pair `kind` counts in: a connection counts
    /// under its client side (TCP, UDP or unix), as rinetd-uv's status does.
    fn of(&self, kind: ConnKind) -> (&AtomicU64, &AtomicU64) {
        match kind {
            ConnKind::Udp => (&self.opened_udp, &self.active_udp),
            ConnKind::Unix => (&self.opened_unix, &self.active_unix),
            ConnKind::Tcp | ConnKind::TcpToUdp => (&self.opened_tcp, &self.active_tcp),
        }
    }

    fn ended(&self, kind: ConnKind, from_client: u64, to_client: u64) {
        self.ended_from_client
            .fetch_add(from_client, Ordering::Relaxed);
        self.ended_to_client.fetch_add(to_client, Ordering::Relaxed);
        drop_one(self.of(kind).1);
    }

    fn connect_failed(&self, why: ConnectFailure) {
        bump(match why {
            ConnectFailure::Refused => &self.connect_refused,
            ConnectFailure::Timeout => &self.connect_timeout,
            ConnectFailure::Unreachable => &self.connect_unreachable,
            ConnectFailure::Other => &self.connect_other,
        });
    }
}

/// Counters of one backend address of a rule (a rule lists several when its
/// name resolves to several; later, when it balances across several).
pub(crate) struct BackendStats {
    /// The address, as the status file and metrics name the backend.
    addr: SocketAddr,
    /// Connections to it open now.
    active: AtomicU64,
    /// Connections made to it.
    opened: AtomicU64,
    /// Bytes sent to it, of ended connections.
    ended_from_client: AtomicU64,
    /// Bytes received from it, of ended connections.
    ended_to_client: AtomicU64,
    /// Highest from-client value reported (see the module docs).
    seen_from_client: AtomicU64,
    /// Highest to-client value reported.
    seen_to_client: AtomicU64,
}

impl BackendStats {
    fn new(addr: SocketAddr) -> Arc<Self> {
        Arc::new(BackendStats {
            addr,
            active: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            ended_from_client: AtomicU64::new(0),
            ended_to_client: AtomicU64::new(0),
            seen_from_client: AtomicU64::new(0),
            seen_to_client: AtomicU64::new(0),
        })
    }
}

/// A snapshot of one backend's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendValues {
    /// The backend's address.
    pub addr: SocketAddr,
    /// The pool member it belongs to (`name:`, or `host:port` as written,
    /// `[i]` when a name was expanded); `None` when no pool lists it.
    pub member: Option<String>,
    /// Whether the pool counts it up (passive health: not down after
    /// `health_threshold` failed connects, or its recovery time has passed).
    pub healthy: bool,
    /// The backend name it was expanded from (`dns-multi-ip-expand`);
    /// `None` for a backend written in the file.
    pub expanded_from: Option<String>,
    /// Connections open to it now.
    pub active: u64,
    /// Connections made to it.
    pub opened: u64,
    /// Bytes sent to it.
    pub from_client: u64,
    /// Bytes received from it.
    pub to_client: u64,
}

/// One rule's counters: shared by its listener (across reloads that keep it)
/// and by every connection it accepted.
pub struct RuleStats {
    /// How the rule is named in every output: `bindhost:port/proto`, as configured.
    name: Arc<str>,
    /// The listening side's protocol.
    proto: Proto,
    /// The rule's own counters.
    counters: Counters,
    /// The process's counters, which every rule adds to as well.
    process: Arc<Counters>,
    /// Backend addresses and their counters; replaced (keeping the counters
    /// of addresses still listed) when a reload changes them. Read once per
    /// connection, lock-free.
    backends: arc_swap::ArcSwap<Vec<Arc<BackendStats>>>,
    /// The process's live list, which the rule's connections join and leave.
    live: Arc<Live>,
    /// The rule's backend pool, for health and names in snapshots; set by
    /// the listener at start and on each reload.
    pool: arc_swap::ArcSwapOption<BackendPool>,
}

impl RuleStats {
    /// Sets the pool whose health snapshots report.
    pub(crate) fn set_pool(&self, pool: Arc<BackendPool>) {
        self.pool.store(Some(pool));
    }

    /// The rule's name in outputs.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Counts a client refused before it was forwarded: by the ACLs
    /// (`denied`, `not-allowed`) or by a connection limit (`limit-reached`);
    /// `event` is the refusal logged.
    pub(crate) fn refused(&self, event: crate::logfile::Event) {
        use crate::logfile::Event;
        for c in [&self.counters, &*self.process] {
            bump(match event {
                Event::Denied => &c.denied,
                Event::LimitReached => &c.limit_reached,
                _ => &c.not_allowed,
            });
        }
    }

    /// Counts a datagram an `accept-proxy` `/udp` listener dropped; returns
    /// the process's total so far, for the rate-limited warning.
    pub(crate) fn udp_proxy_dropped(&self) -> u64 {
        bump(&self.counters.udp_proxy_dropped);
        self.process
            .udp_proxy_dropped
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1)
    }

    /// Counts a backend connect that failed.
    pub(crate) fn connect_failed(&self, why: ConnectFailure) {
        self.counters.connect_failed(why);
        self.process.connect_failed(why);
    }

    /// Counts a UDP association evicted to stay under the cap.
    pub(crate) fn udp_evicted(&self) {
        bump(&self.counters.udp_evicted);
        bump(&self.process.udp_evicted);
    }

    /// Registers a connection (or association) of this rule from `client`;
    /// it is counted and listed until the returned guard drops.
    pub(crate) fn register(
        self: &Arc<Self>,
        kind: ConnKind,
        client: impl Into<crate::peer::Peer>,
    ) -> Registered {
        self.counters.opened(kind);
        self.process.opened(kind);
        self.live.register(self.clone(), kind, client.into())
    }

    /// The counters of backend `addr`, if the rule lists it.
    fn backend(&self, addr: SocketAddr) -> Option<Arc<BackendStats>> {
        self.backends
            .load()
            .iter()
            .find(|b| b.addr == addr)
            .cloned()
    }

    /// Sets the backend addresses after a reload, keeping the counters of
    /// those still listed.
    pub(crate) fn set_backends(&self, addrs: &[SocketAddr]) {
        let old = self.backends.load();
        let new: Vec<Arc<BackendStats>> = addrs
            .iter()
            .map(|a| {
                old.iter()
                    .find(|b| b.addr == *a)
                    .cloned()
                    .unwrap_or_else(|| BackendStats::new(*a))
            })
            .collect();
        self.backends.store(Arc::new(new));
    }
}

/// A snapshot of one rule.
#[derive(Clone, Debug)]
pub struct RuleValues {
    /// `bindhost:port/proto`, as configured.
    pub name: String,
    /// How the rule chooses among its backends (`roundrobin` unless its
    /// `load_balancing:` says otherwise).
    pub algorithm: String,
    /// The listening protocol.
    pub proto: Proto,
    /// The rule's counters.
    pub counters: CounterValues,
    /// Its backends' counters.
    pub backends: Vec<BackendValues>,
}

/// Everything counted for the whole process; one per server, in [`crate::Shared`].
pub struct Stats {
    /// When the server started, for the uptime.
    started: Instant,
    /// The wall-clock start, for the status file.
    started_at: SystemTime,
    /// When the configuration was last reloaded (start-up counts), for `stats_since_reload`.
    last_reload: Mutex<SystemTime>,
    /// Reloads applied.
    reloads_ok: AtomicU64,
    /// Reloads refused (the file did not parse or resolve).
    reloads_failed: AtomicU64,
    /// accept(2) failures other than a client giving up (EMFILE and the like).
    accept_errors: AtomicU64,
    /// The sum of every rule's counters.
    process: Arc<Counters>,
    /// The serving rules, in the order they started. Locked only when
    /// listeners start or stop and by snapshots, never by a connection.
    rules: Mutex<Vec<Arc<RuleStats>>>,
    /// Live TCP connections and UDP associations.
    live: Arc<Live>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            started: Instant::now(),
            started_at: SystemTime::now(),
            last_reload: Mutex::new(SystemTime::now()),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
            process: Arc::new(Counters::default()),
            rules: Mutex::new(Vec::new()),
            live: Arc::new(Live::new()),
        }
    }
}

impl Stats {
    /// The counters of a listener that starts serving a rule named
    /// `name` (`bindhost:port/proto`) with these backends.
    pub(crate) fn add_rule(
        &self,
        name: String,
        proto: Proto,
        backends: &[SocketAddr],
    ) -> Arc<RuleStats> {
        let rule = Arc::new(RuleStats {
            name: name.into(),
            proto,
            counters: Counters::default(),
            process: self.process.clone(),
            live: self.live.clone(),
            pool: arc_swap::ArcSwapOption::empty(),
            backends: arc_swap::ArcSwap::from_pointee(
                backends.iter().map(|a| BackendStats::new(*a)).collect(),
            ),
        });
        lock(&self.rules).push(rule.clone());
        rule
    }

    /// Forgets a removed listener's counters (its open connections keep them).
    pub(crate) fn remove_rule(&self, rule: &Arc<RuleStats>) {
        lock(&self.rules).retain(|r| !Arc::ptr_eq(r, rule));
    }

    /// Datagrams `accept-proxy` `/udp` listeners dropped since start,
    /// removed listeners included.
    pub(crate) fn udp_proxy_dropped(&self) -> u64 {
        get(&self.process.udp_proxy_dropped)
    }

    /// Counts an accept(2) failure.
    pub(crate) fn accept_error(&self) {
        bump(&self.accept_errors);
    }

    /// Counts a reload: applied (`ok`) or refused.
    pub fn reloaded(&self, ok: bool) {
        if ok {
            bump(&self.reloads_ok);
            *lock(&self.last_reload) = SystemTime::now();
        } else {
            bump(&self.reloads_failed);
        }
    }

    /// Counters, rules and pools as of now. Takes the rule list's lock and,
    /// one at a time, each live-list shard's lock (only to copy pointers out).
    pub fn snapshot(&self, pools: Pools<'_>) -> Snapshot {
        // Ended totals are read before the live list is copied. A
        // connection that ends in between is then in neither (a dip, which
        // the reported maximum hides) and never in both: read the other way
        // round, a connection listed and then ended was counted twice, and
        // the maximum kept the double count for good.
        let rules: Vec<Arc<RuleStats>> = lock(&self.rules).clone();
        let process_ended = self.process.ended_bytes();
        let ended: Vec<_> = rules
            .iter()
            .map(|r| {
                let backends = r.backends.load_full();
                let per_backend: Vec<(u64, u64)> = backends
                    .iter()
                    .map(|b| (get(&b.ended_from_client), get(&b.ended_to_client)))
                    .collect();
                (r.counters.ended_bytes(), backends, per_backend)
            })
            .collect();
        let conns = self.live.list();
        let (mut all_from, mut all_to) = (0u64, 0u64);
        let rule_values = rules
            .iter()
            .zip(ended)
            .map(|(r, (rule_ended, backends, backends_ended))| {
                let (mut from, mut to) = (0u64, 0u64);
                let pool = r.pool.load();
                let mut per_backend = backends_ended;
                for c in conns.iter().filter(|c| Arc::ptr_eq(&c.rule, r)) {
                    let (f, t) = c.bytes();
                    from = from.saturating_add(f);
                    to = to.saturating_add(t);
                    if let Some(b) = c.backend_stats() {
                        if let Some(i) = backends.iter().position(|x| Arc::ptr_eq(x, b)) {
                            per_backend[i].0 = per_backend[i].0.saturating_add(f);
                            per_backend[i].1 = per_backend[i].1.saturating_add(t);
                        }
                    }
                }
                let backends = backends
                    .iter()
                    .zip(per_backend)
                    .map(|(b, (f, t))| {
                        let health = pool.as_ref().and_then(|p| p.health_of(b.addr));
                        let healthy = health.as_ref().is_none_or(|h| h.healthy);
                        let (member, expanded_from) = match health {
                            Some(h) => (Some(h.label), h.parent),
                            None => (None, None),
                        };
                        BackendValues {
                            addr: b.addr,
                            member,
                            healthy,
                            expanded_from,
                            active: get(&b.active),
                            opened: get(&b.opened),
                            from_client: b.seen_from_client.fetch_max(f, Ordering::Relaxed).max(f),
                            to_client: b.seen_to_client.fetch_max(t, Ordering::Relaxed).max(t),
                        }
                    })
                    .collect();
                RuleValues {
                    name: r.name.to_string(),
                    algorithm: pool
                        .as_ref()
                        .map_or_else(|| "roundrobin".to_string(), |p| p.algorithm().to_string()),
                    proto: r.proto,
                    counters: r.counters.values(rule_ended, from, to),
                    backends,
                }
            })
            .collect();
        for c in &conns {
            let (f, t) = c.bytes();
            all_from = all_from.saturating_add(f);
            all_to = all_to.saturating_add(t);
        }
        Snapshot {
            taken_at: SystemTime::now(),
            started_at: self.started_at,
            uptime: self.started.elapsed(),
            last_reload: *lock(&self.last_reload),
            reloads_ok: get(&self.reloads_ok),
            reloads_failed: get(&self.reloads_failed),
            accept_errors: get(&self.accept_errors),
            totals: self.process.values(process_ended, all_from, all_to),
            rules: rule_values,
            descriptors: open_descriptors(),
            buffer_size: pools.buffers.buffer_size(),
            buffers_pooled: pools.buffers.pooled(),
            datagram_buffers_pooled: pools.datagrams.pooled(),
            pipes_live: pools.pipes.live(),
            pipes_in_use: pools.pipes.in_use(),
            pipes_pooled: pools.pipes.pooled(),
            pipes_unavailable: pools.pipes.unavailable(),
            udp_datagrams_dropped: pools.udp_dropped,
            udp_queued_bytes: pools.udp_queued,
            log_lines_queued: pools.log_queued,
            log_lines_dropped: pools.log_dropped,
        }
    }

    /// The live connections and associations, oldest first.
    pub fn connections(&self) -> Vec<ConnInfo> {
        let mut list: Vec<ConnInfo> = self.live.list().iter().map(|c| c.info()).collect();
        list.sort_by_key(|c| std::cmp::Reverse(c.age));
        list
    }
}

/// What a snapshot reads besides the counters (from [`crate::Shared`]).
pub struct Pools<'a> {
    /// TCP copy buffers.
    pub buffers: &'a crate::BufferPool,
    /// UDP datagram buffers.
    pub datagrams: &'a crate::BufferPool,
    /// Splice pipes.
    pub pipes: &'a crate::PipePool,
    /// `Shared::udp_datagrams_dropped`.
    pub udp_dropped: u64,
    /// `Shared::udp_queued_bytes`.
    pub udp_queued: usize,
    /// `LogHandle::queued`.
    pub log_queued: usize,
    /// `LogHandle::dropped`.
    pub log_dropped: u64,
}

/// Everything counted, at one moment: what the status file, the metrics,
/// `oi status`, the STATS line and SIGUSR1 all print.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When the snapshot was taken.
    pub taken_at: SystemTime,
    /// When the server started.
    pub started_at: SystemTime,
    /// How long the server has run.
    pub uptime: Duration,
    /// When the configuration was last (re)loaded.
    pub last_reload: SystemTime,
    /// Reloads applied.
    pub reloads_ok: u64,
    /// Reloads refused.
    pub reloads_failed: u64,
    /// accept(2) failures.
    pub accept_errors: u64,
    /// The whole process's counters.
    pub totals: CounterValues,
    /// Each serving rule's counters.
    pub rules: Vec<RuleValues>,
    /// Descriptors open (entries of /proc/self/fd), if readable.
    pub descriptors: Option<u64>,
    /// Size of each TCP copy buffer.
    pub buffer_size: usize,
    /// Copy buffers waiting in the pool.
    pub buffers_pooled: usize,
    /// Datagram buffers waiting in the pool.
    pub datagram_buffers_pooled: usize,
    /// Splice pipes that exist.
    pub pipes_live: usize,
    /// Splice pipes held by connections.
    pub pipes_in_use: usize,
    /// Splice pipes waiting in the pool.
    pub pipes_pooled: usize,
    /// Times a pipe could not be had (the direction copied instead).
    pub pipes_unavailable: u64,
    /// Client datagrams dropped because their upstream could not take them.
    pub udp_datagrams_dropped: u64,
    /// Bytes of datagrams queued towards TCP backends now.
    pub udp_queued_bytes: usize,
    /// Log lines waiting for the writer.
    pub log_lines_queued: usize,
    /// Log lines dropped because the queue was full.
    pub log_lines_dropped: u64,
}

/// Entries of /proc/self/fd, less the one used to read it.
fn open_descriptors() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count();
    u64::try_from(n.saturating_sub(1)).ok()
}

/// Locks, recovering from a poisoned lock: counters stay usable even if a
/// thread panicked while holding one (only in debug builds: release aborts).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logfile::Event;

    fn shared() -> Arc<crate::Shared> {
        crate::Shared::new(Default::default(), crate::LogHandle::disabled())
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("literal")
    }

    #[test]
    fn connections_count_while_open_and_bytes_add_up_after() {
        let shared = shared();
        let stats = &shared.stats;
        let b = addr("127.0.0.1:2");
        let rule = stats.add_rule("a:1/tcp".into(), Proto::Tcp, &[b]);
        let conn = rule.register(ConnKind::Tcp, addr("127.0.0.1:9"));
        conn.connected(b);
        conn.publish(10, 20, ConnState::Open);
        let s = shared.snapshot();
        assert_eq!(s.totals.active_tcp, 1);
        assert_eq!((s.totals.from_client, s.totals.to_client), (10, 20));
        assert_eq!(s.rules[0].backends[0].active, 1);
        assert_eq!(s.rules[0].backends[0].from_client, 10);
        assert_eq!(stats.connections().len(), 1);
        conn.publish(15, 20, ConnState::ClientClosed);
        drop(conn);
        let s = shared.snapshot();
        assert_eq!(s.totals.active_tcp, 0);
        assert_eq!(s.totals.opened_tcp, 1);
        assert_eq!(
            (s.rules[0].counters.from_client, s.totals.to_client),
            (15, 20)
        );
        assert_eq!(s.rules[0].backends[0].active, 0);
        assert_eq!(s.rules[0].backends[0].to_client, 20);
        assert!(stats.connections().is_empty());
    }

    #[test]
    fn refusals_failures_and_evictions_are_counted_per_rule_and_in_total() {
        let shared = shared();
        let stats = &shared.stats;
        let rule = stats.add_rule("a:1/udp".into(), Proto::Udp, &[]);
        rule.refused(Event::Denied);
        rule.refused(Event::NotAllowed);
        rule.refused(Event::NotAllowed);
        rule.connect_failed(ConnectFailure::Refused);
        rule.connect_failed(ConnectFailure::Timeout);
        rule.udp_evicted();
        rule.refused(Event::LimitReached);
        assert_eq!(rule.udp_proxy_dropped(), 1, "the process's total so far");
        assert_eq!(rule.udp_proxy_dropped(), 2);
        let s = shared.snapshot();
        for c in [&s.totals, &s.rules[0].counters] {
            assert_eq!((c.denied, c.not_allowed), (1, 2));
            assert_eq!(
                (c.connect_refused, c.connect_timeout, c.connect_failed()),
                (1, 1, 2)
            );
            assert_eq!(c.udp_evicted, 1);
            assert_eq!((c.limit_reached, c.udp_proxy_dropped), (1, 2));
            assert_eq!(c.refused(), 3, "ACL refusals only");
        }
        assert_eq!(shared.udp_proxy_datagrams_dropped(), 2);
        stats.remove_rule(&rule);
        let s = shared.snapshot();
        assert!(s.rules.is_empty());
        assert_eq!(
            s.totals.denied, 1,
            "process totals keep a removed rule's counts"
        );
    }

    #[test]
    fn connect_errors_are_classified() {
        use std::io::{Error, ErrorKind};
        assert_eq!(
            ConnectFailure::of(&ErrorKind::ConnectionRefused.into()),
            ConnectFailure::Refused
        );
        assert_eq!(
            ConnectFailure::of(&ErrorKind::TimedOut.into()),
            ConnectFailure::Timeout
        );
        let unreach = Error::from_raw_os_error(rustix::io::Errno::HOSTUNREACH.raw_os_error());
        assert_eq!(ConnectFailure::of(&unreach), ConnectFailure::Unreachable);
        assert_eq!(
            ConnectFailure::of(&ErrorKind::Other.into()),
            ConnectFailure::Other
        );
    }
}
