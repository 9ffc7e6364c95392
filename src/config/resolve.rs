//! Turns host and service names into socket addresses. Blocks on DNS.

use super::bounded::{ErrorSink, LineErrors};
use super::services::Services;
use super::{Config, ConfigErrors, Endpoint, Host, Port, Proto, Rule};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// A forwarding rule with every name looked up.
#[derive(Clone, Debug)]
pub struct ResolvedRule {
    /// The rule as parsed (its text forms go into the log file).
    pub rule: Rule,
    /// The address to bind (the first the bind host resolves to).
    pub bind: SocketAddr,
    /// Backend addresses, tried in order until one answers.
    pub connect: Vec<SocketAddr>,
    /// Resolved `[src=ADDR]`, bound before connecting.
    pub src: Option<IpAddr>,
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
            host_text: a.ip().to_string(),
            port: Port::Number(a.port()),
            proto,
        };
        ResolvedRule {
            rule: Rule {
                line: 1,
                bind: endpoint(bind, bind_proto),
                connect: endpoint(connect, connect_proto),
                options: Default::default(),
                acl: Default::default(),
            },
            bind,
            connect: vec![connect],
            src: None,
        }
    }
}

/// A configuration ready to run.
#[derive(Clone, Debug)]
pub struct ResolvedConfig {
    /// Global settings (logfile, ACL, ...); `config.rules` matches `rules` one to one.
    pub config: Config,
    /// Rules with addresses, in file order.
    pub rules: Vec<ResolvedRule>,
}

/// Resolves every name in `config`; every failure is reported, each with its line.
///
/// Error messages: `cannot resolve host 'NAME': REASON`,
/// `host 'NAME' has no addresses`, the [`Services::lookup`] messages, and
/// `duplicate listener ADDR:PORT/PROTO (after resolving names), first defined at line N`.
/// The error text is the rule in canonical form (see `Display for Rule`).
/// Errors are capped as the parser's are (see [`super::MAX_ERRORS`]).
pub fn resolve(config: Config, services: &Services) -> Result<ResolvedConfig, ConfigErrors> {
    let mut errors = ErrorSink::default();
    let mut rules = Vec::with_capacity(config.rules.len());
    let mut listeners: HashMap<(SocketAddr, Proto), usize> = HashMap::new();
    for rule in &config.rules {
        let mut problems = LineErrors::default();
        let bind = addresses(&rule.bind, services)
            .map_err(|e| problems.push(e))
            .ok();
        let connect = addresses(&rule.connect, services)
            .map_err(|e| problems.push(e))
            .ok();
        let src = match &rule.options.src {
            None => Some(None),
            Some(host) => {
                let family = connect
                    .as_ref()
                    .and_then(|c| c.first())
                    .map(SocketAddr::is_ipv4);
                source(host, family)
                    .map(Some)
                    .map_err(|e| problems.push(e))
                    .ok()
            }
        };
        if let (Some(bind), Some(connect), Some(src)) = (bind, connect, src) {
            let bind = bind[0];
            match listeners.get(&(bind, rule.bind.proto)) {
                Some(first) => problems.push(format!(
                    "duplicate listener {bind}/{} (after resolving names), first defined at line {first}",
                    rule.bind.proto
                )),
                None => {
                    listeners.insert((bind, rule.bind.proto), rule.line);
                }
            }
            rules.push(ResolvedRule {
                rule: rule.clone(),
                bind,
                connect,
                src,
            });
        }
        if !problems.is_empty() {
            errors.line(rule.line, &rule.to_string(), problems);
        }
    }
    errors.into_result(
        ResolvedConfig { config, rules },
        super::parse::PLACEHOLDER_FILE,
    )
}

/// Every address of one side of a rule, in resolver order, without repeats; never empty.
fn addresses(end: &Endpoint, services: &Services) -> Result<Vec<SocketAddr>, String> {
    let port = match &end.port {
        Port::Number(n) => *n,
        Port::Service(name) => services.lookup(name, end.proto)?,
    };
    let found: Vec<SocketAddr> = match &end.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
        Host::Name(name) => (name.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve host '{name}': {e}"))?
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
fn source(host: &Host, want_v4: Option<bool>) -> Result<IpAddr, String> {
    let name = match host {
        Host::Ip(ip) => return Ok(*ip),
        Host::Name(name) => name,
    };
    let found: Vec<IpAddr> = (name.as_str(), 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve src host '{name}': {e}"))?
        .map(|a| a.ip())
        .collect();
    found
        .iter()
        .find(|ip| Some(ip.is_ipv4()) == want_v4)
        .or(found.first())
        .copied()
        .ok_or_else(|| format!("src host '{name}' has no addresses"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

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
        assert_eq!(r.rules[0].bind, "127.0.0.1:80".parse().expect("literal"));
        assert_eq!(
            r.rules[0].connect,
            vec!["[::1]:53".parse().expect("literal")]
        );
        assert_eq!(r.rules[0].src, Some("127.0.0.2".parse().expect("literal")));
        assert_eq!(r.config.rules.len(), r.rules.len());
    }

    #[test]
    fn localhost_resolves() {
        let s = Services::parse(SERVICES);
        let r = run("localhost 8080 localhost www [src=localhost]\n", &s).expect("resolves");
        let rr = &r.rules[0];
        assert!(rr.bind.ip().is_loopback());
        assert_eq!(rr.bind.port(), 8080);
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
