//! The primitives the executor's and the reactor's hand-offs between
//! threads are built on, imported from here only: std's in every build,
//! shuttle's in the model tests' build (`--cfg shuttle`, [`crate::model`]),
//! where each operation on them is a point at which shuttle may switch
//! threads, so the tests explore the interleavings of the real code.
//!
//! Only what a hand-off's correctness rests on switches: the reactor's wake
//! flags ([`crate::reactor::WakeFlags`]), the executor's main-future flag
//! and the thread-locals that say which executor a thread runs (shuttle's
//! threads share one OS thread, so std's thread-locals would be shared by
//! all of them). The shared run queue (`concurrent-queue`, which its authors
//! model-check) and the locks held for a few instructions stay std's and
//! parking_lot's: each of their operations is one step of the model.

#[cfg(not(all(test, shuttle)))]
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(not(all(test, shuttle)))]
pub(crate) use std::thread_local;

#[cfg(all(test, shuttle))]
pub(crate) use shuttle::sync::atomic::{AtomicBool, Ordering};
#[cfg(all(test, shuttle))]
pub(crate) use shuttle::thread_local;
