//! `GET /metrics` in the Prometheus (OpenMetrics) text format.
//!
//! Encoded by `prometheus-client`, the Prometheus project's own Rust client:
//! it owns the format's details (escaping, `_total` suffixes, `# EOF`), and a
//! [`Collector`] lets each scrape encode a fresh [`Snapshot`] instead of
//! keeping a second set of counters in step with ours.
//!
//! The HTTP side is a few lines on purpose: one request per connection,
//! `GET /metrics`, the status page (`GET /`, [`super::page`]) and the JSON it
//! polls (`GET /status.json`, the status file's document), or 404, with
//! bounds on what a client can make it hold (see [`super::limits`]).

use super::limits;
use super::slots::{Slot, Slots};
use crate::route::shared::Shared;
use crate::stats::{CounterDef, Family, Metric, MetricKind, RuleValues, Snapshot, COUNTERS};
use async_io::Async;
use futures_lite::{AsyncWriteExt, FutureExt};
use oi_wire::request;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use smol::LocalExecutor;
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::Arc;

/// The registry's only collector: a snapshot per scrape.
struct Scrape {
    /// Where the counters are.
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape")
    }
}

/// Labels of one sample.
type Labels<'a> = Vec<(&'static str, &'a str)>;

/// Writes one metric family of `kind` with a sample per `(labels, value)`.
fn family(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(Labels<'_>, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        let mut s = m.encode_family(labels)?;
        match kind {
            MetricType::Counter => s.encode_counter::<NoLabelSet, _, u64>(value, None)?,
            _ => s.encode_gauge(value)?,
        }
    }
    Ok(())
}

/// A family with one unlabelled sample.
fn single(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    value: u64,
) -> Result<(), std::fmt::Error> {
    family(enc, name, help, kind, &[(Vec::new(), value)])
}

/// A usize as a metric value.
fn n(v: usize) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_snapshot(&self.shared.snapshot(), &mut enc)
    }
}

/// Every metric of a snapshot.
fn encode_snapshot(s: &Snapshot, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    use MetricType::{Counter, Gauge};
    let rules = &s.rules;
    single(
        enc,
        "oi_uptime_seconds",
        "Seconds since oi started.",
        Gauge,
        s.uptime.as_secs(),
    )?;
    family(
        enc,
        "oi_reloads",
        "Configuration reloads, by result.",
        Counter,
        &[
            (vec![("result", "ok")], s.reloads_ok),
            (vec![("result", "failed")], s.reloads_failed),
        ],
    )?;
    single(
        enc,
        "oi_accept_errors",
        "accept(2) failures (EMFILE and the like).",
        Counter,
        s.accept_errors,
    )?;
    counter_families(rules, enc)?;
    certificate_expiry(rules, enc)?;
    let addrs: Vec<Vec<String>> = rules
        .iter()
        .map(|r| r.backends.iter().map(|b| b.addr.to_string()).collect())
        .collect();
    let mut b_active = Vec::new();
    let mut b_up = Vec::new();
    let mut b_admin = Vec::new();
    let mut b_weight = Vec::new();
    let mut b_probe = Vec::new();
    let mut b_total = Vec::new();
    let mut b_bytes = Vec::new();
    for (r, names) in rules.iter().zip(&addrs) {
        for (b, name) in r.backends.iter().zip(names) {
            let l = vec![("rule", r.name.as_str()), ("backend", name.as_str())];
            b_active.push((l.clone(), b.active));
            b_up.push((l.clone(), u64::from(b.healthy)));
            let admin = match b.admin {
                "drain" => 1,
                "disabled" => 2,
                _ => 0,
            };
            b_admin.push((l.clone(), admin));
            if let Some(w) = b.weight {
                b_weight.push((l.clone(), u64::from(w)));
            }
            if let Some(us) = b.probe_us.filter(|_| b.probed) {
                b_probe.push((l.clone(), us as f64 / 1e6));
            }
            b_total.push((l.clone(), b.opened));
            let mut from = l.clone();
            from.push(("direction", "from_client"));
            b_bytes.push((from, b.from_client));
            let mut to = l;
            to.push(("direction", "to_client"));
            b_bytes.push((to, b.to_client));
        }
    }
    family(
        enc,
        "oi_backend_up",
        "Whether the rule's pool counts each backend address up (1) or down (0): passive health and, with check-interval, its probes.",
        Gauge,
        &b_up,
    )?;
    family(
        enc,
        "oi_backend_admin_state",
        "The operator's state of each backend address (oi backend): 0 ready, 1 drain (no new connections), 2 disabled (no new connections, open ones closed).",
        Gauge,
        &b_admin,
    )?;
    family(
        enc,
        "oi_backend_weight",
        "The weight each backend address is chosen by now: the operator's (oi backend weight), else the file's; 0 takes no new connections.",
        Gauge,
        &b_weight,
    )?;
    // Only with a health check, so the output without one is as it was.
    if !b_probe.is_empty() {
        let mut m = enc.encode_descriptor(
            "oi_backend_probe_seconds",
            "The last good health-check probe's round trip to each probed backend address (none after a failed probe).",
            None,
            Gauge,
        )?;
        for (labels, secs) in &b_probe {
            m.encode_family(labels)?.encode_gauge(secs)?;
        }
    }
    family(
        enc,
        "oi_backend_connections_active",
        "Connections open to each backend address.",
        Gauge,
        &b_active,
    )?;
    family(
        enc,
        "oi_backend_connections",
        "Connections made to each backend address.",
        Counter,
        &b_total,
    )?;
    family(
        enc,
        "oi_backend_bytes",
        "Bytes forwarded through each backend address.",
        Counter,
        &b_bytes,
    )?;
    if let Some(fds) = s.descriptors {
        single(
            enc,
            "oi_open_descriptors",
            "Descriptors open (/proc/self/fd).",
            Gauge,
            fds,
        )?;
    }
    if let Some(limit) = s.descriptor_limit {
        single(
            enc,
            "oi_descriptors_limit",
            "The soft open-file limit (RLIMIT_NOFILE) oi_open_descriptors may reach.",
            Gauge,
            limit,
        )?;
    }
    family(
        enc,
        "oi_buffers_pooled",
        "Free buffers waiting in each pool's queue (each thread keeps at most one more).",
        Gauge,
        &[
            (vec![("pool", "copy")], n(s.buffers_pooled)),
            (vec![("pool", "datagram")], n(s.datagram_buffers_pooled)),
        ],
    )?;
    family(
        enc,
        "oi_pipes",
        "Splice pipes, by state.",
        Gauge,
        &[
            (vec![("state", "in_use")], n(s.pipes_in_use)),
            (vec![("state", "pooled")], n(s.pipes_pooled)),
        ],
    )?;
    single(
        enc,
        "oi_pipes_unavailable",
        "Times no pipe could be had (the direction copied).",
        Counter,
        s.pipes_unavailable,
    )?;
    single(
        enc,
        "oi_udp_datagrams_dropped",
        "Client datagrams dropped: their upstream could not take them.",
        Counter,
        s.udp_datagrams_dropped,
    )?;
    single(
        enc,
        "oi_udp_queued_bytes",
        "Bytes of datagrams queued towards TCP backends.",
        Gauge,
        n(s.udp_queued_bytes),
    )?;
    single(
        enc,
        "oi_log_lines_queued",
        "Connection log lines waiting for the writer.",
        Gauge,
        n(s.log_lines_queued),
    )?;
    single(
        enc,
        "oi_log_lines_dropped",
        "Connection log lines dropped (queue full).",
        Counter,
        s.log_lines_dropped,
    )?;
    Ok(())
}

/// The families of the counter list ([`COUNTERS`]), in the order the list
/// first names them, with a sample per rule (and per label): counters of a
/// family without a label are summed into the rule's one sample.
fn counter_families(
    rules: &[RuleValues],
    enc: &mut DescriptorEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    let mut families: Vec<Family> = Vec::new();
    for f in COUNTERS.iter().filter_map(|c| c.metric.map(|m| m.family)) {
        if !families.contains(&f) {
            families.push(f);
        }
    }
    for f in families {
        let members: Vec<(&CounterDef, Metric)> = COUNTERS
            .iter()
            .filter_map(|c| Some((c, c.metric.filter(|m| m.family == f)?)))
            .collect();
        let mut samples = Vec::new();
        for r in rules {
            let rule = ("rule", r.name.as_str());
            let value = |c: &CounterDef| (c.get)(&r.counters);
            let unlabelled: Vec<u64> = members
                .iter()
                .filter(|(_, m)| m.label.is_none())
                .map(|(c, _)| value(c))
                .collect();
            if !unlabelled.is_empty() {
                let sum = unlabelled.iter().fold(0u64, |a, b| a.saturating_add(*b));
                samples.push((vec![rule], sum));
            }
            for (c, m) in &members {
                if let Some(label) = m.label {
                    let labels = std::iter::once(rule).chain(m.split).chain([label]);
                    samples.push((labels.collect(), value(c)));
                }
            }
        }
        let kind = match f.kind {
            MetricKind::Counter => MetricType::Counter,
            MetricKind::Gauge => MetricType::Gauge,
        };
        family(enc, f.name, f.help, kind, &samples)?;
    }
    Ok(())
}

/// `oi_tls_certificate_expiry_seconds`: each certificate a rule presents
/// (`tls-cert`, `tls-client-cert`), its notAfter in seconds since 1970, as
/// the blackbox exporter's `probe_ssl_earliest_cert_expiry`, so one alert
/// rule (`time() + 14 days > ...`) serves both. Only when a rule has TLS,
/// so the output without is as it was.
fn certificate_expiry(
    rules: &[RuleValues],
    enc: &mut DescriptorEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    let mut samples = Vec::new();
    for r in rules {
        for c in r.tls.iter().flat_map(|t| &t.certificates) {
            if let Some(at) = c.not_after {
                let subject = c.subject.as_deref().unwrap_or("");
                let labels = vec![("rule", r.name.as_str()), ("file", c.file.as_str())];
                samples.push(([labels, vec![("subject", subject)]].concat(), at));
            }
        }
    }
    if samples.is_empty() {
        return Ok(());
    }
    family(
        enc,
        "oi_tls_certificate_expiry_seconds",
        "When each certificate a rule presents (tls-cert, tls-client-cert) expires: its notAfter, in seconds since 1970; read again at each reload.",
        MetricType::Gauge,
        &samples,
    )
}

/// The metrics endpoint's registry, with its snapshot collector.
pub(super) fn registry(shared: Arc<Shared>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(Scrape { shared }));
    r
}

/// Accepts scrapes forever on the observer thread.
pub(super) async fn serve(
    ex: Rc<LocalExecutor<'static>>,
    listener: Async<TcpListener>,
    registry: Arc<Registry>,
    shared: Arc<Shared>,
) {
    let slots = Slots::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::debug!("metrics accept: {e}");
                async_io::Timer::after(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        // A slot per connection, a few per peer address (see `slots`); only
        // when every candidate is busy answering is this one closed unanswered.
        let Some(slot) = slots.admit(peer.ip()) else {
            continue;
        };
        let registry = registry.clone();
        let shared = shared.clone();
        ex.spawn(async move {
            let answered = answer(stream, &registry, &shared, &slot)
                .or(async {
                    slot.evicted().await;
                    Err(std::io::Error::other(
                        "evicted: its peer opened more connections",
                    ))
                })
                .await;
            if let Err(e) = answered {
                log::debug!("metrics request from {peer}: {e}");
            }
        })
        .detach();
    }
}

/// Reads one request head and answers it; `slot` is marked busy (no longer
/// evictable) once the head is complete.
async fn answer(
    mut stream: Async<TcpStream>,
    registry: &Registry,
    shared: &Shared,
    slot: &Slot<std::net::IpAddr>,
) -> std::io::Result<()> {
    let head = limits::read_head(&mut stream, b"\r\n\r\n").await?;
    slot.busy();
    let ok = |kind: &str, body: &str| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let response = match request::metrics_request(&head) {
        request::MetricsRequest::Metrics => {
            let mut body = String::new();
            prometheus_client::encoding::text::encode(&mut body, registry)
                .map_err(|_| std::io::Error::other("cannot encode the metrics"))?;
            ok(
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &body,
            )
        }
        request::MetricsRequest::Page => ok("text/html; charset=utf-8", super::page::HTML),
        request::MetricsRequest::StatusJson => ok(
            "application/json",
            &super::format::status_json(&shared.snapshot()).to_string(),
        ),
        request::MetricsRequest::NotFound => {
            let body = "not found: GET /, /metrics or /status.json\n";
            format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            )
        }
    };
    limits::bounded(stream.write_all(response.as_bytes())).await??;
    // One request per connection: shut down our side and let it close.
    let _ = limits::bounded(stream.close()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{BackendValues, CounterValues};
    use oi_config::Proto;
    use std::time::{Duration, SystemTime};

    /// Counters that differ from each other, so a field written under the
    /// wrong name shows in the golden files.
    fn counters(base: u64) -> CounterValues {
        CounterValues::from_fn(|i| {
            base + match i {
                6 => 7_000,
                7 => 8_000_000,
                i => i + 1,
            }
        })
    }

    /// A snapshot with every field set, three rules, two with backends.
    fn snapshot() -> Snapshot {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000);
        let backend = |addr: &str, member: Option<&str>, healthy, n: u64| BackendValues {
            addr: addr.parse().expect("literal"),
            member: member.map(String::from),
            healthy,
            admin: if healthy { "ready" } else { "drain" },
            weight: Some(if healthy { 1 } else { 5 }),
            probed: true,
            probe_us: healthy.then_some(1_500 + n),
            expanded_from: member.map(|_| "db.example".to_string()),
            active: n,
            opened: n + 1,
            from_client: n + 2,
            to_client: n + 3,
        };
        Snapshot {
            taken_at: at,
            started_at: at - Duration::from_secs(90_061),
            uptime: Duration::from_secs(90_061),
            last_reload: at - Duration::from_secs(60),
            reloads_ok: 3,
            reloads_failed: 1,
            accept_errors: 2,
            totals: counters(100),
            rules: vec![
                RuleValues {
                    name: "0.0.0.0:80/tcp".into(),
                    algorithm: "leastconn".into(),
                    proto: Proto::Tcp,
                    counters: counters(200),
                    backends: vec![
                        backend("10.0.0.1:8080", Some("db[0]"), true, 20),
                        backend("[::1]:8081", None, false, 30),
                    ],
                    tls: Some(std::sync::Arc::new(crate::stats::TlsShown {
                        terminates: true,
                        originates: true,
                        certificates: vec![
                            crate::stats::CertShown {
                                file: "/etc/oi/web.pem".into(),
                                role: "cert",
                                subject: Some("CN=web.example,O=Ex\\\"ample".into()),
                                not_after: Some(1_790_864_000),
                            },
                            crate::stats::CertShown {
                                file: "/etc/oi/client.pem".into(),
                                role: "client-cert",
                                subject: None,
                                not_after: Some(1_795_000_000),
                            },
                        ],
                    })),
                },
                RuleValues {
                    name: "127.0.0.1:53/udp".into(),
                    algorithm: "roundrobin".into(),
                    proto: Proto::Udp,
                    counters: counters(300),
                    backends: Vec::new(),
                    tls: None,
                },
                // A rule routed by server name on a shared listener: a rule
                // of its own, its name the listener's and its pattern.
                RuleValues {
                    name: "0.0.0.0:443/tcp[sni=*.example.org]".into(),
                    algorithm: "roundrobin".into(),
                    proto: Proto::Tcp,
                    counters: counters(400),
                    backends: vec![backend("10.0.0.9:443", None, true, 40)],
                    tls: None,
                },
            ],
            descriptors: Some(42),
            descriptor_limit: Some(1024),
            buffer_size: 65536,
            buffers_pooled: 5,
            datagram_buffers_pooled: 6,
            pipes_live: 7,
            pipes_in_use: 3,
            pipes_pooled: 4,
            pipes_unavailable: 8,
            udp_datagrams_dropped: 9,
            udp_queued_bytes: 10,
            log_lines_queued: 11,
            log_lines_dropped: 12,
        }
    }

    /// Encodes a fixed snapshot as `/metrics` does.
    #[derive(Debug)]
    struct Fixed(Snapshot);

    impl Collector for Fixed {
        fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            encode_snapshot(&self.0, &mut enc)
        }
    }

    /// Compares `text` with the golden file `name`; `OI_BLESS=1` rewrites it.
    fn golden(name: &str, text: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/observe/golden")
            .join(name);
        if std::env::var_os("OI_BLESS").is_some() {
            std::fs::write(&path, text).expect("write golden file");
        }
        let want = std::fs::read_to_string(&path).expect("read golden file");
        assert!(
            want == text,
            "{name} changed; if on purpose, rerun with OI_BLESS=1 and review the diff:\n{text}"
        );
    }

    /// The status file (both forms), the STATS line and `/metrics` of one
    /// snapshot are what they were when the golden files were written:
    /// scripts and dashboards read these byte for byte.
    #[test]
    fn every_output_of_a_snapshot_is_unchanged() {
        let s = snapshot();
        let json =
            serde_json::to_string_pretty(&super::super::format::status_json(&s)).expect("json");
        golden("status.json", &(json + "\n"));
        golden("status.txt", &super::super::format::status_text(&s));
        golden("stats.line", &(super::super::format::stats_line(&s) + "\n"));
        let mut r = Registry::default();
        r.register_collector(Box::new(Fixed(s)));
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &r).expect("encode");
        golden("metrics.txt", &body);
    }

    /// Whatever the list holds, each counter reaches every output it names:
    /// a counter added to the list needs no edit here or in `format.rs`.
    #[test]
    fn every_counter_of_the_list_reaches_its_outputs() {
        let s = snapshot();
        let json = super::super::format::status_json(&s);
        let text = super::super::format::status_text(&s);
        let mut r = Registry::default();
        r.register_collector(Box::new(Fixed(s.clone())));
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &r).expect("encode");
        let rule = &s.rules[0];
        for c in crate::stats::COUNTERS {
            let value = (c.get)(&rule.counters);
            assert_eq!(json["rules"][0]["oi"][c.json], value, "{}", c.field);
            assert_eq!(
                json["oi"]["totals"][c.json],
                (c.get)(&s.totals),
                "{}",
                c.field
            );
            if let Some((_, label)) = c.text {
                assert!(
                    text.contains(&format!(" {label}={value}")),
                    "{}: {text}",
                    c.field
                );
            }
            if let Some(m) = c.metric {
                let suffix = if m.family.kind == MetricKind::Counter {
                    "_total"
                } else {
                    ""
                };
                let split = m
                    .split
                    .map_or(String::new(), |(k, v)| format!(",{k}=\"{v}\""));
                let sample = match m.label {
                    Some((k, v)) => format!(
                        "{}{suffix}{{rule=\"{}\"{split},{k}=\"{v}\"}} {value}\n",
                        m.family.name, rule.name
                    ),
                    None => format!("{}{suffix}{{rule=\"{}\"}} ", m.family.name, rule.name),
                };
                assert!(
                    body.contains(&sample),
                    "{}: no {sample:?} in\n{body}",
                    c.field
                );
            }
        }
    }
}
