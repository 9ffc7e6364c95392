//! The configuration lines for PROXY, limits and watching reach the running
//! server: each is written in a file, started through the real binary, and
//! observed from outside.

use crate::common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

#[test]
fn the_new_lines_and_options_parse_and_print_back() {
    let text = "trust-proxy 127.0.0.0/8\nmaxconn 100\nmetrics 127.0.0.1:9465\ncontrolsocket /run/oi/control.sock\n\
                127.0.0.1 8080 127.0.0.1 80 [proxy=v2, accept-proxy, maxconn=10, maxconn-per-client=2]\n\
                trust-proxy 10.0.0.1\n";
    let cfg = oxidinetd::config::parse(text).expect("valid");
    assert_eq!(cfg.globals.max_connections, Some(100));
    assert_eq!(
        cfg.globals.metrics,
        Some("127.0.0.1:9465".parse().expect("addr"))
    );
    assert_eq!(
        cfg.globals.control_socket.as_deref(),
        Some(std::path::Path::new("/run/oi/control.sock"))
    );
    assert_eq!(cfg.global_acl.trust_proxy.len(), 1);
    let rule = &cfg.rules[0];
    assert_eq!(rule.acl.trust_proxy.len(), 1, "after a rule: the rule's");
    assert_eq!(
        rule.options.to_string(),
        "[proxy=v2, accept-proxy=on, maxconn=10, maxconn-per-client=2]"
    );
    for (bad, why) in [
        (
            "[proxy=v3]",
            "invalid PROXY protocol version 'v3' (expected v1 or v2)",
        ),
        (
            "[maxconn=0]",
            "maxconn must be between 1 and 1000000, not '0'",
        ),
        (
            "[maxconn-per-client=x]",
            "maxconn-per-client must be between 1 and 1000000, not 'x'",
        ),
    ] {
        let e = oxidinetd::config::parse(&format!("127.0.0.1 8080 127.0.0.1 80 {bad}\n"))
            .expect_err(bad)
            .to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
    // Version 1 has no datagram form: on a rule with a UDP side it is
    // refused with the line (UDP→UDP, TCP→UDP and UDP→TCP alike: a UDP→TCP
    // rule could only send version 2), v2 is accepted.
    let e = oxidinetd::config::parse(
        "127.0.0.1 53/udp 10.0.0.1 53/udp [proxy=v2]\n\
         127.0.0.1 54/udp 10.0.0.1 53/udp [proxy=v1]\n\
         127.0.0.1 55 10.0.0.1 53/udp [proxy=v1]\n\
         127.0.0.1 56/udp 10.0.0.1 53 [proxy=v1]\n",
    )
    .expect_err("v1 towards UDP")
    .to_string();
    assert_eq!(
        e.lines().collect::<Vec<_>>(),
        [
            "config:2: proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose backend is /udp: '127.0.0.1 54/udp 10.0.0.1 53/udp [proxy=v1]'",
            "config:3: proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose backend is /udp: '127.0.0.1 55 10.0.0.1 53/udp [proxy=v1]'",
            "config:4: proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose listener is /udp: '127.0.0.1 56/udp 10.0.0.1 53 [proxy=v1]'",
        ]
    );
    let e = oxidinetd::config::parse("metrics localhost\n")
        .expect_err("no port")
        .to_string();
    assert!(e.contains("metrics needs an address and port"), "{e}");
}

/// A backend that reads one line (the PROXY header) and reports it, then echoes.
fn header_backend() -> (std::net::SocketAddr, std::sync::mpsc::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().expect("clone"));
                let mut line = String::new();
                let _ = r.read_line(&mut line);
                let _ = tx.send(line);
                let mut w = c;
                let _ = std::io::copy(&mut r, &mut w);
            });
        }
    });
    (addr, rx)
}

#[test]
fn proxy_maxconn_controlsocket_and_metrics_lines_drive_the_binary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let sock = dir.path().join("control.sock");
    let (backend, headers) = header_backend();
    let port = free_port();
    let metrics_port = free_port();
    write_atomic(
        &conf,
        &format!(
            "metrics 127.0.0.1:{metrics_port}\ncontrolsocket {}\n127.0.0.1 {port} 127.0.0.1 {} [proxy=v1, maxconn=1]\n",
            sock.display(),
            backend.port()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    // proxy=v1: the backend's first line names the real client.
    let mut first = connect(local(port));
    first.write_all(b"ping\n").expect("write");
    let header = headers
        .recv_timeout(PATIENCE)
        .expect("the backend got a header");
    let client_port = first.local_addr().expect("addr").port();
    assert_eq!(
        header,
        format!("PROXY TCP4 127.0.0.1 127.0.0.1 {client_port} {port}\r\n")
    );
    let mut back = [0u8; 5];
    first.read_exact(&mut back).expect("echo after the header");
    // maxconn=1: a second connection while the first is open is closed at once.
    let mut second = connect(local(port));
    let mut buf = [0u8; 1];
    let n = second.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without data");
    // controlsocket: `oi status -c FILE` finds the server without --socket.
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["-c"])
        .arg(&conf)
        .arg("status")
        .output()
        .expect("oi status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains(&format!("127.0.0.1:{port}/tcp")),
        "{status}"
    );
    // metrics ADDR: Prometheus text on GET /metrics.
    let mut m = TcpStream::connect(local(metrics_port)).expect("metrics listener");
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut page = String::new();
    let _ = m.read_to_string(&mut page);
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("oi_connections_active"), "{page}");
    drop(first);
    let (status, _) = oi.stop();
    assert!(status.success());
}

#[test]
fn a_rule_s_maxconn_count_survives_a_sighup_reload_that_keeps_the_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let port = free_port();
    let text = format!("127.0.0.1 {port} 127.0.0.1 {backend} [maxconn=1]\n");
    write_atomic(&conf, &text);
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let echo = |s: &mut TcpStream| -> bool {
        let mut b = [0u8; 2];
        s.write_all(b"hi").is_ok() && s.read_exact(&mut b).is_ok()
    };
    let mut held = connect(local(port));
    assert!(echo(&mut held), "the first connection is served");
    // Same rule, rewritten: the listener (and its count) is kept.
    write_atomic(&conf, &format!("# reloaded\n{text}"));
    oi.reload();
    let mut over = connect(local(port));
    assert!(
        !echo(&mut over),
        "still one open after the reload: the second is refused"
    );
    drop(held);
    wait_until("the slot is given back", || {
        let mut s = connect(local(port));
        echo(&mut s)
    });
    let (status, _) = oi.stop();
    assert!(status.success());
}

#[test]
fn a_yaml_rule_with_proxy_v2_sends_the_header_through_the_binary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.yaml");
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    let backend = l.local_addr().expect("addr");
    let port = free_port();
    write_atomic(
        &conf,
        &format!(
            "global:\n  maxconn: 10\nrules:\n  - name: web\n    bind: 127.0.0.1:{port}\n    connect: 127.0.0.1:{}\n    proxy: v2\n    maxconn: 5\n",
            backend.port()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let mut c = connect(local(port));
    c.write_all(b"payload").expect("write");
    let (mut b, _) = l.accept().expect("oi connects to the backend");
    b.set_read_timeout(Some(PATIENCE)).expect("timeout");
    // 16 fixed bytes and 12 of addresses: proxy-protocol.txt 2.2, TCP over IPv4.
    let mut got = [0u8; 28 + 7];
    b.read_exact(&mut got).expect("header and payload");
    let client_port = c.local_addr().expect("addr").port();
    let mut want = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    want.extend_from_slice(&[0x21, 0x11, 0x00, 0x0c, 127, 0, 0, 1, 127, 0, 0, 1]);
    want.extend_from_slice(&client_port.to_be_bytes());
    want.extend_from_slice(&port.to_be_bytes());
    want.extend_from_slice(b"payload");
    assert_eq!(got.to_vec(), want);
    drop((b, c));
    let (status, _) = oi.stop();
    assert!(status.success());
}
