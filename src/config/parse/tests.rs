//! Parser tests: every grammar element and every error class, with exact messages.

use super::*;
use crate::config::{Pattern, PatternKind};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

fn ok(text: &str) -> Config {
    match parse(text) {
        Ok(c) => c,
        Err(e) => panic!("unexpected errors:\n{e}"),
    }
}

/// Every error of `text`, formatted as the user sees them.
fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(c) => panic!("expected errors, got {c:?}"),
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

fn one_error(text: &str) -> String {
    let mut e = errors(text);
    assert_eq!(e.len(), 1, "{e:?}");
    e.remove(0)
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> Host {
    Host::Ip(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
}

fn v6(s: &str) -> Host {
    Host::Ip(IpAddr::V6(s.parse::<Ipv6Addr>().expect("test literal")))
}

fn wild(t: &str) -> Pattern {
    Pattern {
        text: t.into(),
        kind: PatternKind::Wildcard,
    }
}

#[test]
fn empty_and_comments() {
    assert_eq!(ok(""), Config::default());
    assert_eq!(
        ok("\n\n   \n\t\n# comment\n   # indented\r\n"),
        Config::default()
    );
}

#[test]
fn basic_rule() {
    let c = ok("206.125.69.81 80  10.1.1.2 80\n");
    assert_eq!(c.rules.len(), 1);
    let r = &c.rules[0];
    assert_eq!(r.line, 1);
    assert_eq!(r.bind.host, v4(206, 125, 69, 81));
    assert_eq!(r.bind.host_text, "206.125.69.81");
    assert_eq!(r.bind.port, Port::Number(80));
    assert_eq!(r.bind.proto, Proto::Tcp);
    assert_eq!(r.connect.host, v4(10, 1, 1, 2));
    assert_eq!(r.connect.port, Port::Number(80));
    assert_eq!(r.options, RuleOptions::default());
    assert!(r.acl.is_empty());
}

#[test]
fn whitespace_tabs_crlf_trailing_comments() {
    let c = ok("\t 0.0.0.0\t23 \t10.1.1.2   23\t\r\n# x\r\n127.0.0.1 24 127.0.0.1 25 # trailing\r\n127.0.0.1 26 127.0.0.1 27#tight\n");
    assert_eq!(c.rules.len(), 3);
    assert_eq!(c.rules[0].bind.host, v4(0, 0, 0, 0));
    assert_eq!(c.rules[0].connect.port, Port::Number(23));
    assert_eq!(c.rules[1].line, 3);
    assert_eq!(c.rules[2].connect.port, Port::Number(27));
}

#[test]
fn protocols_and_services() {
    let c = ok("206.125.69.81 80/tcp 10.1.1.2 8000/udp\n0.0.0.0 snmp-trap/udp 10.0.0.1 http\n");
    assert_eq!(c.rules[0].bind.proto, Proto::Tcp);
    assert_eq!(c.rules[0].connect.proto, Proto::Udp);
    assert_eq!(c.rules[0].connect.port, Port::Number(8000));
    assert_eq!(c.rules[1].bind.port, Port::Service("snmp-trap".into()));
    assert_eq!(c.rules[1].bind.proto, Proto::Udp);
    assert_eq!(c.rules[1].connect.port, Port::Service("http".into()));
    assert_eq!(c.rules[1].connect.proto, Proto::Tcp);
}

#[test]
fn ipv6_and_names() {
    let c = ok("::1 80 [::1] 81 [timeout=5]\n[::] 82 fe80::1 83\n:: 84 localhost 85\n");
    let r = &c.rules[0];
    assert_eq!(r.bind.host, v6("::1"));
    assert_eq!(r.connect.host, v6("::1"));
    assert_eq!(r.connect.host_text, "[::1]");
    assert_eq!(r.options.timeout, Some(Duration::from_secs(5)));
    assert_eq!(c.rules[1].bind.host, v6("::"));
    assert_eq!(c.rules[1].bind.host_text, "[::]");
    assert_eq!(c.rules[1].connect.host, v6("fe80::1"));
    assert_eq!(c.rules[2].connect.host, Host::Name("localhost".into()));
    assert_eq!(c.rules[2].connect.host_text, "localhost");
}

#[test]
fn options_forms() {
    let c = ok(concat!(
        "0.0.0.0 8000/udp 10.1.1.2 80 [timeout=3600]\n",
        "192.168.1.1 80 10.1.1.127 80 [src=10.1.1.2]\n",
        "127.0.0.1 81 127.0.0.1 82 [ timeout = 30 , src = 10.0.0.1 ]\n",
        "127.0.0.1 83/udp 127.0.0.1 84/udp[timeout=5,maxassoc=10,splice=off]\n",
        "127.0.0.1 85 127.0.0.1 86 [splice=on] # comment\n",
    ));
    let o: Vec<_> = c.rules.iter().map(|r| &r.options).collect();
    assert_eq!(o[0].timeout, Some(Duration::from_secs(3600)));
    assert_eq!(o[1].src, Some(v4(10, 1, 1, 2)));
    assert_eq!(o[2].timeout, Some(Duration::from_secs(30)));
    assert_eq!(o[2].src, Some(v4(10, 0, 0, 1)));
    assert_eq!(o[3].max_assoc, Some(10));
    assert_eq!(o[3].splice, Some(SpliceMode::Off));
    assert_eq!(o[4].splice, Some(SpliceMode::On));
    // Only the TCP rule with a timeout (rule 3) warns.
    assert_eq!(c.warnings.len(), 1);
    let w = ConfigErrors::format_one("f", &c.warnings[0]);
    assert_eq!(w, "f:3: option 'timeout' only applies to UDP; ignored on this TCP rule: '127.0.0.1 81 127.0.0.1 82 [ timeout = 30 , src = 10.0.0.1 ]'");
}

#[test]
fn maxassoc_on_tcp_warns() {
    let c = ok("127.0.0.1 81 127.0.0.1 82 [maxassoc=3]\n");
    assert_eq!(
        c.warnings[0].message,
        "option 'maxassoc' only applies to UDP; ignored on this TCP rule"
    );
}

#[test]
fn acl_global_and_per_rule() {
    let c = ok(concat!(
        "allow 127.*\n",
        "deny 127.0.0.2\n",
        "0.0.0.0 80 10.0.0.1 80\n",
        "allow\t10.0.0.0/8 # comment\n",
        "deny 10.0.0.9\n",
        "0.0.0.0 81 10.0.0.1 81\n",
        "deny fe80::*\n",
    ));
    assert_eq!(c.global_acl.allow, vec![wild("127.*")]);
    assert_eq!(c.global_acl.deny, vec![wild("127.0.0.2")]);
    assert_eq!(c.rules[0].acl.allow[0].text, "10.0.0.0/8");
    assert!(matches!(
        c.rules[0].acl.allow[0].kind,
        PatternKind::Cidr { prefix: 8, .. }
    ));
    assert_eq!(c.rules[0].acl.deny, vec![wild("10.0.0.9")]);
    assert!(c.rules[1].acl.allow.is_empty());
    assert_eq!(c.rules[1].acl.deny, vec![wild("fe80::*")]);
}

#[test]
fn logfile_pidlogfile_logcommon() {
    let c = ok("logfile /var/log/rinetd.log\npidlogfile /run/oi.pid # c\nlogcommon\n");
    assert_eq!(c.logfile, Some(PathBuf::from("/var/log/rinetd.log")));
    assert_eq!(c.pidlogfile, Some(PathBuf::from("/run/oi.pid")));
    assert!(c.logcommon);
    assert!(c.warnings.is_empty());
    let c = ok("logfile \"/var/log/x y.log\"   # c\npidlogfile '/run/a#b.pid'\n");
    assert_eq!(c.logfile, Some(PathBuf::from("/var/log/x y.log")));
    assert_eq!(c.pidlogfile, Some(PathBuf::from("/run/a#b.pid")));
    assert!(!c.logcommon);
    // As in rinetd, '#' inside a bare path is part of it.
    let c = ok("logfile /tmp/a#b.log\nlogcommon # c\n");
    assert_eq!(c.logfile, Some(PathBuf::from("/tmp/a#b.log")));
    assert!(c.logcommon);
}

#[test]
fn repeated_logfile_last_wins_with_warning() {
    let c = ok("logfile /a\nlogfile /b\npidlogfile /p\npidlogfile /q\n");
    assert_eq!(c.logfile, Some(PathBuf::from("/b")));
    assert_eq!(c.pidlogfile, Some(PathBuf::from("/q")));
    let w: Vec<_> = c
        .warnings
        .iter()
        .map(|w| ConfigErrors::format_one("f", w))
        .collect();
    assert_eq!(
        w,
        [
            "f:2: logfile repeated (previous at line 1); the last one wins: 'logfile /b'",
            "f:4: pidlogfile repeated (previous at line 3); the last one wins: 'pidlogfile /q'",
        ]
    );
}

#[test]
fn error_format_and_placeholder_file() {
    assert_eq!(
        one_error("\n\n0.0.0.0 80 10.0.0.1 80 [timout=5]\n"),
        "config:3: unknown option 'timout': '0.0.0.0 80 10.0.0.1 80 [timout=5]'"
    );
}

#[test]
fn rule_shape_errors() {
    let shape = "expected 'bindaddr bindport connectaddr connectport [options]'";
    for line in [
        "127.0.0.1 80 127.0.0.1",
        "127.0.0.1",
        "127.0.0.1 80 127.0.0.1 [timeout=5]",
        "127.0.0.1 [80] 127.0.0.1 81",
        "logfile=/tmp/x",
    ] {
        assert_eq!(one_error(line), format!("config:1: {shape}: '{line}'"));
    }
    assert_eq!(
        one_error("ALLOW 127.*"),
        "config:1: unknown keyword 'ALLOW' (keywords are lower case: 'allow'): 'ALLOW 127.*'"
    );
    assert_eq!(
        one_error("LogCommon"),
        "config:1: unknown keyword 'LogCommon' (keywords are lower case: 'logcommon'): 'LogCommon'"
    );
    assert_eq!(
        one_error("127.0.0.1 80 127.0.0.1 81 extra"),
        "config:1: unexpected 'extra' after the connect port: '127.0.0.1 80 127.0.0.1 81 extra'"
    );
    assert_eq!(
        one_error("127.0.0.1 80 127.0.0.1 81 [timeout=5] [src=127.0.0.1]"),
        "config:1: unexpected '[src=127.0.0.1]' after the options (put all options in one [...] list): '127.0.0.1 80 127.0.0.1 81 [timeout=5] [src=127.0.0.1]'"
    );
    assert_eq!(
        one_error("127.0.0.1 80 127.0.0.1 81 [timeout=5"),
        "config:1: missing ']' after options: '127.0.0.1 80 127.0.0.1 81 [timeout=5'"
    );
}

#[test]
fn field_errors() {
    let cases = [
        (
            "0.0.0.0 70000 10.0.0.1 80",
            "port out of range (1-65535) '70000'",
        ),
        ("0.0.0.0 0 10.0.0.1 80", "port out of range (1-65535) '0'"),
        (
            "0.0.0.0 80/UDP 10.0.0.1 80",
            "unknown protocol 'UDP' (expected tcp or udp)",
        ),
        ("0.0.0.0 80 10.0.0.1 ht%tp", "invalid port 'ht%tp'"),
        (
            "10.0.0.300 80 10.0.0.1 80",
            "invalid IPv4 address '10.0.0.300'",
        ),
        ("foo..bar 80 10.0.0.1 80", "invalid host name 'foo..bar'"),
        ("-x 80 10.0.0.1 80", "invalid host name '-x'"),
        (
            "0.0.0.0 80 fe80::1%eth0 80",
            "invalid IPv6 address 'fe80::1%eth0'",
        ),
        ("[::1 80 ::1 81", "invalid IPv6 address '[::1'"),
        (
            "0.0.0.0 80 10.0.0.1 80 [timeout=0]",
            "invalid timeout '0' (expected whole seconds, 1 or more)",
        ),
        ("0.0.0.0 80 10.0.0.1 80 []", "empty option"),
        (
            "0.0.0.0 80 10.0.0.1 80 [timeout=5,timeout=6]",
            "duplicate option 'timeout'",
        ),
        (
            "0.0.0.0 80 10.0.0.1 80 [src=a..b]",
            "invalid src address: invalid host name 'a..b'",
        ),
    ];
    for (line, msg) in cases {
        assert_eq!(one_error(line), format!("config:1: {msg}: '{line}'"));
    }
}

#[test]
fn several_errors_on_one_line_and_across_lines() {
    let e = errors("x..y 0 10.0.0.1 80/sctp [timout=1, splice=maybe]\n127.0.0.1 80 127.0.0.1 81\nallow localhost\n");
    let l = "'x..y 0 10.0.0.1 80/sctp [timout=1, splice=maybe]'";
    assert_eq!(
        e,
        [
            format!("config:1: invalid host name 'x..y': {l}"),
            format!("config:1: port out of range (1-65535) '0': {l}"),
            format!("config:1: unknown protocol 'sctp' (expected tcp or udp): {l}"),
            format!("config:1: unknown option 'timout': {l}"),
            format!("config:1: invalid splice mode 'maybe' (expected on, off or auto): {l}"),
            "config:3: invalid pattern 'localhost' (expected an address with * and ? wildcards, or a CIDR block; host names are not allowed): 'allow localhost'".to_string(),
        ]
    );
}

#[test]
fn acl_errors() {
    assert_eq!(
        one_error("allow"),
        "config:1: expected 'allow PATTERN': 'allow'"
    );
    assert_eq!(
        one_error("deny # x"),
        "config:1: expected 'deny PATTERN': 'deny # x'"
    );
    assert_eq!(
        one_error("allow 127.* 10.*"),
        "config:1: expected 'allow PATTERN': 'allow 127.* 10.*'"
    );
    assert_eq!(
        one_error("deny 10.0.0.0/33"),
        "config:1: invalid prefix length '33' (0-32 for 10.0.0.0): 'deny 10.0.0.0/33'"
    );
}

#[test]
fn keyword_line_errors() {
    assert_eq!(
        one_error("logfile"),
        "config:1: expected 'logfile PATH' (quote a path that contains spaces): 'logfile'"
    );
    assert_eq!(
        one_error("logfile a b"),
        "config:1: expected 'logfile PATH' (quote a path that contains spaces): 'logfile a b'"
    );
    assert_eq!(
        one_error("pidlogfile \"/x"),
        "config:1: missing closing \" in path: 'pidlogfile \"/x'"
    );
    assert_eq!(
        one_error("logfile \"\""),
        "config:1: empty path after 'logfile': 'logfile \"\"'"
    );
    assert_eq!(
        one_error("logcommon extra"),
        "config:1: expected 'logcommon' alone: 'logcommon extra'"
    );
}

#[test]
fn duplicate_listeners() {
    assert_eq!(
        one_error("0.0.0.0 80 10.0.0.1 80\n\n0.0.0.0 80/tcp 10.0.0.2 81\n"),
        "config:3: duplicate listener 0.0.0.0 80/tcp, first defined at line 1: '0.0.0.0 80/tcp 10.0.0.2 81'"
    );
    assert_eq!(
        one_error(":: 53/udp ::1 53/udp\n[::] 53/udp ::1 54/udp\n"),
        "config:2: duplicate listener [::] 53/udp, first defined at line 1: '[::] 53/udp ::1 54/udp'"
    );
    assert_eq!(
        one_error("LocalHost http 10.0.0.1 80\nlocalhost http 10.0.0.1 81\n"),
        "config:2: duplicate listener localhost http/tcp, first defined at line 1: 'localhost http 10.0.0.1 81'"
    );
    // Same address and port on different protocols, or different addresses: fine.
    let c =
        ok("0.0.0.0 53 10.0.0.1 53\n0.0.0.0 53/udp 10.0.0.1 53/udp\n127.0.0.1 53 10.0.0.1 53\n");
    assert_eq!(c.rules.len(), 3);
}

#[test]
fn display_round_trip() {
    let text = "[::1] http 10.0.0.1 53/udp [timeout=30, src=::1, splice=off, maxassoc=4]";
    let c = ok(text);
    let shown = c.rules[0].to_string();
    assert_eq!(
        shown,
        "[::1] http/tcp 10.0.0.1 53/udp [timeout=30, src=::1, splice=off, maxassoc=4]"
    );
    let again = ok(&shown);
    assert_eq!(again.rules[0].bind, c.rules[0].bind);
    assert_eq!(again.rules[0].options, c.rules[0].options);
}
