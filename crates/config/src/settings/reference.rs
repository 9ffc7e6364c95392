//! The reference pages, written from the table: oi.conf(5) (roff, around
//! the hand-written prose of `dist/oi.conf.5.in`) and `docs/reference.md`.
//! `examples/gen-docs.rs` writes the first at packaging time; the second is
//! committed, and a test keeps it equal to [`markdown`].

use super::{Applies, Place, Setting, SETTINGS};

/// The precedence rule, in words, for both pages.
pub const PRECEDENCE: &str = "Every setting is decided the same way: a command-line flag, when \
     given, wins over the rule's option, which wins over the global line (YAML: the key under \
     global:), which wins over the built-in default. Settings read at start only (buffersize) \
     are not changed by a reload.";

/// The hand-written part of oi.conf(5); `@NAME@` lines are replaced.
const MAN_TEMPLATE: &str = include_str!("../../../../dist/oi.conf.5.in");

/// Which rules a setting acts on, in words.
fn applies_text(a: Applies) -> &'static str {
    match a {
        Applies::Udp => "rules with a UDP side (a warning on others)",
        Applies::TcpBackend => "rules with a TCP or unix socket backend (a warning on others)",
        Applies::TcpListener => {
            "rules with a TCP or unix socket listener (a warning on a /udp listener)"
        }
        Applies::UnixListener => "unix socket listeners with a file (a warning on others)",
        Applies::IpClient => "rules whose clients have an address (a warning on unix listeners)",
        Applies::IpBackend => "IP backends (a warning for a unix socket backend)",
    }
}

/// The facts of one setting as `(label, text)` pairs, in print order.
fn facts(s: &Setting) -> Vec<(&'static str, String)> {
    let mut out = vec![("Value", s.value_text())];
    out.push(("Default", s.default_text()));
    if let Some(key) = s.yaml {
        let place = match s.yaml_place {
            Place::Rule => "in a rule",
            Place::Global => "under global:",
            Place::RuleAndGlobal => "in a rule or under global:",
            Place::Backend => "in a backend of connect:",
        };
        out.push(("YAML", format!("{key} ({place})")));
    }
    if let Some(flag) = s.flag {
        out.push(("Command line", format!("{flag} (wins over the file)")));
    }
    let place = match s.place {
        Place::Rule => "a rule's options",
        Place::Global => "a global line",
        Place::RuleAndGlobal => "a rule or a global line",
        Place::Backend => "a YAML backend",
    };
    if s.conf.is_some() {
        out.push(("Written", place.to_string()));
    }
    if !s.applies.is_empty() {
        let texts: Vec<&str> = s.applies.iter().map(|a| applies_text(*a)).collect();
        out.push(("Applies to", texts.join("; ")));
    }
    out
}

/// How a setting is written in rinetd.conf: `[timeout=N]`, `buffersize N`.
fn conf_form(s: &Setting) -> Option<String> {
    let name = s.conf?;
    Some(if s.rule.is_some() {
        format!("[{name}=VALUE]")
    } else {
        match s.value {
            super::Value::Flag => name.to_string(),
            super::Value::Pattern => format!("{name} PATTERN"),
            super::Value::Glob => format!("{name} FILE"),
            super::Value::Path => format!("{name} PATH"),
            _ => format!("{name} VALUE"),
        }
    })
}

/// The settings of one section of the pages, in table order.
fn section(which: Section) -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().filter(move |s| which.holds(s))
}

/// The sections the table is printed in.
#[derive(Clone, Copy)]
enum Section {
    /// `[name=value]` options.
    RuleOptions,
    /// Lines: allow, deny, trust-proxy, include, and one-value globals.
    Globals,
    /// YAML-only keys (status.enabled, load_balancing, backends).
    YamlOnly,
}

impl Section {
    /// Whether `s` is printed in this section.
    fn holds(self, s: &Setting) -> bool {
        match self {
            Section::RuleOptions => s.rule.is_some(),
            // A rule option that is also a global line is listed here
            // too, briefly, pointing at its entry among the rule options.
            Section::Globals => s.conf.is_some() && (s.rule.is_none() || s.on_global()),
            Section::YamlOnly => s.conf.is_none(),
        }
    }
}

/// Escapes text for roff: backslashes, hyphens (so they are not broken or
/// turned into dashes), and a leading `.` or `'`.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// What a section prints for `s`: its heading, its doc and its facts. A
/// rule option in the global section is the global line, pointing back.
fn entry(s: &Setting, which: Section) -> (String, String, Vec<(&'static str, String)>) {
    let name = s.name();
    if matches!(which, Section::Globals) && s.rule.is_some() {
        let doc = format!(
            "The default of the rule option [{name}=VALUE] for rules without their own; \
             described with the rule options."
        );
        let facts = facts(s)
            .into_iter()
            .filter(|(label, _)| matches!(*label, "Value" | "YAML"))
            .collect();
        return (format!("{name} VALUE"), doc, facts);
    }
    let head = conf_form(s)
        .or(s.yaml.map(str::to_string))
        .unwrap_or_default();
    (head, s.doc.to_string(), facts(s))
}

/// One section of settings as roff `.TP` paragraphs.
fn man_section(which: Section) -> String {
    let mut out = String::new();
    for s in section(which) {
        let (head, doc, facts) = entry(s, which);
        out.push_str(&format!(".TP\n.B {}\n{}\n", roff(&head), roff(&doc)));
        for (label, text) in facts {
            out.push_str(&format!(".br\n{label}: {}.\n", roff(&text)));
        }
    }
    out
}

/// oi.conf(5), complete: the prose of `dist/oi.conf.5.in` with the table's
/// sections in place of its `@...@` lines.
pub fn man_page() -> String {
    let mut out = String::new();
    for line in MAN_TEMPLATE.lines() {
        match line {
            "@RULE_OPTIONS@" => out.push_str(&man_section(Section::RuleOptions)),
            "@GLOBAL_SETTINGS@" => out.push_str(&man_section(Section::Globals)),
            "@YAML_ONLY@" => out.push_str(&man_section(Section::YamlOnly)),
            "@PRECEDENCE@" => out.push_str(&format!("{}\n", roff(PRECEDENCE))),
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// One section of settings as markdown.
fn markdown_section(out: &mut String, which: Section) {
    for s in section(which) {
        let (head, doc, facts) = entry(s, which);
        out.push_str(&format!("### `{head}`\n\n{doc}\n\n"));
        for (label, text) in facts {
            out.push_str(&format!("- {label}: {text}\n"));
        }
        out.push('\n');
    }
}

/// `docs/reference.md`: every setting, generated from the table.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         <!-- Generated from crates/config/src/settings/table.rs by \
         `cargo run --example gen-docs -- --reference docs/reference.md`; \
         do not edit (a test compares it with the table). -->\n\n\
         Every setting oi reads, in rinetd.conf and in YAML. The file format \
         itself (rules, addresses, ports, access control, YAML layout) is in \
         oi.conf(5) and [configuration.md](configuration.md).\n\n\
         ## Precedence\n\n",
    );
    out.push_str(PRECEDENCE);
    out.push_str("\n\n## Rule options\n\nWritten after a rule in one pair of brackets, comma-separated: `0.0.0.0 80 10.0.0.2 8080 [timeout=30, src=10.0.0.1]`; in YAML, as keys of the rule. An unknown, malformed or repeated option is an error.\n\n");
    markdown_section(&mut out, Section::RuleOptions);
    out.push_str("## Global settings and lines\n\nOne per line in rinetd.conf; in YAML, under `global:`. A repeated one-value line: the last one wins, with a warning.\n\n");
    markdown_section(&mut out, Section::Globals);
    out.push_str(
        "## YAML only\n\nKeys of rinetd-uv's YAML format that rinetd.conf has no line for.\n\n",
    );
    markdown_section(&mut out, Section::YamlOnly);
    out
}
