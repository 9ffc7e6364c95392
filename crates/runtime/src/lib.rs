//! oi's data-plane runtime: one executor and one epoll reactor per thread,
//! timers, and which thread runs a new connection. It depends on nothing of
//! oi's; the daemon's forwarding code is its only user.
//!
//! # One runtime story
//!
//! oi runs two kinds of async code, each on the runtime that fits it:
//!
//! - **The data plane** — accept loops, client and backend sockets, the
//!   pumps, UDP associations — runs on this crate: [`Runtime::start`]
//!   starts the executor threads, each blocking in [`reactor::block_on`]
//!   on its own epoll with its own [`executor::Executor`]. Its sockets are
//!   [`reactor::Async`], registered on the reactor of the thread that first
//!   polls them.
//! - **The control plane** — signals, the control socket, the metrics
//!   endpoint, health probes, the file watcher's hand-off — runs on smol's
//!   `LocalExecutor` over async-io, on threads of its own. It never touches
//!   a data-plane socket, and the data plane never polls an async-io one.
//!
//! The boundary between them is crossed by channels and atomics only
//! (a reload's new routes, a command's answer, a counter), never by a
//! socket: a socket is registered on one reactor and polled from that
//! reactor's thread alone.
//!
//! The invariants that make the per-thread fast paths sound are written
//! where they live ([`executor`]: a task woken on its own thread is woken
//! only inside `run` or the reactor's turn; [`reactor`]: a registration
//! belongs to one thread's epoll) and checked with `debug_assert!`s that the
//! test suite runs.
#![forbid(unsafe_code)]

pub mod executor;
#[cfg(all(test, shuttle))]
mod model;
pub mod reactor;
mod sync;
mod threads;

pub use threads::{Placed, Runtime, Threads, SLACK};
