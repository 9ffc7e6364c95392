//! Every command line README.md shows is tested as written, so a documented
//! form cannot silently stop working (as `oi status -c FILE` once did).
//!
//! Commands are the lines of the README's ```sh blocks (comments dropped,
//! `\` continuations joined) and the `$ ` lines of its other blocks. Each
//! must be in [`COMMANDS`]: run here, or not run, with the reason. A
//! command the README gains that is in neither fails the test, and so does
//! a table entry the README no longer shows. To update: copy the command as
//! the failure prints it into [`COMMANDS`].
//!
//! Run commands go through `sh -c` in a temporary directory, with the built
//! `oi` first on PATH, and with the system paths of [`PATHS`] replaced by
//! files the test prepares, and the metrics address, rule and backend the
//! README names by the test's own (the commands are otherwise unchanged).

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{echo_backend, free_port};

/// How the test treats one README command.
#[derive(Clone, Copy, Debug)]
enum How {
    /// Run; must exit 0.
    Run,
    /// Run as the server the [`How::WhileServing`] commands ask; must
    /// report ready (sd_notify) and keep running until stopped.
    Serve,
    /// Run while the [`How::Serve`] command's server runs; must exit 0.
    WhileServing,
    /// Not run in a test, for this reason.
    NotRun(&'static str),
}

use How::*;

/// Every command README.md shows, as the test extracts it, and what the test does with it.
const COMMANDS: &[(&str, How)] = &[
    (
        "cargo run --release -- -c profiling.conf",
        NotRun("a release build (minutes) and a server run until stopped; profiling.conf is checked with the built oi instead (the_first_readme_command_s_configuration_is_valid)"),
    ),
    (
        "cargo test --all-targets",
        NotRun("this test suite itself: it would run itself"),
    ),
    (
        "cargo install cargo-deb --locked",
        NotRun("downloads and builds a tool from crates.io into ~/.cargo"),
    ),
    (
        "dist/build-deb.sh",
        NotRun("needs cargo-deb and three release builds (minutes); CI runs dist/pgo-build.sh, then dist/build-deb.sh --no-build, installs the package and checks it"),
    ),
    (
        "sudo apt install ./target/debian/oxidinetd_*.deb",
        NotRun("installs a package on the machine, as root"),
    ),
    ("oi --check -c /etc/rinetd.conf", Run),
    ("oi convert -c /etc/rinetd.conf --to yaml", Run),
    (
        "rustup component add llvm-tools",
        NotRun("downloads a toolchain component into ~/.rustup; CI's .ci/run adds it"),
    ),
    (
        "dist/pgo-build.sh",
        NotRun("two release builds and a training run (minutes); CI runs it as written, for the package and the container image"),
    ),
    (
        "sudo install -m 755 target/dist/release/oi /usr/sbin/oi",
        NotRun("writes /usr/sbin as root"),
    ),
    ("oi -c /etc/rinetd.conf", Serve),
    (
        "oi upgrade --socket /run/oi/oi.sock",
        NotRun("replaces the running oi: tests/integration/upgrade.rs runs it against an oi whose binary path the test controls"),
    ),
    (
        "sudo systemctl enable --now oi",
        NotRun("needs systemd and the installed unit"),
    ),
    (
        "sudo systemctl reload oi",
        NotRun("needs systemd and the installed unit: tests/systemd/run.py runs it under a booted systemd (CI)"),
    ),
    (
        "sudo systemctl restart oi",
        NotRun("needs systemd and the installed unit: tests/systemd/run.py runs it under a booted systemd (CI)"),
    ),
    (
        "sudo oi upgrade --socket /run/oi/control.sock",
        NotRun("replaces the installed oi.service's process: tests/systemd/run.py runs it through the package's postinst under a booted systemd (CI)"),
    ),
    (
        "sudo python3 tests/systemd/run.py",
        NotRun("boots systemd as PID 1 in namespaces, as root, after a package build (minutes); CI runs it after building the package"),
    ),
    ("journalctl -u oi", NotRun("needs systemd's journal")),
    (
        "oi -c /etc/rinetd.conf --status-file /run/oi/status.json",
        Serve,
    ),
    ("oi -c /etc/rinetd.conf --metrics 127.0.0.1:9465", Serve),
    ("oi -c /etc/rinetd.conf --socket /run/oi/oi.sock", Serve),
    ("oi status --socket /run/oi/oi.sock", WhileServing),
    ("oi connections --socket /run/oi/oi.sock", WhileServing),
    ("oi top --socket /run/oi/oi.sock", WhileServing),
    (
        "oi backend drain 0.0.0.0:80/tcp 10.0.0.5:8080 --socket /run/oi/oi.sock",
        WhileServing,
    ),
    (
        "oi status --socket /run/oi/oi.sock | grep 'state='",
        WhileServing,
    ),
    (
        "oi backend enable 0.0.0.0:80/tcp 10.0.0.5:8080 --socket /run/oi/oi.sock",
        WhileServing,
    ),
    (
        "oi backend weight 0.0.0.0:80/tcp 10.0.0.5:8080 3 --socket /run/oi/oi.sock",
        WhileServing,
    ),
    (
        "oi backend disable 0.0.0.0:80/tcp 10.0.0.5:8080 --grace 30s --socket /run/oi/oi.sock",
        WhileServing,
    ),
    (
        "oi connections --socket /run/oi/oi.sock | awk '$3 ~ /^203[.]0[.]113[.]7:/'",
        WhileServing,
    ),
    (
        "oi close --client 203.0.113.7 --socket /run/oi/oi.sock",
        WhileServing,
    ),
    (
        "oi close --client 203.0.113.0/24 --socket /run/oi/oi.sock",
        WhileServing,
    ),
    (
        "oi --check -c /etc/rinetd.conf && oi reload --socket /run/oi/oi.sock",
        WhileServing,
    ),
    ("oi config --socket /run/oi/oi.sock", WhileServing),
];

/// System paths the README's commands name, and the file in the test's
/// directory that stands for each.
const PATHS: &[(&str, &str)] = &[
    ("/etc/rinetd.conf", "rinetd.conf"),
    ("/run/oi/oi.sock", "oi.sock"),
    ("/run/oi/status.json", "status.json"),
];

/// The metrics address the README shows; the test serves on a free port instead.
const METRICS: &str = "127.0.0.1:9465";

/// The rule the README's runbook names; the test's rule stands for it.
const RULE: &str = "0.0.0.0:80/tcp";

/// The backend the README's runbook names; the test's backend stands for it.
const BACKEND: &str = "10.0.0.5:8080";

/// `text` without a trailing `# comment` (a `#` after whitespace, outside quotes).
fn strip_comment(text: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, ch) in text.char_indices() {
        match (quote, ch) {
            (None, '"' | '\'') => quote = Some(ch),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return text[..i].trim_end(),
            _ => {}
        }
        prev = ch;
    }
    text.trim_end()
}

/// The command lines of a README: the lines of its ```sh (or bash, shell)
/// blocks, and the `$ ` lines of its other blocks.
fn commands(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<bool> = None; // Some(is a shell block) inside a fence
    let mut pending = String::new();
    for line in readme.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            block = match block {
                Some(_) => None,
                None => Some(matches!(info.trim(), "sh" | "bash" | "shell")),
            };
            continue;
        }
        let text = match block {
            Some(true) => line.trim(),
            Some(false) => match line.trim().strip_prefix("$ ") {
                Some(c) => c,
                None => continue,
            },
            None => continue,
        };
        if text.starts_with('#') || text.is_empty() {
            continue;
        }
        let text = strip_comment(text);
        match text.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head.trim_end());
                pending.push(' ');
            }
            None => {
                pending.push_str(text);
                out.push(std::mem::take(&mut pending));
            }
        }
    }
    out
}

/// README.md's commands.
fn readme_commands() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    commands(&std::fs::read_to_string(path).expect("read README.md"))
}

/// What the table says about `command`.
fn how(command: &str) -> Option<How> {
    COMMANDS
        .iter()
        .find(|(c, _)| *c == command)
        .map(|(_, h)| *h)
}

#[test]
fn every_readme_command_is_run_or_listed_with_a_reason() {
    let shown = readme_commands();
    assert!(shown.len() >= 5, "found the README's commands: {shown:?}");
    let missing: Vec<&String> = shown.iter().filter(|c| how(c).is_none()).collect();
    let stale: Vec<&str> = COMMANDS
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| !shown.iter().any(|s| s == c))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "tests/readme_commands.rs's COMMANDS is out of step with README.md\n\
         in the README, not in COMMANDS (add each, as Run/Serve/WhileServing or NotRun(reason)):\n  {}\n\
         in COMMANDS, no longer in the README (remove):\n  {}",
        missing.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join("\n  "),
        stale.join("\n  ")
    );
}

/// A temporary directory with the files [`PATHS`] stand for, and the
/// command line environment to run README commands in it.
struct Bench {
    /// The directory (commands run in it).
    dir: tempfile::TempDir,
    /// The free loopback address that stands for [`METRICS`].
    metrics: String,
    /// The prepared rule's name, which stands for [`RULE`].
    rule: String,
    /// The prepared rule's backend, which stands for [`BACKEND`].
    backend: String,
}

impl Bench {
    /// Prepares the configuration `/etc/rinetd.conf` stands for: one rule
    /// to an echo backend, and the control socket `/run/oi/oi.sock` stands for.
    fn new() -> Bench {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = echo_backend("127.0.0.1:0");
        let port = free_port();
        let conf = format!(
            "controlsocket {}\n127.0.0.1 {port} {} {}\n",
            dir.path().join("oi.sock").display(),
            backend.ip(),
            backend.port()
        );
        std::fs::write(dir.path().join("rinetd.conf"), conf).expect("write conf");
        Bench {
            dir,
            metrics: format!("127.0.0.1:{}", free_port()),
            rule: format!("127.0.0.1:{port}/tcp"),
            backend: backend.to_string(),
        }
    }

    /// `command` with the system paths replaced by the prepared files.
    fn mapped(&self, command: &str) -> String {
        PATHS
            .iter()
            .fold(command.to_string(), |c, (from, to)| {
                c.replace(from, &self.dir.path().join(to).display().to_string())
            })
            .replace(METRICS, &self.metrics)
            .replace(RULE, &self.rule)
            .replace(BACKEND, &self.backend)
    }

    /// `sh -c command` (paths mapped) in the directory, with the built oi first on PATH.
    fn command(&self, command: &str) -> Command {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_oi"));
        let bin_dir = bin.parent().expect("binary's directory");
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(self.mapped(command))
            .current_dir(self.dir.path())
            .env("PATH", path)
            .stdin(Stdio::null());
        c
    }

    /// Runs `command` to the end; fails the test unless it exits 0.
    fn run(&self, command: &str) {
        let out = self.command(command).output().expect("run sh");
        assert!(
            out.status.success(),
            "README command {command:?} (run as {:?}) failed ({}):\nstdout: {}\nstderr: {}",
            self.mapped(command),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn readme_commands_run_as_written() {
    let shown = readme_commands();
    let bench = Bench::new();
    let of = |kind: fn(How) -> bool| -> Vec<&String> {
        shown.iter().filter(|c| how(c).is_some_and(kind)).collect()
    };
    for c in of(|h| matches!(h, Run)) {
        bench.run(c);
    }
    // Each server command in turn serves while every WhileServing command
    // asks it (the prepared configuration names the control socket, so each
    // server has one).
    for server in of(|h| matches!(h, Serve)) {
        serve_and_ask(&bench, server, &of(|h| matches!(h, WhileServing)));
    }
}

/// Runs `server` until it reports ready, runs each of `questions` against
/// it, and checks it is still serving.
fn serve_and_ask(bench: &Bench, server: &str, questions: &[&String]) {
    // The server tells its service manager it is ready: the test listens.
    let notify_path = bench.dir.path().join("notify.sock");
    let _ = std::fs::remove_file(&notify_path);
    let notify = UnixDatagram::bind(&notify_path).expect("notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut child = bench
        .command(&format!("exec {server}"))
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let mut buf = [0u8; 4096];
    let ready = notify
        .recv(&mut buf)
        .map(|n| String::from_utf8_lossy(&buf[..n]).contains("READY=1"));
    if ready.as_ref().map_or(true, |r| !r) {
        let _ = child.kill();
        let out = child.wait_with_output().expect("server output");
        panic!(
            "README command {server:?} did not report ready ({ready:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for q in questions {
        bench.run(q);
    }
    let still_running = child.try_wait().expect("server status").is_none();
    let _ = child.kill();
    let out = child.wait_with_output().expect("server output");
    assert!(
        still_running,
        "README command {server:?} exited while serving: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_first_readme_command_s_configuration_is_valid() {
    // `cargo run --release -- -c profiling.conf`, without the release build:
    // the file it names must load.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["--check", "-c", "profiling.conf"])
        .current_dir(repo)
        .output()
        .expect("run oi");
    assert!(
        out.status.success(),
        "oi --check -c profiling.conf: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        readme_commands()
            .first()
            .is_some_and(|c| c.contains("-c profiling.conf")),
        "the README's first command runs oi on profiling.conf"
    );
}

#[test]
fn every_command_not_run_says_why() {
    for (command, how) in COMMANDS {
        if let NotRun(reason) = how {
            assert!(
                reason.len() > 10,
                "{command:?}: give the reason it is not run"
            );
        }
    }
}

#[test]
fn commands_are_read_from_shell_blocks_and_prompt_lines_only() {
    let readme = "text `oi x`\n```sh\n# a comment\nfoo --bar   # what it does\nlong \\\n  line\n```\n\
                  ```\n$ oi status\noutput line\n```\n```yaml\nkey: 1\n```\n```sh\necho '#not a comment'\n```\n";
    assert_eq!(
        commands(readme),
        [
            "foo --bar",
            "long line",
            "oi status",
            "echo '#not a comment'"
        ]
    );
}
