#![forbid(unsafe_code)]

use clap::Parser;
use oxidinetd::cli::{Cli, RunOptions};
use std::process::ExitCode;

fn main() -> ExitCode {
    let as_rinetd = oxidinetd::cli::invoked_as_rinetd();
    oxidinetd::run(RunOptions::from_cli(Cli::parse(), as_rinetd))
}
