//! Program entry: ties configuration, logging, signals and the server together.

use crate::cli::Cli;
use crate::config::{self, ResolvedConfig};
use crate::daemon;
use crate::logfile::{Format, LogHandle};
use crate::notify;
use crate::server::{self, BoundSocket, Route, Server, Settings, Shared};
use crate::spread::Threads;
use async_signal::{Signal, Signals};
use futures_lite::StreamExt;
use smol::Executor;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs oi with parsed command-line options; returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    if cli.check {
        return crate::check::run(&cli.conf_file);
    }
    let as_rinetd = daemon::invoked_as_rinetd();
    let background = (cli.daemon || as_rinetd) && !cli.foreground;
    init_diagnostics();
    // The daemon changes to / before reading anything again: pin the path now.
    let conf = std::path::absolute(&cli.conf_file).unwrap_or_else(|_| cli.conf_file.clone());
    let file = cli.conf_file.display().to_string();
    let cfg = match config::load_resolved(&conf) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}", e.with_file(&file));
            return ExitCode::FAILURE;
        }
    };
    let sockets = match server::bind_all(&cfg, &file) {
        Ok(s) => s,
        Err(errors) => {
            for e in errors {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let pidfile = pidfile_for(&cfg, as_rinetd || cli.daemon);
    let write_pid = || pidfile.as_deref().map_or(Ok(()), daemon::write_pidfile);
    let started = if background {
        daemon::daemonize(write_pid)
            .map(|()| daemon::init_syslog(if as_rinetd { "rinetd" } else { "oi" }))
    } else {
        write_pid()
    };
    if let Err(e) = started {
        eprintln!("cannot start: {e}");
        return ExitCode::FAILURE;
    }
    let log = match LogHandle::start() {
        Ok(l) => l,
        Err(e) => {
            log::error!("cannot start the log writer: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = log.reopen(cfg.config.logfile.clone(), log_format(&cfg)) {
        // rinetd carries on without its log file; so do we, loudly.
        log::error!("cannot open log file {:?}: {e}", cfg.config.logfile);
    }
    let settings = Settings {
        buffer_size: cli.buffer_size as usize,
        connect_timeout: secs(cli.connect_timeout),
        half_close_idle: secs(cli.half_close_timeout),
        splice: cli.splice.into(),
    };
    let shared = Shared::new(settings, log);
    let threads = cli.threads.unwrap_or_else(num_cpus::get).max(1);
    // One executor per thread, each run by that thread alone (see server::Server).
    let ex: Arc<Executor<'static>> = Arc::new(Executor::new());
    let mut executors = vec![ex.clone()];
    for i in 1..threads {
        let own: Arc<Executor<'static>> = Arc::new(Executor::new());
        executors.push(own.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("oi-worker-{i}"))
            .spawn(move || smol::block_on(own.run(futures_lite::future::pending::<()>())));
        if let Err(e) = spawned {
            log::error!("cannot start worker thread: {e}");
            return ExitCode::FAILURE;
        }
    }
    let reloader = Reloader {
        path: conf,
        file,
        pidfile,
        default_pidfile: as_rinetd || cli.daemon,
    };
    let main = serve_until_signalled(executors, shared, cfg, sockets, reloader, secs(cli.drain));
    // Spawned rather than passed to `run` directly: `run` re-polls its future
    // every time the executor yields, which would poll the signal stream (a
    // failed read) hundreds of times per GiB forwarded.
    let main = ex.spawn(main);
    smol::block_on(ex.run(main))
}

/// The pid file to write: `pidlogfile`, else rinetd's default in drop-in mode.
fn pidfile_for(cfg: &ResolvedConfig, default: bool) -> Option<PathBuf> {
    cfg.config
        .pidlogfile
        .clone()
        .or_else(|| default.then(|| PathBuf::from(daemon::DEFAULT_PIDFILE)))
}

/// What a reload needs to know besides the server.
struct Reloader {
    /// Absolute path of the configuration file.
    path: PathBuf,
    /// The path as the user gave it, for messages.
    file: String,
    /// The pid file currently written, if any.
    pidfile: Option<PathBuf>,
    /// Whether rinetd's default pid file applies (drop-in mode).
    default_pidfile: bool,
}

/// Diagnostics go to stderr at `info` unless RUST_LOG says otherwise.
fn init_diagnostics() {
    let env = env_logger::Env::default().default_filter_or("info");
    let _ = env_logger::Builder::from_env(env).try_init();
}

/// Converts a seconds option to a Duration, treating nonsense as zero.
fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
}

/// The log file format a configuration asks for.
fn log_format(cfg: &ResolvedConfig) -> Format {
    if cfg.config.logcommon {
        Format::Common
    } else {
        Format::Tab
    }
}

/// Pairs bound sockets with their rules' routes.
fn routes(cfg: &ResolvedConfig, sockets: Vec<BoundSocket>) -> Vec<(BoundSocket, Route)> {
    let global = Arc::new(cfg.config.global_acl.clone());
    sockets
        .into_iter()
        .zip(cfg.rules.iter())
        .map(|(s, r)| (s, Route::new(r.clone(), global.clone())))
        .collect()
}

/// Serves until SIGINT or SIGTERM; SIGHUP reloads the configuration file.
async fn serve_until_signalled(
    executors: Vec<Arc<Executor<'static>>>,
    shared: Arc<Shared>,
    cfg: ResolvedConfig,
    sockets: Vec<BoundSocket>,
    mut reloader: Reloader,
    drain: Duration,
) -> ExitCode {
    let mut signals = match Signals::new([Signal::Hup, Signal::Int, Signal::Term]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Server::new(executors, shared.clone()).and_then(|mut server| {
        server.start(routes(&cfg, sockets))?;
        Ok(server)
    });
    let mut server = match started {
        Ok(server) => server,
        Err(e) => {
            eprintln!("cannot start listeners: {e}");
            return ExitCode::FAILURE;
        }
    };
    let status = format!("serving {} rule(s)", cfg.rules.len());
    log::info!("oi {} {status}", env!("CARGO_PKG_VERSION"));
    notify::ready(&status);
    while let Some(sig) = signals.next().await {
        match sig {
            Ok(Signal::Hup) => {
                notify::reloading();
                let status = reload(&mut server, &mut reloader).await;
                notify::ready(&status);
            }
            Ok(_) => break,
            Err(e) => log::warn!("signal stream: {e}"),
        }
    }
    log::info!("stopping");
    notify::stopping();
    let threads = server.threads().clone();
    server.close().await;
    wait_for_drain(&threads, drain).await;
    let log = shared.log.clone();
    smol::unblock(move || log.flush()).await;
    ExitCode::SUCCESS
}

/// Re-reads the configuration and applies it; on error keeps the old one
/// running. Returns a status line for the service manager.
async fn reload(server: &mut Server, r: &mut Reloader) -> String {
    let path = r.path.clone();
    match smol::unblock(move || config::load_resolved(&path)).await {
        Err(e) => {
            for line in e.with_file(&r.file).to_string().lines() {
                log::error!("{line}");
            }
            log::error!("reload failed: keeping the previous configuration");
            "reload failed: previous configuration still serving".into()
        }
        Ok(cfg) => {
            let log = server.shared().log.clone();
            let logfile = cfg.config.logfile.clone();
            let format = log_format(&cfg);
            let pidfile = pidfile_for(&cfg, r.default_pidfile);
            let (reopened, pid) = smol::unblock(move || {
                let reopened = log.reopen(logfile, format);
                let pid = pidfile.as_deref().map_or(Ok(()), daemon::write_pidfile);
                (reopened, pid.map(|()| pidfile))
            })
            .await;
            if let Err(e) = reopened {
                log::error!("cannot reopen the log file: {e}");
            }
            match pid {
                Ok(p) => r.pidfile = p,
                Err(e) => log::error!("cannot write the pid file: {e}"),
            }
            for e in server.apply(&cfg, &r.file).await {
                log::error!("{e}");
            }
            let status = format!("serving {} rule(s)", cfg.rules.len());
            log::info!("reloaded {}: {status}", r.file);
            status
        }
    }
}

/// Waits up to `drain` for open connections to finish.
async fn wait_for_drain(threads: &Threads, drain: Duration) {
    let deadline = Instant::now() + drain;
    while threads.open_total() > 0 && Instant::now() < deadline {
        async_io::Timer::after(Duration::from_millis(50)).await;
    }
}
