//! The pure rinetd.conf parser: text in, [`Config`] or every error out.
//!
//! Grammar (rinetd 0.73, keywords and option names are case-sensitive as in
//! rinetd): one item per line, fields separated by spaces or tabs, `#` starts a
//! comment, blank lines and CRLF endings are fine.
//!
//! ```text
//! bindaddr bindport connectaddr connectport [name=value, ...]
//! allow PATTERN | deny PATTERN
//! logfile PATH | pidlogfile PATH | logcommon
//! ```

mod address;
mod options;
mod pattern;

use address::{parse_host, parse_port};
use options::parse_options;
use pattern::parse_pattern;

use super::bounded::{ErrorSink, LineErrors, Shown};
use super::{
    AclRules, Config, ConfigError, ConfigErrors, Endpoint, Host, Port, Proto, Rule, RuleOptions,
    SpliceMode, MAX_WARNINGS,
};
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

/// The file name `parse` puts in its errors; [`super::load`] replaces it with the path.
pub(crate) const PLACEHOLDER_FILE: &str = "config";

/// What a forwarding rule line must look like; the message for malformed rules.
const RULE_SHAPE: &str = "expected 'bindaddr bindport connectaddr connectport [options]'";

/// Keywords, for the "keywords are lower case" hint.
const KEYWORDS: [&str; 5] = ["allow", "deny", "logfile", "pidlogfile", "logcommon"];

/// Parses rinetd.conf text. Does no I/O and no DNS.
///
/// Every bad line is reported (up to the caps in [`super::bounded`]); the
/// result is `Ok` only when there are none. Accepted-but-dubious lines become
/// [`Config::warnings`]. Never panics, and allocates a small multiple of the
/// text's size at most, whatever the text.
pub fn parse(text: &str) -> Result<Config, ConfigErrors> {
    let mut p = Parser::default();
    for (index, raw) in text.lines().enumerate() {
        p.line(index + 1, raw);
    }
    p.errors.into_result(p.config, PLACEHOLDER_FILE)
}

/// Identity of a listener for duplicate detection before names are resolved.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum HostKey {
    /// A literal address (so `::` and `[::]` are the same).
    Ip(IpAddr),
    /// A host name, lower-cased (DNS names are case-insensitive).
    Name(String),
}

/// Parser state across lines.
#[derive(Default)]
struct Parser {
    /// What has been parsed so far.
    config: Config,
    /// Every error, in line order, under the caps.
    errors: ErrorSink,
    /// Listener identity to the line that first defined it.
    listeners: HashMap<(HostKey, Port, Proto), usize>,
    /// Whether a forwarding rule line (good or bad) has been seen; later ACL lines are per rule.
    seen_rule: bool,
    /// Line of the last `logfile`, to warn about repeats.
    logfile_line: Option<usize>,
    /// Line of the last `pidlogfile`, to warn about repeats.
    pidlogfile_line: Option<usize>,
}

/// Trims the white space rinetd allows around fields (spaces, tabs, CR, ...).
fn trim_ws(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii_whitespace())
}

/// The text before the first `#`.
fn strip_comment(s: &str) -> &str {
    s.split_once('#').map_or(s, |(before, _)| before)
}

impl Parser {
    /// Records an error for `line`.
    fn error(&mut self, line: usize, message: String, text: &str) {
        self.errors.one(line, message, text);
    }

    /// Records a warning for `line`, or only counts it past [`MAX_WARNINGS`].
    fn warn(&mut self, line: usize, message: String, text: &str) {
        if self.config.warnings.len() < MAX_WARNINGS {
            self.config.warnings.push(ConfigError {
                line,
                message,
                text: Shown(text).to_string(),
                more: 0,
            });
        } else {
            self.config.omitted_warnings += 1;
        }
    }

    /// Parses one line (without its line ending).
    fn line(&mut self, line: usize, raw: &str) {
        let text = trim_ws(raw);
        if text.is_empty() || text.starts_with('#') {
            return;
        }
        let word_end = text
            .find(|c: char| c.is_ascii_whitespace() || c == '#')
            .unwrap_or(text.len());
        let (word, rest) = text.split_at(word_end);
        match word {
            "allow" | "deny" => self.acl(line, text, word, rest),
            "logfile" | "pidlogfile" => self.path(line, text, word, rest),
            "logcommon" => {
                if trim_ws(strip_comment(rest)).is_empty() {
                    self.config.logcommon = true;
                } else {
                    self.error(line, "expected 'logcommon' alone".into(), text);
                }
            }
            _ => self.rule(line, text, word),
        }
    }

    /// `allow PATTERN` or `deny PATTERN`.
    fn acl(&mut self, line: usize, text: &str, word: &str, rest: &str) {
        let mut fields = strip_comment(rest).split_ascii_whitespace();
        let (Some(written), None) = (fields.next(), fields.next()) else {
            self.error(line, format!("expected '{word} PATTERN'"), text);
            return;
        };
        let pattern = match parse_pattern(written) {
            Ok(p) => p,
            Err(e) => return self.error(line, e, text),
        };
        let acl: &mut AclRules = if self.seen_rule {
            match self.config.rules.last_mut() {
                Some(rule) => &mut rule.acl,
                // The rule above had errors; the file is rejected anyway.
                None => return,
            }
        } else {
            &mut self.config.global_acl
        };
        if word == "allow" {
            acl.allow.push(pattern);
        } else {
            acl.deny.push(pattern);
        }
    }

    /// `logfile PATH` or `pidlogfile PATH`; PATH may be quoted with `"` or `'`.
    fn path(&mut self, line: usize, text: &str, word: &str, rest: &str) {
        let shape = || format!("expected '{word} PATH' (quote a path that contains spaces)");
        let rest = trim_ws(rest);
        let (path, after) = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => match rest[1..].split_once(q) {
                Some((inside, after)) => (inside, after),
                None => return self.error(line, format!("missing closing {q} in path"), text),
            },
            // A bare path runs to the next white space and may contain '#', as in rinetd.
            Some('#') | None => return self.error(line, shape(), text),
            Some(_) => rest.split_at(
                rest.find(|c: char| c.is_ascii_whitespace())
                    .unwrap_or(rest.len()),
            ),
        };
        let after = trim_ws(after);
        if !(after.is_empty() || after.starts_with('#')) {
            return self.error(line, shape(), text);
        }
        if path.is_empty() {
            return self.error(line, format!("empty path after '{word}'"), text);
        }
        let (slot, seen) = if word == "logfile" {
            (&mut self.config.logfile, &mut self.logfile_line)
        } else {
            (&mut self.config.pidlogfile, &mut self.pidlogfile_line)
        };
        *slot = Some(PathBuf::from(path));
        if let Some(first) = seen.replace(line) {
            self.warn(
                line,
                format!("{word} repeated (previous at line {first}); the last one wins"),
                text,
            );
        }
    }

    /// A forwarding rule.
    fn rule(&mut self, line: usize, text: &str, word: &str) {
        self.seen_rule = true;
        let tokens = tokenize(strip_comment(text));
        if tokens.len() < 4 || tokens[1].starts_with('[') || tokens[3].starts_with('[') {
            let message = match KEYWORDS.iter().find(|k| k.eq_ignore_ascii_case(word)) {
                Some(k) if tokens.len() < 4 => {
                    format!(
                        "unknown keyword '{}' (keywords are lower case: '{k}')",
                        Shown(word)
                    )
                }
                _ => RULE_SHAPE.to_string(),
            };
            return self.error(line, message, text);
        }
        let mut errors = LineErrors::default();
        let bind = endpoint(tokens[0], tokens[1], &mut errors);
        let connect = endpoint(tokens[2], tokens[3], &mut errors);
        let mut options = RuleOptions::default();
        match tokens.get(4) {
            None => {}
            Some(t) if !t.starts_with('[') => {
                errors.push(format!("unexpected '{}' after the connect port", Shown(t)));
            }
            Some(t) => match t.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                None => errors.push("missing ']' after options".into()),
                Some(inner) => options = parse_options(inner, &mut errors),
            },
        }
        if let Some(t) = tokens.get(5) {
            errors.push(format!(
                "unexpected '{}' after the options (put all options in one [...] list)",
                Shown(t)
            ));
        }
        let (Some(bind), Some(connect), true) = (bind, connect, errors.is_empty()) else {
            self.errors.line(line, text, errors);
            return;
        };
        let key_host = match &bind.host {
            Host::Ip(ip) => HostKey::Ip(*ip),
            Host::Name(n) => HostKey::Name(n.to_ascii_lowercase()),
        };
        let key = (key_host, bind.port.clone(), bind.proto);
        if let Some(first) = self.listeners.get(&key) {
            let message = format!(
                "duplicate listener {} {}/{}, first defined at line {first}",
                bind.host_text, bind.port, bind.proto
            );
            return self.error(line, message, text);
        }
        self.listeners.insert(key, line);
        let any_udp = bind.proto == Proto::Udp || connect.proto == Proto::Udp;
        if !any_udp {
            for (set, name) in [
                (options.timeout.is_some(), "timeout"),
                (options.max_assoc.is_some(), "maxassoc"),
            ] {
                if set {
                    let message =
                        format!("option '{name}' only applies to UDP; ignored on this TCP rule");
                    self.warn(line, message, text);
                }
            }
        }
        self.config.rules.push(Rule {
            line,
            bind,
            connect,
            options,
            acl: AclRules::default(),
        });
    }
}

/// Builds one side of a rule, pushing any problems onto `errors`.
fn endpoint(host: &str, port: &str, errors: &mut LineErrors) -> Option<Endpoint> {
    let host_parsed = parse_host(host).map_err(|e| errors.push(e)).ok();
    let port_parsed = parse_port(port).map_err(|e| errors.push(e)).ok();
    let (host_value, (port, proto)) = (host_parsed?, port_parsed?);
    Some(Endpoint {
        host: host_value,
        host_text: host.to_string(),
        port,
        proto,
    })
}

/// Splits a rule into fields. The first four end at white space (the port
/// fields also at `[`, since rinetd allows `80[timeout=5]`); from the fifth on,
/// a field starting with `[` runs to the matching `]` and may contain spaces.
///
/// Stops after [`MAX_TOKENS`]: a rule has at most five fields, and the sixth
/// is only needed to report that there is one too many. A line of a million
/// words must not become a vector of a million slices.
fn tokenize(s: &str) -> Vec<&str> {
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
        if bytes[i] == b'[' && tokens.len() >= 4 {
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

impl fmt::Display for Host {
    /// The address or name, IPv6 without brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(ip) => ip.fmt(f),
            Host::Name(name) => f.write_str(name),
        }
    }
}

impl fmt::Display for Port {
    /// The number or the service name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Port::Number(n) => n.fmt(f),
            Port::Service(name) => f.write_str(name),
        }
    }
}

impl fmt::Display for Endpoint {
    /// `host port/proto`, the host as written: the two fields of a rule.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.host_text, self.port, self.proto)
    }
}

impl fmt::Display for SpliceMode {
    /// `on`, `off` or `auto`, as in the option.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpliceMode::Auto => "auto",
            SpliceMode::On => "on",
            SpliceMode::Off => "off",
        })
    }
}

impl fmt::Display for RuleOptions {
    /// `[timeout=30, src=10.0.0.1]`, only the options given; empty when none are.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = self.timeout {
            parts.push(format!("timeout={}", t.as_secs()));
        }
        if let Some(src) = &self.src {
            parts.push(format!("src={src}"));
        }
        if let Some(s) = self.splice {
            parts.push(format!("splice={s}"));
        }
        if let Some(n) = self.max_assoc {
            parts.push(format!("maxassoc={n}"));
        }
        if parts.is_empty() {
            Ok(())
        } else {
            write!(f, "[{}]", parts.join(", "))
        }
    }
}

impl fmt::Display for Rule {
    /// The rule as a config line, in canonical form (protocols always written).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.bind, self.connect)?;
        if self.options != RuleOptions::default() {
            write!(f, " {}", self.options)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
