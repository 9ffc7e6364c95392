//! oi's diagnostics under systemd: with `JOURNAL_STREAM` naming its stderr,
//! each line reaches journald's socket as native fields with its own
//! PRIORITY; otherwise (or when the socket refuses a line) stderr, as ever.
//!
//! oi runs in a mount namespace of its own where a socket the test bound
//! is mounted on /run/systemd/journal/socket (oi has no way to be pointed
//! at another socket), and JOURNAL_STREAM is what systemd would set: the
//! device and inode of the stderr oi is given. A TLS connection's line
//! carries its client certificate's subject as OI_TLS_SUBJECT.

use crate::common::*;
use std::collections::HashMap;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// One journal entry: its fields by name.
type Entry = HashMap<String, String>;

/// A script in `dir` that runs oi with the journal socket `socket` mounted
/// where journald's is, and JOURNAL_STREAM set to `stream` (`None`: the
/// device and inode of the stderr oi gets, as systemd sets it).
fn oi_under_journal(dir: &Path, socket: &Path, stream: Option<&str>) -> PathBuf {
    let stream = stream.map_or(
        "$(stat -L -c %d:%i /proc/self/fd/2)".to_string(),
        str::to_string,
    );
    let script = dir.join("oi-under-journal");
    // `unshare` without `--fork` and `exec` keep one process: signals reach
    // oi. The tmpfs on /run keeps the host's /run untouched.
    let text = format!(
        "#!/bin/sh\nexec unshare --mount sh -c 'mount -t tmpfs tmpfs /run && \
         mkdir -p /run/systemd/journal && : > /run/systemd/journal/socket && \
         mount --bind \"$0\" /run/systemd/journal/socket && \
         JOURNAL_STREAM={stream} && export JOURNAL_STREAM && exec \"$@\"' {} {} \"$@\"\n",
        socket.display(),
        env!("CARGO_BIN_EXE_oi")
    );
    std::fs::write(&script, text).expect("write script");
    let mut perm = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).expect("chmod");
    script
}

/// Decodes one native-protocol datagram (`NAME=value\n`, or `NAME\n`, a
/// 64-bit little-endian length, the value and `\n`).
fn decode(mut d: &[u8]) -> Entry {
    let mut entry = Entry::new();
    while let Some(nl) = d.iter().position(|&b| b == b'\n') {
        let line = &d[..nl];
        match line.iter().position(|&b| b == b'=') {
            Some(eq) => {
                let name = String::from_utf8_lossy(&line[..eq]).into_owned();
                entry.insert(name, String::from_utf8_lossy(&line[eq + 1..]).into_owned());
                d = &d[nl + 1..];
            }
            None => {
                let name = String::from_utf8_lossy(line).into_owned();
                let len = d
                    .get(nl + 1..nl + 9)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
                    .and_then(|n| usize::try_from(n).ok())
                    .expect("a binary field's length");
                let value = d.get(nl + 9..nl + 9 + len).expect("the value");
                entry.insert(name, String::from_utf8_lossy(value).into_owned());
                d = d.get(nl + 10 + len..).unwrap_or_default();
            }
        }
    }
    entry
}

/// Receives entries until one satisfies `want`, failing (with oi's stderr)
/// if none does within [`PATIENCE`]; returns it and those before it.
fn until(
    socket: &UnixDatagram,
    oi: &OiProcess,
    what: &str,
    want: impl Fn(&Entry) -> bool,
) -> Vec<Entry> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 128 * 1024];
    // Each receive waits at most PATIENCE (the socket's timeout), and an
    // entry oi never sends ends the loop at the first timeout.
    for _ in 0..10_000 {
        match socket.recv(&mut buf) {
            Ok(n) => {
                let entry = decode(&buf[..n]);
                let done = want(&entry);
                seen.push(entry);
                if done {
                    return seen;
                }
            }
            Err(e) => oi.fail(&format!(
                "no journal entry {what}: {e}; entries so far: {seen:?}"
            )),
        }
    }
    oi.fail(&format!("no journal entry {what} in 10,000"))
}

/// Whether this test can run here; skipped (and said so) otherwise.
fn can_run() -> bool {
    let ok = rustix::process::geteuid().is_root() && mount_namespaces_work();
    if !ok {
        assert!(
            std::env::var_os("OI_REQUIRE_TOOLS").is_none(),
            "needs root and unshare (util-linux), and OI_REQUIRE_TOOLS is set"
        );
        eprintln!("skipped: needs root and unshare (util-linux) for a mount namespace");
    }
    ok
}

#[test]
fn under_journald_each_line_carries_its_priority_and_fields_and_a_refused_one_goes_to_stderr() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let socket_path = dir.path().join("journal.sock");
    let journal = UnixDatagram::bind(&socket_path).expect("bind the journal socket");
    journal.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let backend = echo_backend("127.0.0.1:0");
    let (kept, removed) = (free_port(), free_port());
    let conf = dir.path().join("oi.conf");
    let rule = |port: u16| format!("127.0.0.1 {port} 127.0.0.1 {}\n", backend.port());
    write_atomic(&conf, &format!("{}{}", rule(kept), rule(removed)));
    let script = oi_under_journal(dir.path(), &socket_path, None);
    let oi = OiProcess::start_program(&script, dir.path(), &conf, &[]);

    // Routine: the start-up line, at info.
    let start = until(&journal, &oi, "for the start", |e| {
        e.get("MESSAGE").is_some_and(|m| m.starts_with("oi "))
    });
    let first = start.last().expect("an entry");
    assert_eq!(
        first.get("PRIORITY").map(String::as_str),
        Some("6"),
        "{first:?}"
    );
    assert_eq!(
        first.get("SYSLOG_IDENTIFIER").map(String::as_str),
        Some("oi")
    );
    assert!(
        first.get("CODE_FILE").is_some_and(|f| f.ends_with(".rs")),
        "{first:?}"
    );
    assert!(first
        .get("CODE_LINE")
        .is_some_and(|l| l.parse::<u32>().is_ok()));

    // A rule removed: info, naming the rule.
    write_atomic(&conf, &rule(kept));
    oi.reload();
    let stopped = until(&journal, &oi, "for the removed rule", |e| {
        e.get("MESSAGE")
            .is_some_and(|m| m.starts_with("stopped listening"))
    });
    let stopped = stopped.last().expect("an entry");
    assert_eq!(stopped.get("PRIORITY").map(String::as_str), Some("6"));
    assert_eq!(
        stopped.get("OI_RULE").map(String::as_str),
        Some(format!("127.0.0.1:{removed}/tcp").as_str()),
        "{stopped:?}"
    );

    // A reload refused: errors (`journalctl -p err` shows them), with the reason.
    write_atomic(
        &conf,
        &format!("{}127.0.0.1 notaport 127.0.0.1 1\n", rule(kept)),
    );
    oi.reload();
    let refused = until(&journal, &oi, "for the refused reload", |e| {
        e.get("MESSAGE")
            .is_some_and(|m| m.contains("keeping the previous configuration"))
    });
    let errors: Vec<&Entry> = refused
        .iter()
        .filter(|e| e.get("OI_REASON").is_some_and(|r| r == "reload-failed"))
        .collect();
    assert!(
        errors.len() >= 2,
        "the bad line and the verdict: {refused:?}"
    );
    for e in &errors {
        assert_eq!(e.get("PRIORITY").map(String::as_str), Some("3"), "{e:?}");
    }
    assert!(
        errors
            .iter()
            .any(|e| e.get("MESSAGE").is_some_and(|m| m.contains("notaport"))),
        "{errors:?}"
    );
    // None of it went to stderr as well.
    let stderr = oi.stderr_tail();
    assert!(
        !stderr.contains("keeping the previous configuration"),
        "{stderr}"
    );

    // journald gone: the next line goes to stderr, not lost.
    drop(journal);
    oi.signal(rustix::process::Signal::USR1);
    wait_until("the status line reaches stderr", || {
        oi.stderr_tail().contains("status:")
    });
    let (status, _) = oi.stop();
    assert!(status.success(), "{status}");
}

#[test]
fn a_journal_stream_that_is_not_stderr_leaves_lines_on_stderr() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let socket_path = dir.path().join("journal.sock");
    let journal = UnixDatagram::bind(&socket_path).expect("bind the journal socket");
    journal.set_nonblocking(true).expect("nonblocking");
    let backend = echo_backend("127.0.0.1:0");
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!("127.0.0.1 {} 127.0.0.1 {}\n", free_port(), backend.port()),
    );
    // Inherited from a parent whose stderr was the journal: not oi's.
    let script = oi_under_journal(dir.path(), &socket_path, Some("1:1"));
    let oi = OiProcess::start_program(&script, dir.path(), &conf, &[]);
    // The start-up line is written (synchronously, to stderr or the
    // socket) before READY=1: once it is on stderr, the socket had its chance.
    wait_until("the start-up line is on stderr", || {
        oi.stderr_tail().contains("] oi ")
    });
    let mut buf = [0u8; 1024];
    let got = journal.recv(&mut buf);
    assert!(
        got.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing reaches the journal socket: {got:?}"
    );
    let (status, _) = oi.stop();
    assert!(status.success(), "{status}");
}

#[test]
fn a_client_certificate_s_subject_is_a_field_of_its_connection_s_line() {
    if !can_run() || !crate::tls::openssl_present() {
        return;
    }
    use crate::tls::{ca, leaf};
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let socket_path = dir.path().join("journal.sock");
    let journal = UnixDatagram::bind(&socket_path).expect("bind the journal socket");
    journal.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let root = ca(dir.path(), "ca");
    let edge = leaf(dir.path(), &root, "edge.test", 30);
    let client = leaf(dir.path(), &root, "client.test", 30);
    let backend = echo_backend("127.0.0.1:0");
    let port = free_port();
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "127.0.0.1 {port} 127.0.0.1 {} [tls-cert={},tls-key={},tls-client-ca={}]\n",
            backend.port(),
            edge.cert.display(),
            edge.key.display(),
            root.cert.display()
        ),
    );
    // The connection's line is at debug level.
    let script = oi_under_journal(dir.path(), &socket_path, None);
    let debug = dir.path().join("oi-debug");
    std::fs::write(
        &debug,
        format!(
            "#!/bin/sh\nRUST_LOG=debug exec {} \"$@\"\n",
            script.display()
        ),
    )
    .expect("write script");
    let mut perm = std::fs::metadata(&debug).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&debug, perm).expect("chmod");
    let oi = OiProcess::start_program(&debug, dir.path(), &conf, &[]);
    let mut c = crate::tls_views::rustls_client_with_cert(
        port,
        &root.cert,
        "edge.test",
        &client.cert,
        &client.key,
    );
    c.write_all(b"ping").expect("write");
    let mut back = [0u8; 4];
    c.read_exact(&mut back).expect("echo");
    drop(c);
    let seen = until(&journal, &oi, "with OI_TLS_SUBJECT", |e| {
        e.contains_key("OI_TLS_SUBJECT")
    });
    let line = seen.last().expect("an entry");
    assert_eq!(
        line.get("OI_TLS_SUBJECT").map(String::as_str),
        Some("CN=client.test"),
        "{line:?}"
    );
    assert_eq!(
        line.get("OI_RULE").map(String::as_str),
        Some(format!("127.0.0.1:{port}").as_str()),
        "{line:?}"
    );
    let (status, _) = oi.stop();
    assert!(status.success(), "{status}");
}
