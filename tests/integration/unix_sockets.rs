//! Unix socket endpoints through the real binary: unix listener → TCP
//! backend and TCP listener → unix backend, over copy and splice, with
//! half-close; the socket file's life (stale file replaced, regular file
//! refused, mode, removal on exit and on a reload that drops the rule);
//! abstract sockets; unix to unix; what unix clients look like in the log,
//! the status file, `oi connections` and a PROXY header; and what `--check`
//! says about their ACLs.

use crate::common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Bytes sent each way in the transfer tests: several MiB, so both the
/// pipes and the copy buffers fill many times over.
const TRANSFER: usize = 6 * 1024 * 1024 + 4321;

/// A stream both kinds of client socket give the tests.
trait Stream: Read + Write + Send + 'static {
    /// A second handle, for a writer thread.
    fn twin(&self) -> Self;
    /// Shuts down the write half.
    fn close_write(&self);
}

impl Stream for TcpStream {
    fn twin(&self) -> Self {
        self.try_clone().expect("clone")
    }
    fn close_write(&self) {
        self.shutdown(Shutdown::Write).expect("shutdown");
    }
}

impl Stream for UnixStream {
    fn twin(&self) -> Self {
        self.try_clone().expect("clone")
    }
    fn close_write(&self) {
        self.shutdown(Shutdown::Write).expect("shutdown");
    }
}

/// Serves each connection of `next` on a thread: reads to EOF while
/// echoing every byte, then (after the client's half-close arrived) sends
/// the SHA-256 of everything it read and closes. The echo checks both
/// directions byte for byte; the digest after EOF checks that the
/// client's half-close reached the backend while the way back still worked.
fn echo_then_digest<S: Stream>(mut c: S) {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hash.update(&buf[..n]);
                if c.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
    let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let _ = c.write_all(digest.as_bytes());
}

/// A unix socket backend at `path` running [`echo_then_digest`].
fn unix_backend(path: &Path) {
    let l = UnixListener::bind(path).expect("bind unix backend");
    thread::spawn(move || {
        for c in l.incoming().flatten() {
            thread::spawn(move || echo_then_digest(c));
        }
    });
}

/// An abstract unix socket backend named `name` running [`echo_then_digest`].
fn abstract_backend(name: &str) {
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let l = UnixListener::bind_addr(&addr).expect("bind abstract backend");
    thread::spawn(move || {
        for c in l.incoming().flatten() {
            thread::spawn(move || echo_then_digest(c));
        }
    });
}

/// A TCP backend on loopback running [`echo_then_digest`]; its port.
fn tcp_backend() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind tcp backend");
    let port = l.local_addr().expect("addr").port();
    thread::spawn(move || {
        for c in l.incoming().flatten() {
            thread::spawn(move || echo_then_digest(c));
        }
    });
    port
}

/// Sends [`TRANSFER`] bytes through `s`, half-closes, and checks that the
/// echo came back intact and that the backend's digest followed it.
fn transfer_checked<S: Stream>(mut s: S, seed: u64, what: &str) {
    let data = pattern(TRANSFER, seed);
    let want = sha256(&data);
    let mut w = s.twin();
    let writer = thread::spawn(move || {
        for chunk in data.chunks(256 * 1024) {
            w.write_all(chunk).expect("write");
        }
        w.close_write();
    });
    let mut back = Vec::with_capacity(TRANSFER + 64);
    s.read_to_end(&mut back).expect("read back");
    writer.join().expect("writer");
    assert_eq!(back.len(), TRANSFER + 64, "{what}: echo and digest length");
    let (echo, digest) = back.split_at(TRANSFER);
    assert_eq!(sha256(echo), want, "{what}: the echo came back intact");
    assert_eq!(
        std::str::from_utf8(digest).expect("hex"),
        want,
        "{what}: the backend saw every byte, then the half-close"
    );
}

/// A unix client with the test's read timeout.
fn unix_client(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).expect("connect unix listener");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s
}

/// A temporary directory with a short path: sun_path holds 107 bytes.
fn short_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("oi-ux")
        .tempdir_in("/tmp")
        .expect("tempdir")
}

#[test]
fn unix_listener_to_tcp_backend_over_copy_and_splice_with_half_close() {
    let dir = short_dir();
    let backend = tcp_backend();
    let (copy, splice) = (dir.path().join("copy.sock"), dir.path().join("splice.sock"));
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "unix:{} 127.0.0.1 {backend} [splice=off]\nunix:{} 127.0.0.1 {backend} [splice=on]\n",
            copy.display(),
            splice.display()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    transfer_checked(unix_client(&copy), 1, "unix -> tcp, copy");
    transfer_checked(unix_client(&splice), 2, "unix -> tcp, splice");
    let (status, err) = oi.stop();
    assert!(status.success(), "{err}");
}

#[test]
fn unix_listener_to_unix_backend_over_copy_and_splice() {
    let dir = short_dir();
    let back = dir.path().join("back.sock");
    unix_backend(&back);
    let (copy, splice) = (dir.path().join("copy.sock"), dir.path().join("splice.sock"));
    let conf = dir.path().join("oi.conf");
    let b = back.display();
    write_atomic(
        &conf,
        &format!(
            "unix:{} unix:{b} [splice=off]\nunix:{} unix:{b} [splice=on]\n",
            copy.display(),
            splice.display()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    transfer_checked(unix_client(&copy), 7, "unix -> unix, copy");
    transfer_checked(unix_client(&splice), 8, "unix -> unix, splice");
    let (status, err) = oi.stop();
    assert!(status.success(), "{err}");
}

#[test]
fn tcp_listener_to_unix_backends_over_copy_and_splice_with_half_close() {
    let dir = short_dir();
    let back = dir.path().join("back.sock");
    unix_backend(&back);
    let name = format!("oi-test-back-{}", std::process::id());
    abstract_backend(&name);
    let (copy, splice, abs) = (free_port(), free_port(), free_port());
    let conf = dir.path().join("oi.conf");
    let status = dir.path().join("status.json");
    let b = back.display();
    write_atomic(
        &conf,
        &format!(
            "statusfile {}\nstatusinterval 1\n127.0.0.1 {copy} unix:{b} [splice=off]\n127.0.0.1 {splice} unix:{b} [splice=on]\n127.0.0.1 {abs} unix:@{name}\n",
            status.display()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    transfer_checked(connect(local(copy)), 3, "tcp -> unix, copy");
    transfer_checked(connect(local(splice)), 4, "tcp -> unix, splice");
    transfer_checked(connect(local(abs)), 5, "tcp -> abstract unix");
    // Counted by the backend's side, as rinetd-uv counts them.
    let text = wait_for_file(&status, |t| t.contains("\"total_unix\":3"));
    assert!(text.contains("\"total_tcp\":0"), "{text}");
    let (status, err) = oi.stop();
    assert!(status.success(), "{err}");
}

#[test]
fn abstract_listener_forwards_and_leaves_no_file() {
    let dir = short_dir();
    let backend = tcp_backend();
    let name = format!("oi-test-front-{}", std::process::id());
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, &format!("unix:@{name} 127.0.0.1 {backend}\n"));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let s = UnixStream::connect_addr(&addr).expect("connect abstract listener");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    transfer_checked(s, 6, "abstract unix -> tcp");
    let (status, err) = oi.stop();
    assert!(status.success(), "{err}");
    let refused = UnixStream::connect_addr(&addr).expect_err("closed on exit");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
}

/// Whether something at `path` is a socket file.
fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// One 4-byte round trip through the unix listener at `path`.
fn unix_ping(path: &Path) -> bool {
    let Ok(mut s) = UnixStream::connect(path) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(PATIENCE));
    let mut b = [0u8; 4];
    s.write_all(b"ping").is_ok() && s.read_exact(&mut b).is_ok() && &b == b"ping"
}

#[test]
fn socket_file_life_stale_file_mode_reload_and_exit() {
    let dir = short_dir();
    let backend = tcp_backend();
    let (kept, dropped) = (
        dir.path().join("kept.sock"),
        dir.path().join("dropped.sock"),
    );
    // A stale file: a socket left behind by a process that is gone.
    drop(UnixListener::bind(&kept).expect("stale socket"));
    assert!(is_socket(&kept));
    let conf = dir.path().join("oi.conf");
    let both = format!(
        "unix:{} 127.0.0.1 {backend} [mode=0640]\nunix:{} 127.0.0.1 {backend} [mode=0604]\n",
        kept.display(),
        dropped.display()
    );
    write_atomic(&conf, &both);
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    assert!(
        unix_ping(&kept),
        "the stale file was replaced by a live socket"
    );
    assert!(unix_ping(&dropped));
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o7777;
    assert_eq!(mode(&kept), 0o640);
    assert_eq!(mode(&dropped), 0o604);
    let inode = std::fs::metadata(&kept).expect("meta").ino();

    // A reload without the second rule removes its file; the first keeps
    // its socket and takes its new mode.
    write_atomic(
        &conf,
        &both
            .lines()
            .next()
            .map(|l| format!("{}\n", l.replace("0640", "0660")))
            .unwrap_or_default(),
    );
    oi.reload();
    assert!(
        !dropped.exists(),
        "a reload that drops the rule removes its file"
    );
    assert_eq!(
        std::fs::metadata(&kept).expect("meta").ino(),
        inode,
        "same socket"
    );
    assert!(unix_ping(&kept), "the kept listener still serves");
    assert_eq!(mode(&kept), 0o660, "a new mode applies to the kept socket");

    let (status, err) = oi.stop();
    assert!(status.success(), "{err}");
    assert!(!kept.exists(), "the socket file is removed on exit");
}

/// Runs oi on `conf` expecting it to fail at start-up; returns its stderr.
fn start_fails(conf: &Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("-c")
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn oi");
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("oi started although it should have refused");
        }
        thread::sleep(Duration::from_millis(5));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(!status.success(), "{err}");
    err
}

#[test]
fn a_regular_file_or_a_live_socket_at_the_path_is_refused_and_left_alone() {
    let dir = short_dir();
    let path = dir.path().join("taken.sock");
    std::fs::write(&path, b"not a socket").expect("regular file");
    let conf = dir.path().join("oi.conf");
    write_atomic(&conf, &format!("unix:{} 127.0.0.1 9\n", path.display()));
    let err = start_fails(&conf);
    assert!(
        err.contains(&format!(
            "oi.conf:1: cannot bind unix:{}: {} exists and is not a socket",
            path.display(),
            path.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).expect("left alone"), b"not a socket");

    let live = dir.path().join("live.sock");
    let _other = UnixListener::bind(&live).expect("another program's socket");
    write_atomic(&conf, &format!("unix:{} 127.0.0.1 9\n", live.display()));
    let err = start_fails(&conf);
    assert!(err.contains("another process is listening on"), "{err}");
    assert!(is_socket(&live), "the other program's socket is left alone");
}

#[test]
fn unix_clients_in_the_log_the_status_file_and_the_proxy_header() {
    let dir = short_dir();
    // A backend that reports the PROXY header it got (up to the first 16 bytes).
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = l.local_addr().expect("addr").port();
    let (headers, got) = std::sync::mpsc::channel::<Vec<u8>>();
    thread::spawn(move || {
        // Held open, so the connections stay active while the test looks.
        let mut open = Vec::new();
        for mut c in l.incoming().flatten() {
            let mut b = [0u8; 16];
            let _ = c.set_read_timeout(Some(PATIENCE));
            if c.read_exact(&mut b).is_ok() {
                let _ = headers.send(b.to_vec());
            }
            open.push(c);
        }
    });
    let (v1, v2) = (dir.path().join("v1.sock"), dir.path().join("v2.sock"));
    let (log, status) = (dir.path().join("oi.log"), dir.path().join("status.json"));
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "logfile {}\nstatusfile {}\nstatusinterval 1\nunix:{} 127.0.0.1 {backend} [proxy=v1]\nunix:{} 127.0.0.1 {backend} [proxy=v2]\n",
            log.display(),
            status.display(),
            v1.display(),
            v2.display()
        ),
    );
    let ctl = dir.path().join("ctl.sock");
    let ctl_arg = ctl.to_str().expect("utf-8 path");
    let oi = OiProcess::start(dir.path(), &conf, &["--socket", ctl_arg]);
    let mut a = unix_client(&v1);
    a.write_all(b"0123456789").expect("write");
    assert_eq!(
        got.recv_timeout(PATIENCE).expect("v1 header"),
        b"PROXY UNKNOWN\r\n0"
    );
    let mut b = unix_client(&v2);
    b.write_all(b"x").expect("write");
    let v2_local = [
        0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x20, 0x00, 0x00,
        0x00,
    ];
    assert_eq!(got.recv_timeout(PATIENCE).expect("v2 header"), v2_local);

    let text = wait_for_file(&status, |t| t.contains("\"active_unix\":2"));
    assert!(text.contains("\"active_unix\":2"), "{text}");
    assert!(text.contains("\"total_unix\":2"), "{text}");
    assert!(text.contains("\"active_tcp\":0"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["connections", "--socket", ctl_arg])
        .output()
        .expect("oi connections");
    let listing = String::from_utf8_lossy(&out.stdout);
    let v1_rule = format!("unix:{}", v1.display());
    assert!(
        listing.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 2 && (f[0], f[1], f[2]) == (v1_rule.as_str(), "unix", "unix-client")
        }),
        "{listing}"
    );
    drop((a, b));
    let lines = wait_lines(&log, 2);
    let want = format!(
        "\tunix-client\tunix:{}\t0\t127.0.0.1\t{backend}\t",
        v1.display()
    );
    assert!(lines.iter().any(|l| l.contains(&want)), "{lines:?}");
    let (status, err) = oi.stop();
    assert!(status.success(), "{err}");
}

#[test]
fn check_says_acls_do_not_apply_to_unix_listeners() {
    let dir = short_dir();
    let conf = dir.path().join("oi.conf");
    let sock: PathBuf = dir.path().join("a.sock");
    write_atomic(
        &conf,
        &format!(
            "allow 10.*\nunix:{} 127.0.0.1 80\ndeny 10.0.0.1\n0.0.0.0 2375 unix:/var/run/docker.sock\n",
            sock.display()
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("run oi --check");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let name = conf.display();
    assert!(
        stderr.contains(&format!(
            "{name}:2: warning: its allow/deny lines and the global ones do not apply to this unix socket listener (a unix client has no address); use the socket file's mode: 'unix:{} 127.0.0.1 80/tcp'",
            sock.display()
        )),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!(
            "{name}:2: unix:{} -> 127.0.0.1:80/tcp (unix socket clients: allow/deny do not apply)",
            sock.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{name}:4: 0.0.0.0:2375/tcp -> unix:/var/run/docker.sock global: allow 10.*"
        )),
        "{stdout}"
    );
    assert!(!sock.exists(), "--check binds nothing");
}

#[test]
fn a_unix_listener_counts_its_limit_refusals() {
    let dir = short_dir();
    let backend = tcp_backend();
    let (sock, status) = (dir.path().join("l.sock"), dir.path().join("status.json"));
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "statusfile {}\nstatusinterval 1\nunix:{} 127.0.0.1 {backend} [maxconn=1]\n",
            status.display(),
            sock.display()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    // The first client holds the one place; the second is refused.
    let mut first = unix_client(&sock);
    first.write_all(b"x").expect("write");
    wait_for_file(&status, |t| t.contains("\"active_unix\":1"));
    let mut second = unix_client(&sock);
    let mut buf = [0u8; 1];
    assert_eq!(
        second.read(&mut buf).expect("closed, not reset"),
        0,
        "refused"
    );
    let text = wait_for_file(&status, |t| t.contains("\"limit_reached\":1"));
    assert!(
        text.contains("\"connections_refused_by_limits\":1"),
        "{text}"
    );
    drop(first);
    oi.stop();
}
