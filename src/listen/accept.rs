//! The TCP accept loop, and what happens to a connection before it is
//! forwarded: placement on a thread, the ACL check, and the choice between
//! TCP→TCP ([`crate::tcp`]) and TCP→UDP ([`crate::udp`]).

use crate::config::Proto;
use crate::edge::{self, Origin};
use crate::limits::{Held, RuleLimits};
use crate::logfile::Event;
use crate::route::{client_ip, Bytes, Route};
use crate::runtime::{Placed, Threads};
use crate::shared::Shared;
use crate::stats::RuleStats;
use arc_swap::ArcSwap;
use async_io::{Async, Timer};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// First pause after an accept error (EMFILE and the like).
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(5);
/// Longest pause between accept attempts while they keep failing.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// One accept loop's view of its listener.
pub(super) struct AcceptLoop {
    /// The executor threads: where a new connection runs.
    pub(super) threads: Arc<Threads>,
    /// The thread this loop runs on (connections stay here unless it is too busy).
    pub(super) own: usize,
    /// This loop's descriptor of the listening socket (a duplicate on all but one loop).
    pub(super) listener: Async<TcpListener>,
    /// The rule's current route; reload swaps it.
    pub(super) route: Arc<ArcSwap<Route>>,
    /// Settings, pools and the log.
    pub(super) shared: Arc<Shared>,
    /// Shared by the listener's loops and set while accepting fails, so a
    /// descriptor shortage is reported once per burst, not once per loop.
    pub(super) failing: Arc<AtomicBool>,
    /// The rule's counters (the listener's: they survive reloads that keep it).
    pub(super) stats: Arc<RuleStats>,
    /// The rule's connection counts; owned by the listener, so a reload that
    /// keeps the listener keeps them.
    pub(super) limits: Arc<RuleLimits>,
}

impl AcceptLoop {
    /// Accepts connections forever and runs each on this loop's thread unless
    /// that thread is too busy (see [`Threads::pick`]); errors back off and
    /// never end the loop.
    pub(super) async fn run(self) {
        let mut backoff = MIN_BACKOFF;
        loop {
            match self.listener.read_with(accept_nonblocking).await {
                Ok((stream, peer)) => {
                    backoff = MIN_BACKOFF;
                    if self.failing.load(Ordering::Relaxed)
                        && self.failing.swap(false, Ordering::Relaxed)
                    {
                        log::warn!("accepting connections again");
                    }
                    let route = self.route.load_full();
                    // Global and rule limits before a task exists: a flood
                    // over the limit costs an accept and a close each.
                    let held = match self.shared.limits.admit(&self.limits, route.maxconn) {
                        Ok(held) => held,
                        Err(which) => {
                            log::debug!("{peer}: {} reached on {}", which.as_str(), route.bind);
                            self.stats.refused(Event::LimitReached);
                            let ip = client_ip(peer);
                            let line = route.event(ip, Event::LimitReached, Bytes::NONE);
                            self.shared.log.log(line);
                            continue;
                        }
                    };
                    let at = self.threads.pick(self.own);
                    let placed = self.threads.place(at);
                    let shared = self.shared.clone();
                    let stats = self.stats.clone();
                    let limits = self.limits.clone();
                    let guards = (placed, held);
                    let task = connection(stream, peer, route, shared, stats, guards, limits);
                    self.threads.executor(at).spawn(task).detach();
                }
                // The client gave up between SYN and accept: nothing to report.
                Err(e) if is_benign_accept_error(&e) => {}
                Err(e) => {
                    self.shared.stats.accept_error();
                    if !self.failing.swap(true, Ordering::Relaxed) {
                        log::error!("accept failed, backing off: {e}");
                        let route = self.route.load();
                        let unknown = IpAddr::from([0, 0, 0, 0]);
                        let line = route.event(unknown, Event::AcceptFailed, Bytes::NONE);
                        self.shared.log.log(line);
                    }
                    Timer::after(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

/// accept4(2) with `SOCK_NONBLOCK | SOCK_CLOEXEC`: the stream is registered
/// as it comes, without the `ioctl(FIONBIO)` that `Async::new` would make
/// (one system call per connection).
fn accept_nonblocking(listener: &TcpListener) -> io::Result<(Async<TcpStream>, SocketAddr)> {
    use rustix::net::{acceptfrom_with, SocketFlags};
    let (fd, peer) = acceptfrom_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?;
    let peer = peer
        .and_then(|p| SocketAddr::try_from(p).ok())
        .ok_or_else(|| io::Error::other("accepted a connection without an IP peer address"))?;
    Ok((Async::new_nonblocking(TcpStream::from(fd))?, peer))
}

/// Accept errors that concern one aborted connection, not the listener
/// (the unix accept loop's too).
pub(super) fn is_benign_accept_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves one accepted connection: PROXY header (`accept-proxy`), ACL
/// check, per-client limit, then TCP→TCP or TCP→UDP.
async fn connection(
    client: Async<TcpStream>,
    peer: SocketAddr,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
    guards: (Placed, Held),
    limits: Arc<RuleLimits>,
) {
    // Counts the connection (for its thread, `--drain`, the limits and
    // tests) until every socket is closed: rebinding the client here makes
    // it drop before the guards, as locals drop in reverse order and before
    // parameters. The per-client slot joins `held` later for the same reason.
    let (_placed, mut held) = guards;
    let client = client;
    let origin = if route.accept_proxy {
        match edge::accept_header(&client, peer, &route).await {
            Ok(origin) => origin,
            Err(refused) => {
                log::debug!(
                    "{peer}: {} on {}: {}",
                    refused.event.as_str(),
                    route.bind,
                    refused.reason
                );
                let line = route.event(client_ip(peer), refused.event, Bytes::NONE);
                return shared.log.log(line);
            }
        }
    } else {
        Origin {
            client: peer,
            local: None,
        }
    };
    // From here on the client is who the header said it is, if there was one.
    let peer = origin.client;
    let ip = client_ip(peer);
    if let Err(refusal) = route.admit(ip) {
        log::debug!("{peer}: {} on {}", refusal.as_str(), route.bind);
        stats.refused(refusal);
        return shared.log.log(route.event(ip, refusal, Bytes::NONE));
    }
    let per_client = route.maxconn_per_client;
    if let Err(which) = shared
        .limits
        .admit_client(&limits, &mut held, ip, per_client)
    {
        log::debug!("{peer}: {} reached on {}", which.as_str(), route.bind);
        stats.refused(Event::LimitReached);
        return shared
            .log
            .log(route.event(ip, Event::LimitReached, Bytes::NONE));
    }
    // Accepted sockets inherit SO_KEEPALIVE from the listener; a rule
    // with `keepalive=off` clears it (one call, only on such rules).
    if !route.keepalive() {
        if let Err(e) = socket2::SockRef::from(client.get_ref()).set_keepalive(false) {
            log::debug!("{peer}: cannot clear SO_KEEPALIVE: {e}");
        }
    }
    match route.backend_proto {
        Proto::Tcp => crate::tcp::forward(client, Some(origin), route, shared, stats).await,
        Proto::Udp => crate::udp::tcp_to_udp(client, origin, route, shared, stats).await,
    }
}
