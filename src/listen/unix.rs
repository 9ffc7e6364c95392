//! The accept loop of a unix socket listener, and what a unix client goes
//! through before it is forwarded: placement on a thread and the rule's
//! connection limit. No ACL check, per-client limit or `accept-proxy`: a
//! unix client has no address to match, count or trust (the parsers and
//! `--check` say so); the socket file's mode is the access control.

use super::accept::{is_benign_accept_error, MAX_BACKOFF, MIN_BACKOFF};
use crate::config::Proto;
use crate::limits::{Held, RuleLimits};
use crate::logfile::Event;
use crate::peer::Client;
use crate::route::{Bytes, Route};
use crate::runtime::{Placed, Threads};
use crate::shared::Shared;
use crate::stats::RuleStats;
use crate::unix::SocketFile;
use arc_swap::ArcSwap;
use async_io::{Async, Timer};
use std::net::TcpStream;
use std::os::unix::net::UnixListener;
use std::sync::Arc;

/// The one accept loop of a unix socket listener.
pub(super) struct UnixAcceptLoop {
    /// The executor threads: where a new connection runs.
    pub(super) threads: Arc<Threads>,
    /// The thread this loop runs on (connections stay here unless it is too busy).
    pub(super) own: usize,
    /// The listening socket.
    pub(super) listener: Async<UnixListener>,
    /// The socket file, removed when this loop is dropped (the listener
    /// closes: exit, or a reload without the rule); `None` for an abstract socket.
    pub(super) file: Option<SocketFile>,
    /// The rule's current route; reload swaps it.
    pub(super) route: Arc<ArcSwap<Route>>,
    /// Settings, pools and the log.
    pub(super) shared: Arc<Shared>,
    /// The rule's counters (the listener's: they survive reloads that keep it).
    pub(super) stats: Arc<RuleStats>,
    /// The rule's connection counts, owned by the listener.
    pub(super) limits: Arc<RuleLimits>,
}

impl UnixAcceptLoop {
    /// Accepts clients forever, placing each on a thread as the TCP accept
    /// loop does; errors back off and never end the loop.
    pub(super) async fn run(self) {
        // Dropped with the loop, after the listener (declared later, dropped
        // first): the file goes only once nothing can accept on it.
        let _file = self.file;
        let listener = self.listener;
        let mut backoff = MIN_BACKOFF;
        let mut failing = false;
        loop {
            match listener.read_with(crate::unix::accept).await {
                Ok(stream) => {
                    backoff = MIN_BACKOFF;
                    if std::mem::take(&mut failing) {
                        log::warn!("accepting connections again");
                    }
                    let route = self.route.load_full();
                    let held = match self.shared.limits.admit(&self.limits, route.maxconn) {
                        Ok(held) => held,
                        Err(which) => {
                            log::debug!(
                                "unix client: {} reached on {}",
                                which.as_str(),
                                route.bind
                            );
                            self.stats.refused(Event::LimitReached);
                            let line = route.event(Client::Unix, Event::LimitReached, Bytes::NONE);
                            self.shared.log.log(line);
                            continue;
                        }
                    };
                    let at = self.threads.pick(self.own);
                    let placed = self.threads.place(at);
                    let task = connection(
                        stream,
                        route,
                        self.shared.clone(),
                        self.stats.clone(),
                        (placed, held),
                    );
                    self.threads.executor(at).spawn(task).detach();
                }
                Err(e) if is_benign_accept_error(&e) => {}
                Err(e) => {
                    self.shared.stats.accept_error();
                    if !std::mem::replace(&mut failing, true) {
                        log::error!("accept failed, backing off: {e}");
                        let route = self.route.load();
                        let line = route.event(Client::Unix, Event::AcceptFailed, Bytes::NONE);
                        self.shared.log.log(line);
                    }
                    Timer::after(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

/// Serves one unix client: forwarded as a TCP client is, from `unix-client`.
async fn connection(
    client: Async<TcpStream>,
    route: Arc<Route>,
    shared: Arc<Shared>,
    stats: Arc<RuleStats>,
    guards: (Placed, Held),
) {
    // The guards drop after the client socket (see `accept::connection`).
    let _guards = guards;
    let client = client;
    match route.backend_proto {
        // No origin: a unix client has no address.
        Proto::Tcp => crate::tcp::forward(client, None, route, shared, stats).await,
        // The parsers refuse a unix listener with a UDP backend.
        Proto::Udp => log::error!(
            "{}: a unix socket listener cannot forward to UDP",
            route.bind
        ),
    }
}
