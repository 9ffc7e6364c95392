//! Certificates a sysadmin gets wrong, through the real binary: a backend
//! whose certificate has expired closes only that client, with the reason
//! logged; a chain written out of order (issuer before leaf) is refused by
//! `--check` at its line, and one in order passes. Certificates made by
//! `openssl req`, `x509` and `ca` (the only one of them that sets dates in
//! the past) in a tempdir.

use crate::common::*;
use crate::tls::{ca, check, key_and_request, leaf, openssl, openssl_present, p, start, Pair};
use std::io::{Read, Write};
use std::path::Path;

/// A leaf for `cn` that `ca` signed, valid only on 1 January 2020.
fn expired(dir: &Path, ca: &Pair, cn: &str) -> Pair {
    let pair = Pair {
        cert: dir.join(format!("{cn}.expired.pem")),
        key: dir.join(format!("{cn}.expired.key")),
    };
    let s = |p: &Path| p.display().to_string();
    let csr = dir.join(format!("{cn}.expired.csr"));
    key_and_request(&pair.key, &csr, &format!("/CN={cn}"));
    let db = dir.join("ca-db");
    std::fs::create_dir_all(&db).expect("ca db");
    std::fs::write(db.join("index.txt"), "").expect("index");
    std::fs::write(db.join("serial"), "01\n").expect("serial");
    let cnf = db.join("ca.cnf");
    std::fs::write(
        &cnf,
        format!(
            "[ca]\ndefault_ca = d\n[d]\ndatabase = {db}/index.txt\nnew_certs_dir = {db}\n\
             serial = {db}/serial\ndefault_md = sha256\npolicy = p\nx509_extensions = e\n\
             [p]\ncommonName = supplied\n[e]\nsubjectAltName = DNS:{cn}\nbasicConstraints = CA:FALSE\n",
            db = s(&db)
        ),
    )
    .expect("ca.cnf");
    openssl(&[
        "ca",
        "-batch",
        "-notext",
        "-config",
        &s(&cnf),
        "-cert",
        &s(&ca.cert),
        "-keyfile",
        &s(&ca.key),
        "-in",
        &s(&csr),
        "-out",
        &s(&pair.cert),
        "-startdate",
        "20200101000000Z",
        "-enddate",
        "20200102000000Z",
    ]);
    pair
}

#[test]
fn a_backend_whose_certificate_expired_closes_only_that_client() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let fresh = {
        let pair = leaf(dir.path(), &root, "backend.test", 30);
        TlsServer::serving(&pair.cert, &pair.key, "a current backend")
    };
    let stale = {
        let pair = expired(dir.path(), &root, "backend.test");
        TlsServer::serving(&pair.cert, &pair.key, "an expired backend")
    };
    let (good, old) = (free_port(), free_port());
    let log = dir.path().join("oi.log");
    let oi = start(
        dir.path(),
        &format!(
            "logfile {}\n\
             127.0.0.1 {good} localhost {} [tls-connect,tls-ca={ca},tls-name=backend.test]\n\
             127.0.0.1 {old} localhost {} [tls-connect,tls-ca={ca},tls-name=backend.test]\n",
            p(&log),
            fresh.port,
            stale.port,
            ca = p(&root.cert),
        ),
    );
    let get = |port: u16| {
        let mut s = connect(local(port));
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("request");
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        String::from_utf8_lossy(&reply).into_owned()
    };
    let reply = get(old);
    if !reply.is_empty() {
        oi.fail(&format!(
            "a backend with an expired certificate must not be reached: {reply:?}"
        ));
    }
    let reply = get(good);
    if !reply.starts_with("HTTP/1.0 200 ok") {
        oi.fail(&format!(
            "the current backend still serves beside the failure: {reply:?}"
        ));
    }
    let lines = wait_lines(&log, 2);
    assert!(
        lines.iter().any(|l| l.ends_with("tls-backend-failed")),
        "{}",
        lines.join("\n")
    );
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains("TLS to the backend failed: expired certificate"),
        "{stderr}"
    );
}

#[test]
fn check_refuses_a_chain_out_of_order_at_its_line_and_takes_one_in_order() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let site = leaf(dir.path(), &root, "site.test", 30);
    let read = |path: &Path| std::fs::read_to_string(path).expect("pem");
    let in_order = dir.path().join("in-order.pem");
    std::fs::write(&in_order, read(&site.cert) + &read(&root.cert)).expect("chain");
    let reversed = dir.path().join("reversed.pem");
    std::fs::write(&reversed, read(&root.cert) + &read(&site.cert)).expect("chain");
    let conf = dir.path().join("oi.conf");
    let (ok, stderr) = check(
        dir.path(),
        &format!(
            "127.0.0.1 1 127.0.0.1 2 [tls-cert={},tls-key={}]\n",
            p(&in_order),
            p(&site.key)
        ),
    );
    assert!(
        ok,
        "a chain leaf first, then its issuer, is taken: {stderr}"
    );
    // The reversed file's first certificate is the CA, whose key is not the
    // site's: put the CA's key with it, so only the order is wrong.
    let (ok, stderr) = check(
        dir.path(),
        &format!(
            "127.0.0.1 1 127.0.0.1 2 [tls-cert={},tls-key={}]\n\
         127.0.0.1 3 127.0.0.1 2 [tls-cert={},tls-key={}]\n",
            p(&in_order),
            p(&site.key),
            p(&reversed),
            p(&root.key)
        ),
    );
    assert!(!ok, "{stderr}");
    let at = format!("{}:2: ", p(&conf));
    assert!(
        stderr.contains(&at)
            && stderr.contains("is followed by one it was not issued by")
            && stderr.contains("subject 'CN=site.test'")
            && stderr.contains("leaf first"),
        "{stderr}"
    );
    assert!(!stderr.contains(&format!("{}:1: ", p(&conf))), "{stderr}");
}
