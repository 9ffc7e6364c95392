//! Client certificates as an access control, through the real binary:
//! `tls-allow-subject` admits only the certificates whose subject matches
//! (`openssl s_client -cert/-key` as the clients), a refused one is closed
//! after its handshake, logged `tls-subject-denied` with its subject in
//! oi's diagnostics, while an admitted client's connection carries on;
//! `tls-allow-issuer` (YAML `tls: allow_issuer:`) tells apart two CAs of one
//! `tls-client-ca` file; `--check` refuses either without `tls-client-ca`.

use crate::common::*;
use crate::tls::{ca, check, leaf, line_echo_backend, openssl_present, p, s_client, signed, Pair};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// A rustls client of 127.0.0.1:`port` trusting `ca` for `name`, presenting
/// `client`'s certificate, its handshake done (on the client's side).
fn rustls_with_certificate(
    port: u16,
    ca: &Path,
    name: &str,
    client: &Pair,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(c.expect("ca pem")).expect("root");
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&client.cert)
        .expect("client cert")
        .map(|c| c.expect("client pem"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&client.key).expect("client key");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client auth");
    let name = ServerName::try_from(name.to_string()).expect("name");
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("client");
    let mut s = rustls::StreamOwned::new(conn, connect(local(port)));
    // Bounded: each pass moves a flight of the handshake or fails.
    for _ in 0..16 {
        if !s.conn.is_handshaking() {
            break;
        }
        s.conn.complete_io(&mut s.sock).expect("handshake");
    }
    s
}

#[test]
fn only_client_certificates_whose_subject_matches_are_served() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let root = ca(d, "ca");
    let edge = leaf(d, &root, "edge.test", 30);
    let alice = signed(
        d,
        &root,
        "alice",
        "/OU=dev/CN=alice-laptop",
        "DNS:alice",
        30,
    );
    let bob = signed(d, &root, "bob", "/OU=ops/CN=bob", "DNS:bob", 30);
    let mallory = signed(d, &root, "mallory", "/OU=dev/CN=mallory", "DNS:m", 30);
    let backend = line_echo_backend();
    let port = free_port();
    let log = d.join("oi.log");
    let oi = crate::tls::start(
        d,
        &format!(
            "logfile {}\n\
             127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={},tls-key={},tls-client-ca={},\
             tls-allow-subject=CN=alice*,tls-allow-subject=ou=OPS]\n",
            p(&log),
            p(&edge.cert),
            p(&edge.key),
            p(&root.cert)
        ),
    );
    // An admitted client holds its connection open across the refusal.
    let mut held = rustls_with_certificate(port, &root.cert, "edge.test", &alice);
    let as_client = |who: &Pair, line: &str| {
        let args = ["-cert", &p(&who.cert), "-key", &p(&who.key), "-tls1_3"];
        s_client(port, &args, format!("{line}\n").as_bytes())
    };
    let out = as_client(&mallory, "from-mallory");
    if out.contains("from-mallory\n") {
        oi.fail(&format!(
            "a subject no entry matches reaches no backend:\n{out}"
        ));
    }
    for (who, line) in [(&alice, "from-alice"), (&bob, "from-bob")] {
        let out = as_client(who, line);
        if !out.contains(&format!("{line}\n")) {
            oi.fail(&format!("{line}: a matching subject is served:\n{out}"));
        }
    }
    held.write_all(b"still-open\n")
        .expect("the admitted client writes");
    let mut echoed = String::new();
    let _ = BufReader::new(&mut held).read_line(&mut echoed);
    if echoed != "still-open\n" {
        oi.fail(&format!(
            "the admitted client's connection outlives the refusal: {echoed:?}"
        ));
    }
    // Three served (opened, done) and one refused (opened, denied).
    let lines = wait_lines(&log, 8);
    let denied = lines
        .iter()
        .filter(|l| l.ends_with("tls-subject-denied"))
        .count();
    assert_eq!(denied, 1, "{}", lines.join("\n"));
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains("client certificate not allowed")
            && stderr.contains("subject 'CN=mallory,OU=dev'"),
        "the diagnostic names the refused subject: {stderr}"
    );
}

#[test]
fn an_issuer_entry_tells_two_cas_of_one_client_ca_file_apart() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let team_a = ca(d, "team-a");
    let team_b = ca(d, "team-b");
    let both = d.join("clients.pem");
    let pem = |c: &Pair| std::fs::read_to_string(&c.cert).expect("ca pem");
    std::fs::write(&both, pem(&team_a) + &pem(&team_b)).expect("clients.pem");
    let edge = leaf(d, &team_a, "edge.test", 30);
    let from_a = signed(d, &team_a, "from-a", "/CN=worker", "DNS:worker", 30);
    let from_b = signed(d, &team_b, "from-b", "/CN=worker", "DNS:worker", 30);
    let backend = marker_backend(b"admitted\n").port();
    let port = free_port();
    let conf = d.join("oi.yaml");
    write_atomic(
        &conf,
        &format!(
            "rules:\n  - name: team-a\n    bind: 127.0.0.1:{port}/tcp\n    \
             connect: 127.0.0.1:{backend}/tcp\n    tls:\n      cert: {}\n      key: {}\n      \
             client_ca: {}\n      allow_issuer: [\"CN=team-a\"]\n",
            p(&edge.cert),
            p(&edge.key),
            p(&both)
        ),
    );
    let oi = OiProcess::start(d, &conf, &[]);
    let with = |who: &Pair| {
        let args = ["-cert", &p(&who.cert), "-key", &p(&who.key)];
        s_client(port, &args, b"")
    };
    let out = with(&from_a);
    if !out.contains("admitted") {
        oi.fail(&format!("team-a's client is served:\n{out}"));
    }
    let out = with(&from_b);
    if out.contains("admitted") {
        oi.fail(&format!(
            "team-b's client, verified by the same file, is refused:\n{out}"
        ));
    }
    let (_, stderr) = oi.stop();
    assert!(stderr.contains("issuer 'CN=team-b'"), "{stderr}");
}

#[test]
fn check_refuses_subject_and_issuer_lists_without_a_client_ca() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let (cert, key) = (p(&edge.cert), p(&edge.key));
    let (ok, stderr) = check(
        dir.path(),
        &format!(
            "127.0.0.1 1 127.0.0.1 2 [tls-cert={cert},tls-key={key},tls-allow-subject=CN=a*]\n\
             127.0.0.1 3 127.0.0.1 2 [tls-cert={cert},tls-key={key},tls-allow-issuer=O=x]\n"
        ),
    );
    assert!(!ok, "{stderr}");
    let file = p(&dir.path().join("oi.conf"));
    for line in [1, 2] {
        assert!(
            stderr.contains(&format!("{file}:{line}: ")) && stderr.contains("need tls-client-ca"),
            "{line}: {stderr}"
        );
    }
    let (ok, stderr) = check(
        dir.path(),
        "127.0.0.1 1 127.0.0.1 2 [tls-allow-subject=XX=1]\n",
    );
    assert!(!ok && stderr.contains("unknown attribute 'XX'"), "{stderr}");
    let (ok, stderr) = check(
        dir.path(),
        &format!(
            "127.0.0.1 1 127.0.0.1 2 [tls-cert={cert},tls-key={key},tls-client-ca={},\
             tls-allow-subject=CN=a*,tls-allow-subject=CN=b*,tls-allow-issuer=CN=ca]\n",
            p(&root.cert)
        ),
    );
    assert!(ok, "{stderr}");
}
