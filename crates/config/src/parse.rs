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
//! buffersize N | connect-timeout N | dns-refresh N | ... (see settings/table.rs)
//! ```
//!
//! This file reads lines and the keywords of one line each (globals, ACLs,
//! paths); `parse/rule.rs` reads forwarding rules, `parse/options.rs` their
//! `[...]` options, `parse/include.rs` included files, `parse/pattern.rs`
//! ACL patterns, and `parse/display.rs` writes the model back as text.

mod display;
mod include;
mod options;
mod pattern;
mod rule;

pub use super::address::{parse_host, parse_port};
pub use pattern::parse_pattern;

use super::bounded::{ErrorSink, Shown};
use super::hint::closest;
use super::include::{IncludeSource, IncludedFile};
use super::settings::{self, Setting, Slot, Syntax, Value};
use super::{AclRules, Config, ConfigError, ConfigErrors, Port, Proto, MAX_WARNINGS};
use std::collections::HashMap;
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

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_uv;
