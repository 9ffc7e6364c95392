//! How a [`Snapshot`] is written out: the status file (JSON or text, with
//! rinetd-uv's fields so its users' scripts keep working), the one-line
//! `STATS:` summary, and the live connection list.
//!
//! rinetd-uv's fields and what oi puts in them:
//! - `connections.active_*`/`total_*`: TCP connections (past the ACL check),
//!   UDP associations, and unix socket clients; a connection counts under
//!   its client side (a TCP client forwarded to a unix backend is TCP).
//! - `traffic.bytes_in`/`bytes_out`: rinetd-uv counts bytes read from and
//!   written to *both* sockets of a connection, so for a forwarder both are
//!   the sum of the two directions. oi reports the same sum in both, and the
//!   split by direction under `oi.bytes_from_clients`/`bytes_to_clients`.
//! - `errors.accept`, `errors.connect` (backend connects that failed),
//!   `errors.denied` (ACL refusals, `not-allowed` and `denied` together).
//!   Refusals by a connection limit (`limit-reached`) and datagrams dropped
//!   by `accept-proxy` on a `/udp` listener are oi's, so they are only under
//!   `oi` (and in the text form's ERRORS and PROCESS sections), not folded
//!   into `errors.denied`, whose meaning rinetd-uv's users already rely on.
//!
//! No client address is written: rules are named by their bind side as
//! configured (a rule routed by TLS server name adds `[sni=NAME]`: each
//! rule of a shared listener is a rule of its own), backends by address.

use crate::stats::{ConnInfo, CounterValues, Snapshot, TextSection, COUNTERS};
use serde_json::{json, Value};
use std::fmt::Write;
use std::time::{Duration, SystemTime};

/// `2026-02-02T12:00:00Z`, as rinetd-uv stamps its status file.
fn utc(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Counters as JSON, with every key of the counter list ([`COUNTERS`]):
/// the `oi` section of a rule and of the totals.
fn counters_json(c: &CounterValues) -> Value {
    let map = COUNTERS
        .iter()
        .map(|d| (d.json.to_string(), Value::from((d.get)(c))))
        .collect();
    Value::Object(map)
}

/// The text status's per-rule counter line, from the counter list:
/// `Refused: not-allowed=0 denied=0 ...; connect failed: ...; udp ...`.
fn counters_text(c: &CounterValues) -> String {
    let sections: Vec<String> = TextSection::ALL
        .iter()
        .filter_map(|&section| {
            let items: Vec<String> = COUNTERS
                .iter()
                .filter_map(|d| match d.text {
                    Some((s, label)) if s == section => Some(format!("{label}={}", (d.get)(c))),
                    _ => None,
                })
                .collect();
            (!items.is_empty()).then(|| format!("{} {}", section.heading(), items.join(" ")))
        })
        .collect();
    sections.join("; ")
}

/// Both directions together: what rinetd-uv's `bytes_in` and `bytes_out` hold.
fn both_ways(c: &CounterValues) -> u64 {
    c.from_client.saturating_add(c.to_client)
}

/// The status file's JSON (also what `oi status --json` prints).
pub fn status_json(s: &Snapshot) -> Value {
    let t = &s.totals;
    let rules: Vec<Value> = s
        .rules
        .iter()
        .map(|r| {
            let c = &r.counters;
            let backends: Vec<Value> = r
                .backends
                .iter()
                .map(|b| {
                    let mut v = json!({
                        "name": b.member.clone().unwrap_or_else(|| b.addr.to_string()),
                        "address": b.addr.to_string(),
                        "host": b.addr.ip().to_string(),
                        "port": b.addr.port(),
                        "is_implicit": u8::from(b.expanded_from.is_some()),
                        "dns_parent_name": b.expanded_from,
                        "healthy": b.healthy,
                        "connections_active": b.active,
                        "connections_total": b.opened,
                        "bytes_in": b.from_client.saturating_add(b.to_client),
                        "bytes_out": b.from_client.saturating_add(b.to_client),
                        "oi": {
                            "bytes_from_clients": b.from_client,
                            "bytes_to_clients": b.to_client,
                            "admin_state": b.admin,
                            "weight": b.weight,
                        },
                    });
                    // Only with a health check, so rinetd-uv's document is unchanged without.
                    if b.probed {
                        v["probe_ms"] = json!(b.probe_us.map(|us| us as f64 / 1000.0));
                    }
                    v
                })
                .collect();
            let mut oi = counters_json(c);
            if let Some(tls) = super::tls::json(r, s.taken_at) {
                oi["tls"] = tls;
            }
            json!({
                "name": r.name,
                "algorithm": r.algorithm,
                "connections_active": c.active(),
                "connections_total": c.opened(),
                "bytes_in": both_ways(c),
                "bytes_out": both_ways(c),
                "backends": backends,
                "oi": oi,
            })
        })
        .collect();
    json!({
        "timestamp": utc(s.taken_at),
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": s.uptime.as_secs(),
        "config_reloads": s.reloads_ok,
        "stats_since_reload": utc(s.last_reload),
        "connections": {
            "active": t.active(),
            "active_tcp": t.active_tcp,
            "active_udp": t.active_udp,
            "active_unix": t.active_unix,
            "total": t.opened(),
            "total_tcp": t.opened_tcp,
            "total_udp": t.opened_udp,
            "total_unix": t.opened_unix,
        },
        "traffic": {
            "bytes_in": both_ways(t),
            "bytes_out": both_ways(t),
        },
        "errors": {
            "accept": s.accept_errors,
            "connect": t.connect_failed(),
            "denied": t.refused(),
        },
        "buffer_pool": {
            "buffer_size": s.buffer_size,
            "free": s.buffers_pooled,
        },
        "servers": s.rules.len(),
        "rules": rules,
        "oi": {
            "started": utc(s.started_at),
            "reloads_failed": s.reloads_failed,
            "descriptors": s.descriptors,
            "descriptors_limit": s.descriptor_limit,
            "totals": counters_json(t),
            "datagram_buffers_pooled": s.datagram_buffers_pooled,
            "pipes": {
                "live": s.pipes_live,
                "in_use": s.pipes_in_use,
                "pooled": s.pipes_pooled,
                "unavailable": s.pipes_unavailable,
            },
            "udp_datagrams_dropped": s.udp_datagrams_dropped,
            "udp_proxy_datagrams_dropped": t.udp_proxy_dropped,
            "connections_refused_by_limits": t.limit_reached,
            "udp_queued_bytes": s.udp_queued_bytes,
            "log_lines_queued": s.log_lines_queued,
            "log_lines_dropped": s.log_lines_dropped,
        },
    })
}

/// `1.0G`, `512.0M`, `3.2K`, `17B`: rinetd-uv's byte sizes (powers of 1024).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(f64, &str); 4] = [
        (1_099_511_627_776.0, "T"),
        (1_073_741_824.0, "G"),
        (1_048_576.0, "M"),
        (1024.0, "K"),
    ];
    // Precision lost above 2^53 bytes (8 PiB) only moves the first decimal.
    let f = n as f64;
    for (size, unit) in UNITS {
        if f >= size {
            return format!("{:.1}{unit}", f / size);
        }
    }
    format!("{n}B")
}

/// `1:02:03`, or `2 days, 1:02:03`, as rinetd-uv prints an uptime.
fn human_uptime(d: Duration) -> String {
    let s = d.as_secs();
    let (days, h, m, sec) = (s / 86_400, (s % 86_400) / 3600, (s % 3600) / 60, s % 60);
    match days {
        0 => format!("{h}:{m:02}:{sec:02}"),
        1 => format!("1 day, {h}:{m:02}:{sec:02}"),
        _ => format!("{days} days, {h}:{m:02}:{sec:02}"),
    }
}

/// The one-line summary `statsloginterval` logs, in rinetd-uv's layout:
/// `conns=active/total`, `traffic=in/out`, `errors=accept/connect/denied`.
pub fn stats_line(s: &Snapshot) -> String {
    let t = &s.totals;
    format!(
        "STATS: uptime={}s conns={}/{} tcp={}/{} udp={}/{} unix={}/{} traffic={}/{} errors={}/{}/{}",
        s.uptime.as_secs(),
        t.active(),
        t.opened(),
        t.active_tcp,
        t.opened_tcp,
        t.active_udp,
        t.opened_udp,
        t.active_unix,
        t.opened_unix,
        human_bytes(both_ways(t)),
        human_bytes(both_ways(t)),
        s.accept_errors,
        t.connect_failed(),
        t.refused(),
    )
}

/// The status file's text form (also what `oi status` prints): rinetd-uv's
/// sections first, then oi's own.
pub fn status_text(s: &Snapshot) -> String {
    let t = &s.totals;
    let mut o = String::new();
    let updated = chrono::DateTime::<chrono::Utc>::from(s.taken_at)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    // Writing to a String cannot fail. rinetd-uv's heading, so scripts that
    // look for it (its own test suite does) read oi's file too; "(oi)" says
    // which program wrote it.
    let _ = writeln!(o, "rinetd-uv Status Report (oi)");
    let _ = writeln!(o, "Updated: {updated}");
    let _ = writeln!(o, "Version: {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(o, "Uptime: {}", human_uptime(s.uptime));
    let _ = writeln!(o, "Config reloads: {}", s.reloads_ok);
    let _ = writeln!(o);
    let _ = writeln!(o, "CONNECTIONS");
    let _ = writeln!(
        o,
        "Active: {} (TCP: {}, UDP: {}, Unix: {})",
        t.active(),
        t.active_tcp,
        t.active_udp,
        t.active_unix
    );
    let _ = writeln!(
        o,
        "Total: {} (TCP: {}, UDP: {}, Unix: {})",
        t.opened(),
        t.opened_tcp,
        t.opened_udp,
        t.opened_unix
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "TRAFFIC");
    let _ = writeln!(o, "Bytes in: {}", human_bytes(both_ways(t)));
    let _ = writeln!(o, "Bytes out: {}", human_bytes(both_ways(t)));
    let _ = writeln!(o, "From clients: {}", human_bytes(t.from_client));
    let _ = writeln!(o, "To clients: {}", human_bytes(t.to_client));
    let _ = writeln!(o);
    let _ = writeln!(o, "ERRORS");
    let _ = writeln!(o, "Accept: {}", s.accept_errors);
    let _ = writeln!(
        o,
        "Connect: {} (refused {}, timeout {}, unreachable {}, other {})",
        t.connect_failed(),
        t.connect_refused,
        t.connect_timeout,
        t.connect_unreachable,
        t.connect_other
    );
    let _ = writeln!(
        o,
        "Denied: {} (not allowed {}, denied {})",
        t.refused(),
        t.not_allowed,
        t.denied
    );
    let _ = writeln!(
        o,
        "Limit reached: {} (maxconn, maxconn-per-client)",
        t.limit_reached
    );
    let _ = writeln!(o, "Reloads failed: {}", s.reloads_failed);
    let _ = writeln!(o);
    let _ = writeln!(o, "BUFFER POOL");
    let _ = writeln!(o, "Buffer size: {}", s.buffer_size);
    let _ = writeln!(o, "Free buffers: {}", s.buffers_pooled);
    let _ = writeln!(o, "Free datagram buffers: {}", s.datagram_buffers_pooled);
    let _ = writeln!(
        o,
        "Pipes: {} in use, {} pooled, {} unavailable",
        s.pipes_in_use, s.pipes_pooled, s.pipes_unavailable
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "PROCESS");
    match s.descriptors {
        Some(n) => {
            let _ = writeln!(o, "Descriptors: {n}");
        }
        None => {
            let _ = writeln!(o, "Descriptors: unknown");
        }
    }
    let _ = writeln!(
        o,
        "UDP datagrams dropped: {}, queued towards TCP: {} bytes",
        s.udp_datagrams_dropped, s.udp_queued_bytes
    );
    let _ = writeln!(
        o,
        "UDP datagrams dropped by accept-proxy: {}",
        t.udp_proxy_dropped
    );
    let _ = writeln!(
        o,
        "Log lines queued: {}, dropped: {}",
        s.log_lines_queued, s.log_lines_dropped
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "SERVERS");
    let _ = writeln!(o, "Count: {}", s.rules.len());
    let _ = writeln!(o);
    let _ = writeln!(o, "RULES");
    for r in &s.rules {
        let c = &r.counters;
        let _ = writeln!(o, "  {}:", r.name);
        let _ = writeln!(
            o,
            "    Active: {}, Total: {}, Traffic: {}/{}",
            c.active(),
            c.opened(),
            human_bytes(c.from_client),
            human_bytes(c.to_client)
        );
        let _ = writeln!(o, "    {}", counters_text(c));
        super::tls::text(&mut o, r, s.taken_at);
        if !r.backends.is_empty() {
            let _ = writeln!(o, "    Backends:");
            for b in &r.backends {
                let probe = match (b.probed, b.probe_us) {
                    (false, _) => String::new(),
                    (true, None) => ", probe=-".to_string(),
                    (true, Some(us)) => format!(", probe={:.1}ms", us as f64 / 1000.0),
                };
                // The operator's state and weight (`oi backend`) last, so
                // what scripts read before stays where it was.
                let weight = b
                    .weight
                    .map_or_else(String::new, |w| format!(", weight={w}"));
                let _ = writeln!(
                    o,
                    "      {}: {}, active={}, total={}, traffic={}/{}{probe}, state={}{weight}",
                    b.addr,
                    if b.healthy { "healthy" } else { "down" },
                    b.active,
                    b.opened,
                    human_bytes(b.from_client),
                    human_bytes(b.to_client),
                    b.admin,
                );
            }
        }
    }
    o
}

/// The live list as JSON (what `oi connections --json` prints).
pub fn connections_json(list: &[ConnInfo]) -> Value {
    let rows: Vec<Value> = list
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "rule": c.rule,
                "kind": c.kind.as_str(),
                "client": c.client.to_string(),
                "backend": c.backend.map(|b| b.to_string()),
                "age_seconds": c.age.as_secs_f64(),
                "bytes_from_client": c.from_client,
                "bytes_to_client": c.to_client,
                "state": c.state.as_str(),
                "server_name": c.server_name,
                "tls_subject": c.tls_subject,
            })
        })
        .collect();
    Value::Array(rows)
}

/// The live list as text, one line per entry under a header: columns split
/// by runs of spaces, no spaces inside a field, so `awk` reads them.
pub fn connections_text(rows: &Value) -> String {
    let mut table = vec![[
        "RULE",
        "KIND",
        "CLIENT",
        "BACKEND",
        "AGE",
        "FROM_CLIENT",
        "TO_CLIENT",
        "STATE",
        "SERVER_NAME",
        "TLS_SUBJECT",
        "ID",
    ]
    .map(String::from)];
    for r in rows.as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let text = |k: &str| r[k].as_str().unwrap_or("-").to_string();
        let num = |k: &str| r[k].as_u64().unwrap_or(0).to_string();
        let age = r["age_seconds"].as_f64().unwrap_or(0.0);
        table.push([
            text("rule"),
            text("kind"),
            text("client"),
            text("backend"),
            format!("{age:.0}s"),
            num("bytes_from_client"),
            num("bytes_to_client"),
            text("state"),
            text("server_name"),
            // RFC 4514 lets any character be written `\XX`: a space so
            // written keeps the column one field for `awk`. The id stays last.
            text("tls_subject").replace(' ', "\\20"),
            num("id"),
        ]);
    }
    let mut widths = [0usize; 11];
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in &table {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_and_uptimes_read_as_rinetd_uv_prints_them() {
        assert_eq!(human_bytes(17), "17B");
        assert_eq!(human_bytes(1536), "1.5K");
        assert_eq!(human_bytes(1 << 30), "1.0G");
        assert_eq!(human_bytes(2 << 40), "2.0T");
        assert_eq!(human_uptime(Duration::from_secs(3723)), "1:02:03");
        assert_eq!(
            human_uptime(Duration::from_secs(86_400 + 5)),
            "1 day, 0:00:05"
        );
        assert_eq!(
            human_uptime(Duration::from_secs(3 * 86_400)),
            "3 days, 0:00:00"
        );
    }
}
