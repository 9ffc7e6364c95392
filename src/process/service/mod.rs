//! The running service: start-up, signals, reload and shutdown around
//! [`serve`](crate::listen::serve).
//!
//! Start-up order matters: the configuration is read and every socket bound
//! before the process forks (so a port in use fails the start, as rinetd's
//! does), the fork happens before any thread exists, and READY=1 goes out
//! once every listener's loops run.

mod commands;
mod running;
mod upgrade;

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
use crate::sys::watchdog::Watchdog;
use crate::watch::{Reads, Watcher};
use async_channel::{Receiver, Sender};
use async_signal::{Signal, Signals};
use commands::{ask, convert};
use futures_lite::{FutureExt, StreamExt};
use oi_config::ResolvedConfig;
use oi_runtime::Runtime;
use running::{start_watcher, Service};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use upgrade::{adopt, give_up, take_connections};

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
    // The digest of what the load read: a watcher started later compares
    // its first look with this, so a change made while oi was starting is
    // not lost.
    let (config, loaded) = crate::watch::load(&conf, None);
    let shown = conf.display().to_string();
    let mut running = String::new();
    let resolved = config.and_then(|c| {
        running = commands::running_text(&c, &file);
        oi_config::resolve(c, &oi_config::services::Services::system())
            .map_err(|e| e.with_file(&shown))
            // TLS files that do not load stop start-up as --check reports them.
            .and_then(|c| crate::tls::check(&c, &shown).map(|_| c))
    });
    let cfg = match resolved {
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
    let dropped = match drop_privileges(&opts, &cfg, &sockets, taker.is_some()) {
        Ok(dropped) => dropped,
        Err(e) => {
            diagnostics::report(&format!("cannot start: {e}"));
            return ExitCode::FAILURE;
        }
    };
    // A new oi of `oi upgrade` runs with what the old one kept: a
    // transparent rule only its configuration has is refused, as a
    // reload's is, and the old oi serves on.
    if let Err(e) = refuse_transparent(&cfg, &file, dropped.as_deref()) {
        give_up(&mut taker, &e);
        diagnostics::report(&e);
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
    let (service_asked, asks) = async_channel::bounded(1);
    // systemd's watchdog, if the unit sets `WatchdogSec=`: heartbeats on
    // the executor threads, the pings sent from the observer's thread.
    let watchdog = Watchdog::from_env(&runtime);
    let observer = match Observer::start_given(
        shared.clone(),
        opts.observe_with(&cfg.config.globals),
        given,
        Some(upgrade_asked),
        Some(service_asked),
        watchdog,
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
    let reads = Reads::new(loaded);
    let watcher = watch_wanted(&opts.flags, &cfg.config.globals)
        .then(|| start_watcher(&conf, &changed, &reads))
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
        reads,
        changed,
        changes,
        observer,
        binary,
        args,
        upgrades,
        asks,
        running: std::sync::Mutex::new(running),
        dropped,
    };
    let status = format!("serving {} rule(s)", cfg.rules.len());
    runtime.block_on(async move {
        let server = service.runtime.spawn(server);
        log::info!("oi {} {status}", env!("CARGO_PKG_VERSION"));
        let taker = match taker {
            Some(taker) => {
                // The old oi sends the live connections next, then asks the
                // service loop the health question, and stops accepting
                // only on its answer; systemd follows this process from now
                // on (NotifyAccess=all), and the old one again if it fails.
                taker.ready();
                notify::main_pid();
                log::info!("took over from the previous oi");
                Some(take_connections(taker, &service.commands, &service.shared).await)
            }
            None => None,
        };
        drop(release);
        notify::ready(&status);
        service.until_stopped(server, signals, taker).await
    })
}

/// The first `transparent` rule of `cfg`, a rule routed by server name
/// included (each connects from its client's address on its own).
fn first_transparent(cfg: &ResolvedConfig) -> Option<&oi_config::ResolvedRule> {
    cfg.rules
        .iter()
        .flat_map(|r| r.with_routed())
        .find(|r| r.rule.options.transparent == Some(true))
}

/// Refuses `cfg` (a reload's, or the one the new oi of `oi upgrade` reads)
/// when it has a `transparent` rule and this process runs as the user it
/// dropped to (`dropped`: how it was asked to, `--user NAME`) without
/// CAP_NET_ADMIN or CAP_NET_RAW. `--user` keeps CAP_NET_ADMIN only when a
/// rule is transparent at start (the README says so), and a process that
/// dropped it cannot get it back: accepted, the rule would close every
/// client (`local-socket-failed`). `file`: the main file's name, for the
/// message when the rule is in it.
fn refuse_transparent(
    cfg: &ResolvedConfig,
    file: &str,
    dropped: Option<&str>,
) -> Result<(), String> {
    let (Some(how), Some(r)) = (dropped, first_transparent(cfg)) else {
        return Ok(());
    };
    if crate::sys::privileges::may_be_transparent() != Some(false) {
        return Ok(());
    }
    Err(format!(
        "{}:{}: transparent needs CAP_NET_ADMIN, which oi dropped at start-up with {how} \
         (no rule was transparent then); restart oi to add it",
        r.rule.file.as_deref().unwrap_or(file),
        r.rule.line
    ))
}

/// Says at start (and at each reload), what `--check` says: transparent
/// rules whose every client would fail, as the process has neither
/// CAP_NET_ADMIN nor CAP_NET_RAW (not by its own `--user`, which
/// [`refuse_transparent`] refuses).
fn warn_if_transparent_cannot_work(cfg: &ResolvedConfig) {
    if let Some(r) = first_transparent(cfg) {
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
/// Returns how it was asked to (`--user NAME`, or the `user NAME` line),
/// when it runs as that user now, for [`refuse_transparent`].
fn drop_privileges(
    opts: &RunOptions,
    cfg: &ResolvedConfig,
    sockets: &[BoundSocket],
    handed_over: bool,
) -> Result<Option<String>, String> {
    let g = &cfg.config.globals;
    let (user, group, how) = match &opts.user {
        Some(u) => (u, opts.group.as_deref(), format!("--user {u}")),
        None => match &g.user {
            Some(u) => (u, g.group.as_deref(), format!("the line 'user {u}'")),
            None => return Ok(None),
        },
    };
    let target = crate::sys::privileges::resolve(user, group)?;
    // Started by `oi upgrade` from an oi that dropped to this user: it
    // runs as that user already (and could not change again), and the
    // sockets it was handed are that user's.
    if handed_over && target.is_current() {
        return Ok(Some(how));
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
    // Kept for a transparent rule at start; a reload that adds one when
    // none was is refused ([`refuse_transparent`]).
    let transparent = first_transparent(cfg).is_some();
    crate::sys::privileges::drop_to(&target, transparent)
        .map_err(|e| format!("cannot run as {user}: {e}"))?;
    Ok(Some(how))
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
    cfg.config.log_format().into()
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
