//! oi: a rinetd-compatible TCP/UDP port forwarder.
//!
//! The library owns all logic; `main.rs` only parses the command line and
//! calls [`app::run`].
#![forbid(unsafe_code)]

pub mod acl;
pub mod app;
pub mod check;
pub mod cli;
pub mod config;
pub mod connect;
pub mod daemon;
pub mod logfile;
pub mod notify;
pub mod pipe;
pub mod pool;
pub mod pump;
pub mod server;
pub mod splice;
pub mod spread;
pub mod udp;
