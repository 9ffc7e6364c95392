//! What `oi --check` prints for a valid configuration: one line per rule
//! (its sides, pool, options, ACL and include chain) and the globals, and
//! the `FILE:LINE: warning:` form of a warning. Pure: the daemon's `check`
//! adds what only the running machine can tell (overlapping listeners,
//! unwritable files, kernel features).

use crate::{
    plural, AclRules, Balance, Config, ConfigErrors, Endpoint, Host, Pattern, Port, ResolvedConfig,
    ResolvedRule, Shown,
};
use std::fmt::Write;
use std::net::SocketAddr;
/// `FILE:LINE: warning: message: 'text'`.
pub fn format_warning(file: &str, w: &crate::ConfigError) -> String {
    let mut shown = w.clone();
    shown.message = format!("warning: {}", w.message);
    ConfigErrors::format_one(file, &shown)
}

/// What `--check` prints on stdout for a valid configuration.
pub fn report(file: &str, resolved: &ResolvedConfig) -> String {
    let mut out = String::new();
    let c = &resolved.config;
    let global = &c.global_acl;
    for inc in &c.includes {
        let from = inc
            .from
            .as_deref()
            .map_or_else(|| file.to_string(), |f| Shown(f).to_string());
        let files = inc
            .files
            .iter()
            .map(|f| Shown(f).to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let files = if files.is_empty() {
            "no files".to_string()
        } else {
            files
        };
        let _ = writeln!(
            out,
            "{from}:{}: include {} -> {files}",
            inc.line,
            Shown(&inc.pattern)
        );
    }
    // Rules sharing a listener by server name follow the one that binds it.
    for (r, carrier) in resolved
        .rules
        .iter()
        .flat_map(|c| c.with_routed().map(move |r| (r, c)))
    {
        let rule = &r.rule;
        match rule.file.as_deref() {
            Some(included) => write!(out, "{}:{}: ", Shown(included), rule.line),
            None => write!(out, "{file}:{}: ", rule.line),
        }
        .unwrap_or(());
        if let Some(name) = &rule.name {
            let _ = write!(out, "{}: ", Shown(name));
        }
        let bind = side(&rule.bind, r.bind.ip().as_slice());
        let _ = write!(out, "{bind} -> {}", backends(r));
        let options = rule.options.to_string();
        if !options.is_empty() {
            let _ = write!(out, " {options}");
        }
        if let Some(src) = r.src {
            if r.backends.len() == 1 && !matches!(rule.options.src, Some(Host::Ip(_))) {
                let _ = write!(out, " (src {src})");
            }
        }
        if rule.bind.unix().is_some() {
            out.push_str(" (unix socket clients: allow/deny do not apply)");
        } else {
            let _ = write!(out, " {}", acl_summary(global, &rule.acl));
        }
        if !carrier.sni.is_empty() || carrier.server_name().is_some() {
            // A listener whose binding rule forwards TCP to UDP reads no
            // ClientHello: every connection goes to that rule (a warning
            // says so too), so the named rules are shown as never chosen.
            let tcp_to_udp = carrier.rule.bind.proto == crate::Proto::Tcp
                && carrier.rule.connect().proto == crate::Proto::Udp;
            out.push_str(match (r.server_name(), tcp_to_udp) {
                (Some(_), false) => " (by TLS server name)",
                (Some(_), true) => " (never chosen: its listener forwards TCP to UDP)",
                (None, false) => " (TLS server names no rule matches, none, or not TLS)",
                (None, true) => " (every connection: TCP to UDP reads no server name)",
            });
        }
        if let Some(chain) = include_chain(c, rule.file.as_deref(), file) {
            let _ = write!(out, " (included from {chain})");
        }
        out.push('\n');
    }
    if let Some(log) = &c.logfile {
        let format = match c.log_format() {
            crate::LogFormat::Tab => "tab-separated",
            crate::LogFormat::Common => "common log format",
            crate::LogFormat::Json => "one JSON object per line",
        };
        let path = log.to_string_lossy();
        let _ = writeln!(out, "logfile {} ({format})", Shown(&path));
    }
    if let Some(pid) = &c.pidlogfile {
        let path = pid.to_string_lossy();
        let _ = writeln!(out, "pidlogfile {}", Shown(&path));
    }
    globals_report(&mut out, c);
    let n: usize = resolved.rules.iter().map(|r| 1 + r.sni.len()).sum();
    let _ = writeln!(out, "configuration OK ({n} rule{})", plural(n));
    out
}

/// Where the rules after `-> ` go: one side as before for a plain rule, or
/// `pool (ALGORITHM, health ...): a weight 2, b` for several backends or a
/// YAML pool.
fn backends(r: &ResolvedRule) -> String {
    let rule = &r.rule;
    let first = &rule.backends[0];
    let plain = r.backends.len() == 1
        && rule.balance == Balance::default()
        && first.name.is_none()
        && first.weight == 1
        && first.src.is_none()
        && first.dns_refresh.is_none();
    if plain || r.backends.is_empty() {
        return side(rule.connect(), &r.connect);
    }
    let list = r
        .pool()
        .map(|(backend, b)| {
            let mut one = side(&backend.endpoint, &b.addrs);
            if let Some(name) = &backend.name {
                one = format!("{} = {one}", Shown(name));
            }
            let _ = write!(one, " weight {}", backend.weight);
            if let Some(src) = b.src {
                let _ = write!(one, " src {src}");
            }
            if let crate::Host::Name(_) = backend.endpoint.host {
                match r.dns_refresh(backend) {
                    Some(t) => {
                        let _ = write!(one, " dns-refresh {}s", t.as_secs());
                    }
                    None => one.push_str(" dns-refresh off"),
                }
                if let Some(filter) = r.expansion() {
                    let _ = write!(one, " expanded ({filter})");
                }
            }
            one
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!("pool ({}): {list}", rule.balance)
}

/// `conf.d/a.conf:3 <- main.conf:7`: the include lines that brought `file`
/// in, innermost first; `None` for the main file.
fn include_chain(c: &Config, file: Option<&str>, main: &str) -> Option<String> {
    let mut links = Vec::new();
    let mut current = file?;
    // Each step goes one level out; the depth limit bounds the walk.
    for _ in 0..=crate::MAX_INCLUDE_DEPTH {
        let Some(inc) = c
            .includes
            .iter()
            .find(|i| i.files.iter().any(|f| &**f == current))
        else {
            break;
        };
        let from = inc.from.as_deref().unwrap_or(main);
        links.push(format!("{}:{}", Shown(from), inc.line));
        match inc.from.as_deref() {
            Some(outer) => current = outer,
            None => break,
        }
    }
    Some(links.join(" <- "))
}

/// One line per global setting the file sets that the option table has a
/// `--check` text for, saying what oi does with it.
fn globals_report(out: &mut String, c: &Config) {
    for (what, does) in crate::settings::globals_set(c) {
        let _ = writeln!(out, "{what}: {does}");
    }
}

/// One side: `10.0.0.1:80/tcp`, or `name:service/tcp (addr, addr)` when names were resolved.
fn side(end: &Endpoint, addrs: &[SocketAddr]) -> String {
    if end.unix().is_some() {
        return end.to_string();
    }
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
    use crate::services::Services;

    #[test]
    fn the_json_log_format_is_named() {
        let text = "logfile /tmp/x.log\nlogcommon\nlogformat json\n127.0.0.1 80 127.0.0.2 80\n";
        let parsed = crate::parse(text).expect("valid");
        let resolved = crate::resolve(parsed, &Services::parse("")).expect("resolves");
        let out = report("f.conf", &resolved);
        assert!(
            out.contains("logfile /tmp/x.log (one JSON object per line)\n"),
            "{out}"
        );
    }

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
        let parsed = crate::parse(text).expect("valid");
        let services = Services::parse("http 80/tcp www\n");
        let resolved = crate::resolve(parsed, &services).expect("resolves");
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
    fn report_pools_names_and_globals() {
        let yaml = "global:\n  listen_backlog: 128\n  pool_min_free: 4\nrules:\n  - name: web\n    bind: 127.0.0.1:8080\n    connect:\n      - {dest: '127.0.0.2:80', weight: 3, name: a}\n      - {dest: '127.0.0.3:80', src: 127.0.0.9}\n    load_balancing: {algorithm: iphash, affinity_ttl: 60}\n";
        let parsed = crate::parse_yaml(yaml).expect("valid");
        let resolved = crate::resolve(parsed, &Services::parse("")).expect("resolves");
        assert_eq!(
            report("oi.yaml", &resolved),
            "oi.yaml:6: web: 127.0.0.1:8080/tcp -> pool (iphash, health 3 failures, recovery 30s, affinity 60s (max 10000)): a = 127.0.0.2:80/tcp weight 3, 127.0.0.3:80/tcp weight 1 src 127.0.0.9 allow all\n\
             listen-backlog 128: the accept queue of every TCP listener socket\n\
             pool-min-free 4: ignored; oi's buffer pools size themselves\n\
             configuration OK (1 rule)\n"
        );
    }

    #[test]
    fn report_shows_how_backend_names_are_refreshed_and_expanded() {
        let yaml = "global:\n  dns_refresh: 120\nrules:\n  - name: web\n    bind: 127.0.0.1:8080\n    connect:\n      - {dest: 'localhost:80', dns_refresh: 0}\n      - localhost:81\n";
        let parsed = crate::parse_yaml(yaml).expect("valid");
        let resolved = crate::resolve(parsed, &Services::parse("")).expect("resolves");
        let out = report("oi.yaml", &resolved);
        assert!(out.contains(":80/tcp (127.0.0.1:80"), "{out}");
        assert!(
            out.contains(" weight 1 dns-refresh off expanded (ipv4), localhost:81/tcp"),
            "{out}"
        );
        assert!(
            out.contains(" weight 1 dns-refresh 120s expanded (ipv4) allow all"),
            "{out}"
        );
        assert!(
            out.contains("dns-refresh 120s: how often backend names are looked up again"),
            "{out}"
        );
    }

    #[test]
    fn report_include_chains() {
        let mut source = crate::MemIncludes {
            main: "a.conf".into(),
            files: vec![
                ("conf.d/b.conf".into(), "\ninclude c.conf\n".into()),
                ("c.conf".into(), "127.0.0.1 8080 127.0.0.2 80\n".into()),
            ],
        };
        let parsed =
            crate::parse_with_includes("include conf.d/*.conf\n", &mut source).expect("valid");
        let resolved = crate::resolve(parsed, &Services::parse("")).expect("resolves");
        assert_eq!(
            report("a.conf", &resolved),
            "a.conf:1: include conf.d/*.conf -> conf.d/b.conf\n\
             conf.d/b.conf:2: include c.conf -> c.conf\n\
             c.conf:1: 127.0.0.1:8080/tcp -> 127.0.0.2:80/tcp allow all (included from conf.d/b.conf:2 <- a.conf:1)\n\
             configuration OK (1 rule)\n"
        );
    }

    #[test]
    fn acl_summaries() {
        let none = AclRules::default();
        assert_eq!(acl_summary(&none, &none), "allow all");
        let parsed = crate::parse("deny 1.2.3.4\n").expect("valid");
        assert_eq!(
            acl_summary(&parsed.global_acl, &none),
            "global: deny 1.2.3.4"
        );
        assert_eq!(acl_summary(&none, &parsed.global_acl), "deny 1.2.3.4");
    }

    #[test]
    fn warning_format() {
        let parsed = crate::parse("1.2.3.4 80 1.2.3.4 81 [timeout=5]").expect("valid");
        assert_eq!(
            format_warning("f", &parsed.warnings[0]),
            "f:1: warning: option 'timeout' only applies to UDP; ignored on this TCP rule: '1.2.3.4 80 1.2.3.4 81 [timeout=5]'"
        );
    }
}
