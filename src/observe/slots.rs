//! Connection slots of the metrics endpoint and the control socket, per
//! peer: one peer cannot take them all. A peer (an IP address for
//! `/metrics`, a user id for the control socket) holds at most
//! [`PER_PEER`] connections; at that count its oldest *idle* connection (no
//! complete request read yet) is closed to make room for its newest. Past
//! [`TOTAL`] for all peers, the oldest idle connection of anyone goes. Only
//! when every connection is busy answering is the newest refused.
//!
//! Before, the endpoint had 8 slots for everyone and refused the newest: a
//! peer that reopened 8 idle sockets as they timed out (5 s) kept every
//! scrape out (0 of 28 answered in 15 s). Now a peer that holds 100 idle
//! connections and keeps reopening them only ever evicts its own
//! (`tests/shared_host.rs`).
//!
//! The observer thread runs one single-threaded executor, so the table is a
//! `RefCell` and nothing here is `Send`.

use std::cell::RefCell;
use std::rc::Rc;

/// Connections one peer may hold at once. A scraper needs one, an operator
/// running `oi status` in a loop two.
pub(super) const PER_PEER: usize = 4;

/// Connections all peers together may hold: each costs a descriptor, a
/// task and a request buffer of at most [`super::limits::MAX_HEAD`] bytes
/// (8 KiB): at most 64 descriptors and 512 KiB.
pub(super) const TOTAL: usize = 64;

/// The table of held connections, oldest first.
pub(super) struct Slots<K> {
    /// Shared with every [`Slot`], which removes itself when dropped.
    state: Rc<RefCell<State<K>>>,
}

/// What [`Slots`] shares.
struct State<K> {
    /// The next connection's id.
    next: u64,
    /// Held connections, in the order they were admitted.
    held: Vec<Held<K>>,
}

/// One held connection.
struct Held<K> {
    /// Matches its [`Slot`].
    id: u64,
    /// Who holds it.
    peer: K,
    /// No complete request read yet: it may be evicted.
    idle: bool,
    /// Dropped to evict (never sent on): the connection's task sees its channel close.
    _evict: async_channel::Sender<()>,
}

/// One connection's place; given back when dropped.
pub(super) struct Slot<K> {
    /// The table.
    state: Rc<RefCell<State<K>>>,
    /// Its entry.
    id: u64,
    /// Closes when the connection is evicted.
    evicted: async_channel::Receiver<()>,
}

impl<K: PartialEq> Slots<K> {
    pub(super) fn new() -> Self {
        Slots {
            state: Rc::new(RefCell::new(State {
                next: 0,
                held: Vec::new(),
            })),
        }
    }

    /// A slot for a new connection from `peer`, evicting an idle one if the
    /// peer or the table is full; `None` if every candidate is busy.
    pub(super) fn admit(&self, peer: K) -> Option<Slot<K>> {
        let mut st = self.state.borrow_mut();
        let mine = st.held.iter().filter(|h| h.peer == peer).count();
        let victim = if mine >= PER_PEER {
            Some(st.held.iter().position(|h| h.peer == peer && h.idle)?)
        } else if st.held.len() >= TOTAL {
            Some(st.held.iter().position(|h| h.idle)?)
        } else {
            None
        };
        if let Some(i) = victim {
            // Dropping the sender closes the evicted connection's channel.
            st.held.remove(i);
        }
        let id = st.next;
        st.next = st.next.wrapping_add(1);
        let (evict, evicted) = async_channel::bounded(1);
        st.held.push(Held {
            id,
            peer,
            idle: true,
            _evict: evict,
        });
        Some(Slot {
            state: self.state.clone(),
            id,
            evicted,
        })
    }

    /// Connections held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state.borrow().held.len()
    }
}

impl<K> Slot<K> {
    /// The request is complete: from now on this connection is answered,
    /// not evicted.
    pub(super) fn busy(&self) {
        let mut st = self.state.borrow_mut();
        if let Some(h) = st.held.iter_mut().find(|h| h.id == self.id) {
            h.idle = false;
        }
    }

    /// Completes when this connection has been evicted.
    pub(super) async fn evicted(&self) {
        let _ = self.evicted.recv().await;
    }
}

impl<K> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut st = self.state.borrow_mut();
        st.held.retain(|h| h.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_peer_evicts_its_own_oldest_idle_connection_never_anothers() {
        let slots = Slots::new();
        let other = slots.admit("scraper").expect("first");
        let mine: Vec<_> = (0..PER_PEER)
            .map(|_| slots.admit("flood").expect("room"))
            .collect();
        // Bounded: a hundred more from the same peer.
        let mut newest = Vec::new();
        for _ in 0..100 {
            newest.push(slots.admit("flood").expect("evicts its own oldest"));
        }
        assert_eq!(slots.len(), 1 + PER_PEER);
        for s in &mine {
            assert!(s.evicted.is_closed(), "the oldest were evicted");
        }
        assert!(
            !other.evicted.is_closed(),
            "another peer's connection stays"
        );
        let other2 = slots.admit("scraper").expect("another peer gets in");
        drop((other, other2, newest));
        assert_eq!(slots.len(), 0);
    }

    #[test]
    fn busy_connections_are_never_evicted_and_the_table_is_bounded() {
        let slots = Slots::new();
        let busy: Vec<_> = (0..PER_PEER)
            .map(|_| {
                let s = slots.admit(0u32).expect("room");
                s.busy();
                s
            })
            .collect();
        assert!(slots.admit(0).is_none(), "all busy: the newest is refused");
        let many: Vec<_> = (1..TOTAL as u32).filter_map(|p| slots.admit(p)).collect();
        assert_eq!(slots.len(), TOTAL);
        // A new peer evicts the oldest idle connection of anyone.
        let late = slots.admit(9999).expect("evicts an idle one");
        assert_eq!(slots.len(), TOTAL);
        assert!(busy.iter().all(|s| !s.evicted.is_closed()));
        assert!(many[0].evicted.is_closed());
        drop((busy, many, late));
    }
}
