//! What `oi top` shows, computed from two samples of a running oi (pure: no
//! I/O, no terminal). A sample is the control socket's `status json` and
//! `connections json` answers, the same documents `oi status --json` and
//! `oi connections --json` print, so `oi top` reads nothing the status file's
//! users do not already rely on. Rates are the difference between two samples
//! over the time between them; a counter that went down (oi restarted between
//! samples) gives a rate of zero, not a huge one.

use serde_json::Value;
use std::collections::HashMap;

mod tls;
pub use tls::TlsRow;

/// One rule's counters in a sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuleSample {
    /// The rule's name as oi prints it (`0.0.0.0:80/tcp`).
    pub name: String,
    /// The name as oi sent it, not escaped: what a request names it by.
    pub asked_as: String,
    /// Connections and associations open now.
    pub active: u64,
    /// Connections admitted since start (for the rate of new ones).
    pub total: u64,
    /// Bytes from clients towards backends since start.
    pub from_client: u64,
    /// Bytes from backends to clients since start.
    pub to_client: u64,
    /// Clients refused: by allow/deny and by connection limits.
    pub refused: u64,
    /// Backend connects that failed, for any reason.
    pub errors: u64,
    /// The rule's backends.
    pub backends: Vec<BackendSample>,
    /// Its TLS, when oi speaks TLS on it.
    pub tls: Option<TlsRow>,
}

/// One backend of a rule in a sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackendSample {
    /// The backend's name (its address, or `name:port[i]` for expanded names).
    pub name: String,
    /// The name as oi sent it, not escaped: what a request names it by.
    pub asked_as: String,
    /// Whether health counts it up.
    pub healthy: bool,
    /// Connections open to it now.
    pub active: u64,
    /// Bytes through it, both directions, since start (for its rate).
    pub bytes: u64,
    /// The last active probe's round trip in milliseconds, where oi reports one.
    pub probe_ms: Option<f64>,
    /// The operator's state (`oi backend`): `ready`, `drain`, `disabled`.
    pub admin: String,
}

/// One live connection in a sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConnSample {
    /// The rule it came in on.
    pub rule: String,
    /// tcp, udp or unix.
    pub kind: String,
    /// The client's address.
    pub client: String,
    /// The backend it was forwarded to.
    pub backend: String,
    /// Seconds since it opened.
    pub age: f64,
    /// Bytes from the client so far.
    pub from_client: u64,
    /// Bytes to the client so far.
    pub to_client: u64,
}

/// Everything one poll of the control socket brought back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds on the caller's monotonic clock when it was taken.
    pub at: f64,
    /// Descriptors oi holds.
    pub descriptors: Option<u64>,
    /// The soft open-file limit they count against.
    pub descriptor_limit: Option<u64>,
    /// Per rule, in oi's order.
    pub rules: Vec<RuleSample>,
    /// Live connections.
    pub conns: Vec<ConnSample>,
}

fn u(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// The text at `key`, escaped as oi escapes outside text everywhere else
/// ([`oi_config::Escaped`]): a backend's `name:` is whatever the operator's
/// YAML said, and neither the one-shot table (often piped to a terminal
/// anyway) nor the live screen may carry its control bytes to the terminal.
/// Not cut: names identify rules and backends between samples.
fn s(v: &Value, key: &str) -> String {
    oi_config::Escaped(&raw(v, key)).to_string()
}

/// The text at `key` as oi sent it: for the requests the action keys send
/// (`backend drain RULE BACKEND`), which name the rule and backend by it.
fn raw(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

impl Sample {
    /// Reads the two JSON answers. Missing keys read as zero, so an oi that
    /// lacks a newer counter still shows; a document that is not JSON is an error.
    pub fn parse(status: &str, connections: &str, at: f64) -> Result<Sample, String> {
        let st: Value =
            serde_json::from_str(status).map_err(|e| format!("status answer is not JSON: {e}"))?;
        let cs: Value = serde_json::from_str(connections)
            .map_err(|e| format!("connections answer is not JSON: {e}"))?;
        let none = Value::Null;
        let rules = st
            .get("rules")
            .and_then(Value::as_array)
            .map(|rs| rs.iter().map(rule).collect())
            .unwrap_or_default();
        let conns = cs
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|c| ConnSample {
                        rule: s(c, "rule"),
                        kind: s(c, "kind"),
                        client: s(c, "client"),
                        backend: s(c, "backend"),
                        age: c.get("age_seconds").and_then(Value::as_f64).unwrap_or(0.0),
                        from_client: u(c, "bytes_from_client"),
                        to_client: u(c, "bytes_to_client"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let oi = st.get("oi").unwrap_or(&none);
        Ok(Sample {
            at,
            descriptors: oi.get("descriptors").and_then(Value::as_u64),
            descriptor_limit: oi.get("descriptors_limit").and_then(Value::as_u64),
            rules,
            conns,
        })
    }
}

fn rule(r: &Value) -> RuleSample {
    let none = Value::Null;
    let oi = r.get("oi").unwrap_or(&none);
    RuleSample {
        tls: TlsRow::parse(&s(r, "name"), oi),
        name: s(r, "name"),
        asked_as: raw(r, "name"),
        active: u(r, "connections_active"),
        total: u(r, "connections_total"),
        from_client: u(oi, "bytes_from_clients"),
        to_client: u(oi, "bytes_to_clients"),
        refused: ["acl_not_allowed", "acl_denied", "limit_reached"]
            .iter()
            .fold(0u64, |a, k| a.saturating_add(u(oi, k))),
        errors: [
            "connect_failed_refused",
            "connect_failed_timeout",
            "connect_failed_unreachable",
            "connect_failed_other",
        ]
        .iter()
        .fold(0u64, |a, k| a.saturating_add(u(oi, k))),
        backends: r
            .get("backends")
            .and_then(Value::as_array)
            .map(|bs| {
                bs.iter()
                    .map(|b| {
                        let boi = b.get("oi").unwrap_or(&none);
                        BackendSample {
                            name: s(b, "name"),
                            asked_as: raw(b, "name"),
                            healthy: b.get("healthy").and_then(Value::as_bool).unwrap_or(true),
                            active: u(b, "connections_active"),
                            bytes: u(boi, "bytes_from_clients")
                                .saturating_add(u(boi, "bytes_to_clients")),
                            probe_ms: b.get("probe_ms").and_then(Value::as_f64),
                            admin: boi
                                .get("admin_state")
                                .and_then(Value::as_str)
                                .unwrap_or("ready")
                                .to_string(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// How the rules table is ordered (`s` cycles through them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// As in the configuration.
    Config,
    /// Most open connections first.
    Active,
    /// Most new connections per second first.
    NewRate,
    /// Most bytes per second (both ways) first.
    Traffic,
    /// Most refusals and errors first.
    Trouble,
}

impl SortBy {
    /// The next order, for the `s` key.
    pub fn next(self) -> SortBy {
        match self {
            SortBy::Config => SortBy::Active,
            SortBy::Active => SortBy::NewRate,
            SortBy::NewRate => SortBy::Traffic,
            SortBy::Traffic => SortBy::Trouble,
            SortBy::Trouble => SortBy::Config,
        }
    }

    /// What the header says.
    pub fn label(self) -> &'static str {
        match self {
            SortBy::Config => "config order",
            SortBy::Active => "active",
            SortBy::NewRate => "new/s",
            SortBy::Traffic => "bytes/s",
            SortBy::Trouble => "refused+errors",
        }
    }
}

/// What the user chose to see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewOptions {
    /// Order of the rules.
    pub sort: SortBy,
    /// Only this rule, when set (`f` cycles through the rules).
    pub filter: Option<String>,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            sort: SortBy::Config,
            filter: None,
        }
    }
}

impl ViewOptions {
    /// The `f` key: all rules, then each rule of `sample` in turn, then all again.
    pub fn next_filter(&mut self, sample: &Sample) {
        let names: Vec<&str> = sample.rules.iter().map(|r| r.name.as_str()).collect();
        self.filter = match &self.filter {
            None => names.first().map(|n| n.to_string()),
            Some(cur) => match names.iter().position(|n| n == cur) {
                Some(i) if i + 1 < names.len() => Some(names[i + 1].to_string()),
                _ => None,
            },
        };
    }

    fn shows(&self, rule: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| f == rule)
    }
}

/// One line of the rules table.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleRow {
    /// The rule's name.
    pub name: String,
    /// Open now.
    pub active: u64,
    /// New connections per second.
    pub new_per_s: f64,
    /// Bytes per second from clients.
    pub in_per_s: f64,
    /// Bytes per second to clients.
    pub out_per_s: f64,
    /// Refusals since start.
    pub refused: u64,
    /// Backend connect failures since start.
    pub errors: u64,
}

/// One line of the backends table.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendRow {
    /// The rule it belongs to.
    pub rule: String,
    /// Its name.
    pub name: String,
    /// Up by health.
    pub up: bool,
    /// Open connections to it.
    pub active: u64,
    /// Its share of the rule's open connections, 0..=1.
    pub load: f64,
    /// Bytes per second through it.
    pub bytes_per_s: f64,
    /// The last probe's round trip, where there is one.
    pub probe_ms: Option<f64>,
    /// The operator's state, `ready` unless drained or disabled.
    pub admin: String,
    /// The rule's and the backend's names as oi sent them (not escaped):
    /// what the action keys' requests name them by.
    pub asked_as: (String, String),
}

impl BackendRow {
    /// What its STATE column says: `up`, `DOWN`, or the operator's state
    /// (`drain`, `disabled`) when it is not ready.
    pub fn state(&self) -> &str {
        match (self.admin.as_str(), self.up) {
            ("ready" | "", true) => "up",
            ("ready" | "", false) => "DOWN",
            (admin, _) => admin,
        }
    }
}

/// One line of the busiest connections.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnRow {
    /// Its rule.
    pub rule: String,
    /// tcp, udp, unix.
    pub kind: String,
    /// The client's address.
    pub client: String,
    /// The backend.
    pub backend: String,
    /// Seconds open.
    pub age: f64,
    /// Bytes per second from the client.
    pub in_per_s: f64,
    /// Bytes per second to the client.
    pub out_per_s: f64,
}

/// A whole screen's worth, ready to draw or print.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    /// Seconds between the two samples (0 for the first one).
    pub elapsed: f64,
    /// Open connections over the rules shown.
    pub active: u64,
    /// New connections per second over the rules shown.
    pub new_per_s: f64,
    /// Bytes per second from clients over the rules shown.
    pub in_per_s: f64,
    /// Bytes per second to clients over the rules shown.
    pub out_per_s: f64,
    /// Descriptors oi holds, and of how many: `23/1024`.
    pub descriptors: String,
    /// The rules table, sorted.
    pub rules: Vec<RuleRow>,
    /// The backends table, in rule order.
    pub backends: Vec<BackendRow>,
    /// Live connections, busiest first.
    pub conns: Vec<ConnRow>,
    /// The rules oi speaks TLS on, in rule order.
    pub tls: Vec<TlsRow>,
}

/// `(now - before) / secs`, zero when the counter went backwards or no time passed.
fn rate(now: u64, before: u64, secs: f64) -> f64 {
    if secs <= 0.0 || now < before {
        0.0
    } else {
        (now - before) as f64 / secs
    }
}

/// The view of `cur`, with rates against `prev` (none on the first sample).
pub fn view(prev: Option<&Sample>, cur: &Sample, opts: &ViewOptions) -> View {
    let elapsed = prev.map_or(0.0, |p| (cur.at - p.at).max(0.0));
    let before: HashMap<&str, &RuleSample> = prev
        .map(|p| p.rules.iter().map(|r| (r.name.as_str(), r)).collect())
        .unwrap_or_default();
    let mut rules = Vec::new();
    let mut backends = Vec::new();
    let mut tls = Vec::new();
    for r in cur.rules.iter().filter(|r| opts.shows(&r.name)) {
        tls.extend(r.tls.clone());
        let b = before.get(r.name.as_str()).copied();
        let was = |f: fn(&RuleSample) -> u64| b.map_or(f(r), f);
        rules.push(RuleRow {
            name: r.name.clone(),
            active: r.active,
            new_per_s: rate(r.total, was(|x| x.total), elapsed),
            in_per_s: rate(r.from_client, was(|x| x.from_client), elapsed),
            out_per_s: rate(r.to_client, was(|x| x.to_client), elapsed),
            refused: r.refused,
            errors: r.errors,
        });
        let rule_active: u64 = r.backends.iter().map(|x| x.active).sum();
        for be in &r.backends {
            let prev_bytes = b
                .and_then(|b| b.backends.iter().find(|x| x.name == be.name))
                .map_or(be.bytes, |x| x.bytes);
            backends.push(BackendRow {
                rule: r.name.clone(),
                name: be.name.clone(),
                up: be.healthy,
                active: be.active,
                load: if rule_active == 0 {
                    0.0
                } else {
                    be.active as f64 / rule_active as f64
                },
                bytes_per_s: rate(be.bytes, prev_bytes, elapsed),
                probe_ms: be.probe_ms,
                admin: be.admin.clone(),
                asked_as: (r.asked_as.clone(), be.asked_as.clone()),
            });
        }
    }
    sort_rules(&mut rules, opts.sort);
    let conns = busiest(prev, cur, opts, elapsed);
    View {
        elapsed,
        active: rules.iter().map(|r| r.active).sum(),
        new_per_s: rules.iter().map(|r| r.new_per_s).sum(),
        in_per_s: rules.iter().map(|r| r.in_per_s).sum(),
        out_per_s: rules.iter().map(|r| r.out_per_s).sum(),
        descriptors: match (cur.descriptors, cur.descriptor_limit) {
            (Some(n), Some(l)) => format!("{n}/{l}"),
            (Some(n), None) => n.to_string(),
            (None, _) => "-".to_string(),
        },
        rules,
        backends,
        conns,
        tls,
    }
}

fn sort_rules(rules: &mut [RuleRow], by: SortBy) {
    let key = |r: &RuleRow| -> f64 {
        match by {
            SortBy::Config => 0.0,
            SortBy::Active => r.active as f64,
            SortBy::NewRate => r.new_per_s,
            SortBy::Traffic => r.in_per_s + r.out_per_s,
            SortBy::Trouble => r.refused.saturating_add(r.errors) as f64,
        }
    };
    // Stable, so equal rules keep the configuration's order.
    rules.sort_by(|a, b| key(b).total_cmp(&key(a)));
}

/// Live connections by bytes per second (both ways) since the last sample; a
/// connection new since then is rated over its own age.
fn busiest(prev: Option<&Sample>, cur: &Sample, opts: &ViewOptions, elapsed: f64) -> Vec<ConnRow> {
    let key = |c: &ConnSample| (c.rule.clone(), c.client.clone(), c.backend.clone());
    let before: HashMap<(String, String, String), &ConnSample> = prev
        .map(|p| p.conns.iter().map(|c| (key(c), c)).collect())
        .unwrap_or_default();
    let mut rows: Vec<ConnRow> = cur
        .conns
        .iter()
        .filter(|c| opts.shows(&c.rule))
        .map(|c| {
            let (from0, to0, secs) = match before.get(&key(c)) {
                // The same client address on the same rule, and older than
                // the gap: the same connection.
                Some(p) if c.age >= p.age => (p.from_client, p.to_client, elapsed),
                _ => (0, 0, c.age),
            };
            ConnRow {
                rule: c.rule.clone(),
                kind: c.kind.clone(),
                client: c.client.clone(),
                backend: c.backend.clone(),
                age: c.age,
                in_per_s: rate(c.from_client, from0, secs),
                out_per_s: rate(c.to_client, to0, secs),
            }
        })
        .collect();
    rows.sort_by(|a, b| (b.in_per_s + b.out_per_s).total_cmp(&(a.in_per_s + a.out_per_s)));
    rows
}

/// `1.5M/s`-style rate, as top and ngxtop print them (powers of 1024).
pub fn human_rate(bytes_per_s: f64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut v = bytes_per_s.max(0.0);
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0}{}/s", units[i])
    } else {
        format!("{v:.1}{}/s", units[i])
    }
}

/// The view as plain text: what `oi top` prints when stdout is not a terminal.
pub fn text(v: &View, opts: &ViewOptions) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "active {}  new {:.1}/s  in {}  out {}  descriptors {}  sort {}{}",
        v.active,
        v.new_per_s,
        human_rate(v.in_per_s),
        human_rate(v.out_per_s),
        v.descriptors,
        opts.sort.label(),
        opts.filter
            .as_deref()
            .map_or(String::new(), |f| format!("  rule {f}")),
    );
    // The rule column fits the longest name (rules routed by server name
    // add `[sni=NAME]`), so every row's columns line up.
    let w = v
        .rules
        .iter()
        .map(|r| r.name.len())
        .chain(v.backends.iter().map(|b| b.rule.len()))
        .chain(v.conns.iter().map(|c| c.rule.len()))
        .chain(v.tls.iter().map(|t| t.rule.len()))
        .fold(28, usize::max);
    let _ = writeln!(
        out,
        "\n{:<w$} {:>7} {:>8} {:>10} {:>10} {:>8} {:>7}",
        "RULE", "ACTIVE", "NEW/S", "IN", "OUT", "REFUSED", "ERRORS"
    );
    for r in &v.rules {
        let _ = writeln!(
            out,
            "{:<w$} {:>7} {:>8.1} {:>10} {:>10} {:>8} {:>7}",
            r.name,
            r.active,
            r.new_per_s,
            human_rate(r.in_per_s),
            human_rate(r.out_per_s),
            r.refused,
            r.errors
        );
    }
    tls::text(&mut out, &v.tls, w);
    let _ = writeln!(
        out,
        "\n{:<w$} {:<24} {:<5} {:>7} {:>6} {:>10} {:>8}",
        "RULE", "BACKEND", "STATE", "ACTIVE", "LOAD", "BYTES", "PROBE"
    );
    for b in &v.backends {
        let _ = writeln!(
            out,
            "{:<w$} {:<24} {:<5} {:>7} {:>5.0}% {:>10} {:>8}",
            b.rule,
            b.name,
            b.state(),
            b.active,
            b.load * 100.0,
            human_rate(b.bytes_per_s),
            b.probe_ms.map_or("-".into(), |p| format!("{p:.1}ms"))
        );
    }
    let _ = writeln!(
        out,
        "\n{:<w$} {:<5} {:<22} {:<22} {:>7} {:>10} {:>10}",
        "RULE", "KIND", "CLIENT", "BACKEND", "AGE", "IN", "OUT"
    );
    for c in v.conns.iter().take(20) {
        let _ = writeln!(
            out,
            "{:<w$} {:<5} {:<22} {:<22} {:>6.0}s {:>10} {:>10}",
            c.rule,
            c.kind,
            c.client,
            c.backend,
            c.age,
            human_rate(c.in_per_s),
            human_rate(c.out_per_s)
        );
    }
    out
}

#[cfg(test)]
mod tests;
