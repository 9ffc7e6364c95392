//! A rule's TLS in `oi top`: which ends oi speaks TLS on, its handshakes
//! and failures (both sides together), and the days to its nearest
//! certificate expiry, read from the rule's `oi.tls` object of the status
//! JSON (absent for a rule without TLS, so such rules have no row).

use serde_json::Value;

/// One line of the TLS table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TlsRow {
    /// The rule's name (escaped as the other tables escape it).
    pub rule: String,
    /// Which ends: `client` (oi ends the client's TLS), `backend` (oi
    /// begins TLS to the backend) or `both`.
    pub ends: &'static str,
    /// Handshakes completed, both sides.
    pub handshakes: u64,
    /// Of which resumed an earlier session.
    pub resumed: u64,
    /// Handshakes that failed, both sides, whatever the reason.
    pub failed: u64,
    /// Days to the nearest certificate expiry; `None` when the rule
    /// presents no certificate (or none could be read).
    pub expires_in_days: Option<i64>,
}

/// A number at `key`, zero when absent.
fn n(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

impl TlsRow {
    /// The row of the rule named `rule` whose `oi` object is `oi`, if it
    /// speaks TLS.
    pub(super) fn parse(rule: &str, oi: &Value) -> Option<TlsRow> {
        let t = oi.get("tls")?;
        let on = |k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
        let ends = match (on("terminates"), on("originates")) {
            (true, true) => "both",
            (true, false) => "client",
            (false, true) => "backend",
            (false, false) => return None,
        };
        let sides = [t.get("client"), t.get("backend")];
        let sum = |k: &str| {
            sides
                .iter()
                .flatten()
                .fold(0u64, |a, s| a.saturating_add(n(s, k)))
        };
        Some(TlsRow {
            rule: rule.to_string(),
            ends,
            handshakes: sum("handshakes"),
            resumed: sum("resumed"),
            failed: sum("failed"),
            expires_in_days: t.get("expires_in_days").and_then(Value::as_i64),
        })
    }

    /// What its EXPIRES column says: `85d`, `-2d` once expired, `-` without.
    pub fn expires(&self) -> String {
        self.expires_in_days
            .map_or_else(|| "-".to_string(), |d| format!("{d}d"))
    }

    /// Whether it needs a look: a failed handshake, or a certificate within
    /// 14 days of its end (the alert's threshold).
    pub fn trouble(&self) -> bool {
        self.failed > 0 || self.expires_in_days.is_some_and(|d| d < 14)
    }
}

/// The TLS table as text (nothing when no rule speaks TLS), its rule
/// column `w` wide like the other tables'.
pub(super) fn text(out: &mut String, rows: &[TlsRow], w: usize) {
    use std::fmt::Write;
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:<w$} {:<7} {:>10} {:>8} {:>7} {:>8}",
        "RULE", "TLS", "HANDSHAKES", "RESUMED", "FAILED", "EXPIRES"
    );
    for t in rows {
        let _ = writeln!(
            out,
            "{:<w$} {:<7} {:>10} {:>8} {:>7} {:>8}",
            t.rule,
            t.ends,
            t.handshakes,
            t.resumed,
            t.failed,
            t.expires()
        );
    }
}
