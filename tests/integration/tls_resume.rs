//! TLS sessions resumed, OCSP responses stapled and the handshake cap, on
//! rules where oi ends TLS, through the real binary with Debian's openssl
//! as the client (`s_client -sess_out`/`-sess_in` says `Reused` or `New`)
//! and `openssl ocsp` making responses from a CA made in the test. Without
//! openssl each test says so and passes, unless OI_REQUIRE_TOOLS is set.

use crate::common::*;
use crate::tls::{ca, check, leaf, openssl, openssl_present, p, s_client, start, Pair};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Two `s_client` connections to `port` with `flags`: the first saves its
/// session to `file`, the second offers it back; what each printed.
fn twice(port: u16, flags: &[&str], file: &Path) -> (String, String) {
    let f = p(file);
    let with = |how: &'static str| {
        let mut args = flags.to_vec();
        args.extend([how, f.as_str()]);
        s_client(port, &args, b"")
    };
    let first = with("-sess_out");
    (first, with("-sess_in"))
}

/// Whether `s_client` resumed its session (`Reused, TLSv1.x`).
fn reused(out: &str) -> bool {
    out.contains("Reused, TLSv1")
}

/// Whether `s_client` made a full handshake (`New, TLSv1.x`).
fn full(out: &str) -> bool {
    out.contains("New, TLSv1")
}

/// The three ways a client resumes: TLS 1.3 tickets, TLS 1.2 tickets, TLS
/// 1.2 session IDs (the client refuses tickets).
const WAYS: [&[&str]; 3] = [&["-tls1_3"], &["-tls1_2"], &["-tls1_2", "-no_ticket"]];

#[test]
fn clients_resume_by_tls_1_3_and_1_2_ticket_and_by_session_id_unless_resumption_is_off() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let backend = marker_backend(b"served\n").port();
    let (on, off) = (free_port(), free_port());
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {on} 127.0.0.1 {backend} [tls-cert={0},tls-key={1}]\n\
             127.0.0.1 {off} 127.0.0.1 {backend} [tls-cert={0},tls-key={1},tls-resumption=off]\n",
            p(&edge.cert),
            p(&edge.key)
        ),
    );
    let session = dir.path().join("session.pem");
    for flags in WAYS {
        let (first, second) = twice(on, flags, &session);
        if !full(&first) || !first.contains("served") {
            oi.fail(&format!("{flags:?}: a first full handshake:\n{first}"));
        }
        if !reused(&second) || !second.contains("served") {
            oi.fail(&format!("{flags:?}: the second resumes:\n{second}"));
        }
        let (first, second) = twice(off, flags, &session);
        if !full(&first) || !full(&second) || !second.contains("served") {
            oi.fail(&format!(
                "{flags:?}: tls-resumption=off makes every handshake full:\n{first}\n{second}"
            ));
        }
    }
    oi.stop();
}

#[test]
fn sessions_survive_a_reload_that_keeps_the_certificate_and_end_when_it_changes() {
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
    let port = free_port();
    let conf = |timeout: u32| {
        format!(
            "127.0.0.1 {port} 127.0.0.1 {backend} \
             [tls-cert={},tls-key={},tls-handshake-timeout={timeout}]\n",
            p(&cert),
            p(&key)
        )
    };
    let oi = start(dir.path(), &conf(10));
    let saved: Vec<_> = WAYS
        .iter()
        .enumerate()
        .map(|(i, flags)| {
            let file = dir.path().join(format!("session{i}.pem"));
            let (first, _) = twice(port, flags, &file);
            assert!(full(&first), "{flags:?}: {first}");
            file
        })
        .collect();
    // A reload that rebuilds the rule (its timeout changed) and reads the
    // same certificate again: every session saved before resumes.
    write_atomic(&dir.path().join("oi.conf"), &conf(9));
    oi.reload();
    for (flags, file) in WAYS.iter().zip(&saved) {
        let mut args = flags.to_vec();
        let f = p(file);
        args.extend(["-sess_in", f.as_str()]);
        let out = s_client(port, &args, b"");
        if !reused(&out) || !out.contains("served") {
            oi.fail(&format!(
                "{flags:?}: a session from before the reload resumes:\n{out}"
            ));
        }
    }
    // A new certificate: no session made under the old one resumes.
    copy(&two);
    oi.reload();
    for (flags, file) in WAYS.iter().zip(&saved) {
        let mut args = flags.to_vec();
        let f = p(file);
        args.extend(["-sess_in", f.as_str()]);
        let out = s_client(port, &args, b"");
        let subject = out.contains("CN = two.test") || out.contains("CN=two.test");
        if !full(&out) || !subject {
            oi.fail(&format!(
                "{flags:?}: after the certificate changed, a full handshake with it:\n{out}"
            ));
        }
    }
    oi.stop();
}

#[test]
fn backend_sessions_are_resumed_when_oi_begins_tls_unless_resumption_is_off() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let pair = leaf(dir.path(), &root, "backend.test", 30);
    let server = TlsServer::serving(&pair.cert, &pair.key, "backend.test");
    let (on, off) = (free_port(), free_port());
    let b = server.port;
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {on} 127.0.0.1 {b} [tls-connect,tls-ca={0},tls-name=backend.test]\n\
             127.0.0.1 {off} 127.0.0.1 {b} [tls-connect,tls-ca={0},tls-name=backend.test,tls-resumption=off]\n",
            p(&root.cert)
        ),
    );
    // s_server -www's page says whether the session was new or reused.
    let get = |port: u16| {
        let mut s = connect(local(port));
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("request");
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        String::from_utf8_lossy(&reply).into_owned()
    };
    let first = get(on);
    let second = get(on);
    if !first.contains("New, TLSv1") || !second.contains("Reused, TLSv1") {
        oi.fail(&format!(
            "oi resumes its session with the backend:\n{first}\n{second}"
        ));
    }
    let (first, second) = (get(off), get(off));
    if !first.contains("New, TLSv1") || !second.contains("New, TLSv1") {
        oi.fail(&format!(
            "tls-resumption=off: every backend handshake is full:\n{first}\n{second}"
        ));
    }
    oi.stop();
}

/// An OCSP response from `root` about `cert`, valid `days`, written to
/// `out` (DER): the CA signs it itself; its index knows no certificate, so
/// the status is `unknown`, in a response that is itself successful.
fn ocsp_response(dir: &Path, root: &Pair, cert: &Path, days: u32, out: &Path) {
    let index = dir.join("index.txt");
    std::fs::write(&index, "").expect("index");
    let request = dir.join("request.der");
    openssl(&[
        "ocsp",
        "-issuer",
        &p(&root.cert),
        "-cert",
        &p(cert),
        "-no_nonce",
        "-reqout",
        &p(&request),
    ]);
    openssl(&[
        "ocsp",
        "-index",
        &p(&index),
        "-rsigner",
        &p(&root.cert),
        "-rkey",
        &p(&root.key),
        "-CA",
        &p(&root.cert),
        "-reqin",
        &p(&request),
        "-respout",
        &p(out),
        "-ndays",
        &days.to_string(),
    ]);
}

#[test]
fn an_ocsp_response_is_stapled_and_a_reload_staples_the_new_one() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let response = dir.path().join("edge.ocsp.der");
    ocsp_response(dir.path(), &root, &edge.cert, 1, &response);
    let backend = marker_backend(b"served\n").port();
    let (port, plain) = (free_port(), free_port());
    let oi = start(
        dir.path(),
        &format!(
            "127.0.0.1 {port} 127.0.0.1 {backend} [tls-cert={0},tls-key={1},tls-ocsp={2}]\n\
             127.0.0.1 {plain} 127.0.0.1 {backend} [tls-cert={0},tls-key={1}]\n",
            p(&edge.cert),
            p(&edge.key),
            p(&response)
        ),
    );
    let stapled = |port: u16, flag: &str| s_client(port, &[flag, "-status"], b"");
    // The day after tomorrow, as openssl prints a Next Update.
    let next_update = |out: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with("Next Update:"))
            .map(str::to_string)
    };
    let mut updates = Vec::new();
    for flag in ["-tls1_3", "-tls1_2"] {
        let out = stapled(port, flag);
        if !out.contains("OCSP Response Status: successful") || !out.contains("served") {
            oi.fail(&format!("{flag}: the response is stapled:\n{out}"));
        }
        updates.push(next_update(&out));
        let out = stapled(plain, flag);
        if !out.contains("OCSP response: no response sent") {
            oi.fail(&format!(
                "{flag}: a rule without tls-ocsp staples none:\n{out}"
            ));
        }
    }
    assert!(
        updates[0].is_some() && updates[0] == updates[1],
        "{updates:?}"
    );
    // A fresher response, read on SIGHUP: the certificate is the same, so
    // sessions made before resume after.
    let session = dir.path().join("session.pem");
    let (first, _) = twice(port, &["-tls1_3"], &session);
    assert!(full(&first), "{first}");
    ocsp_response(dir.path(), &root, &edge.cert, 7, &response);
    oi.reload();
    let f = p(&session);
    let out = s_client(port, &["-tls1_3", "-sess_in", &f], b"");
    if !reused(&out) {
        oi.fail(&format!(
            "a new OCSP response alone keeps the sessions:
{out}"
        ));
    }
    let out = stapled(port, "-tls1_3");
    let after = next_update(&out);
    if after.is_none() || after == updates[0] {
        oi.fail(&format!(
            "after SIGHUP the new response is stapled (was {:?}):\n{out}",
            updates[0]
        ));
    }
    oi.stop();
}

#[test]
fn check_refuses_an_empty_ocsp_file_and_warns_about_one_that_is_not_der() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let (empty, garbage, good) = (
        dir.path().join("empty.der"),
        dir.path().join("garbage.der"),
        dir.path().join("good.der"),
    );
    std::fs::write(&empty, "").expect("empty");
    std::fs::write(&garbage, "-----BEGIN OCSP RESPONSE-----\n").expect("garbage");
    ocsp_response(dir.path(), &root, &edge.cert, 1, &good);
    let conf = dir.path().join("oi.conf");
    let check_ocsp = |ocsp: &Path| {
        check(
            dir.path(),
            &format!(
                "127.0.0.1 1 127.0.0.1 2 [tls-cert={},tls-key={},tls-ocsp={}]\n",
                p(&edge.cert),
                p(&edge.key),
                p(ocsp)
            ),
        )
    };
    let file = p(&conf);
    let (ok, text) = check_ocsp(&empty);
    assert!(
        !ok && text.contains(&format!("{file}:1: OCSP response")),
        "{text}"
    );
    assert!(text.contains("is empty"), "{text}");
    let (ok, text) = check_ocsp(&dir.path().join("missing.der"));
    assert!(!ok && text.contains("cannot read OCSP response"), "{text}");
    let (ok, text) = check_ocsp(&garbage);
    assert!(ok, "garbage is stapled as it is, with a warning: {text}");
    assert!(
        text.contains(&format!("{file}:1: warning: tls-ocsp")) && text.contains("not a DER OCSP"),
        "{text}"
    );
    let (ok, text) = check_ocsp(&good);
    assert!(ok && !text.contains("tls-ocsp"), "{text}");
}

#[test]
fn the_handshake_cap_holds_across_a_reload() {
    if !openssl_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let backend = marker_backend(b"served\n").port();
    let port = free_port();
    let log = dir.path().join("oi.log");
    let conf = |timeout: u32| {
        format!(
            "logfile {}\n127.0.0.1 {port} 127.0.0.1 {backend} \
             [tls-cert={},tls-key={},tls-max-handshakes=3,tls-handshake-timeout={timeout}]\n",
            p(&log),
            p(&edge.cert),
            p(&edge.key)
        )
    };
    let oi = start(dir.path(), &conf(60));
    // Three clients that never speak hold the three places.
    let mut silent: Vec<_> = (0..3).map(|_| connect(local(port))).collect();
    wait_lines(&log, 3);
    // Rebuilt by the reload (its timeout changed): the three are still
    // counted, so a fourth is closed at once rather than let in.
    write_atomic(&dir.path().join("oi.conf"), &conf(59));
    oi.reload();
    let began = Instant::now();
    let mut fourth = connect(local(port));
    let mut buf = [0u8; 16];
    let n = fourth.read(&mut buf);
    if !matches!(n, Ok(0)) || began.elapsed() > Duration::from_secs(10) {
        oi.fail(&format!(
            "a fourth handshake past tls-max-handshakes=3 is refused across the reload: \
             {n:?} after {:?}",
            began.elapsed()
        ));
    }
    // One of the three gives up: its place is free for a real client.
    drop(silent.pop());
    let ca_file = p(&root.cert);
    let served = holds_within(Duration::from_secs(20), || {
        s_client(port, &["-tls1_3", "-CAfile", &ca_file], b"").contains("served")
    });
    if !served {
        oi.fail("a client gets through once a place is free");
    }
    drop(silent);
    let (_, stderr) = oi.stop();
    assert!(
        stderr.contains("3 handshakes already in progress (tls-max-handshakes)"),
        "{stderr}"
    );
}

#[test]
fn a_port_range_reads_its_tls_files_once_not_once_a_port() {
    if !openssl_present() || !tool_present("strace", "-V", "strace") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let backend = marker_backend(b"served\n").port();
    let (first, ports) = (free_port_run(50), 50);
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "127.0.0.1 {first}-{} 127.0.0.1 {backend} [tls-cert={},tls-key={}]\n",
            first + ports - 1,
            p(&edge.cert),
            p(&edge.key)
        ),
    );
    // strace runs oi and writes every file it opens (its threads too).
    let trace = dir.path().join("trace");
    let mut command = std::process::Command::new("strace");
    command
        .args(["-f", "-qq", "-e", "trace=openat", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_oi"))
        .arg("-c")
        .arg(&conf);
    let mut traced = OiProcess::spawn(command, dir.path());
    traced.wait_ready();
    let strace = traced.child.id();
    let children = format!("/proc/{strace}/task/{strace}/children");
    let oi = std::fs::read_to_string(&children)
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<i32>().ok())
        .and_then(rustix::process::Pid::from_raw)
        .unwrap_or_else(|| traced.fail("oi runs under strace"));
    let ca_file = p(&root.cert);
    let last = first + ports - 1;
    let out = s_client(last, &["-tls1_3", "-CAfile", &ca_file], b"");
    if !out.contains("served") {
        traced.fail(&format!("the range's last port ends TLS:\n{out}"));
    }
    rustix::process::kill_process(oi, rustix::process::Signal::HUP).expect("SIGHUP oi");
    for want in ["RELOADING=1", "READY=1"] {
        let said = traced.next_notify();
        if !said.contains(want) {
            traced.fail(&format!("after SIGHUP, {want} expected: {said:?}"));
        }
    }
    rustix::process::kill_process(oi, rustix::process::Signal::TERM).expect("SIGTERM oi");
    if traced.exited_within(PATIENCE).is_none() {
        traced.fail("strace ends with oi");
    }
    // At start-up and on the reload, --check's reading (the files, then the
    // expiry warning), the routes' and the views' (the expiry they show): 4
    // each, whatever the range's width (one a port before: 200 each for
    // these 50 ports).
    let text = std::fs::read_to_string(&trace).expect("strace's output");
    let cert = format!("\"{}\"", p(&edge.cert));
    let opened = text.lines().filter(|l| l.contains(&cert)).count();
    assert!(
        (2..=8).contains(&opened),
        "the certificate was opened {opened} times for {ports} ports:\n{}",
        text.lines()
            .filter(|l| l.contains(&cert))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
