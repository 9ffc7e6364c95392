//! Listening sockets oi is given instead of binding them: systemd's socket
//! activation, run here with `systemd-socket-activate` (package `systemd`),
//! which listens, waits for the first connection, then executes oi with the
//! sockets as `LISTEN_FDS`. Without the tool the test says so and passes,
//! unless OI_REQUIRE_TOOLS is set (CI sets it, and installs the package).

use crate::common::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

/// Whether `systemd-socket-activate` runs here; fails under OI_REQUIRE_TOOLS without it.
fn have_socket_activate() -> bool {
    tool_present("systemd-socket-activate", "--version", "systemd")
}

/// One echo round trip on an open stream.
fn echoes(s: &mut (impl Read + Write), what: &[u8]) -> bool {
    let mut back = vec![0u8; what.len()];
    s.write_all(what).is_ok() && s.read_exact(&mut back).is_ok() && back == what
}

#[test]
fn socket_activation_serves_the_passed_listeners_and_binds_the_rest() {
    if !have_socket_activate() {
        return;
    }
    let backend = echo_backend("127.0.0.1:0");
    let dir = tempfile::Builder::new()
        .prefix("oi-act")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let (passed, bound, spare) = (free_port(), free_port(), free_port());
    let sock = dir.path().join("in.sock");
    let conf = dir.path().join("oi.conf");
    let b = backend.port();
    std::fs::write(
        &conf,
        format!(
            "127.0.0.1 {passed} 127.0.0.1 {b}\n\
             127.0.0.1 {bound} 127.0.0.1 {b}\n\
             unix:{} 127.0.0.1 {b}\n",
            sock.display()
        ),
    )
    .expect("conf");
    let mut command = Command::new("systemd-socket-activate");
    command
        .arg(format!("--listen=127.0.0.1:{passed}"))
        .arg(format!("--listen=127.0.0.1:{spare}"))
        .arg(format!("--listen={}", sock.display()))
        .arg("--fdname=web:spare:local")
        .args(["-E", "NOTIFY_SOCKET", "-E", "RUST_LOG"])
        .arg(env!("CARGO_BIN_EXE_oi"))
        .arg("-c")
        .arg(&conf);
    let oi = OiProcess::spawn(command, dir.path());
    // It executes oi on the first connection: this one waits in the passed
    // socket's queue until oi accepts it there.
    wait_until("systemd-socket-activate listens on all three", || {
        oi.stderr_tail().contains(" as 5.")
    });
    let mut first = connect(local(passed));
    first.write_all(b"early").expect("write");
    oi.wait_ready();
    let mut back = [0u8; 5];
    first
        .read_exact(&mut back)
        .unwrap_or_else(|e| oi.fail(&format!("the connection queued before oi ran: {e}")));
    assert_eq!(&back, b"early");
    assert!(echoes(&mut connect(local(passed)), b"again"));
    // No descriptor for this rule: oi bound it itself.
    ping(bound).unwrap_or_else(|e| oi.fail(&format!("the rule oi binds: {e}")));
    let mut unix = UnixStream::connect(&sock).expect("connect the passed unix socket");
    unix.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    assert!(echoes(&mut unix, b"unix"), "through the passed unix socket");
    // The descriptor no rule takes is closed: its port refuses.
    assert!(refused(spare), "the unused passed listener is closed");
    let log = oi.stderr_tail();
    assert!(
        log.contains(&format!(
            "127.0.0.1:{passed}/tcp: serving the passed descriptor(s) 3 (name \"web\")"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "passed descriptor 4 (name \"spare\", 127.0.0.1:{spare}/tcp) matches no rule"
        )),
        "{log}"
    );
    drop((first, unix));
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{status}: {stderr}");
    // The socket file is systemd's: oi leaves it where it was.
    assert!(
        sock.exists(),
        "oi must not remove a socket file it did not make"
    );
}

/// A service manager's notify socket, as far as the descriptor store goes:
/// the test binds it, and reads each datagram with the descriptors it carries.
struct StoreSocket {
    /// The bound datagram socket.
    socket: std::os::unix::net::UnixDatagram,
    /// Where it is bound, for NOTIFY_SOCKET.
    path: std::path::PathBuf,
}

impl StoreSocket {
    fn bind(dir: &std::path::Path) -> Self {
        let path = dir.join("manager.sock");
        let socket = std::os::unix::net::UnixDatagram::bind(&path).expect("notify socket");
        socket
            .set_read_timeout(Some(READY_PATIENCE))
            .expect("timeout");
        StoreSocket { socket, path }
    }

    /// The next datagram's text and descriptors (close-on-exec).
    fn next(&self) -> (String, Vec<std::os::fd::OwnedFd>) {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(256))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut buf = vec![0u8; 8192];
        let got = rustix::net::recvmsg(
            &self.socket,
            &mut [std::io::IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .expect("a notification within the patience");
        let mut fds = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(passed) = m {
                fds.extend(passed);
            }
        }
        let text = String::from_utf8_lossy(&buf[..got.bytes]).into_owned();
        (text, fds)
    }
}

/// The value of `key=` in a notification's text.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn a_restart_with_the_descriptor_store_refuses_no_connection() {
    let backend = echo_backend("127.0.0.1:0");
    let (udp_backend, _) = udp_echo_backend("127.0.0.1:0");
    let dir = tempfile::Builder::new()
        .prefix("oi-fdstore")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let (port, udp_port) = (free_port(), free_udp_port());
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!(
            "127.0.0.1 {port} 127.0.0.1 {}\n127.0.0.1 {udp_port}/udp 127.0.0.1 {}/udp\n",
            backend.port(),
            udp_backend.port()
        ),
    )
    .expect("conf");
    let manager = StoreSocket::bind(dir.path());
    let stderr_path = dir.path().join("first.stderr");
    let mut first = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("-c")
        .arg(&conf)
        // A connection the first oi has accepted when SIGTERM comes is
        // finished, not cut (the default drain is 0): what is checked here
        // is the listeners, which must not refuse anyone in between.
        .args(["--threads", "2", "--drain", "10s"])
        .env("NOTIFY_SOCKET", &manager.path)
        // What systemd 254+ sets from FileDescriptorStoreMax=.
        .env("FDSTORE", "16")
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("spawn oi");
    let first_log = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    // What it stores, until READY=1: (name, descriptors) per message.
    let mut stored: Vec<(String, std::os::fd::OwnedFd)> = Vec::new();
    for _ in 0..64 {
        let (text, fds) = manager.next();
        if field(&text, "FDSTORE") == Some("1") {
            let name = field(&text, "FDNAME").unwrap_or_default().to_string();
            stored.extend(fds.into_iter().map(|fd| (name.clone(), fd)));
        }
        if text.contains("READY=1") {
            break;
        }
    }
    let tcp_name = format!("127.0.0.1_{port}/tcp");
    let udp_name = format!("127.0.0.1_{udp_port}/udp");
    let count = |n: &str| stored.iter().filter(|(name, _)| name == n).count();
    assert_eq!(
        count(&tcp_name),
        1,
        "the TCP listener's one socket (both threads accept from it) is stored: {:?}\n{}",
        stored.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        first_log()
    );
    assert_eq!(count(&udp_name), 1, "the UDP socket is stored");
    ping(port).unwrap_or_else(|e| panic!("first oi serves: {e}\n{}", first_log()));

    // A client connecting in a loop, through the stop and the second start.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u32, Vec::new());
            for _ in 0..1_000_000 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                match ping(port) {
                    Ok(()) => ok += 1,
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        })
    };
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&first),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM");
    let status = first.wait().expect("wait");
    assert!(status.success(), "{status}: {}", first_log());

    // The second oi gets the stored descriptors back from 3 on, named, as
    // systemd passes them: bash moves them there and sets LISTEN_PID to its
    // pid, which exec keeps. The test's own numbers may be 3, 4, ... too, so
    // bash is given copies at 1000 and up (inheritable), which no move
    // overwrites before it is read.
    let mut moves = Vec::new();
    let mut names = Vec::new();
    let mut high = Vec::new();
    for (i, (name, fd)) in stored.iter().enumerate() {
        use std::os::fd::AsRawFd;
        let copy = rustix::io::fcntl_dupfd_cloexec(fd, 1000).expect("copy at 1000 and up");
        rustix::io::fcntl_setfd(&copy, rustix::io::FdFlags::empty()).expect("inheritable");
        let n = copy.as_raw_fd();
        moves.push(format!("{}<&{n} {n}<&-", i + 3));
        names.push(name.clone());
        high.push(copy);
    }
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(format!(
            "exec {}; export LISTEN_PID=$$; exec \"$0\" -c \"$1\"",
            moves.join(" ")
        ))
        .arg(env!("CARGO_BIN_EXE_oi"))
        .arg(&conf)
        .env("LISTEN_FDS", stored.len().to_string())
        .env("LISTEN_FDNAMES", names.join(":"));
    let second_dir = dir.path().join("second");
    std::fs::create_dir(&second_dir).expect("dir");
    let second = OiProcess::spawn(command, &second_dir);
    // The child has its copies; the test's are closed (`stored` below).
    drop(high);
    second.wait_ready();
    drop(stored);
    // A few connections served by the second oi alone, then stop the client.
    for _ in 0..20 {
        ping(port).unwrap_or_else(|e| second.fail(&format!("second oi serves: {e}")));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = client.join().expect("client thread");
    assert!(
        failed.is_empty(),
        "{} of {} connections failed across the restart, first: {:?}\nfirst oi:\n{}",
        failed.len(),
        failed.len() + ok as usize,
        failed.first(),
        first_log()
    );
    let udp = udp_client(local(udp_port));
    assert_eq!(
        udp_roundtrip(&udp, local(udp_port), b"dgram"),
        b"dgram",
        "the UDP socket came back too"
    );
    let log = second.stderr_tail();
    assert!(
        log.contains(&format!(
            "127.0.0.1:{port}/tcp: serving the passed descriptor(s) 3 (name"
        )),
        "{log}"
    );
    let (status, stderr) = second.stop();
    assert!(status.success(), "{status}: {stderr}");
}
