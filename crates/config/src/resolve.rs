//! Turns host and service names into socket addresses. Blocks on DNS.

use super::bounded::{ErrorSink, LineErrors};
use super::lookup::{lookup_all, Lookups, LOOKUP_DEADLINE, LOOKUP_THREADS};
use super::services::Services;
use super::settings::{self, RuleOptions};
use super::{
    Backend, Balance, Config, ConfigErrors, Endpoint, Format, Globals, Host, IpFilter, Port, Proto,
    Rule, UnixAddr, DEFAULT_LISTEN_BACKLOG,
};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Where a rule was written: its included file (`None`: the main file) and line.
type RuleAt = (Option<std::sync::Arc<str>>, usize);

/// Where a rule listens, looked up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BindAddr {
    /// An IP address and port (the first the bind host resolves to).
    Ip(SocketAddr),
    /// A unix stream socket: its path or abstract name.
    Unix(UnixAddr),
}

impl BindAddr {
    /// The IP address and port, unless the rule listens on a unix socket.
    pub fn ip(&self) -> Option<SocketAddr> {
        match self {
            BindAddr::Ip(a) => Some(*a),
            BindAddr::Unix(_) => None,
        }
    }
}

impl BindAddr {
    /// How messages name a listener: `ADDR:PORT/PROTO`, or the unix socket
    /// alone (always a stream; a `/tcp` after a path would read as part of it).
    pub fn with_proto(&self, proto: Proto) -> String {
        match self {
            BindAddr::Ip(a) => format!("{a}/{proto}"),
            BindAddr::Unix(u) => u.to_string(),
        }
    }
}

impl std::fmt::Display for BindAddr {
    /// `1.2.3.4:80`, `[::1]:80`, `unix:/path` or `unix:@name`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindAddr::Ip(a) => a.fmt(f),
            BindAddr::Unix(u) => u.fmt(f),
        }
    }
}

impl From<SocketAddr> for BindAddr {
    fn from(a: SocketAddr) -> Self {
        BindAddr::Ip(a)
    }
}

/// A forwarding rule with every name looked up.
#[derive(Clone, Debug)]
pub struct ResolvedRule {
    /// The rule as parsed (its text forms go into the log file).
    pub rule: Rule,
    /// Where to listen: the first address the bind host resolves to, or a unix socket.
    pub bind: BindAddr,
    /// The first backend's addresses, tried in order until one answers;
    /// empty when the backend is a unix socket (`rule.connect.unix()`).
    pub connect: Vec<SocketAddr>,
    /// Resolved `[src=ADDR]` (or the first backend's `src:`), bound before connecting.
    pub src: Option<IpAddr>,
    /// Every backend's addresses, in the order of `rule.backends` (the
    /// first is `connect` and `src`); [`ResolvedRule::pool`] pairs them.
    pub backends: Vec<ResolvedBackend>,
    /// The global settings a rule falls back on, copied so a rule stands alone.
    pub defaults: RuleDefaults,
    /// The `[sni=NAME]` rules on this rule's listener, in file order, when
    /// several rules share it: this rule (the one without `sni=`, else the
    /// first) binds the socket, the others are chosen by server name.
    pub sni: Vec<ResolvedRule>,
}

/// One backend's names looked up; the backend as parsed (weight, name,
/// ...) is the rule's, at the same index ([`ResolvedRule::pool`]): a copy
/// here was 170 bytes of every resolved rule.
#[derive(Clone, Debug)]
pub struct ResolvedBackend {
    /// Its addresses, in resolver order; empty for a unix socket backend.
    pub addrs: Vec<SocketAddr>,
    /// Source address to bind: the backend's `src:`, else the rule's.
    pub src: Option<IpAddr>,
}

/// The layers around a rule's own options: the file's global settings and
/// the command line's flags, shared by every rule (a port range of 10,000
/// rules holds one copy) so a rule stands alone (a test or an embedder
/// builds a `ResolvedRule` and changes its options before the route is made).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleDefaults {
    /// Which format the file was in (YAML files take rinetd-uv's defaults).
    pub format: Format,
    /// The file's global settings.
    pub globals: Arc<Globals>,
    /// The command line's flags that override every rule's option
    /// (`--connect-timeout`, `--splice`); see [`ResolvedConfig::with_command_line`].
    pub command_line: Arc<RuleOptions>,
}

impl RuleDefaults {
    /// The defaults `config`'s globals give its rules.
    pub fn of(config: &Config) -> Self {
        RuleDefaults {
            format: config.format,
            globals: Arc::new(config.globals.clone()),
            command_line: Arc::default(),
        }
    }
}

/// How often backend names are looked up again when nothing says
/// otherwise: rinetd-uv's default, for both formats (rinetd 0.73 never looks
/// again, which is the behaviour its users asked to have changed). The
/// option table's `dns-refresh` default says the same.
pub const DEFAULT_DNS_REFRESH: Duration = Duration::from_secs(600);

impl ResolvedRule {
    /// The rule's settings with every layer applied (command line, the
    /// rule's options, the globals, the defaults; [`settings::resolve`]):
    /// what `Route` holds, so nothing downstream reads raw options.
    pub fn settings(&self) -> RuleOptions {
        let d = &self.defaults;
        settings::resolve(&d.command_line, &self.rule.options, &d.globals, d.format)
    }

    /// The TCP listen backlog: `listen-backlog`, else [`DEFAULT_LISTEN_BACKLOG`].
    pub fn listen_backlog(&self) -> u32 {
        self.defaults
            .globals
            .listen_backlog
            .unwrap_or(DEFAULT_LISTEN_BACKLOG)
    }

    /// How often `backend`'s name is looked up again: its own `dns_refresh`,
    /// else the rule's resolved `dns-refresh` (rule, global, default);
    /// `None` (also for 0) = never.
    pub fn dns_refresh(&self, backend: &Backend) -> Option<Duration> {
        let every = backend
            .dns_refresh
            .or(self.settings().dns_refresh)
            .unwrap_or(DEFAULT_DNS_REFRESH);
        (!every.is_zero()).then_some(every)
    }

    /// Whether a backend name with several addresses becomes one backend per
    /// address (`dns-multi-ip-expand`; on by default in YAML, off in .conf,
    /// as rinetd-uv), and which addresses it keeps (`dns-multi-ip-proto`,
    /// IPv4 by default). `None` = no expansion.
    pub fn expansion(&self) -> Option<IpFilter> {
        let g = &self.defaults.globals;
        let default = self.defaults.format == Format::Yaml;
        g.dns_multi_ip_expand
            .unwrap_or(default)
            .then(|| g.dns_multi_ip_proto.unwrap_or(IpFilter::Ipv4))
    }
}

impl ResolvedRule {
    /// A rule between two literal addresses, as if read from line 1 of a file
    /// with no options and no ACL: what embedders, tests and benchmarks that
    /// bind on port 0 need without writing configuration text.
    pub fn between(
        bind: SocketAddr,
        bind_proto: Proto,
        connect: SocketAddr,
        connect_proto: Proto,
    ) -> Self {
        let endpoint = |a: SocketAddr, proto| Endpoint {
            host: Host::Ip(a.ip()),
            host_text: a.ip().to_string().into(),
            port: Port::Number(a.port()),
            proto,
        };
        let backend = Backend::plain(endpoint(connect, connect_proto), 1);
        ResolvedRule {
            rule: Rule {
                file: None,
                line: 1,
                name: None,
                bind: endpoint(bind, bind_proto),
                backends: vec![backend.clone()],
                balance: Balance::default(),
                options: Default::default(),
                acl: Default::default(),
            },
            bind: BindAddr::Ip(bind),
            connect: vec![connect],
            src: None,
            backends: vec![ResolvedBackend {
                addrs: vec![connect],
                src: None,
            }],
            defaults: RuleDefaults::default(),
            sni: Vec::new(),
        }
    }

    /// Each backend as parsed with its addresses, in file order.
    pub fn pool(&self) -> impl Iterator<Item = (&Backend, &ResolvedBackend)> {
        self.rule.backends.iter().zip(&self.backends)
    }

    /// The server name pattern (`[sni=...]`) this rule serves, when it is
    /// routed by one (TCP listeners only: on `/udp` the option is ignored).
    pub fn server_name(&self) -> Option<&str> {
        super::sni::server_name(&self.rule)
    }

    /// This rule and the rules it carries by server name, in file order of
    /// each: every rule the file wrote for this listener.
    pub fn with_routed(&self) -> impl Iterator<Item = &ResolvedRule> {
        std::iter::once(self).chain(self.sni.iter())
    }
}

/// A configuration ready to run.
#[derive(Clone, Debug)]
pub struct ResolvedConfig {
    /// Global settings (logfile, ACL, ...); its `rules` are empty: each
    /// moved into its [`ResolvedRule::rule`].
    pub config: Config,
    /// Rules with addresses, in file order, one per listener: rules that
    /// share a listener by server name are carried by one ([`ResolvedRule::sni`]).
    pub rules: Vec<ResolvedRule>,
}

impl ResolvedConfig {
    /// This configuration under the command line's flags that override rule
    /// options (`--connect-timeout`, `--splice`): the top layer of
    /// [`settings::resolve`]. The service applies it on start and on every reload.
    pub fn with_command_line(mut self, flags: &RuleOptions) -> Self {
        let flags = Arc::new(flags.clone());
        for r in &mut self.rules {
            r.defaults.command_line = flags.clone();
            for routed in &mut r.sni {
                routed.defaults.command_line = flags.clone();
            }
        }
        self
    }
}

/// Resolves every name in `config`; every failure is reported, each with its line.
///
/// Error messages: `cannot resolve host 'NAME': REASON`,
/// `host 'NAME' has no addresses`, the [`Services::lookup`] messages, and
/// `duplicate listener ADDR:PORT/PROTO (after resolving names), first defined at line N`.
/// The error text is the rule in canonical form (see `Display for Rule`).
/// Errors are capped as the parser's are (see [`super::MAX_ERRORS`]).
pub fn resolve(config: Config, services: &Services) -> Result<ResolvedConfig, ConfigErrors> {
    resolve_with(config, services, super::lookup::system)
}

/// [`resolve`] with `lookup` looking names up (the system resolver, or a
/// stand-in in tests).
pub fn resolve_with(
    mut config: Config,
    services: &Services,
    lookup: super::lookup::Lookup,
) -> Result<ResolvedConfig, ConfigErrors> {
    let mut errors = ErrorSink::default();
    let names = config.rules.iter().flat_map(|r| {
        let hosts = std::iter::once(&r.bind.host)
            .chain(r.options.src.as_ref())
            .chain(r.backends.iter().map(|b| &b.endpoint.host))
            .chain(r.backends.iter().filter_map(|b| b.src.as_ref()));
        hosts.filter_map(|h| match h {
            Host::Name(n) => Some(n.clone()),
            Host::Ip(_) | Host::Unix(_) => None,
        })
    });
    let names = lookup_all(names, lookup, LOOKUP_THREADS, LOOKUP_DEADLINE);
    if names.late > 0 {
        let message = format!(
            "{} host name{} not looked up within {:?} ({LOOKUP_THREADS} at a time): the rules that use them are not checked",
            names.late,
            super::plural(names.late),
            names.deadline
        );
        errors.at(0, 0, message, "");
    }
    // Each rule moves into its resolved form rather than being copied: the
    // copy (with its backends) doubled what a valid configuration costs.
    // They move an eighth at a time, the parsed list shrinking as the
    // resolved one grows, so the two are never both whole in memory.
    let mut parsed = std::mem::take(&mut config.rules);
    // Grown a chunk at a time as rules resolve (below), not sized for all at once:
    // 11 MiB reserved up front for 26,000 rules whose names all failed.
    let mut rules: Vec<ResolvedRule> = Vec::new();
    let chunk = parsed.len().div_ceil(8).max(1);
    // Listener to the file (None: the main one) and line that first defined it.
    // With the server name (`[sni=]`) of each rule on it: rules may share a
    // listener when their names differ (`super::sni`).
    let mut listeners: HashMap<(BindAddr, Proto), (RuleAt, super::sni::Names)> = HashMap::new();
    let defaults = RuleDefaults::of(&config);
    let mut next = Vec::new();
    let rules_in_order = std::iter::from_fn(|| {
        if next.is_empty() {
            if parsed.is_empty() {
                return None;
            }
            next = parsed.drain(..chunk.min(parsed.len())).rev().collect();
            parsed.shrink_to_fit();
        }
        next.pop()
    });
    for rule in rules_in_order {
        errors.set_file(rule.file.clone());
        let mut problems = LineErrors::default();
        let bind = match rule.bind.unix() {
            Some(u) => Some(BindAddr::Unix(u.clone())),
            None => addresses(&rule.bind, services, &names)
                .map_err(|e| problems.push(e))
                .ok()
                .and_then(|a| a.first().copied().map(BindAddr::Ip)),
        };
        let mut backends = Vec::with_capacity(rule.backends.len());
        for backend in &rule.backends {
            // A unix socket backend has nothing to look up (and no `src`).
            if backend.endpoint.unix().is_some() {
                backends.push(ResolvedBackend {
                    addrs: Vec::new(),
                    src: None,
                });
                continue;
            }
            let addrs = addresses(&backend.endpoint, services, &names)
                .map_err(|e| problems.push(e))
                .ok();
            let src = match backend.src.as_ref().or(rule.options.src.as_ref()) {
                None => Some(None),
                Some(host) => {
                    let family = addrs
                        .as_ref()
                        .and_then(|c| c.first())
                        .map(SocketAddr::is_ipv4);
                    source(host, family, &names)
                        .map(Some)
                        .map_err(|e| problems.push(e))
                        .ok()
                }
            };
            if let (Some(addrs), Some(src)) = (addrs, src) {
                backends.push(ResolvedBackend { addrs, src });
            }
        }
        let complete = backends.len() == rule.backends.len();
        if let (Some(bind), true, Some(first)) = (bind, complete, backends.first()) {
            let name = super::sni::server_name(&rule);
            match listeners.get_mut(&(bind.clone(), rule.bind.proto)) {
                Some(((file, line), taken)) => match super::sni::clash(taken, name) {
                    Some(why) => {
                        let at = if *file == rule.file {
                            format!("line {line}")
                        } else {
                            let file = file.as_deref().unwrap_or(super::parse::PLACEHOLDER_FILE);
                            format!("{file}:{line}")
                        };
                        problems.push(format!(
                            "duplicate listener {bind}/{} (after resolving names), first defined at {at}{why}",
                            rule.bind.proto
                        ))
                    }
                    None => taken.push(name.map(str::to_string)),
                },
                None => {
                    listeners.insert(
                        (bind.clone(), rule.bind.proto),
                        (
                            (rule.file.clone(), rule.line),
                            vec![name.map(str::to_string)],
                        ),
                    );
                }
            }
            if !problems.is_empty() {
                errors.line(rule.line, &rule.to_string(), problems);
                continue;
            }
            if rules.len() == rules.capacity() {
                rules.reserve_exact(chunk);
            }
            rules.push(ResolvedRule {
                connect: first.addrs.clone(),
                src: first.src,
                rule,
                bind,
                backends,
                defaults: defaults.clone(),
                sni: Vec::new(),
            });
            continue;
        }
        if !problems.is_empty() {
            errors.line(rule.line, &rule.to_string(), problems);
        }
    }
    errors.set_file(None);
    let rules = group(rules);
    errors.into_result(
        ResolvedConfig { config, rules },
        super::parse::PLACEHOLDER_FILE,
    )
}

/// Every address of one side of a rule, in resolver order, without repeats; never empty.
fn addresses(
    end: &Endpoint,
    services: &Services,
    names: &Lookups,
) -> Result<Vec<SocketAddr>, String> {
    let port = match &end.port {
        Port::Number(n) => *n,
        Port::Service(name) => services.lookup(name, end.proto)?,
        Port::None => return Ok(Vec::new()),
    };
    let found: Vec<SocketAddr> = match &end.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
        Host::Unix(_) => Vec::new(),
        Host::Name(name) => names
            .get(name)
            .map_err(|e| format!("cannot resolve host '{name}': {e}"))?
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect(),
    };
    let mut unique = Vec::with_capacity(found.len());
    for a in found {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    if unique.is_empty() {
        return Err(format!("host '{}' has no addresses", end.host_text));
    }
    Ok(unique)
}

/// The `[src=...]` address: for a name, the first address of the backend's
/// family (`want_v4`), else the first address.
fn source(host: &Host, want_v4: Option<bool>, names: &Lookups) -> Result<IpAddr, String> {
    let name = match host {
        Host::Ip(ip) => return Ok(*ip),
        Host::Name(name) => name,
        Host::Unix(u) => return Err(format!("src must be an IP address or host name, not '{u}'")),
    };
    let found = names
        .get(name)
        .map_err(|e| format!("cannot resolve src host '{name}': {e}"))?;
    found
        .iter()
        .find(|ip| Some(ip.is_ipv4()) == want_v4)
        .or(found.first())
        .copied()
        .ok_or_else(|| format!("src host '{name}' has no addresses"))
}

/// `rules` (in file order) with each shared listener's rules folded into
/// one: the rule without `[sni=]` (else the first) keeps its place and
/// carries the others in [`ResolvedRule::sni`], in file order.
///
/// Here, not in `sni.rs` with the rest of server-name sharing: it folds
/// resolved rules, and `sni.rs` is below this module (the parsers ask it
/// whether two rules may share an address before anything is resolved).
fn group(rules: Vec<ResolvedRule>) -> Vec<ResolvedRule> {
    let key = |r: &ResolvedRule| (r.bind.clone(), r.rule.bind.proto);
    let mut carrier: HashMap<(BindAddr, Proto), usize> = HashMap::new();
    let mut shared = false;
    for (i, r) in rules.iter().enumerate() {
        let routed = r.server_name().is_some();
        shared |= routed;
        match carrier.get(&key(r)) {
            None => {
                carrier.insert(key(r), i);
            }
            Some(&c) if !routed && rules[c].server_name().is_some() => {
                carrier.insert(key(r), i);
            }
            Some(_) => {}
        }
    }
    if !shared {
        return rules;
    }
    // Each rule goes to its carrier's list; carriers stay, in place.
    let mut kept = Vec::with_capacity(carrier.len());
    let mut carried: HashMap<usize, Vec<ResolvedRule>> = HashMap::new();
    for (i, r) in rules.into_iter().enumerate() {
        match carrier.get(&key(&r)).copied() {
            Some(c) if c != i => carried.entry(c).or_default().push(r),
            _ => kept.push((i, r)),
        }
    }
    kept.into_iter()
        .map(|(i, mut r)| {
            r.sni = carried.remove(&i).unwrap_or_default();
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    const SERVICES: &str = "http 80/tcp www\ndomain 53/tcp\ndomain 53/udp\n";

    fn run(text: &str, services: &Services) -> Result<ResolvedConfig, Vec<String>> {
        let config = parse(text).map_err(|e| vec![e.to_string()])?;
        resolve(config, services).map_err(|e| e.to_string().lines().map(String::from).collect())
    }

    #[test]
    fn literals_and_services() {
        let s = Services::parse(SERVICES);
        let r = run("127.0.0.1 http [::1] domain/udp [src=127.0.0.2]\n", &s).expect("resolves");
        assert_eq!(r.rules.len(), 1);
        let bind: SocketAddr = "127.0.0.1:80".parse().expect("literal");
        assert_eq!(r.rules[0].bind, BindAddr::Ip(bind));
        assert_eq!(
            r.rules[0].connect,
            vec!["[::1]:53".parse().expect("literal")]
        );
        assert_eq!(r.rules[0].src, Some("127.0.0.2".parse().expect("literal")));
        assert!(r.config.rules.is_empty(), "moved into the resolved rules");
    }

    #[test]
    fn localhost_resolves() {
        let s = Services::parse(SERVICES);
        let r = run("localhost 8080 localhost www [src=localhost]\n", &s).expect("resolves");
        let rr = &r.rules[0];
        let bind = rr.bind.ip().expect("an IP listener");
        assert!(bind.ip().is_loopback());
        assert_eq!(bind.port(), 8080);
        assert!(!rr.connect.is_empty());
        assert!(rr
            .connect
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 80));
        let mut dedup = rr.connect.clone();
        dedup.dedup();
        assert_eq!(dedup.len(), rr.connect.len());
        let src = rr.src.expect("src resolved");
        assert!(src.is_loopback());
        assert_eq!(src.is_ipv4(), rr.connect[0].is_ipv4());
    }

    #[test]
    fn every_failure_is_reported() {
        let s = Services::parse(SERVICES);
        let e = run(
            "nosuch.invalid 80 127.0.0.1 nosuchservice\n127.0.0.1 81 127.0.0.1 http/udp [src=other.invalid]\n",
            &s,
        )
        .expect_err("fails");
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(
            e[0].starts_with("config:1: cannot resolve host 'nosuch.invalid': "),
            "{}",
            e[0]
        );
        assert!(
            e[0].ends_with(": 'nosuch.invalid 80/tcp 127.0.0.1 nosuchservice/tcp'"),
            "{}",
            e[0]
        );
        assert_eq!(
            e[1],
            "config:1: unknown service 'nosuchservice/tcp': 'nosuch.invalid 80/tcp 127.0.0.1 nosuchservice/tcp'"
        );
        assert_eq!(
            e[2],
            "config:2: unknown service 'http/udp': '127.0.0.1 81/tcp 127.0.0.1 http/udp [src=other.invalid]'"
        );
        assert!(
            e[3].starts_with("config:2: cannot resolve src host 'other.invalid': "),
            "{}",
            e[3]
        );
    }

    #[test]
    fn missing_services_file_fails_only_named_ports() {
        let s = Services::unavailable("/etc/services: No such file or directory (os error 2)");
        assert!(run("127.0.0.1 80 127.0.0.1 81\n", &s).is_ok());
        let e = run(
            "127.0.0.1 80 127.0.0.1 81\n127.0.0.1 http 127.0.0.1 81\n",
            &s,
        )
        .expect_err("fails");
        assert_eq!(
            e,
            ["config:2: cannot look up service 'http': /etc/services: No such file or directory (os error 2): '127.0.0.1 http/tcp 127.0.0.1 81/tcp'"]
        );
    }

    #[test]
    fn duplicates_after_resolution() {
        let s = Services::parse(SERVICES);
        let e = run(
            "127.0.0.1 80 127.0.0.1 81\n127.0.0.1 http 127.0.0.1 82\n",
            &s,
        )
        .expect_err("dup");
        assert_eq!(
            e,
            ["config:2: duplicate listener 127.0.0.1:80/tcp (after resolving names), first defined at line 1: '127.0.0.1 http/tcp 127.0.0.1 82/tcp'"]
        );
        // Same port on both protocols is fine.
        assert!(run(
            "127.0.0.1 domain 127.0.0.1 81\n127.0.0.1 domain/udp 127.0.0.1 82/udp\n",
            &s
        )
        .is_ok());
    }
}
