//! `oi --check`: load and resolve the configuration, show what would run, like `nginx -t`.

use crate::config::services::Services;
use crate::config::{
    self, plural, AclRules, ConfigErrors, Endpoint, Host, Pattern, Port, ResolvedConfig, Shown,
};
use std::fmt::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

/// Checks the file at `path`. On success prints one line per rule and
/// `configuration OK (N rules)` to stdout, warnings to stderr, and returns 0;
/// otherwise prints every error to stderr and returns 1.
pub fn run(path: &Path) -> ExitCode {
    let file = path.display().to_string();
    let result = config::load(path).and_then(|parsed| {
        for w in &parsed.warnings {
            eprintln!("{}", format_warning(&file, w));
        }
        if parsed.omitted_warnings > 0 {
            let n = parsed.omitted_warnings;
            eprintln!("{file}: warning: and {n} more warning{}", plural(n));
        }
        config::resolve(parsed, &Services::system()).map_err(|e| e.with_file(&file))
    });
    match result {
        Ok(resolved) => {
            print!("{}", report(&file, &resolved));
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            let n = errors.count();
            eprintln!("configuration invalid ({n} error{})", plural(n));
            ExitCode::FAILURE
        }
    }
}

/// `FILE:LINE: warning: message: 'text'`.
pub fn format_warning(file: &str, w: &config::ConfigError) -> String {
    let mut shown = w.clone();
    shown.message = format!("warning: {}", w.message);
    ConfigErrors::format_one(file, &shown)
}

/// What `--check` prints on stdout for a valid configuration.
pub fn report(file: &str, resolved: &ResolvedConfig) -> String {
    let mut out = String::new();
    let global = &resolved.config.global_acl;
    for r in &resolved.rules {
        let rule = &r.rule;
        let _ = write!(
            out,
            "{file}:{}: {} -> {}",
            rule.line,
            side(&rule.bind, &[r.bind]),
            side(&rule.connect, &r.connect)
        );
        let options = rule.options.to_string();
        if !options.is_empty() {
            let _ = write!(out, " {options}");
        }
        if let Some(src) = r.src {
            if !matches!(rule.options.src, Some(Host::Ip(_))) {
                let _ = write!(out, " (src {src})");
            }
        }
        let _ = writeln!(out, " {}", acl_summary(global, &rule.acl));
    }
    let c = &resolved.config;
    if let Some(log) = &c.logfile {
        let format = if c.logcommon {
            "common log format"
        } else {
            "tab-separated"
        };
        let path = log.to_string_lossy();
        let _ = writeln!(out, "logfile {} ({format})", Shown(&path));
    }
    if let Some(pid) = &c.pidlogfile {
        let path = pid.to_string_lossy();
        let _ = writeln!(out, "pidlogfile {}", Shown(&path));
    }
    let n = resolved.rules.len();
    let _ = writeln!(out, "configuration OK ({n} rule{})", plural(n));
    out
}

/// One side: `10.0.0.1:80/tcp`, or `name:service/tcp (addr, addr)` when names were resolved.
fn side(end: &Endpoint, addrs: &[SocketAddr]) -> String {
    let list = addrs
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let named = matches!(end.host, Host::Name(_)) || matches!(end.port, Port::Service(_));
    if named {
        format!("{}:{}/{} ({list})", end.host_text, end.port, end.proto)
    } else {
        format!("{list}/{}", end.proto)
    }
}

/// `allow a, b; deny c (+ global: ...)`, or `allow all` when nothing restricts the rule.
fn acl_summary(global: &AclRules, rule: &AclRules) -> String {
    let (g, r) = (acl_text(global), acl_text(rule));
    match (g.is_empty(), r.is_empty()) {
        (true, true) => "allow all".to_string(),
        (true, false) => r,
        (false, true) => format!("global: {g}"),
        (false, false) => format!("{r} (+ global: {g})"),
    }
}

/// `allow a, b; deny c`, empty for an empty set.
fn acl_text(acl: &AclRules) -> String {
    let join = |v: &[Pattern]| {
        v.iter()
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !acl.allow.is_empty() {
        parts.push(format!("allow {}", join(&acl.allow)));
    }
    if !acl.deny.is_empty() {
        parts.push(format!("deny {}", join(&acl.deny)));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines() {
        let text = concat!(
            "allow 127.*\n",
            "127.0.0.1 8080 127.0.0.2 80 [timeout=30]\n",
            "allow 10.*\n",
            "deny 10.0.0.9\n",
            "[::1] 53/udp ::1 5353/udp\n",
            "127.0.0.1 www 127.0.0.1 81\n",
            "logfile /tmp/x.log\n",
            "logcommon\n",
        );
        let parsed = config::parse(text).expect("valid");
        let services = Services::parse("http 80/tcp www\n");
        let resolved = config::resolve(parsed, &services).expect("resolves");
        assert_eq!(
            report("f.conf", &resolved),
            "f.conf:2: 127.0.0.1:8080/tcp -> 127.0.0.2:80/tcp [timeout=30] allow 10.*; deny 10.0.0.9 (+ global: allow 127.*)\n\
             f.conf:5: [::1]:53/udp -> [::1]:5353/udp global: allow 127.*\n\
             f.conf:6: 127.0.0.1:www/tcp (127.0.0.1:80) -> 127.0.0.1:81/tcp global: allow 127.*\n\
             logfile /tmp/x.log (common log format)\n\
             configuration OK (3 rules)\n"
        );
    }

    #[test]
    fn acl_summaries() {
        let none = AclRules::default();
        assert_eq!(acl_summary(&none, &none), "allow all");
        let parsed = config::parse("deny 1.2.3.4\n").expect("valid");
        assert_eq!(
            acl_summary(&parsed.global_acl, &none),
            "global: deny 1.2.3.4"
        );
        assert_eq!(acl_summary(&none, &parsed.global_acl), "deny 1.2.3.4");
    }

    #[test]
    fn warning_format() {
        let parsed = config::parse("1.2.3.4 80 1.2.3.4 81 [timeout=5]").expect("valid");
        assert_eq!(
            format_warning("f", &parsed.warnings[0]),
            "f:1: warning: option 'timeout' only applies to UDP; ignored on this TCP rule: '1.2.3.4 80 1.2.3.4 81 [timeout=5]'"
        );
    }
}
