//! The rinetd log file: both formats, byte for byte apart from time and ports.

use crate::common::*;
use oxidinetd::Settings;
use oxidinetd::{Format, LogHandle};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};

/// Runs one request (10 bytes up, 3 KiB down, client closes first) and one refused backend.
fn traffic(format: Format) -> (Vec<String>, u16, u16, u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rinetd.log");
    let log = LogHandle::start().expect("log thread");
    log.reopen(Some(path.clone()), format).expect("open log");

    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = l.accept() {
            let mut req = [0u8; 10];
            let _ = c.read_exact(&mut req);
            let _ = c.write_all(&[b'x'; 3072]);
            let mut rest = Vec::new();
            let _ = c.read_to_end(&mut rest);
        }
    });
    let refused = local(free_port());
    let srv = start(
        vec![tcp_rule(backend), tcp_rule(refused)],
        Settings::default(),
        log,
    );
    let mut c = connect(srv.addrs[0]);
    c.write_all(b"0123456789").expect("send");
    let mut reply = [0u8; 3072];
    c.read_exact(&mut reply).expect("reply");
    c.shutdown(Shutdown::Both).expect("close");
    drop(c);
    let lines = wait_lines(&path, 2);
    assert_eq!(lines.len(), 2, "{lines:?}");

    let mut c = connect(srv.addrs[1]);
    let mut buf = Vec::new();
    let _ = c.read_to_end(&mut buf);
    let lines = wait_lines(&path, 4);
    (
        lines,
        srv.addrs[0].port(),
        srv.addrs[1].port(),
        backend.port(),
    )
}

#[test]
fn tab_format_lines() {
    let (lines, p1, p2, backend) = traffic(Format::Tab);
    let refused_port = lines[3].split('\t').nth(5).unwrap_or("").to_string();
    let fields: Vec<Vec<&str>> = lines.iter().map(|l| l.split('\t').collect()).collect();
    for f in &fields {
        assert_eq!(f.len(), 9);
        // "22/Nov/2026:07:34:43 ": rinetd's date with its trailing space.
        assert_eq!(f[0].len(), 21, "{f:?}");
        assert!(f[0].ends_with(' '));
    }
    let rest = |i: usize| fields[i][1..].join("\t");
    assert_eq!(
        rest(0),
        format!("127.0.0.1\t127.0.0.1\t{p1}\t127.0.0.1\t{backend}\t0\t0\topened")
    );
    assert_eq!(
        rest(1),
        format!("127.0.0.1\t127.0.0.1\t{p1}\t127.0.0.1\t{backend}\t10\t3072\tdone-remote-closed")
    );
    assert_eq!(
        rest(2),
        format!("127.0.0.1\t127.0.0.1\t{p2}\t127.0.0.1\t{refused_port}\t0\t0\topened")
    );
    assert_eq!(
        rest(3),
        format!("127.0.0.1\t127.0.0.1\t{p2}\t127.0.0.1\t{refused_port}\t0\t0\tdone-local-closed")
    );
}

#[test]
fn common_format_lines() {
    let (lines, p1, _p2, backend) = traffic(Format::Common);
    let strip_date = |l: &str| -> String {
        let (head, rest) = l.split_once('[').unwrap_or((l, ""));
        let (date, tail) = rest.split_once(']').unwrap_or(("", rest));
        assert_eq!(date.len(), 27, "date {date:?}");
        assert_eq!(
            &date[20..22],
            "  ",
            "rinetd's date string keeps its space before the zone"
        );
        format!("{head}[DATE]{tail}")
    };
    assert_eq!(
        strip_date(&lines[0]),
        format!(
            "127.0.0.1 - - [DATE] \"GET /rinetd-services/127.0.0.1/{p1}/127.0.0.1/{backend}/opened HTTP/1.0\" 200 0 - - - 0"
        )
    );
    assert_eq!(
        strip_date(&lines[1]),
        format!(
            "127.0.0.1 - - [DATE] \"GET /rinetd-services/127.0.0.1/{p1}/127.0.0.1/{backend}/done-remote-closed HTTP/1.0\" 200 3072 - - - 10"
        )
    );
    assert!(
        lines[3].contains("/done-local-closed HTTP/1.0\" 200 0 - - - 0"),
        "{}",
        lines[3]
    );
}

#[test]
fn a_fifo_nobody_reads_loses_lines_counted_and_the_queue_stays_bounded() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("log.fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    // A reader that never reads: the FIFO fills (64 KiB) and stays full.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .expect("reader");
    let log = LogHandle::start().expect("log thread");
    log.reopen(Some(fifo), Format::Tab).expect("open the FIFO");
    let rule = std::sync::Arc::new(oxidinetd::RuleNames {
        bind_host: "127.0.0.1".into(),
        bind_port: 1,
        connect_host: "127.0.0.1".into(),
        connect_port: 2,
    });
    let mut peak = 0;
    for _ in 0..100_000 {
        log.log(oxidinetd::LogEvent {
            time: std::time::SystemTime::now(),
            client: oxidinetd::Client::Ip("127.0.0.1".parse().expect("literal")),
            rule: rule.clone(),
            from_client: 0,
            to_client: 0,
            event: oxidinetd::Event::Opened,
            server_name: None,
            tls_subject: None,
            flow: None,
        });
        peak = peak.max(log.queued());
    }
    assert!(peak <= oxidinetd::LOG_QUEUE_LINES, "{peak} lines queued");
    // The writer never blocks on the full FIFO, so flushing completes.
    assert!(log.flush(), "the writer is not stuck");
    assert!(
        log.dropped() > 0,
        "lines the FIFO could not take are counted"
    );
}

/// One echo round trip of `data` through oi at `port`, the client closing first.
fn round_trip(port: u16, data: &[u8]) {
    let mut c = connect(local(port));
    c.write_all(data).expect("send");
    let mut back = vec![0u8; data.len()];
    c.read_exact(&mut back).expect("echo");
    c.shutdown(Shutdown::Both).expect("close");
}

/// `oi connections --json` for the oi of `conf`: its rows.
fn connections(conf: &std::path::Path) -> Vec<serde_json::Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["connections", "--json", "-c"])
        .arg(conf)
        .output()
        .expect("oi connections");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    rows.as_array().cloned().unwrap_or_default()
}

/// Each line of `text` as a JSON object.
fn json_lines(text: &[String]) -> Vec<serde_json::Value> {
    text.iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn json_lines_name_the_connection_as_oi_connections_does_and_sigusr1_starts_a_new_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = echo_backend("127.0.0.1:0");
    let port = free_port();
    let log = dir.path().join("conn.log");
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "controlsocket {}\nlogfile {}\nlogformat json\n127.0.0.1 {port} 127.0.0.1 {}\n",
            dir.path().join("oi.sock").display(),
            log.display(),
            echo.port()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    // An open connection: its id in `oi connections`.
    let mut c = connect(local(port));
    c.write_all(b"0123456789").expect("send");
    let mut back = [0u8; 10];
    c.read_exact(&mut back).expect("echo");
    let rows = connections(&conf);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let id = rows[0]["id"].as_u64().expect("an id");
    c.shutdown(Shutdown::Both).expect("close");
    drop(c);
    let lines = json_lines(&wait_lines(&log, 2));
    assert_eq!(lines.len(), 2, "{lines:?}");
    let rule = format!("127.0.0.1:{port}/tcp");
    for (line, event) in lines.iter().zip(["opened", "done-remote-closed"]) {
        assert_eq!(line["event"], event, "{line}");
        assert_eq!(line["id"], id, "{line}");
        assert_eq!(line["rule"], rule.as_str(), "{line}");
        assert_eq!(line["client"], "127.0.0.1", "{line}");
        assert_eq!(line["bind"], format!("127.0.0.1:{port}").as_str());
        assert!(line["server_name"].is_null(), "{line}");
        assert!(
            line["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{line}"
        );
        assert!(line["duration_ms"].is_u64(), "{line}");
    }
    let done = &lines[1];
    assert_eq!(done["backend"], echo.to_string().as_str(), "{done}");
    assert_eq!(
        (&done["bytes_from_client"], &done["bytes_to_client"]),
        (&10.into(), &10.into()),
        "{done}"
    );

    // logrotate's `create`: the file moved away, then SIGUSR1.
    let rotated = dir.path().join("conn.log.1");
    std::fs::rename(&log, &rotated).expect("rename");
    oi.signal(rustix::process::Signal::USR1);
    // The writer makes the file at the path again when it reopens.
    wait_until("SIGUSR1 makes the log file again", || log.exists());
    round_trip(port, b"after");
    let new = json_lines(&wait_lines(&log, 2));
    assert_eq!(new.len(), 2, "{new:?}");
    assert!(
        new.iter().all(|l| l["id"].as_u64().is_some_and(|n| n > id)),
        "{new:?}"
    );
    assert_eq!(new[1]["bytes_from_client"], 5, "{:?}", new[1]);
    let old = std::fs::read_to_string(&rotated).expect("the rotated file");
    assert_eq!(
        old.lines().count(),
        2,
        "the moved file keeps the old lines only: {old}"
    );
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("log file reopened"), "{stderr}");
}

#[test]
fn sigusr1_follows_no_symlink_and_without_a_log_file_does_nothing_harmful() {
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = echo_backend("127.0.0.1:0");
    let port = free_port();
    let log = dir.path().join("conn.log");
    let conf = dir.path().join("oi.conf");
    let rule = format!("127.0.0.1 {port} 127.0.0.1 {}\n", echo.port());
    write_atomic(&conf, &format!("logfile {}\n{rule}", log.display()));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    round_trip(port, b"one");
    wait_lines(&log, 2);
    // Someone who may write to the log directory puts a link there.
    let rotated = dir.path().join("conn.log.1");
    let target = dir.path().join("not-a-log");
    std::fs::write(&target, "").expect("target");
    std::fs::rename(&log, &rotated).expect("rename");
    std::os::unix::fs::symlink(&target, &log).expect("symlink");
    oi.signal(rustix::process::Signal::USR1);
    wait_until("the refusal is reported", || {
        oi.stderr_tail().contains("cannot reopen the log file")
    });
    // Lines go on to the file open before; the link's target gets none.
    round_trip(port, b"two");
    let kept = wait_lines(&rotated, 4);
    assert_eq!(kept.len(), 4, "{kept:?}");
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "");
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{status}: {stderr}");

    // No log file configured: SIGUSR1 only logs the status line.
    write_atomic(&conf, &rule);
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    oi.signal(rustix::process::Signal::USR1);
    wait_until("the status line", || oi.stderr_tail().contains("status:"));
    round_trip(port, b"three");
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        !stderr.contains("reopen") && !stderr.contains(" ERROR ") && !stderr.contains(" WARN "),
        "{stderr}"
    );
}
