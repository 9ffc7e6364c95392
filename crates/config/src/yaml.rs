//! rinetd-uv's YAML configuration format, mapped onto the same [`Config`] as
//! rinetd.conf text, so `--check`, reload and the runtime see one model.
//!
//! ```yaml
//! global:
//!   log_file: /var/log/oi.log
//!   connect_timeout: 10
//! rules:
//!   - name: web
//!     bind: ["0.0.0.0:80/tcp", "[::]:80/tcp"]
//!     connect:
//!       - dest: "10.0.0.1:8080"
//!         weight: 2
//!       - dest: "10.0.0.2:8080"
//!     load_balancing: { algorithm: leastconn }
//! ```
//!
//! Every problem is reported with its line and column; unknown keys are
//! errors (rinetd-uv only warns), with a "did you mean" hint. A rule with
//! several `bind` entries becomes one [`Rule`] per entry, sharing the name.

mod tree;

use super::address::{parse_host, parse_port};
use super::bounded::ErrorSink;
use super::checks::check_rule;
use super::hint::suggestion;
use super::parse::{parse_pattern, PROXY_V1_UDP, PROXY_V1_UDP_LISTENER};
use super::settings::{self, Syntax};
use super::unix::{is_unix, parse_unix};
use super::values::{bounded, seconds};
use super::{
    AclRules, Algorithm, Backend, Balance, Config, ConfigErrors, Endpoint, Format, Host, Options,
    Pattern, Port, Proto, ProxyHeader, Rule, RuleOptions, Shown, MAX_DNS_REFRESH_SECS, MAX_WEIGHT,
};
use std::collections::HashMap;
use std::time::Duration;
use tree::{Node, Spanned};
#[cfg(test)]
use {super::SpliceMode, std::path::PathBuf};

/// Keys of the top-level mapping.
const ROOT_KEYS: [&str; 2] = ["global", "rules"];
/// Keys of a rule that are not settings of the table: what the rule is.
const RULE_SHAPE_KEYS: [&str; 5] = ["name", "bind", "connect", "load_balancing", "access"];
/// Keys of one backend in a `connect:` list.
const BACKEND_KEYS: [&str; 5] = ["dest", "name", "weight", "src", "dns_refresh"];
/// Keys of `load_balancing:`.
const BALANCE_KEYS: [&str; 5] = [
    "algorithm",
    "health_threshold",
    "recovery_timeout",
    "affinity_ttl",
    "affinity_max_entries",
];
/// Keys of `access:`.
const ACCESS_KEYS: [&str; 2] = ["allow", "deny"];

/// Parses YAML text (rinetd-uv's format). Does no I/O and no DNS.
pub fn parse_yaml(text: &str) -> Result<Config, ConfigErrors> {
    let mut m = Mapper {
        config: Config {
            format: Format::Yaml,
            ..Config::default()
        },
        ..Mapper::default()
    };
    match tree::parse(text) {
        Err(e) => m.errors.at(
            e.pos.line,
            e.pos.column,
            format!("YAML syntax error: {}", Shown(&e.message)),
            "",
        ),
        Ok(None) => {}
        Ok(Some(root)) => m.root(&root),
    }
    m.config.rules.shrink_to_fit();
    m.errors.sort_by_position();
    m.errors
        .into_result(m.config, super::parse::PLACEHOLDER_FILE)
}

/// Mapping state: what has been built, and the errors found.
#[derive(Default)]
struct Mapper {
    /// The configuration built so far.
    config: Config,
    /// Every problem, with line and column.
    errors: ErrorSink,
    /// Rule names seen, with their lines (names must be unique).
    names: HashMap<String, usize>,
    /// Listeners seen (lower-cased host, port, protocol), with their lines.
    listeners: HashMap<(String, Port, Proto), (usize, super::sni::Names)>,
    /// Set once the rules reach [`super::MAX_RULES`] (and said so).
    over_budget: bool,
}

impl Mapper {
    /// Records a problem at `node`.
    fn error(&mut self, node: &Spanned, message: String) {
        self.errors.at(node.pos.line, node.pos.column, message, "");
    }

    /// Records a warning at `node`, or only counts it past [`MAX_WARNINGS`].
    fn warn(&mut self, node: &Spanned, message: String) {
        if self.config.warnings.len() < super::MAX_WARNINGS {
            self.config.warnings.push(super::ConfigError {
                file: None,
                line: node.pos.line,
                column: node.pos.column,
                message,
                text: String::new(),
                more: 0,
            });
        } else {
            self.config.omitted_warnings += 1;
        }
    }

    /// The entries of a mapping, checking every key against `allowed`; an
    /// unknown or repeated key is an error and its entry is left out.
    fn entries<'a>(
        &mut self,
        node: &'a Spanned,
        what: &str,
        allowed: &[&str],
    ) -> Vec<(&'a str, &'a Spanned)> {
        let Node::Map(entries) = &node.node else {
            self.error(
                node,
                format!("{what} must be a mapping, not {}", node.kind()),
            );
            return Vec::new();
        };
        let mut out: Vec<(&str, &Spanned)> = Vec::new();
        for (k, v) in entries {
            let Some(key) = k.text() else {
                self.error(
                    k,
                    format!("a key in {what} must be a single value, not {}", k.kind()),
                );
                continue;
            };
            if !allowed.contains(&key) {
                let hint = suggestion(key, allowed);
                self.error(k, format!("unknown key '{}' in {what}{hint}", Shown(key)));
            } else if out.iter().any(|(seen, _)| *seen == key) {
                self.error(k, format!("duplicate key '{}' in {what}", Shown(key)));
            } else {
                out.push((key, v));
            }
        }
        out
    }

    /// A single value's text, or an error naming `key`.
    fn scalar<'a>(&mut self, key: &str, v: &'a Spanned) -> Option<&'a str> {
        let text = v.text();
        if text.is_none() {
            self.error(v, format!("{key} must be a single value, not {}", v.kind()));
        }
        text
    }

    /// One value or a list of values (`bind`, `allow`).
    fn scalars<'a>(&mut self, key: &str, v: &'a Spanned) -> Vec<(&'a str, &'a Spanned)> {
        match &v.node {
            Node::Seq(items) => items
                .iter()
                .filter_map(|i| self.scalar(key, i).map(|t| (t, i)))
                .collect(),
            _ => self
                .scalar(key, v)
                .map(|t| vec![(t, v)])
                .unwrap_or_default(),
        }
    }

    /// A whole number from `min` to `max`.
    fn number(&mut self, key: &str, v: &Spanned, min: u64, max: u64) -> Option<u64> {
        let text = self.scalar(key, v)?;
        bounded(key, text, min, max, "")
            .map_err(|e| self.error(v, e))
            .ok()
    }

    /// Whole seconds from `min` to `max`.
    fn secs(&mut self, key: &str, v: &Spanned, min: u64, max: u64) -> Option<Duration> {
        let text = self.scalar(key, v)?;
        seconds(key, text, min, max)
            .map_err(|e| self.error(v, e))
            .ok()
    }

    /// The document: `global:` and `rules:`.
    fn root(&mut self, root: &Spanned) {
        for (key, v) in self.entries(root, "the top level", &ROOT_KEYS) {
            match key {
                "global" => self.global(v),
                _ => match &v.node {
                    Node::Seq(rules) => rules.iter().for_each(|r| self.rule(r)),
                    Node::Scalar { null: true, .. } => {}
                    _ => self.error(v, format!("rules must be a list, not {}", v.kind())),
                },
            }
        }
    }

    /// `global:`.
    fn global(&mut self, node: &Spanned) {
        if matches!(node.node, Node::Scalar { null: true, .. }) {
            return;
        }
        let keys = settings::yaml_global_keys("");
        for (key, v) in self.entries(node, "global", &keys) {
            match key {
                "status" => self.status(v),
                // Field by field: `access:` and `trust_proxy:` fill the same
                // `AclRules`, in either order.
                "trust_proxy" => self.config.global_acl.trust_proxy = self.patterns(key, v),
                "access" => {
                    let acl = self.access(v);
                    self.config.global_acl.allow = acl.allow;
                    self.config.global_acl.deny = acl.deny;
                }
                _ => self.global_setting(key, key, v),
            }
        }
    }

    /// One global setting the table stores (`path` is its YAML key, dotted
    /// under `status:`), parsed as the table says.
    fn global_setting(&mut self, path: &str, key: &str, v: &Spanned) {
        let Some(setting) = settings::yaml_global(path) else {
            return self.error(v, format!("unknown key '{}' in global", Shown(key)));
        };
        let Some(at) = setting.global else { return };
        let Some(text) = self.scalar(key, v) else {
            return;
        };
        let stored = settings::store(setting, at(&mut self.config), Syntax::Yaml, key, text);
        if let Err(e) = stored {
            self.error(v, e);
        }
    }

    /// `global.status:`.
    fn status(&mut self, node: &Spanned) {
        let keys = settings::yaml_global_keys("status");
        for (key, v) in self.entries(node, "status", &keys) {
            self.global_setting(&format!("status.{key}"), key, v);
        }
    }

    /// `access:` with `allow:` and `deny:` (each one pattern or a list).
    fn access(&mut self, node: &Spanned) -> AclRules {
        let mut acl = AclRules::default();
        for (key, v) in self.entries(node, "access", &ACCESS_KEYS) {
            let patterns = self.patterns(key, v);
            if key == "allow" {
                acl.allow = patterns;
            } else {
                acl.deny = patterns;
            }
        }
        acl
    }

    /// One address pattern or a list of them (`allow`, `deny`, `trust_proxy`),
    /// in the syntax rinetd.conf's lines take.
    fn patterns(&mut self, key: &str, v: &Spanned) -> Vec<Pattern> {
        let mut out = Vec::new();
        for (text, at) in self.scalars(key, v) {
            match parse_pattern(text) {
                Ok(p) => out.push(p),
                Err(e) => self.error(at, e),
            }
        }
        out
    }

    /// One entry of `rules:`.
    fn rule(&mut self, node: &Spanned) {
        let errors_before = self.errors_count();
        let mut name: Option<String> = None;
        let mut binds: Vec<(Endpoint, usize, &Spanned)> = Vec::new();
        let mut backends: Vec<Backend> = Vec::new();
        let mut options = RuleOptions::default();
        let mut balance = Balance::default();
        let mut acl = AclRules::default();
        let mut trust_proxy = Vec::new();
        // Where `proxy: v1` was written, to point at it if a backend is UDP.
        let mut proxy_v1_at: Option<&Spanned> = None;
        let mut saw = (false, false);
        let keys: Vec<&str> = RULE_SHAPE_KEYS
            .iter()
            .copied()
            .chain(settings::yaml_rule_keys())
            .collect();
        for (key, v) in self.entries(node, "a rule", &keys) {
            match key {
                "name" => {
                    let Some(text) = self.scalar(key, v) else {
                        continue;
                    };
                    if text.is_empty() {
                        self.error(v, "name must not be empty".into());
                    } else if let Some(first) = self.names.get(text) {
                        let m = format!(
                            "duplicate rule name '{}', first used at line {first}",
                            Shown(text)
                        );
                        self.error(v, m);
                    } else {
                        self.names.insert(text.to_string(), v.pos.line);
                        name = Some(text.to_string());
                    }
                }
                "bind" => {
                    saw.0 = true;
                    if matches!(&v.node, Node::Seq(items) if items.is_empty()) {
                        self.error(v, "bind must name at least one address".into());
                    }
                    for (text, at) in self.scalars(key, v) {
                        match endpoint(text) {
                            Ok(e) => binds.push((e, at.pos.line, at)),
                            Err(e) => self.error(at, format!("invalid bind address: {e}")),
                        }
                    }
                }
                "connect" => {
                    saw.1 = true;
                    backends = self.backends(v);
                }
                "trust_proxy" => trust_proxy = self.patterns(key, v),
                "load_balancing" => balance = self.balance(v),
                "access" => acl = self.access(v),
                section if !settings::yaml_rule_section_keys(section).is_empty() => {
                    self.rule_section(&mut options, section, v)
                }
                _ => {
                    self.rule_option(&mut options, key, v);
                    if key == "proxy" && options.proxy == Some(ProxyHeader::V1) {
                        proxy_v1_at = Some(v);
                    }
                }
            }
        }
        acl.trust_proxy = trust_proxy;
        if let Some(at) = proxy_v1_at {
            if backends.iter().any(|b| b.endpoint.proto == Proto::Udp) {
                self.error(at, PROXY_V1_UDP.into());
            } else if binds.iter().any(|(b, ..)| b.proto == Proto::Udp) {
                self.error(at, PROXY_V1_UDP_LISTENER.into());
            }
        }
        if name.is_none() && !self.entries_have(node, "name") {
            self.error(node, "a rule needs a name".into());
        }
        if !saw.0 {
            self.error(node, "a rule needs 'bind'".into());
        }
        if !saw.1 {
            self.error(node, "a rule needs 'connect'".into());
        }
        if self.errors_count() != errors_before || backends.is_empty() {
            return;
        }
        // One options record for every bind of the rule, and shared with the
        // rule before when the same.
        let last = self.config.rules.last().map(|r| r.options.clone());
        let stored = Options::shared_with(options.clone(), &last.unwrap_or_default());
        for (bind, line, at) in binds {
            let (errors, warnings) = check_rule(&bind, &backends, &options);
            if !errors.is_empty() {
                for e in errors {
                    self.error(at, e);
                }
                continue;
            }
            for w in warnings {
                self.warn(at, w);
            }
            let host = match &bind.host {
                Host::Ip(ip) => ip.to_string(),
                Host::Name(n) => n.to_ascii_lowercase(),
                Host::Unix(addr) => addr.to_string(),
            };
            let key = (host, bind.port.clone(), bind.proto);
            // Rules may share a listener by server name (`sni:`, `super::sni`).
            let sni = super::sni::name_in(bind.proto, &options);
            if let Some((first, taken)) = self.listeners.get(&key) {
                if let Some(why) = super::sni::clash(taken, sni) {
                    let m =
                        format!("duplicate listener {bind}, first defined at line {first}{why}");
                    self.error(at, m);
                    continue;
                }
            }
            let sni = sni.map(str::to_string);
            match self.listeners.get_mut(&key) {
                Some((_, taken)) => taken.push(sni),
                None => {
                    self.listeners.insert(key, (line, vec![sni]));
                }
            }
            if self.config.rules.len() >= super::MAX_RULES {
                // Said once (the rules past it would each say it again).
                if !self.over_budget {
                    self.over_budget = true;
                    self.error(at, super::too_many_rules());
                }
                return;
            }
            self.config.rules.push(Rule {
                file: None,
                line,
                name: name.clone(),
                bind,
                backends: backends.clone(),
                balance: balance.clone(),
                options: stored.clone(),
                acl: acl.clone(),
            });
        }
    }

    /// One rule option (`timeout`, `keepalive`, ...), parsed as the table says.
    fn rule_option(&mut self, options: &mut RuleOptions, key: &str, v: &Spanned) {
        let Some(setting) = settings::yaml_rule_option(key) else {
            return self.error(v, format!("unknown key '{}' in a rule", Shown(key)));
        };
        let (Some(at), Some(text)) = (setting.rule, self.scalar(key, v)) else {
            return;
        };
        if let Err(e) = settings::store(setting, at(options), Syntax::Yaml, key, text) {
            self.error(v, e);
        }
    }

    /// A rule's section of options (`health_check:`), each key parsed as
    /// the table's `SECTION.KEY` entry says.
    fn rule_section(&mut self, options: &mut RuleOptions, section: &str, v: &Spanned) {
        let keys = settings::yaml_rule_section_keys(section);
        for (key, value) in self.entries(v, section, &keys) {
            let Some(setting) = settings::yaml_rule_option(&format!("{section}.{key}")) else {
                continue;
            };
            let Some(at) = setting.rule else {
                continue;
            };
            // An option that repeats in rinetd.conf is a list here (or one value).
            let texts = match setting.value {
                settings::Value::CertName => self.scalars(key, value),
                _ => self
                    .scalar(key, value)
                    .map(|t| (t, value))
                    .into_iter()
                    .collect(),
            };
            for (text, at_node) in texts {
                if let Err(e) = settings::store(setting, at(options), Syntax::Yaml, key, text) {
                    self.error(at_node, e);
                }
            }
        }
    }

    /// Whether the mapping `node` has the key `key` (even with a bad value).
    fn entries_have(&self, node: &Spanned, key: &str) -> bool {
        match &node.node {
            Node::Map(entries) => entries.iter().any(|(k, _)| k.text() == Some(key)),
            _ => true,
        }
    }

    /// Errors so far (listed or counted), to tell whether a rule added any.
    fn errors_count(&self) -> usize {
        self.errors.count()
    }

    /// `connect:`: one destination, or a list of backends (mappings or destinations).
    fn backends(&mut self, v: &Spanned) -> Vec<Backend> {
        let items: Vec<&Spanned> = match &v.node {
            Node::Seq(items) => items.iter().collect(),
            _ => vec![v],
        };
        if items.is_empty() {
            self.error(v, "connect must name at least one backend".into());
        }
        let mut out = Vec::new();
        for item in items {
            if let Some(text) = item.text() {
                match endpoint(text) {
                    Ok(e) => out.push(Backend::plain(e, item.pos.line)),
                    Err(e) => self.error(item, format!("invalid connect address: {e}")),
                }
                continue;
            }
            if !matches!(item.node, Node::Map(_)) {
                self.error(
                    item,
                    format!(
                        "a backend must be an address or a mapping, not {}",
                        item.kind()
                    ),
                );
                continue;
            }
            let mut backend: Option<Backend> = None;
            let mut extra = (None, 1u32, None, None);
            for (key, v) in self.entries(item, "a backend", &BACKEND_KEYS) {
                match key {
                    "dest" => {
                        let Some(text) = self.scalar(key, v) else {
                            continue;
                        };
                        match endpoint(text) {
                            Ok(e) => backend = Some(Backend::plain(e, item.pos.line)),
                            Err(e) => self.error(v, format!("invalid dest address: {e}")),
                        }
                    }
                    "name" => extra.0 = self.scalar(key, v).map(str::to_string),
                    "weight" => {
                        extra.1 = self
                            .number(key, v, 1, u64::from(MAX_WEIGHT))
                            .map_or(1, |n| n as u32)
                    }
                    "src" => {
                        extra.2 = self.scalar(key, v).and_then(|t| {
                            parse_host(t)
                                .map_err(|e| self.error(v, format!("invalid src address: {e}")))
                                .ok()
                        })
                    }
                    _ => extra.3 = self.secs(key, v, 0, MAX_DNS_REFRESH_SECS),
                }
            }
            match backend {
                Some(mut b) => {
                    (b.name, b.weight, b.src, b.dns_refresh) = extra;
                    out.push(b);
                }
                None if !self.entries_have(item, "dest") => {
                    self.error(item, "a backend needs 'dest'".into())
                }
                None => {}
            }
        }
        out
    }

    /// `load_balancing:`.
    fn balance(&mut self, node: &Spanned) -> Balance {
        let mut b = Balance::default();
        for (key, v) in self.entries(node, "load_balancing", &BALANCE_KEYS) {
            match key {
                "algorithm" => {
                    let Some(text) = self.scalar(key, v) else {
                        continue;
                    };
                    match Algorithm::from_name(text) {
                        Some(a) => b.algorithm = a,
                        None => {
                            let hint = suggestion(text, &Algorithm::NAMES);
                            let m = format!(
                                "algorithm must be roundrobin, leastconn, random or iphash, not '{}'{hint}",
                                Shown(text)
                            );
                            self.error(v, m);
                        }
                    }
                }
                "health_threshold" => {
                    if let Some(n) = self.number(key, v, 1, 100) {
                        b.health_threshold = n as u32;
                    }
                }
                "recovery_timeout" => {
                    if let Some(t) = self.secs(key, v, 1, 86_400) {
                        b.recovery_timeout = t;
                    }
                }
                "affinity_ttl" => {
                    if let Some(t) = self.secs(key, v, 0, 30 * 86_400) {
                        b.affinity_ttl = t;
                    }
                }
                _ => {
                    if let Some(n) = self.number(key, v, 100, 10_000_000) {
                        b.affinity_max_entries = n as usize;
                    }
                }
            }
        }
        b
    }
}

/// `host:port[/proto]`, `[v6]:port[/proto]`: one side of a YAML rule.
fn endpoint(text: &str) -> Result<Endpoint, String> {
    if is_unix(text) {
        return parse_unix(text);
    }
    let split = if text.starts_with('[') {
        text.find("]:").map(|i| (&text[..=i], &text[i + 2..]))
    } else {
        text.rsplit_once(':')
    };
    let Some((host, port)) = split else {
        return Err(format!("expected HOST:PORT[/PROTO], not '{}'", Shown(text)));
    };
    if host.contains(':') && !host.starts_with('[') {
        return Err(format!(
            "put an IPv6 address in brackets, as in '[::1]:80', not '{}'",
            Shown(text)
        ));
    }
    let host_value = parse_host(host)?;
    let (port, proto) = parse_port(port)?;
    Ok(Endpoint {
        host_text: match &host_value {
            Host::Name(name) if **name == *host => name.clone(),
            _ => host.into(),
        },
        host: host_value,
        port,
        proto,
    })
}

#[cfg(test)]
mod tests;
