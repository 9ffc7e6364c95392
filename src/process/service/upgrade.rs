//! `oi upgrade` from both sides: the old process starting the new binary
//! and handing it everything (`Service::upgrade`, `Service::hand_over`),
//! and the new process taking up the listeners, the observer's sockets and
//! the live connections it was handed (`adopt`, `take_connections`).

use super::running::Service;
use super::*;

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
        }
    }
    given
}

/// Takes up the live connections the previous oi pauses after `ready`:
/// the listeners start those whose rule they serve, which begin to pump
/// only once the previous oi has been told (so never both pump one).
pub(super) async fn take_connections(
    taker: handover::Taker,
    commands: &Sender<Command>,
    shared: &Shared,
) {
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
pub(super) fn give_up(taker: &mut Option<handover::Taker>, why: &str) {
    if let Some(t) = taker.take() {
        t.failed(why);
    }
}

impl Service {
    /// Hands every listening socket to a new oi (`binary`, else this one's
    /// path as started), which then serves; returns its pid. On error
    /// nothing changed here, and the message says why.
    pub(super) async fn upgrade(&self, binary: Option<PathBuf>) -> Result<String, String> {
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
    pub(super) async fn hand_over(&self, binary: Option<PathBuf>) -> Result<u32, String> {
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
}
