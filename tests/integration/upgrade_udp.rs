//! `oi upgrade` hands UDP associations and TCP→UDP streams to the new
//! oi: each keeps its connected socket, so the backend sees the
//! same source port before and after, and the client its replies from the
//! same listening address, and every counter carries on; if the new oi
//! dies half-way both stay with the old one, which serves on; if it lacks
//! their rules, the old one serves them to their end.

use super::upgrade::{put_binary, put_script, signal_upgrade};
use super::upgrade_live::DIES_HALF_WAY;
use crate::common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::mpsc::Receiver;

/// What one test runs: oi with a UDP rule and a TCP→UDP rule to one UDP
/// echo backend, which reports each datagram's source.
struct Udp {
    /// The test's directory.
    dir: tempfile::TempDir,
    /// The path oi runs from (an upgrade reads it again).
    binary: std::path::PathBuf,
    /// The old oi.
    old: OiProcess,
    /// The UDP listener.
    udp: SocketAddr,
    /// The association's client.
    client: UdpSocket,
    /// The TCP→UDP stream's client.
    stream: TcpStream,
    /// Where the backend says which source each datagram came from.
    seen: Receiver<(SocketAddr, usize)>,
    /// The backend's source for the association, and for the stream.
    sources: (SocketAddr, SocketAddr),
    /// The control socket (handed over with the rest).
    control: std::path::PathBuf,
}

/// Starts oi and opens one association and one TCP→UDP stream, each
/// echoing once; `udp_options` goes after the UDP rule.
fn setup(udp_options: &str) -> Udp {
    let (backend, seen) = udp_echo_backend("127.0.0.1:0");
    let dir = tempfile::Builder::new()
        .prefix("oi-upgu")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let (u, t) = (free_udp_port(), free_port());
    let b = backend.port();
    let conf = dir.path().join("oi.conf");
    let control = dir.path().join("control.sock");
    std::fs::write(
        &conf,
        format!(
            "controlsocket {}\n127.0.0.1 {u}/udp 127.0.0.1 {b}/udp {udp_options}\n127.0.0.1 {t} 127.0.0.1 {b}/udp\n",
            control.display()
        ),
    )
    .expect("conf");
    let old = OiProcess::start_program(&binary, dir.path(), &conf, &[]);
    let udp = local(u);
    let client = udp_client(udp);
    assert_eq!(udp_roundtrip(&client, udp, b"one"), b"one");
    let (assoc_source, _) = seen.recv_timeout(PATIENCE).expect("the backend saw it");
    let mut stream = connect(local(t));
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    stream_echo(&mut stream, b"tcp-one").unwrap_or_else(|e| old.fail(&format!("tcp->udp: {e}")));
    let (stream_source, _) = seen.recv_timeout(PATIENCE).expect("the backend saw it");
    Udp {
        dir,
        binary,
        old,
        udp,
        client,
        stream,
        seen,
        sources: (assoc_source, stream_source),
        control,
    }
}

/// `oi status --json` from whichever oi serves `control`.
pub(super) fn status_json(control: &Path) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["status", "--json", "--socket"])
        .arg(control)
        .output()
        .expect("oi status");
    assert!(out.status.success(), "oi status: {out:?}");
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// Every counter oi keeps, per rule and for the process, from a status
/// document (`oi` objects), without the counts of what is open now.
pub(super) fn counters(status: &serde_json::Value) -> Vec<(String, u64)> {
    let mut all = Vec::new();
    let mut add = |at: &str, v: &serde_json::Value| {
        for (k, n) in v.as_object().expect("counters") {
            if !k.starts_with("connections_active") {
                all.push((format!("{at} {k}"), n.as_u64().expect("a count")));
            }
        }
    };
    add("process", &status["oi"]["totals"]);
    for r in status["rules"].as_array().expect("rules") {
        add(r["name"].as_str().expect("name"), &r["oi"]);
    }
    all
}

/// One round trip on a TCP→UDP stream (each write is one datagram).
pub(super) fn stream_echo(s: &mut TcpStream, what: &[u8]) -> std::io::Result<()> {
    s.write_all(what)?;
    let mut b = vec![0u8; what.len()];
    s.read_exact(&mut b)?;
    assert_eq!(b, what, "echoed");
    Ok(())
}

impl Udp {
    /// A round trip on each, checking the backend sees the sources it saw
    /// before: the same associations, not new ones.
    fn both_echo_from_the_same_sources(&mut self, round: &str) {
        let what = format!("udp {round}");
        assert_eq!(
            udp_roundtrip(&self.client, self.udp, what.as_bytes()),
            what.as_bytes()
        );
        let (from, _) = self
            .seen
            .recv_timeout(PATIENCE)
            .expect("the backend saw it");
        assert_eq!(
            from, self.sources.0,
            "the association's backend port ({round})"
        );
        let what = format!("tcp {round}");
        stream_echo(&mut self.stream, what.as_bytes())
            .unwrap_or_else(|e| self.old.fail(&format!("tcp->udp {round}: {e}")));
        let (from, _) = self
            .seen
            .recv_timeout(PATIENCE)
            .expect("the backend saw it");
        assert_eq!(
            from, self.sources.1,
            "the TCP->UDP stream's backend port ({round})"
        );
    }
}

#[test]
fn an_upgrade_hands_udp_associations_and_tcp_to_udp_streams_to_the_new_oi() {
    let mut t = setup("");
    // Old enough that an uptime starting again would show.
    wait_until("the old oi has served a second", || {
        status_json(&t.control)["uptime_seconds"].as_u64() >= Some(1)
    });
    let status_before = status_json(&t.control);
    let before = counters(&status_before);
    let opened = |c: &[(String, u64)], key: &str| {
        c.iter()
            .find(|(k, _)| k == &format!("process {key}"))
            .map(|(_, n)| *n)
    };
    assert_eq!(
        opened(&before, "connections_total_udp"),
        Some(1),
        "{before:?}"
    );
    assert_eq!(
        opened(&before, "connections_total_tcp"),
        Some(1),
        "{before:?}"
    );
    let new = signal_upgrade(&mut t.old, &t.binary);
    wait_until("the old oi says it handed both over", || {
        t.old.stderr_tail().contains("handed 2 live connection(s)")
    });
    // Nothing stays with the old oi: it exits at once.
    let status = t.old.exited_within(PATIENCE).unwrap_or_else(|| {
        t.old
            .fail("the old oi did not exit after handing everything over")
    });
    assert!(status.success(), "{status}");
    wait_until("the new oi says it took both", || {
        t.old
            .stderr_tail()
            .contains("took over 2 of 2 live connection(s)")
    });
    wait_until("the new oi says the counters carry on", || {
        t.old
            .stderr_tail()
            .contains("the counters of 2 rule(s) carry on")
    });
    // Nothing an operator watches starts again: every counter of the new
    // oi is at least where the old one's was.
    let status_after = status_json(&t.control);
    let after = counters(&status_after);
    assert_eq!(after.len(), before.len(), "the same counters: {after:?}");
    // Nor do the uptime and the time the statistics count from.
    let uptime = |s: &serde_json::Value| s["uptime_seconds"].as_u64().expect("uptime");
    assert!(
        uptime(&status_after) >= uptime(&status_before),
        "uptime {} after the upgrade, {} before",
        uptime(&status_after),
        uptime(&status_before)
    );
    assert_eq!(
        status_after["stats_since_reload"], status_before["stats_since_reload"],
        "stats_since_reload carries on"
    );
    for ((k, was), (k2, is)) in before.iter().zip(&after) {
        assert_eq!(k, k2, "the same counters in the same order");
        assert!(is >= was, "{k}: {was} before the upgrade, {is} after");
    }
    t.both_echo_from_the_same_sources("after");
    t.both_echo_from_the_same_sources("again");
    let later = counters(&status_json(&t.control));
    let from = |c: &[(String, u64)]| {
        c.iter()
            .find(|(k, _)| k == "process bytes_from_clients")
            .map(|(_, n)| *n)
            .expect("bytes_from_clients")
    };
    assert!(
        from(&later) > from(&before),
        "bytes count on from where they were: {} then {}",
        from(&before),
        from(&later)
    );
    assert!(!new.exited(), "the new oi serves on");
    drop(t.dir);
}

#[test]
fn a_new_oi_that_dies_taking_them_leaves_both_with_the_old_one() {
    if !tool_present("python3", "--version", "python3") {
        return;
    }
    let mut t = setup("");
    put_script(&t.binary, DIES_HALF_WAY);
    t.old.signal(rustix::process::Signal::USR2);
    wait_until("the old oi says the upgrade failed", || {
        let tail = t.old.stderr_tail();
        tail.contains("connections not handed over")
            && tail.contains("2 connection(s) the new oi did not take stay here")
            && tail.contains("upgrade failed")
    });
    // Both echo through the old oi, from the sources they had: the
    // association stays in its listener's map, which reads on.
    t.both_echo_from_the_same_sources("after");
    t.both_echo_from_the_same_sources("again");
    let other = udp_client(t.udp);
    assert_eq!(
        udp_roundtrip(&other, t.udp, b"new"),
        b"new",
        "a new client: {}",
        t.old.stderr_tail()
    );
    assert!(
        t.old.exited_within(std::time::Duration::ZERO).is_none(),
        "the old oi serves on"
    );
    let (status, stderr) = t.old.stop();
    assert!(status.success(), "{status}: {stderr}");
}

#[test]
fn flows_whose_rules_the_new_oi_lacks_are_served_on_by_the_old_one_until_they_end() {
    // The association ends 8 s after its last datagram, so the old oi
    // exits within the test's patience once the stream is closed.
    let mut t = setup("[timeout=8]");
    // The new oi reads a configuration with neither rule.
    let b = echo_backend("127.0.0.1:0").port();
    std::fs::write(
        t.dir.path().join("oi.conf"),
        format!(
            "controlsocket {}\n127.0.0.1 {} 127.0.0.1 {b}\n",
            t.control.display(),
            free_port()
        ),
    )
    .expect("conf");
    let new = signal_upgrade(&mut t.old, &t.binary);
    // Both echo through the old oi, from the sources they had: the
    // association is served on after the old oi closed its listeners.
    wait_until("the old oi says it serves the association on", || {
        t.old
            .stderr_tail()
            .contains("1 UDP association(s) of 127.0.0.1:")
    });
    t.both_echo_from_the_same_sources("after");
    assert!(
        t.old.exited_within(std::time::Duration::ZERO).is_none(),
        "the old oi serves what it kept"
    );
    drop(t.stream);
    let status = t.old.exited_within(PATIENCE).unwrap_or_else(|| {
        t.old
            .fail("the old oi did not exit after its last connection")
    });
    assert!(status.success(), "{status}");
    assert!(!new.exited(), "the new oi serves on");
}
