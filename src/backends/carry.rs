//! A pool's health, operator state and weights, and client affinity, carried to a new oi by `oi
//! upgrade` so the new process neither sends clients to a backend the old
//! one knew was down nor moves a client off the backend it was using.
//!
//! Members are matched by key (the same backend, the same address when
//! expanded), as a reload that keeps a backend matches them. Times travel
//! as what is left of them: a recovery time, an affinity entry's life.
//! The load (connections using a member) is not carried: each handed-over
//! connection takes its place on its member as it resumes
//! ([`BackendPool::lease_of`]).

use super::admin::AdminState;
use super::health::PROBE_DOWN;
use super::{now_ms, BackendPool};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Most affinity entries carried per pool (the table's own cap applies too).
const MOST_AFFINITY: usize = 1 << 20;

impl BackendPool {
    /// Every member's health and the affinity table, as the new oi reads them.
    pub(crate) fn carried(&self) -> Value {
        let now = now_ms();
        let members: Vec<Value> = self
            .members
            .load()
            .iter()
            .map(|m| {
                let s = &m.state;
                let until = s.down_until.load(Ordering::Relaxed);
                let down = match until {
                    0 => json!(null),
                    PROBE_DOWN => json!("probe"),
                    t => json!(t.saturating_sub(now)),
                };
                json!({
                    "key": m.key,
                    "failures": s.failures.load(Ordering::Relaxed),
                    "down_ms": down,
                    "was_down": s.was_down.load(Ordering::Relaxed),
                    "probe_fails": s.probe_fails.load(Ordering::Relaxed),
                    "probe_oks": s.probe_oks.load(Ordering::Relaxed),
                    "probe_us": s.probe_us.load(Ordering::Relaxed),
                    "admin": s.admin().as_str(),
                    "weight": s.weight_override(),
                })
            })
            .collect();
        let affinity: Vec<Value> = self.affinity.as_ref().map_or_else(Vec::new, |a| {
            a.lock()
                .entries()
                .into_iter()
                .take(MOST_AFFINITY)
                .map(|(client, m, left)| {
                    json!({
                        "client": client.to_string(),
                        "key": m.key,
                        "left_ms": u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                    })
                })
                .collect()
        });
        json!({ "members": members, "affinity": affinity })
    }

    /// Takes up what [`BackendPool::carried`] wrote, for the members and
    /// clients this pool has too.
    pub(crate) fn carry_on(&self, carried: &Value) {
        let now = now_ms();
        let members = self.members.load();
        let none = Vec::new();
        for c in carried["members"].as_array().unwrap_or(&none) {
            let Some(m) = members.iter().find(|m| c["key"] == *m.key) else {
                continue;
            };
            let s = &m.state;
            let u32_of = |k: &str| {
                c[k].as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0)
            };
            s.failures.store(u32_of("failures"), Ordering::Relaxed);
            s.probe_fails
                .store(u32_of("probe_fails"), Ordering::Relaxed);
            s.probe_oks.store(u32_of("probe_oks"), Ordering::Relaxed);
            if let Some(us) = c["probe_us"].as_u64() {
                s.probe_us.store(us, Ordering::Relaxed);
            }
            let until = match &c["down_ms"] {
                Value::Null => 0,
                Value::String(_) if self.check.is_some() => PROBE_DOWN,
                // Down by probes, and this pool probes no more: tried again
                // from now, as a reload that drops the check does.
                Value::String(_) => now,
                left => now.saturating_add(left.as_u64().unwrap_or(0)).max(1),
            };
            s.down_until.store(until, Ordering::Relaxed);
            s.was_down
                .store(c["was_down"].as_bool().unwrap_or(false), Ordering::Relaxed);
            // An operator's state and weight (`oi backend`); an older oi
            // carries neither: the file's then.
            let admin = c["admin"].as_str().and_then(AdminState::from_name);
            s.set_admin(admin.unwrap_or(AdminState::Ready));
            let weight = c["weight"]
                .as_u64()
                .and_then(|w| u32::try_from(w).ok())
                .filter(|&w| w <= u32::from(oi_wire::admin::MAX_WEIGHT));
            s.set_weight(weight);
        }
        let Some(table) = &self.affinity else {
            return;
        };
        let mut table = table.lock();
        for e in carried["affinity"].as_array().unwrap_or(&none) {
            let client = e["client"].as_str().and_then(|c| c.parse().ok());
            let member = members.iter().find(|m| e["key"] == *m.key);
            if let (Some(client), Some(m)) = (client, member) {
                let left = Duration::from_millis(e["left_ms"].as_u64().unwrap_or(0));
                table.restore(client, m, left);
            }
        }
    }
}
