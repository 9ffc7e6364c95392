//! `oi upgrade` hands live TCP connections to the new oi: a transfer each
//! way over a copying rule and a splicing rule, paused mid-way so bytes sit
//! in oi's buffers and pipes, and idle connections, all survive the switch;
//! the old oi exits without waiting for them.

use super::upgrade::{put_binary, put_script, signal_upgrade, Adopted};
use crate::common::*;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes each way per transfer.
const TOTAL: usize = 64 * 1024 * 1024;

/// How long a transfer's first part and the upgrade after it may take, where
/// [`PATIENCE`] bounds one event: up to 1 GiB through a debug build of oi on
/// a machine the 20-run series loads with two busy loops and the suite.
pub(super) const TRANSFER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(300);

/// Where each reader stops until the upgrade is done.
const PAUSE_AT: usize = 1024 * 1024;

/// The deterministic `total` bytes (a multiple of 64 KiB) a transfer
/// seeded `seed` carries (xorshift64).
pub(super) fn stream(seed: u64, total: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut x = seed | 1;
    (0..total / 65536).map(move |_| {
        let mut chunk = Vec::with_capacity(65536);
        for _ in 0..65536 / 8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.extend_from_slice(&x.to_le_bytes());
        }
        chunk
    })
}

/// The sha256 of [`stream`]`(seed, total)`.
pub(super) fn expected(seed: u64, total: usize) -> Vec<u8> {
    let mut h = Sha256::new();
    stream(seed, total).for_each(|c| h.update(&c));
    h.finalize().to_vec()
}

/// Writes the stream seeded `seed`, then shuts the write half down. Once
/// every reader is paused (`paused` is 4), the first write that would
/// block counts in `stalled`: the path is full, so oi's pump for this
/// direction is blocked writing, with bytes it read and has not written.
/// A writer whose every byte fitted in the kernel's buffers counts when it
/// is done instead (its direction is then handed over half-closed).
pub(super) fn send(
    s: TcpStream,
    seed: u64,
    total: usize,
    paused: &AtomicUsize,
    stalled: &AtomicUsize,
) -> std::io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::net::SendFlags;
    let mut counted = false;
    for chunk in stream(seed, total) {
        let mut at = 0;
        while at < chunk.len() {
            match rustix::net::send(&s, &chunk[at..], SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
                Ok(n) => at += n,
                Err(rustix::io::Errno::AGAIN) => {
                    // In ticks of 100 ms, so a writer blocked before the
                    // last reader paused still counts itself once it has.
                    let tick = Timespec {
                        tv_sec: 0,
                        tv_nsec: 100_000_000,
                    };
                    // A writer stalls from the moment the path is full
                    // until the upgrade is done: as long as the slowest
                    // other end's first part and the upgrade.
                    let ticks = TRANSFER_PATIENCE.as_millis() / 100;
                    let mut waited = 0;
                    loop {
                        if !counted && paused.load(Ordering::SeqCst) == 4 {
                            counted = true;
                            stalled.fetch_add(1, Ordering::SeqCst);
                        }
                        let mut fds = [PollFd::new(&s, PollFlags::OUT)];
                        if poll(&mut fds, Some(&tick))? > 0 {
                            break;
                        }
                        waited += 1;
                        if waited >= ticks {
                            return Err(std::io::Error::other(
                                "not writable for TRANSFER_PATIENCE",
                            ));
                        }
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    if !counted {
        stalled.fetch_add(1, Ordering::SeqCst);
    }
    s.shutdown(Shutdown::Write)
}

/// Reads to EOF and hashes; after `pause_at` bytes it counts itself in
/// `paused` and waits until `go` is set (bounded by [`TRANSFER_PATIENCE`]).
pub(super) fn receive(
    mut s: TcpStream,
    pause_at: usize,
    paused: &AtomicUsize,
    go: &AtomicBool,
) -> (usize, Vec<u8>) {
    let mut h = Sha256::new();
    let mut n = 0;
    let mut buf = vec![0u8; 65536];
    let mut waited = false;
    loop {
        if n >= pause_at && !waited {
            waited = true;
            paused.fetch_add(1, Ordering::SeqCst);
            // Bounded by the slowest other end's first half plus the
            // upgrade, which on a loaded machine is far beyond PATIENCE.
            assert!(
                holds_within(TRANSFER_PATIENCE, || go.load(Ordering::SeqCst)),
                "timed out after {TRANSFER_PATIENCE:?} waiting until the upgrade is done"
            );
        }
        let want = if waited {
            buf.len()
        } else {
            (pause_at - n).min(buf.len())
        };
        match s.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(k) => {
                h.update(&buf[..k]);
                n += k;
            }
            Err(e) => panic!("transfer broken after {n} bytes: {e}"),
        }
    }
    (n, h.finalize().to_vec())
}

/// A backend: a connection starting with `E` is echoed; one starting with
/// `B` and a size (8 bytes, little-endian) gets the stream seeded 2 of that
/// size while what it sends is hashed (seed 1 expected; the reader pauses
/// half-way, or at [`PAUSE_AT`] for [`TOTAL`]) and its (bytes, hash) sent on
/// `got`. At most `conns` connections.
pub(super) fn backend(
    conns: usize,
    paused: Arc<AtomicUsize>,
    stalled: Arc<AtomicUsize>,
    go: Arc<AtomicBool>,
    got: std::sync::mpsc::Sender<(usize, Vec<u8>)>,
) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    // Accepted sockets inherit it: see [`small_window`].
    small_window(&l);
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming().take(conns) {
            let Ok(mut s) = s else { continue };
            let mut role = [0u8; 1];
            if s.read_exact(&mut role).is_err() {
                continue;
            }
            let (paused, stalled, go, got) =
                (paused.clone(), stalled.clone(), go.clone(), got.clone());
            std::thread::spawn(move || {
                if role[0] == b'E' {
                    let mut b = [0u8; 4096];
                    while let Ok(n @ 1..) = s.read(&mut b) {
                        if s.write_all(&b[..n]).is_err() {
                            break;
                        }
                    }
                    return;
                }
                let mut size = [0u8; 8];
                if s.read_exact(&mut size).is_err() {
                    return;
                }
                let total = usize::try_from(u64::from_le_bytes(size)).expect("a size");
                let out = s.try_clone().expect("clone");
                let p = paused.clone();
                let writer = std::thread::spawn(move || send(out, 2, total, &p, &stalled));
                let _ = got.send(receive(s, pause_at(total), &paused, &go));
                writer
                    .join()
                    .expect("backend writer")
                    .expect("backend sends");
            });
        }
    });
    port
}

/// Where a reader of `total` bytes pauses.
pub(super) fn pause_at(total: usize) -> usize {
    if total == TOTAL {
        PAUSE_AT
    } else {
        total / 2
    }
}

/// A fixed 256 KiB receive buffer (no autotuning, which here grows to 32
/// MiB): a paused reader then stops oi's pump within a few MiB, with bytes
/// read and not yet written in its buffer or pipe.
pub(super) fn small_window(s: &impl std::os::fd::AsFd) {
    socket2::SockRef::from(s)
        .set_recv_buffer_size(256 * 1024)
        .expect("SO_RCVBUF");
}

/// A transfer each way through one port: the client's writer and reader.
pub(super) type Transfer = (
    u16,
    std::thread::JoinHandle<std::io::Result<()>>,
    std::thread::JoinHandle<(usize, Vec<u8>)>,
);

/// Starts a transfer of `total` bytes each way through `port` (role `B`):
/// a writer thread and a reader thread that stops at `pause_at` until `go`.
pub(super) fn start_transfer(
    port: u16,
    total: usize,
    pause_at: usize,
    paused: &Arc<AtomicUsize>,
    stalled: &Arc<AtomicUsize>,
    go: &Arc<AtomicBool>,
) -> Transfer {
    let mut s = bulk_client(port);
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s.write_all(b"B").expect("role");
    s.write_all(&(total as u64).to_le_bytes()).expect("size");
    let out = s.try_clone().expect("clone");
    let (p, st) = (paused.clone(), stalled.clone());
    let writer = std::thread::spawn(move || send(out, 1, total, &p, &st));
    let (paused, go) = (paused.clone(), go.clone());
    let reader = std::thread::spawn(move || receive(s, pause_at, &paused, &go));
    (port, writer, reader)
}

/// Lets the paused transfers go on and checks that every byte arrived in
/// order both ways (`total` each way per transfer, two transfers, one
/// upload each at the backend), and that each idle connection still echoes.
pub(super) fn every_byte_arrives(
    go: &AtomicBool,
    clients: Vec<Transfer>,
    backend_got: &std::sync::mpsc::Receiver<(usize, Vec<u8>)>,
    idle: &mut [TcpStream],
    total: usize,
) {
    go.store(true, Ordering::SeqCst);
    let (downstream, upstream) = (expected(2, total), expected(1, total));
    for (port, writer, reader) in clients {
        writer
            .join()
            .expect("client writer")
            .unwrap_or_else(|e| panic!("sending through {port}: {e}"));
        let (n, hash) = reader.join().expect("client reader");
        assert_eq!(n, total, "bytes to the client through {port}");
        assert_eq!(hash, downstream, "the client's bytes through {port}");
    }
    for _ in 0..2 {
        let (n, hash) = backend_got
            .recv_timeout(PATIENCE)
            .expect("the backend finishes both transfers");
        assert_eq!(n, total, "bytes to the backend");
        assert_eq!(hash, upstream, "the backend's bytes");
    }
    for (i, s) in idle.iter_mut().enumerate() {
        echo(s, format!("after {i}").as_bytes())
            .unwrap_or_else(|e| panic!("idle connection {i} after the upgrade: {e}"));
    }
}

/// A client of `port` with [`small_window`].
pub(super) fn bulk_client(port: u16) -> TcpStream {
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    small_window(&s);
    s.connect(&local(port).into()).expect("connect");
    s.into()
}

/// One echo round trip on a unix client.
pub(super) fn unix_echo(
    s: &mut std::os::unix::net::UnixStream,
    what: &[u8],
) -> std::io::Result<()> {
    s.write_all(what)?;
    let mut b = vec![0u8; what.len()];
    s.read_exact(&mut b)?;
    assert_eq!(b, what, "echoed in order");
    Ok(())
}

/// One echo round trip on `s`.
pub(super) fn echo(s: &mut TcpStream, what: &[u8]) -> std::io::Result<()> {
    s.write_all(what)?;
    let mut b = vec![0u8; what.len()];
    s.read_exact(&mut b)?;
    assert_eq!(b, what, "echoed in order");
    Ok(())
}

#[test]
fn an_upgrade_hands_live_transfers_and_idle_connections_to_the_new_oi() {
    transfers_across_an_upgrade(None);
}

/// A new "oi" that takes the listeners, says ready, receives the live
/// connections and dies without answering: hand-over version 5 in python3.
pub(super) const DIES_HALF_WAY: &str = "#!/usr/bin/env python3
import array, json, os, socket, struct
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect('\\0' + os.environ['OI_HANDOVER'])
def say(kind):
    s.send(b'OIHO' + struct.pack('>HB', 5, kind) + json.dumps({'pid': os.getpid()}).encode())
def until(kind):
    s.settimeout(60)
    while True:
        msg, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(253 * 4))
        for _, _, data in anc:
            for fd in array.array('i', data[:len(data) - len(data) % 4]):
                os.close(fd)
        if msg[6] == kind:
            return
say(1)
until(3)
say(4)
until(7)
os._exit(3)
";

#[test]
fn a_new_oi_that_dies_taking_the_connections_leaves_them_all_with_the_old_one() {
    if !tool_present("python3", "--version", "python3") {
        return;
    }
    transfers_across_an_upgrade(Some(DIES_HALF_WAY));
}

/// Two transfers (64 MiB each way, one copying, one splicing) paused with
/// bytes in oi's buffers and pipes, and six idle connections, across an
/// upgrade to the same oi (`fake: None`: the new oi takes every one and
/// the old exits at once) or to `fake`, a script that dies half-way (every
/// connection resumes in the old oi, the upgrade fails and the old oi
/// serves on). Either way every byte arrives in order and no connection is
/// closed.
fn transfers_across_an_upgrade(fake: Option<&str>) {
    let paused = Arc::new(AtomicUsize::new(0));
    let stalled = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(AtomicBool::new(false));
    let (got, backend_got) = std::sync::mpsc::channel();
    let b = backend(64, paused.clone(), stalled.clone(), go.clone(), got);
    let dir = tempfile::Builder::new()
        .prefix("oi-upgl")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let (copy, splice) = (free_port(), free_port());
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!(
            "127.0.0.1 {copy} 127.0.0.1 {b} [splice=off]\n127.0.0.1 {splice} 127.0.0.1 {b} [splice=on]\n"
        ),
    )
    .expect("conf");
    let mut old = OiProcess::start_program(&binary, dir.path(), &conf, &[]);

    // Three idle connections per rule, each echoing once before.
    let mut idle = Vec::new();
    for port in [copy, splice] {
        for i in 0..3u8 {
            let mut s = connect(local(port));
            s.write_all(b"E").expect("role");
            echo(&mut s, &[b'a' + i; 5]).unwrap_or_else(|e| old.fail(&format!("echo: {e}")));
            idle.push(s);
        }
    }
    // A transfer each way per rule; both readers stop at 1 MiB, so oi's
    // buffers and pipes fill with bytes in flight.
    let mut clients = Vec::new();
    for port in [copy, splice] {
        clients.push(start_transfer(
            port, TOTAL, PAUSE_AT, &paused, &stalled, &go,
        ));
    }
    wait_until("both ends of both transfers are paused mid-way", || {
        paused.load(Ordering::SeqCst) == 4
    });
    wait_until("every writer is stalled or done", || {
        stalled.load(Ordering::SeqCst) == 4
    });

    let new = match fake {
        None => Some(hand_all_over(&mut old, &binary)),
        Some(script) => {
            put_script(&binary, script);
            old.signal(rustix::process::Signal::USR2);
            wait_until("the old oi says the upgrade failed", || {
                let tail = old.stderr_tail();
                tail.contains("connections not handed over")
                    && tail.contains("8 connection(s) the new oi did not take stay here")
                    && tail.contains("upgrade failed")
            });
            assert!(
                old.stderr_tail()
                    .contains("exited (exit status: 3) after saying ready"),
                "{}",
                old.stderr_tail()
            );
            None
        }
    };

    // Every byte arrives, in order.
    every_byte_arrives(&go, clients, &backend_got, &mut idle, TOTAL);
    match new {
        Some(new) => assert!(!new.exited(), "the new oi serves on"),
        None => {
            // The upgrade failed: the old oi serves everything on, new
            // connections included, after its last old one ended too.
            drop(idle);
            for port in [copy, splice] {
                let mut s = connect(local(port));
                s.write_all(b"E").expect("role");
                echo(&mut s, b"still").unwrap_or_else(|e| old.fail(&format!("echo: {e}")));
            }
            assert!(
                old.exited_within(std::time::Duration::ZERO).is_none(),
                "the old oi serves on"
            );
            let (status, stderr) = old.stop();
            assert!(status.success(), "{status}: {stderr}");
        }
    }
}

#[test]
fn a_connection_whose_rule_the_new_oi_lacks_stays_with_the_old_one_and_unix_clients_go_over() {
    let b = echo_backend("127.0.0.1:0").port();
    let dir = tempfile::Builder::new()
        .prefix("oi-upgk")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let (kept, gone) = (free_port(), free_port());
    let conf = dir.path().join("oi.conf");
    let sock = dir.path().join("in.sock");
    // A TCP rule and a unix listener the new oi keeps, a TCP rule it drops.
    let kept_line = format!(
        "127.0.0.1 {kept} 127.0.0.1 {b}\nunix:{} 127.0.0.1 {b}\n",
        sock.display()
    );
    std::fs::write(
        &conf,
        format!("{kept_line}127.0.0.1 {gone} 127.0.0.1 {b}\n"),
    )
    .expect("conf");
    let mut old = OiProcess::start_program(&binary, dir.path(), &conf, &[]);
    let mut on_kept = connect(local(kept));
    let mut on_gone = connect(local(gone));
    echo(&mut on_kept, b"one").unwrap_or_else(|e| old.fail(&format!("echo: {e}")));
    echo(&mut on_gone, b"two").unwrap_or_else(|e| old.fail(&format!("echo: {e}")));
    let mut on_unix = std::os::unix::net::UnixStream::connect(&sock).expect("unix client");
    on_unix.set_read_timeout(Some(PATIENCE)).expect("timeout");
    unix_echo(&mut on_unix, b"unix").unwrap_or_else(|e| old.fail(&format!("unix echo: {e}")));

    // The new oi reads a configuration without the second rule.
    std::fs::write(&conf, kept_line).expect("conf");
    let new = signal_upgrade(&mut old, &binary);
    wait_until(
        "the old oi says what it handed over and what it keeps",
        || {
            let tail = old.stderr_tail();
            tail.contains("handed 2 live connection(s)")
                && tail.contains("1 connection(s) the new oi did not take stay here")
        },
    );
    assert!(
        old.stderr_tail().contains("no TCP rule listens on"),
        "the new oi says why it left one"
    );
    // All still echo: two through the new oi, one through the old.
    echo(&mut on_kept, b"three").unwrap_or_else(|e| old.fail(&format!("kept: {e}")));
    unix_echo(&mut on_unix, b"unix2").unwrap_or_else(|e| old.fail(&format!("unix: {e}")));
    echo(&mut on_gone, b"four").unwrap_or_else(|e| old.fail(&format!("left: {e}")));
    assert!(
        old.exited_within(std::time::Duration::ZERO).is_none(),
        "the old oi serves the connection it kept"
    );
    drop(on_gone);
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after its last connection"));
    assert!(status.success(), "{status}");
    echo(&mut on_kept, b"five").unwrap_or_else(|e| panic!("kept, after the old oi exited: {e}"));
    unix_echo(&mut on_unix, b"unix3")
        .unwrap_or_else(|e| panic!("unix, after the old oi exited: {e}"));
    assert!(!new.exited(), "the new oi serves on");
}

/// Upgrades `old` to the same oi; waits until it has handed all 8
/// connections over, with bytes in flight, and exited.
fn hand_all_over(old: &mut OiProcess, binary: &Path) -> Adopted {
    let new = signal_upgrade(old, binary);
    wait_until("the old oi says it handed every connection over", || {
        old.stderr_tail().contains("handed 8 live connection(s)")
    });
    // The old oi exits while the transfers are still paused: it does not
    // wait for connections it no longer serves.
    let status = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after handing its connections over"));
    assert!(status.success(), "{status}");
    assert!(!new.exited(), "the new oi serves on");
    // The paused transfers had bytes in oi's buffers and pipes: they came along.
    wait_until("the new oi says what it took over", || {
        old.stderr_tail()
            .contains("took over 8 of 8 live connection(s)")
    });
    let tail = old.stderr_tail();
    let carried: u64 = tail
        .split("took over 8 of 8 live connection(s), with ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| old.fail("the new oi says what it took over"));
    assert!(carried > 0, "bytes in flight were handed over");
    eprintln!("{carried} bytes in flight were handed over");
    new
}
