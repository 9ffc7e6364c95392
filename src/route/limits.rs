//! Connection limits: the global `maxconn`, a rule's `maxconn`, and a rule's
//! `maxconn-per-client`.
//!
//! Each limit is a count that a connection takes a slot of when it starts and
//! gives back when its guard drops (on every path, errors included). The
//! counts are touched once when a connection opens and once when it closes,
//! never per read or write.
//!
//! Where the counts live decides what a reload does to them:
//! - the global count is in [`crate::route::shared::Shared`], for the whole process;
//! - a rule's counts are in [`RuleLimits`], owned by its listener (not by its
//!   `Route`), so a reload that keeps the listener keeps the counts of the
//!   connections already open, and the new route's limits apply to them.
//!
//! The limits themselves (how many) are read from the current route or the
//! global setting when a connection arrives; the counts are always kept, so
//! a limit a reload introduces applies at once to the connections already
//! open. Per-client counts are the exception: they are kept only while a
//! rule has `maxconn-per-client` (a map lookup under a lock per connection is
//! not worth paying otherwise), so connections opened before a reload added
//! that limit are not counted against it.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Which limit refused a connection (for the debug line; the log file says
/// `limit-reached` for all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    /// The global `maxconn` line.
    Global,
    /// The rule's `maxconn=N`.
    Rule,
    /// The rule's `maxconn-per-client=N`.
    PerClient,
}

impl Which {
    /// How a debug line names it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Which::Global => "the global maxconn",
            Which::Rule => "the rule's maxconn",
            Which::PerClient => "the rule's maxconn-per-client",
        }
    }
}

/// An open-connection count.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    /// Connections holding a [`Slot`] now.
    open: AtomicUsize,
}

impl Gauge {
    /// Takes a slot if fewer than `max` are taken (`None`: no limit, always).
    fn try_take(self: &Arc<Self>, max: Option<usize>) -> Option<Slot> {
        match max {
            None => {
                self.open.fetch_add(1, Ordering::Relaxed);
            }
            Some(max) => {
                self.open
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        (n < max).then_some(n + 1)
                    })
                    .ok()?;
            }
        }
        Some(Slot(self.clone()))
    }

    /// Connections counted now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Takes a slot whatever the count.
    fn take(self: &Arc<Self>) -> Slot {
        self.open.fetch_add(1, Ordering::Relaxed);
        Slot(self.clone())
    }
}

/// One connection's place in a [`Gauge`]; given back on drop.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Gauge>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The process-wide limit (the global `maxconn` line), in `Shared`.
#[derive(Debug)]
pub(crate) struct GlobalLimit {
    /// TCP connections open in the whole process (counted whatever the limit).
    gauge: Arc<Gauge>,
    /// The limit; `usize::MAX` for none. Set at start-up and on reload.
    max: AtomicUsize,
    /// Connections refused by any limit, global or a rule's, since start.
    refused: AtomicU64,
}

impl Default for GlobalLimit {
    fn default() -> Self {
        GlobalLimit {
            gauge: Arc::default(),
            max: AtomicUsize::new(usize::MAX),
            refused: AtomicU64::new(0),
        }
    }
}

impl GlobalLimit {
    /// Sets the limit (`None`: no limit). Connections already open stay open.
    pub(crate) fn set(&self, max: Option<usize>) {
        self.max.store(max.unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    /// The limit now, if any.
    pub(crate) fn get(&self) -> Option<usize> {
        match self.max.load(Ordering::Relaxed) {
            usize::MAX => None,
            n => Some(n),
        }
    }

    /// TCP connections counted against the global limit now.
    pub(crate) fn open(&self) -> usize {
        self.gauge.open()
    }

    /// Connections refused by any limit since start.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes a global slot and one of the rule's, or says which limit is
    /// reached; the refusal is counted here and in the rule's counter.
    pub(crate) fn admit(&self, rule: &RuleLimits, rule_max: Option<usize>) -> Result<Held, Which> {
        let refuse = |which| {
            self.refused.fetch_add(1, Ordering::Relaxed);
            rule.refused.fetch_add(1, Ordering::Relaxed);
            Err(which)
        };
        let Some(global) = self.gauge.try_take(self.get()) else {
            return refuse(Which::Global);
        };
        let Some(own) = rule.gauge.try_take(rule_max) else {
            return refuse(Which::Rule);
        };
        Ok(Held {
            _global: global,
            _rule: own,
            extra: None,
        })
    }

    /// Counts a connection a previous oi handed over (`oi upgrade`): it is
    /// open already, so it is counted whatever the limits (a count past a
    /// limit refuses new connections until it drops below again), in the
    /// global count, its listener's, with `routed` the count of the rule
    /// its server name chose, and with `client` the per-client one (the
    /// routed rule's, else the listener's).
    pub(crate) fn hold(
        &self,
        listener: &Arc<RuleLimits>,
        routed: Option<&Arc<RuleLimits>>,
        client: Option<IpAddr>,
    ) -> Held {
        let rule = routed.unwrap_or(listener);
        let client = client.and_then(|c| rule.take_client(c, usize::MAX));
        let routed = routed.map(|r| r.gauge.take());
        let extra = (client.is_some() || routed.is_some()).then(|| {
            Box::new(Extra {
                _routed: routed,
                _client: client,
            })
        });
        Held {
            _global: self.gauge.take(),
            _rule: listener.gauge.take(),
            extra,
        }
    }

    /// Takes a slot of `routed`, the counts of the rule a server name routed
    /// the connection to (its `maxconn`: `max`), into `held`; counts a
    /// refusal like [`admit`](Self::admit). The listener's own count was
    /// taken at accept, unlimited.
    pub(crate) fn admit_routed(
        &self,
        routed: &RuleLimits,
        held: &mut Held,
        max: Option<usize>,
    ) -> Result<(), Which> {
        match routed.gauge.try_take(max) {
            Some(slot) => {
                held.extra()._routed = Some(slot);
                Ok(())
            }
            None => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                routed.refused.fetch_add(1, Ordering::Relaxed);
                Err(Which::Rule)
            }
        }
    }

    /// Takes a per-client slot for `client` on `rule` when the rule limits
    /// clients (`max`), into `held`; counts a refusal like [`admit`](Self::admit).
    pub(crate) fn admit_client(
        &self,
        rule: &Arc<RuleLimits>,
        held: &mut Held,
        client: IpAddr,
        max: Option<usize>,
    ) -> Result<(), Which> {
        let Some(max) = max else {
            return Ok(());
        };
        match rule.take_client(client, max) {
            Some(slot) => {
                held.extra()._client = Some(slot);
                Ok(())
            }
            None => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                rule.refused.fetch_add(1, Ordering::Relaxed);
                Err(Which::PerClient)
            }
        }
    }
}

/// A rule's counts, owned by its listener so they outlive a reload's route swap.
#[derive(Debug, Default)]
pub(crate) struct RuleLimits {
    /// The rule's open TCP connections (counted whatever its `maxconn`).
    gauge: Arc<Gauge>,
    /// Open connections per client address, only while the rule has
    /// `maxconn-per-client`. An entry is removed when its count drops to
    /// zero, so the map never holds more entries than open connections,
    /// however many sources a flood uses.
    clients: Mutex<HashMap<IpAddr, usize>>,
    /// Connections to this rule refused by any limit since the listener started.
    refused: AtomicU64,
}

impl RuleLimits {
    /// The rule's open connections.
    pub(crate) fn open(&self) -> usize {
        self.gauge.open()
    }

    /// Connections to this rule refused by a limit since its listener started.
    // The status file and the metrics read the rule's `RuleStats` count
    // (bumped by the accept path, beside the ACL refusals); this one is the
    // limits' own, which their tests check.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Client addresses with a per-client count now (for tests: the map's bound).
    #[cfg(test)]
    pub(crate) fn clients_tracked(&self) -> usize {
        self.clients.lock().len()
    }

    /// Counts a connection from `client` if it has fewer than `max` open.
    fn take_client(self: &Arc<Self>, client: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut clients = self.clients.lock();
        let n = clients.entry(client).or_insert(0);
        if *n >= max {
            if *n == 0 {
                // max == 0: nothing was counted; leave no entry behind.
                clients.remove(&client);
            }
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            limits: self.clone(),
            client,
        })
    }
}

/// One connection's place in its rule's per-client count.
#[derive(Debug)]
struct ClientSlot {
    /// The rule's counts.
    limits: Arc<RuleLimits>,
    /// The client it counts for (the address a PROXY header carried, if any).
    client: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut clients = self.limits.clients.lock();
        if let Some(n) = clients.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                clients.remove(&self.client);
            }
        }
    }
}

/// A connection's slots; dropping it releases them all. Kept until the
/// connection's sockets are closed, like the thread placement guard.
#[derive(Debug)]
pub(crate) struct Held {
    /// Its place in the global count.
    _global: Slot,
    /// Its place in its listener's count (on a listener shared by server
    /// name: counted, never limited there).
    _rule: Slot,
    /// The slots only some connections take: boxed, 8 bytes in every
    /// connection, most of whose rules have neither a per-client limit nor
    /// a server name (an idle connection's memory is mostly its future's
    /// size, `listen::accept`'s size test).
    extra: Option<Box<Extra>>,
}

/// The slots of [`Held`] that only some connections take.
#[derive(Debug, Default)]
struct Extra {
    /// Its place in the count of the rule its server name routed it to.
    _routed: Option<Slot>,
    /// Its place in its rule's per-client count, when the rule has one.
    _client: Option<ClientSlot>,
}

impl Held {
    /// The optional slots, made on first use.
    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_routed_rule_counts_and_limits_its_own_connections_beside_its_listener() {
        let global = GlobalLimit::default();
        let (listener, routed) = (Arc::new(RuleLimits::default()), RuleLimits::default());
        let mut first = global
            .admit(&listener, None)
            .expect("the listener limits nothing");
        assert!(global.admit_routed(&routed, &mut first, Some(1)).is_ok());
        let mut second = global
            .admit(&listener, None)
            .expect("the listener limits nothing");
        assert_eq!(
            global.admit_routed(&routed, &mut second, Some(1)),
            Err(Which::Rule)
        );
        assert_eq!(
            (listener.open(), routed.open(), routed.refused()),
            (2, 1, 1)
        );
        assert_eq!(global.refused(), 1);
        drop((first, second));
        assert_eq!((global.open(), listener.open(), routed.open()), (0, 0, 0));
    }

    #[test]
    fn a_handed_over_routed_connection_counts_on_its_rule_and_client() {
        let global = GlobalLimit::default();
        let (listener, routed) = (
            Arc::new(RuleLimits::default()),
            Arc::new(RuleLimits::default()),
        );
        let held = global.hold(&listener, Some(&routed), Some(ip(7)));
        assert_eq!((listener.open(), routed.open()), (1, 1));
        assert_eq!(
            (listener.clients_tracked(), routed.clients_tracked()),
            (0, 1)
        );
        drop(held);
        assert_eq!(
            (global.open(), routed.open(), routed.clients_tracked()),
            (0, 0, 0)
        );
    }

    #[test]
    fn handed_over_connections_count_against_every_limit_without_being_refused() {
        let global = GlobalLimit::default();
        let rule = Arc::new(RuleLimits::default());
        global.set(Some(2));
        let held: Vec<Held> = (0..3)
            .map(|_| global.hold(&rule, None, Some(ip(1))))
            .collect();
        assert_eq!(
            (global.open(), rule.open()),
            (3, 3),
            "counted past the limit"
        );
        assert!(global.admit(&rule, None).is_err(), "a new one is refused");
        let mut one = global.admit(&rule, None);
        assert!(one.is_err());
        drop(held);
        assert_eq!(
            (global.open(), rule.open(), rule.clients_tracked()),
            (0, 0, 0)
        );
        one = global.admit(&rule, None);
        let mut one = one.expect("room again");
        assert!(global.admit_client(&rule, &mut one, ip(1), Some(1)).is_ok());
    }

    #[test]
    fn global_and_rule_limits_refuse_past_max_and_release_on_drop() {
        let global = GlobalLimit::default();
        let rule = Arc::new(RuleLimits::default());
        global.set(Some(3));
        let a = global.admit(&rule, Some(2)).expect("first");
        let b = global.admit(&rule, Some(2)).expect("second");
        assert_eq!(global.admit(&rule, Some(2)).err(), Some(Which::Rule));
        let other = Arc::new(RuleLimits::default());
        let c = global.admit(&other, None).expect("another rule");
        assert_eq!(global.admit(&other, None).err(), Some(Which::Global));
        assert_eq!((global.open(), rule.open(), other.open()), (3, 2, 1));
        assert_eq!(
            (global.refused(), rule.refused(), other.refused()),
            (2, 1, 1)
        );
        drop((a, b, c));
        assert_eq!((global.open(), rule.open(), other.open()), (0, 0, 0));
        global.set(None);
        assert_eq!(global.get(), None);
    }

    #[test]
    fn a_refusal_by_the_rule_gives_the_global_slot_back() {
        let global = GlobalLimit::default();
        let rule = Arc::new(RuleLimits::default());
        let _held = global.admit(&rule, Some(1)).expect("first");
        assert!(global.admit(&rule, Some(1)).is_err());
        assert_eq!(global.open(), 1);
    }

    #[test]
    fn per_client_counts_are_bounded_by_open_connections() {
        let global = GlobalLimit::default();
        let rule = Arc::new(RuleLimits::default());
        let mut open = Vec::new();
        for i in 0..50 {
            let mut held = global.admit(&rule, None).expect("no rule limit");
            global
                .admit_client(&rule, &mut held, ip(i), Some(1))
                .expect("one each");
            open.push(held);
        }
        assert_eq!(rule.clients_tracked(), 50);
        let mut again = global.admit(&rule, None).expect("no rule limit");
        assert_eq!(
            global.admit_client(&rule, &mut again, ip(7), Some(1)),
            Err(Which::PerClient)
        );
        drop(again);
        open.truncate(10);
        assert_eq!(rule.clients_tracked(), 10, "entries at zero are removed");
        drop(open);
        assert_eq!(rule.clients_tracked(), 0);
        let mut zero = global.admit(&rule, None).expect("no rule limit");
        assert!(global
            .admit_client(&rule, &mut zero, ip(1), Some(0))
            .is_err());
        assert_eq!(rule.clients_tracked(), 0, "a refusal leaves no entry");
    }

    #[test]
    fn without_a_per_client_limit_nothing_is_tracked() {
        let global = GlobalLimit::default();
        let rule = Arc::new(RuleLimits::default());
        let mut held = global.admit(&rule, None).expect("admit");
        global
            .admit_client(&rule, &mut held, ip(1), None)
            .expect("no limit");
        assert_eq!(rule.clients_tracked(), 0);
    }
}
