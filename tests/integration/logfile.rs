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
