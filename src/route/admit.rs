//! Admission: whether the rule a connection was routed to takes it. One
//! function for every connection, called once the rule is known:
//!
//! - on a listener of one rule, at accept, once the client is known (after
//!   its PROXY header, if the rule reads one);
//! - on a listener rules share by server name (`[sni=...]`), after the
//!   ClientHello chose the rule. The listener's own ACL and limits are then
//!   not checked at all: each rule sharing the listener, the default one
//!   included, admits with its own allow/deny lines, `maxconn` and
//!   `maxconn-per-client`, and keeps its own counts ([`Route::limits`]).
//!   The listener counts every connection, unlimited, and the global
//!   `maxconn` applies at accept as everywhere.
//!
//! The order is the same everywhere: the ACL (global patterns, then the
//! rule's), the rule's `maxconn` (routed connections only: a listener of one
//! rule took that slot at accept, before a task existed), then
//! `maxconn-per-client`.

use super::limits::{GlobalLimit, Held, RuleLimits, Which};
use super::Route;
use crate::logfile::Event;
use std::net::IpAddr;

/// Why a rule refused a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its allow/deny lines: the event says which (`not-allowed`, `denied`).
    Acl(Event),
    /// A connection limit.
    Limit(Which),
}

impl Refused {
    /// The event its log line and counter record.
    pub(crate) fn event(self) -> Event {
        match self {
            Refused::Acl(event) => event,
            Refused::Limit(_) => Event::LimitReached,
        }
    }

    /// How a debug line says it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refused::Acl(event) => event.as_str(),
            Refused::Limit(which) => which.as_str(),
        }
    }
}

/// Which counts a connection is admitted against.
pub(crate) enum Counts<'a> {
    /// A listener of one rule: its slot in `listener` is taken already; its
    /// counts are needed only for a per-client limit (`None` otherwise: no
    /// atomic touched on a count every thread writes).
    Listener(Option<&'a std::sync::Arc<RuleLimits>>),
    /// A rule chosen by server name: its own counts, in its route.
    Routed,
}

/// Admits `client` to `route`, taking its slots into `held`; on refusal
/// nothing is taken and the refusal is counted in `global`'s and the
/// rule's limit counters (an ACL refusal only by the caller's `RuleStats`).
pub(crate) fn admit(
    route: &Route,
    counts: Counts<'_>,
    global: &GlobalLimit,
    held: &mut Held,
    client: IpAddr,
) -> Result<(), Refused> {
    route.admit(client).map_err(Refused::Acl)?;
    let per_client = match counts {
        Counts::Listener(limits) => limits,
        Counts::Routed => {
            global
                .admit_routed(&route.limits, held, route.maxconn)
                .map_err(Refused::Limit)?;
            Some(&route.limits)
        }
    };
    if let Some(limits) = per_client {
        global
            .admit_client(limits, held, client, route.maxconn_per_client)
            .map_err(Refused::Limit)?;
    }
    Ok(())
}
