//! Counters: per rule, per backend address, per live connection, and for the
//! whole process; and the [`Snapshot`] every way of watching oi reads.
//!
//! - `counters.rs`: the counter list ([`COUNTERS`]): each counter named once,
//!   with its JSON key, Prometheus family and text-status place.
//! - `rules.rs`: a rule's counters ([`RuleStats`]) and its backends'.
//! - `snapshot.rs`: the process's ([`Stats`]) and the [`Snapshot`].
//! - `tls.rs`: a rule's TLS as the views show it ([`TlsShown`]: which ends,
//!   the certificates' expiry) and which counters a handshake bumps.
//! - `rules/live.rs`: the live list of open connections and associations.
//!   A child of `rules`, not a sibling: a rule holds the list its
//!   connections join and each entry holds its rule, one knot of types.
//!
//! # Cost on the forwarding path
//!
//! Nothing here is written per read or write. A connection touches its rule's
//! and the process's counters once when it opens and once when it ends, and
//! registers itself in the live list (`Live`) under one shard lock at each
//! end. While it runs, the TCP pump stores its running byte totals into the
//! connection's own byte counters (`Registered::publish`) once per poll (a plain relaxed store to a
//! cache line only that connection's thread writes); a snapshot reads them.
//! So a long transfer's bytes are visible while it runs, and the counters of
//! a rule cost nothing per byte.
//!
//! # Rule identity
//!
//! A rule's counters belong to its listener (same bind address, port and
//! protocol), so they survive a reload that keeps the listener and go when
//! the listener goes. Connections still open on a removed rule keep its
//! [`RuleStats`] alive and report into it; the process totals still count them.
//!
//! # Monotonic byte counters
//!
//! A rule's bytes are "bytes of ended connections + bytes of live ones". A
//! connection that ends leaves the live list first and adds its bytes to the
//! ended total just after, so a snapshot taken in between would see a dip;
//! every byte counter a snapshot reports is therefore the highest value any
//! snapshot has reported (`fetch_max` on a field only snapshots write).

mod carry;
mod counters;
pub mod rate;
mod rules;
mod snapshot;
#[cfg(test)]
mod tests;
pub(crate) mod throttle;
mod tls;

pub(crate) use carry::Sent;
pub(crate) use counters::ConnectFailure;
pub use counters::{
    ConnKind, CounterDef, CounterValues, Family, Metric, MetricKind, TextSection, COUNTERS,
};
pub use rules::{BackendValues, RuleStats, RuleValues};
pub(crate) use rules::{Conn, Live, Registered};
pub use rules::{ConnInfo, ConnState};
pub use snapshot::{Pools, Snapshot, Stats};
pub use tls::{CertShown, TlsFailure, TlsShown, TlsSide};

use counters::drop_one;
