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
mod adopt;
mod bind;
mod budget;
mod driver;
mod inherit;
mod routed;
mod spawn;
#[cfg(test)]
mod tests;
mod unix;

pub use bind::{bind, BoundSocket, TcpGroup, UnixSocket};
pub(crate) use budget::{check_budget, listener_budget, over_budget, rules_budget};
use budget::{duplicate_budget, nofile_soft};
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
    /// How many listeners serve: the answer to a previous oi's health
    /// question comes through this loop, so it proves the loop runs.
    Serving {
        /// Receives the count.
        reply: Sender<usize>,
    },
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
                Command::Serving { reply } => {
                    let _ = reply.send(listeners.serving.len()).await;
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
            stats.set_tls(route.tls_shown.clone());
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
            running.stats.set_tls(route.tls_shown.clone());
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
            log::info!(rule:% = name; "stopped listening on {name}");
        }
        if let Err(e) = self.start(fresh) {
            errors.push(format!("cannot start a listener: {e}"));
        }
        self.share_descriptors_with_udp();
        Ok(errors)
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
