//! The log file: formats, the writer, and its bounds.

use super::writer::{whole_lines, Suppressor};
use super::*;
use std::time::Duration;
use std::time::Instant;

fn event(ev: Event) -> LogEvent {
    LogEvent {
        time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        client: crate::net::peer::Client::Ip("127.0.0.2".parse().unwrap()),
        rule: Arc::new(RuleNames {
            bind_host: "0.0.0.0".into(),
            bind_port: 80,
            connect_host: "backend".into(),
            connect_port: 8080,
        }),
        from_client: 12,
        to_client: 345,
        event: ev,
        server_name: None,
        tls_subject: None,
        flow: None,
    }
}

#[test]
fn tab_format_has_nine_fields_and_rinetd_spacing() {
    let mut s = String::new();
    format_line(&event(Event::DoneRemoteClosed), Format::Tab, &mut s);
    let fields: Vec<&str> = s.trim_end_matches('\n').split('\t').collect();
    assert_eq!(fields.len(), 9);
    assert!(
        fields[0].ends_with(' '),
        "date keeps rinetd's trailing space"
    );
    assert_eq!(
        &fields[1..],
        [
            "127.0.0.2",
            "0.0.0.0",
            "80",
            "backend",
            "8080",
            "12",
            "345",
            "done-remote-closed"
        ]
    );
}

#[test]
fn common_format_matches_rinetd() {
    let mut s = String::new();
    format_line(&event(Event::Opened), Format::Common, &mut s);
    let (head, tail) = s.split_once('[').unwrap();
    assert_eq!(head, "127.0.0.2 - - ");
    let (date, rest) = tail.split_once(']').unwrap();
    // "DD/Mon/YYYY:HH:MM:SS  +HHMM": rinetd's date string, its space, then the offset.
    assert_eq!(date.len(), 20 + 2 + 5, "{date:?}");
    assert_eq!(
        rest,
        " \"GET /rinetd-services/0.0.0.0/80/backend/8080/opened HTTP/1.0\" 200 345 - - - 12\n"
    );
}

#[test]
fn failure_events_are_spelled_like_rinetd() {
    assert_eq!(Event::AcceptFailed.as_str(), "accept-failed -");
    assert_eq!(Event::LocalSocketFailed.as_str(), "local-socket-failed -");
    assert_eq!(Event::NotAllowed.as_str(), "not-allowed");
    assert_eq!(Event::Denied.as_str(), "denied");
}

#[test]
fn lines_go_to_the_open_file_only_and_a_failed_reopen_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = dir.path().join("first.log");
    let log = LogHandle::start().expect("writer");
    log.log_test_event(Event::Opened); // no file yet: dropped
    log.reopen(Some(first.clone()), Format::Tab).expect("open");
    log.log_test_event(Event::Denied);
    let missing = dir.path().join("no-such-dir").join("x.log");
    assert!(log.reopen(Some(missing), Format::Tab).is_err());
    log.log_test_event(Event::NotAllowed); // still goes to first.log
    log.reopen(None, Format::Tab).expect("close");
    log.log_test_event(Event::AcceptFailed); // no file: dropped
    log.flush();
    let text = std::fs::read_to_string(&first).expect("read log");
    let events: Vec<&str> = text.lines().filter_map(|l| l.rsplit('\t').next()).collect();
    assert_eq!(events, ["denied", "not-allowed"]);
}

#[test]
fn a_stuck_writer_bounds_the_queue_and_does_not_hold_up_exit_or_reload() {
    // A writer that never takes anything (as one stuck in write(2) on a
    // dead NFS mount): the channel's receiver is kept, no thread reads it.
    let (tx, _stuck) = mpsc::channel();
    let log = LogHandle {
        tx: Some(tx),
        queue: new_queue(),
    };
    log.queue.has_file.store(true, Ordering::Relaxed);
    let sent = LOG_QUEUE_LINES + 5_000;
    for _ in 0..sent {
        log.log_test_event(Event::Opened);
    }
    assert_eq!(log.queued(), LOG_QUEUE_LINES);
    assert_eq!(log.dropped(), 5_000);
    // Both give up after WRITER_WAIT instead of waiting for ever.
    assert!(!log.flush());
    let err = log.reopen(None, Format::Tab).expect_err("writer stuck");
    assert_eq!(err.kind(), ErrorKind::TimedOut);
}

#[test]
fn write_errors_are_reported_once_a_period_with_the_count_held_back() {
    let mut s = Suppressor::new(Duration::from_secs(60));
    let t0 = Instant::now();
    assert_eq!(s.report(t0), Some(0));
    for i in 1..=95 {
        assert_eq!(s.report(t0 + Duration::from_millis(i * 10)), None);
    }
    assert_eq!(s.report(t0 + Duration::from_secs(60)), Some(95));
    assert_eq!(s.report(t0 + Duration::from_secs(61)), None);
}

#[test]
fn a_full_disk_loses_and_counts_lines_without_stopping_the_writer() {
    // /dev/full fails every write with ENOSPC.
    let log = LogHandle::start().expect("writer");
    log.reopen(Some(PathBuf::from("/dev/full")), Format::Tab)
        .expect("open /dev/full");
    for _ in 0..10 {
        log.log_test_event(Event::Opened);
    }
    assert!(log.flush());
    assert_eq!(log.dropped(), 10);
}

#[test]
fn chunks_for_a_pipe_are_whole_lines() {
    assert_eq!(whole_lines("ab\ncd\nef\n", 6), "ab\ncd\n");
    assert_eq!(whole_lines("ab\ncd\n", 100), "ab\ncd\n");
    assert_eq!(
        whole_lines("abcdef\ngh\n", 3),
        "abcdef\n",
        "one long line whole"
    );
    assert_eq!(whole_lines("abc", 2), "abc");
}

impl LogHandle {
    /// Logs the sample event with this outcome.
    fn log_test_event(&self, ev: Event) {
        self.log(event(ev));
    }
}

#[test]
fn json_lines_carry_every_field_in_order() {
    let mut ev = event(Event::DoneRemoteClosed);
    ev.server_name = Some("app.example.com".into());
    ev.tls_subject = Some("CN=alice,O=Example\\, Inc.".into());
    ev.flow = Some(Flow {
        id: 7,
        rule: "0.0.0.0:80/tcp".into(),
        backend: Some("10.0.0.1:8080".parse().unwrap()),
        duration_ms: 1500,
    });
    let mut s = String::new();
    format_line(&ev, Format::Json, &mut s);
    assert_eq!(
        s,
        "{\"time\":\"2023-11-14T22:13:20.000Z\",\"id\":7,\"rule\":\"0.0.0.0:80/tcp\",\
         \"bind\":\"0.0.0.0:80\",\"connect\":\"backend:8080\",\"client\":\"127.0.0.2\",\
         \"backend\":\"10.0.0.1:8080\",\"server_name\":\"app.example.com\",\
         \"tls_subject\":\"CN=alice,O=Example\\\\, Inc.\",\
         \"bytes_from_client\":12,\"bytes_to_client\":345,\"duration_ms\":1500,\
         \"event\":\"done-remote-closed\"}\n"
    );
    let parsed: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert_eq!(parsed["id"], 7);
    // A refusal before any live entry: no id, rule, backend or duration.
    let mut s = String::new();
    format_line(&event(Event::AcceptFailed), Format::Json, &mut s);
    let parsed: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert!(parsed["id"].is_null() && parsed["duration_ms"].is_null());
    assert_eq!(parsed["event"], "accept-failed");
}

#[test]
fn json_escapes_quotes_backslashes_and_control_characters() {
    let mut ev = event(Event::SniUnrouted);
    ev.server_name = Some("a\"b\\c\nd\te\u{1b}[31m\u{7f}é".into());
    let mut s = String::new();
    format_line(&ev, Format::Json, &mut s);
    assert_eq!(s.matches('\n').count(), 1, "one line: {s:?}");
    assert!(!s.contains('\u{1b}') && !s.contains('\t') && !s.contains('\u{7f}'));
    assert!(
        s.contains(r#""server_name":"a\"b\\c\u000ad\u0009e\u001b[31m\u007fé""#),
        "{s}"
    );
    let parsed: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert_eq!(parsed["server_name"], "a\"b\\c\nd\te\u{1b}[31m\u{7f}é");
}

#[test]
fn the_longest_json_line_is_within_its_bound() {
    // Every text field as long as it can be and every byte escaped sixfold.
    let worst: Arc<str> = "\u{1}".repeat(10_000).into();
    let mut ev = event(Event::DoneLocalClosed);
    ev.rule = Arc::new(RuleNames {
        bind_host: worst.clone(),
        bind_port: u16::MAX,
        connect_host: worst.clone(),
        connect_port: u16::MAX,
    });
    ev.server_name = Some(worst.clone());
    ev.tls_subject = Some(worst.clone());
    ev.from_client = u64::MAX;
    ev.to_client = u64::MAX;
    ev.flow = Some(Flow {
        id: u64::MAX,
        rule: worst,
        backend: Some(
            "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff%4294967295]:65535"
                .parse()
                .unwrap(),
        ),
        duration_ms: u64::MAX,
    });
    let mut s = String::new();
    format_line(&ev, Format::Json, &mut s);
    assert!(s.len() <= MAX_JSON_LINE, "{} > {MAX_JSON_LINE}", s.len());
    assert!(serde_json::from_str::<serde_json::Value>(&s).is_ok());
}
