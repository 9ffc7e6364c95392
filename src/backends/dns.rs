//! Looking backend names up again: one thread (`oi-dns`) per server, off
//! the executor threads, since getaddrinfo blocks. Each watched pool's named
//! backends are looked up every `dns-refresh` interval and, at once, after
//! [`super::FAILURES_BEFORE_LOOKUP`] consecutive connect failures. New
//! connections use the new addresses; open ones keep theirs. A lookup that
//! fails or finds nothing keeps the addresses there were.
//!
//! Bounds: the thread holds one entry per watched pool (weakly: a pool
//! dropped by a reload is forgotten on the next pass), and at most one
//! pending "look up now" per backend.

use super::BackendPool;
use parking_lot::Mutex;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How a name becomes addresses: getaddrinfo in production, a table in tests.
pub(crate) type Lookup = Arc<dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync>;

/// Called with a pool's addresses after a lookup changed them (the rule's
/// statistics list its backends by address).
pub(crate) type OnChange = Box<dyn Fn(&[SocketAddr]) + Send>;

/// The longest the thread sleeps without looking at its pools; also what it
/// waits when no pool has a refresh interval.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// What the thread is told.
enum Message {
    /// Start refreshing `pool` (identified by `id` in later messages).
    Watch {
        /// The pool's number.
        id: u64,
        /// The pool; weak, so a reload that drops it frees it.
        pool: Weak<BackendPool>,
        /// What to tell when its addresses change.
        on_change: OnChange,
    },
    /// Look up backend `group` of pool `id` now.
    Now {
        /// The pool's number.
        id: u64,
        /// The backend's index.
        group: usize,
    },
}

/// The server's refresher: starts its thread with the first pool watched.
pub(crate) struct Refresher {
    /// How names are looked up.
    lookup: Lookup,
    /// The thread's inbox, once it runs.
    sender: Mutex<Option<Sender<Message>>>,
    /// The next pool number.
    next_id: Mutex<u64>,
}

/// A pool's way to ask for a lookup now.
pub(crate) struct Poke {
    /// The refresher's inbox.
    sender: Sender<Message>,
    /// The pool's number.
    id: u64,
    /// Per backend: a lookup was asked for and has not run yet (at most one
    /// pending per backend, however many connections fail).
    pending: Arc<Vec<AtomicBool>>,
}

impl Default for Refresher {
    fn default() -> Self {
        Refresher::with_lookup(Arc::new(system_lookup))
    }
}

/// getaddrinfo, in resolver order, without repeats.
fn system_lookup(name: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let mut unique = Vec::new();
    for a in (name, port).to_socket_addrs()? {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    Ok(unique)
}

impl Refresher {
    /// A refresher that looks names up with `lookup`.
    pub(crate) fn with_lookup(lookup: Lookup) -> Self {
        Refresher {
            lookup,
            sender: Mutex::new(None),
            next_id: Mutex::new(0),
        }
    }

    /// Keeps `pool`'s named backends fresh for as long as the pool lives,
    /// telling `on_change` their new addresses. Pools of literal addresses
    /// only are not watched at all.
    pub(crate) fn watch(&self, pool: &Arc<BackendPool>, on_change: OnChange) {
        if pool.groups.iter().all(|g| g.name.is_none()) {
            return;
        }
        let id = {
            let mut next = self.next_id.lock();
            *next = next.wrapping_add(1);
            *next
        };
        let sender = {
            let mut slot = self.sender.lock();
            match &*slot {
                Some(s) => s.clone(),
                None => {
                    let (tx, rx) = mpsc::channel();
                    let lookup = self.lookup.clone();
                    let started = std::thread::Builder::new()
                        .name("oi-dns".into())
                        .spawn(move || run(rx, lookup));
                    if let Err(e) = started {
                        log::error!("cannot start the DNS refresh thread: {e}");
                        return;
                    }
                    *slot = Some(tx.clone());
                    tx
                }
            }
        };
        let pending = Arc::new(pool.groups.iter().map(|_| AtomicBool::new(false)).collect());
        let poke = Poke {
            sender: sender.clone(),
            id,
            pending,
        };
        if pool.refresher.set(poke).is_err() {
            return;
        }
        let _ = sender.send(Message::Watch {
            id,
            pool: Arc::downgrade(pool),
            on_change,
        });
    }
}

impl Refresher {
    /// Whether the thread was started (tests: pools of literal addresses start none).
    #[cfg(test)]
    pub(super) fn started(&self) -> bool {
        self.sender.lock().is_some()
    }
}

impl Poke {
    /// Asks for backend `group` to be looked up now, unless that is pending.
    pub(crate) fn lookup_soon(&self, group: usize) {
        let Some(flag) = self.pending.get(group) else {
            return;
        };
        if !flag.swap(true, Ordering::Relaxed) {
            let _ = self.sender.send(Message::Now { id: self.id, group });
        }
    }

    /// Marks backend `group`'s lookup as done.
    fn done(&self, group: usize) {
        if let Some(flag) = self.pending.get(group) {
            flag.store(false, Ordering::Relaxed);
        }
    }
}

/// One watched pool on the thread.
struct Watched {
    /// The pool's number.
    id: u64,
    /// The pool, while it lives.
    pool: Weak<BackendPool>,
    /// What to tell of changes.
    on_change: OnChange,
    /// Per backend, when it is next due (`None`: never, only on failures).
    due: Vec<Option<Instant>>,
}

/// The thread: waits for messages until the next backend is due, then
/// looks up every due one. Ends when the server (the sender) is gone.
fn run(inbox: Receiver<Message>, lookup: Lookup) {
    let mut watched: Vec<Watched> = Vec::new();
    loop {
        let now = Instant::now();
        let next = watched
            .iter()
            .flat_map(|w| w.due.iter().flatten())
            .min()
            .copied()
            .unwrap_or(now + MAX_SLEEP)
            .min(now + MAX_SLEEP);
        match inbox.recv_timeout(next.saturating_duration_since(now)) {
            Ok(Message::Watch {
                id,
                pool,
                on_change,
            }) => {
                let Some(p) = pool.upgrade() else { continue };
                let due = p
                    .groups
                    .iter()
                    .map(|g| g.refresh.and_then(|every| now.checked_add(every)))
                    .collect();
                watched.push(Watched {
                    id,
                    pool,
                    on_change,
                    due,
                });
            }
            Ok(Message::Now { id, group }) => {
                if let Some(w) = watched.iter_mut().find(|w| w.id == id) {
                    if let Some(p) = w.pool.upgrade() {
                        refresh(
                            &p,
                            group,
                            &lookup,
                            &w.on_change,
                            "after repeated connect failures",
                        );
                        if let Some(poke) = p.refresher.get() {
                            poke.done(group);
                        }
                        reschedule(&p, &mut w.due, group);
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        watched.retain(|w| w.pool.strong_count() > 0);
        for w in &mut watched {
            let Some(p) = w.pool.upgrade() else { continue };
            for group in 0..w.due.len() {
                if w.due[group].is_some_and(|d| d <= now) {
                    refresh(&p, group, &lookup, &w.on_change, "on schedule");
                    reschedule(&p, &mut w.due, group);
                }
            }
        }
    }
}

/// Sets backend `group`'s next due time from now.
fn reschedule(pool: &BackendPool, due: &mut [Option<Instant>], group: usize) {
    if let (Some(slot), Some(g)) = (due.get_mut(group), pool.groups.get(group)) {
        *slot = g
            .refresh
            .and_then(|every| Instant::now().checked_add(every));
    }
}

/// Looks backend `group` of `pool` up and installs the addresses if they changed.
fn refresh(pool: &BackendPool, group: usize, lookup: &Lookup, on_change: &OnChange, why: &str) {
    let Some(g) = pool.groups.get(group) else {
        return;
    };
    let Some(name) = &g.name else { return };
    let found = match lookup(name, g.port) {
        Ok(found) if !found.is_empty() => found,
        Ok(_) => {
            log::warn!("DNS refresh of {name}: no addresses; keeping the old ones");
            return;
        }
        Err(e) => {
            log::warn!("DNS refresh of {name}: {e}; keeping the old ones");
            return;
        }
    };
    let before = pool.addrs();
    {
        let mut members = g.members.lock();
        let fresh = g.members_for(group, &found, &members);
        *members = fresh;
    }
    pool.publish();
    let after = pool.addrs();
    if after != before {
        log::info!(
            "DNS refresh ({why}): {name} now {}",
            found
                .iter()
                .map(|a| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        on_change(&after);
    } else {
        log::debug!("DNS refresh ({why}): {name} unchanged");
    }
}
