#![forbid(unsafe_code)]

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = oxidinetd::cli::Cli::parse();
    oxidinetd::app::run(cli)
}
