//! Watching oi: each counter moves for the event it counts, the status file
//! (both formats, rewritten atomically on its interval), `GET /metrics`
//! through a strict text-format parser, and `oi status` / `oi connections`
//! through the binary.

use crate::common::*;
use oxidinetd::config::{self, services::Services, Proto};
use oxidinetd::observe::{ObserveSettings, Observer, StatusFormat};
use oxidinetd::stats::{ConnKind, ConnState, CounterValues};
use oxidinetd::{LogHandle, Settings};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The first rule's counters now.
fn rule0(srv: &TestServer) -> CounterValues {
    srv.shared.snapshot().rules[0].counters.clone()
}

/// A backend that accepts and reads everything, and after the client's EOF
/// holds the connection open (half-closed) until a message on the returned
/// sender lets one go, or the sender drops.
fn sink_backend() -> (SocketAddr, std::sync::mpsc::Sender<()>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind sink");
    let addr = l.local_addr().expect("addr");
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Arc::new(std::sync::Mutex::new(released));
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let released = released.clone();
            std::thread::spawn(move || {
                let mut c = c;
                let _ = std::io::copy(&mut c, &mut std::io::sink());
                let _ = released.lock().map(|r| r.recv());
            });
        }
    });
    (addr, release)
}

#[test]
fn a_long_transfer_shows_its_bytes_before_it_ends() {
    let (backend, release) = sink_backend();
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let mut c = connect(srv.addr());
    let mib = 1u64 << 20;
    c.write_all(&vec![7u8; mib as usize]).expect("write");
    wait_until("the MiB is counted while the connection is open", || {
        let r = rule0(&srv);
        r.from_client == mib && r.active_tcp == 1
    });
    let s = srv.shared.snapshot();
    assert_eq!(s.totals.from_client, mib);
    assert_eq!(s.rules[0].backends[0].addr, backend);
    assert_eq!(s.rules[0].backends[0].active, 1);
    assert_eq!(s.rules[0].backends[0].from_client, mib);
    let live = srv.shared.stats.connections();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (live[0].kind, live[0].backend),
        (ConnKind::Tcp, Some(backend))
    );
    assert_eq!(live[0].from_client, mib);
    c.shutdown(Shutdown::Write).expect("half-close");
    wait_until("the half-close shows", || {
        srv.shared.stats.connections().first().map(|c| c.state) == Some(ConnState::ClientClosed)
    });
    drop(c);
    let _ = release.send(());
    wait_until("the connection ends", || rule0(&srv).active_tcp == 0);
    let r = rule0(&srv);
    assert_eq!((r.opened_tcp, r.from_client, r.to_client), (1, mib, 0));
    assert!(srv.shared.stats.connections().is_empty());
    assert_eq!(srv.shared.snapshot().rules[0].backends[0].active, 0);
}

#[test]
fn acl_refusals_are_counted_by_reason() {
    let backend = echo_backend("127.0.0.1:0");
    let text = format!(
        "deny 127.0.0.3\n127.0.0.1 1 127.0.0.1 {}\nallow 127.0.0.1\n",
        backend.port()
    );
    let cfg = config::parse(&text).expect("valid config");
    let mut resolved = config::resolve(cfg, &Services::parse("")).expect("resolves");
    let mut rule = resolved.rules.remove(0);
    let mut ip = rule.bind.ip().expect("an IP listener");
    ip.set_port(0);
    rule.bind = ip.into();
    let global = resolved.config.global_acl.clone();
    let srv = start_acl(
        vec![rule],
        global,
        Settings::default(),
        LogHandle::disabled(),
    );
    for from in [[127, 0, 0, 2], [127, 0, 0, 3], [127, 0, 0, 2]] {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        s.bind(&SocketAddr::from((from, 0)).into()).expect("bind");
        s.connect(&srv.addr().into()).expect("connect");
        let mut s: TcpStream = s.into();
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let _ = s.read(&mut [0u8; 1]);
    }
    wait_until("three refusals", || rule0(&srv).refused() == 3);
    let r = rule0(&srv);
    assert_eq!((r.not_allowed, r.denied, r.opened_tcp), (2, 1, 0));
    assert_eq!(srv.shared.snapshot().totals.not_allowed, 2);
}

#[test]
fn backend_connect_failures_are_counted_by_reason() {
    let closed = local(free_port());
    let (silent, _keep) = unaccepting_backend();
    let settings = Settings {
        connect_timeout: Duration::from_millis(200),
        ..Settings::default()
    };
    let srv = start(
        vec![tcp_rule(closed), tcp_rule(silent)],
        settings,
        LogHandle::disabled(),
    );
    let mut a = connect(srv.addrs[0]);
    let mut b = connect(srv.addrs[1]);
    let _ = a.read(&mut [0u8; 1]);
    let _ = b.read(&mut [0u8; 1]);
    wait_until("both failures counted", || {
        srv.shared.snapshot().totals.connect_failed() == 2
    });
    let s = srv.shared.snapshot();
    assert_eq!(s.rules[0].counters.connect_refused, 1);
    assert_eq!(s.rules[1].counters.connect_timeout, 1);
    assert_eq!((s.totals.connect_refused, s.totals.connect_timeout), (1, 1));
}

#[test]
fn udp_associations_are_counted_opened_active_and_evicted() {
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let mut r = udp_rule(backend, Proto::Udp);
    r.rule.options.max_assoc = Some(1);
    let srv = start(vec![r], Settings::default(), LogHandle::disabled());
    let one = udp_client(srv.addr());
    assert_eq!(udp_roundtrip(&one, srv.addr(), b"one"), b"one");
    let two = udp_client(srv.addr());
    assert_eq!(udp_roundtrip(&two, srv.addr(), b"two!"), b"two!");
    // A reply is counted just after it is sent: wait for the count.
    wait_until(
        "the first association evicted, both replies counted",
        || {
            let r = rule0(&srv);
            r.udp_evicted == 1 && (r.from_client, r.to_client) == (7, 7)
        },
    );
    let r = rule0(&srv);
    assert_eq!((r.opened_udp, r.active_udp), (2, 1));
    let live = srv.shared.stats.connections();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].kind, ConnKind::Udp);
    assert_eq!(
        live[0].client,
        oxidinetd::Peer::Ip(two.local_addr().expect("addr"))
    );
    assert_eq!((live[0].from_client, live[0].to_client), (4, 4));
}

/// An observer for `srv` with these settings (the STATS line off).
fn observe(srv: &TestServer, settings: ObserveSettings) -> Observer {
    let settings = ObserveSettings {
        stats_log_interval: Duration::ZERO,
        ..settings
    };
    Observer::start(srv.shared.clone(), settings).expect("observer")
}

#[test]
fn the_json_status_file_is_rewritten_whole_on_its_interval() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("status.json");
    let _obs = observe(
        &srv,
        ObserveSettings {
            status_file: Some(path.clone()),
            status_interval: Duration::from_millis(20),
            ..ObserveSettings::default()
        },
    );
    // A reader reading in a loop: every read must be a whole document.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::MetadataExt;
            let mut inodes = HashSet::new();
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                let v: serde_json::Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("partial status file ({e}): {text:?}"));
                assert!(v["timestamp"].is_string(), "{text}");
                reads += 1;
                if let Ok(m) = std::fs::metadata(&path) {
                    inodes.insert(m.ino());
                }
            }
            (reads, inodes.len())
        })
    };
    assert_eq!(echo_through(srv.addr(), b"hello".to_vec()), b"hello");
    let text = wait_for_file(&path, |t| {
        serde_json::from_str::<serde_json::Value>(t)
            .map(|v| v["connections"]["total"] == 1 && v["connections"]["active"] == 0)
            .unwrap_or(false)
    });
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["connections"]["total_tcp"], 1, "{text}");
    assert_eq!(
        v["traffic"]["bytes_in"], 10,
        "both directions, as rinetd-uv counts: {text}"
    );
    assert_eq!(v["oi"]["totals"]["bytes_from_clients"], 5, "{text}");
    assert_eq!(v["rules"][0]["connections_total"], 1, "{text}");
    assert_eq!(
        v["rules"][0]["backends"][0]["name"],
        backend.to_string(),
        "{text}"
    );
    assert_eq!(v["errors"]["denied"], 0, "{text}");
    assert!(!text.contains("127.0.0.1:0\""), "{text}");
    // Rewritten again and again (each rename brings a new inode).
    wait_until("five rewrites seen by the reader", || {
        use std::os::unix::fs::MetadataExt;
        static SEEN: std::sync::Mutex<Option<HashSet<u64>>> = std::sync::Mutex::new(None);
        let mut seen = SEEN.lock().expect("lock");
        let set = seen.get_or_insert_with(HashSet::new);
        if let Ok(m) = std::fs::metadata(&path) {
            set.insert(m.ino());
        }
        set.len() >= 5
    });
    stop.store(true, Ordering::Relaxed);
    let (reads, _) = reader.join().expect("the reader never saw a partial file");
    assert!(reads > 0);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary files left: {leftovers:?}");
}

#[test]
fn the_text_status_file_and_the_stats_line_read_like_rinetd_uv() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("status.txt");
    let _obs = observe(
        &srv,
        ObserveSettings {
            status_file: Some(path.clone()),
            status_interval: Duration::from_millis(20),
            status_format: StatusFormat::Text,
            ..ObserveSettings::default()
        },
    );
    assert_eq!(echo_through(srv.addr(), b"hello".to_vec()), b"hello");
    // A connection's bytes reach the totals a moment after it leaves the
    // live list: wait for the bytes too.
    let text = wait_for_file(&path, |t| {
        t.contains("Total: 1 (TCP: 1, UDP: 0, Unix: 0)")
            && t.contains("Active: 0 (TCP: 0")
            && t.contains("Bytes in: 10B")
    });
    for want in [
        "rinetd-uv Status Report (oi)",
        "CONNECTIONS",
        "Active: 0 (TCP: 0, UDP: 0, Unix: 0)",
        "Total: 1 (TCP: 1, UDP: 0, Unix: 0)",
        "TRAFFIC",
        "Bytes in: 10B",
        "ERRORS",
        "Denied: 0",
        "RULES",
        "Active: 0, Total: 1, Traffic: 5B/5B",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    let line = oxidinetd::observe::format::stats_line(&srv.shared.snapshot());
    assert!(line.starts_with("STATS: uptime="), "{line}");
    assert!(
        line.contains(" conns=0/1 tcp=0/1 udp=0/0 unix=0/0 traffic=10B/10B errors=0/0/0"),
        "{line}"
    );
}

/// One sample of a scrape: its name, labels and value.
pub(super) type Sample = (String, Vec<(String, String)>, f64);

/// Parses the Prometheus/OpenMetrics text format strictly: every line is a
/// `# HELP`, `# TYPE`, `# UNIT` or `# EOF` line, or a sample of a family
/// declared before it; label values are quoted with `\\`, `\"`, `\n` escapes;
/// `# EOF` ends the text. Panics on anything else.
pub(super) fn parse_exposition(text: &str) -> Vec<Sample> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = Vec::new();
    let mut lines = text.lines();
    let mut eof = false;
    for line in lines.by_ref() {
        if line == "# EOF" {
            eof = true;
            break;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut w = rest.splitn(3, ' ');
            let (kw, name) = (w.next().expect("keyword"), w.next().expect("name"));
            assert!(name_ok(name), "bad family name in {line:?}");
            match kw {
                "TYPE" => {
                    let t = w.next().expect("type");
                    assert!(
                        [
                            "counter",
                            "gauge",
                            "histogram",
                            "summary",
                            "unknown",
                            "info"
                        ]
                        .contains(&t),
                        "{line:?}"
                    );
                    assert!(
                        types.insert(name.into(), t.into()).is_none(),
                        "family twice: {line:?}"
                    );
                }
                "HELP" | "UNIT" => {}
                _ => panic!("unknown comment line {line:?}"),
            }
            continue;
        }
        let (name, rest) = line.split_at(
            line.find(['{', ' '])
                .unwrap_or_else(|| panic!("no value in {line:?}")),
        );
        assert!(name_ok(name), "bad metric name in {line:?}");
        let mut labels = Vec::new();
        let mut rest = rest;
        if let Some(mut l) = rest.strip_prefix('{') {
            loop {
                if let Some(r) = l.strip_prefix('}') {
                    rest = r;
                    break;
                }
                let eq = l
                    .find('=')
                    .unwrap_or_else(|| panic!("label without = in {line:?}"));
                let key = &l[..eq];
                assert!(name_ok(key), "bad label name in {line:?}");
                let mut chars = l[eq + 1..]
                    .strip_prefix('"')
                    .expect("quoted value")
                    .char_indices();
                let mut value = String::new();
                let end = loop {
                    match chars
                        .next()
                        .unwrap_or_else(|| panic!("unterminated value in {line:?}"))
                    {
                        (i, '"') => break i,
                        (_, '\\') => match chars.next().map(|c| c.1) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        (_, c) => value.push(c),
                    }
                };
                labels.push((key.to_string(), value));
                l = &l[eq + 1 + 1 + end + 1..];
                l = l.strip_prefix(',').unwrap_or(l);
            }
        }
        let value: f64 = rest
            .strip_prefix(' ')
            .unwrap_or_else(|| panic!("no space before the value in {line:?}"))
            .parse()
            .unwrap_or_else(|e| panic!("bad value in {line:?}: {e}"));
        let family = types
            .get(name)
            .map(|_| name)
            .or_else(|| {
                name.strip_suffix("_total")
                    .filter(|f| types.get(*f).map(String::as_str) == Some("counter"))
            })
            .unwrap_or_else(|| panic!("sample of an undeclared family: {line:?}"));
        assert!(types.contains_key(family));
        samples.push((name.to_string(), labels, value));
    }
    assert!(eof, "no # EOF line");
    assert_eq!(lines.next(), None, "text after # EOF");
    samples
}

/// `GET path` (or another request line) to `addr`; returns the whole answer.
pub(super) fn http(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("request");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The value of the sample `name` with exactly these labels.
pub(super) fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(a, b)| a == k && b == v))
        })
        .map(|s| s.2)
        .unwrap_or_else(|| panic!("no {name} {labels:?}"))
}

#[test]
fn metrics_parse_as_prometheus_text_and_count_the_traffic() {
    let backend = echo_backend("127.0.0.1:0");
    let srv = start(
        vec![tcp_rule(backend)],
        Settings::default(),
        LogHandle::disabled(),
    );
    let obs = observe(
        &srv,
        ObserveSettings {
            metrics: Some("127.0.0.1:0".parse().expect("literal")),
            ..ObserveSettings::default()
        },
    );
    let addr = obs.metrics_addr().expect("metrics address");
    assert_eq!(echo_through(srv.addr(), b"hello".to_vec()), b"hello");
    wait_until("the connection ends", || rule0(&srv).active_tcp == 0);
    let answer = http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text"),
        "{head}"
    );
    let samples = parse_exposition(body);
    let rule = srv.shared.snapshot().rules[0].name.clone();
    let r = [("rule", rule.as_str())];
    assert_eq!(value(&samples, "oi_connections_total", &r), 1.0);
    assert_eq!(value(&samples, "oi_connections_active", &r), 0.0);
    let from = [("rule", rule.as_str()), ("direction", "from_client")];
    assert_eq!(value(&samples, "oi_bytes_total", &from), 5.0);
    let refused = [("rule", rule.as_str()), ("reason", "refused")];
    assert_eq!(value(&samples, "oi_connect_failures_total", &refused), 0.0);
    assert_eq!(
        value(&samples, "oi_reloads_total", &[("result", "ok")]),
        0.0
    );
    assert!(value(&samples, "oi_open_descriptors", &[]) > 0.0);
    assert!(
        value(&samples, "oi_descriptors_limit", &[]) >= value(&samples, "oi_open_descriptors", &[])
    );
    let b = backend.to_string();
    let bl = [("rule", rule.as_str()), ("backend", b.as_str())];
    assert_eq!(value(&samples, "oi_backend_connections_total", &bl), 1.0);
    // The status page and its JSON are served beside /metrics (see
    // tests/status_page.rs); anything else is 404; an endless head is cut
    // off unanswered.
    assert!(http(addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    for req in [
        "POST /metrics HTTP/1.1\r\n\r\n",
        "GET /metricsx HTTP/1.1\r\n\r\n",
    ] {
        assert!(http(addr, req).starts_with("HTTP/1.1 404"), "{req:?}");
    }
    let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.write_all(long.as_bytes());
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(!out.contains("200 OK"), "an oversized request was answered");
}

#[test]
fn oi_connections_lists_a_half_closed_connection_and_a_udp_association() {
    let (backend, _release) = sink_backend();
    let (udp_backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let (tcp_port, udp_port) = (free_port(), free_udp_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!(
            "127.0.0.1 {tcp_port} 127.0.0.1 {}\n127.0.0.1 {udp_port}/udp 127.0.0.1 {}/udp\n",
            backend.port(),
            udp_backend.port()
        ),
    )
    .expect("conf");
    let sock = dir.path().join("oi.sock");
    let sock_arg = sock.to_str().expect("utf-8 path");
    let oi = OiProcess::start(dir.path(), &conf, &["--socket", sock_arg]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sock)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let mut c = connect(local(tcp_port));
    c.write_all(b"12345").expect("write");
    c.shutdown(Shutdown::Write).expect("half-close");
    let u = udp_client(local(udp_port));
    assert_eq!(udp_roundtrip(&u, local(udp_port), b"abc"), b"abc");

    let ask = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
            .args(args)
            .args(["--socket", sock_arg])
            .output()
            .expect("run oi");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let mut listing = String::new();
    wait_until("both entries listed, the TCP one half-closed", || {
        listing = ask(&["connections"]);
        // The reply is counted just after it is sent: wait for its count too.
        listing.contains("half-closed-by-client")
            && listing.lines().count() == 3
            && listing
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()[5..9] == ["3", "3", "open", "-"])
    });
    let client = c.local_addr().expect("addr").to_string();
    let tcp_line = listing
        .lines()
        .find(|l| l.contains(&client))
        .expect("tcp line");
    let f: Vec<&str> = tcp_line.split_whitespace().collect();
    assert_eq!(f[0], format!("127.0.0.1:{tcp_port}/tcp"), "{listing}");
    assert_eq!(
        (f[1], f[3], f[5], f[6], f[7]),
        (
            "tcp",
            backend.to_string().as_str(),
            "5",
            "0",
            "half-closed-by-client"
        ),
        "{listing}"
    );
    let udp_client_addr = u.local_addr().expect("addr").to_string();
    let udp_line = listing
        .lines()
        .find(|l| l.contains(&udp_client_addr))
        .expect("udp line");
    let f: Vec<&str> = udp_line.split_whitespace().collect();
    assert_eq!(
        (f[1], f[5], f[6], f[7]),
        ("udp", "3", "3", "open"),
        "{listing}"
    );
    assert!(listing.starts_with("RULE"), "{listing}");

    let json: serde_json::Value =
        serde_json::from_str(&ask(&["connections", "--json"])).expect("json");
    assert_eq!(json.as_array().map(Vec::len), Some(2), "{json}");
    // The last column is the id, the JSON's `id`: distinct, never 0.
    let ids: Vec<u64> = json
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["id"].as_u64())
        .collect();
    assert!(
        ids.len() == 2 && ids[0] != ids[1] && !ids.contains(&0),
        "{json}"
    );
    for id in &ids {
        let last = |l: &str| l.split_whitespace().last().map(str::to_string);
        assert!(
            listing.lines().any(|l| last(l) == Some(id.to_string())),
            "{listing}"
        );
    }
    let status = ask(&["status"]);
    assert!(
        status.contains("Active: 2 (TCP: 1, UDP: 1, Unix: 0)"),
        "{status}"
    );
    let status: serde_json::Value =
        serde_json::from_str(&ask(&["status", "--json"])).expect("json");
    assert_eq!(status["connections"]["active"], 2, "{status}");

    drop(c);
    let (code, _) = oi.stop();
    assert!(code.success());
    assert!(!sock.exists(), "the control socket is removed on exit");
    // With nothing listening the client says so and fails.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["status", "--socket", sock_arg])
        .output()
        .expect("run oi");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("control socket"));
}

#[test]
fn a_kept_rule_keeps_its_counters_across_a_reload_and_a_removed_one_goes() {
    let backend = echo_backend("127.0.0.1:0");
    let (a, b) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let rule = |port: u16| format!("127.0.0.1 {port} 127.0.0.1 {}\n", backend.port());
    write_atomic(&conf, &(rule(a) + &rule(b)));
    let sock = dir.path().join("oi.sock");
    let sock_arg = sock.to_str().expect("utf-8 path");
    let oi = OiProcess::start(dir.path(), &conf, &["--socket", sock_arg]);
    assert_eq!(echo_through(local(a), b"x".to_vec()), b"x");
    assert_eq!(echo_through(local(b), b"y".to_vec()), b"y");
    let status = || -> serde_json::Value {
        let answer =
            oxidinetd::observe::ask(&sock, oxidinetd::observe::Query::Status, true).expect("ask");
        serde_json::from_str(&answer).expect("json")
    };
    let totals = |v: &serde_json::Value| -> Vec<(String, u64)> {
        v["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .map(|r| {
                let name = r["name"].as_str().expect("name").to_string();
                (name, r["connections_total"].as_u64().expect("total"))
            })
            .collect()
    };
    let name = |port: u16| format!("127.0.0.1:{port}/tcp");
    wait_until("both connections counted", || {
        status()["connections"]["total"] == 2
    });
    write_atomic(&conf, &rule(a));
    oi.reload();
    let v = status();
    assert_eq!(totals(&v), vec![(name(a), 1)], "{v}");
    assert_eq!(v["config_reloads"], 1, "{v}");
    assert_eq!(
        v["connections"]["total"], 2,
        "process totals keep the removed rule's: {v}"
    );
    write_atomic(&conf, "this is not a configuration\n");
    oi.reload();
    assert_eq!(status()["oi"]["reloads_failed"], 1);
    let (code, _) = oi.stop();
    assert!(code.success());
}

/// The sample `name` for `rule` in a scrape of `addr`, and the scrape's text.
fn scrape_rule(addr: SocketAddr, name: &str, rule: &str) -> (f64, String) {
    let answer = http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (_, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let samples = parse_exposition(body);
    (value(&samples, name, &[("rule", rule)]), body.to_string())
}

#[test]
fn limit_refusals_and_accept_proxy_drops_show_in_every_output() {
    let backend = echo_backend("127.0.0.1:0");
    let (udp_backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let (tcp_port, udp_port, metrics_port) = (free_port(), free_udp_port(), free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!(
            "metrics 127.0.0.1:{metrics_port}\n\
             127.0.0.1 {tcp_port} 127.0.0.1 {} [maxconn=1]\n\
             127.0.0.1 {udp_port}/udp 127.0.0.1 {}/udp [accept-proxy]\n\
             trust-proxy 127.0.0.1\n",
            backend.port(),
            udp_backend.port()
        ),
    )
    .expect("conf");
    let sock = dir.path().join("oi.sock");
    let sock_arg = sock.to_str().expect("utf-8 path");
    let status_path = dir.path().join("status.json");
    let status_arg = status_path.to_str().expect("utf-8 path");
    let oi = OiProcess::start(
        dir.path(),
        &conf,
        &[
            "--socket",
            sock_arg,
            "--status-file",
            status_arg,
            "--status-interval",
            "20ms",
        ],
    );
    let (tcp_rule, udp_rule) = (
        format!("127.0.0.1:{tcp_port}/tcp"),
        format!("127.0.0.1:{udp_port}/udp"),
    );
    let ask = |query, json| oxidinetd::observe::ask(&sock, query, json).expect("ask oi");
    let status = || -> serde_json::Value {
        serde_json::from_str(&ask(oxidinetd::observe::Query::Status, true)).expect("json")
    };
    let metrics = local(metrics_port);

    // Nothing refused or dropped yet: every output says 0.
    let v = status();
    assert_eq!(v["oi"]["connections_refused_by_limits"], 0, "{v}");
    assert_eq!(v["oi"]["udp_proxy_datagrams_dropped"], 0, "{v}");
    let (before, body) = scrape_rule(metrics, "oi_limit_refusals_total", &tcp_rule);
    assert_eq!(before, 0.0);
    assert!(
        body.contains("# HELP oi_limit_refusals TCP connections refused with limit-reached"),
        "{body}"
    );
    assert!(
        body.contains("# HELP oi_udp_proxy_datagrams_dropped Datagrams an accept-proxy /udp"),
        "{body}"
    );

    // One connection holds the rule's only place; the next is refused.
    let mut held = connect(local(tcp_port));
    held.write_all(b"x").expect("write");
    let mut one = [0u8; 1];
    held.read_exact(&mut one).expect("echo");
    let mut over = connect(local(tcp_port));
    over.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    assert_eq!(over.read(&mut one).unwrap_or(0), 0, "refused at the limit");
    // A datagram without a PROXY header from the trusted proxy is dropped.
    let u = udp_client(local(udp_port));
    u.send_to(b"no header", local(udp_port)).expect("send");

    wait_until("the refusal and the drop are counted", || {
        let v = status();
        v["oi"]["connections_refused_by_limits"] == 1 && v["oi"]["udp_proxy_datagrams_dropped"] == 1
    });
    let v = status();
    let rule = |name: &str| {
        v["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no rule {name} in {v}"))
            .clone()
    };
    assert_eq!(rule(&tcp_rule)["oi"]["limit_reached"], 1, "{v}");
    assert_eq!(rule(&tcp_rule)["oi"]["udp_proxy_dropped"], 0, "{v}");
    assert_eq!(rule(&udp_rule)["oi"]["udp_proxy_dropped"], 1, "{v}");
    assert_eq!(v["oi"]["totals"]["limit_reached"], 1, "{v}");
    assert_eq!(
        v["errors"]["denied"], 0,
        "rinetd-uv's denied stays the ACL's: {v}"
    );

    let text = ask(oxidinetd::observe::Query::Status, false);
    for want in [
        "Limit reached: 1 (maxconn, maxconn-per-client)",
        "UDP datagrams dropped by accept-proxy: 1",
        "not-allowed=0 denied=0 limit-reached=1 sni-unrouted=0;",
        "udp evicted=0 proxy-dropped=1",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    let file = wait_for_file(&status_path, |t| {
        serde_json::from_str::<serde_json::Value>(t).is_ok_and(|v| {
            v["oi"]["connections_refused_by_limits"] == 1
                && v["oi"]["udp_proxy_datagrams_dropped"] == 1
        })
    });
    assert!(file.contains("\"limit_reached\":1"), "{file}");
    assert_eq!(
        scrape_rule(metrics, "oi_limit_refusals_total", &tcp_rule).0,
        1.0
    );
    assert_eq!(
        scrape_rule(metrics, "oi_udp_proxy_datagrams_dropped_total", &udp_rule).0,
        1.0
    );

    // SIGUSR1's status line names both.
    oi.signal(rustix::process::Signal::USR1);
    // Stopping at once could race the line: SIGTERM may be served first.
    wait_until("oi's status line on stderr after SIGUSR1", || {
        oi.stderr_tail().contains("status: STATS:")
    });
    drop(held);
    let (code, stderr) = oi.stop();
    assert!(code.success());
    let line = stderr
        .lines()
        .find(|l| l.contains("status: STATS:"))
        .unwrap_or_else(|| panic!("no status line in:\n{stderr}"));
    assert!(
        line.contains("1 dropped by accept-proxy; limit-reached: 1 connection(s) refused"),
        "{line}"
    );
}
