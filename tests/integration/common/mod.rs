//! The test harness every integration test shares: an in-process server on
//! port 0 ([`server`]), simple blocking peers ([`peers`]), the real binary as
//! a child process ([`process`]), and bounded waiting and resource counting
//! ([`wait`]).
#![allow(dead_code, unused_imports)]

pub mod isolate;
pub mod peers;
pub mod ports;
pub mod process;
pub mod server;
pub mod wait;

pub use isolate::*;
pub use peers::*;
pub use ports::*;
pub use process::*;
pub use server::*;
pub use wait::*;
