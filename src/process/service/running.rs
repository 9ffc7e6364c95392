//! The service once started: its state, and the loop that waits for a
//! signal, a control-socket command or a file change and acts on it
//! (reload, status, watch on and off, upgrade, stop and drain).

use super::*;
use crate::handover::Successor;
use crate::stats::Sent;

/// What the signal loop needs while the server runs.
pub(super) struct Service {
    /// The executor threads, for draining open connections at the end.
    pub(super) runtime: Arc<Runtime>,
    /// The server's shared state: the log to reopen and flush.
    pub(super) shared: Arc<Shared>,
    /// Reloads go to the server here; closing it stops the listeners.
    pub(super) commands: Sender<Command>,
    /// Absolute path of the configuration file.
    pub(super) path: PathBuf,
    /// The path as the user gave it, for messages.
    pub(super) file: String,
    /// Whether rinetd's default pid file applies (drop-in mode).
    pub(super) rinetd_defaults: bool,
    /// How long open connections may run on after SIGTERM.
    pub(super) drain: Duration,
    /// The command line's flags that override rule options, applied to every reload too.
    pub(super) command_line: oi_config::RuleOptions,
    /// The command line's flags that override globals (`--watch`), for
    /// deciding after each reload whether to watch the files.
    pub(super) flags: oi_config::Globals,
    /// The file watcher, while `--watch` or the file's `watch on` asks for one.
    pub(super) watcher: Option<Watcher>,
    /// What the running configuration and the last failed reload were read
    /// from: each reload records here, the watcher decides from it.
    pub(super) reads: Reads,
    /// Given to each watcher: it sends here when the files change.
    pub(super) changed: Sender<()>,
    /// Where file changes arrive: a reload, as SIGHUP's.
    pub(super) changes: Receiver<()>,
    /// The metrics endpoint and control socket, whose sockets an upgrade hands over.
    pub(super) observer: Observer,
    /// The binary `oi upgrade` starts by default: this one's path as started.
    pub(super) binary: PathBuf,
    /// The arguments it starts it with: this one's.
    pub(super) args: Vec<std::ffi::OsString>,
    /// `oi upgrade` requests, from the control socket.
    pub(super) upgrades: Receiver<UpgradeAsk>,
    /// `oi reload` and `oi config` requests, from the control socket.
    pub(super) asks: Receiver<crate::observe::ServiceAsk>,
    /// The running configuration as `oi config` prints it, replaced by
    /// each successful reload.
    pub(super) running: std::sync::Mutex<String>,
    /// How oi was asked to drop root (`--user NAME`), when it runs as that
    /// user: a reload cannot get back a capability it dropped then.
    pub(super) dropped: Option<String>,
}

/// What the old oi keeps once it has handed over: the new oi, which gets
/// what this one counts while it drains, and what it had been sent.
pub(super) struct HandedOver {
    /// The new oi, and the conversation with it.
    pub(super) successor: Successor,
    /// The counters as sent, which the last counts are compared with.
    pub(super) sent: Sent,
}

impl HandedOver {
    /// The new oi's pid.
    pub(super) fn pid(&self) -> u32 {
        self.successor.pid
    }

    /// Once the last kept connection has ended: sends the new oi what this
    /// one counted since it sent its counters, for its totals.
    pub(super) async fn report(self, shared: &Shared) {
        let drained = shared.stats.drained_since(&self.sent);
        let successor = self.successor;
        smol::unblock(move || successor.report(&drained)).await;
    }
}

/// What woke the service loop.
pub(super) enum Wakeup {
    /// A signal (`None`: the signal stream ended).
    Signal(Option<std::io::Result<Signal>>),
    /// The watcher saw the configuration change.
    Changed,
    /// `oi upgrade` asked for an upgrade.
    Upgrade(UpgradeAsk),
    /// The previous oi asked the health question (or why it did not).
    Health((handover::Taker, Result<(), String>)),
    /// `oi reload` (or another request the service answers).
    Ask(crate::observe::ServiceAsk),
}

/// Starts a watcher on the configuration at `path` (`reads`: what the
/// running configuration was read from); a failure (no inotify descriptor
/// left, say) is logged and oi serves on, reloading on SIGHUP.
pub(super) fn start_watcher(path: &Path, changed: &Sender<()>, reads: &Reads) -> Option<Watcher> {
    match Watcher::start(path.to_path_buf(), changed.clone(), reads.clone()) {
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
    /// A change the watcher saw takes the SIGHUP path. Started by `oi
    /// upgrade` (`taker`), it answers the previous oi's health question.
    pub(super) async fn until_stopped(
        mut self,
        server: smol::Task<()>,
        mut signals: Signals,
        taker: Option<handover::Taker>,
    ) -> ExitCode {
        let mut handed: Option<HandedOver> = None;
        // Waits off the executor for the previous oi's question.
        let mut question = taker.map(|t| {
            smol::unblock(move || {
                let asked = t.question();
                (t, asked)
            })
        });
        loop {
            // An `oi upgrade` that reached this oi while it was still being
            // handed over waits for the health question to be answered:
            // handing over before would leave the previous oi unanswered.
            let taking_over = question.is_some();
            let wakeup = async { Wakeup::Signal(signals.next().await) }
                .or(async {
                    // Never closed: `self.changed` is a sender.
                    let _ = self.changes.recv().await;
                    Wakeup::Changed
                })
                .or(async {
                    if taking_over {
                        return futures_lite::future::pending().await;
                    }
                    match self.upgrades.recv().await {
                        Ok(ask) => Wakeup::Upgrade(ask),
                        // The observer stopped: no more requests.
                        Err(_) => futures_lite::future::pending().await,
                    }
                })
                .or(async {
                    match self.asks.recv().await {
                        Ok(ask) => Wakeup::Ask(ask),
                        Err(_) => futures_lite::future::pending().await,
                    }
                })
                .or(async {
                    match question.as_mut() {
                        Some(asked) => Wakeup::Health(asked.await),
                        None => futures_lite::future::pending().await,
                    }
                })
                .await;
            match wakeup {
                Wakeup::Signal(Some(Ok(Signal::Hup))) | Wakeup::Changed => {
                    notify::reloading();
                    let (status, watch, _) = self.reload().await;
                    notify::ready(&status);
                    if let Some(watch) = watch {
                        self.set_watching(watch);
                    }
                }
                Wakeup::Health((taker, asked)) => {
                    question = None;
                    self.answer_health(taker, asked).await;
                }
                Wakeup::Ask(crate::observe::ServiceAsk::Reload(reply)) => {
                    notify::reloading();
                    let (status, watch, errors) = self.reload().await;
                    notify::ready(&status);
                    let answer = match watch {
                        Some(watch) => {
                            self.set_watching(watch);
                            let mut text = format!("reloaded: {status}\n");
                            for e in &errors {
                                text.push_str(&format!("warning: {e}\n"));
                            }
                            Ok(text)
                        }
                        None => {
                            let mut text = errors.join("\n");
                            text.push_str(&format!("\n{status}\n"));
                            Err(text)
                        }
                    };
                    let _ = reply.send(answer).await;
                }
                Wakeup::Ask(crate::observe::ServiceAsk::Config(reply)) => {
                    let text = self.running.lock().map(|t| t.clone());
                    let _ = reply
                        .send(text.map_err(|_| "no configuration".into()))
                        .await;
                }
                Wakeup::Signal(Some(Ok(Signal::Usr1))) => {
                    self.status();
                    self.rotate_log().await;
                }
                Wakeup::Signal(Some(Ok(Signal::Usr2))) => {
                    if let Ok((_, h)) = self.upgrade_alone(None).await {
                        handed = Some(h);
                        break;
                    }
                }
                Wakeup::Upgrade(ask) => {
                    let outcome = self.upgrade_alone(ask.binary).await;
                    let (outcome, done) = match outcome {
                        Ok((line, h)) => (Ok(line), Some(h)),
                        Err(e) => (Err(e), None),
                    };
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
                    if done.is_some() {
                        handed = done;
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
        let handed_over = handed.is_some();
        if handed.is_some() {
            // The files are the new oi's now; and it, not this one, is the
            // service systemd watches: no STOPPING=1. The observer stopped
            // accepting already; upgrade requests it had read are refused.
            let _ = self.commands.send(Command::KeepFiles).await;
        } else {
            log::info!("stopping");
            notify::stopping();
        }
        // No request waits on a loop that has ended.
        self.refuse_requests(handed.as_ref().map(HandedOver::pid));
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
        if let Some(h) = handed {
            // What this oi counted since it sent its counters (the
            // connections it kept) goes into the new oi's totals.
            h.report(&self.shared).await;
        }
        let log = self.shared.log.clone();
        smol::unblock(move || log.flush()).await;
        ExitCode::SUCCESS
    }

    /// [`Service::upgrade`], refusing at once every other `oi upgrade`
    /// that arrives meanwhile (it would otherwise wait for this one and,
    /// after it, for a process that has handed over).
    async fn upgrade_alone(
        &mut self,
        binary: Option<PathBuf>,
    ) -> Result<(String, HandedOver), String> {
        let others = self.upgrades.clone();
        let refuse = async move {
            // Ends with the upgrade (or when the observer stops).
            while let Ok(ask) = others.recv().await {
                let (written, _) = async_channel::bounded::<()>(1);
                let why = "an upgrade is under way: ask again once it has ended".to_string();
                let _ = ask.reply.try_send((Err(why), written));
            }
            futures_lite::future::pending().await
        };
        self.upgrade(binary).or(refuse).await
    }

    /// Once the loop has ended (a hand-over to `pid`, or a stop): closes
    /// the channels of the requests it answered (`oi upgrade`, `oi reload`,
    /// `oi config`) and refuses those already in them, so none waits on
    /// this process: a request still on its way is refused by the closed
    /// channel.
    fn refuse_requests(&self, pid: Option<u32>) {
        let why = match pid {
            Some(pid) => format!(
                "this oi (pid {}) has handed over to oi pid {pid} and only finishes the \
                 connections it kept: ask the new one",
                std::process::id()
            ),
            None => "this oi is stopping".to_string(),
        };
        self.upgrades.close();
        self.asks.close();
        // Bounded: each channel holds one request at most.
        while let Ok(ask) = self.upgrades.try_recv() {
            let (written, _) = async_channel::bounded::<()>(1);
            let _ = ask.reply.try_send((Err(why.clone()), written));
        }
        while let Ok(ask) = self.asks.try_recv() {
            let reply = match ask {
                crate::observe::ServiceAsk::Reload(r) | crate::observe::ServiceAsk::Config(r) => r,
            };
            let _ = reply.try_send(Err(why.clone()));
        }
    }

    /// Answers SIGUSR1 with one line on the diagnostics log: the STATS
    /// summary of the same snapshot every other output reads, plus the
    /// bounded queues' state.
    pub(super) fn status(&self) {
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

    /// Answers SIGUSR1's other half, as nginx does: opens the log file's
    /// path again, so logrotate can move the file and `create` a new one
    /// (dist/oi.logrotate). Without a log file, nothing happens.
    async fn rotate_log(&self) {
        let log = self.shared.log.clone();
        match smol::unblock(move || log.rotate()).await {
            Ok(true) => log::info!("SIGUSR1: log file reopened"),
            Ok(false) => {}
            Err(e) => log::error!(
                reason = "log-reopen-failed";
                "SIGUSR1: cannot reopen the log file: {e}; writing on to the file open before"
            ),
        }
    }

    /// Starts or stops the watcher after a reload, as the new file's `watch`
    /// (under `--watch`) says; a running watcher has already followed the
    /// files' new include list.
    pub(super) fn set_watching(&mut self, on: bool) {
        match (on, self.watcher.is_some()) {
            (true, false) => self.watcher = start_watcher(&self.path, &self.changed, &self.reads),
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
    /// reload succeeded, whether the files are now to be watched. Records
    /// the digest of what it read, and whether it took effect, in `reads`.
    /// The third value is every error, as `--check` prints them (for `oi
    /// reload`; SIGHUP has them in the log).
    pub(super) async fn reload(&self) -> (String, Option<bool>, Vec<String>) {
        let path = self.path.clone();
        let file = self.file.clone();
        // The descriptor budget is checked on the parsed rules, before their
        // names are looked up: resolving 32,768 rules only to refuse them
        // left 30 MiB with the allocator after the reload.
        // A rinetd.conf file is refused on the first pass's count, before
        // any rule is built: building 32,768 rules to refuse them left 9 MiB
        // with the allocator.
        let (loaded, read) = smol::unblock(move || {
            let (parsed, read) = crate::watch::load(&path, Some(listen::rules_budget()));
            let loaded = parsed.and_then(|parsed| {
                let running = super::commands::running_text(&parsed, &file);
                let counted = parsed.rules_over_budget.unwrap_or(parsed.rules.len());
                if let Err(refused) = listen::check_budget(&file, counted) {
                    return Ok(Err(refused));
                }
                let services = oi_config::services::Services::system();
                let shown = path.display().to_string();
                oi_config::resolve(parsed, &services)
                    .map_err(|e| e.with_file(&shown))
                    // New certificates and keys are read here, and a bad one
                    // keeps the old configuration (connections keep theirs).
                    .and_then(|c| crate::tls::check(&c, &shown).map(|_| c))
                    .map(|c| Ok((c, running)))
            });
            (loaded, read)
        })
        .await;
        let (loaded, running) = match loaded {
            Ok(Ok((c, running))) => (Ok(Ok(c)), Some(running)),
            Ok(Err(e)) => (Ok(Err(e)), None),
            Err(e) => (Err(e), None),
        };
        let (status, watch, errors) = self.apply(loaded).await;
        if let (Some(text), Some(_)) = (running, watch) {
            if let Ok(mut r) = self.running.lock() {
                *r = text;
            }
        }
        self.reads.record(read, watch.is_some());
        (status, watch, errors)
    }

    /// [`Service::reload`]'s work once the files are read: applies the
    /// configuration `loaded`, or says why not.
    async fn apply(
        &self,
        loaded: Result<Result<ResolvedConfig, String>, oi_config::ConfigErrors>,
    ) -> (String, Option<bool>, Vec<String>) {
        // A transparent rule this process cannot serve is refused like a
        // configuration over the descriptor budget.
        let loaded = loaded.map(|checked| {
            checked.and_then(|cfg| {
                let cfg = cfg.with_command_line(&self.command_line);
                refuse_transparent(&cfg, &self.file, self.dropped.as_deref())?;
                Ok(cfg)
            })
        });
        let cfg = match loaded {
            Ok(Ok(cfg)) => cfg,
            Ok(Err(refused)) => {
                log::error!(reason = "reload-refused"; "{refused}");
                log::error!(
                    reason = "reload-refused";
                    "reload refused: keeping the previous configuration"
                );
                self.shared.stats.reloaded(false);
                let status = "reload refused: previous configuration still serving";
                return (status.into(), None, vec![refused]);
            }
            Err(e) => {
                // As `--check` prints them: the errors, then their count.
                let n = e.count();
                let text = e.with_file(&self.file).to_string();
                for line in text.lines() {
                    log::error!(reason = "reload-failed"; "{line}");
                }
                log::error!(
                    reason = "reload-failed";
                    "reload failed: keeping the previous configuration"
                );
                self.shared.stats.reloaded(false);
                let status = "reload failed: previous configuration still serving";
                let mut errors: Vec<String> = text.lines().map(String::from).collect();
                errors.push(format!(
                    "configuration invalid ({n} error{})",
                    if n == 1 { "" } else { "s" }
                ));
                return (status.into(), None, errors);
            }
        };
        let log = self.shared.log.clone();
        let logfile = cfg.config.logfile.clone();
        let format = log_format(&cfg);
        let pidfile = pidfile_for(&cfg, self.rinetd_defaults);
        let status = format!("serving {} rule(s)", cfg.rules.len());
        let max_connections = cfg.config.globals.max_connections;
        let watch = watch_wanted(&self.flags, &cfg.config.globals);
        warn_if_transparent_cannot_work(&cfg);
        // The listeners first: a configuration they refuse changes nothing,
        // the log file and the global maxconn included.
        let (done, errors) = async_channel::bounded(1);
        let command = Command::Reload {
            config: cfg,
            file: self.file.clone(),
            done,
        };
        if self.commands.send(command).await.is_err() {
            return (
                "reload failed: the server has stopped".into(),
                None,
                Vec::new(),
            );
        }
        let warnings = match errors.recv().await {
            Ok(Ok(errors)) => {
                let errors: Vec<String> = capped(&errors).collect();
                for e in &errors {
                    log::error!("{e}");
                }
                errors
            }
            Ok(Err(refused)) => {
                let refused: Vec<String> = capped(&refused).collect();
                for e in &refused {
                    log::error!(reason = "reload-refused"; "{e}");
                }
                log::error!(
                    reason = "reload-refused";
                    "reload refused: keeping the previous configuration"
                );
                self.shared.stats.reloaded(false);
                let status = "reload refused: previous configuration still serving";
                return (status.into(), None, refused);
            }
            Err(_) => {
                return (
                    "reload failed: the server has stopped".into(),
                    None,
                    Vec::new(),
                )
            }
        };
        // The global `maxconn` follows the file; open connections stay.
        self.shared.set_max_connections(max_connections);
        let reopened = smol::unblock(move || {
            let reopened = log.reopen(logfile, format);
            write_pidfile(pidfile.as_deref());
            reopened
        })
        .await;
        if let Err(e) = reopened {
            log::error!(reason = "log-reopen-failed"; "cannot reopen the log file: {e}");
        }
        self.shared.stats.reloaded(true);
        log::info!("reloaded {}: {status}", self.file);
        (status, Some(watch), warnings)
    }
}
