//! TLS made visible, through the real binary: each rule's handshakes by
//! side and kind and its failures by reason (a full handshake, a timeout,
//! no common cipher suite, a backend with the wrong name, an unknown server
//! name) in `/metrics`, `/status.json`, `oi status`, `oi top` (piped and in
//! tmux) and the status page (chromium); the expiry of every certificate a
//! rule presents as `oi_tls_certificate_expiry_seconds`, equal to the
//! certificate's notAfter and read again at a reload that keeps the
//! counters; a client certificate's subject in the JSON log and `oi
//! connections`. Certificates made by `openssl` as tls.rs makes them;
//! `openssl s_client` and `s_server` as the far ends. Without openssl each
//! test says so and passes, unless OI_REQUIRE_TOOLS is set (tmux and
//! chromium parts are skipped without them, as top.rs and status_page.rs do).

use crate::common::*;
use crate::observe::{http, parse_exposition, value, Sample};
use crate::tls::{ca, leaf, openssl_present, p, s_client, start};
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Every sample of a scrape of the metrics listener on `port`.
fn scrape(port: u16) -> Vec<Sample> {
    let answer = http(local(port), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (_, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    parse_exposition(body)
}

/// `/status.json` from the metrics listener on `port`.
fn status_json(port: u16) -> Value {
    let answer = http(local(port), "GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n");
    let (_, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    serde_json::from_str(body).expect("status.json is JSON")
}

/// The rule named `name` in a status document.
fn rule<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["rules"]
        .as_array()
        .and_then(|rules| rules.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no rule {name} in {doc}"))
}

/// The certificate's notAfter in seconds since 1970, as openssl and GNU
/// date read it (not as oi does).
fn not_after(cert: &Path) -> u64 {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-enddate", "-in"])
        .arg(cert)
        .output()
        .expect("openssl x509");
    let text = String::from_utf8_lossy(&out.stdout);
    let date = text.trim().strip_prefix("notAfter=").expect("notAfter=");
    let out = Command::new("date")
        .args(["-u", "+%s", "-d", date])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("seconds")
}

/// Connects to `port`, sends nothing, and reads until oi closes (at most
/// 20 s): a client that never starts its handshake.
fn silent_until_closed(port: u16) {
    let mut s = connect(local(port));
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    assert!(
        matches!(s.read(&mut buf), Ok(0)),
        "oi closes a silent client"
    );
}

/// A plaintext request to `port` and all that comes back until oi closes.
fn plain_get(port: u16) -> String {
    let mut s = connect(local(port));
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    std::io::Write::write_all(&mut s, b"GET / HTTP/1.0\r\n\r\n").expect("request");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply).into_owned()
}

#[test]
fn handshakes_and_failures_are_counted_per_rule_side_and_reason() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let a = leaf(dir.path(), &root, "a.test", 30);
    let server = {
        let pair = leaf(dir.path(), &root, "backend.test", 30);
        TlsServer::serving(&pair.cert, &pair.key, "backend.test")
    };
    let backend = marker_backend(b"served\n").port();
    let (ends, begins, wrong, shared, metrics) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let control = dir.path().join("control.sock");
    let (b, ca_file) = (server.port, p(&root.cert));
    let oi = start(
        dir.path(),
        &format!(
            "metrics 127.0.0.1:{metrics}\ncontrolsocket {}\n\
             127.0.0.1 {ends} 127.0.0.1 {backend} \
             [tls-cert={},tls-key={},tls-handshake-timeout=1]\n\
             127.0.0.1 {begins} 127.0.0.1 {b} [tls-connect,tls-ca={ca_file},tls-name=backend.test]\n\
             127.0.0.1 {wrong} 127.0.0.1 {b} [tls-connect,tls-ca={ca_file},tls-name=other.test]\n\
             127.0.0.1 {shared} 127.0.0.1 {backend} [sni=a.test,tls-cert={},tls-key={}]\n",
            p(&control),
            p(&edge.cert),
            p(&edge.key),
            p(&a.cert),
            p(&a.key),
        ),
    );
    // One full handshake and one that never starts (timed out) at the edge.
    let out = s_client(
        ends,
        &["-servername", "edge.test", "-CAfile", &ca_file],
        b"",
    );
    if !out.contains("served") {
        oi.fail(&format!("a client's handshake completes:\n{out}"));
    }
    silent_until_closed(ends);
    // A client that offers only a cipher suite rustls does not have (RSA
    // key exchange): nothing in common.
    let out = s_client(ends, &["-tls1_2", "-cipher", "AES128-SHA"], b"");
    if out.contains("served") {
        oi.fail(&format!("no handshake without a common suite:\n{out}"));
    }
    // A verified backend, and one whose certificate is for another name.
    if !plain_get(begins).starts_with("HTTP/1.0 200 ok") {
        oi.fail("the verified backend answers");
    }
    if !plain_get(wrong).is_empty() {
        oi.fail("a backend with the wrong name is not reached");
    }
    // A server name no rule of the shared listener has a certificate for.
    let out = s_client(shared, &["-servername", "nope.test"], b"");
    if out.contains("served") {
        oi.fail(&format!("an unknown name is not forwarded:\n{out}"));
    }

    let samples = scrape(metrics);
    let rule_of = |port: u16| format!("127.0.0.1:{port}/tcp");
    let done = |port: u16, side: &str, kind: &str| {
        let labels = [("rule", &*rule_of(port)), ("side", side), ("kind", kind)];
        value(&samples, "oi_tls_handshakes_total", &labels)
    };
    let failed = |rule: &str, side: &str, reason: &str| {
        let labels = [("rule", rule), ("side", side), ("reason", reason)];
        value(&samples, "oi_tls_handshake_failures_total", &labels)
    };
    let shared_rule = format!("{}[sni=a.test]", rule_of(shared));
    let seen = [
        (
            done(ends, "client", "full"),
            1.0,
            "edge: one full handshake",
        ),
        (done(ends, "client", "resumed"), 0.0, "edge: none resumed"),
        (
            failed(&rule_of(ends), "client", "timeout"),
            1.0,
            "edge: one timed out",
        ),
        (
            failed(&rule_of(ends), "client", "incompatible"),
            1.0,
            "edge: one without a common cipher suite",
        ),
        (
            failed(&rule_of(ends), "client", "other"),
            0.0,
            "edge: no other failure",
        ),
        (
            done(begins, "backend", "full"),
            1.0,
            "verified backend: one handshake",
        ),
        (
            failed(&rule_of(wrong), "backend", "bad_certificate"),
            1.0,
            "wrong name: bad_certificate",
        ),
        (
            done(wrong, "backend", "full"),
            0.0,
            "wrong name: no handshake",
        ),
        (
            failed(&shared_rule, "client", "unknown_name"),
            1.0,
            "shared: unknown_name",
        ),
    ];
    for (got, want, what) in seen {
        if got != want {
            oi.fail(&format!("{what}: {got}, not {want}"));
        }
    }

    // The same counts in /status.json, with which ends each rule speaks TLS on.
    let doc = status_json(metrics);
    let tls = &rule(&doc, &rule_of(ends))["oi"]["tls"];
    assert_eq!(tls["terminates"], true, "{tls}");
    assert_eq!(tls["originates"], false, "{tls}");
    assert_eq!(tls["client"]["handshakes"], 1, "{tls}");
    assert_eq!(tls["client"]["failed"], 2, "{tls}");
    assert_eq!(tls["client"]["failures"]["timeout"], 1, "{tls}");
    assert!(tls.get("backend").is_none(), "{tls}");
    let days = tls["expires_in_days"].as_i64().expect("days");
    assert!((28..=30).contains(&days), "a 30-day certificate: {tls}");
    let tls = &rule(&doc, &rule_of(wrong))["oi"]["tls"];
    assert_eq!(tls["originates"], true, "{tls}");
    assert_eq!(tls["backend"]["failures"]["bad_certificate"], 1, "{tls}");
    assert_eq!(
        tls["expires_in_days"],
        Value::Null,
        "no certificate presented: {tls}"
    );
    let plain = rule(&doc, &rule_of(ends));
    assert_eq!(plain["oi"]["tls_client_handshakes_full"], 1, "{plain}");

    // And in `oi status`, a line per side oi speaks TLS on.
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["status", "--socket"])
        .arg(&control)
        .output()
        .expect("oi status");
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "TLS client (terminated): handshakes full=1 resumed=0; failed incompatible=1 \
         bad-certificate=0 timeout=1 unknown-name=0 other=0",
        "TLS backend (originated): handshakes full=0 resumed=0; failed incompatible=0 \
         bad-certificate=1 timeout=0 unknown-name=0 other=0",
        &format!("TLS certificate {} expires in", p(&edge.cert)),
    ] {
        if !text.contains(want) {
            oi.fail(&format!("oi status shows {want:?}:\n{text}"));
        }
    }

    // `oi top` piped: a TLS table with a row per rule oi speaks TLS on.
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["top", "--interval", "100ms", "--socket"])
        .arg(&control)
        .output()
        .expect("oi top");
    let text = String::from_utf8_lossy(&out.stdout);
    let edge_row = text
        .lines()
        .skip_while(|l| !l.contains("HANDSHAKES"))
        .nth(1)
        .unwrap_or_default();
    let cells: Vec<&str> = edge_row.split_whitespace().collect();
    if cells.get(..6)
        != Some(
            &[
                &*rule_of(ends),
                "client",
                "1",
                "0",
                "2",
                &*format!("{days}d"),
            ][..],
        )
    {
        oi.fail(&format!(
            "oi top's TLS table: rule, ends, handshakes, resumed, failed, expiry:\n{text}"
        ));
    }
    // In a terminal (tmux), the same table in a box of its own.
    if crate::top::tmux_present() {
        let tmux = crate::top::Tmux::top("tls-views", &p(&control));
        tmux.wait_for("the TLS box shows the edge rule", |screen| {
            screen.contains("TLS")
                && screen.contains("HANDSHAKES")
                && screen.contains(&format!("{days}d"))
        });
    }
    // The status page (a browser running its script): a row per side.
    if crate::status_page::chromium_present() {
        let profile = tempfile::tempdir().expect("profile dir");
        let url = format!("http://127.0.0.1:{metrics}/");
        let out = crate::status_page::chromium(profile.path(), &["--dump-dom"], &url);
        let dom = String::from_utf8_lossy(&out.stdout);
        for want in [
            "client (terminated)",
            "backend (originated)",
            "bad_certificate 1",
            "timeout 1",
            &format!("{days} days"),
        ] {
            if !dom.contains(want) {
                oi.fail(&format!(
                    "the status page's TLS table shows {want:?}:\n{dom}"
                ));
            }
        }
    }
    oi.stop();
}

#[test]
fn each_presented_certificate_s_expiry_is_its_not_after_and_a_reload_reads_it_again() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let renewed = leaf(dir.path(), &root, "edge.test", 90);
    let client = leaf(dir.path(), &root, "client.test", 10);
    let (cert, key) = (dir.path().join("live.pem"), dir.path().join("live.key"));
    std::fs::copy(&edge.cert, &cert).expect("cert");
    std::fs::copy(&edge.key, &key).expect("key");
    let backend = echo_backend("127.0.0.1:0").port();
    let (port, out, metrics) = (free_port(), free_port(), free_port());
    let oi = start(
        dir.path(),
        &format!(
            "metrics 127.0.0.1:{metrics}\n\
             127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={},tls-key={}]\n\
             127.0.0.1 {out} 127.0.0.1 {port} \
             [tls-connect,tls-ca={},tls-name=edge.test,tls-client-cert={},tls-client-key={}]\n",
            p(&cert),
            p(&key),
            p(&root.cert),
            p(&client.cert),
            p(&client.key),
        ),
    );
    let expiry = |rule: u16, file: &Path, cn: &str| {
        let samples = scrape(metrics);
        let labels = [
            ("rule", &*format!("127.0.0.1:{rule}/tcp")),
            ("file", &*p(file)),
            ("subject", &*format!("CN={cn}")),
        ];
        value(&samples, "oi_tls_certificate_expiry_seconds", &labels)
    };
    let want = not_after(&edge.cert) as f64;
    let got = expiry(port, &cert, "edge.test");
    if got != want {
        oi.fail(&format!(
            "tls-cert's expiry: {got}, not its notAfter {want}"
        ));
    }
    let want = not_after(&client.cert) as f64;
    let got = expiry(out, &client.cert, "client.test");
    if got != want {
        oi.fail(&format!("tls-client-cert's expiry: {got}, not {want}"));
    }
    // One handshake before the reload: the counters stay the rule's after it.
    let mut c = crate::tls::rustls_client(port, &root.cert, "edge.test");
    std::io::Write::write_all(&mut c, b"ping").expect("write");
    let mut back = [0u8; 4];
    c.read_exact(&mut back).expect("echo");
    drop(c);
    // A renewed certificate's expiry once a reload has read it.
    std::fs::copy(&renewed.cert, &cert).expect("cert");
    std::fs::copy(&renewed.key, &key).expect("key");
    oi.reload();
    let want = not_after(&renewed.cert) as f64;
    let got = expiry(port, &cert, "edge.test");
    if got != want {
        oi.fail(&format!("after the reload: {got}, not the renewed {want}"));
    }
    let labels = [
        ("rule", &*format!("127.0.0.1:{port}/tcp")),
        ("side", "client"),
        ("kind", "full"),
    ];
    let kept = value(&scrape(metrics), "oi_tls_handshakes_total", &labels);
    if kept != 1.0 {
        oi.fail(&format!("the handshake counted before the reload: {kept}"));
    }
    oi.stop();
}

/// A TLS client (rustls) of 127.0.0.1:`port` trusting `ca` for `name`
/// and presenting the certificate `cert` with its key `key`.
pub(super) fn rustls_client_with_cert(
    port: u16,
    ca: &Path,
    name: &str,
    cert: &Path,
    key: &Path,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(c.expect("ca pem")).expect("root");
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("cert")
        .map(|c| c.expect("cert pem"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client certificate");
    let name = ServerName::try_from(name.to_string()).expect("name");
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("client");
    rustls::StreamOwned::new(conn, connect(local(port)))
}

#[test]
fn a_client_certificate_s_subject_is_in_the_json_log_and_oi_connections() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let client = leaf(dir.path(), &root, "client.test", 30);
    let backend = echo_backend("127.0.0.1:0").port();
    let port = free_port();
    let (log, control) = (dir.path().join("oi.log"), dir.path().join("control.sock"));
    let oi = start(
        dir.path(),
        &format!(
            "logfile {}\nlogformat json\ncontrolsocket {}\n\
             127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={},tls-key={},tls-client-ca={}]\n",
            p(&log),
            p(&control),
            p(&edge.cert),
            p(&edge.key),
            p(&root.cert),
        ),
    );
    let mut open =
        rustls_client_with_cert(port, &root.cert, "edge.test", &client.cert, &client.key);
    std::io::Write::write_all(&mut open, b"ping").expect("write");
    let mut back = [0u8; 4];
    open.read_exact(&mut back).expect("echo");
    // Live: `oi connections` names the subject, as JSON and as a column.
    let connections = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oi"));
        cmd.arg("connections");
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .arg("--socket")
            .arg(&control)
            .output()
            .expect("oi connections");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let list: Value = serde_json::from_str(&connections(true)).expect("JSON list");
    if list[0]["tls_subject"] != "CN=client.test" {
        oi.fail(&format!("oi connections --json names the subject: {list}"));
    }
    let text = connections(false);
    let header = text.lines().next().unwrap_or_default();
    let row = text.lines().nth(1).unwrap_or_default();
    // The tenth column, after SERVER_NAME; the id stays last.
    let tenth = |l: &str| l.split_whitespace().nth(9).map(str::to_string);
    if tenth(header).as_deref() != Some("TLS_SUBJECT")
        || tenth(row).as_deref() != Some("CN=client.test")
    {
        oi.fail(&format!(
            "oi connections shows a TLS_SUBJECT column:\n{text}"
        ));
    }
    drop(open);
    // Ended: the JSON log's lines after the handshake carry it too.
    let lines = wait_lines(&log, 2);
    let done: Value = serde_json::from_str(&lines[1]).expect("a JSON line");
    if done["tls_subject"] != "CN=client.test" || done["event"] != "done-remote-closed" {
        oi.fail(&format!(
            "the done line names the subject: {}",
            lines.join("\n")
        ));
    }
    let opened: Value = serde_json::from_str(&lines[0]).expect("a JSON line");
    assert_eq!(
        opened["tls_subject"],
        Value::Null,
        "opened before the handshake"
    );
    oi.stop();
}
