//! The loops a listener runs: one accept loop per executor thread on a TCP
//! listener's one shared socket (or per member of a passed `SO_REUSEPORT`
//! group), one on a unix listener, one datagram loop for UDP; each socket
//! stored with systemd first when it keeps a descriptor store.

use super::*;

impl Listeners {
    /// Spawns the loops serving `socket`: one accept loop per executor for
    /// TCP (within the duplicate budget), one datagram loop on the main
    /// executor for UDP. With a descriptor store (see
    /// [`crate::sys::notify::fd_store_enabled`]) the sockets are stored under
    /// `stored` first: every socket of a TCP listener's group (a member
    /// closed at exit would reset the connections in its queue), the UDP
    /// socket, an abstract unix socket. Not a unix socket with a file: oi
    /// removes the file when it exits, so a restart could not be reached there.
    pub(super) fn spawn_loops(
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
    pub(super) fn spawn_tcp(
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
    pub(super) fn spawn_shared(
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
}
