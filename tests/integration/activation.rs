//! Listening sockets oi is given instead of binding them: systemd's socket
//! activation, run here with `systemd-socket-activate` (package `systemd`),
//! which listens, waits for the first connection, then executes oi with the
//! sockets as `LISTEN_FDS`. Without the tool the test says so and passes,
//! unless OI_REQUIRE_TOOLS is set (CI sets it, and installs the package).

use crate::common::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

/// Whether `systemd-socket-activate` runs here; fails under OI_REQUIRE_TOOLS without it.
fn have_socket_activate() -> bool {
    let ok = Command::new("systemd-socket-activate")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("OI_REQUIRE_TOOLS").is_none(),
            "systemd-socket-activate is missing and OI_REQUIRE_TOOLS is set"
        );
        eprintln!("skipped: systemd-socket-activate is not installed (apt-get install systemd)");
    }
    ok
}

/// One echo round trip on an open stream.
fn echoes(s: &mut (impl Read + Write), what: &[u8]) -> bool {
    let mut back = vec![0u8; what.len()];
    s.write_all(what).is_ok() && s.read_exact(&mut back).is_ok() && back == what
}

#[test]
fn socket_activation_serves_the_passed_listeners_and_binds_the_rest() {
    if !have_socket_activate() {
        return;
    }
    let backend = echo_backend("127.0.0.1:0");
    let dir = tempfile::Builder::new()
        .prefix("oi-act")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let (passed, bound, spare) = (free_port(), free_port(), free_port());
    let sock = dir.path().join("in.sock");
    let conf = dir.path().join("oi.conf");
    let b = backend.port();
    std::fs::write(
        &conf,
        format!(
            "127.0.0.1 {passed} 127.0.0.1 {b}\n\
             127.0.0.1 {bound} 127.0.0.1 {b}\n\
             unix:{} 127.0.0.1 {b}\n",
            sock.display()
        ),
    )
    .expect("conf");
    let mut command = Command::new("systemd-socket-activate");
    command
        .arg(format!("--listen=127.0.0.1:{passed}"))
        .arg(format!("--listen=127.0.0.1:{spare}"))
        .arg(format!("--listen={}", sock.display()))
        .arg("--fdname=web:spare:local")
        .args(["-E", "NOTIFY_SOCKET", "-E", "RUST_LOG"])
        .arg(env!("CARGO_BIN_EXE_oi"))
        .arg("-c")
        .arg(&conf);
    let oi = OiProcess::spawn(command, dir.path());
    // It executes oi on the first connection: this one waits in the passed
    // socket's queue until oi accepts it there.
    wait_until("systemd-socket-activate listens on all three", || {
        oi.stderr_tail().contains(" as 5.")
    });
    let mut first = connect(local(passed));
    first.write_all(b"early").expect("write");
    oi.wait_ready();
    let mut back = [0u8; 5];
    first
        .read_exact(&mut back)
        .unwrap_or_else(|e| oi.fail(&format!("the connection queued before oi ran: {e}")));
    assert_eq!(&back, b"early");
    assert!(echoes(&mut connect(local(passed)), b"again"));
    // No descriptor for this rule: oi bound it itself.
    ping(bound).unwrap_or_else(|e| oi.fail(&format!("the rule oi binds: {e}")));
    let mut unix = UnixStream::connect(&sock).expect("connect the passed unix socket");
    unix.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    assert!(echoes(&mut unix, b"unix"), "through the passed unix socket");
    // The descriptor no rule takes is closed: its port refuses.
    assert!(refused(spare), "the unused passed listener is closed");
    let log = oi.stderr_tail();
    assert!(
        log.contains(&format!(
            "127.0.0.1:{passed}/tcp: serving the passed descriptor(s) 3 (name \"web\")"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "passed descriptor 4 (name \"spare\", 127.0.0.1:{spare}/tcp) matches no rule"
        )),
        "{log}"
    );
    drop((first, unix));
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{status}: {stderr}");
    // The socket file is systemd's: oi leaves it where it was.
    assert!(
        sock.exists(),
        "oi must not remove a socket file it did not make"
    );
}
