//! The warnings `oi --check` (and start-up) gives about a configuration
//! that loads but would not do what it says: a line with no effect, a
//! combination that refuses every client, a listener that would fail to
//! bind beside another. Pure: what only the running machine can tell
//! (whether this process may be transparent, whether the kernel has MPTCP,
//! whether `::` takes IPv4) is passed in.

use crate::{Config, Proto, ResolvedConfig, Shown};
use std::net::SocketAddr;

/// A warning for each unix socket listener that allow/deny lines (its own
/// or global ones) would restrict: a unix client has no address to match,
/// so they do not apply to it, as in rinetd-uv.
pub fn unix_acl_warnings(resolved: &ResolvedConfig) -> Vec<crate::ConfigError> {
    let global = &resolved.config.global_acl;
    resolved
        .rules
        .iter()
        .filter(|r| r.rule.bind.unix().is_some() && !(r.rule.acl.is_empty() && global.is_empty()))
        .map(|r| {
            let whose = match (r.rule.acl.is_empty(), global.is_empty()) {
                (false, false) => "its allow/deny lines and the global ones",
                (false, true) => "its allow/deny lines",
                _ => "the global allow/deny lines",
            };
            whole_rule_warning(
                &r.rule,
                format!(
                    "{whose} do not apply to this unix socket listener (a unix client has no address); use the socket file's mode"
                ),
            )
        })
        .collect()
}

/// A warning for each setting of a rule sharing its listener by server
/// name (`[sni=...]`) that only the listener's own rule decides: the one
/// that binds it (the rule without `sni=`, else the first). These act
/// before the ClientHello is read, for every connection on the listener:
/// reading a PROXY header (`accept-proxy`, `trust-proxy` lines) and
/// accepting MPTCP clients (`mptcp=on|listen`). A routed rule's allow/deny
/// lines, `maxconn`, `maxconn-per-client`, rates and backend options are its
/// own and need no warning.
pub fn shared_listener_warnings(resolved: &ResolvedConfig) -> Vec<crate::ConfigError> {
    let mut out = Vec::new();
    for binder in resolved.rules.iter().filter(|r| !r.sni.is_empty()) {
        let listener = &binder.rule;
        let accept_proxy = |r: &crate::Rule| r.options.accept_proxy == Some(true);
        let mptcp_listens = |r: &crate::Rule| r.options.mptcp.is_some_and(|m| m.listens());
        for routed in &binder.sni {
            let r = &routed.rule;
            let mut ignored = Vec::new();
            if r.options.accept_proxy.is_some() && accept_proxy(r) != accept_proxy(listener) {
                ignored.push("option 'accept-proxy'");
            }
            if !r.acl.trust_proxy.is_empty() {
                ignored.push("its trust-proxy lines");
            }
            if r.options.mptcp.is_some() && mptcp_listens(r) != mptcp_listens(listener) {
                ignored.push("option 'mptcp' (for accepting)");
            }
            for what in ignored {
                out.push(whole_rule_warning(
                    r,
                    format!(
                        "{what} has no effect on a rule that shares its listener by server \
                         name: it acts before the ClientHello is read, so the rule that binds \
                         the listener (line {}) decides for every connection on it",
                        listener.line
                    ),
                ));
            }
        }
    }
    out
}

/// Pairs of rules whose listeners cannot both be bound: same protocol and
/// port, different addresses, one of them a wildcard covering the other
/// (identical addresses are already a `duplicate listener` error). With
/// `dual_stack` (Linux's default, `net.ipv6.bindv6only = 0`), `::` also
/// covers every IPv4 address.
///
/// Linear in the rules: one map keyed on protocol and port holds, for each,
/// the first earlier rule of each kind (IPv4 or IPv6, wildcard or not), and
/// the first rule a later one overlaps is the earliest of the kinds that can
/// cover it or that it covers. A scan of every earlier rule made `--check`
/// quadratic: 20k/40k/80k rules took 0.3/1.4/6.2 s (`benches/check.sh`).
pub fn overlapping_listeners(
    resolved: &ResolvedConfig,
    dual_stack: bool,
) -> Vec<crate::ConfigError> {
    use std::collections::HashMap;
    /// Index of the first rule of each kind: IPv4 wildcard, IPv6 wildcard,
    /// IPv4 address, IPv6 address.
    type Firsts = [Option<usize>; 4];
    const V4_ANY: usize = 0;
    const V6_ANY: usize = 1;
    const V4_ONE: usize = 2;
    const V6_ONE: usize = 3;
    let kind = |a: SocketAddr| match (a.is_ipv4(), a.ip().is_unspecified()) {
        (true, true) => V4_ANY,
        (false, true) => V6_ANY,
        (true, false) => V4_ONE,
        (false, false) => V6_ONE,
    };
    let mut seen: HashMap<(Proto, u16), Firsts> = HashMap::new();
    let mut errors = Vec::new();
    for (i, later) in resolved.rules.iter().enumerate() {
        // Unix socket listeners never overlap: the same path is a duplicate.
        let Some(later_ip) = later.bind.ip() else {
            continue;
        };
        let firsts = seen
            .entry((later.rule.bind.proto, later_ip.port()))
            .or_default();
        // The kinds of earlier listener that overlap this one (a wildcard
        // takes the port on every address of its family; with dual stack
        // `::` takes IPv4 too). Identical addresses are duplicates, not here.
        let overlapping: &[usize] = match (kind(later_ip), dual_stack) {
            (V4_ONE, true) => &[V4_ANY, V6_ANY],
            (V4_ONE, false) => &[V4_ANY],
            (V4_ANY, true) => &[V4_ONE, V6_ANY],
            (V4_ANY, false) => &[V4_ONE],
            (V6_ONE, _) => &[V6_ANY],
            (_, true) => &[V6_ONE, V4_ANY, V4_ONE],
            (_, false) => &[V6_ONE],
        };
        let first = overlapping.iter().filter_map(|&k| firsts[k]).min();
        firsts[kind(later_ip)].get_or_insert(i);
        let earlier = first.map(|e| &resolved.rules[e]);
        if let Some(earlier) = earlier {
            errors.push(crate::ConfigError {
                file: later.rule.file.clone(),
                line: later.rule.line,
                column: 0,
                message: format!(
                    "listener {}/{} overlaps {}/{} of line {}: a wildcard address takes the port on every address, so the second cannot be bound",
                    later.bind, later.rule.bind.proto, earlier.bind, earlier.rule.bind.proto, earlier.rule.line
                ),
                text: Shown(&format!("{} {}", later.rule.bind.host_text, later_ip.port()))
                    .to_string(),
                more: 0,
            });
        }
        if errors.len() >= crate::MAX_ERRORS {
            break;
        }
    }
    errors
}

/// Settings at the edge (PROXY protocol, connection limits) that load but
/// cannot do what they say; checked on the whole file, because a rule's own
/// `trust-proxy` lines follow it:
/// - `accept-proxy` with no `trust-proxy` pattern, global or the rule's:
///   no peer may send the header, so every client is refused;
/// - the rule's own `trust-proxy` lines without `accept-proxy`: nothing
///   reads them (the usual slip is a forgotten `accept-proxy`);
/// - `maxconn` or `maxconn-per-client` on a `/udp` listener: the limits are
///   checked in the TCP accept path only, so they never refuse a datagram;
///   a UDP rule's associations are capped by `maxassoc`;
/// - a health check's parts (`check-rise`, `check-expect`, ...) without
///   `check-interval`: no probe runs, so they do nothing.
///
/// `proxy=v1` on a rule with a `/udp` side is an error of the parsers, not
/// a warning here: oi could only send version 2, which is not what the file
/// asks for.
pub fn edge_warnings(cfg: &Config) -> Vec<crate::ConfigError> {
    let mut out = Vec::new();
    for r in &cfg.rules {
        let mut warn = |message: String| {
            // A port range's rules share their line: one warning for the line.
            let same_line = |w: &crate::ConfigError| {
                w.line == r.line && w.file == r.file && w.message == message
            };
            if out.iter().rev().take(3).any(same_line) {
                return;
            }
            out.push(rule_warning(r, message));
        };
        let accept_proxy = r.options.accept_proxy == Some(true);
        if accept_proxy && cfg.global_acl.trust_proxy.is_empty() && r.acl.trust_proxy.is_empty() {
            warn(
                "accept-proxy with no trust-proxy pattern (global or this rule's): every client \
                 is refused (proxy-untrusted); add 'trust-proxy ADDRESS' for the proxy in front"
                    .into(),
            );
        }
        if !accept_proxy && !r.acl.trust_proxy.is_empty() {
            warn("trust-proxy lines for a rule without accept-proxy; ignored".into());
        }
        let o = &r.options;
        let check_parts = [
            ("check-timeout", o.check_timeout.is_some()),
            ("check-rise", o.check_rise.is_some()),
            ("check-fall", o.check_fall.is_some()),
            ("check-send", o.check_send.is_some()),
            ("check-expect", o.check_expect.is_some()),
        ];
        if o.check_interval.is_none() {
            for (name, _) in check_parts.iter().filter(|(_, set)| *set) {
                warn(format!(
                    "option '{name}' without check-interval: no health check runs; ignored"
                ));
            }
        }
        if r.bind.proto == Proto::Udp {
            // The connection limits: the table's TCP-listener settings.
            let limits = crate::settings::SETTINGS
                .iter()
                .filter(|s| s.applies.contains(&crate::settings::Applies::TcpListener))
                .filter(|s| s.conf != Some("sni"));
            if r.options.sni.is_some() {
                warn(
                    "option 'sni' routes TLS connections by server name; ignored on a /udp listener"
                        .into(),
                );
            }
            for setting in limits {
                let name = setting.name();
                if crate::settings::is_set(setting, &r.options) {
                    warn(format!(
                        "option '{name}' limits TCP connections; ignored on a /udp listener \
                         (its associations are capped by maxassoc)"
                    ));
                }
            }
        }
        if out.len() >= crate::MAX_ERRORS {
            break;
        }
    }
    out
}

/// A warning for the first `transparent` rule when this process lacks
/// CAP_NET_ADMIN and CAP_NET_RAW (`net_admin`: `Some(false)`), one of which
/// every client of such a rule would need (for IP_TRANSPARENT); `--check` run as the service's user sees what the
/// service would. The routing for replies (ip rule, ip route, nftables) is
/// the host's and is not checked: the README gives it.
pub fn transparent_warnings(cfg: &Config, net_admin: Option<bool>) -> Vec<crate::ConfigError> {
    if net_admin != Some(false) {
        return Vec::new();
    }
    let first = cfg
        .rules
        .iter()
        .find(|r| r.options.transparent == Some(true));
    first
        .map(|r| {
            rule_warning(
                r,
                "transparent needs CAP_NET_ADMIN (or CAP_NET_RAW), which this process \
                 does not have (CapEff in /proc/self/status): every client of a transparent \
                 rule would be closed (local-socket-failed); run oi as root or give it \
                 CAP_NET_ADMIN (systemd: AmbientCapabilities= and CapabilityBoundingSet=)"
                    .into(),
            )
        })
        .into_iter()
        .collect()
}

/// A warning for the first `mptcp` rule (other than `mptcp=off`) when
/// the kernel has MPTCP off or lacks it (`enabled`: `Some(false)`): such
/// rules run on plain TCP.
pub fn mptcp_warnings(cfg: &Config, enabled: Option<bool>) -> Vec<crate::ConfigError> {
    if enabled != Some(false) {
        return Vec::new();
    }
    let on = |r: &&crate::Rule| r.options.mptcp.is_some_and(|m| m != crate::Mptcp::Off);
    cfg.rules
        .iter()
        .find(on)
        .map(|r| {
            rule_warning(
                r,
                "mptcp, but this kernel makes no MPTCP sockets (/proc/sys/net/mptcp/enabled \
                 is not 1, or missing): the rule's sockets are plain TCP"
                    .into(),
            )
        })
        .into_iter()
        .collect()
}

/// A warning for each rule setting that the rule's other settings make
/// do nothing, which the per-setting "only applies to" warnings cannot see:
///
/// - `src` (the rule's `[src=]` or a YAML backend's `src:`) beside
///   `transparent`: forwarded connections and associations come from the
///   client's own address, so `src` is not bound for them (a health probe,
///   which has no client, still binds it);
/// - `mptcp` on a side that is UDP: MPTCP is TCP's, so `listen` (or `on`)
///   does nothing on a `/udp` listener and `connect` (or `on`) nothing
///   towards a `/udp` backend. A UDP→TCP rule's `connect` side acts.
pub fn ignored_option_warnings(cfg: &Config) -> Vec<crate::ConfigError> {
    let mut out = Vec::new();
    for r in &cfg.rules {
        let o = &r.options;
        if o.transparent == Some(true) {
            let backend_src = r.backends.iter().find(|b| b.src.is_some());
            let which = match (&o.src, backend_src) {
                (Some(_), _) => Some("option 'src'"),
                (None, Some(_)) => Some("a backend's src"),
                (None, None) => None,
            };
            if let Some(which) = which {
                let probes = if o.check_interval.is_some() {
                    " (health probes still bind it)"
                } else {
                    ""
                };
                out.push(whole_rule_warning(
                    r,
                    format!(
                        "{which} is ignored beside transparent: connections to the backends \
                         come from the client's own address{probes}"
                    ),
                ));
            }
        }
        if let Some(m) = o.mptcp {
            let udp_backend = r.backends.iter().any(|b| b.endpoint.proto == Proto::Udp);
            let listen = m.listens() && r.bind.proto == Proto::Udp;
            let connect = m.connects() && udp_backend;
            let sides = match (listen, connect) {
                (true, true) => Some("on this UDP rule (both sides are UDP)"),
                (true, false) => Some("for accepting on a /udp listener"),
                (false, true) => Some("for connecting to a /udp backend"),
                (false, false) => None,
            };
            if let Some(sides) = sides {
                out.push(whole_rule_warning(
                    r,
                    format!("option 'mptcp={m}' is Multipath TCP; ignored {sides}"),
                ));
            }
        }
        if out.len() >= crate::MAX_ERRORS {
            break;
        }
    }
    out
}

/// A warning for each rule chosen by server name (`[sni=]`) on a listener
/// whose own rule (the one without `sni=`, else the first) forwards
/// TCP→UDP: such a listener's connections are not read for a ClientHello
/// (the bytes are datagrams' payload, not TLS to route), so every
/// connection goes to that rule and the named ones never get one.
pub fn skipped_by_name_warnings(resolved: &ResolvedConfig) -> Vec<crate::ConfigError> {
    let mut out = Vec::new();
    for binder in resolved.rules.iter().filter(|r| !r.sni.is_empty()) {
        let listener = &binder.rule;
        let tcp_to_udp =
            listener.bind.proto == Proto::Tcp && listener.connect().proto == Proto::Udp;
        if !tcp_to_udp {
            continue;
        }
        for routed in &binder.sni {
            let r = &routed.rule;
            out.push(whole_rule_warning(
                r,
                format!(
                    "this rule is never chosen: the rule that binds its listener (line {}) \
                     forwards TCP to UDP, so no connection on it is read for a server name \
                     and every one goes to that rule",
                    listener.line
                ),
            ));
        }
        if out.len() >= crate::MAX_ERRORS {
            break;
        }
    }
    out
}

/// A warning about rule `r` showing the whole rule as written back (its
/// options too): the text names the settings that clash.
fn whole_rule_warning(r: &crate::Rule, message: String) -> crate::ConfigError {
    crate::ConfigError {
        file: r.file.clone(),
        line: r.line,
        column: 0,
        message,
        text: Shown(&r.to_string()).to_string(),
        more: 0,
    }
}

/// A warning about rule `r` as `--check` prints it: its line, and its listener.
fn rule_warning(r: &crate::Rule, message: String) -> crate::ConfigError {
    crate::ConfigError {
        file: r.file.clone(),
        line: r.line,
        column: 0,
        message,
        text: Shown(&format!(
            "{} {}/{}",
            r.bind.host_text, r.bind.port, r.bind.proto
        ))
        .to_string(),
        more: 0,
    }
}

#[cfg(test)]
mod tests;
