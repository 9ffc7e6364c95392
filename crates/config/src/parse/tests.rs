//! Parser tests: every grammar element and every error class, with exact messages.

use super::*;
use crate::{Host, Pattern, PatternKind, RuleOptions, SpliceMode};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
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
    assert_eq!(&*r.bind.host_text, "206.125.69.81");
    assert_eq!(r.bind.port, Port::Number(80));
    assert_eq!(r.bind.proto, Proto::Tcp);
    assert_eq!(r.connect().host, v4(10, 1, 1, 2));
    assert_eq!(r.connect().port, Port::Number(80));
    assert_eq!(r.options, RuleOptions::default());
    assert!(r.acl.is_empty());
}

#[test]
fn whitespace_tabs_crlf_trailing_comments() {
    let c = ok("\t 0.0.0.0\t23 \t10.1.1.2   23\t\r\n# x\r\n127.0.0.1 24 127.0.0.1 25 # trailing\r\n127.0.0.1 26 127.0.0.1 27#tight\n");
    assert_eq!(c.rules.len(), 3);
    assert_eq!(c.rules[0].bind.host, v4(0, 0, 0, 0));
    assert_eq!(c.rules[0].connect().port, Port::Number(23));
    assert_eq!(c.rules[1].line, 3);
    assert_eq!(c.rules[2].connect().port, Port::Number(27));
}

#[test]
fn protocols_and_services() {
    let c = ok("206.125.69.81 80/tcp 10.1.1.2 8000/udp\n0.0.0.0 snmp-trap/udp 10.0.0.1 http\n");
    assert_eq!(c.rules[0].bind.proto, Proto::Tcp);
    assert_eq!(c.rules[0].connect().proto, Proto::Udp);
    assert_eq!(c.rules[0].connect().port, Port::Number(8000));
    assert_eq!(c.rules[1].bind.port, Port::Service("snmp-trap".into()));
    assert_eq!(c.rules[1].bind.proto, Proto::Udp);
    assert_eq!(c.rules[1].connect().port, Port::Service("http".into()));
    assert_eq!(c.rules[1].connect().proto, Proto::Tcp);
}

#[test]
fn ipv6_and_names() {
    let c = ok("::1 80 [::1] 81 [timeout=5]\n[::] 82 fe80::1 83\n:: 84 localhost 85\n");
    let r = &c.rules[0];
    assert_eq!(r.bind.host, v6("::1"));
    assert_eq!(r.connect().host, v6("::1"));
    assert_eq!(&*r.connect().host_text, "[::1]");
    assert_eq!(r.options.timeout, Some(Duration::from_secs(5)));
    assert_eq!(c.rules[1].bind.host, v6("::"));
    assert_eq!(&*c.rules[1].bind.host_text, "[::]");
    assert_eq!(c.rules[1].connect().host, v6("fe80::1"));
    assert_eq!(c.rules[2].connect().host, Host::Name("localhost".into()));
    assert_eq!(&*c.rules[2].connect().host_text, "localhost");
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
fn logformat_picks_the_log_format_and_wins_over_logcommon() {
    use crate::LogFormat;
    assert_eq!(ok("logfile /tmp/x.log\n").log_format(), LogFormat::Tab);
    assert_eq!(ok("logcommon\n").log_format(), LogFormat::Common);
    let c = ok("logfile /tmp/x.log\nlogformat json\n");
    assert_eq!(c.globals.log_format, Some(LogFormat::Json));
    assert_eq!(c.log_format(), LogFormat::Json);
    assert_eq!(
        ok("logcommon\nlogformat tab\n").log_format(),
        LogFormat::Tab
    );
    assert_eq!(ok("logformat common\n").log_format(), LogFormat::Common);
    let e = one_error("logformat xml");
    assert!(e.contains("logformat") && e.contains("json"), "{e}");
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
        "config:3: unknown option 'timout' (did you mean 'timeout'?): '0.0.0.0 80 10.0.0.1 80 [timout=5]'"
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
            "timeout must be between 1 and 31536000 seconds, not '0'",
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
            format!("config:1: unknown option 'timout' (did you mean 'timeout'?): {l}"),
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

// Whatever the file holds, parsing stays bounded and never panics.

use crate::{MAX_ERRORS, MAX_ERRORS_PER_LINE, MAX_SHOWN_CHARS, MAX_UDP_TIMEOUT_SECS, MAX_WARNINGS};

#[test]
fn repeated_options_give_a_small_bounded_report() {
    // Before the caps, each of these options copied the whole line into its
    // own error: 10,000 repeats printed 1 GB and 30,000 ran out of memory.
    let options = vec!["timeout=5"; 30_000].join(",");
    let line = format!("0.0.0.0 80/udp 10.0.0.1 80/udp [{options}]\n");
    let e = parse(&line).expect_err("duplicates are errors");
    assert_eq!(e.count(), 29_999, "every duplicate is counted");
    assert_eq!(
        e.errors.len(),
        MAX_ERRORS_PER_LINE,
        "but only a few are listed"
    );
    let report = e.to_string();
    assert!(report.len() < 64 * 1024, "{} bytes", report.len());
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), MAX_ERRORS_PER_LINE + 1);
    assert!(
        lines[0].starts_with("config:1: duplicate option 'timeout': '0.0.0.0 80/udp 10.0.0.1 80/udp [timeout=5,timeout=5,"),
        "{}",
        lines[0]
    );
    assert!(lines[0].ends_with("...'"), "{}", lines[0]);
    assert_eq!(
        lines[MAX_ERRORS_PER_LINE],
        format!(
            "config:1: and {} more errors on this line",
            29_999 - MAX_ERRORS_PER_LINE
        )
    );
}

#[test]
fn huge_timeout_on_a_tcp_to_udp_rule_is_rejected_with_the_range() {
    // Before: accepted, and the first connection overflowed Instant + Duration.
    let line = "127.0.0.1 9000 127.0.0.1 9001/udp [timeout=18446744073709551615]";
    assert_eq!(
        one_error(line),
        format!("config:1: timeout must be between 1 and 31536000 seconds, not '18446744073709551615': '{line}'")
    );
    let longest = format!("127.0.0.1 9000 127.0.0.1 9001/udp [timeout={MAX_UDP_TIMEOUT_SECS}]");
    assert_eq!(
        ok(&longest).rules[0].options.timeout,
        Some(Duration::from_secs(MAX_UDP_TIMEOUT_SECS))
    );
}

#[test]
fn maxassoc_out_of_range() {
    assert_eq!(
        one_error("::1 53/udp ::1 54/udp [maxassoc=1000001]"),
        "config:1: maxassoc must be between 1 and 1000000, not '1000001': '::1 53/udp ::1 54/udp [maxassoc=1000001]'"
    );
}

#[test]
fn errors_across_lines_are_capped_with_a_count() {
    let text = "nonsense\n".repeat(MAX_ERRORS + 50);
    let e = parse(&text).expect_err("all bad");
    assert_eq!(e.errors.len(), MAX_ERRORS);
    assert_eq!(e.omitted, 50);
    assert_eq!(e.count(), MAX_ERRORS + 50);
    let report = e.to_string();
    assert_eq!(report.lines().count(), MAX_ERRORS + 1);
    assert_eq!(report.lines().last(), Some("config: and 50 more errors"));
    // Every bad line up to the cap is reported, in order, in one pass.
    assert!(report.starts_with("config:1: expected"), "{report}");
    assert!(
        report.contains(&format!("config:{MAX_ERRORS}: expected")),
        "{report}"
    );
}

#[test]
fn warnings_are_capped_with_a_count() {
    let text = "logfile /a\n".repeat(MAX_WARNINGS + 20);
    let c = ok(&text);
    assert_eq!(c.warnings.len(), MAX_WARNINGS);
    assert_eq!(c.omitted_warnings, 19);
}

#[test]
fn hostile_text_in_errors_is_escaped_and_cut() {
    assert_eq!(
        one_error("allow \x1b[2J\u{7}"),
        "config:1: invalid pattern '\\x1b[2J\\x07' (expected an address with * and ? wildcards, or a CIDR block; host names are not allowed): 'allow \\x1b[2J\\x07'"
    );
    let name = "a".repeat(1_000_000);
    let e = one_error(&format!("0.0.0.0 80 10.0.0.1 80 [{name}=1]"));
    // The message quotes the name and the line, each cut.
    assert!(e.len() < 4 * MAX_SHOWN_CHARS, "{} bytes", e.len());
    assert!(e.starts_with("config:1: unknown option 'aaaa"), "{e}");
    assert_eq!(e.matches("...'").count(), 2, "{e}");
}

#[test]
fn a_line_of_a_million_words_is_two_short_errors() {
    // The tokenizer stops at the sixth field instead of keeping a million.
    let line = "x ".repeat(1_000_000);
    let shown = format!(
        "'{}...'",
        &"x ".repeat(MAX_SHOWN_CHARS)[..MAX_SHOWN_CHARS - 3]
    );
    assert_eq!(
        errors(&line),
        [
            format!("config:1: unexpected 'x' after the connect port: {shown}"),
            format!("config:1: unexpected 'x' after the options (put all options in one [...] list): {shown}"),
        ]
    );
}

#[test]
fn past_max_rules_the_file_is_refused_before_its_rules_are_built() {
    use crate::MAX_RULES;
    // One range of exactly the cap fits.
    let last = MAX_RULES + 1000 - 1;
    let fits = format!("0.0.0.0 1000-{last} 10.0.0.1 1000-{last}\n");
    assert_eq!(ok(&fits).rules.len(), MAX_RULES);
    // One more rule, on line 3 (a comment and a keyword count nothing): refused
    // at the line that goes past, naming the cap.
    let past = format!("# all\nlogcommon\n{fits}10.0.0.2 1 10.0.0.1 1\n");
    let e = errors(&past);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with(&format!("config:4: more than {MAX_RULES} forwarding rules")),
        "{e:?}"
    );
    // Lines without a rule's fields are no rules: they keep their own errors.
    for junk in ["x\n", "x y\n", "x y z\n"] {
        let e = errors(&junk.repeat(MAX_RULES + 1));
        assert!(!e[0].contains("forwarding rules"), "{junk:?}: {}", e[0]);
    }
    // A unix rule has fewer fields, and counts.
    let unix = (0..=MAX_RULES)
        .map(|i| format!("unix:/run/{i}.sock unix:/run/b.sock\n"))
        .collect::<String>();
    assert!(errors(&unix)[0].contains("forwarding rules"));
}
