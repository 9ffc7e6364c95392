//! `oi top` on a real terminal: tmux runs it in a detached session of a set
//! size, the test reads the screen with `capture-pane` and types with
//! `send-keys`, while traffic flows through the oi it watches. Without tmux
//! the test says so and passes, unless OI_REQUIRE_TOOLS is set (CI sets it,
//! and installs tmux).

use crate::common::*;
use std::io::{Read, Write};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tmux server of the test's own (`-L`), killed when the test ends.
pub(super) struct Tmux {
    /// The server's socket name, unique to this test process.
    name: String,
}

impl Tmux {
    /// A tmux server of its own (named `tag` and this process's id) running
    /// `oi top` on `socket` at a 200 ms interval in a 150x40 terminal.
    pub(super) fn top(tag: &str, socket: &str) -> Self {
        let tmux = Tmux {
            name: format!("{tag}-{}", std::process::id()),
        };
        let cmd = format!(
            "{} top --socket {socket} --interval 200ms",
            env!("CARGO_BIN_EXE_oi")
        );
        let started = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "150",
            "-y",
            "40",
            &cmd,
        ]);
        assert!(
            started.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&started.stderr)
        );
        tmux
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.name)
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen satisfies `cond`; fails showing the last screen.
    pub(super) fn wait_for(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let s = self.screen();
            if cond(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting until {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn keys(&self, keys: &str) {
        assert!(self.run(&["send-keys", "-t", "top", keys]).status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

pub(super) fn tmux_present() -> bool {
    tool_present("tmux", "-V", "tmux")
}

/// Sends and reads back through `addr` until `stop` is set (at most a minute).
fn traffic(addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = connect(addr);
        let chunk = vec![7u8; 32 * 1024];
        let mut back = vec![0u8; chunk.len()];
        let end = Instant::now() + Duration::from_secs(60);
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            c.write_all(&chunk).expect("write");
            c.read_exact(&mut back).expect("read back");
        }
    })
}

#[test]
fn top_shows_rules_and_reacts_to_keys_while_traffic_flows() {
    if !tmux_present() {
        return;
    }
    let backend = echo_backend("127.0.0.1:0");
    let (udp_backend, _datagrams) = udp_echo_backend("127.0.0.1:0");
    let (tcp_port, udp_port, sni_port) = (free_port(), free_udp_port(), free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    // Last, a listener two rules share by server name: each is a rule here.
    std::fs::write(
        &conf,
        format!(
            "127.0.0.1 {tcp_port} 127.0.0.1 {b}\n127.0.0.1 {udp_port}/udp 127.0.0.1 {}/udp\n\
             127.0.0.1 {sni_port} 127.0.0.1 {b} [sni=a.example.com]\n127.0.0.1 {sni_port} 127.0.0.1 {b}\n",
            udp_backend.port(),
            b = backend.port(),
        ),
    )
    .expect("conf");
    let sock = dir.path().join("oi.sock");
    let sock_arg = sock.to_str().expect("utf-8 path");
    let _oi = OiProcess::start(dir.path(), &conf, &["--socket", sock_arg]);
    let stop = Arc::new(AtomicBool::new(false));
    let flow = traffic(local(tcp_port), stop.clone());

    let tmux = Tmux::top("oi-top-test", sock_arg);
    let tcp_rule = format!("127.0.0.1:{tcp_port}/tcp");
    let udp_rule = format!("127.0.0.1:{udp_port}/udp");

    let sni_rule = format!("127.0.0.1:{sni_port}/tcp[sni=a.example.com]");

    // The rules, the backend, the live connection, and a rate that is moving.
    tmux.wait_for("the rules and the live connection show with a rate", |s| {
        s.contains(&tcp_rule)
            && s.contains(&udp_rule)
            && s.contains(&sni_rule)
            && s.contains(&format!("127.0.0.1:{sni_port}/tcp "))
            && s.contains(&format!("127.0.0.1:{}", backend.port()))
            && s.contains("Busiest connections (1 live)")
            && s.contains("M/s")
    });
    // s: the order changes and the header says which.
    tmux.keys("s");
    tmux.wait_for("the sort key is shown", |s| s.contains("sort: active"));
    // f: only the first rule, then only the second.
    tmux.keys("f");
    tmux.wait_for("the filter shows only the TCP rule", |s| {
        s.contains(&format!("rule: {tcp_rule}")) && !s.contains(&udp_rule)
    });
    tmux.keys("f");
    tmux.wait_for("the filter shows only the UDP rule", |s| {
        s.contains(&format!("rule: {udp_rule}")) && !s.contains(&format!("│{tcp_rule}"))
    });
    // p: frozen, and it says so.
    tmux.keys("p");
    tmux.wait_for("paused", |s| s.contains("PAUSED"));
    // A resize lays the screen out again at the new width.
    assert!(tmux
        .run(&["resize-window", "-t", "top", "-x", "100", "-y", "30"])
        .status
        .success());
    tmux.wait_for("the frame fits the new width", |s| {
        s.lines()
            .any(|l| l.starts_with("└") && l.chars().count() == 100)
    });
    // q: oi top exits and the session with it.
    tmux.keys("q");
    let deadline = Instant::now() + PATIENCE;
    while tmux.run(&["has-session", "-t", "top"]).status.success() {
        assert!(
            Instant::now() < deadline,
            "oi top did not quit on q:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Not a terminal: one table, rates over one interval.
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["top", "--socket", sock_arg, "--interval", "200ms"])
        .output()
        .expect("run oi top");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("RULE") && text.contains(&tcp_rule) && text.contains(&udp_rule),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no terminal escapes in a pipe: {text:?}"
    );
    stop.store(true, Ordering::Relaxed);
    flow.join().expect("traffic thread");
}

#[test]
fn top_without_a_server_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("none.sock");
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["top", "--socket", sock.to_str().expect("utf-8")])
        .output()
        .expect("run oi top");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("control socket"), "{err}");
}

/// A backend's `name:` is the operator's free text: the piped table shows
/// its control bytes escaped (`\x1b`), as `oi --check` and the status file
/// show outside text, and never writes them to whatever reads the pipe.
#[test]
fn piped_top_escapes_control_bytes_in_backend_names() {
    let backend = echo_backend("127.0.0.1:0");
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.yaml");
    // YAML's double-quoted "\e" is ESC: the name carries a colour sequence.
    std::fs::write(
        &conf,
        format!(
            "rules:\n  - name: web\n    bind: 127.0.0.1:{port}\n    connect:\n      - {{dest: '127.0.0.1:{}', name: \"red\\e[31mX\\a\"}}\n",
            backend.port()
        ),
    )
    .expect("conf");
    let sock = dir.path().join("oi.sock");
    let sock_arg = sock.to_str().expect("utf-8 path");
    let _oi = OiProcess::start(dir.path(), &conf, &["--socket", sock_arg]);
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["top", "--socket", sock_arg, "--interval", "100ms"])
        .output()
        .expect("run oi top");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "raw control bytes from a backend name reached the output: {text:?}"
    );
    assert!(
        text.contains("red\\x1b[31mX\\x07"),
        "the backend's name, escaped: {text:?}"
    );
}

/// The backends table's row of `backend` on `screen`, if shown.
fn backend_row<'s>(screen: &'s str, backend: &str) -> Option<&'s str> {
    screen
        .lines()
        .find(|l| l.starts_with('│') && l.contains(&format!(" {backend} ")))
}

/// `oi status`'s line for `backend`, through the control socket.
fn status_state(sock: &str, backend: std::net::SocketAddr) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["status", "--socket", sock])
        .output()
        .expect("run oi status");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{backend}:")))
        .unwrap_or_else(|| panic!("no line for {backend} in:\n{text}"))
        .to_string()
}

/// The action keys on a real terminal: j/k select a backend, `d` asks and
/// `y` drains it through the control socket (the same request `oi backend
/// drain` sends: `oi status` shows it drained, the other backend not),
/// `e` then `y` enables it again, and `x` then `n` asks and sends nothing.
#[test]
fn top_drains_and_enables_the_selected_backend_once_confirmed() {
    if !tmux_present() {
        return;
    }
    let (one, two) = (echo_backend("127.0.0.1:0"), echo_backend("127.0.0.1:0"));
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.yaml");
    std::fs::write(
        &conf,
        format!(
            "rules:\n  - name: pool\n    bind: 127.0.0.1:{port}/tcp\n    connect:\n      - '{one}/tcp'\n      - '{two}/tcp'\n"
        ),
    )
    .expect("conf");
    let sock = dir.path().join("oi.sock");
    let sock_arg = sock.to_str().expect("utf-8 path");
    let oi = OiProcess::start(dir.path(), &conf, &["--socket", sock_arg]);
    let tmux = Tmux::top("oi-top-act", sock_arg);
    let rule = format!("127.0.0.1:{port}/tcp");
    let (one_s, two_s) = (one.to_string(), two.to_string());
    tmux.wait_for("both backends and the action keys show", |s| {
        backend_row(s, &one_s).is_some()
            && backend_row(s, &two_s).is_some()
            && s.contains("d drain   e enable   x disable")
    });
    // An action with nothing selected says how to select.
    tmux.keys("d");
    tmux.wait_for("it says to select a backend", |s| {
        s.contains("select a backend first")
    });
    // j selects the first backend, j again the second; d asks.
    tmux.keys("j");
    tmux.keys("j");
    tmux.keys("d");
    let question = format!("drain backend {two} of rule {rule}? y/n");
    tmux.wait_for("the question names the second backend", |s| {
        s.contains(&question) && s.contains("y confirm")
    });
    assert!(
        status_state(sock_arg, two).contains("state=ready"),
        "nothing changes before y"
    );
    tmux.keys("y");
    let s = tmux.wait_for("oi's answer and the drained state show", |s| {
        s.contains(&format!(
            "{rule} {two}: state=drain weight=1 (was state=ready"
        )) && backend_row(s, &two_s).is_some_and(|r| r.contains(" drain "))
    });
    if !status_state(sock_arg, two).contains("state=drain") {
        oi.fail(&format!("top said it drained, oi status disagrees:\n{s}"));
    }
    assert!(status_state(sock_arg, one).contains("state=ready"), "{s}");
    // x, then n: asked, cancelled, nothing sent.
    tmux.keys("x");
    tmux.wait_for("the disable question", |s| {
        s.contains(&format!("disable backend {two} of rule {rule}"))
    });
    tmux.keys("n");
    tmux.wait_for("cancelled", |s| s.contains("disable cancelled"));
    assert!(status_state(sock_arg, two).contains("state=drain"));
    // e, then y: back to ready.
    tmux.keys("e");
    tmux.wait_for("the enable question", |s| {
        s.contains(&format!("enable backend {two} of rule {rule}? y/n"))
    });
    tmux.keys("y");
    tmux.wait_for("enabled", |s| {
        s.contains(&format!(
            "{rule} {two}: state=ready weight=1 (was state=drain"
        )) && backend_row(s, &two_s).is_some_and(|r| r.contains(" up "))
    });
    assert!(status_state(sock_arg, two).contains("state=ready"));
    tmux.keys("q");
    oi.stop();
}
