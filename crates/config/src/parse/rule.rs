//! Forwarding rule lines: `bindaddr bindport connectaddr connectport
//! [options]`, a `unix:` side in place of an address and its port, and
//! port ranges (`8000-8099`) expanded to one rule per port. How a line
//! splits into fields, how each side is read, and the checks a rule passes
//! before it joins the configuration (duplicate listeners, server names,
//! the rule budget).

use super::options::parse_options;
use super::{
    keyword_hint, parse_host, parse_port, strip_comment, HostKey, Parser, PROXY_V1_UDP,
    PROXY_V1_UDP_LISTENER,
};
use crate::bounded::{LineErrors, Shown};
use crate::checks::check_rule;
use crate::unix::{is_unix, parse_unix};
use crate::{
    AclRules, Backend, Balance, Endpoint, Host, Options, Proto, ProxyHeader, Rule, RuleOptions,
};

/// What a forwarding rule line must look like; the message for malformed rules.
const RULE_SHAPE: &str = "expected 'bindaddr bindport connectaddr connectport [options]'";

/// The same, for a line with a `unix:` side (which has no port field).
const UNIX_RULE_SHAPE: &str =
    "expected 'bindaddr bindport connectaddr connectport [options]', with 'unix:PATH' in place of an address and its port";

impl Parser<'_> {
    /// A forwarding rule.
    pub(super) fn rule(&mut self, line: usize, text: &str, word: &str) {
        self.seen_rule = true;
        let start = self.config.rules.len();
        self.last_rules = start..start;
        if self.over_budget {
            // Said once; nothing after it is read (nor its ranges expanded).
            return;
        }
        let mut tokens = tokenize(strip_comment(text), 4);
        // rinetd-uv's `unix:PATH` endpoints have no port field: a side is
        // one field then, and the options start earlier.
        if tokens.iter().take(4).any(|t| is_unix(t)) {
            let fixed = side_fields(&tokens, 0) + side_fields(&tokens, side_fields(&tokens, 0));
            tokens = tokenize(strip_comment(text), fixed);
            self.rule_fields(line, text, word, &tokens);
            self.last_rules = start..self.config.rules.len();
            return;
        }
        if tokens.len() >= 4 && !tokens[1].starts_with('[') && !tokens[3].starts_with('[') {
            match port_ranges(tokens[1], tokens[3]) {
                Ok(None) => {}
                Ok(Some(pairs)) => {
                    for (bind_port, connect_port) in &pairs {
                        let mut each = tokens.clone();
                        each[1] = bind_port;
                        each[3] = connect_port;
                        // One error report for the line, not one per port.
                        let before = self.errors.count();
                        self.rule_fields(line, text, word, &each);
                        if self.errors.count() > before {
                            break;
                        }
                    }
                    self.last_rules = start..self.config.rules.len();
                    return;
                }
                Err(e) => return self.error(line, e, text),
            }
        }
        self.rule_fields(line, text, word, &tokens);
        self.last_rules = start..self.config.rules.len();
    }

    /// A forwarding rule's fields, already split (one port of a range at a time).
    fn rule_fields(&mut self, line: usize, text: &str, word: &str, tokens: &[&str]) {
        let bind_n = side_fields(tokens, 0);
        let sides = bind_n + side_fields(tokens, bind_n);
        // A port field starting with `[` is the options coming too early
        // (a host field may: `[::1]`); a `unix:` side has no port field.
        let port_at = |at: usize| (side_fields(tokens, at) == 2).then_some(at + 1);
        let short = tokens.len() < sides
            || [port_at(0), port_at(bind_n)]
                .into_iter()
                .flatten()
                .any(|i| tokens.get(i).is_some_and(|t| t.starts_with('[')));
        if short {
            // The hint's edit distances only for an error that is listed.
            let message = || match keyword_hint(word) {
                Some(k) if tokens.len() < 4 && k.eq_ignore_ascii_case(word) => {
                    format!(
                        "unknown keyword '{}' (keywords are lower case: '{k}')",
                        Shown(word)
                    )
                }
                Some(k) if tokens.len() < 4 => {
                    format!("unknown keyword '{}' (did you mean '{k}'?)", Shown(word))
                }
                _ if sides != 4 => UNIX_RULE_SHAPE.to_string(),
                _ => RULE_SHAPE.to_string(),
            };
            return self.errors.one_with(line, message, text);
        }
        let mut errors = self.errors.problems();
        let bind = endpoint(&tokens[..bind_n], &mut errors);
        let connect = endpoint(&tokens[bind_n..sides], &mut errors);
        let mut options = RuleOptions::default();
        match tokens.get(sides) {
            None => {}
            Some(t) if !t.starts_with('[') => {
                let after = if sides - bind_n == 1 {
                    "the unix socket"
                } else {
                    "the connect port"
                };
                errors.push(format!("unexpected '{}' after {after}", Shown(t)));
            }
            Some(t) => match t.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                None => errors.push("missing ']' after options".into()),
                Some(inner) => options = parse_options(inner, &mut errors),
            },
        }
        if let Some(t) = tokens.get(sides + 1) {
            errors.push(format!(
                "unexpected '{}' after the options (put all options in one [...] list)",
                Shown(t)
            ));
        }
        if options.proxy == Some(ProxyHeader::V1) {
            if connect.as_ref().is_some_and(|c| c.proto == Proto::Udp) {
                errors.push(PROXY_V1_UDP.to_string());
            } else if bind.as_ref().is_some_and(|b| b.proto == Proto::Udp) {
                errors.push(PROXY_V1_UDP_LISTENER.to_string());
            }
        }
        let (Some(bind), Some(connect), true) = (bind, connect, errors.is_empty()) else {
            self.errors.line(line, text, errors);
            return;
        };
        let backends = vec![Backend::plain(connect, line)];
        let (unix_errors, unix_warnings) = check_rule(&bind, &backends, &options);
        if !unix_errors.is_empty() {
            for e in unix_errors {
                errors.push(e);
            }
            self.errors.line(line, text, errors);
            return;
        }
        let key_host = match &bind.host {
            Host::Ip(ip) => HostKey::Ip(*ip),
            Host::Name(n) if !n.bytes().any(|b| b.is_ascii_uppercase()) => HostKey::Name(n.clone()),
            Host::Name(n) => HostKey::Name(n.to_ascii_lowercase().into()),
            Host::Unix(addr) => HostKey::Unix(addr.clone()),
        };
        let key = (key_host, bind.port.clone(), bind.proto);
        // Rules may share a listener by server name (`[sni=]`, `super::sni`).
        let name = crate::sni::name_in(bind.proto, &options);
        if let Some((first, taken)) = self.listeners.get(&key) {
            if let Some(why) = crate::sni::clash(taken, name) {
                let message = format!(
                    "duplicate listener {bind}, first defined at {}{why}",
                    self.describe(first)
                );
                return self.error(line, message, text);
            }
        }
        let name = name.map(str::to_string);
        match self.listeners.get_mut(&key) {
            Some((_, taken)) => taken.push(name),
            None => {
                let here = self.here(line);
                self.listeners.insert(key, (here, vec![name]));
            }
        }
        if self.config.rules.len() >= crate::MAX_RULES {
            self.over_budget = true;
            return self.error(line, crate::too_many_rules(), text);
        }
        for warning in unix_warnings {
            self.warn(line, warning, text);
        }
        self.config.rules.push(Rule {
            file: self.errors.file(),
            line,
            name: None,
            bind,
            backends,
            balance: Balance::default(),
            // The ports of a range, and rules written alike, share one record.
            options: match self.config.rules.last() {
                Some(last) => Options::shared_with(options, &last.options),
                None => options.into(),
            },
            acl: AclRules::default(),
        });
    }
}

/// Ports a range rule expands to: `8000-8099` with `9000-9099` (the same
/// length, mapped in order) or with `9000` (all to one port), either side
/// with its `/tcp` or `/udp`. `None` when the bind port is not a range.
fn port_ranges(bind: &str, connect: &str) -> Result<Option<Vec<(String, String)>>, String> {
    let split = |field: &str| -> (String, String) {
        match field.split_once('/') {
            Some((p, proto)) => (p.to_string(), format!("/{proto}")),
            None => (field.to_string(), String::new()),
        }
    };
    let range = |p: &str| -> Option<Result<(u16, u16), String>> {
        // `snmp-trap` is a service name, not a range: ranges start with a digit.
        if !p.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let (a, b) = p.split_once('-')?;
        let parse = |x: &str| {
            x.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| x.parse::<u16>().ok())
                .flatten()
                .filter(|n| *n > 0)
        };
        Some(match (parse(a), parse(b)) {
            (Some(a), Some(b)) if a <= b => Ok((a, b)),
            (Some(_), Some(_)) => Err(format!(
                "port range '{}' runs backwards (write the lower port first)",
                Shown(p)
            )),
            _ => Err(format!(
                "invalid port range '{}' (expected FIRST-LAST, ports 1-65535)",
                Shown(p)
            )),
        })
    };
    let (bind_port, bind_proto) = split(bind);
    let Some(bind_range) = range(&bind_port) else {
        return Ok(None);
    };
    let (first, last) = bind_range?;
    let (connect_port, connect_proto) = split(connect);
    let count = usize::from(last - first) + 1;
    let targets: Vec<u16> = match range(&connect_port) {
        Some(r) => {
            let (c_first, c_last) = r?;
            if c_last - c_first != last - first {
                return Err(format!(
                    "port ranges '{}' and '{}' differ in length ({count} and {} ports)",
                    Shown(&bind_port),
                    Shown(&connect_port),
                    usize::from(c_last - c_first) + 1
                ));
            }
            (c_first..=c_last).collect()
        }
        None => {
            let one: u16 = connect_port
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    format!(
                        "a port range maps to a range of the same length or to one port number, not '{}'",
                        Shown(&connect_port)
                    )
                })?;
            vec![one; count]
        }
    };
    Ok(Some(
        (first..=last)
            .zip(targets)
            .map(|(b, c)| (format!("{b}{bind_proto}"), format!("{c}{connect_proto}")))
            .collect(),
    ))
}

/// Builds one side of a rule from its fields (`host port`, or one
/// `unix:...` field), pushing any problems onto `errors`.
fn endpoint(fields: &[&str], errors: &mut LineErrors) -> Option<Endpoint> {
    let (host, port) = match fields {
        [unix] => return parse_unix(unix).map_err(|e| errors.push(e)).ok(),
        [host, port] => (*host, *port),
        _ => return None,
    };
    let host_parsed = parse_host(host).map_err(|e| errors.push(e)).ok();
    let port_parsed = parse_port(port).map_err(|e| errors.push(e)).ok();
    let (host_value, (port, proto)) = (host_parsed?, port_parsed?);
    Some(Endpoint {
        host_text: match &host_value {
            Host::Name(name) if **name == *host => name.clone(),
            _ => host.into(),
        },
        host: host_value,
        port,
        proto,
    })
}

/// How many fields the rule side starting at `tokens[at]` takes: one for
/// `unix:...`, else two (host and port).
fn side_fields(tokens: &[&str], at: usize) -> usize {
    match tokens.get(at) {
        Some(t) if is_unix(t) => 1,
        _ => 2,
    }
}

/// Splits a rule into fields. The first `fixed` (the two sides: four, fewer
/// with `unix:` sides) end at white space (the port fields also at `[`,
/// since rinetd allows `80[timeout=5]`); after them, a field starting with
/// `[` runs to the matching `]` and may contain spaces.
///
/// Stops after [`MAX_TOKENS`]: a rule has at most five fields, and the sixth
/// is only needed to report that there is one too many. A line of a million
/// words must not become a vector of a million slices.
fn tokenize(s: &str, fixed: usize) -> Vec<&str> {
    let bytes = s.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while tokens.len() < MAX_TOKENS {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == bytes.len() {
            return tokens;
        }
        let start = i;
        if bytes[i] == b'[' && tokens.len() >= fixed {
            i = s[i..].find(']').map_or(bytes.len(), |j| i + j + 1);
        } else {
            let bracketed = bytes[i] == b'[';
            i += 1;
            while i < bytes.len()
                && !bytes[i].is_ascii_whitespace()
                && (bracketed || bytes[i] != b'[')
            {
                i += 1;
            }
        }
        tokens.push(&s[start..i]);
    }
    tokens
}

/// Fields [`tokenize`] returns at most: the five of a rule and one extra to complain about.
const MAX_TOKENS: usize = 6;
