//! oi: a rinetd-compatible TCP/UDP port forwarder.
//!
//! Data flows one way: [`config`] → `listen` (bound sockets, accept loops,
//! the reload diff) → `route` (what a connection needs from its rule) →
//! `tcp` or `udp` (moving the bytes) → `logfile`. `runtime` owns the
//! executor threads, `shared` what every connection borrows (settings,
//! buffer and pipe pools, the log), and `service` is the process around it
//! all: start-up, signals, reload, drain. ARCHITECTURE.md has the map.
//!
//! The public surface is what the binary, the tests and the benches need to
//! start a server: parse a configuration, bind its sockets, and [`serve`]
//! them on a [`Runtime`].
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

// The crates below the daemon, under the names the binary, the tests and the
// benches have always used.
pub use oi_config as config;
pub use oi_config::acl;
pub use oi_wire::{client_hello, proxy};

mod backends;
mod bounds;
mod buffers;
pub mod check;
pub mod cli;
mod connect;
mod daemon;
mod diagnostics;
mod edge;
mod handover;
mod listen;
mod logfile;
mod mptcp;
mod notify;
pub mod observe;
mod peer;
mod pipes;
mod privileges;
mod probe;
pub mod rate;
mod route;
mod safe_fs;
mod service;
mod shared;
pub mod stats;
mod tcp;
#[cfg(test)]
mod tests_safe_fs;
pub mod top;
mod udp;
mod unix;
mod watch;

pub use buffers::BufferPool;
pub use edge::HEADER_TIMEOUT as PROXY_HEADER_TIMEOUT;
pub use listen::{bind, bind_all, serve, BoundSocket, Command, TcpGroup, UnixSocket};
pub use logfile::{Event, Format, LogEvent, LogHandle, RuleNames, LOG_QUEUE_LINES, WRITER_WAIT};
pub use oi_runtime::{Runtime, SLACK};
pub use peer::{Client, Peer, UNIX_CLIENT};
pub use pipes::{pipe_size, PipePool, MIN_PIPE_SIZE, PIPES_KEPT};
pub use route::Route;
pub use service::run;
pub use shared::{Settings, Shared, UDP_QUEUE_TOTAL};
pub use tcp::splice::{use_splice, AUTO_SPLICES};
pub use udp::ASSOC_QUEUE_BYTES;
