//! The commands that ask a running oi or convert a file, rather than run
//! one: `oi status`, `oi connections`, `oi top`'s one-shot table and the
//! rest of the control socket's clients, and `oi convert`.

use super::*;

/// `oi status` / `oi connections`: prints the running server's answer.
/// The socket is `--socket`, else the `controlsocket` line of `-c FILE`.
pub(super) fn ask(q: &crate::process::cli::ClientQuery, conf_file: &std::path::Path) -> ExitCode {
    let from_config = || {
        oi_config::load(conf_file)
            .ok()
            .and_then(|c| c.globals.control_socket)
    };
    let Some(socket) = q.socket.clone().or_else(from_config) else {
        eprintln!(
            "oi: which server? give its control socket with --socket PATH, or a `controlsocket PATH` line in {}",
            conf_file.display()
        );
        return ExitCode::from(2);
    };
    if let crate::process::cli::ClientAction::Admin { line, reload } = &q.action {
        let asked = line
            .as_deref()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.clone()))
            .and_then(|line| crate::observe::ask_admin(&socket, line, *reload));
        return match asked {
            Ok(answer) => {
                print!("{answer}");
                ExitCode::SUCCESS
            }
            // A reload's errors as `--check` prints them.
            Err(e) if *reload && e.kind() == std::io::ErrorKind::Other => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("oi: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let (query, json) = match &q.action {
        crate::process::cli::ClientAction::Print { query, json } => (*query, *json),
        crate::process::cli::ClientAction::Top { interval } => {
            return crate::top::run(&socket, *interval)
        }
        crate::process::cli::ClientAction::Admin { .. } => return ExitCode::FAILURE,
        crate::process::cli::ClientAction::Upgrade { binary } => {
            return match crate::observe::ask_upgrade(&socket, binary.as_deref()) {
                Ok(answer) => {
                    print!("{answer}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("oi: {e}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    match crate::observe::ask(&socket, query, json) {
        Ok(answer) => {
            print!("{answer}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("oi: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The configuration as `oi config` shows it: in the format it was read
/// in, as `oi convert` writes one (includes folded in, every setting
/// spelled out), headed as the running one. Made at each load, from the
/// parsed file, before names are resolved.
pub(super) fn running_text(config: &oi_config::Config, file: &str) -> String {
    let text = match config.format {
        oi_config::Format::Yaml => oi_config::convert::to_yaml(config, file),
        oi_config::Format::Conf => oi_config::convert::to_conf(config, file),
    };
    let body = text.split_once('\n').map_or("", |(_, body)| body);
    format!("# {file}, as the running oi loaded it (`oi config`).\n{body}")
}

/// `oi convert`: the file (with its includes) in the format `to`, on stdout.
pub(super) fn convert(conf_file: &std::path::Path, to: oi_config::Format) -> ExitCode {
    let source = conf_file.display().to_string();
    match oi_config::load(conf_file) {
        Ok(c) => {
            print!(
                "{}",
                match to {
                    oi_config::Format::Yaml => oi_config::convert::to_yaml(&c, &source),
                    oi_config::Format::Conf => oi_config::convert::to_conf(&c, &source),
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
