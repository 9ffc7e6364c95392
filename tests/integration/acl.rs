//! allow/deny through a running server: who gets through, and what the log says.

use crate::common::*;
use oxidinetd::config::{self, services::Services};
use oxidinetd::Settings;
use oxidinetd::{Format, LogHandle};
use socket2::{Domain, Socket, Type};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Connects to `to` from the loopback address `from`, sends a ping, and
/// returns whether it came back.
fn ping_from(from: [u8; 4], to: SocketAddr) -> bool {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.bind(&SocketAddr::from((from, 0)).into())
        .expect("bind client source");
    s.connect(&to.into()).expect("connect");
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut b = [0u8; 4];
    s.write_all(b"ping").is_ok() && s.read_exact(&mut b).is_ok() && &b == b"ping"
}

#[test]
fn allowed_not_allowed_and_denied_clients() {
    let backend = echo_backend("127.0.0.1:0");
    let text = format!(
        "deny 127.0.0.3\n\
         127.0.0.1 1 127.0.0.1 {}\n\
         allow 127.0.0.1\n\
         allow 127.0.0.[34]\n\
         allow 127.0.0.3\n\
         allow 127.0.0.4/32\n\
         deny 127.0.0.4\n",
        backend.port()
    )
    .replace("allow 127.0.0.[34]\n", "");
    let cfg = config::parse(&text).expect("valid config");
    let mut resolved = config::resolve(cfg, &Services::parse("")).expect("resolves");
    let mut rule = resolved.rules.remove(0);
    let mut ip = rule.bind.ip().expect("an IP listener");
    ip.set_port(0);
    rule.bind = ip.into();

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("acl.log");
    let log = LogHandle::start().expect("log");
    log.reopen(Some(path.clone()), Format::Tab)
        .expect("open log");
    let srv = start_acl(
        vec![rule],
        resolved.config.global_acl.clone(),
        Settings::default(),
        log,
    );

    assert!(
        ping_from([127, 0, 0, 1], srv.addr()),
        "127.0.0.1 is allowed"
    );
    assert!(
        !ping_from([127, 0, 0, 2], srv.addr()),
        "127.0.0.2 matches no allow"
    );
    assert!(
        !ping_from([127, 0, 0, 3], srv.addr()),
        "127.0.0.3 hits the global deny"
    );
    assert!(
        !ping_from([127, 0, 0, 4], srv.addr()),
        "127.0.0.4 hits the rule's deny"
    );

    let lines = wait_lines(&path, 5);
    // Connections end concurrently: compare the lines in a fixed order.
    let mut summary: Vec<(String, String, String, String)> = lines
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[1].into(), f[6].into(), f[7].into(), f[8].into())
        })
        .collect();
    summary.sort();
    let s = |a: &str, b: &str, c: &str, d: &str| (a.into(), b.into(), c.into(), d.into());
    assert_eq!(
        summary,
        vec![
            s("127.0.0.1", "0", "0", "opened"),
            s("127.0.0.1", "4", "4", "done-remote-closed"),
            s("127.0.0.2", "0", "0", "not-allowed"),
            s("127.0.0.3", "0", "0", "denied"),
            s("127.0.0.4", "0", "0", "denied"),
        ]
    );
}
