//! Watching a running oi: the status file (rinetd-uv's, JSON or text), the
//! periodic `STATS:` log line, the Prometheus endpoint and the control
//! socket behind `oi status` and `oi connections`. All of them read the same
//! [`Snapshot`](crate::stats::Snapshot) of [`crate::stats`].
//!
//! They run on a thread of their own (`oi-observe`) with a small executor,
//! so writing the status file, encoding metrics or listing connections never
//! runs on an executor that forwards; a snapshot takes no lock the
//! forwarding path takes per read or write.

mod admin;
mod control;
pub mod format;
mod limits;
mod metrics;
mod page;
mod slots;
mod status_file;
mod tls;

pub use admin::ask_admin;
pub(crate) use admin::ServiceAsk;
pub(crate) use control::UpgradeAsk;
pub use control::{ask, ask_upgrade};
pub use oi_wire::request::Query;

use crate::route::shared::Shared;
use crate::sys::watchdog::Watchdog;
use async_io::{Async, Timer};
use futures_lite::FutureExt;
use smol::LocalExecutor;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The status file's format: the configuration's type, so `statusformat`
/// and `--status-format` are one value.
pub use oi_config::StatusFormat;

/// The status file's default interval (`statusinterval`), as rinetd-uv's.
pub const DEFAULT_STATUS_INTERVAL: Duration = Duration::from_secs(30);

/// The `STATS:` line's default interval (`statsloginterval`), as rinetd-uv's.
pub const DEFAULT_STATS_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What to watch oi with; from the command line now, and from the
/// configuration's `statusfile`, `statusinterval`, `statusformat`,
/// `statsloginterval`, `metrics` and `controlsocket` lines once wired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserveSettings {
    /// Where to write the status file (`statusfile`); none by default.
    pub status_file: Option<PathBuf>,
    /// How often to rewrite it (`statusinterval`; more than 0).
    pub status_interval: Duration,
    /// Its format (`statusformat`).
    pub status_format: StatusFormat,
    /// How often to log the `STATS:` line (`statsloginterval`); zero turns it off.
    pub stats_log_interval: Duration,
    /// Where to serve `GET /metrics` (`metrics`); none by default.
    pub metrics: Option<SocketAddr>,
    /// Where to create the control socket (`controlsocket`); none by default.
    pub control_socket: Option<PathBuf>,
    /// Where to create the read-only control socket (`--status-socket`,
    /// mode 0660): status, connections and config, nothing that changes.
    pub status_socket: Option<PathBuf>,
}

impl Default for ObserveSettings {
    fn default() -> Self {
        ObserveSettings {
            status_file: None,
            status_interval: DEFAULT_STATUS_INTERVAL,
            status_format: StatusFormat::Json,
            stats_log_interval: DEFAULT_STATS_LOG_INTERVAL,
            metrics: None,
            control_socket: None,
            status_socket: None,
        }
    }
}

/// The running observer thread; stops (and removes the control socket and
/// writes the status file a last time) when dropped.
pub struct Observer {
    /// Where the metrics endpoint listens, if it does.
    metrics_addr: Option<SocketAddr>,
    /// Closed on drop: the thread's executor stops.
    stop: async_channel::Sender<()>,
    /// The observer thread.
    thread: Option<JoinHandle<()>>,
    /// The control socket's file, removed on exit if it is still the one
    /// bound (another oi may have bound the path since).
    control_socket: Option<crate::sys::unix::SocketFile>,
    /// The read-only socket's file, removed on exit as the control socket's.
    status_socket: Option<crate::sys::unix::SocketFile>,
    /// Second descriptors of the metrics listener and the control socket
    /// (the thread owns the first), for `oi upgrade` to hand over.
    copies: Given,
    /// Set once a new oi serves: the thread skips its last status file write.
    handed: Arc<AtomicBool>,
    /// Requests to the thread itself: [`Observer::ping`] and [`Observer::quiet`].
    asks: async_channel::Sender<ThreadAsk>,
}

/// What the service asks of the observer thread.
enum ThreadAsk {
    /// Answer (drop the sender) from the thread's executor: it runs.
    Ping(async_channel::Sender<()>),
    /// A new oi answers the control socket and the metrics port now: stop
    /// accepting on them, writing the status file, logging the STATS line
    /// and pinging the watchdog; requests already read are answered. The
    /// sender drops when done.
    Quiet(async_channel::Sender<()>),
}

/// How long the service waits for the observer thread to answer a ping or
/// to stop accepting: it does either at its executor's next turn.
const THREAD_ANSWER: Duration = Duration::from_secs(5);

/// The observer's listening sockets as handed from one oi to the next
/// (`oi upgrade`): each is used when it listens where the settings say.
#[derive(Default)]
pub(crate) struct Given {
    /// The metrics endpoint's listener.
    pub(crate) metrics: Option<TcpListener>,
    /// The control socket.
    pub(crate) control: Option<std::os::unix::net::UnixListener>,
    /// The control socket's file (device and inode) as the previous oi
    /// made or took it: the new oi takes it on if the path still names it.
    pub(crate) control_file: Option<(u64, u64)>,
    /// The read-only control socket (`--status-socket`).
    pub(crate) status: Option<std::os::unix::net::UnixListener>,
    /// Its file, as `control_file`.
    pub(crate) status_file: Option<(u64, u64)>,
}

impl Given {
    /// A second descriptor of each (none where that fails).
    fn copy(&self) -> Given {
        Given {
            metrics: self.metrics.as_ref().and_then(|l| l.try_clone().ok()),
            control: self.control.as_ref().and_then(|l| l.try_clone().ok()),
            control_file: self.control_file,
            status: self.status.as_ref().and_then(|l| l.try_clone().ok()),
            status_file: self.status_file,
        }
    }
}

/// A unix listener handed over by the previous oi, kept when it listens at
/// `path` (where this oi's settings want it).
fn at_path(
    l: Option<std::os::unix::net::UnixListener>,
    path: Option<&PathBuf>,
) -> Option<std::os::unix::net::UnixListener> {
    l.filter(|l| {
        let bound = l
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(|p| p.to_path_buf()));
        bound.is_some() && bound.as_ref() == path
    })
}

/// The socket file at `path` the previous oi made (`id`), this oi's once
/// the hand-over completes ([`Observer::took_over`]): until then kept, so
/// a new oi that gives up before leaves it to the one that keeps serving.
fn adopt_file(
    what: &str,
    path: &std::path::Path,
    id: Option<(u64, u64)>,
) -> Option<crate::sys::unix::SocketFile> {
    let file = id.and_then(|id| {
        crate::sys::unix::SocketFile::adopt(path, id)
            .map_err(|e| {
                log::warn!("{what} {}: {e}; it is not removed at exit", path.display());
            })
            .ok()
    });
    if let Some(f) = &file {
        f.keep();
    }
    file
}

impl Observer {
    /// Binds the metrics listener and the control socket (so a bad address
    /// fails start-up), then starts the observer thread.
    pub fn start(shared: Arc<Shared>, settings: ObserveSettings) -> io::Result<Observer> {
        Self::start_given(shared, settings, Given::default(), None, None, None)
    }

    /// [`Observer::start`], serving on the sockets in `given` where they
    /// listen at the configured address and path (handed over by an
    /// earlier oi); the others are closed and the rest bound as usual. A
    /// given control socket's file is this oi's (removed at exit, handed on
    /// at the next upgrade) when the path still names the inode the
    /// previous oi made; otherwise it is left alone. `watchdog` runs on the
    /// thread's executor: its pings to systemd stop when that thread does.
    pub(crate) fn start_given(
        shared: Arc<Shared>,
        settings: ObserveSettings,
        given: Given,
        upgrades: Option<async_channel::Sender<UpgradeAsk>>,
        service: Option<async_channel::Sender<ServiceAsk>>,
        watchdog: Option<Watchdog>,
    ) -> io::Result<Observer> {
        let upgraded = given.control.is_some() || given.metrics.is_some() || given.status.is_some();
        let given_metrics = given.metrics.filter(|l| {
            l.local_addr()
                .ok()
                .is_some_and(|a| Some(a) == settings.metrics)
        });
        let given_control = at_path(given.control, settings.control_socket.as_ref());
        let given_status = at_path(given.status, settings.status_socket.as_ref());
        let metrics = match settings.metrics {
            _ if given_metrics.is_some() => given_metrics,
            Some(addr) => {
                let l = TcpListener::bind(addr).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot listen for metrics on {addr}: {e}"),
                    )
                })?;
                Some(l)
            }
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(|l| l.local_addr()).transpose()?;
        let (control, control_socket) = match &settings.control_socket {
            Some(path) if given_control.is_some() => {
                let file = adopt_file("control socket", path, given.control_file);
                (given_control, file)
            }
            Some(path) => {
                let (l, file) = control::bind(path).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot create the control socket {}: {e}", path.display()),
                    )
                })?;
                (Some(l), Some(file))
            }
            None => (None, None),
        };
        let (status, status_socket) = match &settings.status_socket {
            Some(path) if given_status.is_some() => {
                let file = adopt_file("status socket", path, given.status_file);
                (given_status, file)
            }
            Some(path) => match control::bind_read_only(path) {
                Ok((l, file)) => (Some(l), Some(file)),
                // Started by `oi upgrade` from an oi that served no status
                // socket at this path (the hand-over carries the one it
                // served): the upgrade must not fail for a read-only view.
                Err(e) if upgraded => {
                    log::warn!("status socket {}: {e}; not served", path.display());
                    (None, None)
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot create the status socket {}: {e}", path.display()),
                    ))
                }
            },
            None => (None, None),
        };
        let copies = Given {
            metrics: metrics.as_ref().and_then(|l| l.try_clone().ok()),
            control: control.as_ref().and_then(|l| l.try_clone().ok()),
            control_file: control_socket
                .as_ref()
                .map(crate::sys::unix::SocketFile::id),
            status: status.as_ref().and_then(|l| l.try_clone().ok()),
            status_file: status_socket.as_ref().map(crate::sys::unix::SocketFile::id),
        };
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let (asks, asked) = async_channel::bounded(1);
        let handed = Arc::new(AtomicBool::new(false));
        let thread_handed = handed.clone();
        let thread = std::thread::Builder::new()
            .name("oi-observe".into())
            .spawn(move || {
                run(
                    shared,
                    settings,
                    metrics,
                    Sockets {
                        control,
                        status,
                        upgrades,
                        service,
                    },
                    watchdog,
                    (stopped, asked),
                    thread_handed,
                )
            })?;
        Ok(Observer {
            metrics_addr,
            stop,
            thread: Some(thread),
            control_socket,
            status_socket,
            copies,
            handed,
            asks,
        })
    }

    /// Copies of the metrics listener and the control socket, for `oi upgrade`.
    pub(crate) fn copies(&self) -> Given {
        self.copies.copy()
    }

    /// The hand-over that started this oi has completed: the control and
    /// status sockets' files it took on are its own now, removed when it
    /// exits.
    pub(crate) fn took_over(&self) {
        for file in [&self.control_socket, &self.status_socket]
            .into_iter()
            .flatten()
        {
            file.own();
        }
    }

    /// A new oi serves the control socket, the status socket and the
    /// metrics port now: this process stops accepting on them (its
    /// descriptors close: what connects from now on reaches the new oi),
    /// and stops writing the status file (no last write either), logging
    /// the STATS line and pinging systemd's watchdog (the new oi is the
    /// main process); the sockets' files stay at exit. Requests already read are
    /// answered, among them the `oi upgrade` that asked for the hand-over.
    /// Before, the old oi answered 18 to 26 of 40 `oi status`, `/metrics`
    /// and `/status.json` requests while it drained, with its own counters.
    pub(crate) async fn quiet(&mut self) {
        self.handed.store(true, Ordering::Relaxed);
        for file in [&self.control_socket, &self.status_socket]
            .into_iter()
            .flatten()
        {
            file.keep();
        }
        self.copies = Given::default();
        let (done, wait) = async_channel::bounded::<()>(1);
        if self.asks.send(ThreadAsk::Quiet(done)).await.is_ok() {
            let _ = wait.recv().or(timeout(THREAD_ANSWER)).await;
        }
    }

    /// Whether the observer thread's executor runs (answers within
    /// [`THREAD_ANSWER`]): part of the answer to a previous oi's health
    /// question, since the control socket and the metrics port are this
    /// process's alone once it has answered.
    pub(crate) async fn ping(&self) -> bool {
        let (reply, wait) = async_channel::bounded::<()>(1);
        let asked = async {
            self.asks.send(ThreadAsk::Ping(reply)).await.is_ok()
                && matches!(wait.recv().await, Err(async_channel::RecvError))
        };
        asked
            .or(async {
                Timer::after(THREAD_ANSWER).await;
                false
            })
            .await
    }

    /// Where `GET /metrics` is served (the bound address, for port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // After the thread (and its listener) is gone: removes the file
        // only if it is still the socket bound at start.
        self.control_socket.take();
        self.status_socket.take();
    }
}

/// Waits `d`, then reads as a closed channel.
async fn timeout(d: Duration) -> Result<(), async_channel::RecvError> {
    Timer::after(d).await;
    Err(async_channel::RecvError)
}

/// The control sockets the observer thread serves, and where their
/// requests for the service loop go.
struct Sockets {
    /// The control socket.
    control: Option<std::os::unix::net::UnixListener>,
    /// The read-only one.
    status: Option<std::os::unix::net::UnixListener>,
    /// `oi upgrade`'s requests.
    upgrades: Option<async_channel::Sender<UpgradeAsk>>,
    /// `oi reload`'s and `oi config`'s.
    service: Option<async_channel::Sender<ServiceAsk>>,
}

/// The observer thread: its tasks until `stopped` closes (`asks` from the
/// service meanwhile).
fn run(
    shared: Arc<Shared>,
    settings: ObserveSettings,
    metrics: Option<TcpListener>,
    sockets: Sockets,
    watchdog: Option<Watchdog>,
    (stopped, asks): (
        async_channel::Receiver<()>,
        async_channel::Receiver<ThreadAsk>,
    ),
    handed: Arc<AtomicBool>,
) {
    let ex = Rc::new(LocalExecutor::new());
    let mut tasks = Vec::new();
    if let Some(w) = watchdog {
        tasks.push(ex.spawn(w.run()));
    }
    if let Some(l) = metrics {
        match Async::new(l) {
            Ok(l) => {
                let registry = Arc::new(metrics::registry(shared.clone()));
                tasks.push(ex.spawn(metrics::serve(ex.clone(), l, registry, shared.clone())));
            }
            Err(e) => log::error!("metrics endpoint: {e}"),
        }
    }
    let Sockets {
        control,
        status,
        upgrades,
        service,
    } = sockets;
    for (l, read_only) in [(control, false), (status, true)] {
        let Some(l) = l else { continue };
        match Async::new(l) {
            Ok(l) => tasks.push(ex.spawn(control::serve(
                ex.clone(),
                l,
                shared.clone(),
                upgrades.clone().filter(|_| !read_only),
                service.clone(),
                read_only,
            ))),
            Err(e) => log::error!("control socket: {e}"),
        }
    }
    if !settings.stats_log_interval.is_zero() {
        let shared = shared.clone();
        let every = settings.stats_log_interval;
        tasks.push(ex.spawn(async move {
            loop {
                Timer::after(every).await;
                log::info!("{}", format::stats_line(&shared.snapshot()));
            }
        }));
    }
    let status = settings
        .status_file
        .clone()
        .map(|path| status_file::StatusFile::new(path, settings.status_format));
    if let Some(file) = status.clone() {
        let shared = shared.clone();
        let every = settings.status_interval.max(Duration::from_millis(10));
        tasks.push(ex.spawn(async move {
            // The first write comes one interval after start, as rinetd-uv's
            // timer does: a tool that waits for the file to appear then
            // reads numbers that cover at least one interval (rinetd-uv's
            // own test suite counts on it).
            loop {
                Timer::after(every).await;
                file.write(&shared.snapshot());
            }
        }));
    }
    smol::block_on(ex.run(async {
        // One ask a turn, until `stopped` (or `asks`) closes.
        while let Some(ask) = async { asks.recv().await.ok() }
            .or(async {
                let _ = stopped.recv().await;
                None
            })
            .await
        {
            match ask {
                ThreadAsk::Ping(reply) => drop(reply),
                // The accept loops (and their listeners) and the timers go;
                // the requests being answered are tasks of their own.
                ThreadAsk::Quiet(done) => {
                    tasks.clear();
                    drop(done);
                }
            }
        }
    }));
    drop(tasks);
    // A last status file, so it does not say "running" with old numbers
    // after a clean stop.
    if let Some(file) = status.filter(|_| !handed.load(Ordering::Relaxed)) {
        file.write(&shared.snapshot());
    }
}
