//! `oi upgrade` from both sides: the old process starting the new binary
//! and handing it everything (`Service::upgrade`, `Service::hand_over`),
//! and the new process taking up the listeners, the observer's sockets and
//! the live connections it was handed (`adopt`, `take_connections`), then
//! answering the old one's health question from its service loop
//! (`Service::answer_health`).

use super::running::{HandedOver, Service};
use super::*;
use crate::handover::Taker;

/// Sorts what an old oi handed over: rules' listeners go to `inherited`
/// (matched by address like systemd's), the observer's are returned.
pub(super) fn adopt(handed: Vec<handover::Handed>, inherited: &mut listen::Inherited) -> Given {
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
            handover::Role::Status => {
                given.status = Some(h.fd.into());
                given.status_file = h.file;
            }
        }
    }
    given
}

/// Takes up the live connections the previous oi pauses after `ready`:
/// the listeners start those whose rule they serve, which begin to pump
/// only once the previous oi has been told (so never both pump one).
/// Returns the conversation, on which the health question comes next.
pub(super) async fn take_connections(
    taker: Taker,
    commands: &Sender<Command>,
    shared: &Shared,
) -> Taker {
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
            log::warn!("no live connections taken over: {e}");
            // Told at once, so the previous oi asks the health question
            // without waiting for an answer that would not come.
            return smol::unblock(move || {
                taker.adopted(&[]);
                taker
            })
            .await;
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
    let (taker, confirmed) = smol::unblock(move || {
        let confirmed = taker.adopted(&ids).then_some(ids.len());
        (taker, confirmed)
    })
    .await;
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
    taker
}

/// Tells the old oi, if one is handing over, why this one cannot serve.
pub(super) fn give_up(taker: &mut Option<handover::Taker>, why: &str) {
    if let Some(t) = taker.take() {
        t.failed(why);
    }
}

impl Service {
    /// Hands every listening socket to a new oi (`binary`, else this one's
    /// path as started), which then serves; returns the line that says so.
    /// Successful only once the new oi has answered the health question:
    /// this one then stops answering the control socket and the metrics
    /// port, before the line goes out. On error nothing changed here (the
    /// new oi is killed), and the message says why.
    pub(super) async fn upgrade(
        &mut self,
        binary: Option<PathBuf>,
    ) -> Result<(String, HandedOver), String> {
        let me = std::process::id();
        match self.hand_over(binary).await {
            Ok(handed) => {
                self.observer.quiet().await;
                let (pid, n) = (handed.pid(), handed.successor.listeners);
                let line = format!(
                    "upgraded: oi pid {pid} serves now (it answered the health question: {n} \
                     listener(s)); this one (pid {me}) has stopped accepting and exits when \
                     the connections it kept end"
                );
                log::info!("{line}");
                Ok((line, handed))
            }
            Err(e) => {
                let line = format!("upgrade failed: {e}; this oi keeps serving");
                log::error!("{line}");
                Err(line)
            }
        }
    }

    /// [`Service::upgrade`]'s work: the new process, once it answered.
    pub(super) async fn hand_over(&self, binary: Option<PathBuf>) -> Result<HandedOver, String> {
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
        if let Some(l) = observed.status {
            let role = handover::Role::Status;
            let (fd, file) = (l.into(), observed.status_file);
            handed.push(handover::Handed { role, fd, file });
        }
        let binary = binary.unwrap_or_else(|| self.binary.clone());
        let args = self.args.clone();
        log::info!("upgrade: starting {}", binary.display());
        let shared = self.shared.clone();
        smol::unblock(move || {
            let sent = parking_lot::Mutex::new(None);
            let counters = || {
                let (carried, from_here) = shared.stats.carried_from_here();
                *sent.lock() = Some(from_here);
                carried
            };
            let successor =
                handover::hand_over(&binary, &args, &handed, &shared.parking, &counters)?;
            // Read when the live connections went, which is always.
            let sent = sent
                .into_inner()
                .unwrap_or_else(|| shared.stats.carried_from_here().1);
            Ok(HandedOver { successor, sent })
        })
        .await
    }

    /// Answers the previous oi's health question (`asked`), from this loop:
    /// the listeners' loop says how many serve and the observer thread
    /// answers a ping, so the answer proves all three run. Once the
    /// previous oi says it is done, the control socket's file is this
    /// one's, and a thread waits for what it counts while it drains. No
    /// answer (a loop that does not run) and the previous oi kills this one
    /// and serves on.
    pub(super) async fn answer_health(&self, taker: Taker, asked: Result<(), String>) {
        if let Err(e) = asked {
            return log::warn!("upgrade: no health question from the previous oi: {e}");
        }
        let (reply, count) = async_channel::bounded(1);
        let listeners = match self.commands.send(Command::Serving { reply }).await {
            Ok(()) => count.recv().await.ok(),
            Err(_) => None,
        };
        let Some(listeners) = listeners else {
            return log::error!("upgrade: the listeners do not answer: no health answer");
        };
        if !self.observer.ping().await {
            return log::error!("upgrade: the observer thread does not answer: no health answer");
        }
        match smol::unblock(move || taker.answer(listeners)).await {
            Ok(previous) => {
                self.observer.took_over();
                log::info!("upgrade: health question answered; the hand-over is complete");
                let shared = self.shared.clone();
                let waiting =
                    std::thread::Builder::new()
                        .name("oi-drained".into())
                        .spawn(move || {
                            if let Some(d) = previous.drained() {
                                let n = shared.stats.fold_drained(&d);
                                log::info!(
                                    "upgrade: what the previous oi counted while it drained is \
                                 added here ({n} of its rule(s) serve here)"
                                );
                            }
                        });
                if let Err(e) = waiting {
                    log::warn!("upgrade: the previous oi's last counts will be lost: {e}");
                }
            }
            Err(e) => log::warn!("upgrade: the previous oi did not confirm the hand-over: {e}"),
        }
    }
}
