//! The rules of a listener shared by TLS server name (`[sni=...]`) in every
//! way of watching oi, through the binary: each is a rule of its own, named
//! `host:port/tcp[sni=NAME]` (the default rule keeps the listener's name),
//! with its backends, their health and its counters, in the status file,
//! `/metrics` (every family the alert rules read included), `oi status`,
//! `oi top` and the status page's `/status.json`; and its backends' health
//! and its counters carry across a reload and an `oi upgrade` like any
//! other rule's.
//!
//! One listener, three rules: `a.example.com` over a closed port (tried
//! first, marked down by passive health for 600 s) and an echo;
//! `*.example.org` over an echo and a closed port its probes mark down; the
//! default over an echo. Two connections name a.example.com (one stays
//! open), one www.example.org, one sends no ClientHello (the default).

use super::upgrade::{put_binary, Adopted};
use crate::common::*;
use oxidinetd::client_hello;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The backends of the shared listener's three rules.
struct Backends {
    /// `a.example.com`'s first backend: nothing listens (passive health).
    dead: SocketAddr,
    /// `a.example.com`'s echo.
    a: SocketAddr,
    /// `*.example.org`'s echo.
    org: SocketAddr,
    /// `*.example.org`'s second backend: nothing listens (its probes say so).
    closed: SocketAddr,
    /// The default rule's echo.
    rest: SocketAddr,
}

impl Backends {
    fn new() -> Self {
        Backends {
            dead: local(free_port()),
            a: echo_backend("127.0.0.1:0"),
            org: echo_backend("127.0.0.1:0"),
            closed: local(free_port()),
            rest: echo_backend("127.0.0.1:0"),
        }
    }
}

/// A running oi with the shared listener, `/metrics`, a control socket and
/// a JSON status file rewritten every second.
struct Sni {
    /// The test's directory, removed at the end.
    _dir: tempfile::TempDir,
    /// The shared listener's port.
    port: u16,
    /// The metrics listener's port (`/metrics`, `/status.json`).
    metrics: u16,
    /// The control socket.
    control: PathBuf,
    /// The status file.
    status: PathBuf,
    /// The configuration file.
    conf: PathBuf,
    /// The backends.
    b: Backends,
    /// The oi serving it.
    oi: OiProcess,
}

/// The YAML configuration of the shared listener on `port`; `extra` is
/// added to its rules, `org` says whether the `*.example.org` rule is there.
fn config(port: u16, b: &Backends, org: bool, extra: &str) -> String {
    let mut text = format!(
        "rules:\n\
         \x20 - name: a\n    bind: 127.0.0.1:{port}/tcp\n    sni: a.example.com\n\
         \x20   connect:\n      - {dead}/tcp\n      - {a}/tcp\n\
         \x20   load_balancing:\n      health_threshold: 1\n      recovery_timeout: 600\n",
        dead = b.dead,
        a = b.a,
    );
    if org {
        text.push_str(&format!(
            "  - name: org\n    bind: 127.0.0.1:{port}/tcp\n    sni: '*.example.org'\n\
             \x20   connect:\n      - {org}/tcp\n      - {closed}/tcp\n\
             \x20   health_check:\n      interval: 1\n      timeout: 1\n      rise: 2\n      fall: 2\n",
            org = b.org,
            closed = b.closed,
        ));
    }
    text.push_str(extra);
    text.push_str(&format!(
        "  - name: rest\n    bind: 127.0.0.1:{port}/tcp\n    connect: {}/tcp\n",
        b.rest
    ));
    text
}

impl Sni {
    /// Starts oi from `program` (the binary under test, or a path an upgrade
    /// reads it from again) in a directory of its own.
    fn start_with(dir: tempfile::TempDir, program: &Path) -> Self {
        let b = Backends::new();
        let (port, metrics) = (free_port(), free_port());
        let conf = dir.path().join("oi.yaml");
        write_atomic(&conf, &config(port, &b, true, ""));
        let control = dir.path().join("oi.sock");
        let status = dir.path().join("status.json");
        let metrics_at = format!("127.0.0.1:{metrics}");
        let args = [
            "--metrics",
            &metrics_at,
            "--socket",
            control.to_str().expect("utf-8 path"),
            "--status-file",
            status.to_str().expect("utf-8 path"),
            "--status-interval",
            "1s",
            "--status-format",
            "json",
        ];
        let oi = OiProcess::start_program(program, dir.path(), &conf, &args);
        Sni {
            _dir: dir,
            port,
            metrics,
            control,
            status,
            conf,
            b,
            oi,
        }
    }

    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_with(dir, Path::new(env!("CARGO_BIN_EXE_oi")))
    }

    /// The name of the listener's rule for `server_name` (`None`: the default).
    fn rule(&self, server_name: Option<&str>) -> String {
        match server_name {
            Some(n) => format!("127.0.0.1:{}/tcp[sni={n}]", self.port),
            None => format!("127.0.0.1:{}/tcp", self.port),
        }
    }

    /// `GET path` from the metrics listener; the body.
    fn get(&self, path: &str) -> String {
        let mut s = connect(local(self.metrics));
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text.split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or(text)
    }

    /// The status document, from `/status.json`.
    fn doc(&self) -> Value {
        let body = self.get("/status.json");
        serde_json::from_str(&body).unwrap_or_else(|e| self.oi.fail(&format!("{e}: {body}")))
    }

    /// One round trip through the listener: a ClientHello naming `name`
    /// (bytes that are not TLS for `None`), echoed back whole.
    fn hello(&self, name: Option<&str>) -> TcpStream {
        let bytes = match name {
            Some(n) => client_hello::example(Some(n)),
            None => b"not TLS\r\n".to_vec(),
        };
        let mut s = connect(local(self.port));
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        s.write_all(&bytes).expect("write");
        let mut back = vec![0u8; bytes.len()];
        if let Err(e) = s.read_exact(&mut back) {
            self.oi.fail(&format!("no echo for {name:?}: {e}"));
        }
        assert_eq!(back, bytes, "{name:?}: echoed whole");
        s
    }

    /// The test's connections (see the module docs); the one left open.
    fn traffic(&self) -> TcpStream {
        drop(self.hello(Some("a.example.com")));
        let held = self.hello(Some("a.example.com"));
        wait_until("the org rule's probes mark its closed port down", || {
            backend(
                &self.doc(),
                &self.rule(Some("*.example.org")),
                self.b.closed,
            )["healthy"]
                == false
        });
        drop(self.hello(Some("www.example.org")));
        drop(self.hello(None));
        // Three connections ended: their ends are counted once they close.
        wait_until("the ended connections are counted", || {
            let doc = self.doc();
            doc["connections"]["active"] == 1 && doc["connections"]["total"] == 4
        });
        held
    }
}

/// Rule `name` of a status document.
fn rule<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["rules"]
        .as_array()
        .and_then(|rules| rules.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no rule {name} in {doc:#}"))
}

/// Backend `addr` of rule `name` of a status document.
fn backend<'a>(doc: &'a Value, name: &str, addr: SocketAddr) -> &'a Value {
    rule(doc, name)["backends"]
        .as_array()
        .and_then(|list| list.iter().find(|b| b["address"] == addr.to_string()))
        .unwrap_or_else(|| panic!("no backend {addr} in rule {name} of {doc:#}"))
}

/// What a status document says of the three rules after [`Sni::traffic`]:
/// each with its own backends, their health and its own counts.
fn assert_every_rule(s: &Sni, doc: &Value) {
    let (a, org, rest) = (
        s.rule(Some("a.example.com")),
        s.rule(Some("*.example.org")),
        s.rule(None),
    );
    let names: Vec<&str> = doc["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [rest.as_str(), a.as_str(), org.as_str()],
        "the rule that binds the listener first, then the others in file order"
    );
    let counts = |name: &str| {
        let r = rule(doc, name);
        (
            r["connections_active"].clone(),
            r["connections_total"].clone(),
        )
    };
    assert_eq!(counts(&a), (1.into(), 2.into()), "{doc:#}");
    assert_eq!(counts(&org), (0.into(), 1.into()), "{doc:#}");
    assert_eq!(counts(&rest), (0.into(), 1.into()), "{doc:#}");
    // The dead backend was tried once (counted on its rule) and is down.
    assert_eq!(rule(doc, &a)["oi"]["connect_failed_refused"], 1);
    assert_eq!(backend(doc, &a, s.b.dead)["healthy"], false);
    let echo = backend(doc, &a, s.b.a);
    assert_eq!(echo["healthy"], true);
    assert_eq!(
        (&echo["connections_active"], &echo["connections_total"]),
        (&1.into(), &2.into())
    );
    // Probed: its round trip and its verdicts.
    assert!(
        backend(doc, &org, s.b.org)["probe_ms"].is_number(),
        "{doc:#}"
    );
    assert_eq!(backend(doc, &org, s.b.closed)["healthy"], false);
    assert_eq!(backend(doc, &org, s.b.org)["connections_total"], 1);
    assert_eq!(backend(doc, &rest, s.b.rest)["connections_total"], 1);
    // What happened before routing counts on the rule that binds the listener.
    assert_eq!(rule(doc, &rest)["oi"]["sni_named"], 3);
    assert_eq!(rule(doc, &rest)["oi"]["sni_default"], 1);
    assert_eq!(
        doc["connections"]["total"], 4,
        "the process counts each once"
    );
}

#[test]
fn the_status_file_lists_each_sni_rule_with_its_backends_and_counts() {
    let s = Sni::start();
    let _held = s.traffic();
    let a = s.rule(Some("a.example.com"));
    let text = wait_for_file(&s.status, |t| {
        serde_json::from_str::<Value>(t).is_ok_and(|doc| {
            doc["connections"]["total"] == 4
                && doc["connections"]["active"] == 1
                && doc["rules"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|r| r["name"] == a))
        })
    });
    let doc: Value = serde_json::from_str(&text).expect("status JSON");
    assert_every_rule(&s, &doc);
    assert_eq!(doc["servers"], 3, "one per rule");
}

#[test]
fn the_status_page_json_lists_each_sni_rule_with_its_backends_and_counts() {
    let s = Sni::start();
    let _held = s.traffic();
    assert_every_rule(&s, &s.doc());
}

#[test]
fn metrics_carry_each_sni_rule_and_its_backends() {
    let s = Sni::start();
    let _held = s.traffic();
    let body = s.get("/metrics");
    let (a, org) = (s.rule(Some("a.example.com")), s.rule(Some("*.example.org")));
    for sample in [
        format!("oi_connections_total{{rule=\"{a}\"}} 2\n"),
        format!("oi_connections_active{{rule=\"{a}\"}} 1\n"),
        format!("oi_connections_total{{rule=\"{org}\"}} 1\n"),
        format!("oi_connect_failures_total{{rule=\"{a}\",reason=\"refused\"}} 1\n"),
        format!("oi_backend_up{{rule=\"{a}\",backend=\"{}\"}} 0\n", s.b.dead),
        format!("oi_backend_up{{rule=\"{a}\",backend=\"{}\"}} 1\n", s.b.a),
        format!(
            "oi_backend_connections_total{{rule=\"{a}\",backend=\"{}\"}} 2\n",
            s.b.a
        ),
        format!(
            "oi_backend_up{{rule=\"{org}\",backend=\"{}\"}} 0\n",
            s.b.closed
        ),
        format!(
            "oi_backend_probe_seconds{{rule=\"{org}\",backend=\"{}\"}} ",
            s.b.org
        ),
        format!(
            "oi_sni_connections_total{{rule=\"{}\",outcome=\"named\"}} 3\n",
            s.rule(None)
        ),
    ] {
        assert!(body.contains(&sample), "no {sample:?} in\n{body}");
    }
}

#[test]
fn the_alert_rules_families_carry_each_sni_rule() {
    // Every per-rule family an alert reads has a series for each rule of
    // the shared listener, so an alert fires for a rule routed by server
    // name as for any other (`OiPoolAllBackendsDown` groups by rule: each
    // rule's pool on its own).
    let s = Sni::start();
    let _held = s.traffic();
    let body = s.get("/metrics");
    let alerts = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/monitoring/oi-alerts.yml"),
    )
    .expect("the alert rules");
    let mut families: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr: "))
        .flat_map(|e| e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| w.starts_with("oi_"))
        .collect();
    families.sort_unstable();
    families.dedup();
    let per_rule: Vec<&str> = families
        .iter()
        .copied()
        .filter(|f| body.contains(&format!("{f}{{rule=")))
        .collect();
    assert!(
        per_rule.contains(&"oi_backend_up") && per_rule.contains(&"oi_limit_refusals_total"),
        "the alerts read per-rule families: {families:?}"
    );
    for f in per_rule {
        for name in [Some("a.example.com"), Some("*.example.org"), None] {
            let series = format!("{f}{{rule=\"{}\"", s.rule(name));
            assert!(body.contains(&series), "no {series} in\n{body}");
        }
    }
    // The pool of the a.example.com rule is its own: one of its backends
    // down, one up, whatever the other rules' pools say.
    let a = s.rule(Some("a.example.com"));
    for (addr, up) in [(s.b.dead, 0), (s.b.a, 1)] {
        let sample = format!("oi_backend_up{{rule=\"{a}\",backend=\"{addr}\"}} {up}\n");
        assert!(body.contains(&sample), "no {sample:?} in\n{body}");
    }
}

/// `oi ARGS --socket CONTROL` with the binary under test; its stdout.
fn oi_says(s: &Sni, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(args)
        .arg("--socket")
        .arg(&s.control)
        .output()
        .expect("run oi");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        s.oi.fail(&format!(
            "oi {args:?}: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    text
}

#[test]
fn oi_status_and_oi_connections_show_each_sni_rule() {
    let s = Sni::start();
    let _held = s.traffic();
    let text = oi_says(&s, &["status"]);
    let a = s.rule(Some("a.example.com"));
    // The rule's block: its line, its counts, its backends.
    let block: Vec<&str> = text
        .lines()
        .skip_while(|l| l.trim() != format!("{a}:"))
        .take(6)
        .collect();
    assert!(!block.is_empty(), "no {a} in\n{text}");
    assert_eq!(
        block[1].trim().split(", Traffic").next(),
        Some("Active: 1, Total: 2")
    );
    assert!(block[2].contains("connect failed: refused=1"), "{text}");
    assert_eq!(block[3].trim(), "Backends:");
    assert!(block[4]
        .trim()
        .starts_with(&format!("{}: down, active=0, total=0", s.b.dead)));
    assert!(block[5]
        .trim()
        .starts_with(&format!("{}: healthy, active=1, total=2", s.b.a)));
    assert!(
        text.contains(&format!("  {}:\n", s.rule(Some("*.example.org")))),
        "{text}"
    );
    // The open connection is listed under the rule it was routed to.
    let conns = oi_says(&s, &["connections"]);
    let line = conns
        .lines()
        // SERVER_NAME is the ninth column (ID follows it).
        .find(|l| l.split_whitespace().nth(8) == Some("a.example.com"))
        .unwrap_or_else(|| panic!("no a.example.com connection in\n{conns}"));
    assert!(line.starts_with(&format!("{a} ")), "{conns}");
    assert!(line.contains(&s.b.a.to_string()), "{conns}");
}

#[test]
fn oi_top_lists_each_sni_rule_and_its_backends() {
    let s = Sni::start();
    let _held = s.traffic();
    // Not a terminal: one table, rates over one interval.
    let text = oi_says(&s, &["top", "--interval", "200ms"]);
    let row = |rule: &str, rest: &str| {
        text.lines().any(|l| {
            let mut f = l.split_whitespace();
            f.next() == Some(rule) && f.collect::<Vec<_>>().join(" ").starts_with(rest)
        })
    };
    let (a, org) = (s.rule(Some("a.example.com")), s.rule(Some("*.example.org")));
    assert!(row(&a, "1 "), "{a} with one open connection:\n{text}");
    assert!(row(&org, "0 "), "{org}:\n{text}");
    assert!(row(&s.rule(None), "0 "), "the default rule:\n{text}");
    assert!(row(&a, &format!("{} DOWN", s.b.dead)), "{text}");
    assert!(row(&a, &format!("{} up 1 100%", s.b.a)), "{text}");
    assert!(row(&org, &format!("{} DOWN", s.b.closed)), "{text}");
    assert!(row(&a, "tcp 127.0.0.1:"), "its live connection:\n{text}");
}

#[test]
fn a_reload_keeps_each_sni_rules_health_and_counters() {
    let s = Sni::start();
    let _held = s.traffic();
    let (a, org) = (s.rule(Some("a.example.com")), s.rule(Some("*.example.org")));
    // A rule more; the others as they were.
    let c_backend = echo_backend("127.0.0.1:0");
    let c = format!(
        "  - name: c\n    bind: 127.0.0.1:{}/tcp\n    sni: c.example.com\n    connect: {c_backend}/tcp\n",
        s.port
    );
    write_atomic(&s.conf, &config(s.port, &s.b, true, &c));
    s.oi.reload();
    let doc = s.doc();
    assert_eq!(
        backend(&doc, &a, s.b.dead)["healthy"],
        false,
        "still down (a fresh pool would have it up for 600 s more)"
    );
    assert_eq!(backend(&doc, &org, s.b.closed)["healthy"], false);
    assert_eq!(rule(&doc, &a)["connections_total"], 2, "counters kept");
    assert_eq!(rule(&doc, &a)["connections_active"], 1);
    assert_eq!(backend(&doc, &a, s.b.a)["connections_total"], 2);
    let c_rule = s.rule(Some("c.example.com"));
    assert_eq!(backend(&doc, &c_rule, c_backend)["connections_total"], 0);
    drop(s.hello(Some("c.example.com")));
    drop(s.hello(Some("a.example.com")));
    wait_until("the new rule and the kept one count on", || {
        let doc = s.doc();
        rule(&doc, &c_rule)["connections_total"] == 1 && rule(&doc, &a)["connections_total"] == 3
    });
    // The org rule goes: so does its row.
    write_atomic(&s.conf, &config(s.port, &s.b, false, &c));
    s.oi.reload();
    let doc = s.doc();
    let names: Vec<&str> = doc["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, [s.rule(None), a, c_rule], "{doc:#}");
}

#[test]
fn an_upgrade_carries_each_sni_rules_health_counters_and_connections() {
    let dir = tempfile::Builder::new()
        .prefix("oi-sniv")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let binary = dir.path().join("oi");
    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let mut s = Sni::start_with(dir, &binary);
    let mut held = s.traffic();
    let a = s.rule(Some("a.example.com"));
    let before = s.doc();

    put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["upgrade", "--socket"])
        .arg(&s.control)
        .output()
        .expect("oi upgrade");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let pid: i32 = said
        .split("oi pid ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| s.oi.fail(&format!("oi upgrade said {said:?}: {out:?}")));
    let _new = Adopted(pid);
    wait_until("the new oi took the connection over", || {
        s.oi.stderr_tail()
            .contains("took over 1 of 1 live connection(s)")
    });
    let status =
        s.oi.exited_within(PATIENCE)
            .unwrap_or_else(|| s.oi.fail("the old oi did not exit"));
    assert!(status.success(), "{status}");

    let doc = s.doc();
    assert_ne!(doc["oi"]["started"], Value::Null);
    assert_eq!(
        backend(&doc, &a, s.b.dead)["healthy"],
        false,
        "still down in the new oi (a fresh pool would have it up)"
    );
    assert_eq!(
        backend(&doc, &s.rule(Some("*.example.org")), s.b.closed)["healthy"],
        false
    );
    for name in [a.clone(), s.rule(Some("*.example.org")), s.rule(None)] {
        assert_eq!(
            rule(&doc, &name)["connections_total"],
            rule(&before, &name)["connections_total"],
            "{name}: its count carries on"
        );
    }
    // The handed-over connection counts on its rule and its backend here.
    assert_eq!(rule(&doc, &a)["connections_active"], 1, "{doc:#}");
    assert_eq!(backend(&doc, &a, s.b.a)["connections_active"], 1, "{doc:#}");
    held.write_all(b"after").expect("write after the upgrade");
    let mut back = [0u8; 5];
    held.read_exact(&mut back).expect("echo after the upgrade");
    assert_eq!(&back, b"after");
    let conns = oi_says(&s, &["connections"]);
    assert!(
        conns.lines().any(|l| l.starts_with(&format!("{a} "))
            && l.split_whitespace().nth(8) == Some("a.example.com")),
        "listed under its rule, with its server name:\n{conns}"
    );
    drop(s.hello(Some("a.example.com")));
    wait_until("a new connection counts on the carried count", || {
        rule(&s.doc(), &a)["connections_total"] == 3
    });
}

/// A connection to 127.0.0.1:`port` from the loopback address `from`,
/// naming `name`: what came back before it closed (an echo of the
/// ClientHello while held open is not waited for: `held` keeps it open).
fn named_from(from: &str, port: u16, name: &str, held: bool) -> (TcpStream, Vec<u8>) {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let source: SocketAddr = format!("{from}:0").parse().expect("source address");
    socket.bind(&source.into()).expect("bind the client");
    socket.connect(&local(port).into()).expect("connect to oi");
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let hello = client_hello::example(Some(name));
    s.write_all(&hello).expect("write the ClientHello");
    let mut back = Vec::new();
    if held {
        back.resize(hello.len(), 0);
        s.read_exact(&mut back).expect("echoed");
    } else {
        let _ = s.read_to_end(&mut back);
    }
    (s, back)
}

#[test]
fn a_routed_rules_refusals_count_on_that_rule() {
    let echo = echo_backend("127.0.0.1:0");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let conf = dir.path().join("oi.conf");
    let control = dir.path().join("oi.sock");
    write_atomic(
        &conf,
        &format!(
            "controlsocket {}\n\
             127.0.0.1 {port} {ip} {p} [sni=a.example.com,maxconn=1]\ndeny 127.0.0.2\n\
             127.0.0.1 {port} {ip} {p}\n",
            control.display(),
            ip = echo.ip(),
            p = echo.port()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    let (_held, _) = named_from("127.0.0.1", port, "a.example.com", true);
    let (_, over) = named_from("127.0.0.1", port, "a.example.com", false);
    let (_, denied) = named_from("127.0.0.2", port, "a.example.com", false);
    assert!(over.is_empty() && denied.is_empty(), "both refused");
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["status", "--json", "--socket"])
        .arg(&control)
        .output()
        .expect("oi status");
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| oi.fail(&format!("oi status --json: {e}: {out:?}")));
    let a = rule(&doc, &format!("127.0.0.1:{port}/tcp[sni=a.example.com]"));
    let rest = rule(&doc, &format!("127.0.0.1:{port}/tcp"));
    assert_eq!(
        (&a["oi"]["acl_denied"], &a["oi"]["limit_reached"]),
        (&1.into(), &1.into()),
        "{doc:#}"
    );
    assert_eq!(
        (&rest["oi"]["acl_denied"], &rest["oi"]["limit_reached"]),
        (&0.into(), &0.into()),
        "{doc:#}"
    );
    assert_eq!(a["connections_total"], 1, "the refused ones are not opened");
    assert_eq!(doc["connections"]["total"], 1, "{doc:#}");
    assert_eq!(doc["errors"]["denied"], 1);
    oi.stop();
}
