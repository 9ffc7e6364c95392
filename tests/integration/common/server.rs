//! An in-process oi server, started through `oxidinetd::serve` as the binary
//! starts it, on two executor threads, with listeners bound to port 0.

use async_channel::Sender;
use oxidinetd::config::{AclRules, Port, Proto, ResolvedRule, SpliceMode};
use oxidinetd::{BoundSocket, Command, LogHandle, Route, Runtime, Settings, Shared};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::thread::JoinHandle;

/// A running in-process server; stops when dropped.
pub struct TestServer {
    /// Where each rule listens, in the order given.
    pub addrs: Vec<SocketAddr>,
    /// The server's shared state (pools, log).
    pub shared: Arc<Shared>,
    /// The executor threads with their connection counts.
    pub runtime: Arc<Runtime>,
    /// Closing this stops the listeners.
    commands: Sender<Command>,
    /// The thread running executor 0 and the server future.
    main: Option<JoinHandle<()>>,
}

impl TestServer {
    /// The first listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Open TCP connections on every executor thread together.
    pub fn open_connections(&self) -> usize {
        self.runtime.open_connections()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.commands.close();
        if let Some(main) = self.main.take() {
            let _ = main.join();
        }
    }
}

/// A rule forwarding `bind` (its port only matters for the log) to `connect`.
pub fn rule(
    bind: SocketAddr,
    bind_proto: Proto,
    connect: SocketAddr,
    connect_proto: Proto,
) -> ResolvedRule {
    ResolvedRule::between(bind, bind_proto, connect, connect_proto)
}

/// Loopback port 0 in `backend`'s address family: where a test listener binds.
pub fn loopback_for(backend: SocketAddr) -> SocketAddr {
    let ip: std::net::IpAddr = if backend.is_ipv4() {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv6Addr::LOCALHOST.into()
    };
    SocketAddr::new(ip, 0)
}

/// A TCP forwarding rule from loopback port 0 (the backend's family) to `backend`.
pub fn tcp_rule(backend: SocketAddr) -> ResolvedRule {
    rule(loopback_for(backend), Proto::Tcp, backend, Proto::Tcp)
}

/// A `/udp` listener rule on loopback port 0 (the backend's family) to `backend`.
pub fn udp_rule(backend: SocketAddr, connect_proto: Proto) -> ResolvedRule {
    rule(loopback_for(backend), Proto::Udp, backend, connect_proto)
}

/// Starts a server on two executor threads. Each rule's listener is bound to its
/// `bind` address (use port 0); the real addresses are in `TestServer::addrs`.
pub fn start(rules: Vec<ResolvedRule>, settings: Settings, log: LogHandle) -> TestServer {
    start_acl(rules, AclRules::default(), settings, log)
}

/// A server forwarding to `backend` with `--splice` set to `mode`.
pub fn splice_server(mode: SpliceMode, backend: SocketAddr) -> TestServer {
    let settings = Settings {
        splice: mode,
        ..Settings::default()
    };
    start(vec![tcp_rule(backend)], settings, LogHandle::disabled())
}

/// Like `start`, with global allow/deny patterns.
pub fn start_acl(
    rules: Vec<ResolvedRule>,
    global: AclRules,
    settings: Settings,
    log: LogHandle,
) -> TestServer {
    start_edited(rules, global, settings, log, |_, route| route)
}

/// Like `start_acl`, with each rule's route passed through `edit` (its index
/// and the route) before serving: for the route settings that tests set
/// directly (PROXY protocol, connection limits).
pub fn start_edited(
    rules: Vec<ResolvedRule>,
    global: AclRules,
    settings: Settings,
    log: LogHandle,
    edit: impl Fn(usize, Route) -> Route,
) -> TestServer {
    let shared = Shared::new(settings, log);
    let mut sockets = Vec::new();
    let mut addrs = Vec::new();
    let global = Arc::new(global);
    for mut r in rules {
        let s = oxidinetd::bind(&r).expect("bind test listener");
        let addr = s.local_addr().expect("local addr");
        // As if the configuration had named the port the kernel picked.
        r.bind = oxidinetd::config::BindAddr::Ip(addr);
        r.rule.bind.port = Port::Number(addr.port());
        addrs.push(addr);
        let route = edit(sockets.len(), Route::new(r, global.clone()));
        sockets.push((s, route));
    }
    start_sockets(sockets, addrs, shared)
}

/// Starts a server on already-bound sockets with routes.
pub fn start_sockets(
    sockets: Vec<(BoundSocket, Route)>,
    addrs: Vec<SocketAddr>,
    shared: Arc<Shared>,
) -> TestServer {
    // Two threads, each running its own executor, as oi runs them on two cores.
    let threads = NonZeroUsize::new(2).expect("two");
    let runtime = Arc::new(Runtime::start(threads).expect("runtime"));
    let (commands, received) = async_channel::bounded(1);
    // Every listener's loops run (descriptors duplicated) once `serve`
    // returns, so a test that counts descriptors sees them all.
    let server = oxidinetd::serve(&runtime, shared.clone(), sockets, received).expect("serve");
    let main = {
        let runtime = runtime.clone();
        std::thread::spawn(move || runtime.block_on(server))
    };
    TestServer {
        addrs,
        shared,
        runtime,
        commands,
        main: Some(main),
    }
}

/// A log writer appending rinetd's tab format to `oi.log` in a fresh
/// temporary directory (kept alive by the returned `TempDir`).
pub fn tab_log() -> (tempfile::TempDir, std::path::PathBuf, LogHandle) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("oi.log");
    let log = LogHandle::start().expect("log thread");
    log.reopen(Some(path.clone()), oxidinetd::Format::Tab)
        .expect("open log");
    (dir, path, log)
}
