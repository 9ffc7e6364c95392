//! `GET /metrics` in the Prometheus (OpenMetrics) text format.
//!
//! Encoded by `prometheus-client`, the Prometheus project's own Rust client:
//! it owns the format's details (escaping, `_total` suffixes, `# EOF`), and a
//! [`Collector`] lets each scrape encode a fresh [`Snapshot`] instead of
//! keeping a second set of counters in step with ours.
//!
//! The HTTP side is a few lines on purpose: one request per connection,
//! `GET /metrics` or 404, with bounds on what a client can make it hold
//! (see [`super::limits`]).

use super::limits;
use super::request;
use super::slots::{Slot, Slots};
use crate::shared::Shared;
use crate::stats::Snapshot;
use async_io::Async;
use futures_lite::{AsyncWriteExt, FutureExt};
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
    let per_rule = |f: &dyn Fn(&crate::stats::CounterValues) -> u64| -> Vec<(Labels<'_>, u64)> {
        rules
            .iter()
            .map(|r| (vec![("rule", r.name.as_str())], f(&r.counters)))
            .collect()
    };
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
    family(
        enc,
        "oi_connections_active",
        "Connections (TCP and unix socket clients) and UDP associations open now, by rule.",
        Gauge,
        &per_rule(&|c| c.active()),
    )?;
    family(
        enc,
        "oi_connections",
        "Connections admitted (TCP and unix socket clients) and UDP associations opened, by rule.",
        Counter,
        &per_rule(&|c| c.opened()),
    )?;
    let mut bytes = Vec::new();
    let mut refusals = Vec::new();
    let mut failures = Vec::new();
    for r in rules {
        let c = &r.counters;
        let rule = r.name.as_str();
        bytes.push((
            vec![("rule", rule), ("direction", "from_client")],
            c.from_client,
        ));
        bytes.push((
            vec![("rule", rule), ("direction", "to_client")],
            c.to_client,
        ));
        refusals.push((
            vec![("rule", rule), ("reason", "not_allowed")],
            c.not_allowed,
        ));
        refusals.push((vec![("rule", rule), ("reason", "denied")], c.denied));
        for (reason, v) in [
            ("refused", c.connect_refused),
            ("timeout", c.connect_timeout),
            ("unreachable", c.connect_unreachable),
            ("other", c.connect_other),
        ] {
            failures.push((vec![("rule", rule), ("reason", reason)], v));
        }
    }
    family(
        enc,
        "oi_bytes",
        "Bytes forwarded, by rule and direction (live connections included).",
        Counter,
        &bytes,
    )?;
    family(
        enc,
        "oi_acl_refusals",
        "Clients refused by allow/deny, by rule and reason.",
        Counter,
        &refusals,
    )?;
    family(
        enc,
        "oi_connect_failures",
        "Backend connects that failed, by rule and reason.",
        Counter,
        &failures,
    )?;
    family(
        enc,
        "oi_udp_evictions",
        "UDP associations ended to stay under the rule's cap.",
        Counter,
        &per_rule(&|c| c.udp_evicted),
    )?;
    family(
        enc,
        "oi_limit_refusals",
        "TCP connections refused with limit-reached (the global maxconn, the rule's maxconn or maxconn-per-client), by rule.",
        Counter,
        &per_rule(&|c| c.limit_reached),
    )?;
    family(
        enc,
        "oi_udp_proxy_datagrams_dropped",
        "Datagrams an accept-proxy /udp listener dropped (untrusted source, or no valid PROXY v2 header), by rule.",
        Counter,
        &per_rule(&|c| c.udp_proxy_dropped),
    )?;
    let addrs: Vec<Vec<String>> = rules
        .iter()
        .map(|r| r.backends.iter().map(|b| b.addr.to_string()).collect())
        .collect();
    let mut b_active = Vec::new();
    let mut b_up = Vec::new();
    let mut b_total = Vec::new();
    let mut b_bytes = Vec::new();
    for (r, names) in rules.iter().zip(&addrs) {
        for (b, name) in r.backends.iter().zip(names) {
            let l = vec![("rule", r.name.as_str()), ("backend", name.as_str())];
            b_active.push((l.clone(), b.active));
            b_up.push((l.clone(), u64::from(b.healthy)));
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
        "Whether the rule's pool counts each backend address up (1) or down (0) by passive health.",
        Gauge,
        &b_up,
    )?;
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
    family(
        enc,
        "oi_buffers_pooled",
        "Free buffers waiting in each pool.",
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
        ex.spawn(async move {
            let answered = answer(stream, &registry, &slot)
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
    slot: &Slot<std::net::IpAddr>,
) -> std::io::Result<()> {
    let head = limits::read_head(&mut stream, b"\r\n\r\n").await?;
    slot.busy();
    let response = if request::metrics_request(&head) == request::MetricsRequest::Metrics {
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, registry)
            .map_err(|_| std::io::Error::other("cannot encode the metrics"))?;
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        let body = "not found: only GET /metrics is served\n";
        format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
    };
    limits::bounded(stream.write_all(response.as_bytes())).await??;
    // One request per connection: shut down our side and let it close.
    let _ = limits::bounded(stream.close()).await;
    Ok(())
}
