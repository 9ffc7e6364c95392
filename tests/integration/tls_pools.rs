//! `tls-connect` to a pool of backends, through the real binary: without
//! `tls-name` each backend is verified for its own host name as written
//! (here `localhost`, whose certificate names it, and `127.0.0.1`, whose
//! certificate names only that address), so a pool's backends need not
//! share a certificate; an explicit `tls-name` is verified on every one.

use crate::common::*;
use crate::tls::{ca, leaf, openssl_present, p, signed};
use std::io::{Read, Write};

/// A plaintext GET through oi on `port`: the reply, empty when oi closed.
fn get(port: u16) -> String {
    let mut s = connect(local(port));
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("request");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply).into_owned()
}

#[test]
fn each_backend_of_a_pool_is_verified_for_its_own_name_unless_tls_name_is_given() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let by_name = leaf(dir.path(), &root, "localhost", 30);
    let by_address = signed(dir.path(), &root, "ip", "/CN=ip", "IP:127.0.0.1", 30);
    let first = TlsServer::serving(&by_name.cert, &by_name.key, "localhost");
    let second = TlsServer::serving(&by_address.cert, &by_address.key, "127.0.0.1");
    let (a, b) = (first.port, second.port);
    let (own, named) = (free_port(), free_port());
    let log = dir.path().join("oi.log");
    let pool = format!("      - localhost:{a}/tcp\n      - 127.0.0.1:{b}/tcp\n");
    let tls = format!(
        "    tls:\n      connect: true\n      ca: {}\n",
        p(&root.cert)
    );
    let conf = dir.path().join("oi.yaml");
    write_atomic(
        &conf,
        &format!(
            "global:\n  log_file: {}\n  dns_multi_ip_expand: true\n  dns_multi_ip_proto: ipv4\n\
             rules:\n\
             \x20 - name: own\n    bind: 127.0.0.1:{own}/tcp\n    connect:\n{pool}{tls}\
             \x20 - name: named\n    bind: 127.0.0.1:{named}/tcp\n    connect:\n{pool}{tls}      name: localhost\n",
            p(&log)
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    // Round robin: both backends answer, each verified for its own name.
    for i in 0..4 {
        let reply = get(own);
        if !reply.starts_with("HTTP/1.0 200 ok") {
            oi.fail(&format!(
                "request {i} through the pool is answered by a verified backend: {reply:?}"
            ));
        }
    }
    // With the first backend gone, every client reaches the second.
    drop(first);
    for i in 0..2 {
        let reply = get(own);
        if !reply.starts_with("HTTP/1.0 200 ok") {
            oi.fail(&format!(
                "request {i} reaches 127.0.0.1, verified as 127.0.0.1 (not as localhost): {reply:?}"
            ));
        }
    }
    // tls-name=localhost applies to every backend: 127.0.0.1's
    // certificate does not name it, so that client is closed.
    let reply = get(named);
    if !reply.is_empty() {
        oi.fail(&format!(
            "an explicit tls-name is verified on the second backend too: {reply:?}"
        ));
    }
    let lines = wait_lines(&log, 14);
    let failed: Vec<&String> = lines
        .iter()
        .filter(|l| l.ends_with("tls-backend-failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{}", lines.join("\n"));
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains("TLS to the backend failed: wrong name"),
        "{stderr}"
    );
}
