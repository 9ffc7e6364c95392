//! `oi upgrade` with a connection oi speaks TLS on: rustls's state cannot
//! be handed to the new oi, so the connection stays with the old one, which
//! forwards it on and exits when it ends; the upgrade itself does not wait
//! for it, and the new oi ends TLS for new clients.

use crate::common::*;
use crate::tls::{ca, leaf, rustls_client};
use crate::upgrade::{oi_upgrade, Adopted};
use std::io::{Read, Write};
use std::time::Duration;

#[test]
fn a_tls_connection_stays_with_the_old_oi_across_an_upgrade() {
    if !tool_present("openssl", "version", "openssl") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let backend = echo_backend("127.0.0.1:0").port();
    let port = free_port();
    let control = dir.path().join("control.sock");
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "controlsocket {}\n127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={},tls-key={}]\n",
            control.display(),
            edge.cert.display(),
            edge.key.display()
        ),
    );
    let mut old = OiProcess::start(dir.path(), &conf, &[]);
    let mut open = rustls_client(port, &root.cert, "edge.test");
    let echoed = |s: &mut rustls::StreamOwned<_, _>, text: &[u8]| {
        s.write_all(text).expect("write");
        let mut back = vec![0; text.len()];
        s.read_exact(&mut back).expect("echo");
        back == text
    };
    assert!(echoed(&mut open, b"before"));
    let out = oi_upgrade(&control, None);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        old.fail(&format!(
            "oi upgrade: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let pid: i32 = said
        .strip_prefix("upgraded: oi pid ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected answer: {said:?}"));
    let _new = Adopted(pid);
    // The old oi forwards the open connection on; the new one takes new clients.
    assert!(
        echoed(&mut open, b"after the upgrade"),
        "{}",
        old.stderr_tail()
    );
    let mut fresh = rustls_client(port, &root.cert, "edge.test");
    assert!(echoed(&mut fresh, b"a new client"));
    // The handshake counters carry over like every counter: the old oi's
    // one and the new oi's own.
    let st = crate::upgrade_udp::status_json(&control);
    let rule = &st["rules"][0]["oi"];
    assert_eq!(rule["tls_client_handshakes_full"], 2, "{st}");
    assert_eq!(rule["tls"]["client"]["handshakes"], 2, "{st}");
    assert!(
        old.exited_within(Duration::from_millis(300)).is_none(),
        "the old oi waits for its connection"
    );
    drop(open);
    let status = old
        .exited_within(Duration::from_secs(10))
        .unwrap_or_else(|| old.fail("the old oi did not exit once its TLS connection ended"));
    assert!(status.success(), "{status}");
}
