//! oi at the operating system's edge: files it writes and removes as root
//! (`safe_fs`: no symlink followed, no FIFO waited on), unix stream sockets,
//! MPTCP sockets, systemd's notify socket, descriptor store and watchdog, dropping
//! privileges, forking into the background, and oi's own log messages
//! (to stderr, syslog, or journald's socket).
//! Nothing here knows a rule, a route or a connection.

pub(crate) mod daemon;
pub(crate) mod diagnostics;
mod journal;
pub(crate) mod mptcp;
pub(crate) mod notify;
pub(crate) mod privileges;
pub(crate) mod safe_fs;
pub(crate) mod unix;
pub(crate) mod watchdog;
