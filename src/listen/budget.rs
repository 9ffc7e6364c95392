//! What the listeners may spend of the open-file limit: the budget of
//! listening sockets start-up and a reload hold to, the share of
//! descriptors the `/udp` listeners' associations may take, and the limits
//! on how many rules a file may hold.

use super::*;

impl Listeners {
    /// Sets how many associations each `/udp` listener may hold so that all
    /// of them together stay within their share of the descriptor limit
    /// (see [`udp_assoc_share`]), and says so when that is below a rule's
    /// `maxassoc`: at start-up, then only when a reload changes the value.
    pub(super) fn share_descriptors_with_udp(&mut self) {
        let udp: Vec<usize> = self
            .serving
            .iter()
            .filter(|((_, proto), _)| *proto == Proto::Udp)
            .map(|(_, r)| r.route.load().max_assoc())
            .collect();
        // Each loop owns one descriptor of its listener.
        let listener_fds = self.serving.values().map(|r| r.tasks.len()).sum();
        let soft = nofile_soft();
        let cap = udp_assoc_share(soft, listener_fds, udp.len());
        self.shared.set_udp_association_cap(cap);
        let wanted = udp.iter().copied().max().unwrap_or(0);
        let key = (udp.len(), soft);
        if wanted > cap && self.udp_cap_logged != Some(key) {
            log::warn!(
                "UDP associations limited to {cap} per /udp listener ({} listener(s); \
                 maxassoc asks up to {wanted}): together they may use half of the \
                 open-file limit ({}), so TCP keeps descriptors; raise LimitNOFILE for more",
                udp.len(),
                soft
            );
            self.udp_cap_logged = Some(key);
        } else if wanted <= cap {
            self.udp_cap_logged = None;
        }
    }
}

/// The soft open-file limit (RLIMIT_NOFILE), or `u64::MAX` if unlimited.
pub(super) fn nofile_soft() -> u64 {
    use rustix::process::{getrlimit, Resource};
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Associations each of `udp_listeners` `/udp` listeners may hold: every
/// association holds one descriptor (its connected UDP socket or its TCP
/// connection), and all of them together may use half the soft limit, less
/// what the listeners hold, so TCP connections keep the other half. Measured
/// before this cap: at `LimitNOFILE=1024` one UDP rule at the default
/// `maxassoc` (10,000) took every descriptor and a TCP rule beside it served 0
/// of 20 connections. At least one, so a listener still serves.
pub(super) fn udp_assoc_share(soft: u64, listener_fds: usize, udp_listeners: usize) -> usize {
    let half = usize::try_from(soft / 2).unwrap_or(usize::MAX);
    let share = half.saturating_sub(listener_fds) / udp_listeners.max(1);
    share.max(1)
}

/// Listeners (one descriptor each, before duplicates) a configuration may
/// have, at start-up and on reload: half the open-file soft limit, so
/// connections keep the other half. A start-up or a reload past it is
/// refused as a whole.
pub(crate) fn listener_budget(soft: u64) -> usize {
    usize::try_from(soft / 2).unwrap_or(usize::MAX)
}

/// The message for a configuration of `n` listeners past [`listener_budget`].
pub(crate) fn over_budget(file: &str, n: usize, soft: u64) -> String {
    format!(
        "{file}: {n} listeners do not fit the descriptor budget of {} (half the \
         open-file limit {soft}; the other half is kept for connections): raise \
         LimitNOFILE or forward fewer ports",
        listener_budget(soft)
    )
}

/// Most rules (one listener each) [`check_budget`] passes under the
/// current open-file limit.
pub(crate) fn rules_budget() -> usize {
    listener_budget(nofile_soft())
}

/// Checks a configuration of `n` listeners against [`listener_budget`] at
/// the current soft limit (start-up, after raising it).
pub(crate) fn check_budget(file: &str, n: usize) -> Result<(), String> {
    let soft = nofile_soft();
    if n > listener_budget(soft) {
        return Err(over_budget(file, n, soft));
    }
    Ok(())
}

/// Duplicated listening descriptors the server may hold: a sixteenth of the
/// open-file soft limit, at most 1024, so listeners never crowd out connections.
pub(super) fn duplicate_budget() -> usize {
    usize::try_from(nofile_soft() / 16)
        .unwrap_or(usize::MAX)
        .min(1024)
}
