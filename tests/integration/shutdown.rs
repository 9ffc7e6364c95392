//! SIGTERM: stop accepting at once; exit at once, or after open connections
//! finish when `--drain` allows it.

use crate::common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

fn setup() -> (tempfile::TempDir, std::path::PathBuf, u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let port = free_port();
    write_atomic(&conf, &format!("127.0.0.1 {port} 127.0.0.1 {backend}\n"));
    (dir, conf, port)
}

#[test]
fn sigterm_exits_promptly_despite_open_connections() {
    let (dir, conf, port) = setup();
    let mut oi = OiProcess::start(dir.path(), &conf, &[]);
    let mut open = connect(local(port));
    open.write_all(b"x").expect("write");
    let mut b = [0u8; 1];
    open.read_exact(&mut b).expect("echo");
    oi.signal(rustix::process::Signal::TERM);
    let status = oi
        .exited_within(Duration::from_secs(2))
        .expect("exits promptly");
    assert!(status.success());
}

#[test]
fn drain_lets_open_connections_finish_and_refuses_new_ones() {
    let (dir, conf, port) = setup();
    let mut oi = OiProcess::start(dir.path(), &conf, &["--drain", "30"]);
    let mut open = connect(local(port));
    open.write_all(b"x").expect("write");
    let mut b = [0u8; 1];
    open.read_exact(&mut b).expect("echo");
    oi.signal(rustix::process::Signal::TERM);
    assert!(oi.next_notify().contains("STOPPING=1"));
    // Listeners are closed at once...
    holds_within(PATIENCE, || TcpStream::connect(local(port)).is_err());
    assert!(
        TcpStream::connect(local(port)).is_err(),
        "still accepting after SIGTERM"
    );
    // ...while the open connection keeps working.
    assert!(
        oi.child.try_wait().expect("try_wait").is_none(),
        "exited before draining"
    );
    open.write_all(b"y").expect("write while draining");
    open.read_exact(&mut b).expect("echo while draining");
    assert_eq!(&b, b"y");
    open.shutdown(Shutdown::Write).expect("close");
    let mut rest = Vec::new();
    open.read_to_end(&mut rest).expect("EOF");
    let status = oi
        .exited_within(Duration::from_secs(5))
        .expect("exits once drained");
    assert!(status.success());
}

#[test]
fn a_second_sigterm_during_drain_exits_at_once() {
    let (dir, conf, port) = setup();
    let mut oi = OiProcess::start(dir.path(), &conf, &["--drain", "1h"]);
    let mut open = connect(local(port));
    open.write_all(b"x").expect("write");
    let mut b = [0u8; 1];
    open.read_exact(&mut b).expect("echo");
    oi.signal(rustix::process::Signal::TERM);
    assert!(oi.next_notify().contains("STOPPING=1"));
    // The listener closes before the drain starts: once it refuses, oi is draining.
    holds_within(PATIENCE, || TcpStream::connect(local(port)).is_err());
    assert!(oi.child.try_wait().expect("try_wait").is_none(), "draining");
    oi.signal(rustix::process::Signal::TERM);
    let status = oi
        .exited_within(Duration::from_secs(5))
        .expect("a second SIGTERM ends the hour-long drain");
    assert!(status.success());
}
