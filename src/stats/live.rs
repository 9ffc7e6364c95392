//! The live list: every open TCP connection and UDP association, with its
//! own byte counters and state, for `oi connections` and for the bytes of
//! connections that have not ended yet.
//!
//! Sharded by thread: a connection registers in the shard of the thread
//! that opens it, under that shard's lock, once when it starts and once when
//! it ends. Executor threads get shards of their own (the first
//! [`SHARDS`] threads to register), so they never wait for each other; a
//! snapshot locks one shard at a time only to copy its pointers out.

use super::{lock, BackendStats, RuleStats};
use crate::peer::Peer;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Shards of the live list: more than the executor threads of a typical host,
/// so each thread usually has its own.
const SHARDS: usize = 64;

/// What a live entry is.
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

    fn from_u8(v: u8) -> Self {
        match v {
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
pub(crate) struct Conn {
    /// Its key in its shard.
    id: u64,
    /// The rule it belongs to (kept alive by it, even after a reload removes the rule).
    pub(super) rule: Arc<RuleStats>,
    /// What it is.
    kind: ConnKind,
    /// The client's address, or a unix client (never written to the status file or metrics).
    client: Peer,
    /// The backend address that answered, once known.
    backend: OnceLock<SocketAddr>,
    /// That backend's counters, if the rule lists the address.
    backend_stats: OnceLock<Arc<BackendStats>>,
    /// When it started, for its age.
    started: Instant,
    /// Bytes from the client so far: stored by the connection's own thread
    /// (TCP: once per pump poll), added to by a UDP association's two tasks.
    pub(crate) from_client: AtomicU64,
    /// Bytes to the client so far.
    pub(crate) to_client: AtomicU64,
    /// A [`ConnState`], stored by the connection.
    state: AtomicU8,
    /// The TLS server name it asked for, on a listener shared by server name.
    server_name: OnceLock<Arc<str>>,
}

impl Conn {
    /// Bytes (from, to) the client so far.
    pub(super) fn bytes(&self) -> (u64, u64) {
        (
            self.from_client.load(Ordering::Relaxed),
            self.to_client.load(Ordering::Relaxed),
        )
    }

    /// The backend's counters, once connected.
    pub(super) fn backend_stats(&self) -> Option<&Arc<BackendStats>> {
        self.backend_stats.get()
    }

    /// What `oi connections` shows of it.
    pub(super) fn info(&self) -> ConnInfo {
        let (from_client, to_client) = self.bytes();
        ConnInfo {
            rule: self.rule.name().to_string(),
            kind: self.kind,
            client: self.client,
            backend: self.backend.get().copied(),
            age: self.started.elapsed(),
            from_client,
            to_client,
            state: ConnState::from_u8(self.state.load(Ordering::Relaxed)),
            server_name: self.server_name.get().map(|n| n.to_string()),
        }
    }
}

/// One live entry as `oi connections` lists it.
#[derive(Clone, Debug)]
pub struct ConnInfo {
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
}

/// One shard: its entries and the next id it hands out.
#[derive(Default)]
struct Shard {
    /// Next sequence number; ids are `seq * SHARDS + shard`, unique process-wide.
    next: u64,
    /// Live entries by id.
    conns: HashMap<u64, Arc<Conn>>,
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
    pub(super) fn new() -> Self {
        Live {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }

    /// Adds an entry; it stays until the guard drops.
    pub(super) fn register(
        &self,
        rule: Arc<RuleStats>,
        kind: ConnKind,
        client: Peer,
    ) -> Registered {
        let shard = SHARD.with(|s| *s);
        let mut s = lock(&self.shards[shard]);
        let id = s.next * SHARDS as u64 + shard as u64;
        s.next += 1;
        let conn = Arc::new(Conn {
            id,
            rule,
            kind,
            client,
            backend: OnceLock::new(),
            backend_stats: OnceLock::new(),
            started: Instant::now(),
            from_client: AtomicU64::new(0),
            to_client: AtomicU64::new(0),
            state: AtomicU8::new(if matches!(kind, ConnKind::Tcp | ConnKind::Unix) {
                ConnState::Connecting.to_u8()
            } else {
                ConnState::Open.to_u8()
            }),
            server_name: OnceLock::new(),
        });
        s.conns.insert(id, conn.clone());
        drop(s);
        Registered { conn, shard }
    }

    /// Every live entry now.
    pub(super) fn list(&self) -> Vec<Arc<Conn>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            all.extend(lock(shard).conns.values().cloned());
        }
        all
    }
}

/// A connection's place in the live list and its counters; dropping it ends
/// the entry and adds its bytes to its rule's and backend's totals.
pub(crate) struct Registered {
    /// The entry.
    conn: Arc<Conn>,
    /// Its shard.
    shard: usize,
}

impl Registered {
    /// Records the backend address that answered.
    pub(crate) fn connected(&self, backend: SocketAddr) {
        let _ = self.conn.backend.set(backend);
        if let Some(b) = self.conn.rule.backend(backend) {
            b.opened.fetch_add(1, Ordering::Relaxed);
            b.active.fetch_add(1, Ordering::Relaxed);
            let _ = self.conn.backend_stats.set(b);
        }
        self.set_state(ConnState::Open);
    }

    /// Records the backend of a connection a previous oi handed over: as
    /// [`Registered::connected`], but the backend's `opened` counted it there.
    pub(crate) fn reconnected(&self, backend: SocketAddr) {
        let _ = self.conn.backend.set(backend);
        if let Some(b) = self.conn.rule.backend(backend) {
            b.active.fetch_add(1, Ordering::Relaxed);
            let _ = self.conn.backend_stats.set(b);
        }
        self.set_state(ConnState::Open);
    }

    /// Records the TLS server name the connection was routed by.
    pub(crate) fn routed_by(&self, name: Arc<str>) {
        let _ = self.conn.server_name.set(name);
    }

    /// Stores the running byte totals and state (one writer: the connection).
    pub(crate) fn publish(&self, from_client: u64, to_client: u64, state: ConnState) {
        self.conn.from_client.store(from_client, Ordering::Relaxed);
        self.conn.to_client.store(to_client, Ordering::Relaxed);
        self.set_state(state);
    }

    /// Stores the state.
    pub(crate) fn set_state(&self, state: ConnState) {
        self.conn.state.store(state.to_u8(), Ordering::Relaxed);
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
        lock(&self.live().shards[self.shard])
            .conns
            .remove(&self.conn.id);
        let (from, to) = self.conn.bytes();
        let c = &self.conn;
        c.rule.counters.ended(c.kind, from, to);
        c.rule.process.ended(c.kind, from, to);
        if let Some(b) = c.backend_stats.get() {
            b.ended_from_client.fetch_add(from, Ordering::Relaxed);
            b.ended_to_client.fetch_add(to, Ordering::Relaxed);
            super::drop_one(&b.active);
        }
    }
}
