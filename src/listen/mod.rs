//! The listener set: binding, serving, and the reload diff.
//!
//! [`serve`] is how every server starts, in the binary, the tests and the
//! benches: it takes sockets that are already bound (so start-up can fail
//! cleanly before serving, and tests can bind port 0), starts their loops on
//! the [`Runtime`]'s threads, and returns the future that keeps them serving
//! until its command channel closes. Reloads arrive on that channel.
//!
//! Threading model: each executor is run by exactly one thread. Every
//! executor runs its own accept loop on each TCP listener's one socket,
//! which every thread's epoll watches with `EPOLLEXCLUSIVE` (the kernel
//! wakes one idle thread per connection; a busy thread leaves the socket
//! until it catches up: `oi_runtime::reactor`'s `accept`), and runs the
//! connections it accepts, handing one to another thread when its own is
//! busy or runs too many more (see [`oi_runtime`]). An `SO_REUSEPORT`
//! group passed in keeps one loop per member. The first executor also runs
//! the UDP listeners.
//!
//! Duplicated descriptors are budgeted (see [`duplicate_budget`]): a
//! configuration with thousands of rules must not run out of descriptors.
//! Past the budget a TCP listener gets one accept loop, on the executors in
//! turn.

mod accept;
mod bind;
mod driver;
mod inherit;
mod routed;
mod unix;

pub use bind::{bind, BoundSocket, TcpGroup, UnixSocket};
pub use inherit::bind_all;
pub(crate) use inherit::{bind_all_with, Inherited};

use crate::route::limits::RuleLimits;
use crate::route::shared::Shared;
use crate::route::Route;
use crate::stats::RuleStats;
use arc_swap::ArcSwap;
use async_channel::{Receiver, Sender};
use async_task::Task;
use driver::AcceptLoop;
use oi_config::{BindAddr, Proto, ResolvedConfig};
use oi_runtime::reactor::Async;
use oi_runtime::{Runtime, Threads};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a running server can be asked to do.
#[expect(
    clippy::large_enum_variant,
    reason = "a handful of commands in a process's life, one at a time"
)]
pub enum Command {
    /// Apply a new configuration: unchanged listeners keep their sockets and
    /// take the new route, removed ones close, new ones are bound; open
    /// connections are untouched. Once every removed listener is closed, one
    /// message per listener that could not be bound goes back on `done`. A
    /// configuration past the descriptor budget changes nothing (see `apply`).
    Reload {
        /// The configuration to serve from now on.
        config: ResolvedConfig,
        /// The file name messages should name.
        file: String,
        /// Receives the bind errors when the reload is complete (`Ok`), or
        /// why it was refused as a whole (`Err`: nothing changed).
        done: Sender<Result<Vec<String>, Vec<String>>>,
    },
    /// A copy of every listening socket (each socket of a TCP listener's
    /// group), for handing to a new oi.
    Sockets {
        /// Receives the copies, each with its socket file's device and
        /// inode for a unix listener whose file oi made.
        reply: Sender<Vec<SocketCopy>>,
    },
    /// A new oi serves the sockets now: when the listeners close, their
    /// unix socket files stay.
    KeepFiles,
    /// Connections the previous oi handed over: each whose rule a TCP
    /// listener here serves is placed on a thread, waiting at `gate`.
    Adopt {
        /// The connections.
        conns: Vec<crate::route::park::Offered>,
        /// Receives the ids of those placed; the others are closed here
        /// (the previous oi keeps serving them).
        reply: Sender<Vec<u64>>,
        /// Closed once the previous oi has been told which were taken.
        gate: Receiver<()>,
        /// Set before the gate closes when it was told: the placed
        /// connections pump; else they close (the previous oi has them).
        go: Arc<AtomicBool>,
    },
}

/// A copy of a listening socket for a new oi, with the device and inode of
/// its socket file when it is a unix listener whose file oi made.
pub(crate) type SocketCopy = (OwnedFd, Option<(u64, u64)>);

/// Starts serving already-bound sockets, each with its route, on `runtime`'s
/// threads, and returns the future that keeps them serving.
///
/// Every listener's loops are running (their descriptors duplicated) when this
/// returns; an error here means none is. The returned future applies each
/// [`Command`] from `commands` and, once the channel closes, closes every
/// listener and completes. Open connections carry on: they are tasks of their
/// own, counted by the runtime until they end.
pub fn serve(
    runtime: &Runtime,
    shared: Arc<Shared>,
    sockets: Vec<(BoundSocket, Route)>,
    commands: Receiver<Command>,
) -> io::Result<impl Future<Output = ()> + Send + 'static> {
    let mut listeners = Listeners {
        threads: runtime.threads().clone(),
        duplicate_budget: duplicate_budget(),
        shared,
        serving: HashMap::new(),
        udp_cap_logged: None,
        accept_failing: Arc::default(),
    };
    listeners.start(sockets)?;
    listeners.share_descriptors_with_udp();
    Ok(async move {
        while let Ok(command) = commands.recv().await {
            match command {
                Command::Reload { config, file, done } => {
                    let errors = listeners.apply(&config, &file).await;
                    let _ = done.send(errors).await;
                }
                Command::Sockets { reply } => {
                    let _ = reply.send(listeners.copies()).await;
                }
                Command::Adopt {
                    conns,
                    reply,
                    gate,
                    go,
                } => {
                    let _ = reply.send(listeners.adopt(conns, &gate, &go)).await;
                }
                Command::KeepFiles => {
                    listeners.shared.parking.set_handed();
                    for file in listeners.serving.values().filter_map(|r| r.file.as_ref()) {
                        file.keep();
                    }
                }
            }
        }
        listeners.close().await;
    })
}

/// A listening socket as its loop and its `Running` share it.
type Listening = Arc<dyn AsFd + Send + Sync>;

/// Identifies a listener across reloads: same address, port and protocol
/// (or same unix socket path or name) means same socket.
type ListenerKey = (BindAddr, Proto);

/// One serving listener.
struct Running {
    /// The route new connections take; reload swaps it in place.
    route: Arc<ArcSwap<Route>>,
    /// The rule's connection counts (`maxconn`, `maxconn-per-client`): here,
    /// not in the route, so a reload that keeps the listener keeps them.
    limits: Arc<RuleLimits>,
    /// The accept loops (one per executor) or the datagram loop; each owns a
    /// descriptor of the socket, so cancelling them all closes the socket.
    tasks: Vec<Task<()>>,
    /// The rule's counters: they live as long as the listener, so a reload
    /// that keeps the listener keeps them.
    stats: Arc<RuleStats>,
    /// Its sockets, shared with the loops that serve them (no descriptor
    /// more), so `oi upgrade` can copy them for a new oi when it runs.
    /// Declared before `file`: a socket file goes only once its socket is closed.
    sockets: Vec<Listening>,
    /// A unix listener's socket file, so a reload's new `mode=` is applied
    /// to the inode the bind made (see [`crate::sys::safe_fs::SocketFile::set_mode`]).
    file: Option<crate::sys::unix::SocketFile>,
}

impl Running {
    /// Cancels every loop and waits until each has dropped its descriptor.
    async fn stop(self) {
        for task in self.tasks {
            task.cancel().await;
        }
    }
}

/// The serving listeners, keyed so a reload can tell what changed.
struct Listeners {
    /// Executor threads the loops and connections run on, with their connection counts.
    threads: Arc<Threads>,
    /// How many duplicated listening descriptors all listeners together may hold.
    duplicate_budget: usize,
    /// State shared with every task.
    shared: Arc<Shared>,
    /// Serving listeners.
    serving: HashMap<ListenerKey, Running>,
    /// (UDP listeners, soft limit) when the clamp was last reported, so the
    /// warning is printed at start-up and again only when a reload changes
    /// either; not keyed on the cap itself, which moves by a descriptor or
    /// two whenever a TCP listener comes or goes (every reload of the soak test).
    udp_cap_logged: Option<(usize, u64)>,
    /// Set while accepting fails on any TCP or unix listener (descriptors
    /// run out for all of them at once), so the episode is logged once, not
    /// once per listener: 9,991 `accept failed` lines before (and one per
    /// unix listener until each had its own flag replaced by this one).
    accept_failing: Arc<AtomicBool>,
}

impl Listeners {
    /// A copy of every listening socket, for a hand-over; one that cannot
    /// be copied (no descriptor left) is left out, and the new oi binds
    /// that rule itself (failing, since this one still holds it).
    fn copies(&self) -> Vec<SocketCopy> {
        let all = self.serving.values().flat_map(|r| {
            let file = r.file.as_ref().map(crate::sys::unix::SocketFile::id);
            r.sockets.iter().map(move |s| (s, file))
        });
        all.filter_map(|(s, file)| Some((s.as_fd().try_clone_to_owned().ok()?, file)))
            .collect()
    }

    /// Places each handed-over flow whose rule a listener here serves (same
    /// listening address and protocols): a stream or TCP→UDP connection
    /// on a thread, where it waits for `gate` before pumping; a UDP
    /// association in the stash its listener takes it from once the
    /// hand-over ends. Returns their ids. The others are closed here and
    /// logged: the previous oi keeps serving them.
    fn adopt(
        &self,
        conns: Vec<crate::route::park::Offered>,
        gate: &Receiver<()>,
        go: &Arc<AtomicBool>,
    ) -> Vec<u64> {
        use crate::route::park::Flow;
        let mut ids = Vec::new();
        for c in conns {
            let (proto, backend_proto, what) = match c.flow {
                Flow::Stream { .. } => (Proto::Tcp, Proto::Tcp, "TCP"),
                Flow::TcpToUdp { .. } => (Proto::Tcp, Proto::Udp, "TCP->UDP"),
                Flow::Datagram { .. } => (Proto::Udp, Proto::Udp, "UDP"),
                Flow::UdpToTcp { .. } => (Proto::Udp, Proto::Tcp, "UDP->TCP"),
            };
            let found = self.serving.iter().find(|((bind, p), running)| {
                *p == proto
                    && bind.to_string() == c.rule
                    && running.route.load().backend_proto == backend_proto
            });
            let Some((_, running)) = found else {
                log::info!(
                    "upgrade: no {what} rule listens on {:?} here; the previous oi keeps its connection",
                    c.rule
                );
                continue;
            };
            ids.push(c.id);
            if proto == Proto::Udp {
                self.shared.parking.stash(c);
                continue;
            }
            let route = running.route.load_full();
            let shared = self.shared.clone();
            let at = self.threads.pick(0);
            // Counted like an accepted connection (drain, thread balance,
            // the connection limits: open already, so never refused).
            let placed = self.threads.place(at);
            let client = match &c.flow {
                Flow::Stream { client, .. } => {
                    let peer = socket2::SockRef::from(client).peer_addr().ok();
                    peer.and_then(|p| p.as_socket())
                        .map(crate::route::client_ip)
                }
                Flow::TcpToUdp { origin, .. } => Some(crate::route::client_ip(origin.client)),
                Flow::Datagram { .. } | Flow::UdpToTcp { .. } => None,
            };
            // A connection a server name routed goes back to that rule (its
            // backends, counts and log lines), chosen by the name it carries;
            // one no name routed, to the listener's default rule.
            let routed = match (&route.sni, &c.flow) {
                (Some(names), Flow::Stream { .. }) if route.routes_by_name() => names
                    .choose(c.server_name.as_deref())
                    .map(|(r, _)| r.clone()),
                _ => None,
            };
            let per_client_limit = routed.as_ref().unwrap_or(&route).maxconn_per_client;
            let per_client = client.filter(|_| per_client_limit.is_some());
            let routed_limits = routed.as_ref().map(|r| &r.limits);
            let held = self
                .shared
                .limits
                .hold(&running.limits, routed_limits, per_client);
            let route = routed.unwrap_or(route);
            // Counted on that rule's counters (`routed::count`), else the listener's.
            let stats = route.stats.get().unwrap_or(&running.stats).clone();
            let (gate, go) = (gate.clone(), go.clone());
            self.threads
                .executor(at)
                .spawn(async move {
                    let _placed = placed;
                    let _held = held;
                    let _ = gate.recv().await;
                    if !go.load(Ordering::Acquire) {
                        return;
                    }
                    match backend_proto {
                        Proto::Tcp => crate::tcp::adopted(c, route, shared, stats).await,
                        Proto::Udp => {
                            let handed = crate::udp::TcpToUdp::Handed(c);
                            crate::udp::tcp_to_udp(handed, route, shared, stats).await
                        }
                    }
                })
                .detach();
        }
        ids
    }

    /// Stops every listener and waits until their sockets are closed.
    async fn close(mut self) {
        for (_, running) in self.serving.drain() {
            routed::forget(&self.shared, &running.route.load());
            self.shared.stats.remove_rule(&running.stats);
            running.stop().await;
        }
    }

    /// Has the server's DNS refresher keep `route`'s backend names fresh,
    /// updating the backends `stats` lists when their addresses change, and
    /// its prober probe them when the rule has a health check.
    fn watch_names(&self, route: &Route, stats: &Arc<RuleStats>) {
        self.shared
            .dns
            .watch(&route.pool, routed::follow_addresses(stats));
        // The rules routed by server name (`sni=`) have pools of their own,
        // whose addresses their own counters list (`routed::count`).
        for (_, r) in route.sni.iter().flat_map(|names| names.rules()) {
            if !Arc::ptr_eq(&r.pool, &route.pool) {
                let counters = r.stats.get().unwrap_or(stats);
                self.shared
                    .dns
                    .watch(&r.pool, routed::follow_addresses(counters));
            }
        }
        for pool in route.pools() {
            self.shared.probes.watch(&pool);
        }
    }

    /// Starts serving already-bound sockets, each with its route.
    fn start(&mut self, sockets: Vec<(BoundSocket, Route)>) -> io::Result<()> {
        // A line per rule helps with a few rules and drowns the log with
        // thousands: past this many, the lines go to debug.
        const RULES_LISTED: usize = 20;
        let level = if sockets.len() <= RULES_LISTED {
            log::Level::Info
        } else {
            log::Level::Debug
        };
        for (socket, route) in sockets {
            let addr = socket.bind_addr()?;
            let proto = route.bind_proto;
            let to = match &route.unix_backend {
                Some(unix) => unix.to_string(),
                None => fmt_addrs(&route.backend_addrs(), route.backend_proto),
            };
            log::log!(
                level,
                "forwarding {} -> {to} ({}:{})",
                addr.with_proto(proto),
                route.names.connect_host,
                route.names.connect_port
            );
            let base = listener_name(&addr, &route);
            let name = routed::shown(&base, route.server_name());
            let stats = self
                .shared
                .stats
                .add_rule(name, proto, &route.backend_addrs());
            routed::count(&self.shared, &base, &route, &stats, None);
            self.watch_names(&route, &stats);
            stats.set_pool(route.pool.clone());
            let route = Arc::new(ArcSwap::from_pointee(route));
            let limits = Arc::new(RuleLimits::default());
            let file = match &socket {
                BoundSocket::Unix(u) => u.bound.file.clone(),
                _ => None,
            };
            // A socket file a previous oi made (`oi upgrade`) gets this
            // configuration's `mode=` (a fresh bind has it already).
            if let (Some(file), Some(mode)) = (&file, route.load().socket_mode()) {
                if let Err(e) = file.set_mode(mode) {
                    log::warn!("cannot set the mode of {}: {e}", file.path().display());
                }
            }
            let stored = crate::sys::notify::fd_name(&addr.with_proto(proto));
            let spawned = self.spawn_loops(socket, &stored, route.clone(), &stats, limits.clone());
            let (tasks, sockets) = match spawned {
                Ok(t) => t,
                Err(e) => {
                    routed::forget(&self.shared, &route.load());
                    self.shared.stats.remove_rule(&stats);
                    return Err(e);
                }
            };
            self.serving.insert(
                (addr, proto),
                Running {
                    route,
                    tasks,
                    stats,
                    limits,
                    file,
                    sockets,
                },
            );
        }
        Ok(())
    }

    /// Spawns the loops serving `socket`: one accept loop per executor for
    /// TCP (within the duplicate budget), one datagram loop on the main
    /// executor for UDP. With a descriptor store (see
    /// [`crate::sys::notify::fd_store_enabled`]) the sockets are stored under
    /// `stored` first: every socket of a TCP listener's group (a member
    /// closed at exit would reset the connections in its queue), the UDP
    /// socket, an abstract unix socket. Not a unix socket with a file: oi
    /// removes the file when it exits, so a restart could not be reached there.
    fn spawn_loops(
        &self,
        socket: BoundSocket,
        stored: &str,
        route: Arc<ArcSwap<Route>>,
        stats: &Arc<RuleStats>,
        limits: Arc<RuleLimits>,
    ) -> io::Result<(Vec<Task<()>>, Vec<Listening>)> {
        let main = self.threads.executor(0);
        match socket {
            BoundSocket::Tcp(l) => self.spawn_tcp(l, Vec::new(), stored, route, stats, limits),
            BoundSocket::TcpGroup(g) => {
                self.spawn_tcp(g.first, g.rest, stored, route, stats, limits)
            }
            BoundSocket::Unix(socket) => {
                if matches!(socket.addr, oi_config::UnixAddr::Abstract(_)) {
                    crate::sys::notify::store_fds(stored, &[socket.bound.listener.as_fd()]);
                }
                let listener = Arc::new(Async::new(socket.bound.listener)?);
                // One accept loop: a unix socket has no SO_REUSEPORT group;
                // connections are placed on threads as TCP ones are.
                let own = self.serving.len() % self.threads.len();
                let accept = AcceptLoop {
                    acceptor: unix::UnixAcceptor {
                        listener: listener.clone(),
                        file: socket.bound.file,
                    },
                    threads: self.threads.clone(),
                    own,
                    route,
                    shared: self.shared.clone(),
                    failing: self.accept_failing.clone(),
                    stats: stats.clone(),
                    limits,
                };
                let task = self.threads.executor(own).spawn(accept.run());
                Ok((vec![task], vec![listener]))
            }
            BoundSocket::Udp(s) => {
                crate::sys::notify::store_fds(stored, &[s.as_fd()]);
                let s = Arc::new(Async::new_datagram(s)?);
                let looped = crate::udp::serve(
                    main.clone(),
                    s.clone(),
                    route,
                    self.shared.clone(),
                    stats.clone(),
                );
                Ok((vec![main.spawn(looped)], vec![s]))
            }
        }
    }

    /// Spawns a TCP listener's accept loops: one per executor within the
    /// duplicate budget, each on a socket of its own in the listener's
    /// `SO_REUSEPORT` group. `passed` are members of the group handed in
    /// with `l` (see [`Inherited`]): they are used before any sibling is
    /// made, and every one of them gets a loop, even past the thread count,
    /// since a member left unserved would hold connections nobody accepts.
    fn spawn_tcp(
        &self,
        l: std::net::TcpListener,
        passed: Vec<std::net::TcpListener>,
        stored: &str,
        route: Arc<ArcSwap<Route>>,
        stats: &Arc<RuleStats>,
        limits: Arc<RuleLimits>,
    ) -> io::Result<(Vec<Task<()>>, Vec<Listening>)> {
        let n = self.threads.len();
        let in_use: usize = self.serving.values().map(|r| r.tasks.len() - 1).sum();
        let wanted = if in_use + (n - 1) <= self.duplicate_budget {
            n
        } else {
            1
        };
        // One thread takes the shared path too: its level-triggered,
        // one-accept-per-report loop makes no failed accept4 (0.25 per
        // connection at --threads 1 with the own socket's drain to EAGAIN).
        if (wanted > 1 || n == 1) && passed.is_empty() {
            return self.spawn_shared(l, stored, route, stats, limits);
        }
        let mut fds = passed;
        // Duplicates first, so a failure (EMFILE) leaves nothing running.
        let made = wanted.saturating_sub(fds.len() + 1);
        for _ in 0..made {
            match bind::sibling(&l, route.load().listen_backlog) {
                Ok(fd) => fds.push(fd),
                // A listener owned by another user (or passed in without
                // `SO_REUSEPORT`): the kernel lets only its owner's sockets
                // join its group, so it gets one loop. `--user` hands the
                // listeners start-up bound as root to the user first
                // (`privileges::give_listeners`); this stays as the fallback.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => break,
                Err(e) => return Err(e),
            }
        }
        fds.push(l);
        let group: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
        crate::sys::notify::store_fds(stored, &group);
        drop(group);
        // One executor for a listener past the budget, in turn; else from the first.
        let first = if wanted == 1 {
            self.serving.len() % n
        } else {
            0
        };
        let failing = self.accept_failing.clone();
        let mut tasks = Vec::with_capacity(fds.len());
        let mut sockets: Vec<Listening> = Vec::with_capacity(fds.len());
        for (i, fd) in fds.into_iter().enumerate() {
            let own = (first + i) % n;
            let listener = Arc::new(Async::new(fd)?);
            sockets.push(listener.clone());
            let accept = AcceptLoop {
                acceptor: accept::TcpAcceptor {
                    listener: accept::TcpSocket::Own(listener),
                },
                threads: self.threads.clone(),
                own,
                route: route.clone(),
                shared: self.shared.clone(),
                failing: failing.clone(),
                stats: stats.clone(),
                limits: limits.clone(),
            };
            tasks.push(self.threads.executor(own).spawn(accept.run()));
        }
        Ok((tasks, sockets))
    }

    /// Spawns one accept loop per executor thread on the one socket `l`,
    /// which each thread's epoll watches with `EPOLLEXCLUSIVE`: a new
    /// connection wakes one idle thread, and a busy thread leaves the
    /// socket until it catches up (`reactor::accept`). Each thread's
    /// registration holds the socket open (no extra descriptor), so the
    /// duplicate budget counts the loops as it counted group members.
    fn spawn_shared(
        &self,
        l: std::net::TcpListener,
        stored: &str,
        route: Arc<ArcSwap<Route>>,
        stats: &Arc<RuleStats>,
        limits: Arc<RuleLimits>,
    ) -> io::Result<(Vec<Task<()>>, Vec<Listening>)> {
        crate::sys::notify::store_fds(stored, &[l.as_fd()]);
        let socket = Arc::new(l);
        let n = self.threads.len();
        let mut loops = Vec::with_capacity(n);
        // Every handle first, so a failure leaves nothing running.
        for own in 0..n {
            let listener = oi_runtime::reactor::SharedListener::new(socket.clone())?;
            loops.push(AcceptLoop {
                acceptor: accept::TcpAcceptor {
                    listener: accept::TcpSocket::Shared(listener),
                },
                threads: self.threads.clone(),
                own,
                route: route.clone(),
                shared: self.shared.clone(),
                failing: self.accept_failing.clone(),
                stats: stats.clone(),
                limits: limits.clone(),
            });
        }
        let tasks = loops
            .into_iter()
            .enumerate()
            .map(|(own, accept)| self.threads.executor(own).spawn(accept.run()))
            .collect();
        let listening: Listening = socket;
        Ok((tasks, vec![listening]))
    }

    /// See [`Command::Reload`]. Removed listeners are closed before this
    /// returns (not merely scheduled to close), so once the service manager
    /// hears READY=1 the old ports refuse.
    ///
    /// A configuration whose listeners do not fit [`listener_budget`] (the
    /// budget start-up holds), or whose new listeners run out of descriptors
    /// while binding, is refused as a whole (`Err`): nothing was changed, the
    /// new sockets are closed, and every listener serves on as before.
    /// Before, a reload from 10,000 to 30,000 ports at a limit of 20,000 took
    /// every descriptor: the kept ports forwarded 0 of 5 afterwards.
    async fn apply(
        &mut self,
        cfg: &ResolvedConfig,
        file: &str,
    ) -> Result<Vec<String>, Vec<String>> {
        let soft = nofile_soft();
        let budget = listener_budget(soft);
        if cfg.rules.len() > budget {
            return Err(vec![over_budget(file, cfg.rules.len(), soft)]);
        }
        // New sockets first, while nothing has changed: if descriptors run
        // out, dropping them is all it takes to refuse.
        let mut errors = Vec::new();
        let mut fresh = Vec::new();
        let mut kept = Vec::new();
        let mut out_of_descriptors = false;
        for (r, route) in cfg.rules.iter().zip(Route::all(cfg)) {
            let key = (r.bind.clone(), r.rule.bind.proto);
            if self.serving.contains_key(&key) {
                kept.push((key, route));
                continue;
            }
            match bind(r) {
                Ok(s) => fresh.push((s, route)),
                Err(e) => {
                    out_of_descriptors |= matches!(
                        e.raw_os_error(),
                        Some(n) if n == rustix::io::Errno::MFILE.raw_os_error()
                            || n == rustix::io::Errno::NFILE.raw_os_error()
                    );
                    errors.push(bind::bind_error(file, r, &e));
                }
            }
        }
        if out_of_descriptors {
            drop(fresh);
            errors.insert(
                0,
                format!(
                    "{file}: out of descriptors binding the new listeners (open-file limit {soft})"
                ),
            );
            return Err(errors);
        }
        let mut keep: HashMap<ListenerKey, Running> = HashMap::new();
        for (key, mut route) in kept {
            let Some(running) = self.serving.remove(&key) else {
                continue;
            };
            warn_over_limit(&running, &route);
            // A kept unix socket keeps its file: a new `mode` is
            // applied to it, as a fresh bind would.
            if let (Some(file), Some(mode)) = (&running.file, route.socket_mode()) {
                if running.route.load().socket_mode() != Some(mode) {
                    if let Err(e) = file.set_mode(mode) {
                        let addr = file.path().display();
                        errors.push(format!("cannot change the mode of {addr}: {e}"));
                    }
                }
            }
            // Backends the new file keeps keep their health and load, rules
            // routed by server name their connection counts.
            route.keep_state_of(&running.route.load());
            route.keep_counts_of(&running.route.load());
            running.stats.set_backends(&route.backend_addrs());
            let base = listener_name(&key.0, &route);
            let old = running.route.load();
            routed::count(&self.shared, &base, &route, &running.stats, Some(&**old));
            drop(old);
            self.watch_names(&route, &running.stats);
            running.stats.set_pool(route.pool.clone());
            running.route.store(Arc::new(route));
            keep.insert(key, running);
        }
        let removed = std::mem::replace(&mut self.serving, keep);
        for (key, running) in removed {
            for pool in running.route.load().pools() {
                pool.retire();
            }
            routed::forget(&self.shared, &running.route.load());
            self.shared.stats.remove_rule(&running.stats);
            running.stop().await;
            let name = key.0.with_proto(key.1);
            crate::sys::notify::remove_stored(&crate::sys::notify::fd_name(&name));
            log::info!("stopped listening on {name}");
        }
        if let Err(e) = self.start(fresh) {
            errors.push(format!("cannot start a listener: {e}"));
        }
        self.share_descriptors_with_udp();
        Ok(errors)
    }

    /// Sets how many associations each `/udp` listener may hold so that all
    /// of them together stay within their share of the descriptor limit
    /// (see [`udp_assoc_share`]), and says so when that is below a rule's
    /// `maxassoc`: at start-up, then only when a reload changes the value.
    fn share_descriptors_with_udp(&mut self) {
        let udp: Vec<usize> = self
            .serving
            .iter()
            .filter(|((_, proto), _)| *proto == Proto::Udp)
            .map(|(_, r)| r.route.load().max_assoc())
            .collect();
        // Each loop owns one descriptor of its listener.
        let listener_fds = self.serving.values().map(|r| r.tasks.len()).sum();
        let soft = nofile_soft();
        let cap = udp_assoc_share(soft, listener_fds, udp.len());
        self.shared.set_udp_association_cap(cap);
        let wanted = udp.iter().copied().max().unwrap_or(0);
        let key = (udp.len(), soft);
        if wanted > cap && self.udp_cap_logged != Some(key) {
            log::warn!(
                "UDP associations limited to {cap} per /udp listener ({} listener(s); \
                 maxassoc asks up to {wanted}): together they may use half of the \
                 open-file limit ({}), so TCP keeps descriptors; raise LimitNOFILE for more",
                udp.len(),
                soft
            );
            self.udp_cap_logged = Some(key);
        } else if wanted <= cap {
            self.udp_cap_logged = None;
        }
    }
}

/// Says so when a reload lowers a kept rule's `maxconn` below the
/// connections it has open: they stay, and new ones are refused until enough end.
fn warn_over_limit(running: &Running, route: &Route) {
    let open = running.limits.open();
    if let Some(max) = route.maxconn.filter(|&max| open > max) {
        log::info!(
            "{}: {open} connections open, above the new maxconn {max}; \
             they stay open, new ones are refused until fewer than {max} remain",
            route.bind.with_proto(route.bind_proto)
        );
    }
}

/// The soft open-file limit (RLIMIT_NOFILE), or `u64::MAX` if unlimited.
fn nofile_soft() -> u64 {
    use rustix::process::{getrlimit, Resource};
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Associations each of `udp_listeners` `/udp` listeners may hold: every
/// association holds one descriptor (its connected UDP socket or its TCP
/// connection), and all of them together may use half the soft limit, less
/// what the listeners hold, so TCP connections keep the other half. Measured
/// before this cap: at `LimitNOFILE=1024` one UDP rule at the default
/// `maxassoc` (10,000) took every descriptor and a TCP rule beside it served 0
/// of 20 connections. At least one, so a listener still serves.
fn udp_assoc_share(soft: u64, listener_fds: usize, udp_listeners: usize) -> usize {
    let half = usize::try_from(soft / 2).unwrap_or(usize::MAX);
    let share = half.saturating_sub(listener_fds) / udp_listeners.max(1);
    share.max(1)
}

/// Listeners (one descriptor each, before duplicates) a configuration may
/// have, at start-up and on reload: half the open-file soft limit, so
/// connections keep the other half. A start-up or a reload past it is
/// refused as a whole.
pub(crate) fn listener_budget(soft: u64) -> usize {
    usize::try_from(soft / 2).unwrap_or(usize::MAX)
}

/// The message for a configuration of `n` listeners past [`listener_budget`].
pub(crate) fn over_budget(file: &str, n: usize, soft: u64) -> String {
    format!(
        "{file}: {n} listeners do not fit the descriptor budget of {} (half the \
         open-file limit {soft}; the other half is kept for connections): raise \
         LimitNOFILE or forward fewer ports",
        listener_budget(soft)
    )
}

/// Most rules (one listener each) [`check_budget`] passes under the
/// current open-file limit.
pub(crate) fn rules_budget() -> usize {
    listener_budget(nofile_soft())
}

/// Checks a configuration of `n` listeners against [`listener_budget`] at
/// the current soft limit (start-up, after raising it).
pub(crate) fn check_budget(file: &str, n: usize) -> Result<(), String> {
    let soft = nofile_soft();
    if n > listener_budget(soft) {
        return Err(over_budget(file, n, soft));
    }
    Ok(())
}

/// Duplicated listening descriptors the server may hold: a sixteenth of the
/// open-file soft limit, at most 1024, so listeners never crowd out connections.
fn duplicate_budget() -> usize {
    usize::try_from(nofile_soft() / 16)
        .unwrap_or(usize::MAX)
        .min(1024)
}

/// The name of the listener at `addr` serving `route` (see [`rule_name`]);
/// its rules routed by server name add `[sni=NAME]` ([`routed::shown`]).
fn listener_name(addr: &BindAddr, route: &Route) -> String {
    match addr {
        BindAddr::Ip(a) => rule_name(&route.names.bind_host, a.port(), route.bind_proto),
        BindAddr::Unix(u) => u.to_string(),
    }
}

/// A rule's name in the status file, metrics and `oi connections`:
/// `host:port/proto` with the host as configured (bracketed when it is an
/// IPv6 literal) and the port actually bound.
fn rule_name(host: &str, port: u16, proto: Proto) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}/{proto}")
    } else {
        format!("{host}:{port}/{proto}")
    }
}

/// Formats backend addresses for the startup line.
fn fmt_addrs(addrs: &[SocketAddr], proto: Proto) -> String {
    let list: Vec<String> = addrs.iter().map(|a| format!("{a}/{proto}")).collect();
    list.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logfile::LogHandle;
    use crate::route::shared::Settings;
    use oi_config::{AclRules, ResolvedConfig, ResolvedRule};
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::num::NonZeroUsize;
    use std::time::Duration;

    /// An echo backend on loopback port 0, one thread per connection.
    fn echo_backend() -> SocketAddr {
        let backend = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        let addr = backend.local_addr().expect("backend addr");
        std::thread::spawn(move || {
            for c in backend.incoming().flatten() {
                std::thread::spawn(move || {
                    let (mut r, mut w) = (&c, &c);
                    let _ = std::io::copy(&mut r, &mut w);
                });
            }
        });
        addr
    }

    /// A runtime of two executor threads, as on the 2-core machine.
    fn two_threads() -> Arc<Runtime> {
        Arc::new(Runtime::start(NonZeroUsize::MIN.saturating_add(1)).expect("rt"))
    }

    #[test]
    fn listeners_past_the_descriptor_budget_get_one_accept_loop_and_still_serve() {
        let backend_addr = echo_backend();
        let runtime = two_threads();
        let shared = Shared::new(Settings::default(), LogHandle::disabled());
        let mut listeners = Listeners {
            threads: runtime.threads().clone(),
            // Room for one listener's duplicate only.
            duplicate_budget: 1,
            shared,
            serving: HashMap::new(),
            udp_cap_logged: None,
            accept_failing: Arc::default(),
        };
        let mut sockets = Vec::new();
        let mut addrs = Vec::new();
        for _ in 0..3 {
            let bind_at: SocketAddr = "127.0.0.1:0".parse().expect("literal");
            let r = ResolvedRule::between(bind_at, Proto::Tcp, backend_addr, Proto::Tcp);
            let s = bind(&r).expect("bind listener");
            addrs.push(s.local_addr().expect("listener addr"));
            sockets.push((s, Route::new(r, Arc::new(AclRules::default()))));
        }
        listeners.start(sockets).expect("start");
        let mut loops: Vec<usize> = listeners.serving.values().map(|r| r.tasks.len()).collect();
        loops.sort();
        assert_eq!(loops, [1, 1, 2], "one listener duplicated, two not");
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let main = {
            let runtime = runtime.clone();
            std::thread::spawn(move || {
                runtime.block_on(async move {
                    let _ = stopped.recv().await;
                    listeners.close().await;
                })
            })
        };
        for addr in addrs {
            let mut c = std::net::TcpStream::connect(addr).expect("connect");
            c.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            c.write_all(b"ping").expect("write");
            let mut b = [0u8; 4];
            c.read_exact(&mut b).expect("echo through every listener");
            assert_eq!(&b, b"ping");
        }
        stop.close();
        main.join().expect("main thread");
    }

    /// What the reload test asks of the serving thread.
    enum Step {
        /// Apply this configuration, then give the kept route `maxconn=1`
        /// again (as the configuration will once it can say so), and report
        /// the rule's counts: (open, refused).
        Reload(ResolvedConfig, async_channel::Sender<(usize, u64)>),
    }

    #[test]
    fn a_reload_that_keeps_a_rule_keeps_its_connection_count() {
        let backend_addr = echo_backend();
        let runtime = two_threads();
        let shared = Shared::new(Settings::default(), LogHandle::disabled());
        let mut listeners = Listeners {
            threads: runtime.threads().clone(),
            duplicate_budget: 64,
            shared: shared.clone(),
            serving: HashMap::new(),
            udp_cap_logged: None,
            accept_failing: Arc::default(),
        };
        let bind_at: SocketAddr = "127.0.0.1:0".parse().expect("literal");
        let mut r = ResolvedRule::between(bind_at, Proto::Tcp, backend_addr, Proto::Tcp);
        let s = bind(&r).expect("bind listener");
        let addr = s.local_addr().expect("listener addr");
        r.bind = BindAddr::Ip(addr);
        let limited = |r: &ResolvedRule| {
            Route::new(r.clone(), Arc::new(AclRules::default())).with_limits(Some(1), None)
        };
        listeners.start(vec![(s, limited(&r))]).expect("start");
        let (steps, next) = async_channel::bounded::<Step>(1);
        let main = {
            let runtime = runtime.clone();
            let r = r.clone();
            std::thread::spawn(move || {
                runtime.block_on(async move {
                    while let Ok(Step::Reload(cfg, done)) = next.recv().await {
                        let errors = listeners.apply(&cfg, "test.conf").await;
                        assert_eq!(errors, Ok(Vec::new()));
                        let running = &listeners.serving[&(BindAddr::Ip(addr), Proto::Tcp)];
                        running.route.store(Arc::new(limited(&r)));
                        let counts = (running.limits.open(), running.limits.refused());
                        let _ = done.send(counts).await;
                    }
                    listeners.close().await;
                })
            })
        };
        let echo = |c: &mut std::net::TcpStream| -> bool {
            c.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut b = [0u8; 4];
            c.write_all(b"ping").is_ok() && c.read_exact(&mut b).is_ok() && &b == b"ping"
        };
        let mut held = std::net::TcpStream::connect(addr).expect("connect");
        assert!(echo(&mut held), "first connection within maxconn=1");
        let mut over = std::net::TcpStream::connect(addr).expect("connect");
        assert!(!echo(&mut over), "second refused before the reload");

        let cfg = ResolvedConfig {
            config: Default::default(),
            rules: vec![r.clone()],
        };
        let (done, report) = async_channel::bounded(1);
        steps
            .send_blocking(Step::Reload(cfg, done))
            .expect("reload");
        let (open, refused) = report.recv_blocking().expect("reloaded");
        assert_eq!((open, refused), (1, 1), "the kept listener kept its counts");

        let mut after = std::net::TcpStream::connect(addr).expect("connect");
        assert!(
            !echo(&mut after),
            "the open connection still counts after the reload"
        );
        drop(held);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while shared.limited_connections_open() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut fresh = std::net::TcpStream::connect(addr).expect("connect");
        assert!(echo(&mut fresh), "released when the connection ended");
        drop(fresh);
        steps.close();
        main.join().expect("main thread");
        assert_eq!(shared.connections_refused_by_limits(), 2);
    }

    #[test]
    fn udp_listeners_share_half_the_descriptor_limit() {
        // 1,024 descriptors, 3 held by listeners, one UDP listener: 509.
        assert_eq!(udp_assoc_share(1024, 3, 1), 509);
        assert_eq!(udp_assoc_share(1024, 3, 2), 254);
        // Nothing left still lets each listener serve one client.
        assert_eq!(udp_assoc_share(4, 10, 3), 1);
        assert_eq!(udp_assoc_share(u64::MAX, 0, 0), usize::MAX / 2);
    }
}
