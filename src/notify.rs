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

/// The process is shutting down.
pub(crate) fn stopping() {
    send(&[NotifyState::Stopping]);
}
