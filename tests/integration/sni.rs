//! TLS passthrough by server name (`[sni=...]`), through the real binary:
//! `openssl s_server` backends with certificates of their own, and
//! `openssl s_client -servername` through oi. Each name reaches its
//! backend and the handshake completes end to end (the client sees that
//! backend's certificate and its reply); no server name goes to the default
//! rule; bytes that are not TLS go to the default or are closed
//! (`sni-unrouted`) when there is none. A raw ClientHello written one byte
//! at a time is routed and reaches the backend whole; and splice still
//! carries the bytes after the peek. Without openssl the openssl tests say
//! so and pass, unless OI_REQUIRE_TOOLS is set (CI sets it, and installs
//! openssl in .ci/run).

use crate::common::*;
use oxidinetd::client_hello;
use oxidinetd::config::{Proto, SpliceMode};
use oxidinetd::{LogHandle, Settings};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

/// Whether `openssl` runs; when it does not, the test is skipped unless
/// OI_REQUIRE_TOOLS is set.
fn openssl_present() -> bool {
    tool_present("openssl", "version", "openssl")
}

/// A self-signed certificate for `cn` in `dir` (`cn.crt`, `cn.key`), P-256.
fn certificate(dir: &Path, cn: &str) -> (String, String) {
    let crt = dir.join(format!("{cn}.crt")).display().to_string();
    let key = dir.join(format!("{cn}.key")).display().to_string();
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", &format!("/CN={cn}"), "-keyout", &key, "-out", &crt])
        .output()
        .expect("run openssl req");
    assert!(
        out.status.success(),
        "openssl req: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (crt, key)
}

/// An `openssl s_server -www` with a fresh certificate for `cn`.
fn tls_server(dir: &Path, cn: &str) -> TlsServer {
    let (crt, key) = certificate(dir, cn);
    TlsServer::serving(Path::new(&crt), Path::new(&key), cn)
}

/// `openssl s_client` to 127.0.0.1:`port` asking for `name` (`None`: no
/// server name), sending an HTTP request; all it printed.
fn s_client(port: u16, name: Option<&str>) -> String {
    let mut cmd = Command::new("timeout");
    cmd.args(["30", "openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-ign_eof");
    match name {
        Some(n) => cmd.args(["-servername", n]),
        None => cmd.arg("-noservername"),
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn openssl s_client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"GET / HTTP/1.0\r\n\r\n")
        .expect("request");
    let out = child.wait_with_output().expect("s_client");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether `out` shows a completed handshake with `cn`'s certificate and
/// s_server's reply to the request.
fn reached(out: &str, cn: &str) -> bool {
    let subject = out.contains(&format!("subject=CN = {cn}")) || out.contains(&format!("CN={cn}"));
    subject && out.contains("HTTP/1.0 200 ok")
}

#[test]
fn each_server_name_reaches_its_backend_and_the_handshake_completes() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let a = tls_server(dir.path(), "a.example.com");
    let b = tls_server(dir.path(), "b.example.org");
    let fallback = tls_server(dir.path(), "default.example.net");
    let port = free_port();
    let log = dir.path().join("oi.log");
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "logfile {}\n\
             127.0.0.1 {port} 127.0.0.1 {} [sni=a.example.com]\n\
             127.0.0.1 {port} 127.0.0.1 {} [sni=*.example.org]\n\
             127.0.0.1 {port} 127.0.0.1 {}\n",
            log.display(),
            a.port,
            b.port,
            fallback.port
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    for (name, cn) in [
        (Some("a.example.com"), "a.example.com"),
        (Some("www.example.org"), "b.example.org"),
        (Some("deep.www.example.org"), "b.example.org"),
        (Some("example.org"), "default.example.net"),
        (Some("other.example.com"), "default.example.net"),
        (None, "default.example.net"),
    ] {
        let out = s_client(port, name);
        if !reached(&out, cn) {
            oi.fail(&format!(
                "{name:?} should reach {cn}; s_client said:\n{out}"
            ));
        }
    }
    // Bytes that are not TLS go to the default rule (s_server keeps such a
    // connection open: its `opened` line, without a name, is the evidence).
    let mut s = connect(local(port));
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    // The log file names the routed server name in an extra last field.
    let lines = wait_lines(&log, 13);
    let routed = lines
        .iter()
        .filter(|l| l.ends_with("\tdeep.www.example.org"))
        .count();
    assert_eq!(
        routed,
        2,
        "opened and done lines name it:\n{}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.contains(&format!("\t{}\t", b.port))),
        "the routed rule's backend port is in its lines"
    );
    let unnamed_to_default = format!("\t{}\t0\t0\topened", fallback.port);
    let unnamed = lines
        .iter()
        .filter(|l| l.ends_with(&unnamed_to_default))
        .count();
    assert_eq!(
        unnamed,
        2,
        "no name and garbage both went to the default:\n{}",
        lines.join("\n")
    );
    drop(s);
    oi.stop();
}

#[test]
fn without_a_default_rule_unrouted_connections_are_closed_and_logged() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let a = tls_server(dir.path(), "a.example.com");
    let port = free_port();
    let log = dir.path().join("oi.log");
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "logfile {}\n127.0.0.1 {port} 127.0.0.1 {} [sni=a.example.com]\n",
            log.display(),
            a.port
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let out = s_client(port, Some("a.example.com"));
    if !reached(&out, "a.example.com") {
        oi.fail(&format!("a.example.com should reach its backend:\n{out}"));
    }
    // Another name, no name, garbage: closed before any backend is asked.
    let out = s_client(port, Some("b.example.com"));
    assert!(!out.contains("HTTP/1.0 200 ok"), "{out}");
    let out = s_client(port, None);
    assert!(!out.contains("HTTP/1.0 200 ok"), "{out}");
    let mut s = connect(local(port));
    s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").expect("write");
    let mut reply = Vec::new();
    let n = s.read_to_end(&mut reply).unwrap_or(0);
    assert_eq!(n, 0, "closed without a byte");
    let lines = wait_lines(&log, 5);
    let unrouted: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("\tsni-unrouted"))
        .collect();
    assert_eq!(unrouted.len(), 3, "{}", lines.join("\n"));
    assert!(
        unrouted
            .iter()
            .any(|l| l.ends_with("\tsni-unrouted\tb.example.com")),
        "the unmatched name is logged:\n{}",
        lines.join("\n")
    );
    oi.stop();
}

#[test]
fn a_client_hello_written_one_byte_at_a_time_is_routed_and_arrives_whole() {
    let echo = echo_backend("127.0.0.1:0");
    let other = marker_backend(b"DEFAULT");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "controlsocket {}\n\
             127.0.0.1 {port} {} {} [sni=split.example.com]\n127.0.0.1 {port} {} {}\n",
            dir.path().join("oi.sock").display(),
            echo.ip(),
            echo.port(),
            other.ip(),
            other.port()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let hello = client_hello::example(Some("split.example.com"));
    let mut s = connect(local(port));
    s.set_nodelay(true).expect("nodelay");
    for byte in &hello {
        s.write_all(std::slice::from_ref(byte))
            .expect("write a byte");
    }
    let mut back = vec![0u8; hello.len()];
    if let Err(e) = s.read_exact(&mut back) {
        oi.fail(&format!("no echo of the ClientHello: {e}"));
    }
    assert_eq!(back, hello, "the backend got every byte, in order");
    // `oi connections` names the server name of the open connection.
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["connections", "-c"])
        .arg(&conf)
        .output()
        .expect("oi connections");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("RULE") && text.contains("SERVER_NAME"),
        "{text}"
    );
    assert!(text.contains("split.example.com"), "{text}");
    drop(s);
    // The default rule still takes a name no rule has.
    let mut s = connect(local(port));
    s.write_all(&client_hello::example(Some("else.example.com")))
        .expect("write");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert_eq!(reply, b"DEFAULT");
    oi.stop();
}

/// An in-process server on one listener: `name` routed to `named`, the
/// rest to `default`, with `--splice` set to `mode`.
fn shared_listener(
    mode: SpliceMode,
    name: &str,
    named: SocketAddr,
    default: SocketAddr,
) -> TestServer {
    let mut carrier = rule(local(0), Proto::Tcp, default, Proto::Tcp);
    let mut routed = rule(local(0), Proto::Tcp, named, Proto::Tcp);
    routed.rule.options.sni = Some(name.to_string());
    carrier.sni = vec![routed];
    let settings = Settings {
        splice: mode,
        ..Settings::default()
    };
    start(vec![carrier], settings, LogHandle::disabled())
}

#[test]
fn splice_carries_the_bytes_after_the_peek() {
    let echo = echo_backend("127.0.0.1:0");
    let other = marker_backend(b"DEFAULT");
    let srv = shared_listener(SpliceMode::On, "bulk.example.com", echo, other);
    let mut data = client_hello::example(Some("bulk.example.com"));
    data.extend(pattern(8 * 1024 * 1024, 26));
    let want = sha256(&data);
    let back = echo_through(srv.addr(), data);
    assert_eq!(sha256(&back), want, "every byte, the ClientHello first");
    assert!(srv.shared.pipes.live() > 0, "splice moved the bulk");
    assert_eq!(srv.shared.pipes.unavailable(), 0);
}

/// What a connection naming `name` gets back from 127.0.0.1:`port`.
fn answer(port: u16, name: &str) -> Vec<u8> {
    let mut s = connect(local(port));
    s.write_all(&client_hello::example(Some(name)))
        .expect("write");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    reply
}

#[test]
fn a_reload_changes_where_names_go_on_the_same_socket() {
    let one = marker_backend(b"ONE");
    let two = marker_backend(b"TWO");
    let rest = marker_backend(b"REST");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let conf = dir.path().join("oi.conf");
    let write = |a: SocketAddr, b: &str| {
        write_atomic(
            &conf,
            &format!(
                "127.0.0.1 {port} {} {} [sni=a.example.com]\n{b}127.0.0.1 {port} {} {}\n",
                a.ip(),
                a.port(),
                rest.ip(),
                rest.port()
            ),
        )
    };
    write(one, "");
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    assert_eq!(answer(port, "a.example.com"), b"ONE");
    assert_eq!(answer(port, "b.example.com"), b"REST");
    // a.example.com moves to the second backend; b.example.com gets a rule.
    let b_rule = format!(
        "127.0.0.1 {port} {} {} [sni=b.example.com]\n",
        two.ip(),
        two.port()
    );
    write(two, &b_rule);
    oi.reload();
    assert_eq!(answer(port, "a.example.com"), b"TWO");
    assert_eq!(answer(port, "b.example.com"), b"TWO");
    assert_eq!(answer(port, "c.example.com"), b"REST");
    oi.stop();
}

#[test]
fn a_client_hello_past_16_kib_goes_to_the_default_whole() {
    // A record announcing the largest handshake message, then more bytes
    // than oi reads: it gives up on the name at 16 KiB (the parser would
    // still say "need more"), and the default backend (an echo) gets every
    // byte.
    let echo = echo_backend("127.0.0.1:0");
    let named = marker_backend(b"NAMED");
    let srv = shared_listener(SpliceMode::Auto, "big.example.com", named, echo);
    let mut data = vec![22, 3, 1, 0x40, 0x00, 1, 0xff, 0xff, 0xff];
    data.resize(40 * 1024, 0x5a);
    let back = echo_through(srv.addr(), data.clone());
    assert_eq!(back, data);
}
