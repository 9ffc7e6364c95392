//! The process's counters ([`Stats`]) and the [`Snapshot`] every way of
//! watching oi reads.

use super::counters::{bump, get, CounterValues, Counters};
use super::rules::{BackendStats, BackendValues, RuleStats, RuleValues};
use super::{ConnInfo, Live};
use oi_config::Proto;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Everything counted for the whole process; one per server, in [`crate::Shared`].
pub struct Stats {
    /// When the server started, for the uptime, and the wall-clock start,
    /// for the status file: a lock, as `oi upgrade` moves both back to the
    /// previous oi's ([`Stats::carry_on`]).
    pub(super) started: Mutex<(Instant, SystemTime)>,
    /// When the configuration was last reloaded (start-up counts), for `stats_since_reload`.
    pub(super) last_reload: Mutex<SystemTime>,
    /// Reloads applied.
    pub(super) reloads_ok: AtomicU64,
    /// Reloads refused (the file did not parse or resolve).
    pub(super) reloads_failed: AtomicU64,
    /// accept(2) failures other than a client giving up (EMFILE and the like).
    pub(super) accept_errors: AtomicU64,
    /// The sum of every rule's counters.
    pub(super) process: Arc<Counters>,
    /// The serving rules, in the order they started. Locked only when
    /// listeners start or stop and by snapshots, never by a connection.
    pub(super) rules: Mutex<Vec<Arc<RuleStats>>>,
    /// Live TCP connections and UDP associations.
    pub(super) live: Arc<Live>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            started: Mutex::new((Instant::now(), SystemTime::now())),
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
            name: Mutex::new(name.into()),
            proto,
            counters: Counters::default(),
            process: self.process.clone(),
            live: self.live.clone(),
            pool: arc_swap::ArcSwapOption::empty(),
            rates: crate::stats::rate::RuleRates::default(),
            tls: arc_swap::ArcSwapOption::empty(),
            backends: arc_swap::ArcSwap::from_pointee(
                backends.iter().map(|a| BackendStats::new(*a)).collect(),
            ),
        });
        self.rules.lock().push(rule.clone());
        rule
    }

    /// Forgets a removed listener's counters (its open connections keep them).
    pub(crate) fn remove_rule(&self, rule: &Arc<RuleStats>) {
        self.rules.lock().retain(|r| !Arc::ptr_eq(r, rule));
    }

    /// Datagrams `accept-proxy` `/udp` listeners dropped since start,
    /// removed listeners included.
    pub(crate) fn udp_proxy_dropped(&self) -> u64 {
        get(&self.process.cells.udp_proxy_dropped)
    }

    /// Counts an accept(2) failure.
    pub(crate) fn accept_error(&self) {
        bump(&self.accept_errors);
    }

    /// Counts a reload: applied (`ok`) or refused.
    pub fn reloaded(&self, ok: bool) {
        if ok {
            bump(&self.reloads_ok);
            *self.last_reload.lock() = SystemTime::now();
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
        let rules: Vec<Arc<RuleStats>> = self.rules.lock().clone();
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
                        let probed = health.as_ref().is_some_and(|h| h.probed);
                        let probe_us = health
                            .as_ref()
                            .and_then(|h| h.probe)
                            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
                        let admin = health.as_ref().map_or("ready", |h| h.admin.as_str());
                        let weight = health.as_ref().map(|h| h.weight);
                        let (member, expanded_from) = match health {
                            Some(h) => (Some(h.label), h.parent),
                            None => (None, None),
                        };
                        BackendValues {
                            addr: b.addr,
                            member,
                            healthy,
                            probed,
                            probe_us,
                            admin,
                            weight,
                            expanded_from,
                            active: get(&b.active),
                            opened: get(&b.opened),
                            from_client: b.seen_from_client.fetch_max(f, Ordering::Relaxed).max(f),
                            to_client: b.seen_to_client.fetch_max(t, Ordering::Relaxed).max(t),
                        }
                    })
                    .collect();
                RuleValues {
                    name: r.name().to_string(),
                    algorithm: pool
                        .as_ref()
                        .map_or_else(|| "roundrobin".to_string(), |p| p.algorithm().to_string()),
                    proto: r.proto,
                    counters: r.counters.values(rule_ended, from, to),
                    backends,
                    tls: r.tls(),
                }
            })
            .collect();
        for c in &conns {
            let (f, t) = c.bytes();
            all_from = all_from.saturating_add(f);
            all_to = all_to.saturating_add(t);
        }
        let (started, started_at) = *self.started.lock();
        Snapshot {
            taken_at: SystemTime::now(),
            started_at,
            uptime: started.elapsed(),
            last_reload: *self.last_reload.lock(),
            reloads_ok: get(&self.reloads_ok),
            reloads_failed: get(&self.reloads_failed),
            accept_errors: get(&self.accept_errors),
            totals: self.process.values(process_ended, all_from, all_to),
            rules: rule_values,
            descriptors: open_descriptors(),
            descriptor_limit: descriptor_limit(),
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

    /// The serving rules, in the order they started (for the control
    /// socket's operator requests, which find rules by name).
    pub(crate) fn rules(&self) -> Vec<Arc<RuleStats>> {
        self.rules.lock().clone()
    }

    /// How many live connections `which` accepts.
    pub(crate) fn connections_where(&self, which: impl Fn(&super::Conn) -> bool) -> usize {
        self.live.count(which)
    }

    /// Asks the live connections `which` accepts to close (`oi close`):
    /// how many were asked, and how many could not be (UDP flows).
    pub(crate) fn close(&self, which: impl Fn(&super::Conn) -> bool) -> (usize, usize) {
        self.live.close(which)
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
    /// The soft NOFILE limit: what `descriptors` may reach before accept(2)
    /// fails with EMFILE (alerts compare the two).
    pub descriptor_limit: Option<u64>,
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

/// The soft open-file limit, if there is one.
fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Entries of /proc/self/fd, less the one used to read it.
fn open_descriptors() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count();
    u64::try_from(n.saturating_sub(1)).ok()
}
