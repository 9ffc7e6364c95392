//! Writes oi(8) and the bash, zsh and fish completions from the command-line
//! definition (`oxidinetd::cli::Cli`), and oi.conf(5) from the option table
//! (`oxidinetd::config::settings`), so they always match what oi really
//! takes. Run at packaging time, not at build time:
//!
//! ```sh
//! cargo run --example gen-docs -- target/gen-docs
//! ```
//!
//! writes `oi.8`, `oi.conf.5`, `oi.bash`, `_oi` (zsh) and `oi.fish` into
//! that directory. `--reference FILE` writes the markdown reference instead
//! (`docs/reference.md`, committed; a test keeps it in step with the table):
//!
//! ```sh
//! cargo run --example gen-docs -- --reference docs/reference.md
//! ```
//! It is an example rather than a `build.rs` so that a normal `cargo build`
//! compiles neither clap_mangen nor clap_complete; `dist/build-deb.sh` runs it.
#![forbid(unsafe_code)]

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Text appended to the generated page: what clap does not know about.
const EXTRA_SECTIONS: &[(&str, &str)] = &[
    (
        "SIGNALS",
        "SIGHUP re-reads the configuration file. If it has errors they are logged \
         and the running configuration stays in force; listeners whose address, port \
         and protocol are unchanged keep their sockets; open connections are not \
         touched; the log file is reopened and the pid file rewritten. With --watch \
         (or watch on in the file), a change to the file or an included file reloads \
         it the same way.\n\n\
         SIGUSR1 logs one status line and opens the log file's path again (for \
         logrotate's create; a symlink there is refused and the open file kept).\n\n\
         SIGTERM and SIGINT close the listeners and exit 0 once open connections \
         end or after --drain seconds.",
    ),
    (
        "RINETD COMPATIBILITY",
        "Started under the name rinetd (a symbolic link or a copy of the binary) or \
         with --daemon, oi behaves like rinetd: it forks into the background once every \
         listener is bound, writes its pid to the file named by pidlogfile (default \
         /var/run/rinetd.pid) and sends its diagnostics to syslog (facility daemon). \
         -f keeps it in the foreground.",
    ),
    (
        "SYSTEMD",
        "The packaged unit oi.service runs oi in the foreground as Type=notify: oi \
         sends READY=1 once every listener is bound, RELOADING=1 and READY=1 around \
         each reload, and STOPPING=1 on exit. systemctl reload oi checks the file with \
         oi --check before sending SIGHUP, so a bad file makes the reload fail. When \
         JOURNAL_STREAM names oi's stderr, diagnostics go to journald's native socket \
         with their own PRIORITY (journalctl -p err) and OI_RULE, OI_CLIENT, \
         OI_BACKEND and OI_REASON fields where known; a line the socket refuses goes \
         to stderr.",
    ),
    (
        "ENVIRONMENT",
        "RUST_LOG sets the diagnostic level (error, warn, info, debug, trace); debug \
         logs one line per connection. OI_UDP_BATCH=off makes UDP receive and send one \
         datagram per system call (no recvmmsg, sendmmsg, GRO or GSO), for comparison \
         or to rule batching out when diagnosing.",
    ),
    (
        "FILES",
        "/etc/rinetd.conf, the default configuration file; see oi.conf(5).",
    ),
    ("SEE ALSO", "oi.conf(5), rinetd(8), systemd.service(5)"),
];

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "--reference") {
        let Some(file) = args.get(1).map(PathBuf::from) else {
            eprintln!("gen-docs: --reference needs a file");
            return ExitCode::FAILURE;
        };
        let page = oxidinetd::config::settings::reference::markdown();
        return match std::fs::write(&file, page) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gen-docs: {}: {e}", file.display());
                ExitCode::FAILURE
            }
        };
    }
    // Any other option (`--help` included) gets the usage, not a directory of
    // that name: one was once generated and committed at the repository root.
    if args.len() > 1
        || args
            .first()
            .is_some_and(|a| a.to_string_lossy().starts_with('-'))
    {
        eprintln!("usage: gen-docs [OUT_DIR] | gen-docs --reference FILE");
        return ExitCode::FAILURE;
    }
    let out = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/gen-docs"));
    match generate(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen-docs: {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}

fn generate(out: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    let mut cmd = oxidinetd::cli::Cli::command();
    // The NAME line reads "oi - <about>": drop an "oi: " the about may start with.
    if let Some(about) = cmd.get_about().map(|a| a.to_string()) {
        let short = about.strip_prefix("oi: ").unwrap_or(&about);
        cmd = cmd.about(short.trim_end_matches('.').to_string());
    }

    let man = clap_mangen::Man::new(cmd.clone())
        .section("8")
        .manual("System Administration")
        .source(format!("oi {}", env!("CARGO_PKG_VERSION")));
    let mut page = Vec::new();
    man.render(&mut page)?;
    page.extend_from_slice(extra_sections().as_bytes());
    std::fs::write(out.join("oi.8"), page)?;
    let conf_page = oxidinetd::config::settings::reference::man_page();
    std::fs::write(out.join("oi.conf.5"), conf_page)?;

    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "oi", out)?;
    }
    Ok(())
}

/// [`EXTRA_SECTIONS`] as roff: a heading each, paragraphs split at blank lines.
fn extra_sections() -> String {
    let mut r = roff::Roff::new();
    for (title, body) in EXTRA_SECTIONS {
        r.control("SH", [*title]);
        for (i, para) in body.split("\n\n").enumerate() {
            if i > 0 {
                r.control("PP", []);
            }
            r.text([roff::roman(para)]);
        }
    }
    r.render()
}
