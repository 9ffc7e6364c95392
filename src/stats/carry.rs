//! The counters `oi upgrade` carries to the new oi, so nothing an operator
//! watches (`oi status`, `/metrics`, the status file) starts again from
//! zero: every rule's counters and its backends', the process's, and each
//! rule's pool: its members' health and its client affinity
//! (`backends/carry.rs`).
//!
//! The old oi writes them as JSON ([`Stats::carried`]) after its live
//! connections have paused; the new one adds them to the rules it serves
//! under the same name ([`Stats::carry_on`]). Counts of what is open now
//! (`connections_active_*`, a backend's `active`) are not carried: the
//! handed-over connections count themselves as they are registered. Byte
//! counts are carried as the bytes of ended connections (the handed-over
//! ones bring their own) and as the highest value reported, below which
//! the new oi reports nothing.
//!
//! So do the clocks `oi status` shows (the uptime, as how long the old oi
//! had run, and when it started and last reloaded: `stats_since_reload`),
//! and each rule's shared bandwidth buckets (`rule-rate`, `client-rate`):
//! what they owe, in nanoseconds from full, so an upgrade is no way to
//! get a burst past a limit.

use super::counters::{get, CounterValues, Counters, COUNTERS};
use super::{RuleStats, Stats};
use serde_json::{json, Map, Value};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What an old oi sent the new one (`Stats::carried`'s JSON), with the
/// rules it was counting then: they leave [`Stats`]'s list when the
/// listeners close, but the connections it keeps still count in them.
pub(crate) struct Sent {
    /// The counters as sent.
    first: Value,
    /// The rules serving when they were read.
    rules: Vec<Arc<RuleStats>>,
}

impl Stats {
    /// Every rule's counters, its backends' and the process's, as the new
    /// oi reads them (see the module docs); the service sends
    /// [`Stats::carried_from_here`]'s.
    #[cfg(test)]
    pub(crate) fn carried(&self) -> Value {
        let rules: Vec<Arc<RuleStats>> = self.rules.lock().clone();
        self.carried_of(&rules)
    }

    /// [`Stats::carried`], and what [`Stats::drained_since`] compares with.
    pub(crate) fn carried_from_here(&self) -> (Value, Sent) {
        let rules: Vec<Arc<RuleStats>> = self.rules.lock().clone();
        let first = self.carried_of(&rules);
        (first.clone(), Sent { first, rules })
    }

    /// What this oi counted since it sent `sent` (old side, its last kept
    /// connection ended): each count's increase, and the bytes of the
    /// connections that ended here since (those the new oi took count
    /// none here: `Registered::handed_on`). The open counts and the byte
    /// highs are left out: nothing is open here any more.
    pub(crate) fn drained_since(&self, sent: &Sent) -> Value {
        let now = self.carried_of(&sent.rules);
        let first_rules = sent.first["rules"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let rules: Vec<Value> = now["rules"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|r| {
                let before = first_rules.iter().find(|f| f["name"] == r["name"]);
                let before = before.unwrap_or(&Value::Null);
                let backends: Vec<Value> = r["backends"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice)
                    .iter()
                    .map(|b| {
                        let was = before["backends"]
                            .as_array()
                            .and_then(|l| l.iter().find(|x| x["addr"] == b["addr"]))
                            .unwrap_or(&Value::Null);
                        json!({
                            "addr": b["addr"],
                            "opened": minus(&b["opened"], &was["opened"]),
                            "ended": pair_minus(&b["ended"], &was["ended"]),
                        })
                    })
                    .collect();
                let mut counted = counts_since(r, before);
                counted["name"] = r["name"].clone();
                counted["backends"] = json!(backends);
                counted
            })
            .collect();
        json!({
            "process": counts_since(&now["process"], &sent.first["process"]),
            "accept_errors": minus(&now["accept_errors"], &sent.first["accept_errors"]),
            "rules": rules,
        })
    }

    /// Adds what the previous oi counted while it drained
    /// ([`Stats::drained_since`]'s JSON) to this one's counters, as
    /// [`Stats::carry_on`] adds what it carried; returns how many of its
    /// rules this oi serves.
    pub(crate) fn fold_drained(&self, drained: &Value) -> usize {
        add(&self.process, &drained["process"]);
        add_to(
            &self.accept_errors,
            drained["accept_errors"].as_u64().unwrap_or(0),
        );
        let rules: Vec<Arc<RuleStats>> = self.rules.lock().clone();
        let mut matched = 0;
        for c in drained["rules"].as_array().map_or(&[][..], Vec::as_slice) {
            let Some(r) = rules.iter().find(|r| c["name"] == *r.name()) else {
                continue;
            };
            matched += 1;
            add(&r.counters, c);
            add_backends(r, c);
        }
        matched
    }

    /// [`Stats::carried`] of `rules`.
    fn carried_of(&self, rules: &[Arc<RuleStats>]) -> Value {
        // Ended totals before the live list, as a snapshot reads them.
        let process_ended = self.process.ended_bytes();
        let ended: Vec<(u64, u64)> = rules.iter().map(|r| r.counters.ended_bytes()).collect();
        let conns = self.live.list();
        let mut out = Vec::new();
        let (mut all_from, mut all_to) = (0u64, 0u64);
        for c in &conns {
            let (f, t) = c.bytes();
            all_from = all_from.saturating_add(f);
            all_to = all_to.saturating_add(t);
        }
        for (r, rule_ended) in rules.iter().zip(ended) {
            let (mut from, mut to) = (0u64, 0u64);
            for c in conns.iter().filter(|c| Arc::ptr_eq(&c.rule, r)) {
                let (f, t) = c.bytes();
                from = from.saturating_add(f);
                to = to.saturating_add(t);
            }
            let backends: Vec<Value> = r
                .backends
                .load()
                .iter()
                .map(|b| {
                    json!({
                        "addr": b.addr.to_string(),
                        "opened": get(&b.opened),
                        "ended": [get(&b.ended_from_client), get(&b.ended_to_client)],
                        "seen": [get(&b.seen_from_client), get(&b.seen_to_client)],
                    })
                })
                .collect();
            let pool = r.pool.load().as_ref().map(|p| p.carried());
            let owed = r.rates.owed(Instant::now());
            let clients: Vec<Value> = owed
                .clients
                .iter()
                .map(|(ip, (u, d))| json!([ip.to_string(), u, d]))
                .collect();
            out.push(json!({
                "rates": { "rule": [owed.rule.0, owed.rule.1], "clients": clients },
                "pool": pool,
                "name": &*r.name(),
                "counters": encode(&r.counters.values(rule_ended, from, to)),
                "ended": [rule_ended.0, rule_ended.1],
                "backends": backends,
            }));
        }
        let totals = self.process.values(process_ended, all_from, all_to);
        let (started, started_at) = *self.started.lock();
        json!({
            "uptime_ns": nanos(started.elapsed()),
            "started_ns": since_epoch(started_at),
            "last_reload_ns": since_epoch(*self.last_reload.lock()),
            "process": {
                "counters": encode(&totals),
                "ended": [process_ended.0, process_ended.1],
            },
            "reloads_ok": get(&self.reloads_ok),
            "reloads_failed": get(&self.reloads_failed),
            "accept_errors": get(&self.accept_errors),
            "rules": out,
        })
    }

    /// Adds what a previous oi carried (`carried`'s JSON) to this one's
    /// counters; returns how many of its rules this oi serves (the others'
    /// counts stay in the process's totals only).
    pub(crate) fn carry_on(&self, carried: &Value) -> usize {
        add(&self.process, &carried["process"]);
        self.carry_clocks(carried);
        for (key, cell) in [
            ("reloads_ok", &self.reloads_ok),
            ("reloads_failed", &self.reloads_failed),
            ("accept_errors", &self.accept_errors),
        ] {
            add_to(cell, carried[key].as_u64().unwrap_or(0));
        }
        let rules: Vec<Arc<RuleStats>> = self.rules.lock().clone();
        let mut matched = 0;
        for c in carried["rules"].as_array().map_or(&[][..], Vec::as_slice) {
            let Some(r) = rules.iter().find(|r| c["name"] == *r.name()) else {
                continue;
            };
            matched += 1;
            add(&r.counters, c);
            r.rates.carry_on(&owed(&c["rates"]), Instant::now());
            if let Some(pool) = r.pool.load().as_ref() {
                pool.carry_on(&c["pool"]);
            }
            add_backends(r, c);
        }
        matched
    }
}

/// Adds a carried rule's backends' counts to `r`'s backends of the same address.
fn add_backends(r: &RuleStats, c: &Value) {
    for b in c["backends"].as_array().map_or(&[][..], Vec::as_slice) {
        let Some(addr) = b["addr"].as_str().and_then(|a| a.parse().ok()) else {
            continue;
        };
        let Some(mine) = r.backend(addr) else {
            continue;
        };
        add_to(&mine.opened, b["opened"].as_u64().unwrap_or(0));
        add_to(&mine.ended_from_client, b["ended"][0].as_u64().unwrap_or(0));
        add_to(&mine.ended_to_client, b["ended"][1].as_u64().unwrap_or(0));
        let seen = |i: usize| b["seen"][i].as_u64().unwrap_or(0);
        mine.seen_from_client.fetch_max(seen(0), Ordering::Relaxed);
        mine.seen_to_client.fetch_max(seen(1), Ordering::Relaxed);
    }
}

/// `now - before` of one carried number (saturating; a missing one is 0).
fn minus(now: &Value, before: &Value) -> Value {
    json!(now
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(before.as_u64().unwrap_or(0)))
}

/// [`minus`] of a carried pair (`ended`: from and to the clients).
fn pair_minus(now: &Value, before: &Value) -> Value {
    json!([minus(&now[0], &before[0]), minus(&now[1], &before[1])])
}

/// The increase of one carried set (`counters`, `ended`) since `before`,
/// without the open counts and the byte highs ([`add`] skips what is absent).
fn counts_since(now: &Value, before: &Value) -> Value {
    let counters: Map<String, Value> = COUNTERS
        .iter()
        .filter(|d| !d.field.starts_with("active_"))
        .filter(|d| !matches!(d.field, "from_client" | "to_client"))
        .map(|d| {
            let key = d.json;
            (
                key.to_string(),
                minus(&now["counters"][key], &before["counters"][key]),
            )
        })
        .collect();
    json!({
        "counters": counters,
        "ended": pair_minus(&now["ended"], &before["ended"]),
    })
}

impl Stats {
    /// The previous oi's start (its uptime back from now, and its
    /// wall-clock start) and last reload become this one's. A value that
    /// is missing, or does not fit this process's clock, leaves its own.
    fn carry_clocks(&self, carried: &Value) {
        let ns = |key: &str| carried[key].as_u64().map(Duration::from_nanos);
        let mut started = self.started.lock();
        if let Some(at) = ns("uptime_ns").and_then(|up| Instant::now().checked_sub(up)) {
            started.0 = started.0.min(at);
        }
        if let Some(at) = ns("started_ns").and_then(|d| UNIX_EPOCH.checked_add(d)) {
            started.1 = started.1.min(at);
        }
        drop(started);
        // Carried before this oi's service loop runs: it has not reloaded.
        if let Some(at) = ns("last_reload_ns").and_then(|d| UNIX_EPOCH.checked_add(d)) {
            *self.last_reload.lock() = at;
        }
    }
}

/// Nanoseconds in `d`, saturating (u64 holds 584 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds since the epoch at `t` (0 before it).
fn since_epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, nanos)
}

/// A rule's carried `rates` (see [`crate::stats::rate::RuleRates::owed`]);
/// entries that do not read are left out.
fn owed(v: &Value) -> crate::stats::rate::Owed {
    let ns = |v: &Value| v.as_u64().unwrap_or(0);
    let clients = v["clients"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(|c| {
            let ip: IpAddr = c[0].as_str()?.parse().ok()?;
            Some((ip, (ns(&c[1]), ns(&c[2]))))
        })
        .collect();
    crate::stats::rate::Owed {
        rule: (ns(&v["rule"][0]), ns(&v["rule"][1])),
        clients,
    }
}

/// The counter list's values by JSON key.
fn encode(v: &CounterValues) -> Value {
    let map: Map<String, Value> = COUNTERS
        .iter()
        .map(|d| (d.json.to_string(), json!((d.get)(v))))
        .collect();
    Value::Object(map)
}

/// Adds one carried set (`counters`, `ended`) to `into`: counts added,
/// the byte counts' reported highs as a floor, open counts left alone.
fn add(into: &Counters, carried: &Value) {
    for d in COUNTERS {
        if d.field.starts_with("active_") {
            continue;
        }
        let (Some(n), Some(cell)) = (
            carried["counters"][d.json].as_u64(),
            into.cells.by_json(d.json),
        ) else {
            continue;
        };
        if matches!(d.field, "from_client" | "to_client") {
            cell.fetch_max(n, Ordering::Relaxed);
        } else {
            add_to(cell, n);
        }
    }
    let ended = |i: usize| carried["ended"][i].as_u64().unwrap_or(0);
    into.carry_ended(ended(0), ended(1));
}

/// Adds `n`, saturating.
fn add_to(cell: &std::sync::atomic::AtomicU64, n: u64) {
    let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_add(n))
    });
}
