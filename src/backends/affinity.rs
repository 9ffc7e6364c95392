//! Client affinity: which member each recent client used, for
//! `affinity_ttl`, at most `affinity_max_entries` clients (the least
//! recently seen is forgotten first). Each connection renews its client's
//! entry. An entry whose member is down or gone is ignored, and the new
//! choice replaces it.

use super::Member;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The affinity table of one pool.
pub(super) struct Affinity {
    /// How long an entry lives without a connection.
    ttl: Duration,
    /// Most entries kept.
    max: usize,
    /// Client → its entry.
    by_client: HashMap<IpAddr, Entry>,
    /// Entries by last use (oldest first), for LRU eviction.
    by_age: BTreeMap<u64, IpAddr>,
    /// Stamp of the next use; strictly increasing.
    clock: u64,
}

/// One client's memory.
struct Entry {
    /// The member it used (weak: a member dropped by a refresh or reload is gone).
    member: Weak<Member>,
    /// When the entry stops counting.
    expires: Instant,
    /// Its key in `by_age`.
    stamp: u64,
}

impl Affinity {
    /// An empty table.
    pub(super) fn new(ttl: Duration, max: usize) -> Self {
        Affinity {
            ttl,
            max: max.max(1),
            by_client: HashMap::new(),
            by_age: BTreeMap::new(),
            clock: 0,
        }
    }

    /// The index in `members` of the member `client` used, if it is still
    /// listed, `ok`, and the entry has not expired; renews the entry.
    pub(super) fn get(
        &mut self,
        client: IpAddr,
        members: &[Arc<Member>],
        ok: &dyn Fn(&Member) -> bool,
    ) -> Option<usize> {
        let now = Instant::now();
        let entry = self.by_client.get(&client)?;
        let found = if entry.expires > now {
            entry.member.upgrade().and_then(|m| {
                members
                    .iter()
                    .position(|x| Arc::ptr_eq(x, &m))
                    .filter(|_| ok(&m))
            })
        } else {
            None
        };
        match found {
            Some(i) => {
                let member = entry.member.clone();
                self.insert(client, member, now);
                Some(i)
            }
            None => {
                self.remove(client);
                None
            }
        }
    }

    /// Remembers that `client` went to `member`.
    pub(super) fn put(&mut self, client: IpAddr, member: &Arc<Member>) {
        self.insert(client, Arc::downgrade(member), Instant::now());
    }

    /// Sets `client`'s entry, evicting the least recently used past `max`.
    fn insert(&mut self, client: IpAddr, member: Weak<Member>, now: Instant) {
        self.remove(client);
        while self.by_client.len() >= self.max {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.by_client.remove(&oldest);
        }
        self.clock = self.clock.wrapping_add(1);
        let expires = now.checked_add(self.ttl).unwrap_or(now);
        self.by_age.insert(self.clock, client);
        self.by_client.insert(
            client,
            Entry {
                member,
                expires,
                stamp: self.clock,
            },
        );
    }

    /// Every live entry: client, member, time left (`oi upgrade`).
    pub(super) fn entries(&self) -> Vec<(IpAddr, Arc<Member>, Duration)> {
        let now = Instant::now();
        self.by_client
            .iter()
            .filter_map(|(c, e)| {
                let left = e.expires.checked_duration_since(now)?;
                Some((*c, e.member.upgrade()?, left))
            })
            .collect()
    }

    /// Restores an entry a previous oi had, with `left` of its time (at
    /// most this table's `ttl`).
    pub(super) fn restore(&mut self, client: IpAddr, member: &Arc<Member>, left: Duration) {
        let now = Instant::now();
        self.insert(client, Arc::downgrade(member), now);
        if let Some(e) = self.by_client.get_mut(&client) {
            e.expires = now.checked_add(left.min(self.ttl)).unwrap_or(now);
        }
    }

    /// Forgets `client`.
    fn remove(&mut self, client: IpAddr) {
        if let Some(e) = self.by_client.remove(&client) {
            self.by_age.remove(&e.stamp);
        }
    }

    /// Clients remembered now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_client.len()
    }
}
