//! What `oi upgrade` costs in descriptors: the old oi copies a
//! connection's two sockets only for the message that carries them, so a
//! hand-over needs one message's worth of descriptors beyond what the
//! connections hold, not as many again.

use super::upgrade::{put_binary, signal_upgrade};
use crate::common::*;
use std::io::{Read, Write};
use std::path::Path;

/// Open connections: four times this (2 sockets, 2 copies each) is above
/// [`LIMIT`], twice this plus one message's copies (126 × 2) well below.
const CONNS: usize = 400;

/// The open-file limit oi runs under (soft and hard).
const LIMIT: usize = 1200;

#[test]
fn an_upgrade_moves_more_connections_than_a_quarter_of_the_descriptor_limit() {
    let b = echo_backend("127.0.0.1:0").port();
    let dir = tempfile::Builder::new()
        .prefix("oi-upgf")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let port = free_port();
    let conf = dir.path().join("oi.conf");
    std::fs::write(&conf, format!("127.0.0.1 {port} 127.0.0.1 {b}\n")).expect("conf");
    // Through sh for the limit (it execs oi, so the pid is oi's).
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -n {LIMIT} && exec \"$0\" \"$@\""))
        .arg(&binary)
        .arg("-c")
        .arg(&conf)
        .args(["--threads", "2"]);
    let mut old = OiProcess::spawn(command, dir.path());
    old.wait_ready();
    let mut conns: Vec<_> = (0..CONNS).map(|_| connect(local(port))).collect();
    // Each one echoes: accepted and connected to the backend.
    for (i, c) in conns.iter_mut().enumerate() {
        echo(c, i).unwrap_or_else(|e| old.fail(&format!("connection {i} before: {e}")));
    }
    let new = signal_upgrade(&mut old, &binary);
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit: some connections stayed with it"));
    assert!(status.success(), "{status}");
    let tail = old.stderr_tail();
    assert!(
        tail.contains(&format!("handed {CONNS} live connection(s)")),
        "every connection moved: {tail}"
    );
    assert!(!tail.contains("could not be paused"), "{tail}");
    for (i, c) in conns.iter_mut().enumerate() {
        echo(c, i).unwrap_or_else(|e| panic!("connection {i} after: {e}: {tail}"));
    }
    assert!(!new.exited(), "the new oi serves on");
}

/// One round trip of `i`'s digits on `c`.
fn echo(c: &mut std::net::TcpStream, i: usize) -> std::io::Result<()> {
    let what = i.to_string();
    c.write_all(what.as_bytes())?;
    let mut b = vec![0u8; what.len()];
    c.read_exact(&mut b)?;
    assert_eq!(b, what.as_bytes());
    Ok(())
}
