//! oi: a rinetd-compatible TCP/UDP port forwarder.
//!
//! Data flows one way: [`config`] (the `oi-config` crate) → `listen` (bound
//! sockets, accept loops, the reload diff) → `route` (the rule a connection
//! takes, its admission, what it borrows) → `tcp` or `udp` (moving the
//! bytes, on the `oi-runtime` crate's threads) → `logfile`. Below them:
//! `backends` (pools, health, connecting), `stats` (counters, rates), `net`
//! (buffers, pipes, who a peer is), `sys` (files, sockets and process calls
//! at the operating system's edge). Above them: `observe` and `top` (the
//! views), `handover` (`oi upgrade`), `watch`, and `process` (the command
//! line, `--check`, start-up, signals, reload, drain). ARCHITECTURE.md has
//! the map; tests/integration/layout keeps it acyclic.
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
mod handover;
mod listen;
mod logfile;
mod net;
pub mod observe;
mod process;
mod route;
pub mod stats;
mod sys;
mod tcp;
mod tls;
pub mod top;
mod udp;
mod watch;

pub use listen::{bind, bind_all, serve, BoundSocket, Command, TcpGroup, UnixSocket};
pub use logfile::{
    Event, Flow, Format, LogEvent, LogHandle, RuleNames, LOG_QUEUE_LINES, MAX_JSON_LINE,
    WRITER_WAIT,
};
pub use net::buffers::BufferPool;
pub use net::peer::{Client, Peer, UNIX_CLIENT};
pub use net::pipes::{pipe_size, PipePool, MIN_PIPE_SIZE, PIPES_KEPT};
pub use oi_runtime::{Runtime, SLACK};
pub use process::service::run;
pub use process::{check, cli};
pub use route::edge::HEADER_TIMEOUT as PROXY_HEADER_TIMEOUT;
pub use route::shared::{Settings, Shared, UDP_QUEUE_TOTAL};
pub use route::Route;
pub use stats::rate;
pub use tcp::splice::{use_splice, AUTO_SPLICES};
pub use udp::ASSOC_QUEUE_BYTES;
