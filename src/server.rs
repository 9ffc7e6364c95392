//! Listeners, accept loops and per-connection tasks, plus the reload diff.
//!
//! The server never binds by itself on the hot path: [`bind_all`] turns rules
//! into bound sockets (so startup can fail cleanly before serving) and
//! [`Server::start`] takes sockets that are already bound, which is what lets
//! tests run a server on port 0 in-process.

use crate::acl::{self, Verdict};
use crate::config::{AclRules, Proto, ResolvedConfig, ResolvedRule, SpliceMode};
use crate::connect::{self, ConnectError};
use crate::logfile::{Event, LogEvent, LogHandle, RuleNames};
use crate::pipe::PipePool;
use crate::pool::BufferPool;
use crate::pump::{Pools, Pump, Side};
use crate::spread::{Placed, Threads};
use arc_swap::ArcSwap;
use async_io::{Async, Timer};
use smol::{Executor, Task};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Engine settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Size of each copy buffer (`--buffer-size`).
    pub buffer_size: usize,
    /// Per-address backend connect timeout (`--connect-timeout`).
    pub connect_timeout: Duration,
    /// Idle limit for half-closed connections (`--half-close-timeout`).
    pub half_close_idle: Duration,
    /// Whether connections splice (`--splice`); a rule's `[splice=...]` overrides it.
    pub splice: SpliceMode,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            buffer_size: 64 * 1024,
            connect_timeout: Duration::from_secs(10),
            half_close_idle: Duration::from_secs(60),
            splice: SpliceMode::Auto,
        }
    }
}

/// State shared by every listener and connection of one server.
pub struct Shared {
    /// Command-line settings.
    pub settings: Settings,
    /// Copy buffers, recycled between connections.
    pub pool: BufferPool,
    /// Pipes for splice, recycled between connections.
    pub pipes: PipePool,
    /// Where rinetd log events go.
    pub log: LogHandle,
}

impl Shared {
    /// Shared state for a server with these settings and log.
    pub fn new(settings: Settings, log: LogHandle) -> Arc<Self> {
        let pool = BufferPool::new(settings.buffer_size, 1024);
        let pipes = PipePool::new(
            crate::splice::pipe_size(settings.buffer_size),
            crate::splice::PIPES_KEPT,
        );
        Arc::new(Shared {
            settings,
            pool,
            pipes,
            log,
        })
    }
}

/// Everything a new connection on one listener needs; replaced whole on reload.
pub struct Route {
    /// The rule with its resolved addresses.
    pub rule: ResolvedRule,
    /// The configuration's global allow/deny patterns.
    pub global_acl: Arc<AclRules>,
    /// The rule's names as the log file prints them.
    pub names: Arc<RuleNames>,
}

impl Route {
    /// The route for `rule` under `global_acl`.
    pub fn new(rule: ResolvedRule, global_acl: Arc<AclRules>) -> Self {
        let names = Arc::new(RuleNames {
            bind_host: rule.rule.bind.host_text.clone(),
            bind_port: rule.bind.port(),
            connect_host: rule.rule.connect.host_text.clone(),
            connect_port: rule.connect.first().map_or(0, |a| a.port()),
        });
        Route {
            rule,
            global_acl,
            names,
        }
    }
}

/// A socket bound for one rule, not yet serving.
pub enum BoundSocket {
    /// A listening TCP socket.
    Tcp(TcpListener),
    /// A bound UDP socket.
    Udp(UdpSocket),
}

impl BoundSocket {
    /// The address the socket is bound to (with the real port when bound to 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            BoundSocket::Tcp(l) => l.local_addr(),
            BoundSocket::Udp(s) => s.local_addr(),
        }
    }
}

/// Identifies a listener across reloads: same address, port and protocol means same socket.
pub type ListenerKey = (SocketAddr, Proto);

/// Binds one rule's listening socket.
pub fn bind(rule: &ResolvedRule) -> io::Result<BoundSocket> {
    use socket2::{Domain, Socket, Type};
    let addr = rule.bind;
    let domain = Domain::for_address(addr);
    match rule.rule.bind.proto {
        Proto::Tcp => {
            let s = Socket::new(domain, Type::STREAM.cloexec(), None)?;
            // Restarting must not fail while old connections sit in TIME_WAIT.
            s.set_reuse_address(true)?;
            s.bind(&addr.into())?;
            s.listen(1024)?;
            s.set_nonblocking(true)?;
            Ok(BoundSocket::Tcp(s.into()))
        }
        Proto::Udp => {
            let s = Socket::new(domain, Type::DGRAM.cloexec(), None)?;
            s.bind(&addr.into())?;
            s.set_nonblocking(true)?;
            Ok(BoundSocket::Udp(s.into()))
        }
    }
}

/// Binds every rule; on failure returns one message per rule that failed, naming its line.
pub fn bind_all(cfg: &ResolvedConfig, file: &str) -> Result<Vec<BoundSocket>, Vec<String>> {
    let mut bound = Vec::new();
    let mut errors = Vec::new();
    for r in &cfg.rules {
        match bind(r) {
            Ok(s) => bound.push(s),
            Err(e) => errors.push(format!(
                "{file}:{}: cannot bind {}/{}: {e}",
                r.rule.line, r.bind, r.rule.bind.proto
            )),
        }
    }
    if errors.is_empty() {
        Ok(bound)
    } else {
        Err(errors)
    }
}

/// One serving listener.
struct Running {
    /// The route new connections take; reload swaps it in place.
    route: Arc<ArcSwap<Route>>,
    /// The accept loops (one per executor) or the datagram loop; each owns a
    /// descriptor of the socket, so cancelling them all closes the socket.
    tasks: Vec<Task<()>>,
}

/// A running server: its listeners, keyed so a reload can tell what changed.
///
/// Threading model: each executor is meant to be run by exactly one thread.
/// Every executor runs its own accept loop on each TCP listener (on a
/// duplicate of the listening descriptor, so they share one accept queue) and
/// spawns the connections it accepts on itself. A connection's task therefore
/// never moves between threads, and waking it never has to wake another
/// thread; a shared multi-threaded executor woke the other thread on nearly
/// every message (README, Performance). The first executor also runs the UDP
/// listeners.
///
/// Duplicated descriptors are budgeted (see [`duplicate_budget`]): a
/// configuration with thousands of rules must not run out of descriptors.
/// Past the budget a TCP listener gets one accept loop, on the executors in
/// turn. Either way an accept loop hands a new connection to a less busy
/// thread when its own runs too many more (see [`crate::spread`]).
pub struct Server {
    /// Executor threads the loops and connections run on, with their connection counts.
    threads: Arc<Threads>,
    /// How many duplicated listening descriptors all listeners together may hold.
    duplicate_budget: usize,
    /// State shared with every task.
    shared: Arc<Shared>,
    /// Serving listeners.
    listeners: HashMap<ListenerKey, Running>,
}

impl Server {
    /// An empty server on `executors` (each run by its own thread; see
    /// [`Server`]). An empty list is treated as a mistake and rejected.
    pub fn new(executors: Vec<Arc<Executor<'static>>>, shared: Arc<Shared>) -> io::Result<Self> {
        let threads = Threads::new(executors).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a server needs at least one executor",
            )
        })?;
        Ok(Server {
            threads,
            duplicate_budget: duplicate_budget(),
            shared,
            listeners: HashMap::new(),
        })
    }

    /// The executor threads and how many connections each runs.
    pub fn threads(&self) -> &Arc<Threads> {
        &self.threads
    }

    /// State shared with connections (counters, log).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops every listener and waits until their sockets are closed; open
    /// connections carry on (they are separate tasks).
    pub async fn close(mut self) {
        for (_, running) in self.listeners.drain() {
            running.stop().await;
        }
    }

    /// Starts serving already-bound sockets, each with its route.
    pub fn start(&mut self, sockets: Vec<(BoundSocket, Route)>) -> io::Result<()> {
        for (socket, route) in sockets {
            let addr = socket.local_addr()?;
            let proto = route.rule.rule.bind.proto;
            log::info!(
                "forwarding {addr}/{proto} -> {} ({}:{})",
                fmt_addrs(&route.rule.connect, route.rule.rule.connect.proto),
                route.names.connect_host,
                route.names.connect_port
            );
            let route = Arc::new(ArcSwap::from_pointee(route));
            let tasks = self.spawn_listener(socket, route.clone())?;
            self.listeners
                .insert((addr, proto), Running { route, tasks });
        }
        Ok(())
    }

    /// Spawns the loops serving `socket`: one accept loop per executor for
    /// TCP, one datagram loop on the main executor for UDP.
    fn spawn_listener(
        &self,
        socket: BoundSocket,
        route: Arc<ArcSwap<Route>>,
    ) -> io::Result<Vec<Task<()>>> {
        let main = self.threads.executor(0);
        match socket {
            BoundSocket::Tcp(l) => {
                let n = self.threads.len();
                let in_use: usize = self.listeners.values().map(|r| r.tasks.len() - 1).sum();
                let executors: Vec<usize> = if in_use + (n - 1) <= self.duplicate_budget {
                    (0..n).collect()
                } else {
                    vec![self.listeners.len() % n]
                };
                // Duplicates first, so a failure (EMFILE) leaves nothing running.
                let mut fds = Vec::with_capacity(executors.len());
                for _ in 1..executors.len() {
                    fds.push(l.try_clone()?);
                }
                fds.push(l);
                let burst = Arc::new(AtomicBool::new(false));
                let mut tasks = Vec::with_capacity(fds.len());
                for (own, fd) in executors.into_iter().zip(fds) {
                    let l = Async::new(fd)?;
                    let (route, shared) = (route.clone(), self.shared.clone());
                    let threads = self.threads.clone();
                    let looped = accept_loop(threads, own, l, route, shared, burst.clone());
                    tasks.push(self.threads.executor(own).spawn(looped));
                }
                Ok(tasks)
            }
            BoundSocket::Udp(s) => {
                let s = Async::new(s)?;
                let looped = crate::udp::serve(main.clone(), s, route, self.shared.clone());
                Ok(vec![main.spawn(looped)])
            }
        }
    }

    /// Applies a new configuration: unchanged listeners keep their sockets and get
    /// the new route; removed ones close; new ones are bound. Open connections are
    /// untouched. Returns a message per listener that could not be bound.
    ///
    /// Removed listeners are closed before this returns (not merely scheduled to
    /// close), so once the service manager hears READY=1 the old ports refuse.
    pub async fn apply(&mut self, cfg: &ResolvedConfig, file: &str) -> Vec<String> {
        let global = Arc::new(cfg.config.global_acl.clone());
        let mut keep: HashMap<ListenerKey, Running> = HashMap::new();
        let mut errors = Vec::new();
        let mut fresh = Vec::new();
        for r in &cfg.rules {
            let key = (r.bind, r.rule.bind.proto);
            let route = Route::new(r.clone(), global.clone());
            match self.listeners.remove(&key) {
                Some(running) => {
                    running.route.store(Arc::new(route));
                    keep.insert(key, running);
                }
                None => match bind(r) {
                    Ok(s) => fresh.push((s, route)),
                    Err(e) => errors.push(format!(
                        "{file}:{}: cannot bind {}/{}: {e}",
                        r.rule.line, r.bind, r.rule.bind.proto
                    )),
                },
            }
        }
        let removed = std::mem::replace(&mut self.listeners, keep);
        for (key, running) in removed {
            running.stop().await;
            log::info!("stopped listening on {}/{}", key.0, key.1);
        }
        if let Err(e) = self.start(fresh) {
            errors.push(format!("cannot start a listener: {e}"));
        }
        errors
    }
}

/// Duplicated listening descriptors the server may hold: a sixteenth of the
/// open-file soft limit, at most 1024, so listeners never crowd out connections.
fn duplicate_budget() -> usize {
    use rustix::process::{getrlimit, Resource};
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    usize::try_from(soft / 16).unwrap_or(usize::MAX).min(1024)
}

impl Running {
    /// Cancels every loop and waits until each has dropped its descriptor.
    async fn stop(self) {
        for task in self.tasks {
            task.cancel().await;
        }
    }
}

/// Formats backend addresses for the startup line.
fn fmt_addrs(addrs: &[SocketAddr], proto: Proto) -> String {
    let list: Vec<String> = addrs.iter().map(|a| format!("{a}/{proto}")).collect();
    list.join(", ")
}

/// The client address as rinetd prints and matches it: IPv4-mapped IPv6 shown as IPv4.
pub fn client_ip(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Accepts connections forever and runs each on `own`, the executor this loop
/// runs on, unless that thread is too busy (see [`Threads::pick`]); errors
/// back off and never end the loop. `burst` is shared by the listener's
/// accept loops and is set while accepting fails.
async fn accept_loop(
    threads: Arc<Threads>,
    own: usize,
    listener: Async<TcpListener>,
    route: Arc<ArcSwap<Route>>,
    shared: Arc<Shared>,
    burst: Arc<AtomicBool>,
) {
    const MIN_BACKOFF: Duration = Duration::from_millis(5);
    const MAX_BACKOFF: Duration = Duration::from_secs(1);
    let mut backoff = MIN_BACKOFF;
    let mut failing = false;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if failing {
                    failing = false;
                    backoff = MIN_BACKOFF;
                }
                if burst.load(Ordering::Relaxed) && burst.swap(false, Ordering::Relaxed) {
                    log::warn!("accepting connections again");
                }
                let route = route.load_full();
                let at = threads.pick(own);
                let placed = threads.place(at);
                threads
                    .executor(at)
                    .spawn(handle(stream, peer, route, shared.clone(), placed))
                    .detach();
            }
            // The client gave up between SYN and accept: nothing to report.
            Err(e) if is_benign_accept_error(&e) => {}
            Err(e) => {
                failing = true;
                // Once per burst and listener (not per accept loop): a
                // descriptor shortage would otherwise flood the logs.
                if !burst.swap(true, Ordering::Relaxed) {
                    log::error!("accept failed, backing off: {e}");
                    let names = route.load().names.clone();
                    shared.log.log(LogEvent {
                        time: SystemTime::now(),
                        client: IpAddr::from([0, 0, 0, 0]),
                        rule: names,
                        from_client: 0,
                        to_client: 0,
                        event: Event::AcceptFailed,
                    });
                }
                Timer::after(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Accept errors that concern one aborted connection, not the listener.
fn is_benign_accept_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves one accepted TCP connection from ACL check to the last log line.
async fn handle(
    client: Async<TcpStream>,
    peer: SocketAddr,
    route: Arc<Route>,
    shared: Arc<Shared>,
    placed: Placed,
) {
    // Counts the connection (for its thread, `--drain` and tests) until every
    // socket is closed: rebinding the client here makes it drop before the
    // guard, as locals drop in reverse order and before parameters.
    let _placed = placed;
    let client = client;
    let ip = client_ip(peer);
    let event = |event, from_client, to_client| LogEvent {
        time: SystemTime::now(),
        client: ip,
        rule: route.names.clone(),
        from_client,
        to_client,
        event,
    };
    match acl::check(&route.global_acl, &route.rule.rule.acl, ip) {
        Verdict::Allowed => {}
        Verdict::NotAllowed => {
            log::debug!("{peer}: not allowed on {}", route.rule.bind);
            return shared.log.log(event(Event::NotAllowed, 0, 0));
        }
        Verdict::Denied => {
            log::debug!("{peer}: denied on {}", route.rule.bind);
            return shared.log.log(event(Event::Denied, 0, 0));
        }
    }
    if route.rule.rule.connect.proto == Proto::Udp {
        return crate::udp::tcp_to_udp(client, peer, route, shared).await;
    }
    shared.log.log(event(Event::Opened, 0, 0));
    let timeout = shared.settings.connect_timeout;
    let backend = match connect::connect(&route.rule.connect, route.rule.src, timeout).await {
        Ok(b) => b,
        Err(e) => {
            log::debug!("{peer} -> {}: {e}", route.names.connect_host);
            let ev = match e {
                ConnectError::LocalSocket(_) => Event::LocalSocketFailed,
                // rinetd logs a refused or unreachable backend this way; parsers count on it.
                ConnectError::Connect(_) => Event::DoneLocalClosed,
            };
            return shared.log.log(event(ev, 0, 0));
        }
    };
    connect::tune(client.get_ref());
    connect::tune(backend.get_ref());
    let pools = Pools {
        buffers: &shared.pool,
        pipes: &shared.pipes,
    };
    let splice = crate::splice::use_splice(route.rule.rule.options.splice, shared.settings.splice);
    let outcome = Pump::new(
        &client,
        &backend,
        pools,
        splice,
        shared.settings.half_close_idle,
    )
    .await;
    if let Some(e) = &outcome.error {
        log::debug!("{peer}: connection ended: {e}");
    }
    let ev = match outcome.first_closed {
        Side::Backend => Event::DoneLocalClosed,
        Side::Client => Event::DoneRemoteClosed,
    };
    shared
        .log
        .log(event(ev, outcome.from_client, outcome.to_client));
}

/// Serves already-bound sockets until `shutdown` completes, then closes the
/// listeners (open connections are left to finish on the executor).
/// This is the entry point tests use: bind on port 0, read the address back,
/// and pass the sockets in.
pub async fn serve(
    executors: Vec<Arc<Executor<'static>>>,
    shared: Arc<Shared>,
    sockets: Vec<(BoundSocket, Route)>,
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    let mut server = Server::new(executors, shared)?;
    server.start(sockets)?;
    shutdown.await;
    server.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A TCP rule from 127.0.0.1:0 to `backend`.
    fn rule_to(backend: SocketAddr) -> ResolvedRule {
        let bind: SocketAddr = "127.0.0.1:0".parse().expect("literal");
        ResolvedRule::between(bind, Proto::Tcp, backend, Proto::Tcp)
    }

    #[test]
    fn listeners_past_the_descriptor_budget_get_one_accept_loop_and_still_serve() {
        let backend = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        let backend_addr = backend.local_addr().expect("backend addr");
        std::thread::spawn(move || {
            for c in backend.incoming().flatten() {
                std::thread::spawn(move || {
                    let (mut r, mut w) = (&c, &c);
                    let _ = std::io::copy(&mut r, &mut w);
                });
            }
        });
        let executors: Vec<Arc<Executor<'static>>> =
            (0..2).map(|_| Arc::new(Executor::new())).collect();
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let threads: Vec<_> = executors
            .iter()
            .map(|ex| {
                let (ex, stopped) = (ex.clone(), stopped.clone());
                std::thread::spawn(move || smol::block_on(ex.run(stopped.recv())))
            })
            .collect();
        let shared = Shared::new(Settings::default(), LogHandle::disabled());
        let mut server = Server::new(executors, shared).expect("server");
        // Room for one listener's duplicate only.
        server.duplicate_budget = 1;
        let mut sockets = Vec::new();
        let mut addrs = Vec::new();
        for _ in 0..3 {
            let r = rule_to(backend_addr);
            let s = bind(&r).expect("bind listener");
            addrs.push(s.local_addr().expect("listener addr"));
            sockets.push((s, Route::new(r, Arc::new(AclRules::default()))));
        }
        server.start(sockets).expect("start");
        let mut loops: Vec<usize> = server.listeners.values().map(|r| r.tasks.len()).collect();
        loops.sort();
        assert_eq!(loops, [1, 1, 2], "one listener duplicated, two not");
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
        for t in threads {
            let _ = t.join();
        }
    }
}
