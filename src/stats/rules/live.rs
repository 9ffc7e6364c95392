//! The live list: every open TCP connection and UDP association, with its
//! own byte counters and state, for `oi connections` and for the bytes of
//! connections that have not ended yet.
//!
//! Sharded by thread: a connection registers in the shard of the thread
//! that opens it, under that shard's lock, once when it starts and once when
//! it ends. Executor threads get shards of their own (the first
//! [`SHARDS`] threads to register), so they never wait for each other; a
//! snapshot locks one shard at a time only to copy its pointers out.

use super::{BackendStats, RuleStats};
use crate::net::peer::Peer;
use crate::stats::ConnKind;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

/// Shards of the live list: more than the executor threads of a typical host,
/// so each thread usually has its own.
const SHARDS: usize = 64;

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// Connecting to the backend.
    Connecting,
    /// Moving bytes both ways.
    Open,
    /// The client has closed its side (EOF forwarded); the backend may still send.
    ClientClosed,
    /// The backend has closed its side; the client may still send.
    BackendClosed,
    /// The upstream of a UDP association has ended; it waits to be swept.
    Ended,
}

impl ConnState {
    /// The name `oi connections` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnState::Connecting => "connecting",
            ConnState::Open => "open",
            ConnState::ClientClosed => "half-closed-by-client",
            ConnState::BackendClosed => "half-closed-by-backend",
            ConnState::Ended => "ended",
        }
    }

    /// Read back from `Conn::state` (its `oi close` flags masked off).
    fn from_u8(v: u8) -> Self {
        match v & STATE_MASK {
            0 => ConnState::Connecting,
            1 => ConnState::Open,
            2 => ConnState::ClientClosed,
            3 => ConnState::BackendClosed,
            _ => ConnState::Ended,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            ConnState::Connecting => 0,
            ConnState::Open => 1,
            ConnState::ClientClosed => 2,
            ConnState::BackendClosed => 3,
            ConnState::Ended => 4,
        }
    }
}

/// One live connection or association.
///
/// Laid out for idle memory (one per open connection; 160 -> 136 bytes):
/// what only some connections have (the backend, once connected, and its
/// counters; a TLS server name) sits in one-word cells, the start time is
/// 8 bytes, and the entry's place in its shard is kept by its
/// [`Registered`] guard, not here. `entry_fits_its_budget` pins the size.
pub(crate) struct Conn {
    /// The rule it belongs to (kept alive by it, even after a reload removes the rule).
    pub(in crate::stats) rule: Arc<RuleStats>,
    /// The client's address, or a unix client (never written to the status file or metrics).
    client: Peer,
    /// The backend address that answered, once known, with that backend's
    /// counters if the rule lists the address (set together, once).
    backend: OnceLock<(SocketAddr, Option<Arc<BackendStats>>)>,
    /// When it started, in milliseconds after [`epoch`], for its age:
    /// negative for one a previous oi handed over, older than this process's
    /// epoch (`oi upgrade` carries the age on).
    started_ms: i64,
    /// Bytes from the client so far: stored by the connection's own thread
    /// (TCP: once per pump poll), added to by a UDP association's two tasks.
    pub(crate) from_client: AtomicU64,
    /// Bytes to the client so far.
    pub(crate) to_client: AtomicU64,
    /// The TLS server name it asked for, on a listener shared by server
    /// name, and its client certificate's subject (boxed: one word in the
    /// entries of the many connections without either).
    names: OnceLock<Box<crate::stats::tls::ConnNames>>,
    /// What it is.
    kind: ConnKind,
    /// A [`ConnState`] in the low bits, stored by the connection, and `oi
    /// close`'s flags ([`CLOSE_ASKED`], [`CLOSE_WATCHED`]) in the high
    /// ones: the padding has no byte left for them (the id took it).
    state: AtomicU8,
    /// Its id (`oi connections`, the JSON log), 48 bits little-endian: in
    /// the 6 bytes of padding after `kind` and `state`, so the entry stays
    /// 136 bytes (a `u64` made it 144). 2^48 ids last 9 years at a million
    /// connections a second.
    id: [u8; 6],
}

/// The next live entry's id: the first is 1, so 0 is never an id.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id, within 48 bits (wrapping past 2^48 - 1 back to 0).
fn next_id() -> [u8; 6] {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed).to_le_bytes();
    [n[0], n[1], n[2], n[3], n[4], n[5]]
}

/// The bits of `Conn::state` that hold the [`ConnState`].
const STATE_MASK: u8 = 0x0f;

/// `Conn::state`: an operator asked for the connection to be closed.
const CLOSE_ASKED: u8 = 0x40;

/// `Conn::state`: its pump's (or reply task's) waker is in its shard's
/// `wakers`.
const CLOSE_WATCHED: u8 = 0x80;

/// The instant live entries count their start from: the first entry's
/// registration (an [`Instant`] is 16 bytes, a millisecond count 8).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds from [`epoch`] to now.
fn now_ms() -> i64 {
    i64::try_from(epoch().elapsed().as_millis()).unwrap_or(i64::MAX)
}

impl Conn {
    /// Bytes (from, to) the client so far.
    pub(in crate::stats) fn bytes(&self) -> (u64, u64) {
        (
            self.from_client.load(Ordering::Relaxed),
            self.to_client.load(Ordering::Relaxed),
        )
    }

    /// The backend's counters, once connected.
    pub(in crate::stats) fn backend_stats(&self) -> Option<&Arc<BackendStats>> {
        self.backend.get().and_then(|(_, b)| b.as_ref())
    }

    /// How long it has been open (across `oi upgrade`s).
    fn age(&self) -> Duration {
        let ms = now_ms().saturating_sub(self.started_ms);
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }

    /// Its id, unique in this process (`oi connections`, the JSON log).
    pub(crate) fn id(&self) -> u64 {
        let b = self.id;
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], 0, 0])
    }

    /// What `oi connections` shows of it.
    pub(in crate::stats) fn info(&self) -> ConnInfo {
        let (from_client, to_client) = self.bytes();
        ConnInfo {
            id: self.id(),
            rule: self.rule.name().to_string(),
            kind: self.kind,
            client: self.client,
            backend: self.backend.get().map(|(addr, _)| *addr),
            age: self.age(),
            from_client,
            to_client,
            state: ConnState::from_u8(self.state.load(Ordering::Relaxed)),
            server_name: self
                .names
                .get()
                .and_then(|n| Some(n.server_name.get()?.to_string())),
            tls_subject: self
                .names
                .get()
                .and_then(|n| Some(n.tls_subject.get()?.to_string())),
        }
    }

    /// The rule it belongs to.
    pub(crate) fn rule(&self) -> &Arc<RuleStats> {
        &self.rule
    }

    /// Its client.
    pub(crate) fn client(&self) -> Peer {
        self.client
    }

    /// The backend address that answered, once connected.
    pub(crate) fn backend(&self) -> Option<SocketAddr> {
        self.backend.get().map(|(addr, _)| *addr)
    }

    /// Whether `oi close` can close it: a stream (its pump looks at the
    /// flag from its first poll on), or a flow whose task watches the flag
    /// (a UDP association's task, to a UDP or a TCP backend, and a TCP→UDP
    /// flow's; not one whose task has not run yet, or a UDP→TCP one paused
    /// for `oi upgrade`).
    fn closable(&self) -> bool {
        matches!(self.kind, ConnKind::Tcp | ConnKind::Unix)
            || self.state.load(Ordering::Acquire) & CLOSE_WATCHED != 0
    }

    /// Whether it has ended already (a UDP association waiting to be swept).
    fn ended(&self) -> bool {
        ConnState::from_u8(self.state.load(Ordering::Relaxed)) == ConnState::Ended
    }
}

/// One live entry as `oi connections` lists it.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// Its id: unique in this process, the same in the JSON log.
    pub id: u64,
    /// The rule's name.
    pub rule: String,
    /// TCP, TCP→UDP, a UDP association, or a unix socket client.
    pub kind: ConnKind,
    /// The client: its address, or a unix socket client (printed `unix-client`).
    pub client: Peer,
    /// The backend address, once connected.
    pub backend: Option<SocketAddr>,
    /// How long it has been open.
    pub age: Duration,
    /// Bytes from the client.
    pub from_client: u64,
    /// Bytes to the client.
    pub to_client: u64,
    /// Where it is in its life.
    pub state: ConnState,
    /// The TLS server name it was routed by (`[sni=...]` listeners).
    pub server_name: Option<String>,
    /// The subject of the certificate its client presented (`tls-client-ca`).
    pub tls_subject: Option<String>,
}

/// One shard: its entries in slots, and the slots free for reuse. A slot
/// is one word (a hash map would also keep a key and spare capacity); the
/// entry's guard remembers its slot.
#[derive(Default)]
struct Shard {
    /// Live entries; `None` in a free slot.
    slots: Vec<Option<Arc<Conn>>>,
    /// Beside `slots`, the waker of each entry's pump once it waits
    /// (`oi close` wakes it): 16 bytes per slot, kept out of the entry,
    /// whose budget has no room for it.
    wakers: Vec<Option<Waker>>,
    /// Indexes of the free slots in `slots`.
    free: Vec<u32>,
}

/// The slot of an entry not listed: a shard holds fewer than `u32::MAX`
/// (which no descriptor limit comes near), and one that would not fit is
/// counted but left out of the list rather than given a wrong slot.
const UNLISTED: u32 = u32::MAX;

impl Shard {
    /// Stores `conn` in a free slot (or a new one) and returns its index
    /// ([`UNLISTED`] when the shard is full).
    fn insert(&mut self, conn: Arc<Conn>) -> u32 {
        if let Some(slot) = self.free.pop() {
            if let Some(entry) = self.slots.get_mut(slot as usize) {
                *entry = Some(conn);
                return slot;
            }
        }
        match u32::try_from(self.slots.len()) {
            Ok(slot) if slot < UNLISTED => {
                self.slots.push(Some(conn));
                slot
            }
            _ => UNLISTED,
        }
    }

    /// Empties `slot`. Like the hash map this replaced, the storage keeps
    /// its peak (a word per slot and per free slot) until the shard empties.
    fn remove(&mut self, slot: u32) {
        if let Some(entry) = self.slots.get_mut(slot as usize) {
            if entry.take().is_some() {
                self.free.push(slot);
            }
        }
        if let Some(waker) = self.wakers.get_mut(slot as usize) {
            *waker = None;
        }
        if self.free.len() == self.slots.len() {
            self.slots = Vec::new();
            self.free = Vec::new();
            self.wakers = Vec::new();
        }
    }

    /// Keeps `waker` for the entry in `slot`.
    fn watch(&mut self, slot: u32, waker: &Waker) {
        let i = slot as usize;
        if i >= self.slots.len() {
            return;
        }
        if self.wakers.len() <= i {
            self.wakers.resize(i + 1, None);
        }
        self.wakers[i] = Some(waker.clone());
    }

    /// The live entries.
    fn entries(&self) -> impl Iterator<Item = &Arc<Conn>> {
        self.slots.iter().flatten()
    }
}

/// The live list (see the module docs).
pub(crate) struct Live {
    /// The shards, each behind its own lock.
    shards: Box<[Mutex<Shard>]>,
}

/// Hands each thread its shard, round-robin on first use.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard index.
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
}

impl Live {
    pub(in crate::stats) fn new() -> Self {
        Live {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }

    /// Adds an entry to its rule's live list; it stays until the guard
    /// drops. `age`: how long it has been open already (one a previous oi
    /// handed over; zero for a new one).
    pub(in crate::stats) fn register(
        rule: Arc<RuleStats>,
        kind: ConnKind,
        client: Peer,
        age: Duration,
    ) -> Registered {
        let shard = SHARD.with(|s| *s);
        let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        let conn = Arc::new(Conn {
            rule,
            kind,
            client,
            backend: OnceLock::new(),
            started_ms: now_ms().saturating_sub(age),
            from_client: AtomicU64::new(0),
            to_client: AtomicU64::new(0),
            state: AtomicU8::new(if matches!(kind, ConnKind::Tcp | ConnKind::Unix) {
                ConnState::Connecting.to_u8()
            } else {
                ConnState::Open.to_u8()
            }),
            names: OnceLock::new(),
            id: next_id(),
        });
        let slot = conn.rule.live.shards[shard].lock().insert(conn.clone());
        // `SHARD` is under `SHARDS` (64): it fits.
        let shard = u32::try_from(shard).unwrap_or(0);
        Registered { conn, shard, slot }
    }

    /// Asks every closable entry `which` accepts to close, and wakes its
    /// pump; returns how many were asked and how many it could not close
    /// (flows whose task does not watch the flag now, which it leaves).
    pub(in crate::stats) fn close(&self, which: impl Fn(&Conn) -> bool) -> (usize, usize) {
        let (mut closed, mut left) = (0, 0);
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for (i, entry) in shard.slots.iter().enumerate() {
                let Some(conn) = entry.as_ref().filter(|c| !c.ended() && which(c)) else {
                    continue;
                };
                if !conn.closable() {
                    left += 1;
                    continue;
                }
                closed += 1;
                // Under the shard's lock, as the pump's registration: one
                // of the two sees the other.
                let was = conn.state.fetch_or(CLOSE_ASKED, Ordering::AcqRel);
                if was & CLOSE_WATCHED != 0 {
                    if let Some(Some(w)) = shard.wakers.get(i) {
                        w.wake_by_ref();
                    }
                }
            }
        }
        (closed, left)
    }

    /// How many live entries `which` accepts.
    pub(in crate::stats) fn count(&self, which: impl Fn(&Conn) -> bool) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().entries().filter(|c| which(c)).count())
            .sum()
    }

    /// Every live entry now.
    pub(in crate::stats) fn list(&self) -> Vec<Arc<Conn>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            all.extend(shard.lock().entries().cloned());
        }
        all
    }
}

/// A connection's place in the live list and its counters; dropping it ends
/// the entry and adds its bytes to its rule's and backend's totals.
pub(crate) struct Registered {
    /// The entry.
    conn: Arc<Conn>,
    /// Its shard (under [`SHARDS`]; `u32`, with `slot`, to keep this guard
    /// 16 bytes in every connection's task, not 24).
    shard: u32,
    /// Its slot in the shard.
    slot: u32,
}

impl Registered {
    /// Records the backend address that answered.
    pub(crate) fn connected(&self, backend: SocketAddr) {
        let counters = self.conn.rule.backend(backend);
        // Counted on the backend once, with the address (one call is made).
        if self.conn.backend.set((backend, counters.clone())).is_ok() {
            if let Some(b) = counters {
                b.opened.fetch_add(1, Ordering::Relaxed);
                b.active.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.set_state(ConnState::Open);
    }

    /// Records the backend of a connection a previous oi handed over: as
    /// [`Registered::connected`], but the backend's `opened` counted it there.
    pub(crate) fn reconnected(&self, backend: SocketAddr) {
        let counters = self.conn.rule.backend(backend);
        if self.conn.backend.set((backend, counters.clone())).is_ok() {
            if let Some(b) = counters {
                b.active.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.set_state(ConnState::Open);
    }

    /// Moves the connection to `rule`, the one its server name chose on a
    /// listener rules share ([`RuleStats::register_unrouted`]): counted
    /// opened there (and in the process), open there rather than on the
    /// rule that accepted it, and listed under it. Called before the
    /// backend's connect, once.
    pub(crate) fn route_to(&mut self, rule: &Arc<RuleStats>) {
        let kind = self.conn.kind;
        rule.counters.admitted(kind);
        rule.process.admitted(kind);
        if Arc::ptr_eq(rule, &self.conn.rule) {
            return;
        }
        self.conn.rule.counters.moved_out(kind);
        rule.counters.resumed(kind);
        let old = &self.conn;
        let (from, to) = old.bytes();
        let moved = Arc::new(Conn {
            rule: rule.clone(),
            client: old.client,
            backend: old.backend.clone(),
            started_ms: old.started_ms,
            from_client: AtomicU64::new(from),
            to_client: AtomicU64::new(to),
            names: old.names.clone(),
            kind,
            state: AtomicU8::new(old.state.load(Ordering::Relaxed)),
            id: old.id,
        });
        // The entry's slot now lists the moved entry (an unlisted one,
        // `UNLISTED`, has no slot to update).
        if let Some(shard) = self.live().shards.get(self.shard as usize) {
            let mut shard = shard.lock();
            if let Some(Some(slot)) = shard.slots.get_mut(self.slot as usize) {
                if Arc::ptr_eq(slot, &self.conn) {
                    *slot = moved.clone();
                }
                // Under the lock `Live::close` takes: an ask is not lost.
                let flags = old.state.load(Ordering::Acquire) & !STATE_MASK;
                moved.state.fetch_or(flags, Ordering::AcqRel);
            }
        }
        self.conn = moved;
    }

    /// How long it has been open: what `oi upgrade` carries to the new oi.
    pub(crate) fn age(&self) -> Duration {
        self.conn.age()
    }

    /// What a log line in the JSON format says about the connection
    /// beyond rinetd's fields: its id, rule name, backend and age.
    pub(crate) fn flow(&self) -> crate::logfile::Flow {
        crate::logfile::Flow {
            id: self.conn.id(),
            rule: self.conn.rule.name(),
            backend: self.backend(),
            duration_ms: u64::try_from(self.conn.age().as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The backend address that answered, once connected.
    pub(crate) fn backend(&self) -> Option<SocketAddr> {
        self.conn.backend.get().map(|(addr, _)| *addr)
    }

    /// Records the TLS server name the connection was routed by.
    pub(crate) fn routed_by(&self, name: Arc<str>) {
        let names = self.conn.names.get_or_init(Box::default);
        let _ = names.server_name.set(name);
    }

    /// Records the subject of the certificate the client presented.
    pub(crate) fn client_subject(&self, subject: Arc<str>) {
        let names = self.conn.names.get_or_init(Box::default);
        let _ = names.tls_subject.set(subject);
    }

    /// The subject of the certificate the client presented, if it did.
    pub(crate) fn tls_subject(&self) -> Option<Arc<str>> {
        self.conn.names.get()?.tls_subject.get().cloned()
    }

    /// The TLS server name the connection was routed by, if any: read back
    /// for its log lines rather than kept beside the entry, which every idle
    /// connection would carry.
    pub(crate) fn server_name(&self) -> Option<Arc<str>> {
        self.conn.names.get()?.server_name.get().cloned()
    }

    /// The client: read back for log lines rather than kept beside the
    /// entry (a `Peer` is 32 bytes of every idle connection).
    pub(crate) fn client(&self) -> Peer {
        self.conn.client
    }

    /// Stores the running byte totals and state (one writer: the connection).
    pub(crate) fn publish(&self, from_client: u64, to_client: u64, state: ConnState) {
        self.conn.from_client.store(from_client, Ordering::Relaxed);
        self.conn.to_client.store(to_client, Ordering::Relaxed);
        self.set_state(state);
    }

    /// `oi upgrade` (old side): the new oi took this connection over with
    /// its byte counts, and counts them from now on; they leave this
    /// process's counts, so what this oi counted while draining (sent to
    /// the new oi at its exit) holds only connections it served itself.
    pub(crate) fn handed_on(&self) {
        self.publish(0, 0, ConnState::Open);
    }

    /// What [`Registered::publish`] last stored (or the start: no bytes,
    /// the state set since).
    pub(crate) fn published(&self) -> (u64, u64, ConnState) {
        let (from, to) = self.conn.bytes();
        let state = ConnState::from_u8(self.conn.state.load(Ordering::Relaxed));
        (from, to, state)
    }

    /// Whether `oi close` asked for this connection to end; the first call
    /// that finds no ask keeps the task's waker in its shard, to be woken
    /// by one (a task's waker stays the same for its life: one lock per
    /// connection, none per poll).
    pub(crate) fn close_asked(&self, cx: &Context<'_>) -> bool {
        let flags = self.conn.state.load(Ordering::Acquire);
        if flags & CLOSE_ASKED != 0 {
            return true;
        }
        if flags & CLOSE_WATCHED != 0 || self.slot == UNLISTED {
            return false;
        }
        let Some(shard) = self.live().shards.get(self.shard as usize) else {
            return false;
        };
        let mut shard = shard.lock();
        shard.watch(self.slot, cx.waker());
        let was = self.conn.state.fetch_or(CLOSE_WATCHED, Ordering::AcqRel);
        was & CLOSE_ASKED != 0
    }

    /// Forgets the task's waker: a paused UDP→TCP association's task gives
    /// its parts back and returns, and the task that resumes them (`oi
    /// upgrade` kept it here) keeps its own on its first look at the flag.
    /// Under the shard's lock, as [`Live::close`]: an ask meanwhile stays
    /// in the flags, for that first look to see.
    pub(crate) fn unwatch(&self) {
        let Some(shard) = self.live().shards.get(self.shard as usize) else {
            return;
        };
        let mut shard = shard.lock();
        if let Some(waker) = shard.wakers.get_mut(self.slot as usize) {
            *waker = None;
        }
        self.conn.state.fetch_and(!CLOSE_WATCHED, Ordering::AcqRel);
    }

    /// Waits until `oi close` asks for this flow to end (see
    /// [`Registered::close_asked`]).
    pub(crate) fn closed(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.close_asked(cx) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
    }

    /// Stores the state.
    /// The flags beside it are kept: an update only when the state
    /// changes (a load per publish otherwise, as the store it replaced).
    pub(crate) fn set_state(&self, state: ConnState) {
        let new = state.to_u8();
        let cell = &self.conn.state;
        if cell.load(Ordering::Relaxed) & STATE_MASK != new {
            let _ = cell.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
                Some(v & !STATE_MASK | new)
            });
        }
    }

    /// Adds bytes from the client (UDP paths, which have several writers).
    pub(crate) fn add_from_client(&self, n: u64) {
        self.conn.from_client.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds bytes to the client.
    pub(crate) fn add_to_client(&self, n: u64) {
        self.conn.to_client.fetch_add(n, Ordering::Relaxed);
    }

    /// Bytes (from, to) the client so far.
    pub(crate) fn bytes(&self) -> (u64, u64) {
        self.conn.bytes()
    }

    /// The rule's counters.
    pub(crate) fn rule(&self) -> &Arc<RuleStats> {
        &self.conn.rule
    }

    /// The live list this entry is in: the rule's process-wide one.
    fn live(&self) -> &Live {
        &self.conn.rule.live
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // Out of the list first, then into the ended totals: a snapshot in
        // between sees a dip, which the reported maximum hides (module docs).
        if let Some(shard) = self.live().shards.get(self.shard as usize) {
            shard.lock().remove(self.slot);
        }
        let (from, to) = self.conn.bytes();
        let c = &self.conn;
        c.rule.counters.ended(c.kind, from, to);
        c.rule.process.ended(c.kind, from, to);
        if let Some(b) = c.backend_stats() {
            b.ended_from_client.fetch_add(from, Ordering::Relaxed);
            b.ended_to_client.fetch_add(to, Ordering::Relaxed);
            crate::stats::drop_one(&b.active);
        }
    }
}

#[cfg(test)]
mod tests;
