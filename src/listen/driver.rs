//! The one accept loop every listener kind runs. An [`Acceptor`] says how
//! its kind accepts a client and serves it once admitted; everything between
//! is written here once: the connection limits ([`crate::route::limits`]), the
//! refusal (its counter and log line), placement on a thread
//! ([`oi_runtime`]), the spawn, which accept errors are benign, and the
//! [`Backoff`] while accepting fails. A new listener kind (TLS peeking,
//! MPTCP, ...) is one `Acceptor` impl.

use crate::logfile::Event;
use crate::net::peer::{Client, Peer};
use crate::route::limits::{Held, RuleLimits};
use crate::route::shared::Shared;
use crate::route::{Bytes, Route};
use crate::stats::RuleStats;
use arc_swap::ArcSwap;
use oi_runtime::reactor::{Async, Timer};
use oi_runtime::{Placed, Threads};
use std::future::Future;
use std::io;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One listener kind: how a client is accepted and how it is served.
pub(super) trait Acceptor: Send + Sync + 'static {
    /// Who the accept call says the client is (an address, or nothing for a
    /// unix client); handed to [`Acceptor::serve`] as it is.
    type Peer: Copy + Into<Peer> + Send + 'static;

    /// The client named in the log line of a failed accept, when no client is known.
    const NOBODY: Client;

    /// Waits for and accepts one client: its stream, non-blocking and
    /// registered, and who it is.
    fn accept(&self) -> impl Future<Output = io::Result<(Async<TcpStream>, Self::Peer)>> + Send;

    /// Serves a client the loop admitted and placed, on its thread.
    fn serve(client: Admitted<Self::Peer>) -> impl Future<Output = ()> + Send + 'static;
}

/// A client past the listener's connection limits, placed on a thread.
pub(super) struct Admitted<P> {
    /// The accepted connection.
    pub(super) stream: Async<TcpStream>,
    /// Who the accept call said it is.
    pub(super) peer: P,
    /// The rule's route when the client was accepted.
    pub(super) route: Arc<Route>,
    /// Settings, pools and the log.
    pub(super) shared: Arc<Shared>,
    /// The rule's counters.
    pub(super) stats: Arc<RuleStats>,
    /// The rule's connection counts, when it has a per-client limit (checked
    /// later, once the client is known, e.g. after a PROXY header); `None`
    /// spares the other connections an atomic add and subtract on a count
    /// every thread writes.
    pub(super) limits: Option<Arc<RuleLimits>>,
    /// The thread's count and the limits' slot: both held until the
    /// connection's sockets are closed (see `accept::connection`).
    pub(super) guards: (Placed, Held),
}

/// One accept loop's view of its listener.
pub(super) struct AcceptLoop<A: Acceptor> {
    /// How this listener kind accepts and serves.
    pub(super) acceptor: A,
    /// The executor threads: where a new connection runs.
    pub(super) threads: Arc<Threads>,
    /// The thread this loop runs on (connections stay here unless it is too busy).
    pub(super) own: usize,
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

impl<A: Acceptor> AcceptLoop<A> {
    /// Accepts clients forever and runs each on this loop's thread unless
    /// that thread is too busy (see [`Threads::pick`]); errors back off and
    /// never end the loop.
    pub(super) async fn run(self) {
        let mut backoff = Backoff::default();
        loop {
            match self.acceptor.accept().await {
                Ok((stream, peer)) => {
                    backoff.reset();
                    if self.failing.load(Ordering::Relaxed)
                        && self.failing.swap(false, Ordering::Relaxed)
                    {
                        log::warn!("accepting connections again");
                    }
                    self.admit(stream, peer);
                }
                // The client gave up between connect and accept: nothing to report.
                Err(e) if is_benign_accept_error(&e) => {}
                Err(e) => {
                    self.shared.stats.accept_error();
                    if !self.failing.swap(true, Ordering::Relaxed) {
                        let route = self.route.load();
                        log::error!(
                            rule:% = route.bind, reason = "accept-failed";
                            "accept failed, backing off: {e}"
                        );
                        let line = route.event(A::NOBODY, Event::AcceptFailed, Bytes::NONE);
                        self.shared.log.log(line);
                    }
                    Timer::after(backoff.next()).await;
                }
            }
        }
    }

    /// Global and rule limits before a task exists (a flood over the limit
    /// costs an accept and a close each), then placement and the spawn.
    fn admit(&self, stream: Async<TcpStream>, peer: A::Peer) {
        let route = self.route.load_full();
        // A listener rules share by server name limits nothing here: the
        // rule its ClientHello picks admits it (`route::admit`).
        let maxconn = route.maxconn.filter(|_| !route.routes_by_name());
        let held = match self.shared.limits.admit(&self.limits, maxconn) {
            Ok(held) => held,
            Err(which) => {
                let who: Peer = peer.into();
                log::debug!("{who}: {} reached on {}", which.as_str(), route.bind);
                self.stats.refused(Event::LimitReached);
                let line = route.event(who.client(), Event::LimitReached, Bytes::NONE);
                return self.shared.log.log(line);
            }
        };
        let at = self.threads.pick(self.own);
        log::trace!("accepted on thread {}, runs on thread {at}", self.own);
        let placed = self.threads.place(at);
        let limits = route
            .maxconn_per_client
            .filter(|_| !route.routes_by_name())
            .map(|_| self.limits.clone());
        let task = A::serve(Admitted {
            stream,
            peer,
            route,
            shared: self.shared.clone(),
            stats: self.stats.clone(),
            limits,
            guards: (placed, held),
        });
        self.threads.executor(at).spawn(task).detach();
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

/// The pause after each failed accept (EMFILE and the like): doubling from
/// [`Backoff::MIN`] up to [`Backoff::MAX`], back to the minimum after a
/// success. Short enough that service resumes soon after descriptors free up,
/// long enough that a loop on a full descriptor table does not spin.
#[derive(Debug)]
pub(super) struct Backoff {
    /// The pause [`Backoff::next`] returns next.
    pause: Duration,
}

impl Backoff {
    /// First pause after an accept error.
    pub(super) const MIN: Duration = Duration::from_millis(5);
    /// Longest pause between accept attempts while they keep failing.
    pub(super) const MAX: Duration = Duration::from_secs(1);

    /// The pause to take now; the next one is twice as long, up to the maximum.
    pub(super) fn next(&mut self) -> Duration {
        let now = self.pause;
        self.pause = now.saturating_mul(2).min(Self::MAX);
        now
    }

    /// An accept succeeded: the next failure pauses the minimum again.
    pub(super) fn reset(&mut self) {
        self.pause = Self::MIN;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { pause: Self::MIN }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_minimum_to_the_maximum_and_stays() {
        let mut b = Backoff::default();
        let pauses: Vec<u128> = (0..10).map(|_| b.next().as_millis()).collect();
        assert_eq!(pauses, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }

    #[test]
    fn backoff_starts_over_after_a_success() {
        let mut b = Backoff::default();
        for _ in 0..20 {
            b.next();
        }
        b.reset();
        assert_eq!(b.next(), Backoff::MIN);
        assert_eq!(b.next(), Backoff::MIN * 2);
    }

    #[test]
    fn only_errors_about_one_aborted_client_are_benign() {
        use io::ErrorKind::*;
        for kind in [ConnectionAborted, Interrupted, ConnectionReset] {
            assert!(is_benign_accept_error(&kind.into()), "{kind:?}");
        }
        let emfile = io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
        assert!(!is_benign_accept_error(&emfile));
        assert!(!is_benign_accept_error(&PermissionDenied.into()));
    }
}
