//! oi's data-plane runtime: one executor and one epoll reactor per thread,
//! timers, and which thread runs a new connection. It depends on nothing of
//! oi's; the daemon's forwarding code is its only user.
//!
//! # One runtime story
//!
//! oi runs two kinds of async code, each on the runtime that fits it, and
//! two reactors in all: this crate's, one per executor thread, and
//! async-io's, one for the process.
//!
//! - **The data plane** (accept loops, client and backend sockets, the
//!   pumps, UDP listeners and associations) runs on this crate.
//!   [`Runtime::start`] makes one [`executor::Executor`] and one
//!   [`reactor::Reactor`] (an epoll instance) per thread; thread 0 is the
//!   one that calls [`Runtime::block_on`] (oi's main thread), the others are
//!   `oi-worker-N`. Each blocks in [`reactor::block_on`], running its
//!   executor's tasks and waiting on its own epoll. Its sockets are
//!   [`reactor::Async`] and [`reactor::SharedListener`], its timers
//!   [`reactor::Timer`]: each registers with the reactor of the thread
//!   that polls it first, and is polled on that thread only.
//! - **The control plane** runs on smol over async-io (with async-net's and
//!   futures-lite's types where they serve): smol's `LocalExecutor` under
//!   `smol::block_on` on `oi-observe` (the status file, the control socket,
//!   the metrics endpoint) and on `oi-probe` (the health probes, whose
//!   sockets the daemon makes as it makes a backend's, then registers with
//!   async-io); and the service's loop on the main thread, which awaits
//!   the signals (async-signal), async-io timers and `smol::unblock`'s
//!   threads (`blocking-N`: reading a configuration, the hand-over, a log
//!   flush) beside executor 0's tasks. Every async-io source is driven by
//!   async-io's reactor, on its `async-io` thread or on a thread inside
//!   `async_io::block_on`; its readiness wakes the task that awaits it
//!   through that task's waker, on whatever thread runs it (for the main
//!   thread: executor 0's, which writes its eventfd).
//! - **Plain threads**, no async runtime: `oi-logfile` (writes the log),
//!   `oi-watch` (inotify, in `poll(2)`), `oi-dns` and `oi-lookup` (name
//!   lookups). Each hands its results over through a channel.
//!
//! # The boundary
//!
//! The planes meet through channels (async-channel: a reload's new routes,
//! a command and its answer, a probe's pool) and shared state behind atomics
//! or locks (counters, a member's health, the live list), never through a
//! socket: a socket is registered on one reactor and polled only where that
//! reactor allows. An async-io source may be awaited on any thread (its
//! reactor is the process's); a source or timer of this crate only on the
//! thread whose reactor it registered with. There is no fallback reactor:
//! one of this crate's sockets or timers polled on a thread that drives no
//! reactor of this crate is a bug, refused at its first poll (a debug build
//! panics; a release build returns the error, and such a timer never
//! fires).
//!
//! Liveness crosses the boundary the same way: [`Runtime::heartbeats`]
//! puts a task on every executor that bumps an atomic counter on a timer of
//! its own thread's reactor, and a watcher on any thread reads the counts
//! (a thread blocked in a task stops its count; an idle one still counts).
//!
//! Why two stacks: the data plane left async-io's reactor and smol's
//! executor for measured reasons (16.1 system calls per 64 B round trip
//! down to 6; about 1,300 of 5,100 user-space instructions per round trip
//! in smol's `Executor`; see [`reactor`] and [`executor`]). The control
//! plane stays on smol, async-net and futures-lite, the stack oi is built
//! on: its events are rare (a signal, a scrape, a probe a second per
//! backend), and nothing measured there would pay for moving it.
//!
//! # The invariants, and what checks them
//!
//! - [`executor`]: on the thread that runs an executor, a task is woken
//!   (put on that thread's own queue) only inside a poll of `run` or inside
//!   the reactor's turn; a task woken on any other thread goes through the
//!   shared queue and the runner's waker.
//! - [`reactor`]: a registration or a timer is polled only on its reactor's
//!   thread, and a reactor turns only on the thread that drives it.
//! - The wake hand-off (reactor/wake.rs): a waker on another thread writes
//!   the eventfd whenever the thread sleeps or is about to; a wake is never
//!   lost between the flags and the wait.
//!
//! The first two are `debug_assert!`s, run by the whole test suite (its
//! integration tests run the debug binary) and compiled out of a release
//! build. The hand-offs across threads (the executor's local and shared
//! queues, a wake from another thread while the runner runs or sleeps, an
//! edge against a waiter registering) are explored by the shuttle model
//! tests in `src/model.rs`, built with `--cfg shuttle` (the command is
//! there; `.ci/run` runs it).
#![forbid(unsafe_code)]

pub mod executor;
mod heartbeat;
#[cfg(all(test, shuttle))]
mod model;
pub mod reactor;
mod sync;
mod threads;

pub use heartbeat::Heartbeats;
pub use threads::{Placed, Runtime, Threads, SLACK};
