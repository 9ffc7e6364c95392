//! The counters of the rules a listener shares by TLS server name
//! (`[sni=...]`). Each such rule is a rule of its own in every output (the
//! status file, the STATS line's totals, `/metrics`, `oi status`, `oi top`,
//! the status page), named `host:port/tcp[sni=NAME]`, with its backends,
//! their health and their counters. The rule that binds the listener (the
//! one without `sni=`, else the first) keeps the listener's counters, which
//! also count what happens before a connection is routed; every other rule
//! gets counters of its own, listed after the listener's. A reload keeps a
//! rule's counters when the listener and the rule's server name stay, as it
//! keeps the listener's; `oi upgrade` carries them by name like any rule's.

use crate::backends::OnChange;
use crate::route::shared::Shared;
use crate::route::Route;
use crate::stats::RuleStats;
use std::net::SocketAddr;
use std::sync::Arc;

/// `base` (the listener's name, `host:port/proto` or the unix socket), with
/// `[sni=NAME]` after it for a rule routed by server name: no space, so the
/// text outputs' columns stay one field each.
pub(super) fn shown(base: &str, server_name: Option<&str>) -> String {
    match server_name {
        Some(name) => format!("{base}[sni={name}]"),
        None => base.to_string(),
    }
}

/// Gives each rule of `route` (a listener's route, fresh from the
/// configuration) the counters its connections count in: `own` (the
/// listener's) for the rule that binds it; for another, the counters the
/// rule of the same server name had on `old` (the route a reload replaces),
/// else new ones named [`shown`]. Counters of `old`'s rules that no rule
/// takes are forgotten (their open connections keep them), and `own` is
/// named after the rule that binds the listener now. Stale counters go
/// before any are renamed or added, so no two listed rules share a name.
pub(super) fn count(
    shared: &Shared,
    base: &str,
    route: &Route,
    own: &Arc<RuleStats>,
    old: Option<&Route>,
) {
    let binding = route.server_name();
    let was: Vec<(Option<&str>, &Arc<RuleStats>)> = old
        .and_then(|o| o.sni.as_deref())
        .map(|names| {
            names
                .rules()
                .filter_map(|(_, r)| Some((r.server_name(), r.stats.get()?)))
                .filter(|(_, s)| !Arc::ptr_eq(s, own))
                .collect()
        })
        .unwrap_or_default();
    // Which counters each rule takes: `None` for new ones.
    let plan: Vec<(&Arc<Route>, Option<&Arc<RuleStats>>)> = route
        .sni
        .iter()
        .flat_map(|names| names.rules())
        .map(|(_, r)| {
            let name = r.server_name();
            let kept = if name == binding {
                Some(own)
            } else {
                was.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
            };
            (r, kept)
        })
        .collect();
    for (_, stale) in &was {
        let taken = plan
            .iter()
            .any(|(_, k)| k.is_some_and(|k| Arc::ptr_eq(k, stale)));
        if !taken {
            shared.stats.remove_rule(stale);
        }
    }
    own.rename(&shown(base, binding));
    for (r, kept) in plan {
        let stats = match kept {
            // The listener's counters follow the listener's route (its caller).
            Some(s) if Arc::ptr_eq(s, own) => s.clone(),
            Some(s) => {
                s.set_backends(&r.backend_addrs());
                s.clone()
            }
            None => shared.stats.add_rule(
                shown(base, r.server_name()),
                r.bind_proto,
                &r.backend_addrs(),
            ),
        };
        if !Arc::ptr_eq(&stats, own) {
            stats.set_pool(r.pool.clone());
            stats.set_tls(r.tls_shown.clone());
        }
        // Each route is fresh, so this is its first and only set.
        let _ = r.stats.set(stats);
    }
}

/// Forgets the counters of the rules `route` routes by server name: its
/// listener stopped (their open connections keep them, as a rule's do).
pub(super) fn forget(shared: &Shared, route: &Route) {
    for (_, r) in route.sni.iter().flat_map(|names| names.rules()) {
        if let Some(stats) = r.stats.get() {
            shared.stats.remove_rule(stats);
        }
    }
}

/// What the DNS refresher calls when the addresses of a pool change:
/// `stats` lists the new ones (kept weakly: a removed rule's counters go).
pub(super) fn follow_addresses(stats: &Arc<RuleStats>) -> OnChange {
    let stats = Arc::downgrade(stats);
    Box::new(move |addrs: &[SocketAddr]| {
        if let Some(stats) = stats.upgrade() {
            stats.set_backends(addrs);
        }
    })
}
