//! `oi convert`: a parsed configuration written out in the other format
//! (pure: a [`Config`] in, text out). rinetd.conf becomes rinetd-uv's YAML
//! and YAML becomes rinetd.conf, lossless for everything both formats
//! express; what the target cannot say is written as a comment naming it.
//!
//! The settings are written from the option table: each setting's value is
//! read through its slot and written under the target's name (its
//! rinetd.conf name or YAML key), so a new table entry converts with no code
//! here. Where the two formats' defaults differ (the UDP timeout, the
//! association cap, `dns-multi-ip-expand`), a value the source left to its
//! default is written out explicitly, so the converted file behaves the same.
//! Includes are flattened (the result is one file; a comment lists them),
//! and a port range becomes one rule per port.

use super::settings::{self, Default, Place, RuleOptions, Setting, Slot, Value, SETTINGS};
use super::{
    AclRules, Backend, Balance, Config, Endpoint, Format, Globals, Host, Port, Proto, Rule,
};
use std::fmt::Write;

/// The value in `slot` as the target writes it: `shown`'s text, with
/// switches as YAML booleans when `yaml`.
fn value_of(slot: Slot<'_>, value: Value, yaml: bool) -> Option<String> {
    if let (Slot::List(list), true) = (&slot, yaml) {
        let items: Vec<String> = list
            .iter()
            .flat_map(|l| l.iter())
            .map(|e| quoted(e))
            .collect();
        return (!items.is_empty()).then(|| format!("[{}]", items.join(", ")));
    }
    let text = settings::shown_value(slot, value)?;
    Some(match (yaml, value) {
        (true, Value::Switch | Value::Flag) => (text == "on").to_string(),
        (
            true,
            Value::Path
            | Value::Host
            | Value::Address
            | Value::Word(_)
            | Value::Mode
            | Value::Name
            | Value::ServerName,
        ) => quoted(&text),
        (false, Value::Path) if text.contains([' ', '\t']) => format!("\"{text}\""),
        // Escapes are oi's, not YAML's: single quotes keep the backslashes.
        (true, Value::Text(_)) => format!("'{}'", text.replace('\'', "''")),
        _ => text,
    })
}

/// A YAML double-quoted string.
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The default `setting` has in `format`, if the two formats differ on it.
fn format_default(setting: &Setting, format: Format) -> Option<&'static str> {
    match setting.default {
        Default::ByFormat { conf, yaml } => Some(match format {
            Format::Conf => conf,
            Format::Yaml => yaml,
        }),
        _ => None,
    }
}

/// The globals as the source file means them: every setting the two formats
/// default differently, set to the source's default where the file left it.
fn explicit_globals(config: &Config) -> Config {
    let mut c = config.clone();
    for s in SETTINGS {
        let (Some(at), Some(default)) = (s.global, format_default(s, config.format)) else {
            continue;
        };
        let mut scratch = Config::default();
        if settings::store(
            s,
            at(&mut scratch),
            settings::Syntax::Conf,
            s.name(),
            default,
        )
        .is_ok()
        {
            settings::fill_slot(at(&mut c), at(&mut scratch));
        }
    }
    c
}

/// A rule's options as the source means them: each option that acts on
/// this rule and whose value in the target (the rule's own options over the
/// globals over the target's defaults) would differ from the source's is
/// written on the rule. (An option that does nothing here, such as a UDP
/// timeout on a TCP rule, is left out rather than warned about.)
fn explicit_options(rule: &Rule, globals: &Globals, from: Format, to: Format) -> RuleOptions {
    let none = RuleOptions::default();
    let mut meant = settings::resolve(&none, &rule.options, globals, from);
    let mut read = settings::resolve(&none, &rule.options, globals, to);
    let shape = settings::Shape {
        bind: &rule.bind,
        udp_backend: rule.backends.iter().any(|b| b.endpoint.proto == Proto::Udp),
        unix_backend: rule.backends.iter().any(|b| b.endpoint.unix().is_some()),
        backend_src: false,
    };
    let mut out = (*rule.options).clone();
    for s in SETTINGS {
        let Some(at) = s.rule else { continue };
        if settings::misapplied(s, &shape).is_some() {
            continue;
        }
        if settings::shown_value(at(&mut meant), s.value)
            != settings::shown_value(at(&mut read), s.value)
        {
            // The rule's own value reads the same in both formats, so the
            // difference is a default: write the source's on the rule.
            settings::fill_slot(at(&mut out), at(&mut meant));
        }
    }
    out
}

/// The backend key YAML keeps a rule option under, when it has no rule key
/// (`dns-refresh` is `connect[].dns_refresh` in YAML).
fn backend_key(s: &Setting) -> Option<&'static Setting> {
    let leaf = s.yaml_leaf()?;
    SETTINGS.iter().find(|b| {
        b.yaml.is_some_and(|k| k.starts_with("connect[].")) && b.yaml_leaf() == Some(leaf)
    })
}

/// `host:port/proto` as a YAML endpoint (IPv6 in brackets; unix as written).
fn yaml_endpoint(e: &Endpoint) -> String {
    if let Some(addr) = e.unix() {
        return addr.to_string();
    }
    let host = match &e.host {
        Host::Ip(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        Host::Ip(ip) => ip.to_string(),
        _ => e.host_text.to_string(),
    };
    format!("{host}:{}/{}", e.port, e.proto)
}

/// One side of a rinetd.conf rule: `host port[/udp]`, or `unix:...`.
fn conf_endpoint(e: &Endpoint) -> String {
    if let Some(addr) = e.unix() {
        return addr.to_string();
    }
    let host = match &e.host {
        Host::Ip(ip) => ip.to_string(),
        _ => e.host_text.to_string(),
    };
    match (&e.port, e.proto) {
        (Port::None, _) => host,
        (p, Proto::Udp) => format!("{host} {p}/udp"),
        (p, Proto::Tcp) => format!("{host} {p}"),
    }
}

/// A rule's name for YAML, which needs one: its own, else its listener.
fn rule_name(rule: &Rule) -> String {
    // Rules sharing a listener by server name differ by that name.
    rule.name
        .clone()
        .unwrap_or_else(|| match &rule.options.sni {
            Some(sni) => format!("{} {sni}", yaml_endpoint(&rule.bind)),
            None => yaml_endpoint(&rule.bind),
        })
}

/// Where an included rule came from, as a comment.
fn origin(rule: &Rule) -> Option<String> {
    rule.file
        .as_ref()
        .map(|f| format!("from {f}, line {}", rule.line))
}

/// The configuration as rinetd-uv YAML.
pub fn to_yaml(config: &Config, source: &str) -> String {
    let c = explicit_globals(config);
    let mut out = format!("# {source}, converted to YAML by `oi convert`.\n");
    includes_comment(config, &mut out);
    let mut global = String::new();
    let mut nested: Vec<(&str, String)> = Vec::new();
    let mut scratch = c.clone();
    for s in SETTINGS {
        let Some(at) = s.global else { continue };
        let Some(v) = value_of(at(&mut scratch), s.value, true) else {
            continue;
        };
        match s.yaml.filter(|_| s.yaml_on_global()) {
            Some(key) => match key.split_once('.') {
                Some((parent, leaf)) => nested.push((parent, format!("{leaf}: {v}"))),
                None => {
                    let _ = writeln!(global, "  {key}: {v}");
                }
            },
            None => {
                let _ = writeln!(
                    out,
                    "# not in YAML: {} {}{}",
                    s.name(),
                    v.trim_matches('"'),
                    s.flag.map_or(String::new(), |f| format!(
                        " (give {f} on the command line)"
                    ))
                );
            }
        }
    }
    sections(&nested, "  ", &mut global);
    acl_yaml(&c.global_acl, "  ", &mut global);
    if !global.is_empty() {
        let _ = write!(out, "\nglobal:\n{global}");
    }
    out.push_str("\nrules:\n");
    // Rules of one YAML rule (several binds, one pool) stay one rule.
    let mut i = 0;
    while i < c.rules.len() {
        let first = &c.rules[i];
        let mut j = i + 1;
        while j < c.rules.len() && first.name.is_some() && c.rules[j].name == first.name {
            j += 1;
        }
        rule_yaml(&c, &c.rules[i..j], &mut out);
        i = j;
    }
    out
}

fn includes_comment(config: &Config, out: &mut String) {
    for inc in &config.includes {
        let files: Vec<&str> = inc.files.iter().map(|f| &**f).collect();
        let _ = writeln!(
            out,
            "# include {} (line {}): its rules are below, in place{}",
            inc.pattern,
            inc.line,
            if files.is_empty() {
                String::new()
            } else {
                format!(" ({})", files.join(", "))
            }
        );
    }
}

fn acl_yaml(acl: &AclRules, indent: &str, out: &mut String) {
    let list = |p: &[super::Pattern]| {
        p.iter()
            .map(|p| quoted(&p.text))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !acl.allow.is_empty() || !acl.deny.is_empty() {
        let _ = writeln!(out, "{indent}access:");
        if !acl.allow.is_empty() {
            let _ = writeln!(out, "{indent}  allow: [{}]", list(&acl.allow));
        }
        if !acl.deny.is_empty() {
            let _ = writeln!(out, "{indent}  deny: [{}]", list(&acl.deny));
        }
    }
    if !acl.trust_proxy.is_empty() {
        let _ = writeln!(out, "{indent}trust_proxy: [{}]", list(&acl.trust_proxy));
    }
}

fn rule_yaml(c: &Config, binds: &[Rule], out: &mut String) {
    let rule = &binds[0];
    if let Some(from) = origin(rule) {
        let _ = writeln!(out, "  # {from}");
    }
    let _ = writeln!(out, "  - name: {}", quoted(&rule_name(rule)));
    if binds.len() == 1 {
        let _ = writeln!(out, "    bind: {}", quoted(&yaml_endpoint(&rule.bind)));
    } else {
        let _ = writeln!(out, "    bind:");
        for b in binds {
            let _ = writeln!(out, "      - {}", quoted(&yaml_endpoint(&b.bind)));
        }
    }
    let mut options = explicit_options(rule, &c.globals, c.format, Format::Yaml);
    // Rule options YAML keeps on each backend instead (`src`, `dns_refresh`).
    let mut per_backend: Vec<(&Setting, String)> = Vec::new();
    let mut rule_keys = String::new();
    // Keys of a rule's section (`health_check.interval`), by section.
    let mut nested: Vec<(&str, String)> = Vec::new();
    for s in SETTINGS {
        let Some(at) = s.rule else { continue };
        let Some(v) = value_of(at(&mut options), s.value, true) else {
            continue;
        };
        match (s.yaml, s.yaml_place) {
            (Some(key), Place::Rule | Place::RuleAndGlobal) => match key.split_once('.') {
                Some((parent, leaf)) => nested.push((parent, format!("{leaf}: {v}"))),
                None => {
                    let _ = writeln!(rule_keys, "    {key}: {v}");
                }
            },
            (Some(_), Place::Backend) => per_backend.push((s, v)),
            (Some(_), Place::Global) if backend_key(s).is_some() => {
                per_backend.extend(backend_key(s).map(|b| (b, v)));
            }
            (Some(_), Place::Global) | (None, _) => {
                let _ = writeln!(rule_keys, "    # not in YAML: {}={}", s.name(), v);
            }
        }
    }
    sections(&nested, "    ", &mut rule_keys);
    let _ = writeln!(out, "    connect:");
    for b in &rule.backends {
        backend_yaml(b, &per_backend, out);
    }
    if rule.balance != Balance::default() {
        let b = &rule.balance;
        let _ = writeln!(out, "    load_balancing:");
        let _ = writeln!(out, "      algorithm: {}", b.algorithm);
        let _ = writeln!(out, "      health_threshold: {}", b.health_threshold);
        let _ = writeln!(
            out,
            "      recovery_timeout: {}",
            b.recovery_timeout.as_secs()
        );
        if !b.affinity_ttl.is_zero() {
            let _ = writeln!(out, "      affinity_ttl: {}", b.affinity_ttl.as_secs());
        }
        let _ = writeln!(
            out,
            "      affinity_max_entries: {}",
            b.affinity_max_entries
        );
    }
    out.push_str(&rule_keys);
    acl_yaml(&rule.acl, "    ", out);
}

/// Writes `(section, "key: value")` pairs as YAML sections at `indent`,
/// each section once, in the order first named, its keys in order.
fn sections(nested: &[(&str, String)], indent: &str, out: &mut String) {
    let mut seen: Vec<&str> = Vec::new();
    for (parent, _) in nested {
        if seen.contains(parent) {
            continue;
        }
        seen.push(parent);
        let _ = writeln!(out, "{indent}{parent}:");
        for (_, line) in nested.iter().filter(|(p, _)| p == parent) {
            let _ = writeln!(out, "{indent}  {line}");
        }
    }
}

fn backend_yaml(b: &Backend, per_backend: &[(&Setting, String)], out: &mut String) {
    let _ = writeln!(out, "      - dest: {}", quoted(&yaml_endpoint(&b.endpoint)));
    if let Some(name) = &b.name {
        let _ = writeln!(out, "        name: {}", quoted(name));
    }
    if b.weight != 1 {
        let _ = writeln!(out, "        weight: {}", b.weight);
    }
    let mut keys: Vec<(&str, String)> = per_backend
        .iter()
        .map(|(s, v)| (s.yaml_leaf().unwrap_or_default(), v.clone()))
        .collect();
    // The backend's own value wins over the rule's, as it does when read.
    let own = [
        ("src", b.src.as_ref().map(|h| quoted(&h.to_string()))),
        (
            "dns_refresh",
            b.dns_refresh.map(|d| d.as_secs().to_string()),
        ),
    ];
    for (leaf, value) in own {
        let Some(value) = value else { continue };
        match keys.iter_mut().find(|(k, _)| *k == leaf) {
            Some(slot) => slot.1 = value,
            None => keys.push((leaf, value)),
        }
    }
    for (leaf, value) in keys {
        let _ = writeln!(out, "        {leaf}: {value}");
    }
}

/// YAML's `status.enabled`, which rinetd.conf says by writing `statusfile`
/// or not: `true` is the same as leaving it out, `false` drops the file.
/// Returns the status file `enabled: false` turned off, if any.
pub fn fold_status_enabled(c: &mut Config) -> Option<std::path::PathBuf> {
    match c.globals.status_enabled.take() {
        Some(false) => c.globals.status_file.take(),
        _ => None,
    }
}

/// The configuration as rinetd.conf.
pub fn to_conf(config: &Config, source: &str) -> String {
    let mut c = explicit_globals(config);
    let mut out = format!("# {source}, converted to rinetd.conf by `oi convert`.\n");
    includes_comment(config, &mut out);
    if let Some(file) = fold_status_enabled(&mut c) {
        let _ = writeln!(
            out,
            "# status.enabled is false: no statusfile line for {}",
            file.display()
        );
    }
    let mut scratch = c.clone();
    let mut globals = String::new();
    for s in SETTINGS {
        let Some(at) = s.global else { continue };
        let Some(v) = value_of(at(&mut scratch), s.value, false) else {
            continue;
        };
        match (s.conf, s.value) {
            (Some(name), Value::Flag) => {
                if v == "on" {
                    let _ = writeln!(globals, "{name}");
                }
            }
            (Some(name), _) => {
                let _ = writeln!(globals, "{name} {v}");
            }
            (None, _) => {
                let _ = writeln!(globals, "# not in rinetd.conf: {} {v}", s.name());
            }
        }
    }
    acl_conf(&c.global_acl, &mut globals);
    if !globals.is_empty() {
        let _ = write!(out, "\n{globals}");
    }
    out.push('\n');
    for rule in &c.rules {
        if let Some(from) = origin(rule) {
            let _ = writeln!(out, "# {from}");
        }
        if let Some(name) = &rule.name {
            let _ = writeln!(out, "# rule {name}");
        }
        let options = explicit_options(rule, &c.globals, c.format, Format::Conf);
        let mut opts = settings::written(&options);
        let first = &rule.backends[0];
        // A backend's own src and dns_refresh are the rule's in rinetd.conf.
        if let Some(src) = &first.src {
            opts.retain(|o| !o.starts_with("src="));
            opts.push(format!("src={src}"));
        }
        if let Some(d) = first.dns_refresh {
            opts.retain(|o| !o.starts_with("dns-refresh="));
            opts.push(format!("dns-refresh={}", d.as_secs()));
        }
        let opts = if opts.is_empty() {
            String::new()
        } else {
            format!(" [{}]", opts.join(", "))
        };
        let _ = writeln!(
            out,
            "{} {}{opts}",
            conf_endpoint(&rule.bind),
            conf_endpoint(&first.endpoint)
        );
        for b in &rule.backends[1..] {
            let _ = writeln!(
                out,
                "# not in rinetd.conf: another backend of this rule, {}{}{}",
                yaml_endpoint(&b.endpoint),
                b.name.as_ref().map_or(String::new(), |n| format!(" ({n})")),
                if b.weight == 1 {
                    String::new()
                } else {
                    format!(", weight {}", b.weight)
                }
            );
        }
        if rule.backends.len() > 1 && (first.name.is_some() || first.weight != 1) {
            let _ = writeln!(
                out,
                "# not in rinetd.conf: the first backend's{}{}",
                first
                    .name
                    .as_ref()
                    .map_or(String::new(), |n| format!(" name {n}")),
                if first.weight == 1 {
                    String::new()
                } else {
                    format!(" weight {}", first.weight)
                }
            );
        }
        if rule.balance != Balance::default() {
            let _ = writeln!(out, "# not in rinetd.conf: load balancing {}", rule.balance);
        }
        acl_conf(&rule.acl, &mut out);
    }
    out
}

fn acl_conf(acl: &AclRules, out: &mut String) {
    for p in &acl.allow {
        let _ = writeln!(out, "allow {}", p.text);
    }
    for p in &acl.deny {
        let _ = writeln!(out, "deny {}", p.text);
    }
    for p in &acl.trust_proxy {
        let _ = writeln!(out, "trust-proxy {}", p.text);
    }
}

#[cfg(test)]
mod tests;
