//! Program entry: ties configuration, logging and the server together.

use crate::cli::Cli;
use std::process::ExitCode;

/// Runs oi with parsed command-line options; returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    if cli.check {
        return crate::check::run(&cli.conf_file);
    }
    match crate::config::load_resolved(&cli.conf_file) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
