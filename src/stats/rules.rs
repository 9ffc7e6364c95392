//! One rule's counters ([`RuleStats`]) and its backends' ([`BackendStats`]),
//! and their snapshots.

mod live;

pub(crate) use live::{Conn, Live, Registered};
pub use live::{ConnInfo, ConnState};

use super::counters::{bump, CounterCells, CounterValues, Counters};
use super::{ConnKind, ConnectFailure};
use crate::backends::BackendPool;
use oi_config::Proto;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counters of one backend address of a rule (a rule lists several when its
/// name resolves to several; later, when it balances across several).
pub(crate) struct BackendStats {
    /// The address, as the status file and metrics name the backend.
    pub(super) addr: SocketAddr,
    /// Connections to it open now.
    pub(super) active: AtomicU64,
    /// Connections made to it.
    pub(super) opened: AtomicU64,
    /// Bytes sent to it, of ended connections.
    pub(super) ended_from_client: AtomicU64,
    /// Bytes received from it, of ended connections.
    pub(super) ended_to_client: AtomicU64,
    /// Highest from-client value reported (see the module docs).
    pub(super) seen_from_client: AtomicU64,
    /// Highest to-client value reported.
    pub(super) seen_to_client: AtomicU64,
}

impl BackendStats {
    pub(super) fn new(addr: SocketAddr) -> Arc<Self> {
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
    /// `health_threshold` failed connects, or its recovery time has passed;
    /// active: not down by `check-fall` failed probes).
    pub healthy: bool,
    /// Whether its pool probes it (`check-interval`).
    pub probed: bool,
    /// The last good probe's round trip in µs; `None` before one or after a
    /// failed probe (and when not probed).
    pub probe_us: Option<u64>,
    /// The operator's state of its member: `ready`, `drain` or `disabled`
    /// (`oi backend`; `ready` when no pool lists it).
    pub admin: &'static str,
    /// The weight its member is chosen by now (the operator's, else the
    /// file's); `None` when no pool lists it.
    pub weight: Option<u32>,
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
    /// How the rule is named in every output: `bindhost:port/proto`, as
    /// configured, and `[sni=NAME]` after it for a rule routed by server
    /// name. A lock: a reload can change the server name of the rule that
    /// binds a shared listener, whose counters these stay ([`RuleStats::rename`]).
    pub(super) name: parking_lot::Mutex<Arc<str>>,
    /// The listening side's protocol.
    pub(super) proto: Proto,
    /// The rule's own counters.
    pub(super) counters: Counters,
    /// The process's counters, which every rule adds to as well.
    pub(super) process: Arc<Counters>,
    /// Backend addresses and their counters; replaced (keeping the counters
    /// of addresses still listed) when a reload changes them. Read once per
    /// connection, lock-free.
    pub(super) backends: arc_swap::ArcSwap<Vec<Arc<BackendStats>>>,
    /// The process's live list, which the rule's connections join and leave.
    pub(super) live: Arc<Live>,
    /// The rule's backend pool, for health and names in snapshots; set by
    /// the listener at start and on each reload.
    pub(super) pool: arc_swap::ArcSwapOption<BackendPool>,
    /// The rule's bandwidth buckets (`rule-rate`, `client-rate`): here
    /// because this is what a listener keeps across a reload and what every
    /// connection of the rule already holds, so a reload keeps them.
    pub(crate) rates: crate::stats::rate::RuleRates,
    /// The rule's TLS as the views show it (ends, certificates), set with
    /// its pool each time the route is built; `None` without TLS.
    pub(super) tls: arc_swap::ArcSwapOption<super::TlsShown>,
}

impl RuleStats {
    /// Sets the pool whose health snapshots report.
    pub(crate) fn set_pool(&self, pool: Arc<BackendPool>) {
        self.pool.store(Some(pool));
    }

    /// The rule's backend pool, if set.
    pub(crate) fn pool(&self) -> Option<Arc<BackendPool>> {
        self.pool.load_full()
    }

    /// The rule's name in outputs.
    pub(crate) fn name(&self) -> Arc<str> {
        self.name.lock().clone()
    }

    /// Names the rule `name` from now on (see [`RuleStats::name`]'s field).
    pub(crate) fn rename(&self, name: &str) {
        let mut current = self.name.lock();
        if **current != *name {
            *current = name.into();
        }
    }

    /// Counts a client refused before it was forwarded: by the ACLs
    /// (`denied`, `not-allowed`) or by a connection limit (`limit-reached`);
    /// `event` is the refusal logged.
    pub(crate) fn refused(&self, event: crate::logfile::Event) {
        use crate::logfile::Event;
        self.count(|c| match event {
            Event::Denied => &c.denied,
            Event::LimitReached => &c.limit_reached,
            _ => &c.not_allowed,
        });
    }

    /// Adds one to a counter of the list (see [`super::counters`]) in the
    /// rule's counters and the process's; returns the process's new total.
    pub(crate) fn count(&self, which: impl Fn(&CounterCells) -> &AtomicU64) -> u64 {
        bump(which(&self.counters.cells));
        which(&self.process.cells)
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1)
    }

    /// Adds `n` to a counter of the list in the rule's counters and the
    /// process's (saturating: a counter, not a reason to wrap).
    pub(crate) fn count_by(&self, which: impl Fn(&CounterCells) -> &AtomicU64, n: u64) {
        if n == 0 {
            return;
        }
        for cell in [which(&self.counters.cells), which(&self.process.cells)] {
            let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_add(n))
            });
        }
    }

    /// Counts a datagram an `accept-proxy` `/udp` listener dropped; returns
    /// the process's total so far, for the rate-limited warning.
    pub(crate) fn udp_proxy_dropped(&self) -> u64 {
        self.count(|c| &c.udp_proxy_dropped)
    }

    /// Counts a TLS handshake completed on `side`, `resumed` or in full.
    pub(crate) fn tls_done(&self, side: super::TlsSide, resumed: bool) {
        self.count(super::tls::done(side, resumed));
    }

    /// Counts a TLS handshake on `side` that failed, and why.
    pub(crate) fn tls_failed(&self, side: super::TlsSide, why: super::TlsFailure) {
        self.count(super::tls::failed(side, why));
    }

    /// Sets the rule's TLS as the views show it (`None`: it has none).
    pub(crate) fn set_tls(&self, shown: Option<Arc<super::TlsShown>>) {
        self.tls.store(shown);
    }

    /// The rule's TLS as shown, if it has any.
    pub(crate) fn tls(&self) -> Option<Arc<super::TlsShown>> {
        self.tls.load_full()
    }

    /// Counts a backend connect that failed.
    pub(crate) fn connect_failed(&self, why: ConnectFailure) {
        self.count(|c| why.cell(c));
    }

    /// Counts a UDP association evicted to stay under the cap.
    pub(crate) fn udp_evicted(&self) {
        self.count(|c| &c.udp_evicted);
    }

    /// Registers a connection (or association) of this rule from `client`;
    /// it is counted and listed until the returned guard drops. Takes the
    /// rule's `Arc` for the entry: a TCP connection hands over its own, one
    /// atomic add and subtract fewer on a count every thread writes;
    /// callers that keep theirs clone it.
    pub(crate) fn register(
        self: Arc<Self>,
        kind: ConnKind,
        client: impl Into<crate::net::peer::Peer>,
    ) -> Registered {
        self.counters.opened(kind);
        self.process.opened(kind);
        Live::register(self, kind, client.into(), Duration::ZERO)
    }

    /// Registers a connection on a listener rules share by server name,
    /// before its ClientHello has chosen the rule: listed and counted as
    /// open on this rule (the one that binds the listener) and the
    /// process, not yet as opened. [`Registered::route_to`] counts it
    /// opened on the rule it is routed to; one closed unrouted (or refused
    /// by the routed rule) is counted opened nowhere.
    pub(crate) fn register_unrouted(
        self: Arc<Self>,
        kind: ConnKind,
        client: impl Into<crate::net::peer::Peer>,
    ) -> Registered {
        self.counters.resumed(kind);
        self.process.resumed(kind);
        Live::register(self, kind, client.into(), Duration::ZERO)
    }

    /// Registers a connection (or association) a previous oi handed over:
    /// listed and counted as active, not as opened again (the counters the
    /// previous oi handed over counted its opening), `age` old already.
    pub(crate) fn register_resumed(
        self: &Arc<Self>,
        kind: ConnKind,
        client: impl Into<crate::net::peer::Peer>,
        age: Duration,
    ) -> Registered {
        self.counters.resumed(kind);
        self.process.resumed(kind);
        Live::register(self.clone(), kind, client.into(), age)
    }

    /// The counters of backend `addr`, if the rule lists it.
    pub(super) fn backend(&self, addr: SocketAddr) -> Option<Arc<BackendStats>> {
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
    /// Its TLS (which ends, the certificates it presents); `None` without.
    pub tls: Option<Arc<super::TlsShown>>,
}
