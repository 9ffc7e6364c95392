//! `oi upgrade` is reported successful only once the new oi's service loop
//! has answered the old one's health question: until then the old oi
//! accepts on every listener, and a new oi that dies after saying ready
//! (or never answers) leaves the old one serving everything, with `oi
//! upgrade` failing and saying why. Once the new oi has answered, the old
//! one stops answering the control socket and the metrics port, and what
//! it counts while it drains joins the new oi's counters when it exits.

use super::upgrade::{oi_upgrade, put_script, setup, status, unix_ping, Adopted};
use super::upgrade_udp::{counters, status_json};
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A new "oi" in python3 speaking hand-over version 5: it says hello, takes
/// the sockets (closing them), says ready, then runs `then` (python, with
/// `say(kind, body)` and `until(kind)`, which returns the ids of the
/// connections offered meanwhile and closes their descriptors).
fn fake_new_oi(then: &str) -> String {
    format!(
        "#!/usr/bin/env python3
import array, json, os, socket, struct, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect('\\0' + os.environ['OI_HANDOVER'])
def say(kind, body):
    s.send(b'OIHO' + struct.pack('>HB', 5, kind) + json.dumps(body).encode())
def until(kind):
    ids = []
    s.settimeout(60)
    while True:
        msg, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(253 * 4))
        for _, _, data in anc:
            for fd in array.array('i', data[:len(data) - len(data) % 4]):
                os.close(fd)
        if not msg:
            os._exit(5)
        if msg[6] == 6:
            ids += [c['id'] for c in json.loads(msg[7:])['connections']]
        if msg[6] == kind:
            return ids
say(1, {{'pid': os.getpid()}})
until(3)
say(4, {{'pid': os.getpid()}})
{then}
"
    )
}

/// Says ready, then exits at once: the shape of `DIES_HALF_WAY`, earlier.
const DIES_AFTER_READY: &str = "os._exit(0)";

/// Takes every live connection (confirms them all), then exits when asked
/// the health question.
const DIES_AFTER_ADOPTING: &str = "ids = until(7)
say(8, {'ids': ids})
until(10)
os._exit(4)";

/// `GET path` from the metrics endpoint at 127.0.0.1:`port`; the whole answer.
fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(local(port)).expect("connect to metrics");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .expect("request");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// One echo round trip on `s`.
fn echo(s: &mut TcpStream, what: &[u8]) -> std::io::Result<()> {
    s.write_all(what)?;
    let mut b = vec![0u8; what.len()];
    s.read_exact(&mut b)?;
    assert_eq!(b, what, "echoed in order");
    Ok(())
}

/// The pid in `oi upgrade`'s answer (`upgraded: oi pid N ...`).
fn upgraded_pid(out: &std::process::Output) -> i32 {
    let said = String::from_utf8_lossy(&out.stdout);
    said.strip_prefix("upgraded: oi pid ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "not an upgrade's answer: {said:?} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

#[test]
fn a_new_oi_that_dies_after_ready_fails_the_upgrade_and_the_old_one_serves_everything() {
    if !tool_present("python3", "--version", "python3") {
        return;
    }
    let s = setup();
    let metrics = free_port();
    let m = format!("127.0.0.1:{metrics}");
    let mut old = OiProcess::start_program(&s.binary, s.dir.path(), &s.conf, &["--metrics", &m]);
    let mut held = connect(local(s.port));
    echo(&mut held, b"held").unwrap_or_else(|e| old.fail(&format!("echo: {e}")));
    let fake = s.dir.path().join("fake-oi");
    put_script(&fake, &fake_new_oi(DIES_AFTER_READY));
    let out = oi_upgrade(&s.control, Some(&fake));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "oi upgrade must fail: {err}");
    assert!(
        err.contains(
            "exited (exit status: 0) after saying ready, before answering the health question"
        ) && err.contains("this oi keeps serving"),
        "oi upgrade says why: {err}"
    );
    // At once, with no wait: every listener, the held connection, the
    // control socket and the metrics endpoint are the old oi's still.
    for _ in 0..20 {
        ping(s.port).unwrap_or_else(|e| old.fail(&format!("the old oi serves TCP: {e}")));
    }
    unix_ping(&s.sock).unwrap_or_else(|e| old.fail(&format!("the old oi serves unix: {e}")));
    echo(&mut held, b"kept").unwrap_or_else(|e| old.fail(&format!("the held connection: {e}")));
    let st = status(&s.control);
    assert!(st.status.success(), "the control socket answers: {st:?}");
    assert!(
        get(metrics, "/metrics").starts_with("HTTP/1.1 200"),
        "the metrics endpoint answers"
    );
    assert!(
        old.exited_within(Duration::ZERO).is_none(),
        "the old oi serves on"
    );

    // A good upgrade after it succeeds, and takes the held connection.
    let out = oi_upgrade(&s.control, None);
    assert!(
        out.status.success(),
        "the second upgrade: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        old.stderr_tail()
    );
    let new = Adopted(upgraded_pid(&out));
    let status_old = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after handing everything over"));
    assert!(status_old.success(), "{status_old}");
    echo(&mut held, b"more").unwrap_or_else(|e| old.fail(&format!("held, in the new oi: {e}")));
    ping(s.port).unwrap_or_else(|e| old.fail(&format!("the new oi serves TCP: {e}")));
    unix_ping(&s.sock).unwrap_or_else(|e| old.fail(&format!("the new oi serves unix: {e}")));
    assert!(!new.exited(), "the new oi serves on");
}

#[test]
fn a_new_oi_that_never_answers_the_health_question_is_killed_within_the_bound() {
    if !tool_present("python3", "--version", "python3") {
        return;
    }
    let s = setup();
    let old = OiProcess::start_program(&s.binary, s.dir.path(), &s.conf, &[]);
    let pidfile = s.dir.path().join("fake.pid");
    // Takes the connections, then stays silent where the answer is due.
    let then = format!(
        "open('{}', 'w').write(str(os.getpid()))\nuntil(7)\nsay(8, {{'ids': []}})\nuntil(10)\ntime.sleep(600)",
        pidfile.display()
    );
    let fake = s.dir.path().join("fake-oi");
    put_script(&fake, &fake_new_oi(&then));
    // Connections are served all along the wait.
    let port = s.port;
    let clients = std::thread::spawn(move || {
        let started = Instant::now();
        let (mut ok, mut failed) = (0u32, Vec::new());
        // Bounded: past the health question's 10 s and some.
        while started.elapsed() < Duration::from_secs(12) {
            match ping(port) {
                Ok(()) => ok += 1,
                Err(e) => failed.push(e.to_string()),
            }
        }
        (ok, failed)
    });
    let started = Instant::now();
    let out = oi_upgrade(&s.control, Some(&fake));
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "oi upgrade must fail: {err}");
    assert!(
        err.contains("did not answer the health question within 10 s"),
        "oi upgrade says why: {err}"
    );
    // The bound: 10 s (HEALTH_TIMEOUT) after the connections, which here
    // take milliseconds; the rest is a loaded machine's slack.
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(10) + PATIENCE,
        "answered after {took:?}"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| old.fail("the fake wrote no pid"));
    wait_until("the silent new oi is killed", || {
        Adopted(pid).exited_quietly()
    });
    let (ok, failed) = clients.join().expect("clients");
    assert!(
        failed.is_empty() && ok > 0,
        "{} of {} connections failed while the health question waited, first: {:?}\n{}",
        failed.len(),
        failed.len() + ok as usize,
        failed.first(),
        old.stderr_tail()
    );
    unix_ping(&s.sock).unwrap_or_else(|e| old.fail(&format!("the old oi serves unix: {e}")));
    assert!(status(&s.control).status.success(), "the old oi answers");
    let (st, stderr) = old.stop();
    assert!(st.success(), "{st}: {stderr}");
}

impl Adopted {
    /// Whether it has exited, without the SIGTERM a drop sends.
    fn exited_quietly(self) -> bool {
        let gone = self.exited();
        std::mem::forget(self);
        gone
    }
}

#[test]
fn a_udp_listener_whose_associations_a_dying_new_oi_took_reads_again() {
    if !tool_present("python3", "--version", "python3") {
        return;
    }
    let (backend, seen) = udp_echo_backend("127.0.0.1:0");
    let dir = tempfile::Builder::new()
        .prefix("oi-upgh")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let (u, control) = (free_udp_port(), dir.path().join("control.sock"));
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!(
            "controlsocket {}\n127.0.0.1 {u}/udp 127.0.0.1 {}/udp\n",
            control.display(),
            backend.port()
        ),
    )
    .expect("conf");
    let old = OiProcess::start(dir.path(), &conf, &[]);
    let udp = local(u);
    let client = udp_client(udp);
    assert_eq!(udp_roundtrip(&client, udp, b"one"), b"one");
    let (first, _) = seen.recv_timeout(PATIENCE).expect("the backend saw it");
    let fake = dir.path().join("fake-oi");
    put_script(&fake, &fake_new_oi(DIES_AFTER_ADOPTING));
    let out = oi_upgrade(&control, Some(&fake));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success() && err.contains("exited (exit status: 4) after saying ready"),
        "oi upgrade says why: {err}\n{}",
        old.stderr_tail()
    );
    assert!(
        old.stderr_tail().contains("handed 1 live connection(s)"),
        "the fake took the association: {}",
        old.stderr_tail()
    );
    // The association went with the fake; the listener reads again, and
    // the client's next datagram opens a new one here.
    let reply = udp_roundtrip(&client, udp, b"two");
    assert_eq!(reply, b"two", "{}", old.stderr_tail());
    let (again, _) = seen.recv_timeout(PATIENCE).expect("the backend saw it");
    assert_ne!(again, first, "a new association, from another port");
    let (st, stderr) = old.stop();
    assert!(st.success(), "{st}: {stderr}");
}

/// The inodes of the sockets `pid` holds.
fn socket_inodes(pid: u32) -> Vec<String> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(|fd| {
        let target = std::fs::read_link(fd.ok()?.path()).ok()?;
        let t = target.to_string_lossy();
        Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
    })
    .collect()
}

/// The inode of the unix socket bound at `path` and of the TCP socket
/// listening on 127.0.0.1:`port` (`/proc/net/unix`, `/proc/net/tcp`).
fn listening_inodes(path: &Path, port: u16) -> (String, String) {
    let unix = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    let shown = path.display().to_string();
    let control = unix
        .lines()
        .find(|l| l.ends_with(&shown))
        .and_then(|l| l.split_whitespace().nth(6))
        .expect("the control socket is listed")
        .to_string();
    let tcp = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let at = format!("0100007F:{port:04X}");
    let metrics = tcp
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&at.as_str()) && f.get(3) == Some(&"0A"))
        .and_then(|f| f.get(9).map(|s| s.to_string()))
        .expect("the metrics listener is listed");
    (control, metrics)
}

#[test]
fn after_an_upgrade_only_the_new_oi_answers_monitoring_and_gets_the_old_ones_last_counts() {
    let b = echo_backend("127.0.0.1:0").port();
    let dir = tempfile::Builder::new()
        .prefix("oi-upgm")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    super::upgrade::put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let (kept, dropped, metrics) = (free_port(), free_port(), free_port());
    let control = dir.path().join("control.sock");
    let conf = dir.path().join("oi.conf");
    let head = format!(
        "controlsocket {}\nmetrics 127.0.0.1:{metrics}\n127.0.0.1 {kept} 127.0.0.1 {b}\n",
        control.display()
    );
    std::fs::write(&conf, format!("{head}127.0.0.1 {dropped} 127.0.0.1 {b}\n")).expect("conf");
    let ro = dir.path().join("ro.sock");
    let ro_arg = ro.to_str().expect("utf-8");
    let mut old =
        OiProcess::start_program(&binary, dir.path(), &conf, &["--status-socket", ro_arg]);
    // A connection of the rule the new configuration drops: the old oi
    // keeps it, and drains it after the upgrade.
    let mut held = connect(local(dropped));
    echo(&mut held, b"held").unwrap_or_else(|e| old.fail(&format!("echo: {e}")));
    // And one the new oi takes over, with its bytes: counted there, once.
    let mut taken = connect(local(kept));
    echo(&mut taken, &vec![b't'; 100_000]).unwrap_or_else(|e| old.fail(&format!("echo: {e}")));
    std::fs::write(&conf, &head).expect("conf");
    let out = oi_upgrade(&control, None);
    assert!(
        out.status.success(),
        "oi upgrade: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        old.stderr_tail()
    );
    let new = Adopted(upgraded_pid(&out));
    // Only the new oi serves the kept rule; the old one's listeners are
    // closed, so an answer that lists the rule is the new oi's.
    let rule = format!("127.0.0.1:{kept}");
    let mut from_old = Vec::new();
    for i in 0..40 {
        let answers = [
            ("oi status --json", status_json(&control).to_string()),
            ("the status socket", status_json(&ro).to_string()),
            ("/metrics", get(metrics, "/metrics")),
            ("/status.json", get(metrics, "/status.json")),
        ];
        for (what, text) in answers {
            if !text.contains(&rule) {
                from_old.push(format!("{what} #{i}"));
            }
        }
    }
    assert!(
        from_old.is_empty(),
        "{} of 160 answers came from the old oi: {from_old:?}",
        from_old.len()
    );
    // Nor can anything reach it: it holds none of those sockets any more.
    let (control_inode, metrics_inode) = listening_inodes(&control, metrics);
    let (ro_inode, _) = listening_inodes(&ro, metrics);
    let held_by_old = socket_inodes(old.child.id());
    for (what, inode) in [
        ("the control socket", control_inode),
        ("the status socket", ro_inode),
        ("the metrics listener", metrics_inode),
    ] {
        assert!(
            !held_by_old.contains(&inode),
            "the old oi still holds {what}"
        );
    }
    assert!(
        old.exited_within(Duration::ZERO).is_none(),
        "the old oi drains the connection it kept"
    );

    // What the old oi forwards meanwhile joins the new oi's totals when it exits.
    let bytes = |s: &serde_json::Value| {
        counters(s)
            .into_iter()
            .find(|(k, _)| k == "process bytes_from_clients")
            .map(|(_, n)| n)
            .expect("bytes_from_clients")
    };
    let before = bytes(&status_json(&control));
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..4 {
        echo(&mut held, &chunk).unwrap_or_else(|e| old.fail(&format!("drained: {e}")));
    }
    drop(held);
    let st = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit after its last connection"));
    assert!(st.success(), "{st}");
    wait_until("the new oi adds the old one's last counts", || {
        old.stderr_tail()
            .contains("what the previous oi counted while it drained is added here")
    });
    // Exactly the bytes it drained: the connection taken over counts in
    // the new oi alone, the held one's first bytes were carried already.
    let after = bytes(&status_json(&control));
    assert_eq!(
        after,
        before + 4 * 64 * 1024,
        "bytes from clients: {before} before the old oi drained, {after} after"
    );
    echo(&mut taken, b"still").unwrap_or_else(|e| old.fail(&format!("taken over: {e}")));
    // The old oi left the sockets' files to the new one, which answers there.
    assert!(status_json(&ro)["rules"].to_string().contains(&rule));
    assert!(!new.exited(), "the new oi serves on");
}

#[test]
fn an_upgrade_asked_during_another_is_refused_at_once() {
    let s = setup();
    let mut old = OiProcess::start_program(&s.binary, s.dir.path(), &s.conf, &[]);
    // The first upgrade's binary waits at a FIFO before it becomes oi.
    let gate = s.dir.path().join("gate");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &gate,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let wrapper = s.dir.path().join("gated-oi");
    put_script(
        &wrapper,
        &format!(
            "#!/bin/sh\nread go < {}\nexec {} \"$@\"\n",
            gate.display(),
            env!("CARGO_BIN_EXE_oi")
        ),
    );
    let first = {
        let (control, wrapper) = (s.control.clone(), wrapper.clone());
        std::thread::spawn(move || oi_upgrade(&control, Some(&wrapper)))
    };
    wait_until("the first upgrade has started", || {
        old.stderr_tail().contains("upgrade: starting")
    });
    let started = Instant::now();
    let second = oi_upgrade(&s.control, None);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&second.stderr).into_owned();
    assert!(
        !second.status.success() && err.contains("an upgrade is under way"),
        "the second upgrade: {err}"
    );
    assert!(took < PATIENCE, "refused after {took:?}");
    std::fs::write(&gate, "go\n").expect("open the gate");
    let out = first.join().expect("first upgrade");
    assert!(
        out.status.success(),
        "the first upgrade: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        old.stderr_tail()
    );
    let new = Adopted(upgraded_pid(&out));
    let st = old
        .exited_within(PATIENCE)
        .unwrap_or_else(|| old.fail("the old oi did not exit"));
    assert!(st.success(), "{st}");
    ping(s.port).unwrap_or_else(|e| old.fail(&format!("the new oi serves: {e}")));
    assert!(!new.exited(), "the new oi serves on");
}
