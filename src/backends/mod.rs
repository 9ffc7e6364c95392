//! A rule's backends as a pool: which one a new connection goes to, which
//! ones count as down, and where a connection whose backend failed goes next.
//!
//! - `choose.rs`: the four algorithms (smooth weighted round robin, least
//!   connections, weighted random, client-address hash);
//! - `affinity.rs`: client → backend memory with a TTL and an LRU bound;
//! - `dns.rs`: the thread that looks backend names up again.
//!
//! Health is passive, as in rinetd-uv: `health_threshold` consecutive connect
//! failures mark a member down for `recovery_timeout`; then it is tried again
//! (one more failure sends it back down). When every member is down, all of
//! them are eligible again (fail open): refusing every client is never
//! better than trying.
//!
//! Active health checks (`check-interval`, off by default) add probes:
//! `health.rs` holds what a probe result does, `crate::backends::probe` runs them.
//!
//! A rule with one backend (almost every rinetd.conf rule) takes a path with
//! no lock and no allocation: the pool is only consulted to count health.

pub(crate) mod admin;
mod affinity;
mod carry;
mod choose;
pub(crate) mod connect;
mod dns;
mod health;
pub(crate) mod probe;

#[cfg(test)]
pub(crate) use dns::Lookup;
pub(crate) use dns::{OnChange, Refresher};
pub(crate) use health::{reply, Change, Check, Reply};

use affinity::Affinity;
use arc_swap::ArcSwap;
use oi_config::{Algorithm, Balance, Host, IpFilter, Proto, ResolvedRule, UnixAddr};
use parking_lot::Mutex;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Consecutive connect failures after which a backend name is looked up
/// again at once, whatever its refresh interval (as rinetd-uv).
pub(crate) const FAILURES_BEFORE_LOOKUP: u32 = 3;

/// A rule's backends and how to choose among them.
pub(crate) struct BackendPool {
    /// The algorithm and health settings (`load_balancing:`).
    balance: Balance,
    /// The configured backends in file order; each has one member, or one
    /// per address when its name is expanded.
    groups: Vec<Group>,
    /// Every group's members, flattened in order: what a connection chooses
    /// from. Replaced when a refresh changes an expanded group.
    members: ArcSwap<Vec<Arc<Member>>>,
    /// Serialises round robin's update of the members' current weights.
    rotation: Mutex<()>,
    /// Where least-connections starts looking among equals, so ties rotate.
    tie: AtomicUsize,
    /// State of the generator behind `random`.
    seed: AtomicU64,
    /// Which backend each recent client used (`affinity_ttl` > 0 only).
    affinity: Option<Mutex<Affinity>>,
    /// Where to ask for a lookup after repeated failures; set once the pool
    /// is watched by a [`Refresher`].
    refresher: OnceLock<dns::Poke>,
    /// The active health check (`check-interval` set, TCP or unix backends);
    /// `None`: passive health only, as rinetd-uv.
    check: Option<Arc<Check>>,
    /// Set once the pool is handed to the prober, so the `bind:` entries
    /// sharing it hand it over once.
    probed: AtomicBool,
    /// Set when a reload replaced or removed the pool: connections that
    /// started before may still use it, but its probes stop (the pool that
    /// replaced it probes the members it kept).
    retired: AtomicBool,
    /// Bumped whenever the member list changes, so the prober knows when to
    /// look for new members.
    generation: AtomicU64,
}

/// One configured backend: what a DNS refresh needs to redo its members.
pub(crate) struct Group {
    /// The name to look up again; `None` for a literal address.
    name: Option<String>,
    /// The port every address gets.
    port: u16,
    /// How often the name is looked up again; `None` = never.
    refresh: Option<Duration>,
    /// Whether each address is a member of its own, and which addresses count.
    expand: Option<IpFilter>,
    /// Share of new connections of each member.
    weight: u32,
    /// Source address for connections to it.
    src: Option<IpAddr>,
    /// Its name in messages: `name:` or `host:port`.
    label: String,
    /// The unix socket it connects to, for a `unix:` backend (no addresses then).
    unix: Option<UnixAddr>,
    /// Its members now.
    members: Mutex<Vec<Arc<Member>>>,
}

/// One member of the pool: an address list tried in order (one address
/// when expanded) with its health.
pub(crate) struct Member {
    /// Its name in messages (`web.example.com:80`, `web.example.com:80[1]`).
    label: String,
    /// Which member this is across reloads: the group's label and, when
    /// expanded, the address.
    key: String,
    /// Addresses to try in order; a refresh of a name that is not expanded replaces them.
    addrs: ArcSwap<Vec<SocketAddr>>,
    /// Share of new connections (1 to 100).
    weight: u32,
    /// Source address to bind before connecting.
    src: Option<IpAddr>,
    /// The unix socket to connect to instead of `addrs` (a `unix:` backend).
    unix: Option<UnixAddr>,
    /// Health and load; kept by a reload that keeps the member.
    state: Arc<MemberState>,
    /// Smooth weighted round robin's running weight (under `rotation`).
    current: AtomicI64,
    /// Which group it belongs to.
    group: usize,
}

/// What a pool knows about a member beyond its configuration.
pub(crate) struct MemberState {
    /// Consecutive connect failures.
    failures: AtomicU32,
    /// Until when it is skipped, in ms since [`epoch`]; 0 = up.
    down_until: AtomicU64,
    /// Whether it was marked down (for the "back up" message).
    was_down: AtomicBool,
    /// Connections and associations using it now (least connections).
    active: AtomicUsize,
    /// Failed probes in a row.
    probe_fails: AtomicU32,
    /// Good probes in a row since the last failure, probe or client connect.
    probe_oks: AtomicU32,
    /// The last good probe's round trip in µs; [`health::NO_PROBE`] when none.
    probe_us: AtomicU64,
    /// A probe is in flight (at most one per member).
    probing: AtomicBool,
    /// The operator's [`admin::AdminState`], stored (`oi backend`).
    admin: AtomicU8,
    /// The operator's weight; [`admin::FILE_WEIGHT`]: the file's.
    weight: AtomicU32,
    /// Operator changes so far: a disable's grace closes connections only
    /// if no change came after it.
    changes: AtomicU32,
}

impl Default for MemberState {
    fn default() -> Self {
        MemberState {
            failures: AtomicU32::new(0),
            down_until: AtomicU64::new(0),
            was_down: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            probe_fails: AtomicU32::new(0),
            probe_oks: AtomicU32::new(0),
            probe_us: AtomicU64::new(health::NO_PROBE),
            probing: AtomicBool::new(false),
            admin: AtomicU8::new(0),
            weight: AtomicU32::new(admin::FILE_WEIGHT),
            changes: AtomicU32::new(0),
        }
    }
}

/// The instant health times are counted from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds since [`epoch`], at least 1 (0 means "up").
fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

impl Member {
    /// Its name in messages.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The addresses to try, in order.
    pub(crate) fn addrs(&self) -> arc_swap::Guard<Arc<Vec<SocketAddr>>> {
        self.addrs.load()
    }

    /// The source address to bind, if any.
    pub(crate) fn src(&self) -> Option<IpAddr> {
        self.src
    }

    /// The unix socket it connects to, for a `unix:` backend.
    pub(crate) fn unix(&self) -> Option<&UnixAddr> {
        self.unix.as_ref()
    }

    /// Whether it may be chosen now (up, or its recovery time has passed).
    fn eligible(&self, now: u64) -> bool {
        let until = self.state.down_until.load(Ordering::Relaxed);
        until == 0 || until <= now
    }

    /// Connections using it now.
    fn active(&self) -> usize {
        self.state.active.load(Ordering::Relaxed)
    }

    /// Its health, which probes update (see `health.rs`).
    pub(crate) fn state(&self) -> &MemberState {
        &self.state
    }
}

/// One member as the status file shows it.
pub(crate) struct MemberHealth {
    /// Its name (`name:`, `host:port`, or `host:port[i]` when expanded).
    pub(crate) label: String,
    /// Whether it is up (or its recovery time has passed).
    pub(crate) healthy: bool,
    /// The name it was expanded from, for members made by
    /// `dns-multi-ip-expand` (rinetd-uv's implicit backends).
    pub(crate) parent: Option<String>,
    /// Whether the pool probes it (`check-interval`).
    pub(crate) probed: bool,
    /// The last good probe's round trip, if probed and the last probe passed.
    pub(crate) probe: Option<Duration>,
    /// The operator's state (`oi backend`).
    pub(crate) admin: admin::AdminState,
    /// The weight choices use (the operator's, else the file's).
    pub(crate) weight: u32,
}

/// A member chosen for one connection; counts the connection as using it
/// until dropped.
pub(crate) struct Lease {
    /// The member.
    member: Arc<Member>,
}

impl Lease {
    /// Takes a place on `member`.
    fn new(member: Arc<Member>) -> Self {
        member.state.active.fetch_add(1, Ordering::Relaxed);
        Lease { member }
    }

    /// The member leased.
    pub(crate) fn member(&self) -> &Member {
        &self.member
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.member.state.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl BackendPool {
    /// The pool of `rule`'s backends, every member up.
    pub(crate) fn new(rule: &ResolvedRule) -> Self {
        let expand = rule.expansion();
        let groups: Vec<Group> = rule
            .pool()
            .enumerate()
            .map(|(i, (backend, b))| {
                let endpoint = &backend.endpoint;
                let name = match &endpoint.host {
                    Host::Name(n) => Some(n.to_string()),
                    // Nothing to look up again: an address, or a unix socket.
                    Host::Ip(_) | Host::Unix(_) => None,
                };
                let port = b.addrs.first().map_or(0, SocketAddr::port);
                let label = backend
                    .name
                    .clone()
                    .unwrap_or_else(|| match endpoint.unix() {
                        Some(unix) => unix.to_string(),
                        None => format!("{}:{port}", endpoint.host_text),
                    });
                let group = Group {
                    refresh: name.as_ref().and_then(|_| rule.dns_refresh(backend)),
                    expand: name.as_ref().and(expand),
                    name,
                    port,
                    weight: backend.weight.max(1),
                    src: b.src,
                    label,
                    unix: endpoint.unix().cloned(),
                    members: Mutex::new(Vec::new()),
                };
                let members = group.members_for(i, &b.addrs, &[]);
                *group.members.lock() = members;
                group
            })
            .collect();
        let affinity = (!rule.rule.balance.affinity_ttl.is_zero()).then(|| {
            Mutex::new(Affinity::new(
                rule.rule.balance.affinity_ttl,
                rule.rule.balance.affinity_max_entries,
            ))
        });
        let pool = BackendPool {
            check: check_of(rule),
            probed: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            balance: rule.rule.balance.clone(),
            groups,
            members: ArcSwap::from_pointee(Vec::new()),
            rotation: Mutex::new(()),
            tie: AtomicUsize::new(0),
            seed: AtomicU64::new(seed()),
            affinity,
            refresher: OnceLock::new(),
        };
        pool.publish();
        pool
    }

    /// Takes over the health and load of `old`'s members that this pool
    /// has too (same backend, same address when expanded): what a reload
    /// that keeps a backend keeps. A reload that removes the health check
    /// ends a probe's "down" (nothing would end it any more): the member is
    /// tried again, as after a passive recovery time.
    pub(crate) fn keep_state_of(&self, old: &BackendPool) {
        old.retire();
        let old_members = old.members.load();
        for group in &self.groups {
            let mut members = group.members.lock();
            for m in members.iter_mut() {
                if let Some(o) = old_members.iter().find(|o| o.key == m.key) {
                    if self.check.is_none() {
                        o.state.forget_probes(now_ms());
                    }
                    *m = Arc::new(Member {
                        label: m.label.clone(),
                        key: m.key.clone(),
                        addrs: ArcSwap::new(m.addrs.load_full()),
                        weight: m.weight,
                        src: m.src,
                        unix: m.unix.clone(),
                        state: o.state.clone(),
                        current: AtomicI64::new(0),
                        group: m.group,
                    });
                }
            }
        }
        self.publish();
    }

    /// A place on the member that has `addr` among its addresses, for a
    /// connection a previous oi handed over (`oi upgrade`): it counts on
    /// that member's load as if it had been chosen here.
    pub(crate) fn lease_of(&self, addr: SocketAddr) -> Option<Lease> {
        let members = self.members.load();
        let m = members.iter().find(|m| m.addrs.load().contains(&addr))?;
        Some(Lease::new(m.clone()))
    }

    /// Every member's addresses, in order: the backends the statistics list.
    pub(crate) fn addrs(&self) -> Vec<SocketAddr> {
        let mut all = Vec::new();
        for m in self.members.load().iter() {
            for a in m.addrs.load().iter() {
                if !all.contains(a) {
                    all.push(*a);
                }
            }
        }
        all
    }

    /// What the status file says of the member that has `addr`.
    pub(crate) fn health_of(&self, addr: SocketAddr) -> Option<MemberHealth> {
        let now = now_ms();
        self.members
            .load()
            .iter()
            .find(|m| m.addrs.load().contains(&addr))
            .map(|m| {
                let group = self.groups.get(m.group);
                let expanded = group.is_some_and(|g| g.expand.is_some()) && m.key != m.label;
                MemberHealth {
                    label: m.label.clone(),
                    healthy: m.eligible(now),
                    parent: group.and_then(|g| g.name.clone()).filter(|_| expanded),
                    probed: self.check.is_some(),
                    probe: self.check.as_ref().and_then(|_| m.state.last_probe()),
                    admin: m.state.admin(),
                    weight: m.weight(),
                }
            })
    }

    /// The active health check, if the rule has one.
    pub(crate) fn check(&self) -> Option<&Arc<Check>> {
        self.check.as_ref()
    }

    /// Whether this is the first call: the prober takes a pool once.
    pub(crate) fn start_probing(&self) -> bool {
        !self.probed.swap(true, Ordering::Relaxed)
    }

    /// Stops the pool's probes: a reload replaced or removed it.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Whether a reload replaced or removed the pool.
    pub(crate) fn retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    /// How many times the member list has changed.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// How the pool chooses.
    pub(crate) fn algorithm(&self) -> Algorithm {
        self.balance.algorithm
    }

    /// The members, in order.
    pub(crate) fn members(&self) -> Arc<Vec<Arc<Member>>> {
        self.members.load_full()
    }

    /// Rebuilds the flattened member list from the groups.
    fn publish(&self) {
        let all: Vec<Arc<Member>> = self
            .groups
            .iter()
            .flat_map(|g| g.members.lock().clone())
            .collect();
        self.members.store(Arc::new(all));
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// The members `client`'s connection tries, best first: the one the
    /// algorithm (or affinity) picks, then every other eligible member in
    /// order, so one dead backend never costs a client its connection.
    pub(crate) fn attempts(&self, client: IpAddr) -> Attempts {
        let members = self.members.load_full();
        let now = now_ms();
        // Fail open among the members in service only (see `admin.rs`).
        let all_down = !members.iter().any(|m| m.in_service() && m.eligible(now));
        let first = if members.len() <= 1 {
            0
        } else {
            self.pick(&members, client, now, all_down)
        };
        Attempts {
            members,
            first,
            offset: 0,
            all_down,
            now,
        }
    }

    /// The index of the member a new connection from `client` goes to.
    fn pick(&self, members: &[Arc<Member>], client: IpAddr, now: u64, all_down: bool) -> usize {
        let ok = |m: &Member| m.in_service() && (all_down || m.eligible(now));
        if let Some(affinity) = &self.affinity {
            if let Some(i) = affinity.lock().get(client, members, &ok) {
                return i;
            }
        }
        let i = match self.balance.algorithm {
            Algorithm::RoundRobin => {
                let _turn = self.rotation.lock();
                choose::round_robin(members, &ok)
            }
            Algorithm::LeastConn => {
                let start = self.tie.fetch_add(1, Ordering::Relaxed);
                choose::least_conn(members, &ok, start)
            }
            Algorithm::Random => choose::random(members, &ok, next_random(&self.seed)),
            Algorithm::IpHash => choose::ip_hash(members, &ok, client),
        };
        if let Some(affinity) = &self.affinity {
            if let Some(m) = members.get(i) {
                affinity.lock().put(client, m);
            }
        }
        i
    }

    /// Records that `member` accepted a connection: its failures are forgotten.
    pub(crate) fn succeeded(&self, member: &Member) {
        let s = &member.state;
        if s.failures.load(Ordering::Relaxed) != 0 {
            s.failures.store(0, Ordering::Relaxed);
        }
        let until = s.down_until.load(Ordering::Relaxed);
        // Down by its probes: only probes bring it back (see `health.rs`).
        if until != 0 && until != health::PROBE_DOWN {
            s.down_until.store(0, Ordering::Relaxed);
            if s.was_down.swap(false, Ordering::Relaxed) {
                log::info!("backend {} is up again", member.label);
            }
        }
    }

    /// Records that a connect to `member` failed: past `health_threshold`
    /// consecutive failures it is down for `recovery_timeout`; at
    /// [`FAILURES_BEFORE_LOOKUP`] its name is looked up again.
    pub(crate) fn failed(&self, member: &Member) {
        let s = &member.state;
        let failures = s.failures.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        s.probe_oks.store(0, Ordering::Relaxed);
        let probe_down = s.down_until.load(Ordering::Relaxed) == health::PROBE_DOWN;
        if failures >= self.balance.health_threshold && !probe_down {
            let recovery =
                u64::try_from(self.balance.recovery_timeout.as_millis()).unwrap_or(u64::MAX);
            s.down_until
                .store(now_ms().saturating_add(recovery), Ordering::Relaxed);
            if !s.was_down.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "backend {} is down after {failures} failed connect{}; trying it again in {}s",
                    member.label,
                    if failures == 1 { "" } else { "s" },
                    self.balance.recovery_timeout.as_secs()
                );
            }
        }
        if failures == FAILURES_BEFORE_LOOKUP {
            if let (Some(r), Some(g)) = (self.refresher.get(), self.groups.get(member.group)) {
                if g.name.is_some() {
                    r.lookup_soon(member.group);
                }
            }
        }
    }
}

impl Group {
    /// Members for `addrs`, reusing `old` members whose key matches.
    fn members_for(
        &self,
        index: usize,
        addrs: &[SocketAddr],
        old: &[Arc<Member>],
    ) -> Vec<Arc<Member>> {
        let member = |label: String, key: String, addrs: Vec<SocketAddr>| {
            if let Some(o) = old.iter().find(|o| o.key == key) {
                if **o.addrs.load() != addrs {
                    o.addrs.store(Arc::new(addrs));
                }
                return o.clone();
            }
            Arc::new(Member {
                label,
                key,
                addrs: ArcSwap::from_pointee(addrs),
                weight: self.weight,
                src: self.src,
                unix: self.unix.clone(),
                state: Arc::new(MemberState::default()),
                current: AtomicI64::new(0),
                group: index,
            })
        };
        let kept: Vec<SocketAddr> = match self.expand {
            Some(filter) => addrs.iter().copied().filter(|a| keeps(filter, a)).collect(),
            None => Vec::new(),
        };
        if self.expand.is_none() || kept.is_empty() {
            return vec![member(
                self.label.clone(),
                self.label.clone(),
                addrs.to_vec(),
            )];
        }
        kept.iter()
            .enumerate()
            .map(|(i, a)| {
                member(
                    format!("{}[{i}]", self.label),
                    format!("{}[{a}]", self.label),
                    vec![*a],
                )
            })
            .collect()
    }
}

/// `rule`'s active health check: set when it has a `check-interval` and its
/// backends are streams (a TCP connect says nothing of a UDP service).
fn check_of(rule: &ResolvedRule) -> Option<Arc<Check>> {
    if rule
        .rule
        .backends
        .iter()
        .any(|b| b.endpoint.proto == Proto::Udp)
    {
        return None;
    }
    let o = rule.settings();
    let bytes = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| oi_config::settings::unescape(t).ok())
            .unwrap_or_default()
    };
    Some(Arc::new(Check {
        interval: o.check_interval?,
        timeout: o.check_timeout.unwrap_or(Duration::from_secs(2)),
        rise: o.check_rise.unwrap_or(2).max(1),
        fall: o.check_fall.unwrap_or(3).max(1),
        send: bytes(&o.check_send),
        expect: bytes(&o.check_expect),
    }))
}

/// Whether `filter` keeps `addr` when a name is expanded.
fn keeps(filter: IpFilter, addr: &SocketAddr) -> bool {
    match filter {
        IpFilter::Ipv4 => addr.is_ipv4(),
        IpFilter::Ipv6 => addr.is_ipv6(),
        IpFilter::Any => true,
    }
}

/// The members one connection tries, best first; see [`BackendPool::attempts`].
pub(crate) struct Attempts {
    /// The member list as the connection found it.
    members: Arc<Vec<Arc<Member>>>,
    /// The chosen member's index.
    first: usize,
    /// How far past `first` the next attempt looks.
    offset: usize,
    /// Whether every member was down (then all are tried).
    all_down: bool,
    /// When the attempts began, in ms since [`epoch`].
    now: u64,
}

impl Iterator for Attempts {
    type Item = Lease;

    /// The next member to try, leased; `None` once every eligible one was.
    fn next(&mut self) -> Option<Lease> {
        let n = self.members.len();
        while self.offset < n {
            let i = (self.first + self.offset) % n;
            self.offset += 1;
            let m = &self.members[i];
            // The first choice is tried even when down (it was picked with
            // all members down, or by a single-member rule); never one an
            // operator took out of service.
            if m.in_service() && (self.offset == 1 || self.all_down || m.eligible(self.now)) {
                return Some(Lease::new(m.clone()));
            }
        }
        None
    }
}

/// A seed for the random generator that differs between processes.
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ms());
    h.finish() | 1
}

/// The next value of a xorshift64* generator kept in `state`.
fn next_random(state: &AtomicU64) -> u64 {
    let mut x = state.load(Ordering::Relaxed);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    state.store(x, Ordering::Relaxed);
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[cfg(test)]
mod tests;
