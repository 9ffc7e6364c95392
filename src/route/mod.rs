//! What a new connection needs from its rule, read once per connection: where
//! to forward, the ACLs, the options, and the names its log lines print.
//!
//! A listener holds its `Route` behind an `ArcSwap`; a reload swaps in a new
//! one, and each connection keeps the route it started with, so its last log
//! line still names its own rule.

pub(crate) mod admit;
pub(crate) mod edge;
pub(crate) mod limits;
pub(crate) mod park;
pub(crate) mod shared;

use crate::backends::{BackendPool, Lease};
use crate::logfile::{Event, LogEvent, RuleNames};
use crate::stats::{Registered, RuleStats};
use oi_config::acl::{self, Verdict};
use oi_config::{
    AclRules, BindAddr, Pattern, Proto, ResolvedConfig, ResolvedRule, RuleOptions, SpliceMode,
    UnixAddr, DEFAULT_MAX_ASSOC, DEFAULT_UDP_TIMEOUT,
};
use oi_wire::client_hello::{best_match, NamePattern};
use oi_wire::proxy::ProxyVersion;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Everything a new connection on one listener needs; replaced whole on reload.
pub struct Route {
    /// The address the rule binds (or its unix socket), for messages.
    pub(crate) bind: BindAddr,
    /// The listening side's protocol.
    pub(crate) bind_proto: Proto,
    /// The rule's backends, and how a connection chooses among them.
    pub(crate) pool: Arc<BackendPool>,
    /// The first backend's unix socket when every backend is one: such a
    /// rule's connections count as unix, and messages name the socket. The
    /// pool connects to unix members like any other.
    pub(crate) unix_backend: Option<UnixAddr>,
    /// The backend side's protocol (TCP→UDP and UDP→TCP rules differ from `bind_proto`).
    pub(crate) backend_proto: Proto,
    /// The rule's settings, every layer applied once (command line, the
    /// rule's options, the globals, the defaults: `ResolvedRule::settings`).
    /// Code that acts on an option reads it here, never the raw options.
    pub(crate) settings: RuleOptions,
    /// allow/deny lines that belong to this rule.
    pub(crate) acl: AclRules,
    /// The configuration's global allow/deny patterns, shared by every route.
    pub(crate) global_acl: Arc<AclRules>,
    /// The rule's names as the log file prints them.
    pub(crate) names: Arc<RuleNames>,
    /// Write a PROXY header of this version to the backend before any client
    /// byte (`proxy=v1|v2`); towards UDP, and on UDP associations, always version 2.
    pub(crate) send_proxy: Option<ProxyVersion>,
    /// Read a PROXY header from each client before anything else
    /// (`accept-proxy`; on `/udp` listeners, from each datagram); the address
    /// it carries is the client's.
    pub(crate) accept_proxy: bool,
    /// Sources allowed to send that header: the global `trust-proxy`
    /// patterns followed by the rule's. Empty trusts no one.
    pub(crate) trust_proxy: Vec<Pattern>,
    /// Pending connections each of the listener's sockets queues (`listen-backlog`).
    pub(crate) listen_backlog: i32,
    /// Most TCP connections open at once on this rule (`maxconn=N`).
    pub(crate) maxconn: Option<usize>,
    /// Most TCP connections open at once from one client address on this
    /// rule (`maxconn-per-client=N`).
    pub(crate) maxconn_per_client: Option<usize>,
    /// The bandwidth limits (`rate`, `rate-up`, `rate-down`, `rule-rate`,
    /// `client-rate`), resolved once: `rate-up`/`rate-down` win over `rate`.
    pub(crate) rates: crate::stats::rate::Rates,
    /// The rules sharing this listener by TLS server name (`[sni=...]`);
    /// `None` for a listener of one rule.
    pub(crate) sni: Option<Arc<ServerNames>>,
    /// The counters of this rule, when it is one of the rules in a
    /// listener's [`ServerNames`]: a connection routed to it counts here
    /// (`Registered::route_to`). Set by the listener once the route is
    /// built (the listener's own counters for the rule that binds it, kept
    /// ones across a reload for a rule of the same server name); unset on
    /// a listener's own route, whose counters the listener holds.
    pub(crate) stats: std::sync::OnceLock<Arc<RuleStats>>,
    /// This rule's connection counts when a server name routes to it (its
    /// entry in a listener's [`ServerNames`]), which its `maxconn` and
    /// `maxconn-per-client` are checked against ([`admit`]). A listener's
    /// own counts are its `listen::Running`'s; both are carried across a
    /// reload that keeps the listener ([`Route::keep_counts_of`]).
    pub(crate) limits: Arc<limits::RuleLimits>,
    /// TLS oi ends from clients or begins to the backend (`tls-cert`,
    /// `tls-connect`, ...), its files read when the route was built; `Err`
    /// says why they could not be (a file changed after the reload's check):
    /// such a rule closes its clients rather than forward them in clear.
    pub(crate) tls: Result<Option<Arc<crate::tls::RouteTls>>, Arc<str>>,
    /// The same TLS as the views show it (which ends, the certificates'
    /// expiry), read with it; the listener hands it to the rule's counters.
    pub(crate) tls_shown: Option<Arc<crate::stats::TlsShown>>,
}

/// Where a shared listener's connections go by server name.
pub(crate) struct ServerNames {
    /// Each `[sni=...]` rule's pattern and route, in file order.
    pub(crate) named: Vec<(NamePattern, Arc<Route>)>,
    /// The rule without `sni=`: names no pattern matches, no name, not TLS.
    /// `None`: such connections are closed.
    pub(crate) default: Option<Arc<Route>>,
}

impl ServerNames {
    /// Every rule on the listener with its pattern (`None`: the default),
    /// named ones first, in file order.
    pub(crate) fn rules(&self) -> impl Iterator<Item = (Option<&NamePattern>, &Arc<Route>)> {
        self.named
            .iter()
            .map(|(p, r)| (Some(p), r))
            .chain(self.default.iter().map(|r| (None, r)))
    }

    /// The route of the rule here that is `pattern`'s (`None`: the default)
    /// in another table of the same listener: what a reload keeps.
    fn same_rule(&self, pattern: Option<&NamePattern>) -> Option<&Arc<Route>> {
        match pattern {
            Some(pattern) => self
                .named
                .iter()
                .find(|(p, _)| p == pattern)
                .map(|(_, r)| r),
            None => self.default.as_ref(),
        }
    }

    /// The route for a ClientHello's server name (`None`: none was read),
    /// and whether a rule's pattern chose it (else it is the default).
    pub(crate) fn choose(&self, name: Option<&str>) -> Option<(&Arc<Route>, bool)> {
        let named = name.and_then(|n| best_match(self.named.iter().map(|(p, _)| p), n));
        match named {
            Some(i) => self.named.get(i).map(|(_, r)| (r, true)),
            None => self.default.as_ref().map(|r| (r, false)),
        }
    }
}

impl Route {
    /// The route for `rule` under `global_acl`; with the rules it carries
    /// by server name (`rule.sni`) when it shares its listener. The
    /// listener's route is then `rule`'s (its ACL, limits, backlog), with
    /// the pool of `rule`'s own entry in [`ServerNames`].
    pub fn new(rule: ResolvedRule, global_acl: Arc<AclRules>) -> Self {
        Self::with_files(rule, global_acl, &mut crate::tls::Files::default())
    }

    /// [`Route::new`], with the TLS files of rules `files` has read already.
    fn with_files(
        mut rule: ResolvedRule,
        global_acl: Arc<AclRules>,
        files: &mut crate::tls::Files,
    ) -> Self {
        let carried = std::mem::take(&mut rule.sni);
        if carried.is_empty() && rule.server_name().is_none() {
            return Self::one(rule, global_acl, files);
        }
        let mut names = ServerNames {
            named: Vec::with_capacity(carried.len() + 1),
            default: None,
        };
        let mut own_pool = None;
        for r in std::iter::once(rule.clone()).chain(carried) {
            let pattern = r.server_name().and_then(|p| NamePattern::parse(p).ok());
            let route = Arc::new(Self::one(r, global_acl.clone(), files));
            own_pool.get_or_insert_with(|| route.pool.clone());
            match pattern {
                Some(p) => names.named.push((p, route)),
                None => names.default = Some(route),
            }
        }
        let mut route = Self::one(rule, global_acl, files);
        if let Some(pool) = own_pool {
            route.pool = pool;
        }
        route.sni = Some(Arc::new(names));
        route
    }

    /// The route of one rule, without the rules it carries.
    fn one(rule: ResolvedRule, global_acl: Arc<AclRules>, files: &mut crate::tls::Files) -> Self {
        let settings = rule.settings();
        let pool = Arc::new(BackendPool::new(&rule));
        let listen_backlog = i32::try_from(rule.listen_backlog()).unwrap_or(i32::MAX);
        let send_proxy = settings.proxy.map(|v| match v {
            oi_config::ProxyHeader::V1 => ProxyVersion::V1,
            oi_config::ProxyHeader::V2 => ProxyVersion::V2,
        });
        let accept_proxy = settings.accept_proxy.unwrap_or(false);
        // Global `trust-proxy` patterns first, then the rule's, as allow/deny.
        let trust_proxy: Vec<Pattern> = global_acl
            .trust_proxy
            .iter()
            .chain(rule.rule.acl.trust_proxy.iter())
            .cloned()
            .collect();
        let (maxconn, maxconn_per_client) = (settings.maxconn, settings.maxconn_per_client);
        let all_unix = rule
            .rule
            .backends
            .iter()
            .all(|b| b.endpoint.unix().is_some());
        let unix_backend = rule.rule.connect().unix().filter(|_| all_unix).cloned();
        let backend_proto = rule.rule.connect().proto;
        // Read before privileges drop at start-up; a reload's files were
        // checked (`tls::check`) before the routes were built. Once per
        // rule: the ports of a range share what `files` read.
        let tls_shown = files.shown(&rule, &settings);
        let tls = match files.for_rule(&rule, &settings) {
            Ok(tls) => Ok(tls.map(Arc::new)),
            Err(why) => {
                log::error!("rule {}: TLS: {why}; its clients are closed", rule.bind);
                Err(Arc::from(why))
            }
        };
        let names = Arc::new(RuleNames {
            connect_host: rule.rule.connect().host_text.clone(),
            bind_host: rule.rule.bind.host_text,
            // A unix socket side has no port: 0, as rinetd-uv logs it.
            bind_port: rule.bind.ip().map_or(0, |a| a.port()),
            connect_port: rule.connect.first().map_or(0, |a| a.port()),
        });
        let rates = crate::stats::rate::Rates {
            up: settings.rate_up.or(settings.rate).map(NonZeroU64::get),
            down: settings.rate_down.or(settings.rate).map(NonZeroU64::get),
            rule: settings.rule_rate.map(NonZeroU64::get),
            client: settings.client_rate.map(NonZeroU64::get),
        };
        Route {
            tls,
            tls_shown,
            rates,
            bind: rule.bind,
            bind_proto: rule.rule.bind.proto,
            pool,
            unix_backend,
            backend_proto,
            settings,
            acl: rule.rule.acl,
            global_acl,
            names,
            listen_backlog,
            send_proxy,
            accept_proxy,
            trust_proxy,
            maxconn,
            maxconn_per_client,
            sni: None,
            stats: std::sync::OnceLock::new(),
            limits: Arc::default(),
        }
    }

    /// Gives the rules this listener routes by server name the counts of
    /// the same rules in `old` (this listener's route before a reload): a
    /// rule is the same when its server name pattern is (or both are the
    /// default); and this route and each of those rules the TLS handshakes
    /// in progress (and the session state) of the same rule in `old`.
    /// Called before the route is shared, so connections already open stay
    /// counted against the new limits.
    pub(crate) fn keep_counts_of(&mut self, old: &Route) {
        self.keep_tls_of(old);
        let (Some(new), Some(old)) = (self.sni.as_mut().and_then(Arc::get_mut), &old.sni) else {
            return;
        };
        let routes = new.named.iter_mut().map(|(p, r)| (Some(&*p), r));
        for (pattern, route) in routes.chain(new.default.iter_mut().map(|r| (None, r))) {
            if let (Some(route), Some(was)) = (Arc::get_mut(route), old.same_rule(pattern)) {
                route.limits = was.limits.clone();
                route.keep_tls_of(was);
            }
        }
    }

    /// Takes over the TLS handshakes in progress and the session state of
    /// `old`, the same rule before a reload ([`crate::tls::RouteTls::keep_of`]).
    fn keep_tls_of(&mut self, old: &Route) {
        let (Ok(Some(new)), Ok(Some(was))) = (&mut self.tls, &old.tls) else {
            return;
        };
        if let Some(new) = Arc::get_mut(new) {
            new.keep_of(was);
        }
    }

    /// Hands the health and load of every backend `old` (this listener's
    /// route before a reload) shares with this route to this route's pools:
    /// its own, and each routed rule's whose server name pattern (or
    /// default) the old route had too.
    /// Every old pool is retired (its probes stop), kept or not.
    pub(crate) fn keep_state_of(&self, old: &Route) {
        self.pool.keep_state_of(&old.pool);
        for pool in old.pools() {
            pool.retire();
        }
        let (Some(new), Some(old)) = (&self.sni, &old.sni) else {
            return;
        };
        for (pattern, route) in new.rules() {
            if let Some(was) = old.same_rule(pattern) {
                route.pool.keep_state_of(&was.pool);
            }
        }
    }

    /// The server name pattern this rule serves (`[sni=...]`, normalised),
    /// if it has one on a TCP listener.
    pub(crate) fn server_name(&self) -> Option<&str> {
        (self.bind_proto == Proto::Tcp)
            .then_some(self.settings.sni.as_deref())
            .flatten()
    }

    /// Every pool connections on this listener may use: its own, then the
    /// other rules' routed by server name (for DNS refresh and probes).
    pub(crate) fn pools(&self) -> Vec<Arc<BackendPool>> {
        let mut pools = vec![self.pool.clone()];
        let routed = self
            .sni
            .iter()
            .flat_map(|n| n.rules().map(|(_, r)| &r.pool));
        for pool in routed {
            if !pools.iter().any(|p| Arc::ptr_eq(p, pool)) {
                pools.push(pool.clone());
            }
        }
        pools
    }

    /// The routes of every rule of `cfg`, in order. The `bind:` entries of
    /// one YAML rule (rules with one name) share one pool, as in rinetd-uv:
    /// one backend's health, load and affinity, whichever address the
    /// client came in on.
    pub fn all(cfg: &ResolvedConfig) -> Vec<Route> {
        let global = Arc::new(cfg.config.global_acl.clone());
        let mut by_name: HashMap<&str, Arc<BackendPool>> = HashMap::new();
        let mut files = crate::tls::Files::default();
        cfg.rules
            .iter()
            .map(|r| {
                let mut route = Route::with_files(r.clone(), global.clone(), &mut files);
                if let Some(name) = &r.rule.name {
                    let pool = by_name.entry(name).or_insert_with(|| route.pool.clone());
                    route.pool = pool.clone();
                }
                route
            })
            .collect()
    }

    /// This route, writing a PROXY header of `version` to its backends
    /// (`None`: none). For embedders and tests until the configuration says so.
    pub fn with_send_proxy(mut self, version: Option<ProxyVersion>) -> Self {
        self.send_proxy = version;
        self
    }

    /// This route, reading a PROXY header from every client when `accept`
    /// is set, from sources matching `trust` only.
    pub fn with_accept_proxy(mut self, accept: bool, trust: Vec<Pattern>) -> Self {
        self.accept_proxy = accept;
        self.trust_proxy = trust;
        self
    }

    /// This route, with at most `maxconn` connections open at once and at
    /// most `per_client` from one client address (`None`: no limit).
    pub fn with_limits(mut self, maxconn: Option<usize>, per_client: Option<usize>) -> Self {
        self.maxconn = maxconn;
        self.maxconn_per_client = per_client;
        self
    }

    /// Whether `source` (the real peer, before any header) may send a PROXY header.
    pub(crate) fn trusts_proxy(&self, source: IpAddr) -> bool {
        self.trust_proxy.iter().any(|p| acl::matches(p, source))
    }

    /// Whether the ClientHello picks this listener's rule (`[sni=]` rules
    /// share it, and it forwards TCP→TCP: a TCP→UDP listener's connections
    /// are not read for a name). Such a listener admits nothing at accept:
    /// the rule chosen does ([`admit`]).
    pub(crate) fn routes_by_name(&self) -> bool {
        self.sni.is_some() && self.backend_proto == Proto::Tcp
    }

    /// Whether `client` may use this rule; the refusal is the event to log.
    pub(crate) fn admit(&self, client: IpAddr) -> Result<(), Event> {
        match acl::check(&self.global_acl, &self.acl, client) {
            Verdict::Allowed => Ok(()),
            Verdict::NotAllowed => Err(Event::NotAllowed),
            Verdict::Denied => Err(Event::Denied),
        }
    }

    /// A log line about `client` on this rule, stamped now.
    pub(crate) fn event(
        &self,
        client: impl Into<crate::net::peer::Client>,
        event: Event,
        bytes: Bytes,
    ) -> LogEvent {
        LogEvent {
            time: SystemTime::now(),
            client: client.into(),
            rule: self.names.clone(),
            from_client: bytes.from_client,
            to_client: bytes.to_client,
            event,
            server_name: None,
            tls_subject: None,
            flow: None,
        }
    }

    /// How long to wait for each backend address to accept: the resolved
    /// `connect-timeout` (command line, rule, global), else `default` (the
    /// engine's, `Settings::connect_timeout`). Zero means as long as the
    /// kernel tries, which is bounded here by a day so no deadline can overflow.
    pub fn connect_timeout(&self, default: Duration) -> Duration {
        match self.settings.connect_timeout {
            None => default,
            Some(t) if t.is_zero() => Duration::from_secs(oi_config::MAX_CONNECT_TIMEOUT_SECS),
            Some(t) => t,
        }
    }

    /// Whether this rule's TCP connections splice: the resolved `splice`,
    /// else `default` (the engine's, `Settings::splice`).
    pub(crate) fn splice(&self, default: SpliceMode) -> SpliceMode {
        self.settings.splice.unwrap_or(default)
    }

    /// The mode a unix listening socket's file gets (`mode=`), if any.
    pub(crate) fn socket_mode(&self) -> Option<u32> {
        self.settings.mode
    }

    /// Every backend address the rule has now, in order (for messages and counters).
    pub(crate) fn backend_addrs(&self) -> Vec<SocketAddr> {
        self.pool.addrs()
    }

    /// Whether forwarded TCP sockets get SO_KEEPALIVE (on unless `[keepalive=off]`).
    pub fn keepalive(&self) -> bool {
        self.settings.keepalive != Some(false)
    }

    /// Whether the rule connects from the client's own address (`transparent`).
    pub(crate) fn transparent(&self) -> bool {
        self.settings.transparent == Some(true)
    }

    /// How this rule's connection from `client` (the peer, or the address a
    /// PROXY header carried; `None` for a unix client) dials its backend.
    pub(crate) fn dial(&self, client: Option<SocketAddr>) -> crate::backends::connect::Dial {
        crate::backends::connect::Dial {
            keepalive: self.keepalive(),
            from: client.filter(|_| self.transparent()),
            mptcp: self.settings.mptcp.is_some_and(|m| m.connects()),
            nodelay_later: false,
        }
    }

    /// Records the backend at `addr` of a flow a previous oi handed over
    /// (`oi upgrade`) on its live entry, and gives it a place on that
    /// backend: counted on the member's load as if chosen here. `None`
    /// when the rule no longer lists the address.
    pub(crate) fn handed_lease(&self, live: &Registered, addr: SocketAddr) -> Option<Lease> {
        live.reconnected(addr);
        self.pool.lease_of(addr)
    }

    /// The idle limit of this rule's UDP associations and TCP→UDP connections.
    pub(crate) fn udp_timeout(&self) -> Duration {
        // Always set: the table gives `timeout` a default in both formats.
        self.settings.timeout.unwrap_or(DEFAULT_UDP_TIMEOUT)
    }

    /// The most UDP associations this rule's listener keeps at once (at least one).
    pub(crate) fn max_assoc(&self) -> usize {
        // Always set: the table gives `maxassoc` a default in both formats.
        self.settings.max_assoc.unwrap_or(DEFAULT_MAX_ASSOC).max(1)
    }
}

/// Bytes a connection or association moved, as its log line reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bytes {
    /// Bytes received from the client and sent on to the backend.
    pub(crate) from_client: u64,
    /// Bytes received from the backend and sent to the client.
    pub(crate) to_client: u64,
}

impl Bytes {
    /// Nothing moved yet: the bytes of an `opened` line or a refusal.
    pub(crate) const NONE: Bytes = Bytes {
        from_client: 0,
        to_client: 0,
    };
}

/// The client address as rinetd prints and matches it: IPv4-mapped IPv6 shown as IPv4.
pub(crate) fn client_ip(peer: SocketAddr) -> IpAddr {
    crate::net::peer::unmapped(peer)
}
