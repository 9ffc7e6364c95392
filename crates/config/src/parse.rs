//! The pure rinetd.conf parser: text in, [`Config`] or every error out.
//!
//! Grammar (rinetd 0.73, keywords and option names are case-sensitive as in
//! rinetd): one item per line, fields separated by spaces or tabs, `#` starts a
//! comment, blank lines and CRLF endings are fine.
//!
//! ```text
//! bindaddr bindport connectaddr connectport [name=value, ...]
//! allow PATTERN | deny PATTERN
//! logfile PATH | pidlogfile PATH | pidfile PATH | logcommon | statusfile PATH
//! include FILE|GLOB
//! buffersize N | connect-timeout N | dns-refresh N | ... (see parse/globals.rs)
//! ```

mod options;
mod pattern;

pub use super::address::{parse_host, parse_port};
use options::parse_options;
pub use pattern::parse_pattern;

use super::bounded::{ErrorSink, LineErrors, Shown};
use super::checks::check_rule;
use super::hint::closest;
use super::include::{IncludeSource, IncludedFile};
use super::settings::{self, Setting, Slot, Syntax, Value};
use super::unix::{self, is_unix};
use super::{
    AclRules, Backend, Balance, Config, ConfigError, ConfigErrors, Endpoint, Host, Include,
    Options, Port, Proto, Rule, RuleOptions, SpliceMode, MAX_CONFIG_BYTES, MAX_INCLUDED_FILES,
    MAX_INCLUDE_DEPTH, MAX_WARNINGS,
};
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// The file name `parse` puts in its errors; [`super::load`] replaces it with the path.
pub const PLACEHOLDER_FILE: &str = "config";

/// The error for `proxy=v1` on a rule whose backend is `/udp`, in either
/// format: a version 1 header is a text line for streams (`TCP4`, `TCP6`),
/// with no way to say UDP, and sending version 2 instead would silently
/// differ from what the file asks for.
pub const PROXY_V1_UDP: &str =
    "proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose backend is /udp";

/// The error for `proxy=v1` on a UDP → TCP rule (a `/udp` listener, a TCP
/// backend), in either format, for the same reason: the client is a UDP
/// peer, which a version 1 line cannot say, so oi would have to send
/// version 2 to a backend the file says expects version 1.
pub const PROXY_V1_UDP_LISTENER: &str =
    "proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose listener is /udp";

/// What a forwarding rule line must look like; the message for malformed rules.
const RULE_SHAPE: &str = "expected 'bindaddr bindport connectaddr connectport [options]'";

/// The same, for a line with a `unix:` side (which has no port field).
const UNIX_RULE_SHAPE: &str =
    "expected 'bindaddr bindport connectaddr connectport [options]', with 'unix:PATH' in place of an address and its port";

/// Another name for `pidlogfile` (rinetd's manual uses both).
const PIDFILE_ALIAS: &str = "pidfile";

/// Whether `word` is a keyword, and the closest keyword (for hints).
fn keyword_hint(word: &str) -> Option<&'static str> {
    let mut all = settings::global_keywords();
    all.push(PIDFILE_ALIAS);
    all.iter()
        .find(|k| k.eq_ignore_ascii_case(word))
        .copied()
        .or_else(|| closest(word, &all))
}

/// Parses rinetd.conf text. Does no I/O and no DNS; an `include` line is an
/// error (use [`parse_with_includes`]).
///
/// Every bad line is reported (up to the caps in [`super::bounded`]); the
/// result is `Ok` only when there are none. Accepted-but-dubious lines become
/// [`Config::warnings`]. Never panics, and allocates a small multiple of the
/// text's size at most, whatever the text.
pub fn parse(text: &str) -> Result<Config, ConfigErrors> {
    let mut p = Parser::default();
    p.text(text);
    p.errors.into_result(p.config, PLACEHOLDER_FILE)
}

/// Parses rinetd.conf text whose `include` lines read files through
/// `source`: relative to the including file, sorted, nested up to
/// [`MAX_INCLUDE_DEPTH`] levels, cycles refused with their chain, each file
/// and the total under [`MAX_CONFIG_BYTES`]. Errors in an included file name
/// that file and its line.
pub fn parse_with_includes(
    text: &str,
    source: &mut dyn IncludeSource,
) -> Result<Config, ConfigErrors> {
    match parse_with_includes_partial(text, source, None) {
        (config, None) => Ok(config),
        (_, Some(errors)) => Err(errors),
    }
}

/// Like [`parse_with_includes`], but also returns what did parse when some
/// lines did not: the rules without errors, so `--check` can look up their
/// names in the same run and report name errors beside the syntax errors.
///
/// With `rule_budget`, a file whose first pass counts more rules than that
/// (with those of the files before it) stops the parse before its rules are
/// built, and `rules_over_budget` in the result says how many were counted:
/// a reload refused by the descriptor budget so builds none of the rules it
/// refuses (they cost memory the allocator kept after the refusal).
pub fn parse_with_includes_partial(
    text: &str,
    source: &mut dyn IncludeSource,
    rule_budget: Option<usize>,
) -> (Config, Option<ConfigErrors>) {
    let main = source.main_file();
    let mut p = Parser {
        main_name: main.name.as_str().into(),
        stack: vec![main],
        total_bytes: text.len(),
        source: Some(source),
        rule_budget,
        ..Parser::default()
    };
    p.text(text);
    if let Some(counted) = p.rules_over_budget {
        p.config.rules = Vec::new();
        p.config.rules_over_budget = Some(counted);
    }
    // Growth by doubling left up to half the rules' space unused.
    p.config.rules.shrink_to_fit();
    let errors = p.errors.into_result((), PLACEHOLDER_FILE).err();
    (p.config, errors)
}

/// Identity of a listener for duplicate detection before names are resolved.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum HostKey {
    /// A literal address (so `::` and `[::]` are the same).
    Ip(IpAddr),
    /// A host name, lower-cased (DNS names are case-insensitive): the
    /// rule's own name when it is lower case already, not a copy.
    Name(Arc<str>),
    /// A unix socket, as written.
    Unix(super::UnixAddr),
}

/// Where something was written: a file (`None` for the main one) and a line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Place {
    /// The included file, or `None` for the main file.
    file: Option<Arc<str>>,
    /// 1-based line.
    line: usize,
}

/// Parser state across lines and included files.
#[derive(Default)]
struct Parser<'s> {
    /// What has been parsed so far.
    config: Config,
    /// Every error, in line order, under the caps.
    errors: ErrorSink,
    /// Listener identity to where it was first defined.
    listeners: HashMap<(HostKey, Port, Proto), (Place, super::sni::Names)>,
    /// Whether a forwarding rule line (good or bad) has been seen; later ACL lines are per rule.
    seen_rule: bool,
    /// The rules the last rule line made (several for a port range): where
    /// the allow/deny/trust-proxy lines after it go.
    last_rules: std::ops::Range<usize>,
    /// Where each path or one-value keyword was last set, to warn about repeats.
    set_at: HashMap<&'static str, Place>,
    /// Where included files come from; `None` when includes are not allowed.
    source: Option<&'s mut dyn IncludeSource>,
    /// The main file's name, for messages that point from one file into another.
    main_name: Arc<str>,
    /// The files being read, outermost first: the include chain, for cycles.
    stack: Vec<IncludedFile>,
    /// Included files read so far (at most [`MAX_INCLUDED_FILES`]).
    files_read: usize,
    /// Bytes of text read so far, all files together (at most [`MAX_CONFIG_BYTES`]).
    total_bytes: usize,
    /// Set once the rules reach [`super::MAX_RULES`]: later rule lines are skipped.
    over_budget: bool,
    /// Most rules the caller takes (a reload's descriptor budget); past it
    /// no further rule is built ([`parse_with_includes_partial`]).
    rule_budget: Option<usize>,
    /// The rules the first pass counted when they went past `rule_budget`.
    rules_over_budget: Option<usize>,
}

/// Trims the white space rinetd allows around fields (spaces, tabs, CR, ...).
fn trim_ws(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii_whitespace())
}

/// The text before the first `#`.
fn strip_comment(s: &str) -> &str {
    s.split_once('#').map_or(s, |(before, _)| before)
}

impl Parser<'_> {
    /// Parses every line of one file's text; a file whose rules would take
    /// the total past [`super::MAX_RULES`] is refused before any is built
    /// (as YAML past its node budget): building them first left what the
    /// allocator could not give back, 9 MiB after a refused reload.
    fn text(&mut self, text: &str) {
        if !self.over_budget {
            match past_budget(text, self.config.rules.len()) {
                Err(line) => {
                    self.over_budget = true;
                    let raw = text.lines().nth(line - 1).unwrap_or("");
                    return self.error(line, super::too_many_rules(), trim_ws(raw));
                }
                Ok(total) if self.rule_budget.is_some_and(|most| total > most) => {
                    self.over_budget = true;
                    self.rules_over_budget = Some(total);
                    return;
                }
                // Room for the rules counted, once: doubling as they came
                // left up to half the list unused (9 MiB of 26,000 rules).
                Ok(total) => {
                    let more = total.saturating_sub(self.config.rules.len());
                    self.config.rules.reserve_exact(more);
                }
            }
        }
        for (index, raw) in text.lines().enumerate() {
            self.line(index + 1, raw);
        }
    }

    /// Where `line` of the file being read is.
    fn here(&self, line: usize) -> Place {
        Place {
            file: self.errors.file(),
            line,
        }
    }

    /// `line N` for a place in the file being read, else `FILE:N`.
    fn describe(&self, place: &Place) -> String {
        if place.file == self.errors.file() {
            format!("line {}", place.line)
        } else {
            let file = place.file.as_deref().unwrap_or(&self.main_name);
            format!("{file}:{}", place.line)
        }
    }

    /// Records an error for `line`.
    fn error(&mut self, line: usize, message: String, text: &str) {
        self.errors.one(line, message, text);
    }

    /// Records a warning for `line`, or only counts it past [`MAX_WARNINGS`].
    fn warn(&mut self, line: usize, message: String, text: &str) {
        if self.config.warnings.len() < MAX_WARNINGS {
            self.config.warnings.push(ConfigError {
                file: self.errors.file(),
                line,
                column: 0,
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
        if word == PIDFILE_ALIAS {
            return self.path(line, text, word, rest);
        }
        let Some(setting) = settings::global_keyword(word) else {
            return self.rule(line, text, word);
        };
        match setting.value {
            Value::Pattern => self.acl(line, text, word, rest),
            Value::Path | Value::Glob => self.path(line, text, word, rest),
            Value::Flag => {
                if !trim_ws(strip_comment(rest)).is_empty() {
                    return self.error(line, format!("expected '{word}' alone"), text);
                }
                if let Some(Slot::Flag(on)) = setting.global.map(|at| at(&mut self.config)) {
                    *on = true;
                }
            }
            _ => self.global(line, text, setting, rest),
        }
    }

    /// A one-value global line: `buffersize 65536`, `dns-multi-ip-proto any`, ...
    fn global(&mut self, line: usize, text: &str, setting: &Setting, rest: &str) {
        let word = setting.name();
        let mut fields = strip_comment(rest).split_ascii_whitespace();
        let (Some(value), None) = (fields.next(), fields.next()) else {
            return self.error(line, format!("expected '{word} VALUE'"), text);
        };
        let Some(at) = setting.global else {
            return self.error(line, format!("unknown keyword '{}'", Shown(word)), text);
        };
        match settings::store(setting, at(&mut self.config), Syntax::Conf, word, value) {
            Err(e) => self.error(line, e, text),
            Ok(_) => self.note_repeat(line, text, word),
        }
    }

    /// Warns when `word` was set before; remembers where it is set now.
    fn note_repeat(&mut self, line: usize, text: &str, word: &str) {
        // `pidfile` and `pidlogfile` set the same thing.
        let key = if word == PIDFILE_ALIAS {
            "pidlogfile"
        } else {
            settings::global_keyword(word)
                .and_then(|s| s.conf)
                .unwrap_or("")
        };
        let here = self.here(line);
        if let Some(first) = self.set_at.insert(key, here) {
            let at = self.describe(&first);
            self.warn(
                line,
                format!("{word} repeated (previous at {at}); the last one wins"),
                text,
            );
        }
    }

    /// `include PATTERN`: every file it names, in order, as if written here.
    fn include(&mut self, line: usize, text: &str, pattern: &str) {
        let Some(source) = self.source.as_deref_mut() else {
            return self.error(
                line,
                "include is not available here (the text has no file to be relative to)".into(),
                text,
            );
        };
        let Some(from) = self.stack.last().cloned() else {
            return;
        };
        let files = match source.expand(&from, pattern) {
            Ok(f) => f,
            Err(e) => {
                let message = format!("cannot expand include pattern '{}': {e}", Shown(pattern));
                return self.error(line, message, text);
            }
        };
        let from_file = self.errors.file();
        if files.is_empty() {
            let message = format!("include pattern '{}' matches no files", Shown(pattern));
            self.warn(line, message, text);
        }
        // Recorded before the files are read, so outer includes come first.
        let record = self.config.includes.len();
        self.config.includes.push(Include {
            from: from_file.clone(),
            line,
            pattern: pattern.to_string(),
            files: Vec::new(),
        });
        for file in files {
            if let Some(at) = self.stack.iter().position(|f| f.key == file.key) {
                // Each name cut on its own: the chain is at most
                // MAX_INCLUDE_DEPTH + 1 names, and every one stays readable.
                let chain: Vec<String> = self.stack[at..]
                    .iter()
                    .chain(std::iter::once(&file))
                    .map(|f| Shown(&f.name).to_string())
                    .collect();
                let message = format!("include cycle (circular include): {}", chain.join(" -> "));
                self.error(line, message, text);
                continue;
            }
            if self.stack.len() >= MAX_INCLUDE_DEPTH {
                let message = format!(
                    "maximum include depth exceeded ({MAX_INCLUDE_DEPTH} files deep, the main file included): '{}' not read",
                    Shown(&file.name)
                );
                self.error(line, message, text);
                break;
            }
            if self.files_read >= MAX_INCLUDED_FILES {
                let message =
                    format!("more than {MAX_INCLUDED_FILES} included files; the rest are not read");
                self.error(line, message, text);
                break;
            }
            self.files_read += 1;
            let read = match self.source.as_deref_mut() {
                Some(source) => source.read(&file),
                None => return,
            };
            let body = match read {
                Ok(b) => b,
                Err(e) => {
                    let message = format!("cannot read included file '{}': {e}", Shown(&file.name));
                    self.error(line, message, text);
                    continue;
                }
            };
            self.total_bytes = self.total_bytes.saturating_add(body.len());
            if self.total_bytes as u64 > MAX_CONFIG_BYTES {
                let message = format!(
                    "included files exceed {} MiB ({MAX_CONFIG_BYTES} bytes) in all, the most oi reads: '{}' not read",
                    MAX_CONFIG_BYTES / (1024 * 1024),
                    Shown(&file.name)
                );
                self.error(line, message, text);
                break;
            }
            let name: Arc<str> = file.name.as_str().into();
            if let Some(r) = self.config.includes.get_mut(record) {
                r.files.push(name.clone());
            }
            self.stack.push(file);
            self.errors.set_file(Some(name));
            self.text(&body);
            self.errors.set_file(from_file.clone());
            self.stack.pop();
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
        let push = |acl: &mut AclRules, pattern: crate::Pattern| match word {
            "allow" => acl.allow.push(pattern),
            "deny" => acl.deny.push(pattern),
            _ => acl.trust_proxy.push(pattern),
        };
        if !self.seen_rule {
            return push(&mut self.config.global_acl, pattern);
        }
        // Every rule of the line above (every port of a range); none when it
        // had errors (the file is rejected anyway).
        let range = self.last_rules.clone();
        if let Some(rules) = self.config.rules.get_mut(range) {
            for rule in rules {
                push(&mut rule.acl, pattern.clone());
            }
        }
    }

    /// `logfile PATH` or `pidlogfile PATH`; PATH may be quoted with `"` or `'`.
    fn path(&mut self, line: usize, text: &str, word: &str, rest: &str) {
        let what = if word == "include" { "FILE" } else { "PATH" };
        let shape = || {
            format!(
                "expected '{word} {what}' (quote a {} that contains spaces)",
                what.to_ascii_lowercase()
            )
        };
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
        if word == "include" {
            return self.include(line, text, path);
        }
        let key = if word == PIDFILE_ALIAS {
            "pidlogfile"
        } else {
            word
        };
        let slot = settings::global_keyword(key)
            .and_then(|s| s.global)
            .map(|at| at(&mut self.config));
        let Some(Slot::Path(slot)) = slot else {
            return self.error(line, format!("unknown keyword '{}'", Shown(word)), text);
        };
        // The exact bytes written (see `bytes`).
        *slot = Some(super::bytes::path(path));
        self.note_repeat(line, text, word);
    }

    /// A forwarding rule.
    fn rule(&mut self, line: usize, text: &str, word: &str) {
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
        if options.proxy == Some(super::ProxyHeader::V1) {
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
        let name = super::sni::name_in(bind.proto, &options);
        if let Some((first, taken)) = self.listeners.get(&key) {
            if let Some(why) = super::sni::clash(taken, name) {
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
        if self.config.rules.len() >= super::MAX_RULES {
            self.over_budget = true;
            return self.error(line, super::too_many_rules(), text);
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

/// `text`'s rules, counted roughly (a port range as its width, any other
/// line with a rule's fields that is not a keyword as one rule), added to
/// `before`: `Ok(total)` when it is at most [`super::MAX_RULES`], else
/// `Err(line)` for the line that goes past it. Builds nothing, so a file of
/// millions of rules costs a scan, not their memory.
fn past_budget(text: &str, before: usize) -> Result<usize, usize> {
    let mut total = before;
    for (index, raw) in text.lines().enumerate() {
        let text = trim_ws(strip_comment(raw));
        let mut words = text.split_ascii_whitespace();
        let Some(word) = words.next() else { continue };
        if word == PIDFILE_ALIAS || settings::global_keyword(word).is_some() {
            continue;
        }
        // A rule has four fields, or fewer with a `unix:` side (the shortest,
        // `unix:A unix:B`, has two): other lines keep their own errors.
        let Some(second) = words.next() else { continue };
        let rest = words.take(2).count();
        let unix = [word, second].iter().any(|w| w.starts_with("unix:"));
        if rest < 2 && !unix {
            continue;
        }
        let width = Some(second)
            .and_then(|port| port.split('/').next())
            .and_then(|port| port.split_once('-'))
            .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)))
            .map_or(1, |(a, b)| usize::from(b.saturating_sub(a)) + 1);
        total = total.saturating_add(width);
        if total > super::MAX_RULES {
            return Err(index + 1);
        }
    }
    Ok(total)
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
        [unix] => return unix::parse_unix(unix).map_err(|e| errors.push(e)).ok(),
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

impl fmt::Display for Host {
    /// The address or name, IPv6 without brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(ip) => ip.fmt(f),
            Host::Name(name) => f.write_str(name),
            Host::Unix(addr) => addr.fmt(f),
        }
    }
}

impl fmt::Display for Port {
    /// The number or the service name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Port::Number(n) => n.fmt(f),
            Port::Service(name) => f.write_str(name),
            Port::None => Ok(()),
        }
    }
}

impl fmt::Display for Endpoint {
    /// `host port/proto`, the host as written: the two fields of a rule;
    /// a unix socket side is its one field, `unix:/path` or `unix:@name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(addr) = self.unix() {
            return addr.fmt(f);
        }
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
    /// `[timeout=30, src=10.0.0.1]`, only the options given, in the table's
    /// order; empty when none are.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = super::settings::written(self);
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
        write!(f, "{} {}", self.bind, self.connect())?;
        if self.options != RuleOptions::default() {
            write!(f, " {}", self.options)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_uv;
