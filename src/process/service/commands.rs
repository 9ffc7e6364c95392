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
    if let crate::process::cli::ClientAction::Admin {
        line,
        reload,
        or_sighup,
    } = &q.action
    {
        let asked = line
            .as_deref()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.clone()))
            .and_then(|line| crate::observe::ask_admin(&socket, line, *reload));
        return match asked {
            Ok(answer) => {
                print!("{answer}");
                ExitCode::SUCCESS
            }
            Err(e) if or_sighup.is_some() && nobody_listens(&e) => {
                reload_by_signal(conf_file, or_sighup.unwrap_or(0), &e)
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

/// Whether `e`, from asking the control socket, means no oi listens there:
/// the socket file is missing (oi runs without --socket, or with another
/// path), or nothing accepts on it. Any other failure (permissions, a
/// timeout, an answer) is reported, never worked around.
fn nobody_listens(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

/// `oi reload --or-sighup PID` with no control socket to ask: what the unit's
/// `ExecReload=` did before `oi reload` existed. Checks `conf_file` as
/// `--check` does (a broken file: its errors, exit 1, no signal sent), then
/// sends PID SIGHUP. The reload's outcome is then only in oi's log: this
/// command cannot wait for it.
fn reload_by_signal(conf_file: &std::path::Path, pid: i32, why: &std::io::Error) -> ExitCode {
    eprintln!(
        "oi: {why}; checking {} and sending pid {pid} SIGHUP instead",
        conf_file.display()
    );
    if crate::process::check::run(conf_file, true) != ExitCode::SUCCESS {
        eprintln!("oi: not reloaded: pid {pid} keeps its configuration");
        return ExitCode::FAILURE;
    }
    // Pid::from_raw refuses 0, and the parser refuses negative numbers:
    // never a process group.
    let Some(target) = rustix::process::Pid::from_raw(pid) else {
        eprintln!("oi: {pid} is not a process id");
        return ExitCode::FAILURE;
    };
    match rustix::process::kill_process(target, rustix::process::Signal::HUP) {
        Ok(()) => {
            eprintln!("oi: sent pid {pid} SIGHUP: its log says how the reload went");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("oi: cannot send pid {pid} SIGHUP: {e}");
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
