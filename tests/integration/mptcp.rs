//! `[mptcp]`: an MPTCP client through oi to an MPTCP backend, copying and
//! splicing, with `ss` showing both of oi's subflows as MPTCP (the
//! `tcp-ulp-mptcp` its subflows carry); `mptcp=listen` leaves the backend
//! leg plain TCP. Skipped with a message where the kernel has no MPTCP or
//! `net.mptcp.enabled` is 0; `ss` (iproute2) is needed unless missing and
//! OI_REQUIRE_TOOLS is unset.

use crate::common::*;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

/// Longest any socket operation of these tests waits.
const PATIENCE: Duration = Duration::from_secs(10);

/// Whether MPTCP and `ss` are here; says why not otherwise.
fn available() -> bool {
    let enabled = std::fs::read_to_string("/proc/sys/net/mptcp/enabled");
    if !enabled.as_deref().is_ok_and(|v| v.trim() == "1") {
        eprintln!("skipped: MPTCP is not enabled here (/proc/sys/net/mptcp/enabled: {enabled:?})");
        return false;
    }
    tool_present("ss", "-V", "iproute2")
}

/// An MPTCP socket on 127.0.0.1.
fn mptcp_socket() -> Socket {
    Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::MPTCP)).expect("MPTCP socket")
}

/// What `ss` shows of the connected TCP sockets (MPTCP subflows included)
/// matching `filter` (such as `sport = :8000`), with their details; any
/// state but listening, as a half-closed leg is in FIN-WAIT-2.
fn subflows(filter: &str) -> String {
    let out = Command::new("ss")
        .args(["-tniH"])
        .arg(filter)
        .output()
        .expect("ss");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One connection through oi at `front` to `backend`: the client sends
/// `up` and closes its side, the backend reads it all, checks on oi's
/// subflows with `check` while both are open, then sends `down` and closes.
/// Returns what each end read.
fn exchange(
    front: SocketAddr,
    backend: TcpListener,
    up: Vec<u8>,
    down: Vec<u8>,
    check: impl FnOnce() + Send + 'static,
) -> (Vec<u8>, Vec<u8>) {
    let server = std::thread::spawn(move || {
        let (mut s, _) = backend.accept().expect("backend accept");
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("backend read");
        check();
        s.write_all(&down).expect("backend write");
        got
    });
    let client = mptcp_socket();
    client
        .connect_timeout(&front.into(), PATIENCE)
        .expect("client connect");
    let mut client = TcpStream::from(client);
    client.set_read_timeout(Some(PATIENCE)).expect("timeout");
    client.write_all(&up).expect("client write");
    client.shutdown(Shutdown::Write).expect("client shutdown");
    let mut got = Vec::new();
    client.read_to_end(&mut got).expect("client read");
    let seen = server.join().expect("backend thread");
    (seen, got)
}

#[test]
fn mptcp_client_to_mptcp_backend_both_subflows_of_oi_are_mptcp_copy_and_splice() {
    if !available() {
        return;
    }
    for splice in ["on", "off"] {
        let backend = mptcp_socket();
        backend
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("bind");
        backend.listen(16).expect("listen");
        let backend = TcpListener::from(backend);
        let bport = backend.local_addr().expect("addr").port();
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("oi.conf");
        write_atomic(
            &conf,
            &format!("127.0.0.1 {port} 127.0.0.1 {bport} [mptcp, splice={splice}]\n"),
        );
        let oi = OiProcess::start(dir.path(), &conf, &[]);
        let (up, down) = (pattern(3 << 20, 7), pattern(2 << 20, 8));
        let check = move || {
            let front = subflows(&format!("sport = :{port}"));
            let back = subflows(&format!("dport = :{bport}"));
            assert!(front.contains("tcp-ulp-mptcp"), "client leg: {front}");
            assert!(back.contains("tcp-ulp-mptcp"), "backend leg: {back}");
        };
        let front = SocketAddr::from(([127, 0, 0, 1], port));
        let (seen, got) = exchange(front, backend, up.clone(), down.clone(), check);
        assert_eq!(
            sha256(&seen),
            sha256(&up),
            "splice={splice}: client to backend"
        );
        assert_eq!(
            sha256(&got),
            sha256(&down),
            "splice={splice}: backend to client"
        );
        let (_, stderr) = oi.stop();
        assert!(!stderr.contains("refuses MPTCP"), "{stderr}");
    }
}

#[test]
fn mptcp_listen_keeps_the_backend_leg_plain_tcp() {
    if !available() {
        return;
    }
    let backend = TcpListener::bind("127.0.0.1:0").expect("bind");
    let bport = backend.local_addr().expect("addr").port();
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.yaml");
    write_atomic(
        &conf,
        &format!(
            "rules:\n  - name: m\n    bind: 127.0.0.1:{port}\n    connect: 127.0.0.1:{bport}\n    mptcp: listen\n"
        ),
    );
    let _oi = OiProcess::start(dir.path(), &conf, &[]);
    let check = move || {
        let front = subflows(&format!("sport = :{port}"));
        let back = subflows(&format!("dport = :{bport}"));
        assert!(front.contains("tcp-ulp-mptcp"), "client leg: {front}");
        assert!(!back.is_empty(), "backend leg listed");
        assert!(!back.contains("tcp-ulp-mptcp"), "backend leg: {back}");
    };
    let front = SocketAddr::from(([127, 0, 0, 1], port));
    let (seen, got) = exchange(front, backend, b"up".to_vec(), b"down".to_vec(), check);
    assert_eq!(
        (seen.as_slice(), got.as_slice()),
        (&b"up"[..], &b"down"[..])
    );
}

#[test]
fn where_the_kernel_refuses_mptcp_oi_uses_plain_tcp_and_says_so_once() {
    // A network namespace of oi's own with net.mptcp.enabled=0: root only.
    if !rustix::process::geteuid().is_root() || Command::new("unshare").arg("-V").output().is_err()
    {
        assert!(
            std::env::var_os("OI_REQUIRE_TOOLS").is_none(),
            "needs root and unshare (util-linux), and OI_REQUIRE_TOOLS is set"
        );
        eprintln!("skipped: needs root and unshare (util-linux)");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    // Fixed ports: the namespace is oi's alone. Two mptcp rules, one warning.
    write_atomic(
        &conf,
        "127.0.0.1 8000 127.0.0.1 9000 [mptcp]\n127.0.0.1 8001 127.0.0.1 9000 [mptcp=connect]\n",
    );
    let wrapper = dir.path().join("oi-without-mptcp");
    let text = format!(
        "#!/bin/sh\nexec unshare -n sh -c 'ip link set lo up && \
         echo 0 > /proc/sys/net/mptcp/enabled && exec \"$0\" \"$@\"' {} \"$@\"\n",
        env!("CARGO_BIN_EXE_oi")
    );
    std::fs::write(&wrapper, text).expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let oi = OiProcess::start_program(&wrapper, dir.path(), &conf, &[]);
    // The test's sockets join oi's namespace on a thread of their own.
    let ns = format!("/proc/{}/ns/net", oi.child.id());
    let (seen, got) = run_in_netns(ns, move || {
        let backend = TcpListener::bind("127.0.0.1:9000").expect("backend");
        let front = SocketAddr::from(([127, 0, 0, 1], 8000));
        // The client asks for plain TCP too: its kernel has MPTCP off.
        let server = std::thread::spawn(move || {
            let (mut s, _) = backend.accept().expect("accept");
            s.set_read_timeout(Some(PATIENCE)).expect("timeout");
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("backend read");
            s.write_all(b"down").expect("backend write");
            got
        });
        let mut c = TcpStream::connect_timeout(&front, PATIENCE).expect("connect");
        c.set_read_timeout(Some(PATIENCE)).expect("timeout");
        c.write_all(b"up").expect("write");
        c.shutdown(Shutdown::Write).expect("shutdown");
        let mut got = Vec::new();
        c.read_to_end(&mut got).expect("read");
        (server.join().expect("backend thread"), got)
    });
    assert_eq!(
        (seen.as_slice(), got.as_slice()),
        (&b"up"[..], &b"down"[..])
    );
    let (_, stderr) = oi.stop();
    assert_eq!(
        stderr.matches("the kernel refuses MPTCP sockets").count(),
        1,
        "said once: {stderr}"
    );
}
