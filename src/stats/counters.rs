//! The counter list: every counter a rule and the process both keep, named
//! once with its doc, its JSON status key, its Prometheus family and label,
//! and its place in the text status's per-rule line. From that one list come
//! the atomic counters ([`CounterCells`]), their snapshot ([`CounterValues`])
//! and the table ([`COUNTERS`]) that `observe::metrics` and
//! `observe::format` write out. Adding a counter is one row here and a
//! [`super::RuleStats::count`] where the event happens.

use std::sync::atomic::{AtomicU64, Ordering};

/// A Prometheus metric family: counters naming the same family are written
/// under one `# HELP`/`# TYPE`, in the order the list first names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// The family name (`_total` is added to counters' samples).
    pub name: &'static str,
    /// Its `# HELP` text.
    pub help: &'static str,
    /// Counter (only grows) or gauge (goes up and down).
    pub kind: MetricKind,
}

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// Where a counter goes in `/metrics`: its family, and the label that tells
/// it from the family's other counters. Counters of one family without a
/// label are summed into one sample per rule.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// The family.
    pub family: Family,
    /// A label written before `label`, for a family split two ways (TLS
    /// handshakes: by side, then by kind), if any.
    pub split: Option<(&'static str, &'static str)>,
    /// `(name, value)` of the label that tells this counter apart, if any.
    pub label: Option<(&'static str, &'static str)>,
}

/// Sections of the text status's per-rule `Refused: ...` line, in print order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextSection {
    /// `Refused: not-allowed=.. denied=.. limit-reached=..`
    Refused,
    /// `connect failed: refused=.. ...`
    ConnectFailed,
    /// `udp evicted=.. proxy-dropped=..`
    Udp,
    /// `rate delayed-bytes=.. wait-ms=.. dropped-datagrams=..`
    Rate,
}

impl TextSection {
    /// Every section, in the order the line prints them.
    pub const ALL: [TextSection; 4] = [
        TextSection::Refused,
        TextSection::ConnectFailed,
        TextSection::Udp,
        TextSection::Rate,
    ];

    /// The words that open the section.
    pub fn heading(self) -> &'static str {
        match self {
            TextSection::Refused => "Refused:",
            TextSection::ConnectFailed => "connect failed:",
            TextSection::Udp => "udp",
            TextSection::Rate => "rate",
        }
    }
}

/// One row of the counter list, as the outputs read it.
#[derive(Clone, Copy, Debug)]
pub struct CounterDef {
    /// The field name in [`CounterValues`].
    pub field: &'static str,
    /// Its key in the status JSON's `oi` objects (per rule and `totals`).
    pub json: &'static str,
    /// Its place in `/metrics`, if it has one.
    pub metric: Option<Metric>,
    /// Its section and `label=` in the text status's per-rule line, if shown there.
    pub text: Option<(TextSection, &'static str)>,
    /// Reads it from a snapshot.
    pub get: fn(&CounterValues) -> u64,
}

/// A counter in `family` with no label (summed with the family's other unlabelled ones).
const fn in_family(family: Family) -> Option<Metric> {
    Some(Metric {
        family,
        split: None,
        label: None,
    })
}

/// A counter in `family`, told apart by the label `name="value"`.
const fn labelled(family: Family, name: &'static str, value: &'static str) -> Option<Metric> {
    Some(Metric {
        family,
        split: None,
        label: Some((name, value)),
    })
}

/// A TLS counter of `family` on `side` (`client`: oi ends the client's TLS;
/// `backend`: oi begins TLS to the backend), told apart by `name="value"`.
const fn tls(
    family: Family,
    side: &'static str,
    name: &'static str,
    value: &'static str,
) -> Option<Metric> {
    Some(Metric {
        family,
        split: Some(("side", side)),
        label: Some((name, value)),
    })
}

/// A counter shown in the text status's per-rule line as `label=n`.
const fn text(section: TextSection, label: &'static str) -> Option<(TextSection, &'static str)> {
    Some((section, label))
}

const ACTIVE: Family = Family {
    name: "oi_connections_active",
    help: "Connections (TCP and unix socket clients) and UDP associations open now, by rule.",
    kind: MetricKind::Gauge,
};
const OPENED: Family = Family {
    name: "oi_connections",
    help:
        "Connections admitted (TCP and unix socket clients) and UDP associations opened, by rule.",
    kind: MetricKind::Counter,
};
const BYTES: Family = Family {
    name: "oi_bytes",
    help: "Bytes forwarded, by rule and direction (live connections included).",
    kind: MetricKind::Counter,
};
const ACL: Family = Family {
    name: "oi_acl_refusals",
    help: "Clients refused by allow/deny, by rule and reason.",
    kind: MetricKind::Counter,
};
const CONNECT: Family = Family {
    name: "oi_connect_failures",
    help: "Backend connects that failed, by rule and reason.",
    kind: MetricKind::Counter,
};

const SNI: Family = Family {
    name: "oi_sni_connections",
    help: "Connections on listeners shared by TLS server name, by rule and outcome (named rule, default rule, closed).",
    kind: MetricKind::Counter,
};

const TLS_DONE: Family = Family {
    name: "oi_tls_handshakes",
    help: "TLS handshakes completed, by rule, side (client: oi ends the client's TLS; backend: oi begins TLS to the backend) and kind (full, or resumed from an earlier session).",
    kind: MetricKind::Counter,
};
const TLS_FAILED: Family = Family {
    name: "oi_tls_handshake_failures",
    help: "TLS handshakes that failed, by rule, side and reason: incompatible (no protocol version, cipher suite, group or signature scheme in common), bad_certificate (a certificate refused: untrusted, expired, wrong name, or none when one is required; either end's verdict), timeout, unknown_name (a server name no rule's certificate is for), other.",
    kind: MetricKind::Counter,
};

/// Generates [`CounterCells`], [`CounterValues`] and [`COUNTERS`] from the list below.
macro_rules! counter_list {
    ($(
        $(#[doc = $doc:literal])+
        $field:ident { json: $json:literal, metric: $metric:expr, text: $text:expr $(,)? }
    )*) => {
        /// The atomic counters of the list, one per row. Touched once per
        /// connection open or close, never per byte moved.
        #[derive(Default)]
        pub(crate) struct CounterCells {
            $( $(#[doc = $doc])+ pub(crate) $field: AtomicU64, )*
        }

        /// A snapshot of the counters of the list.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct CounterValues {
            $( $(#[doc = $doc])+ pub $field: u64, )*
        }

        impl CounterCells {
            /// The cell whose JSON key is `key` (`oi upgrade` carries
            /// counters by their keys).
            pub(super) fn by_json(&self, key: &str) -> Option<&AtomicU64> {
                match key {
                    $( $json => Some(&self.$field), )*
                    _ => None,
                }
            }

            /// Every counter as it is now (relaxed loads: each counter is
            /// independent, and a snapshot is a sample).
            pub(super) fn load(&self) -> CounterValues {
                CounterValues { $( $field: self.$field.load(Ordering::Relaxed), )* }
            }
        }

        impl CounterValues {
            /// Values with the `i`th counter of the list set to `value(i)`:
            /// fixtures whose counters all differ, however many the list has.
            #[cfg(test)]
            pub(crate) fn from_fn(value: impl Fn(u64) -> u64) -> CounterValues {
                let mut i = 0;
                let mut next = || {
                    i += 1;
                    value(i - 1)
                };
                CounterValues { $( $field: next(), )* }
            }
        }

        /// The counter list, in order: what the outputs iterate.
        pub static COUNTERS: &[CounterDef] = &[$(
            CounterDef {
                field: stringify!($field),
                json: $json,
                metric: $metric,
                text: $text,
                get: |v| v.$field,
            },
        )*];
    };
}

counter_list! {
    /// TCP connections open now (accepted on a TCP listener, past the ACL).
    active_tcp { json: "connections_active_tcp", metric: in_family(ACTIVE), text: None }
    /// UDP associations open now.
    active_udp { json: "connections_active_udp", metric: in_family(ACTIVE), text: None }
    /// TCP connections admitted since start (or since the rule appeared).
    opened_tcp { json: "connections_total_tcp", metric: in_family(OPENED), text: None }
    /// UDP associations opened since start.
    opened_udp { json: "connections_total_udp", metric: in_family(OPENED), text: None }
    /// Unix socket clients connected now (rinetd-uv's `active_unix`).
    active_unix { json: "connections_active_unix", metric: in_family(ACTIVE), text: None }
    /// Unix socket clients admitted since start (`total_unix`).
    opened_unix { json: "connections_total_unix", metric: in_family(OPENED), text: None }
    /// Bytes received from clients and sent on to backends, live connections
    /// included. The cell holds the highest value a snapshot reported (see
    /// the module docs of [`super`]).
    from_client {
        json: "bytes_from_clients",
        metric: labelled(BYTES, "direction", "from_client"),
        text: None,
    }
    /// Bytes received from backends and sent to clients, live connections
    /// included; the cell, like `from_client`'s, holds the highest reported.
    to_client {
        json: "bytes_to_clients",
        metric: labelled(BYTES, "direction", "to_client"),
        text: None,
    }
    /// Clients refused because no `allow` pattern matched.
    not_allowed {
        json: "acl_not_allowed",
        metric: labelled(ACL, "reason", "not_allowed"),
        text: text(TextSection::Refused, "not-allowed"),
    }
    /// Clients refused by a `deny` pattern.
    denied {
        json: "acl_denied",
        metric: labelled(ACL, "reason", "denied"),
        text: text(TextSection::Refused, "denied"),
    }
    /// Backend connects refused (ECONNREFUSED: nothing listens there).
    connect_refused {
        json: "connect_failed_refused",
        metric: labelled(CONNECT, "reason", "refused"),
        text: text(TextSection::ConnectFailed, "refused"),
    }
    /// Backend connects timed out (`--connect-timeout`).
    connect_timeout {
        json: "connect_failed_timeout",
        metric: labelled(CONNECT, "reason", "timeout"),
        text: text(TextSection::ConnectFailed, "timeout"),
    }
    /// Backend unreachable (host or network).
    connect_unreachable {
        json: "connect_failed_unreachable",
        metric: labelled(CONNECT, "reason", "unreachable"),
        text: text(TextSection::ConnectFailed, "unreachable"),
    }
    /// Backend connects failed otherwise (or the outgoing socket could not be made).
    connect_other {
        json: "connect_failed_other",
        metric: labelled(CONNECT, "reason", "other"),
        text: text(TextSection::ConnectFailed, "other"),
    }
    /// UDP associations ended to make room under the rule's cap.
    udp_evicted {
        json: "udp_evicted",
        metric: in_family(Family {
            name: "oi_udp_evictions",
            help: "UDP associations ended to stay under the rule's cap.",
            kind: MetricKind::Counter,
        }),
        text: text(TextSection::Udp, "evicted"),
    }
    /// TCP connections refused with `limit-reached` (the global `maxconn`,
    /// the rule's `maxconn` or `maxconn-per-client`): a limit set too low
    /// looks like an outage, so it must be visible next to the ACL refusals.
    limit_reached {
        json: "limit_reached",
        metric: in_family(Family {
            name: "oi_limit_refusals",
            help: "TCP connections refused with limit-reached (the global maxconn, the rule's maxconn or maxconn-per-client), by rule.",
            kind: MetricKind::Counter,
        }),
        text: text(TextSection::Refused, "limit-reached"),
    }
    /// Datagrams an `accept-proxy` `/udp` listener dropped (untrusted source,
    /// no valid PROXY v2 header): they leave no log line, so this is the
    /// only trace of a misconfigured proxy.
    udp_proxy_dropped {
        json: "udp_proxy_dropped",
        metric: in_family(Family {
            name: "oi_udp_proxy_datagrams_dropped",
            help: "Datagrams an accept-proxy /udp listener dropped (untrusted source, or no valid PROXY v2 header), by rule.",
            kind: MetricKind::Counter,
        }),
        text: text(TextSection::Udp, "proxy-dropped"),
    }
    /// Bytes a bandwidth limit (`rate`, `rule-rate`, `client-rate`) held
    /// back: bytes a TCP direction moved right after waiting for its bucket.
    /// Added once per wait, by limited connections only.
    rate_delayed_bytes {
        json: "rate_delayed_bytes",
        metric: in_family(Family {
            name: "oi_rate_delayed_bytes",
            help: "Bytes a bandwidth limit held back (moved after waiting for the bucket), by rule.",
            kind: MetricKind::Counter,
        }),
        text: text(TextSection::Rate, "delayed-bytes"),
    }
    /// Milliseconds TCP directions spent waiting for a bandwidth limit's
    /// bucket, summed over directions (two waiting at once count twice).
    rate_wait_ms {
        json: "rate_wait_ms",
        metric: in_family(Family {
            name: "oi_rate_wait_milliseconds",
            help: "Milliseconds connections' directions spent waiting for a bandwidth limit, by rule.",
            kind: MetricKind::Counter,
        }),
        text: text(TextSection::Rate, "wait-ms"),
    }
    /// UDP datagrams dropped because a bandwidth limit's bucket did not hold
    /// them (UDP is policed, not queued).
    rate_dropped_datagrams {
        json: "rate_dropped_datagrams",
        metric: in_family(Family {
            name: "oi_rate_dropped_datagrams",
            help: "UDP datagrams dropped by a bandwidth limit, by rule.",
            kind: MetricKind::Counter,
        }),
        text: text(TextSection::Rate, "dropped-datagrams"),
    }
    /// Connections a listener shared by server name (`[sni=...]`) routed
    /// to the rule whose pattern their ClientHello's name matched.
    sni_named {
        json: "sni_named",
        metric: labelled(SNI, "outcome", "named"),
        text: None,
    }
    /// Connections such a listener sent to its default rule: no rule's
    /// pattern matched, no server name, not TLS, or no whole ClientHello
    /// within 10 s and 16 KiB (the debug log says which).
    sni_default {
        json: "sni_default",
        metric: labelled(SNI, "outcome", "default"),
        text: None,
    }
    /// Connections such a listener without a default rule closed
    /// (`sni-unrouted` in the log file).
    sni_unrouted {
        json: "sni_unrouted",
        metric: labelled(SNI, "outcome", "closed"),
        text: text(TextSection::Refused, "sni-unrouted"),
    }
    /// Backend replies dropped because the listening socket's send buffer
    /// was full when a batch of them went out (src/udp/batch.rs): the
    /// association then reads no more from its backend until it drains.
    udp_replies_dropped {
        json: "udp_replies_dropped",
        metric: in_family(Family {
            name: "oi_udp_replies_dropped",
            help: "Backend replies a /udp listener dropped because its send buffer was full, by rule.",
            kind: MetricKind::Counter,
        }),
        text: text(TextSection::Udp, "replies-dropped"),
    }
    /// Client TLS handshakes completed in full (`tls-cert`).
    tls_client_full { json: "tls_client_handshakes_full",
        metric: tls(TLS_DONE, "client", "kind", "full"), text: None }
    /// Client TLS handshakes that resumed an earlier session.
    tls_client_resumed { json: "tls_client_handshakes_resumed",
        metric: tls(TLS_DONE, "client", "kind", "resumed"), text: None }
    /// Client handshakes without a version, cipher suite, group or signature scheme in common.
    tls_client_incompatible { json: "tls_client_failed_incompatible",
        metric: tls(TLS_FAILED, "client", "reason", "incompatible"), text: None }
    /// Client handshakes ended over a certificate (the client's refused, or ours by the client).
    tls_client_bad_certificate { json: "tls_client_failed_bad_certificate",
        metric: tls(TLS_FAILED, "client", "reason", "bad_certificate"), text: None }
    /// Client handshakes not done within `tls-handshake-timeout`.
    tls_client_timeout { json: "tls_client_failed_timeout",
        metric: tls(TLS_FAILED, "client", "reason", "timeout"), text: None }
    /// ClientHellos naming a server no rule on the listener has a certificate for.
    tls_client_unknown_name { json: "tls_client_failed_unknown_name",
        metric: tls(TLS_FAILED, "client", "reason", "unknown_name"), text: None }
    /// Client handshakes that failed otherwise (not TLS, closed, the cap of handshakes).
    tls_client_other { json: "tls_client_failed_other",
        metric: tls(TLS_FAILED, "client", "reason", "other"), text: None }
    /// Backend TLS handshakes completed in full (`tls-connect`).
    tls_backend_full { json: "tls_backend_handshakes_full",
        metric: tls(TLS_DONE, "backend", "kind", "full"), text: None }
    /// Backend TLS handshakes that resumed an earlier session.
    tls_backend_resumed { json: "tls_backend_handshakes_resumed",
        metric: tls(TLS_DONE, "backend", "kind", "resumed"), text: None }
    /// Backend handshakes without a version, cipher suite, group or signature scheme in common.
    tls_backend_incompatible { json: "tls_backend_failed_incompatible",
        metric: tls(TLS_FAILED, "backend", "reason", "incompatible"), text: None }
    /// Backend handshakes ended over a certificate (the backend's refused, or ours by it).
    tls_backend_bad_certificate { json: "tls_backend_failed_bad_certificate",
        metric: tls(TLS_FAILED, "backend", "reason", "bad_certificate"), text: None }
    /// Backend handshakes not done within the connect timeout.
    tls_backend_timeout { json: "tls_backend_failed_timeout",
        metric: tls(TLS_FAILED, "backend", "reason", "timeout"), text: None }
    /// Backend handshakes the backend ended for the server name oi sent (`unrecognized_name`).
    tls_backend_unknown_name { json: "tls_backend_failed_unknown_name",
        metric: tls(TLS_FAILED, "backend", "reason", "unknown_name"), text: None }
    /// Backend handshakes that failed otherwise.
    tls_backend_other { json: "tls_backend_failed_other",
        metric: tls(TLS_FAILED, "backend", "reason", "other"), text: None }
}

impl CounterValues {
    /// Connections and associations open now.
    pub fn active(&self) -> u64 {
        self.active_tcp
            .saturating_add(self.active_udp)
            .saturating_add(self.active_unix)
    }

    /// Connections and associations opened.
    pub fn opened(&self) -> u64 {
        self.opened_tcp
            .saturating_add(self.opened_udp)
            .saturating_add(self.opened_unix)
    }

    /// Backend connects that failed, whatever the reason.
    pub fn connect_failed(&self) -> u64 {
        [
            self.connect_refused,
            self.connect_timeout,
            self.connect_unreachable,
            self.connect_other,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// ACL refusals, both kinds.
    pub fn refused(&self) -> u64 {
        self.not_allowed.saturating_add(self.denied)
    }
}

/// What a live entry is: a connection counts as opened and active under
/// its kind. Here, with the counters it selects, not in the live list: the
/// list is part of a rule's counters (`rules/live.rs`), which count by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnKind {
    /// A TCP client forwarded to a TCP backend.
    Tcp,
    /// A TCP client forwarded to a UDP backend.
    TcpToUdp,
    /// A UDP client's association (to a UDP or TCP backend).
    Udp,
    /// A unix socket client forwarded to a TCP or unix socket backend.
    Unix,
}

impl ConnKind {
    /// The name `oi connections` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnKind::Tcp => "tcp",
            ConnKind::TcpToUdp => "tcp>udp",
            ConnKind::Udp => "udp",
            ConnKind::Unix => "unix",
        }
    }
}

/// Why a backend connection failed, as the counters split it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnectFailure {
    /// ECONNREFUSED: nothing listens there.
    Refused,
    /// The connect timeout (`--connect-timeout`) passed.
    Timeout,
    /// EHOSTUNREACH / ENETUNREACH.
    Unreachable,
    /// Anything else, including a local socket that could not be made.
    Other,
}

impl ConnectFailure {
    /// Classifies an error from a connect.
    pub(crate) fn of(e: &std::io::Error) -> Self {
        use rustix::io::Errno;
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => ConnectFailure::Refused,
            std::io::ErrorKind::TimedOut => ConnectFailure::Timeout,
            _ if e.raw_os_error() == Some(Errno::HOSTUNREACH.raw_os_error())
                || e.raw_os_error() == Some(Errno::NETUNREACH.raw_os_error()) =>
            {
                ConnectFailure::Unreachable
            }
            _ => ConnectFailure::Other,
        }
    }

    /// The counter it bumps.
    pub(super) fn cell(self, c: &CounterCells) -> &AtomicU64 {
        match self {
            ConnectFailure::Refused => &c.connect_refused,
            ConnectFailure::Timeout => &c.connect_timeout,
            ConnectFailure::Unreachable => &c.connect_unreachable,
            ConnectFailure::Other => &c.connect_other,
        }
    }
}

/// Relaxed load: every counter is independent, and a snapshot is a sample.
pub(super) fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Adds one.
pub(super) fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// Subtracts one, never below zero (a counter, not a reason to wrap).
pub(super) fn drop_one(a: &AtomicU64) {
    let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
}

/// Counters a rule and the process both keep (the process's are the sum of
/// every rule's, removed ones included): the list's cells, and the bytes of
/// ended connections that the byte counters are made of.
#[derive(Default)]
pub(crate) struct Counters {
    /// The counter list's cells.
    pub(super) cells: CounterCells,
    /// Bytes from clients, of connections that have ended (live ones are in [`super::Live`]).
    ended_from_client: AtomicU64,
    /// Bytes to clients, of connections that have ended.
    ended_to_client: AtomicU64,
}

impl Counters {
    /// Bytes of connections that have ended: (from clients, to clients).
    pub(super) fn ended_bytes(&self) -> (u64, u64) {
        (get(&self.ended_from_client), get(&self.ended_to_client))
    }

    /// The values, given the ended bytes read before the live list was
    /// copied (see [`super::Stats::snapshot`]) and the listed connections'
    /// bytes; byte counts are reported no lower than any earlier snapshot.
    pub(super) fn values(&self, ended: (u64, u64), live_from: u64, live_to: u64) -> CounterValues {
        let from = ended.0.saturating_add(live_from);
        let to = ended.1.saturating_add(live_to);
        let c = &self.cells;
        let mut v = c.load();
        v.from_client = c.from_client.fetch_max(from, Ordering::Relaxed).max(from);
        v.to_client = c.to_client.fetch_max(to, Ordering::Relaxed).max(to);
        v
    }

    /// Counts a connection of `kind` opened.
    pub(super) fn opened(&self, kind: ConnKind) {
        let (opened, active) = self.of(kind);
        bump(opened);
        bump(active);
    }

    /// Counts a connection of `kind` as active, not opened: a handed-over
    /// one, or one whose server name has not chosen its rule yet.
    pub(super) fn resumed(&self, kind: ConnKind) {
        bump(self.of(kind).1);
    }

    /// Counts a connection of `kind` already counted active as opened too
    /// (routed by server name).
    pub(super) fn admitted(&self, kind: ConnKind) {
        bump(self.of(kind).0);
    }

    /// Counts a connection of `kind` no longer open here: routed by server
    /// name to another rule, which counts it from then on.
    pub(super) fn moved_out(&self, kind: ConnKind) {
        drop_one(self.of(kind).1);
    }

    /// The (opened, active) pair `kind` counts in: a connection counts
    /// under its client side (TCP, UDP or unix), as rinetd-uv's status does.
    fn of(&self, kind: ConnKind) -> (&AtomicU64, &AtomicU64) {
        let c = &self.cells;
        match kind {
            ConnKind::Udp => (&c.opened_udp, &c.active_udp),
            ConnKind::Unix => (&c.opened_unix, &c.active_unix),
            ConnKind::Tcp | ConnKind::TcpToUdp => (&c.opened_tcp, &c.active_tcp),
        }
    }

    /// Adds bytes of connections that ended in a previous oi (`oi upgrade`).
    pub(super) fn carry_ended(&self, from_client: u64, to_client: u64) {
        for (cell, n) in [
            (&self.ended_from_client, from_client),
            (&self.ended_to_client, to_client),
        ] {
            let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_add(n))
            });
        }
    }

    /// Counts a connection of `kind` ended, with its bytes.
    pub(super) fn ended(&self, kind: ConnKind, from_client: u64, to_client: u64) {
        self.ended_from_client
            .fetch_add(from_client, Ordering::Relaxed);
        self.ended_to_client.fetch_add(to_client, Ordering::Relaxed);
        drop_one(self.of(kind).1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_its_own_field_and_json_key() {
        let mut keys: Vec<&str> = COUNTERS.iter().map(|c| c.json).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), COUNTERS.len(), "JSON keys are unique");
        let mut fields: Vec<&str> = COUNTERS.iter().map(|c| c.field).collect();
        fields.sort_unstable();
        fields.dedup();
        assert_eq!(fields.len(), COUNTERS.len(), "fields are unique");
    }

    #[test]
    fn a_family_keeps_one_help_and_type() {
        for a in COUNTERS.iter().filter_map(|c| c.metric) {
            for b in COUNTERS.iter().filter_map(|c| c.metric) {
                if a.family.name == b.family.name {
                    assert_eq!(a.family, b.family, "{}", a.family.name);
                }
            }
        }
    }
}
