//! systemd readiness notifications (`Type=notify`); silent without NOTIFY_SOCKET.

use sd_notify::NotifyState;

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        log::warn!("sd_notify: {e}");
    }
}

/// Every listener is bound and serving.
pub(crate) fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload has started. systemd 253+ wants the monotonic time with it.
pub(crate) fn reloading() {
    send(&[
        NotifyState::Reloading,
        NotifyState::monotonic_usec_now().unwrap_or(NotifyState::Status("reloading")),
    ]);
}

/// This process is the service's main process now (it took over from
/// the one systemd started: `oi upgrade`).
pub(crate) fn main_pid() {
    send(&[NotifyState::MainPid(std::process::id())]);
}

/// The watchdog's "still alive" ping (`WATCHDOG=1`): see
/// [`crate::sys::watchdog`] for when it is sent.
pub(crate) fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// The service manager's watchdog period, if it wants pings from this
/// process: `WATCHDOG_USEC` (set from the unit's `WatchdogSec=`), when
/// `WATCHDOG_PID` is unset or names this process (sd_watchdog_enabled(3):
/// a child that inherited the variables is not the one watched) and
/// `NOTIFY_SOCKET` says where to send them. Zero is no watchdog.
pub(crate) fn watchdog_period() -> Option<std::time::Duration> {
    std::env::var_os("NOTIFY_SOCKET")?;
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}

/// The variable that names the process systemd watches. `oi upgrade`'s
/// new process is not started with it: it becomes the main process
/// (`MAINPID=`) and must ping from then on, which it would not do with
/// the old process's pid there.
pub(crate) const WATCHDOG_PID: &str = "WATCHDOG_PID";

/// The process is shutting down.
pub(crate) fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// Most descriptors one message carries: the kernel's `SCM_MAX_FD`.
const FDS_PER_MESSAGE: usize = 253;

/// Whether the service manager keeps descriptors for oi: systemd (254 and
/// later) sets `FDSTORE` to the unit's `FileDescriptorStoreMax=` when it is
/// above 0 (252, Debian 12's, does not: dist/oi.service sets it with
/// `Environment=`), and `NOTIFY_SOCKET` says where to send them. Read once.
pub(crate) fn fd_store_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::env::var_os("NOTIFY_SOCKET").is_some()
            && std::env::var("FDSTORE")
                .ok()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 0)
    })
}

/// The name a listener's descriptors are stored under: its address and
/// protocol, with the colons `LISTEN_FDNAMES` cannot hold made `_`, and at
/// most 255 bytes (systemd's limit). Names are for the journal and for
/// [`remove_stored`]; a restarted oi matches descriptors by address.
pub(crate) fn fd_name(listener: &str) -> String {
    let mut name: String = listener
        .chars()
        .map(|c| {
            if c == ':' || !c.is_ascii_graphic() {
                '_'
            } else {
                c
            }
        })
        .collect();
    name.truncate(255);
    name
}

/// Hands `fds` (one listener's sockets) to the service manager's descriptor
/// store under `name`, so a restart of oi gets them back as `LISTEN_FDS`
/// and no connection is refused while no oi runs. systemd keeps one copy of
/// a descriptor it already holds, so storing again is harmless.
pub(crate) fn store_fds(name: &str, fds: &[std::os::fd::BorrowedFd<'_>]) {
    if !fd_store_enabled() {
        return;
    }
    for chunk in fds.chunks(FDS_PER_MESSAGE) {
        let states = [NotifyState::FdStore, NotifyState::FdName(name)];
        if let Err(e) = sd_notify::notify_with_fds(&states, chunk) {
            log::warn!("cannot store the descriptors of {name} with the service manager: {e}");
            return;
        }
    }
}

/// Asks the service manager to close what it stored under `name` (a
/// listener a reload removed), so a restart does not get it back.
pub(crate) fn remove_stored(name: &str) {
    if fd_store_enabled() {
        send(&[NotifyState::FdStoreRemove, NotifyState::FdName(name)]);
    }
}
