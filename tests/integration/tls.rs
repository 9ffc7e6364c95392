//! TLS ended and begun by oi (`tls-cert`, `tls-connect`, ...), through the
//! real binary: certificates made by `openssl req` in a tempdir (a test CA
//! and leaves it signs), `openssl s_client` and `s_server` as the far ends.
//! Termination with TLS 1.2 and 1.3; one certificate per server name on a
//! listener rules share by `[sni=]`; origination verified, and refused for
//! a wrong name or an untrusted CA with the reason logged; client
//! certificates required at the edge; a stalled handshake closed at its
//! deadline; 256 MiB through origination and termination with their
//! sha256 intact; SIGHUP reading new certificates, and a bad key keeping
//! the old. Without openssl each test says so and passes, unless
//! OI_REQUIRE_TOOLS is set (CI sets it, and installs openssl in .ci/run).

use crate::common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `openssl` runs; when it does not, the test is skipped unless
/// OI_REQUIRE_TOOLS is set.
pub(super) fn openssl_present() -> bool {
    tool_present("openssl", "version", "openssl")
}

/// Runs `openssl` with `args`, failing the test with its stderr.
pub(super) fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate and its key, as files.
pub(super) struct Pair {
    /// The PEM certificate.
    pub(super) cert: PathBuf,
    /// The PEM private key (mode 0600).
    pub(super) key: PathBuf,
}

/// A self-signed CA named `name` in `dir`.
pub(super) fn ca(dir: &Path, name: &str) -> Pair {
    let pair = Pair {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "30",
        "-subj",
        &format!("/CN={name}"),
        "-keyout",
        &pair.key.display().to_string(),
        "-out",
        &pair.cert.display().to_string(),
    ]);
    pair
}

/// A leaf for `cn` (also its subjectAltName) that `ca` signs, valid `days`.
pub(super) fn leaf(dir: &Path, ca: &Pair, cn: &str, days: u32) -> Pair {
    let stem = format!("{cn}.{days}");
    signed(
        dir,
        ca,
        &stem,
        &format!("/CN={cn}"),
        &format!("DNS:{cn}"),
        days,
    )
}

/// A new P-256 key at `key` and a signing request for subject `subj`
/// (openssl's `/CN=a/OU=b` form) at `csr`.
pub(super) fn key_and_request(key: &Path, csr: &Path, subj: &str) {
    let s = |p: &Path| p.display().to_string();
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        subj,
        "-keyout",
        &s(key),
        "-out",
        &s(csr),
    ]);
}

/// A leaf with subject `subj` (openssl's `/CN=a/OU=b` form) and
/// subjectAltName `san` (`DNS:name`, `IP:127.0.0.1`) that `ca` signs,
/// valid `days`, as `stem`.pem and `stem`.key in `dir`.
pub(super) fn signed(dir: &Path, ca: &Pair, stem: &str, subj: &str, san: &str, days: u32) -> Pair {
    let pair = Pair {
        cert: dir.join(format!("{stem}.pem")),
        key: dir.join(format!("{stem}.key")),
    };
    let csr = dir.join(format!("{stem}.csr"));
    let ext = dir.join(format!("{stem}.ext"));
    std::fs::write(
        &ext,
        format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\n"),
    )
    .expect("ext");
    let s = |p: &Path| p.display().to_string();
    key_and_request(&pair.key, &csr, subj);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &s(&csr),
        "-CA",
        &s(&ca.cert),
        "-CAkey",
        &s(&ca.key),
        "-CAcreateserial",
        "-days",
        &days.to_string(),
        "-extfile",
        &s(&ext),
        "-out",
        &s(&pair.cert),
    ]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pair.key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    pair
}

/// `--check` on `text` (written as `dir`/oi.conf): whether it passed, and
/// what it printed.
pub(super) fn check(dir: &Path, text: &str) -> (bool, String) {
    let conf = dir.join("oi.conf");
    write_atomic(&conf, text);
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("oi --check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `openssl s_client` to 127.0.0.1:`port` with `extra` arguments, sending
/// `input` and waiting for the server to close; all it printed.
pub(super) fn s_client(port: u16, extra: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("timeout")
        .args(["30", "openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-ign_eof")
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn openssl s_client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("input");
    let out = child.wait_with_output().expect("s_client");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A backend that reads one line from each client, writes it back and
/// closes: s_client (with -ign_eof) ends when the backend does.
pub(super) fn line_echo_backend() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(&c).read_line(&mut line);
                let _ = (&c).write_all(line.as_bytes());
            });
        }
    });
    port
}

/// A TLS client (rustls) of 127.0.0.1:`port` trusting `ca` for `name`.
pub(super) fn rustls_client(
    port: u16,
    ca: &Path,
    name: &str,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(c.expect("ca pem")).expect("root");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(name.to_string()).expect("name");
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("client");
    rustls::StreamOwned::new(conn, connect(local(port)))
}

/// Writes `text` as the configuration and starts oi on it.
pub(super) fn start(dir: &Path, text: &str) -> OiProcess {
    let conf = dir.join("oi.conf");
    write_atomic(&conf, text);
    OiProcess::start(dir, &conf, &[])
}

/// `path` as configuration text.
pub(super) fn p(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn a_listener_ends_tls_1_2_and_1_3_and_forwards_plaintext() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let backend = line_echo_backend();
    let port = free_port();
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={},tls-key={},tls-alpn=h2:http/1.1]\n",
            p(&edge.cert),
            p(&edge.key)
        ),
    );
    // The listener's ALPN order wins among what the client offers.
    let runs = [
        ("-tls1_2", "TLSv1.2", "http/1.1"),
        ("-tls1_3", "TLSv1.3", "http/1.1,h2"),
    ];
    for (flag, version, offered) in runs {
        let ca = p(&root.cert);
        let args = [
            flag,
            "-servername",
            "edge.test",
            "-CAfile",
            &ca,
            "-alpn",
            offered,
        ];
        let out = s_client(port, &args, b"plaintext to the backend\n");
        let chosen = if offered.contains("h2") {
            "h2"
        } else {
            "http/1.1"
        };
        if !out.contains(&format!("ALPN protocol: {chosen}")) {
            oi.fail(&format!("{version}: ALPN {chosen} expected:\n{out}"));
        }
        let ok = out.contains(&format!("Protocol  : {version}"))
            || out.contains(&format!("New, {version}"));
        if !ok || !out.contains("Verify return code: 0 (ok)") {
            oi.fail(&format!("{version}: no verified handshake:\n{out}"));
        }
        // The echo backend answered in plaintext, encrypted back by oi.
        if !out.contains("\nplaintext to the backend\n") {
            oi.fail(&format!("{version}: no echo:\n{out}"));
        }
    }
    oi.stop();
}

#[test]
fn rules_sharing_a_listener_by_server_name_each_present_their_certificate() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let a = leaf(dir.path(), &root, "a.test", 30);
    let b = leaf(dir.path(), &root, "b.test", 30);
    let (ma, mb) = (
        marker_backend(b"from-a\n").port(),
        marker_backend(b"from-b\n").port(),
    );
    let port = free_port();
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {port} 127.0.0.1 {ma} [sni=a.test,tls-cert={},tls-key={}]\n\
             127.0.0.1 {port} 127.0.0.1 {mb} [sni=b.test,tls-cert={},tls-key={}]\n",
            p(&a.cert),
            p(&a.key),
            p(&b.cert),
            p(&b.key)
        ),
    );
    for (name, marker) in [("a.test", "from-a"), ("b.test", "from-b")] {
        let out = s_client(
            port,
            &[
                "-servername",
                name,
                "-CAfile",
                &p(&root.cert),
                "-verify_hostname",
                name,
            ],
            b"",
        );
        let subject = out.contains(&format!("CN = {name}")) || out.contains(&format!("CN={name}"));
        if !subject || !out.contains("Verify return code: 0 (ok)") || !out.contains(marker) {
            oi.fail(&format!(
                "{name} should see its own certificate and {marker}:\n{out}"
            ));
        }
    }
    oi.stop();
}

#[test]
fn a_backend_is_verified_and_a_wrong_name_or_untrusted_ca_closes_only_that_client() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let other = ca(dir.path(), "other-ca");
    let server = {
        let pair = leaf(dir.path(), &root, "backend.test", 30);
        TlsServer::serving(&pair.cert, &pair.key, "backend.test")
    };
    let (good, wrong_name, untrusted) = (free_port(), free_port(), free_port());
    let b = server.port;
    let ca_file = p(&root.cert);
    let log = dir.path().join("oi.log");
    let oi = start(
        dir.path(),
        &format!(
            "logfile {}\n\
             127.0.0.1 {good} 127.0.0.1 {b} [tls-connect,tls-ca={ca_file},tls-name=backend.test]\n\
             127.0.0.1 {wrong_name} 127.0.0.1 {b} [tls-connect,tls-ca={ca_file},tls-name=other.test]\n\
             127.0.0.1 {untrusted} 127.0.0.1 {b} [tls-connect,tls-ca={},tls-name=backend.test]\n",
            p(&log),
            p(&other.cert)
        ),
    );
    let get = |port: u16| {
        let mut s = connect(local(port));
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("request");
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        String::from_utf8_lossy(&reply).into_owned()
    };
    let reply = get(good);
    if !reply.starts_with("HTTP/1.0 200 ok") {
        oi.fail(&format!(
            "a verified backend answers the plaintext client: {reply:?}"
        ));
    }
    for port in [wrong_name, untrusted] {
        let reply = get(port);
        if !reply.is_empty() {
            oi.fail(&format!(
                "a backend that fails verification must not be reached: {reply:?}"
            ));
        }
    }
    // The good rule still serves after the failures.
    assert!(get(good).starts_with("HTTP/1.0 200 ok"));
    let lines = wait_lines(&log, 6);
    let failed = lines
        .iter()
        .filter(|l| l.ends_with("tls-backend-failed"))
        .count();
    assert_eq!(failed, 2, "{}", lines.join("\n"));
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains("TLS to the backend failed: wrong name"),
        "{stderr}"
    );
    assert!(
        stderr.contains("TLS to the backend failed: untrusted CA"),
        "{stderr}"
    );
}

#[test]
fn client_certificates_are_required_at_the_edge_when_tls_client_ca_is_set() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let client = leaf(dir.path(), &root, "client.test", 30);
    let backend = marker_backend(b"admitted\n").port();
    let port = free_port();
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={},tls-key={},tls-client-ca={}]\n",
            p(&edge.cert),
            p(&edge.key),
            p(&root.cert)
        ),
    );
    let with = s_client(
        port,
        &[
            "-cert",
            &p(&client.cert),
            "-key",
            &p(&client.key),
            "-tls1_3",
        ],
        b"",
    );
    if !with.contains("admitted") {
        oi.fail(&format!(
            "a client with a certificate the CA signed is forwarded:\n{with}"
        ));
    }
    let without = s_client(port, &["-tls1_3"], b"");
    if without.contains("admitted") {
        oi.fail(&format!(
            "a client without a certificate is refused:\n{without}"
        ));
    }
    let (_, stderr) = oi.stop();
    assert!(stderr.contains("TLS handshake with the client"), "{stderr}");
}

#[test]
fn a_stalled_handshake_is_closed_at_its_deadline() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let backend = echo_backend("127.0.0.1:0").port();
    let port = free_port();
    let log = dir.path().join("oi.log");
    let oi = start(
        dir.path(),
        &format!(
            "logfile {}\n127.0.0.1 {port} 127.0.0.1 {backend} \
             [tls-cert={},tls-key={},tls-handshake-timeout=1]\n",
            p(&log),
            p(&edge.cert),
            p(&edge.key)
        ),
    );
    let began = Instant::now();
    let mut silent = connect(local(port));
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    let n = silent.read(&mut buf);
    let waited = began.elapsed();
    if !matches!(n, Ok(0))
        || waited < Duration::from_millis(900)
        || waited > Duration::from_secs(10)
    {
        oi.fail(&format!(
            "a client that sends nothing is closed after 1 s: {n:?} after {waited:?}"
        ));
    }
    let lines = wait_lines(&log, 2);
    assert!(
        lines[1].ends_with("tls-handshake-failed"),
        "{}",
        lines.join("\n")
    );
    oi.stop();
}

#[test]
fn bytes_keep_their_sha256_through_origination_and_termination() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let backend = echo_backend("127.0.0.1:0").port();
    let (plain, tls) = (free_port(), free_port());
    // plain client -> oi (begins TLS) -> oi (ends TLS) -> echo, and back.
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {plain} 127.0.0.1 {tls} [tls-connect,tls-ca={},tls-name=edge.test]\n\
             127.0.0.1 {tls} 127.0.0.1 {backend} [tls-cert={},tls-key={}]\n",
            p(&root.cert),
            p(&edge.cert),
            p(&edge.key)
        ),
    );
    let data = pattern(256 << 20, 7);
    let sent = sha256(&data);
    let back = echo_through(local(plain), data);
    if sha256(&back) != sent {
        oi.fail(&format!(
            "{} bytes came back, not the 256 MiB sent",
            back.len()
        ));
    }
    oi.stop();
}

#[test]
fn sighup_reads_new_certificates_and_a_bad_key_keeps_the_old() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let one = leaf(dir.path(), &root, "one.test", 30);
    let two = leaf(dir.path(), &root, "two.test", 30);
    let (cert, key) = (dir.path().join("live.pem"), dir.path().join("live.key"));
    let copy = |pair: &Pair| {
        std::fs::copy(&pair.cert, &cert).expect("cert");
        std::fs::copy(&pair.key, &key).expect("key");
    };
    copy(&one);
    let backend = marker_backend(b"served\n").port();
    let echo = echo_backend("127.0.0.1:0").port();
    let (port, kept) = (free_port(), free_port());
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={0},tls-key={1}]\n\
             127.0.0.1 {kept} 127.0.0.1 {echo} [tls-cert={0},tls-key={1}]\n",
            p(&cert),
            p(&key)
        ),
    );
    // A connection open across the reloads keeps its session (one.test's).
    let mut open = rustls_client(kept, &root.cert, "one.test");
    let mut echoed = |text: &[u8]| {
        open.write_all(text).expect("write");
        let mut back = vec![0; text.len()];
        open.read_exact(&mut back).expect("echo");
        back == text
    };
    assert!(echoed(b"before"));
    let subject = |cn: &str| {
        let out = s_client(port, &["-tls1_3"], b"");
        out.contains(&format!("CN = {cn}")) || out.contains(&format!("CN={cn}"))
    };
    assert!(subject("one.test"), "{}", oi.stderr_tail());
    copy(&two);
    oi.reload();
    assert!(subject("two.test"), "the new certificate after SIGHUP");
    std::fs::write(&key, "not a key\n").expect("bad key");
    oi.reload();
    assert!(
        subject("two.test"),
        "a bad key keeps the previous certificate"
    );
    assert!(echoed(b"after both reloads"), "the open connection goes on");
    let (_, stderr) = oi.stop();
    let conf = dir.path().join("oi.conf").display().to_string();
    assert!(
        stderr.contains(&format!("{conf}:1: private key")),
        "{stderr}"
    );
    assert!(
        stderr.contains("keeping the previous configuration"),
        "{stderr}"
    );
}

#[test]
fn check_lists_every_bad_tls_file_at_its_line_and_warns() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let good = leaf(dir.path(), &root, "good.test", 30);
    let soon = leaf(dir.path(), &root, "soon.test", 5);
    let other = leaf(dir.path(), &root, "other.test", 30);
    let bad_key = dir.path().join("bad.key");
    std::fs::write(&bad_key, "junk\n").expect("bad key");
    let open_key = dir.path().join("open.key");
    std::fs::copy(&good.key, &open_key).expect("copy");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let conf = dir.path().join("oi.conf");
    let run = |text: &str| check(dir.path(), text);
    let (ok, stderr) = run(&format!(
        "127.0.0.1 1 127.0.0.1 2 [tls-cert={},tls-key={}]\n\
         127.0.0.1 3 127.0.0.1 2 [tls-cert={},tls-key={}]\n\
         127.0.0.1 4 127.0.0.1 2 [tls-cert={}]\n\
         127.0.0.1 5 127.0.0.1 2 [tls-connect,tls-ca={}]\n",
        p(&good.cert),
        p(&bad_key),
        p(&good.cert),
        p(&other.key),
        p(&good.cert),
        p(&dir.path().join("missing.pem"))
    ));
    assert!(!ok, "{stderr}");
    let file = p(&conf);
    for (line, what) in [
        (1, "no PRIVATE KEY block"),
        (2, "does not fit certificate"),
        (3, "tls-cert needs tls-key"),
        (4, "cannot read CA file"),
    ] {
        assert!(
            stderr.contains(&format!("{file}:{line}: ")) && stderr.contains(what),
            "{line}: {stderr}"
        );
    }
    assert!(
        stderr.contains("configuration invalid (4 errors)"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("BEGIN"),
        "no key text is ever shown: {stderr}"
    );
    let (ok, stderr) = run(&format!(
        "127.0.0.1 1 127.0.0.1 2 [tls-cert={},tls-key={}]\n\
         127.0.0.1 3 127.0.0.1 2 [tls-cert={},tls-key={}]\n\
         127.0.0.1 4 127.0.0.1 2 [tls-connect,tls-insecure,rate=1M]\n",
        p(&good.cert),
        p(&open_key),
        p(&soon.cert),
        p(&soon.key)
    ));
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!("{file}:1: warning: private key"))
            && stderr.contains("may be read by others"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{file}:2: warning: certificate"))
            && stderr.contains("expires in"),
        "{stderr}"
    );
    // Bandwidth limits apply to TLS connections (`tls_rate.rs`): no warning.
    assert!(!stderr.contains("bandwidth limits"), "{stderr}");
    assert!(
        stderr.contains(&format!("{file}:3: warning: tls-insecure")),
        "{stderr}"
    );
}
