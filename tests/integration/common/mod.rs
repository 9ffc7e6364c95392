//! The test harness every integration test shares: an in-process server on
//! port 0 ([`server`]), simple blocking peers ([`peers`]), the real binary as
//! a child process ([`process`]), bounded waiting and resource counting
//! ([`wait`]), and outside programs a test may skip without ([`tools`]).
#![allow(dead_code, unused_imports)]

pub mod isolate;
pub mod netns;
pub mod peers;
pub mod ports;
pub mod process;
pub mod server;
pub mod tools;
pub mod wait;

pub use isolate::*;
pub use netns::*;
pub use peers::*;
pub use ports::*;
pub use process::*;
pub use server::*;
pub use tools::*;
pub use wait::*;
