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

use super::counters::{get, CounterValues, Counters, COUNTERS};
use super::{lock, RuleStats, Stats};
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Stats {
    /// Every rule's counters, its backends' and the process's, as the new
    /// oi reads them (see the module docs).
    pub(crate) fn carried(&self) -> Value {
        let rules: Vec<Arc<RuleStats>> = lock(&self.rules).clone();
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
            out.push(json!({
                "pool": pool,
                "name": &*r.name,
                "counters": encode(&r.counters.values(rule_ended, from, to)),
                "ended": [rule_ended.0, rule_ended.1],
                "backends": backends,
            }));
        }
        let totals = self.process.values(process_ended, all_from, all_to);
        json!({
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
        for (key, cell) in [
            ("reloads_ok", &self.reloads_ok),
            ("reloads_failed", &self.reloads_failed),
            ("accept_errors", &self.accept_errors),
        ] {
            add_to(cell, carried[key].as_u64().unwrap_or(0));
        }
        let rules: Vec<Arc<RuleStats>> = lock(&self.rules).clone();
        let mut matched = 0;
        for c in carried["rules"].as_array().map_or(&[][..], Vec::as_slice) {
            let Some(r) = rules.iter().find(|r| c["name"] == *r.name) else {
                continue;
            };
            matched += 1;
            add(&r.counters, c);
            if let Some(pool) = r.pool.load().as_ref() {
                pool.carry_on(&c["pool"]);
            }
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
        matched
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
