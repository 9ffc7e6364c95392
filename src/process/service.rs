//! The running service: start-up, signals, reload and shutdown around
//! [`serve`](crate::listen::serve).
//!
//! Start-up order matters: the configuration is read and every socket bound
//! before the process forks (so a port in use fails the start, as rinetd's
//! does), the fork happens before any thread exists, and READY=1 goes out
//! once every listener's loops run.

use crate::handover;
use crate::listen::{self, BoundSocket, Command};
use crate::logfile::{Format, LogHandle};
use crate::observe::{Given, Observer, UpgradeAsk};
use crate::process::cli::RunOptions;
use crate::route::shared::Shared;
use crate::route::Route;
use crate::sys::daemon;
use crate::sys::diagnostics;
use crate::sys::notify;
use crate::watch::Watcher;
use async_channel::{Receiver, Sender};
use async_signal::{Signal, Signals};
use futures_lite::{FutureExt, StreamExt};
use oi_config::ResolvedConfig;
use oi_runtime::Runtime;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Most bind errors printed at start; the rest are counted.
const MAX_BIND_ERRORS_SHOWN: usize = 20;

/// Highest soft open-file limit oi asks for, whatever the hard limit.
const MAX_NOFILE: u64 = 1 << 20;

/// Raises the soft open-file limit to the hard one (at most [`MAX_NOFILE`]):
/// every connection costs two descriptors and every listener one per
/// thread, and a soft limit of 1,024 (the default outside systemd's
/// `LimitNOFILE=`) cannot even bind a 10,000-port range. The hard limit
/// stays the administrator's bound; the budgets that follow it (UDP
/// associations, per-thread listening sockets) read the raised value.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let (Some(soft), hard) = (limit.current, limit.maximum) else {
        return;
    };
    let target = hard.unwrap_or(MAX_NOFILE).min(MAX_NOFILE);
    if soft >= target {
        return;
    }
    let raised = Rlimit {
        current: Some(target),
        maximum: hard,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => log::debug!("open-file limit raised from {soft} to {target}"),
        Err(e) => log::debug!("cannot raise the open-file limit from {soft}: {e}"),
    }
}

/// Runs oi with validated options; returns the process exit code.
pub fn run(opts: RunOptions) -> ExitCode {
    if let Some(q) = &opts.client {
        return ask(q, &opts.conf_file);
    }
    if opts.check {
        return crate::process::check::run(&opts.conf_file, opts.quiet);
    }
    if let Some(to) = opts.convert {
        return convert(&opts.conf_file, to);
    }
    // Listening sockets systemd passed (socket activation, the descriptor
    // store): taken first, while no thread exists, since it clears the
    // environment variables that name them.
    let mut inherited = listen::Inherited::from_env();
    // Started by a running oi (`oi upgrade`): take what it hands over.
    let taken = handover::take_from_env();
    // What `oi upgrade` starts: this binary's path as started (read before
    // anything can replace the file) and the same arguments.
    let binary = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // Drop-in and daemon mode also report to syslog, as rinetd does.
    diagnostics::init(opts.program, opts.rinetd_defaults);
    let (mut taker, given) = match taken {
        None => (None, Given::default()),
        Some(Err(e)) => {
            diagnostics::report(&e);
            return ExitCode::FAILURE;
        }
        Some(Ok((taker, handed))) => (Some(taker), adopt(handed, &mut inherited)),
    };
    // The daemon changes to / before reading anything again: pin the path now.
    let conf = std::path::absolute(&opts.conf_file).unwrap_or_else(|_| opts.conf_file.clone());
    let file = opts.conf_file.display().to_string();
    // What the files held before the load: a watcher started later compares
    // its first look with this, so a change made while oi was starting is
    // not lost (a few reads of what the load reads anyway).
    let loaded = crate::watch::digest(&conf);
    let cfg = match oi_config::load_resolved(&conf) {
        Ok(c) => c.with_command_line(&opts.command_line),
        Err(e) => {
            let e = e.with_file(&file).to_string();
            give_up(&mut taker, &e);
            diagnostics::report(&e);
            return ExitCode::FAILURE;
        }
    };
    raise_nofile();
    if let Err(e) = listen::check_budget(&file, cfg.rules.len()) {
        give_up(&mut taker, &e);
        diagnostics::report(&e);
        return ExitCode::FAILURE;
    }
    let sockets = match listen::bind_all_with(&cfg, &file, &mut inherited) {
        Ok(s) => {
            inherited.report_unused();
            s
        }
        Err(errors) => {
            give_up(&mut taker, &errors.join("; "));
            for e in capped(&errors) {
                diagnostics::report(&e);
            }
            return ExitCode::FAILURE;
        }
    };
    let pidfile = pidfile_for(&cfg, opts.rinetd_defaults);
    // A pid file that cannot be written is reported and oi serves on, as
    // rinetd 0.73 does; in daemon mode the child still reports ready, so the
    // parent exits 0 (stderr is still the terminal's when this runs).
    let write_pid = || {
        write_pidfile(pidfile.as_deref());
        Ok(())
    };
    // A new oi started by `oi upgrade` stays the old one's child (which
    // exits): forking again would leave the old one talking to a parent.
    let started = if opts.background && taker.is_none() {
        daemon::daemonize(write_pid).map(|()| diagnostics::daemonized(opts.program))
    } else {
        write_pid()
    };
    if let Err(e) = started {
        diagnostics::report(&format!("cannot start: {e}"));
        return ExitCode::FAILURE;
    }
    // Every listener is bound and the pid file written: no more root.
    // Before the first thread starts (the calls are per thread).
    if let Err(e) = drop_privileges(&opts, &cfg, &sockets, taker.is_some()) {
        diagnostics::report(&format!("cannot start: {e}"));
        return ExitCode::FAILURE;
    }
    warn_if_transparent_cannot_work(&cfg);
    let log = match LogHandle::start() {
        Ok(l) => l,
        Err(e) => {
            log::error!("cannot start the log writer: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = log.reopen(cfg.config.logfile.clone(), log_format(&cfg)) {
        // rinetd carries on without its log file; so do we, loudly.
        let path = cfg
            .config
            .logfile
            .as_deref()
            .unwrap_or(std::path::Path::new(""));
        log::error!("cannot open log file {}: {e}", path.display());
    }
    let runtime = match Runtime::start(opts.threads) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            log::error!("cannot start worker threads: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Installed before READY=1: a SIGHUP right after it must reload, not kill.
    // SIGUSR1 is caught so it cannot kill oi (its default action, and what it
    // does to rinetd): it logs one status line, until statistics give it more.
    // Listed first: signals pending together come out in this order, so a
    // status asked for before a SIGTERM is still printed.
    let signals = match Signals::new([
        Signal::Usr1,
        Signal::Usr2,
        Signal::Hup,
        Signal::Int,
        Signal::Term,
    ]) {
        Ok(s) => s,
        Err(e) => {
            log::error!("cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let shared = Shared::new(opts.settings_with(&cfg.config.globals), log);
    // After the fork (it starts a thread); dropped, removing the control
    // socket, when `run` returns.
    shared.set_max_connections(cfg.config.globals.max_connections);
    let (upgrade_asked, upgrades) = async_channel::bounded(1);
    let observer = match Observer::start_given(
        shared.clone(),
        opts.observe_with(&cfg.config.globals),
        given,
        Some(upgrade_asked),
    ) {
        Ok(o) => o,
        Err(e) => {
            give_up(&mut taker, &format!("cannot start: {e}"));
            diagnostics::report(&format!("cannot start: {e}"));
            return ExitCode::FAILURE;
        }
    };
    // Before READY=1: the watches are in place when `start` returns, so a
    // change made right after readiness is seen.
    let (changed, changes) = async_channel::bounded(1);
    let watcher = watch_wanted(&opts.flags, &cfg.config.globals)
        .then(|| start_watcher(&conf, &changed, Some(loaded)))
        .flatten();
    let (commands, received) = async_channel::bounded(1);
    // Started by `oi upgrade`: UDP listeners wait for the associations on
    // their way (released when the hand-over of live connections ends).
    let release = taker.as_ref().map(|_| shared.parking.hold());
    let server = match listen::serve(&runtime, shared.clone(), routes(&cfg, sockets), received) {
        Ok(server) => server,
        Err(e) => {
            give_up(&mut taker, &format!("cannot start listeners: {e}"));
            diagnostics::report(&format!("cannot start listeners: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let service = Service {
        runtime: runtime.clone(),
        shared,
        commands,
        path: conf,
        file,
        rinetd_defaults: opts.rinetd_defaults,
        drain: opts.drain,
        command_line: opts.command_line.clone(),
        flags: opts.flags.clone(),
        watcher,
        changed,
        changes,
        observer,
        binary,
        args,
        upgrades,
    };
    let status = format!("serving {} rule(s)", cfg.rules.len());
    runtime.block_on(async move {
        let server = service.runtime.spawn(server);
        log::info!("oi {} {status}", env!("CARGO_PKG_VERSION"));
        if let Some(taker) = taker {
            // The old oi stops accepting once it reads this; systemd
            // follows this process from now on (NotifyAccess=all).
            taker.ready();
            service.observer.took_over();
            notify::main_pid();
            log::info!("took over from the previous oi");
            take_connections(taker, &service.commands, &service.shared).await;
        }
        drop(release);
        notify::ready(&status);
        service.until_stopped(server, signals).await
    })
}

/// `oi status` / `oi connections`: prints the running server's answer.
/// The socket is `--socket`, else the `controlsocket` line of `-c FILE`.
fn ask(q: &crate::process::cli::ClientQuery, conf_file: &std::path::Path) -> ExitCode {
    let from_config = || {
        oi_config::load(conf_file)
            .ok()
            .and_then(|c| c.globals.control_socket)
    };
    let Some(socket) = q.socket.clone().or_else(from_config) else {
        eprintln!(
            "oi: which server? give its control socket with --socket PATH, or a `controlsocket PATH` line in {}",
            conf_file.display()
        );
        return ExitCode::from(2);
    };
    let (query, json) = match &q.action {
        crate::process::cli::ClientAction::Print { query, json } => (*query, *json),
        crate::process::cli::ClientAction::Top { interval } => {
            return crate::top::run(&socket, *interval)
        }
        crate::process::cli::ClientAction::Upgrade { binary } => {
            return match crate::observe::ask_upgrade(&socket, binary.as_deref()) {
                Ok(answer) => {
                    print!("{answer}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("oi: {e}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    match crate::observe::ask(&socket, query, json) {
        Ok(answer) => {
            print!("{answer}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("oi: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `oi convert`: the file (with its includes) in the format `to`, on stdout.
fn convert(conf_file: &std::path::Path, to: oi_config::Format) -> ExitCode {
    let source = conf_file.display().to_string();
    match oi_config::load(conf_file) {
        Ok(c) => {
            print!(
                "{}",
                match to {
                    oi_config::Format::Yaml => oi_config::convert::to_yaml(&c, &source),
                    oi_config::Format::Conf => oi_config::convert::to_conf(&c, &source),
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Says at start, once, what `--check` says: transparent rules whose every
/// client would fail, as the process has neither CAP_NET_ADMIN nor CAP_NET_RAW.
fn warn_if_transparent_cannot_work(cfg: &ResolvedConfig) {
    let transparent = cfg
        .rules
        .iter()
        .find(|r| r.rule.options.transparent == Some(true));
    if let Some(r) = transparent {
        if crate::sys::privileges::may_be_transparent() == Some(false) {
            log::warn!(
                "{}/{}: transparent needs CAP_NET_ADMIN (or CAP_NET_RAW), which oi does not \
                 have: each client of a transparent rule will be closed (local-socket-failed)",
                r.bind,
                r.rule.bind.proto
            );
        }
    }
}

/// Becomes `--user` (or the configuration's `user`), if one is given,
/// handing it the TCP listeners first so each thread still gets a socket
/// of its own in their `SO_REUSEPORT` groups ([`crate::sys::privileges::give_listeners`]).
fn drop_privileges(
    opts: &RunOptions,
    cfg: &ResolvedConfig,
    sockets: &[BoundSocket],
    handed_over: bool,
) -> Result<(), String> {
    let g = &cfg.config.globals;
    let (user, group) = match &opts.user {
        Some(u) => (u, opts.group.as_deref()),
        None => match &g.user {
            Some(u) => (u, g.group.as_deref()),
            None => return Ok(()),
        },
    };
    let target = crate::sys::privileges::resolve(user, group)?;
    // Started by `oi upgrade` from an oi that dropped to this user: it
    // runs as that user already (and could not change again), and the
    // sockets it was handed are that user's.
    if handed_over && target.is_current() {
        return Ok(());
    }
    let listeners: Vec<_> = sockets
        .iter()
        .filter_map(|s| match s {
            BoundSocket::Tcp(l) => Some(std::os::fd::AsFd::as_fd(l)),
            _ => None,
        })
        .collect();
    // Not fatal: a listener the user does not own still serves, with one
    // accept loop instead of one per thread.
    if let Err(e) = crate::sys::privileges::give_listeners(&target, &listeners) {
        log::warn!("cannot hand the listeners to {user} ({e}): each keeps one accept loop");
    }
    // Kept for a transparent rule at start; one a reload adds gets none
    // (--check and its local-socket-failed warning say so).
    let transparent = cfg
        .rules
        .iter()
        .any(|r| r.rule.options.transparent == Some(true));
    crate::sys::privileges::drop_to(&target, transparent)
        .map_err(|e| format!("cannot run as {user}: {e}"))
}

/// At most [`MAX_BIND_ERRORS_SHOWN`] of `errors`, then a count of the rest:
/// a 10,000-port range at a low descriptor limit failed with 8,981 lines
/// (10,014 on a reload); the first few say it all.
fn capped(errors: &[String]) -> impl Iterator<Item = String> + '_ {
    let more = errors.len().saturating_sub(MAX_BIND_ERRORS_SHOWN);
    let tail = (more > 0).then(|| format!("and {more} more listeners that could not be bound"));
    errors
        .iter()
        .take(MAX_BIND_ERRORS_SHOWN)
        .cloned()
        .chain(tail)
}

/// The pid file to write: `pidlogfile`, else rinetd's default in drop-in mode.
fn pidfile_for(cfg: &ResolvedConfig, rinetd_defaults: bool) -> Option<PathBuf> {
    cfg.config
        .pidlogfile
        .clone()
        .or_else(|| rinetd_defaults.then(|| PathBuf::from(daemon::DEFAULT_PIDFILE)))
}

/// Writes the pid file, if one applies; a failure is logged with the path
/// and is not fatal (rinetd 0.73 carries on too).
fn write_pidfile(path: Option<&std::path::Path>) {
    if let Some(path) = path {
        if let Err(e) = daemon::write_pidfile(path) {
            log::error!("cannot write the pid file {}: {e}", path.display());
        }
    }
}

/// The log file format a configuration asks for.
fn log_format(cfg: &ResolvedConfig) -> Format {
    if cfg.config.logcommon {
        Format::Common
    } else {
        Format::Tab
    }
}

/// Whether to reload when the files change: `--watch`, else the file's
/// `watch`, else off (the one order of `oi_config::settings`).
fn watch_wanted(flags: &oi_config::Globals, file: &oi_config::Globals) -> bool {
    oi_config::settings::resolve_globals(flags, file)
        .watch
        .unwrap_or(false)
}

/// Pairs bound sockets with their rules' routes.
fn routes(cfg: &ResolvedConfig, sockets: Vec<BoundSocket>) -> Vec<(BoundSocket, Route)> {
    sockets.into_iter().zip(Route::all(cfg)).collect()
}

/// What the signal loop needs while the server runs.
struct Service {
    /// The executor threads, for draining open connections at the end.
    runtime: Arc<Runtime>,
    /// The server's shared state: the log to reopen and flush.
    shared: Arc<Shared>,
    /// Reloads go to the server here; closing it stops the listeners.
    commands: Sender<Command>,
    /// Absolute path of the configuration file.
    path: PathBuf,
    /// The path as the user gave it, for messages.
    file: String,
    /// Whether rinetd's default pid file applies (drop-in mode).
    rinetd_defaults: bool,
    /// How long open connections may run on after SIGTERM.
    drain: Duration,
    /// The command line's flags that override rule options, applied to every reload too.
    command_line: oi_config::RuleOptions,
    /// The command line's flags that override globals (`--watch`), for
    /// deciding after each reload whether to watch the files.
    flags: oi_config::Globals,
    /// The file watcher, while `--watch` or the file's `watch on` asks for one.
    watcher: Option<Watcher>,
    /// Given to each watcher: it sends here when the files change.
    changed: Sender<()>,
    /// Where file changes arrive: a reload, as SIGHUP's.
    changes: Receiver<()>,
    /// The metrics endpoint and control socket, whose sockets an upgrade hands over.
    observer: Observer,
    /// The binary `oi upgrade` starts by default: this one's path as started.
    binary: PathBuf,
    /// The arguments it starts it with: this one's.
    args: Vec<std::ffi::OsString>,
    /// `oi upgrade` requests, from the control socket.
    upgrades: Receiver<UpgradeAsk>,
}

/// Sorts what an old oi handed over: rules' listeners go to `inherited`
/// (matched by address like systemd's), the observer's are returned.
fn adopt(handed: Vec<handover::Handed>, inherited: &mut listen::Inherited) -> Given {
    let mut given = Given::default();
    for (i, h) in handed.into_iter().enumerate() {
        match h.role {
            handover::Role::Listener => {
                let n = i32::try_from(i).unwrap_or(i32::MAX);
                inherited.add_handed(h.fd, n, h.file);
            }
            handover::Role::Metrics => given.metrics = Some(h.fd.into()),
            handover::Role::Control => {
                given.control = Some(h.fd.into());
                given.control_file = h.file;
            }
        }
    }
    given
}

/// Takes up the live connections the previous oi pauses after `ready`:
/// the listeners start those whose rule they serve, which begin to pump
/// only once the previous oi has been told (so never both pump one).
async fn take_connections(taker: handover::Taker, commands: &Sender<Command>, shared: &Shared) {
    let (taker, offered) = smol::unblock(move || {
        let offered = taker.connections();
        (taker, offered)
    })
    .await;
    let offered = match offered {
        Ok(handed) => {
            if let Some(c) = &handed.counters {
                let rules = shared.stats.carry_on(c);
                log::info!(
                    "upgrade: the counters of {rules} rule(s) carry on from the previous oi"
                );
            }
            handed.offered
        }
        Err(e) => {
            return log::warn!("no live connections taken over: {e}");
        }
    };
    let count = offered.len();
    // Bytes in flight per connection, for the log line.
    let unsent: Vec<(u64, usize)> = offered
        .iter()
        .map(|o| (o.id, o.up.unsent.len() + o.down.unsent.len()))
        .collect();
    let (reply, ids) = async_channel::bounded(1);
    let (go, gate) = async_channel::bounded(1);
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let adopt = Command::Adopt {
        conns: offered,
        reply,
        gate,
        go: started.clone(),
    };
    let ids = match commands.send(adopt).await {
        Ok(()) => ids.recv().await.unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let carried: usize = unsent
        .iter()
        .filter(|(id, _)| ids.contains(id))
        .map(|(_, n)| n)
        .sum();
    let confirmed = smol::unblock(move || taker.adopted(&ids).then_some(ids.len())).await;
    match confirmed {
        Some(n) => {
            started.store(true, std::sync::atomic::Ordering::Release);
            log::info!(
                "took over {n} of {count} live connection(s), with {carried} byte(s) in flight"
            );
        }
        // The previous oi keeps them: so it does the UDP associations.
        None => shared.parking.unstash_all(),
    }
    // Closing the gate starts them (or, unconfirmed, closes them).
    drop(go);
}

/// Tells the old oi, if one is handing over, why this one cannot serve.
fn give_up(taker: &mut Option<handover::Taker>, why: &str) {
    if let Some(t) = taker.take() {
        t.failed(why);
    }
}

/// What woke the service loop.
enum Wakeup {
    /// A signal (`None`: the signal stream ended).
    Signal(Option<std::io::Result<Signal>>),
    /// The watcher saw the configuration change.
    Changed,
    /// `oi upgrade` asked for an upgrade.
    Upgrade(UpgradeAsk),
}

/// Starts a watcher on the configuration at `path` (`loaded`: the digest
/// of the files the running configuration was read from, when known); a
/// failure (no inotify descriptor left, say) is logged and oi serves on,
/// reloading on SIGHUP.
fn start_watcher(path: &Path, changed: &Sender<()>, loaded: Option<u64>) -> Option<Watcher> {
    match Watcher::start(path.to_path_buf(), changed.clone(), loaded) {
        Ok(w) => Some(w),
        Err(e) => {
            log::error!(
                "cannot watch {} for changes: {e}; SIGHUP still reloads",
                path.display()
            );
            None
        }
    }
}

impl Service {
    /// Serves until SIGINT or SIGTERM, reloading on SIGHUP; then stops the
    /// listeners, drains, and flushes the log.
    /// A change the watcher saw takes the SIGHUP path.
    async fn until_stopped(mut self, server: smol::Task<()>, mut signals: Signals) -> ExitCode {
        let mut handed_over = false;
        loop {
            let wakeup = async { Wakeup::Signal(signals.next().await) }
                .or(async {
                    // Never closed: `self.changed` is a sender.
                    let _ = self.changes.recv().await;
                    Wakeup::Changed
                })
                .or(async {
                    match self.upgrades.recv().await {
                        Ok(ask) => Wakeup::Upgrade(ask),
                        // The observer stopped: no more requests.
                        Err(_) => futures_lite::future::pending().await,
                    }
                })
                .await;
            match wakeup {
                Wakeup::Signal(Some(Ok(Signal::Hup))) | Wakeup::Changed => {
                    notify::reloading();
                    let (status, watch) = self.reload().await;
                    notify::ready(&status);
                    if let Some(watch) = watch {
                        self.set_watching(watch);
                    }
                }
                Wakeup::Signal(Some(Ok(Signal::Usr1))) => self.status(),
                Wakeup::Signal(Some(Ok(Signal::Usr2))) => {
                    if self.upgrade(None).await.is_ok() {
                        handed_over = true;
                        break;
                    }
                }
                Wakeup::Upgrade(ask) => {
                    let outcome = self.upgrade(ask.binary).await;
                    let done = outcome.is_ok();
                    // The answer is written before this process goes on
                    // (and may exit): the observer drops `written` then.
                    let (written, wait) = async_channel::bounded::<()>(1);
                    if ask.reply.send((outcome, written)).await.is_ok() {
                        let _ = wait
                            .recv()
                            .or(async {
                                async_io::Timer::after(Duration::from_secs(5)).await;
                                Ok(())
                            })
                            .await;
                    }
                    if done {
                        handed_over = true;
                        break;
                    }
                }
                Wakeup::Signal(Some(Ok(_)) | None) => break,
                Wakeup::Signal(Some(Err(e))) => log::warn!("signal stream: {e}"),
            }
        }
        // Stops the watcher thread before the drain.
        self.watcher = None;
        // A status request that arrived together with the stop is still
        // answered (the stream does not promise the order of signals that
        // are pending at once). Bounded: only what is already there.
        for _ in 0..8 {
            match futures_lite::future::poll_once(signals.next()).await {
                Some(Some(Ok(Signal::Usr1))) => self.status(),
                Some(Some(_)) => {}
                _ => break,
            }
        }
        if handed_over {
            // The files are the new oi's now; and it, not this one, is the
            // service systemd watches: no STOPPING=1.
            let _ = self.commands.send(Command::KeepFiles).await;
            self.observer.handed_over();
        } else {
            log::info!("stopping");
            notify::stopping();
        }
        self.commands.close();
        server.await;
        // A second SIGTERM or SIGINT cuts the drain short.
        let again = async {
            while let Some(sig) = signals.next().await {
                if matches!(sig, Ok(Signal::Int | Signal::Term)) {
                    log::info!("second signal: exiting without waiting for connections");
                    return;
                }
            }
        };
        // After a hand-over the open connections are this process's to
        // finish (they are not handed over yet): as long as they last.
        let drain = if handed_over {
            Duration::from_secs(365 * 24 * 3600)
        } else {
            self.drain
        };
        self.runtime.drained(drain).or(again).await;
        if handed_over {
            // UDP associations the new oi did not take, served until they
            // end (their idle timeout at most; a second signal exits).
            let shared = self.shared.clone();
            let kept = smol::unblock(move || shared.parking.wait_leftovers());
            kept.or(async {
                let mut signals = signals;
                while let Some(sig) = signals.next().await {
                    if matches!(sig, Ok(Signal::Int | Signal::Term)) {
                        return;
                    }
                }
            })
            .await;
        }
        let log = self.shared.log.clone();
        smol::unblock(move || log.flush()).await;
        ExitCode::SUCCESS
    }

    /// Hands every listening socket to a new oi (`binary`, else this one's
    /// path as started), which then serves; returns its pid. On error
    /// nothing changed here, and the message says why.
    async fn upgrade(&self, binary: Option<PathBuf>) -> Result<String, String> {
        let me = std::process::id();
        match self.hand_over(binary).await {
            Ok(pid) => {
                let line = format!(
                    "upgraded: oi pid {pid} serves now; this one (pid {me}) stops \
                     accepting and exits when the connections it kept end"
                );
                log::info!("{line}");
                Ok(line)
            }
            Err(e) => {
                let line = format!("upgrade failed: {e}; this oi keeps serving");
                log::error!("{line}");
                Err(line)
            }
        }
    }

    /// [`Service::upgrade`]'s work: returns the new process's pid.
    async fn hand_over(&self, binary: Option<PathBuf>) -> Result<u32, String> {
        let (reply, copies) = async_channel::bounded(1);
        let stopped = || "the server has stopped".to_string();
        self.commands
            .send(Command::Sockets { reply })
            .await
            .map_err(|_| stopped())?;
        let fds = copies.recv().await.map_err(|_| stopped())?;
        let listener = |(fd, file)| handover::Handed {
            role: handover::Role::Listener,
            fd,
            file,
        };
        let mut handed: Vec<handover::Handed> = fds.into_iter().map(listener).collect();
        let observed = self.observer.copies();
        if let Some(l) = observed.metrics {
            let role = handover::Role::Metrics;
            let (fd, file) = (l.into(), None);
            handed.push(handover::Handed { role, fd, file });
        }
        if let Some(l) = observed.control {
            let role = handover::Role::Control;
            let (fd, file) = (l.into(), observed.control_file);
            handed.push(handover::Handed { role, fd, file });
        }
        let binary = binary.unwrap_or_else(|| self.binary.clone());
        let args = self.args.clone();
        log::info!("upgrade: starting {}", binary.display());
        let shared = self.shared.clone();
        smol::unblock(move || {
            let counters = || shared.stats.carried();
            handover::hand_over(&binary, &args, &handed, &shared.parking, &counters)
        })
        .await
    }

    /// Answers SIGUSR1 with one line on the diagnostics log: the STATS
    /// summary of the same snapshot every other output reads, plus the
    /// bounded queues' state.
    fn status(&self) {
        let s = self.shared.snapshot();
        log::info!(
            "status: {}; UDP: {} byte(s) queued towards TCP backends, {} datagram(s) \
             dropped, {} dropped by accept-proxy; limit-reached: {} connection(s) refused; \
             log file: {} line(s) queued, {} dropped",
            crate::observe::format::stats_line(&s),
            s.udp_queued_bytes,
            s.udp_datagrams_dropped,
            s.totals.udp_proxy_dropped,
            s.totals.limit_reached,
            s.log_lines_queued,
            s.log_lines_dropped
        );
    }

    /// Starts or stops the watcher after a reload, as the new file's `watch`
    /// (under `--watch`) says; a running watcher has already followed the
    /// files' new include list.
    fn set_watching(&mut self, on: bool) {
        match (on, self.watcher.is_some()) {
            (true, false) => self.watcher = start_watcher(&self.path, &self.changed, None),
            (false, true) => {
                // Waits for the thread, which ends at once (at most one scan).
                self.watcher = None;
                log::info!("no longer watching {} for changes", self.file);
            }
            _ => {}
        }
    }

    /// Re-reads the configuration and applies it; on error keeps the old one
    /// running. Returns a status line for the service manager and, when the
    /// reload succeeded, whether the files are now to be watched.
    async fn reload(&self) -> (String, Option<bool>) {
        let path = self.path.clone();
        let file = self.file.clone();
        // The descriptor budget is checked on the parsed rules, before their
        // names are looked up: resolving 32,768 rules only to refuse them
        // left 30 MiB with the allocator after the reload.
        // A rinetd.conf file is refused on the first pass's count, before
        // any rule is built: building 32,768 rules to refuse them left 9 MiB
        // with the allocator.
        let loaded = smol::unblock(move || {
            let parsed = oi_config::load_within(&path, Some(listen::rules_budget()))?;
            let counted = parsed.rules_over_budget.unwrap_or(parsed.rules.len());
            if let Err(refused) = listen::check_budget(&file, counted) {
                return Ok(Err(refused));
            }
            let services = oi_config::services::Services::system();
            let shown = path.display().to_string();
            oi_config::resolve(parsed, &services)
                .map(Ok)
                .map_err(|e| e.with_file(&shown))
        });
        let cfg = match loaded.await {
            Ok(Ok(cfg)) => cfg.with_command_line(&self.command_line),
            Ok(Err(refused)) => {
                log::error!("{refused}");
                log::error!("reload refused: keeping the previous configuration");
                self.shared.stats.reloaded(false);
                let status = "reload refused: previous configuration still serving";
                return (status.into(), None);
            }
            Err(e) => {
                for line in e.with_file(&self.file).to_string().lines() {
                    log::error!("{line}");
                }
                log::error!("reload failed: keeping the previous configuration");
                self.shared.stats.reloaded(false);
                let status = "reload failed: previous configuration still serving";
                return (status.into(), None);
            }
        };
        let log = self.shared.log.clone();
        let logfile = cfg.config.logfile.clone();
        let format = log_format(&cfg);
        let pidfile = pidfile_for(&cfg, self.rinetd_defaults);
        let status = format!("serving {} rule(s)", cfg.rules.len());
        let max_connections = cfg.config.globals.max_connections;
        let watch = watch_wanted(&self.flags, &cfg.config.globals);
        // The listeners first: a configuration they refuse changes nothing,
        // the log file and the global maxconn included.
        let (done, errors) = async_channel::bounded(1);
        let command = Command::Reload {
            config: cfg,
            file: self.file.clone(),
            done,
        };
        if self.commands.send(command).await.is_err() {
            return ("reload failed: the server has stopped".into(), None);
        }
        match errors.recv().await {
            Ok(Ok(errors)) => {
                for e in capped(&errors) {
                    log::error!("{e}");
                }
            }
            Ok(Err(refused)) => {
                for e in capped(&refused) {
                    log::error!("{e}");
                }
                log::error!("reload refused: keeping the previous configuration");
                self.shared.stats.reloaded(false);
                let status = "reload refused: previous configuration still serving";
                return (status.into(), None);
            }
            Err(_) => return ("reload failed: the server has stopped".into(), None),
        }
        // The global `maxconn` follows the file; open connections stay.
        self.shared.set_max_connections(max_connections);
        let reopened = smol::unblock(move || {
            let reopened = log.reopen(logfile, format);
            write_pidfile(pidfile.as_deref());
            reopened
        })
        .await;
        if let Err(e) = reopened {
            log::error!("cannot reopen the log file: {e}");
        }
        self.shared.stats.reloaded(true);
        log::info!("reloaded {}: {status}", self.file);
        (status, Some(watch))
    }
}
