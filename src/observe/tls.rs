//! A rule's TLS in the status views: the `tls` object of a rule's `oi`
//! section in the status JSON (which `/status.json`, the status page, `oi
//! status --json` and `oi top` read) and the text status's `TLS` lines.
//! Only for a rule that speaks TLS, so other rules' output is as it was.

use crate::stats::{CounterValues, RuleValues, TlsShown};
use serde_json::{json, Value};
use std::fmt::Write;
use std::time::SystemTime;

/// One side's handshake counts: (full, resumed, failures by reason).
fn side(c: &CounterValues, client: bool) -> (u64, u64, [(&'static str, u64); 5]) {
    if client {
        (
            c.tls_client_full,
            c.tls_client_resumed,
            [
                ("incompatible", c.tls_client_incompatible),
                ("bad_certificate", c.tls_client_bad_certificate),
                ("timeout", c.tls_client_timeout),
                ("unknown_name", c.tls_client_unknown_name),
                ("other", c.tls_client_other),
            ],
        )
    } else {
        (
            c.tls_backend_full,
            c.tls_backend_resumed,
            [
                ("incompatible", c.tls_backend_incompatible),
                ("bad_certificate", c.tls_backend_bad_certificate),
                ("timeout", c.tls_backend_timeout),
                ("unknown_name", c.tls_backend_unknown_name),
                ("other", c.tls_backend_other),
            ],
        )
    }
}

/// Whole days from `now` to `not_after` (seconds since 1970), rounded
/// down: negative once expired.
fn days_left(not_after: u64, now: SystemTime) -> i64 {
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (at, now) = (i128::from(not_after), i128::from(now));
    i64::try_from((at - now).div_euclid(86_400)).unwrap_or(i64::MAX)
}

/// One side's counts as JSON.
fn side_json(c: &CounterValues, client: bool) -> Value {
    let (full, resumed, failures) = side(c, client);
    let failed = failures.iter().fold(0u64, |a, (_, n)| a.saturating_add(*n));
    let by_reason: serde_json::Map<String, Value> = failures
        .iter()
        .map(|(k, n)| (k.to_string(), Value::from(*n)))
        .collect();
    json!({
        "handshakes": full.saturating_add(resumed),
        "resumed": resumed,
        "failed": failed,
        "failures": by_reason,
    })
}

/// The rule's `tls` object, `None` for a rule without TLS: which ends oi
/// speaks TLS on, each side's handshakes, and the certificates with the
/// days left to the nearest expiry (`expires_in_days`).
pub(super) fn json(r: &RuleValues, now: SystemTime) -> Option<Value> {
    let t: &TlsShown = r.tls.as_deref()?;
    let certificates: Vec<Value> = t
        .certificates
        .iter()
        .map(|c| {
            json!({
                "file": c.file,
                "role": c.role,
                "subject": c.subject,
                "not_after": c.not_after,
                "expires_in_days": c.not_after.map(|at| days_left(at, now)),
            })
        })
        .collect();
    let mut v = json!({
        "terminates": t.terminates,
        "originates": t.originates,
        "expires_in_days": t.earliest_expiry().map(|at| days_left(at, now)),
        "certificates": certificates,
    });
    if t.terminates {
        v["client"] = side_json(&r.counters, true);
    }
    if t.originates {
        v["backend"] = side_json(&r.counters, false);
    }
    Some(v)
}

/// The text status's lines for the rule's TLS (none without): one per
/// side oi speaks TLS on, then the nearest certificate expiry.
pub(super) fn text(o: &mut String, r: &RuleValues, now: SystemTime) {
    let Some(t) = r.tls.as_deref() else {
        return;
    };
    for (on, client, what) in [
        (t.terminates, true, "client (terminated)"),
        (t.originates, false, "backend (originated)"),
    ] {
        if !on {
            continue;
        }
        let (full, resumed, failures) = side(&r.counters, client);
        let failed: Vec<String> = failures
            .iter()
            .map(|(k, n)| format!("{}={n}", k.replace('_', "-")))
            .collect();
        let _ = writeln!(
            o,
            "    TLS {what}: handshakes full={full} resumed={resumed}; failed {}",
            failed.join(" ")
        );
    }
    let nearest = t
        .certificates
        .iter()
        .filter_map(|c| Some((c.not_after?, c)))
        .min_by_key(|(at, _)| *at);
    if let Some((at, c)) = nearest {
        let _ = writeln!(
            o,
            "    TLS certificate {} expires in {} days",
            c.file,
            days_left(at, now)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn days_left_round_down_and_go_negative_once_expired() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(days_left(1_000_000 + 86_400 * 3 + 5, now), 3);
        assert_eq!(days_left(1_000_000 + 86_399, now), 0);
        assert_eq!(days_left(1_000_000 - 1, now), -1);
        assert!(days_left(u64::MAX, now) > 0, "no overflow");
    }
}
