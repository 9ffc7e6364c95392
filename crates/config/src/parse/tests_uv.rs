//! Parser tests for the rinetd-uv dialect, `include` and the "did you mean" hints,
//! with exact messages.

use super::*;
use crate::{IncludedFile, IpFilter, MemIncludes, StatusFormat};
use std::path::PathBuf;
use std::time::Duration;

fn ok(text: &str) -> Config {
    parse(text).unwrap_or_else(|e| panic!("unexpected errors:\n{e}"))
}

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

#[test]
fn every_global_keyword() {
    let c = ok(concat!(
        "pidfile /run/oi.pid\n",
        "buffersize 65536\n",
        "connect-timeout 10\n",
        "dns-refresh 600\n",
        "dns-multi-ip-expand on\n",
        "dns-multi-ip-proto any\n",
        "listen-backlog 128\n",
        "max-udp-connections 5000\n",
        "pool-min-free 64\n",
        "pool-max-free 1024\n",
        "pool-trim-delay 60000\n",
        "statusfile /var/log/oi-status.json # comment\n",
        "statusinterval 30\n",
        "statusformat text\n",
        "statsloginterval 0\n",
    ));
    let g = &c.globals;
    assert_eq!(c.pidlogfile, Some(PathBuf::from("/run/oi.pid")));
    assert_eq!(g.buffer_size, Some(65536));
    assert_eq!(g.connect_timeout, Some(Duration::from_secs(10)));
    assert_eq!(g.dns_refresh, Some(Duration::from_secs(600)));
    assert_eq!(g.dns_multi_ip_expand, Some(true));
    assert_eq!(g.dns_multi_ip_proto, Some(IpFilter::Any));
    assert_eq!(g.listen_backlog, Some(128));
    assert_eq!(g.max_udp_connections, Some(5000));
    assert_eq!(g.pool_min_free, Some(64));
    assert_eq!(g.pool_max_free, Some(1024));
    assert_eq!(g.pool_trim_delay, Some(Duration::from_millis(60000)));
    assert_eq!(
        g.status_file,
        Some(PathBuf::from("/var/log/oi-status.json"))
    );
    assert_eq!(g.status_interval, Some(Duration::from_secs(30)));
    assert_eq!(g.status_format, Some(StatusFormat::Text));
    assert_eq!(g.stats_log_interval, Some(Duration::ZERO));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn global_ranges_are_in_the_messages() {
    let cases = [
        (
            "buffersize 1023",
            "buffersize must be between 1024 and 1048576, not '1023'",
        ),
        (
            "buffersize 1048577",
            "buffersize must be between 1024 and 1048576, not '1048577'",
        ),
        (
            "connect-timeout 86401",
            "connect-timeout must be between 0 and 86400 seconds, not '86401'",
        ),
        (
            "dns-refresh -1",
            "dns-refresh must be between 0 and 604800 seconds, not '-1'",
        ),
        (
            "dns-multi-ip-expand yes",
            "dns-multi-ip-expand must be on or off, not 'yes'",
        ),
        (
            "dns-multi-ip-proto ip4",
            "dns-multi-ip-proto must be ipv4, ipv6 or any, not 'ip4'",
        ),
        (
            "listen-backlog 0",
            "listen-backlog must be between 1 and 65535, not '0'",
        ),
        (
            "max-udp-connections 1000001",
            "max-udp-connections must be between 1 and 1000000, not '1000001'",
        ),
        (
            "pool-min-free 10001",
            "pool-min-free must be between 0 and 10000, not '10001'",
        ),
        (
            "pool-max-free 0",
            "pool-max-free must be between 1 and 100000, not '0'",
        ),
        (
            "pool-trim-delay 99",
            "pool-trim-delay must be between 100 and 300000 milliseconds, not '99'",
        ),
        (
            "statusinterval 0",
            "statusinterval must be between 1 and 86400 seconds, not '0'",
        ),
        (
            "statusformat xml",
            "statusformat must be json or text, not 'xml'",
        ),
        (
            "statsloginterval 99999999999999999999",
            "statsloginterval must be between 0 and 86400 seconds, not '99999999999999999999'",
        ),
    ];
    for (line, message) in cases {
        assert_eq!(one_error(line), format!("config:1: {message}: '{line}'"));
    }
    assert_eq!(
        one_error("buffersize"),
        "config:1: expected 'buffersize VALUE': 'buffersize'"
    );
    assert_eq!(
        one_error("listen-backlog 1 2"),
        "config:1: expected 'listen-backlog VALUE': 'listen-backlog 1 2'"
    );
    assert_eq!(
        one_error("statusfile"),
        "config:1: expected 'statusfile PATH' (quote a path that contains spaces): 'statusfile'"
    );
}

#[test]
fn repeats_warn_and_pidfile_is_pidlogfile() {
    let c = ok("pidlogfile /a\nbuffersize 2048\npidfile /b\nbuffersize 4096\n");
    assert_eq!(c.pidlogfile, Some(PathBuf::from("/b")));
    assert_eq!(c.globals.buffer_size, Some(4096));
    let w: Vec<String> = c.warnings.iter().map(|w| w.message.clone()).collect();
    assert_eq!(
        w,
        [
            "pidfile repeated (previous at line 1); the last one wins",
            "buffersize repeated (previous at line 2); the last one wins"
        ]
    );
}

#[test]
fn rinetd_uv_rule_options() {
    let c = ok("0.0.0.0 8080 10.0.0.1 80 [keepalive=off, connect-timeout=5, dns-refresh=60]\n");
    let o = &c.rules[0].options;
    assert_eq!(o.keepalive, Some(false));
    assert_eq!(o.connect_timeout, Some(Duration::from_secs(5)));
    assert_eq!(o.dns_refresh, Some(Duration::from_secs(60)));
    assert_eq!(c.rules[0].backends.len(), 1);
    assert_eq!(
        c.rules[0].to_string(),
        "0.0.0.0 8080/tcp 10.0.0.1 80/tcp [keepalive=off, connect-timeout=5, dns-refresh=60]"
    );
    // mode is stored, with a warning: it applies to unix listeners only
    // (unix endpoints are tested in config/unix.rs).
    let c = ok("0.0.0.0 8080 10.0.0.1 80 [mode=0660]\n");
    assert_eq!(c.rules[0].options.mode, Some(0o660));
    assert_eq!(
        c.warnings[0].message,
        "option 'mode' only applies to unix socket listeners; ignored"
    );
    let c = ok("0.0.0.0 53/udp 10.0.0.1 53/udp [keepalive=on]\n");
    assert_eq!(
        c.warnings[0].message,
        "option 'keepalive' only applies to TCP backends; ignored on this UDP backend"
    );
}

#[test]
fn typo_hints_for_keywords_and_options() {
    assert_eq!(
        one_error("alow 10.*"),
        "config:1: unknown keyword 'alow' (did you mean 'allow'?): 'alow 10.*'"
    );
    assert_eq!(
        one_error("logfle /var/log/oi.log"),
        "config:1: unknown keyword 'logfle' (did you mean 'logfile'?): 'logfle /var/log/oi.log'"
    );
    assert_eq!(
        one_error("buffersise 4096"),
        "config:1: unknown keyword 'buffersise' (did you mean 'buffersize'?): 'buffersise 4096'"
    );
    assert_eq!(
        one_error("Allow 10.*"),
        "config:1: unknown keyword 'Allow' (keywords are lower case: 'allow'): 'Allow 10.*'"
    );
    assert_eq!(
        one_error("0.0.0.0 80 10.0.0.1 80 [timout=5]"),
        "config:1: unknown option 'timout' (did you mean 'timeout'?): '0.0.0.0 80 10.0.0.1 80 [timout=5]'"
    );
    assert_eq!(
        one_error("0.0.0.0 80 10.0.0.1 80 [timeout=5 src=127.0.0.1]"),
        "config:1: missing comma between options 'timeout=5' and 'src=127.0.0.1': '0.0.0.0 80 10.0.0.1 80 [timeout=5 src=127.0.0.1]'"
    );
    // Nothing close: the rule-shape message as before.
    assert_eq!(
        one_error("frobnicate 10.*"),
        "config:1: expected 'bindaddr bindport connectaddr connectport [options]': 'frobnicate 10.*'"
    );
}

#[test]
fn include_without_a_source_is_an_error() {
    assert_eq!(
        one_error("include other.conf"),
        "config:1: include is not available here (the text has no file to be relative to): 'include other.conf'"
    );
}

/// Parses `main` with in-memory `files`.
fn with_files(main: &str, files: &[(&str, &str)]) -> Result<Config, Vec<String>> {
    let mut source = MemIncludes {
        main: "a.conf".into(),
        files: files
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect(),
    };
    parse_with_includes(main, &mut source).map_err(|e| {
        e.with_file("a.conf")
            .to_string()
            .lines()
            .map(str::to_string)
            .collect()
    })
}

#[test]
fn include_reads_files_in_sorted_order_where_written() {
    let c = with_files(
        "allow 10.*\ninclude conf.d/*.conf\n127.0.0.1 9000 127.0.0.1 90\n",
        &[
            ("conf.d/b.conf", "127.0.0.1 8002 127.0.0.1 82\n"),
            (
                "conf.d/a.conf",
                "# first\n127.0.0.1 8001 127.0.0.1 81\ndeny 10.0.0.9\n",
            ),
            ("other/c.conf", "127.0.0.1 8003 127.0.0.1 83\n"),
        ],
    )
    .expect("valid");
    let ports: Vec<String> = c.rules.iter().map(|r| r.bind.port.to_string()).collect();
    assert_eq!(ports, ["8001", "8002", "9000"]);
    assert_eq!(c.rules[0].file.as_deref(), Some("conf.d/a.conf"));
    assert_eq!(c.rules[0].line, 2);
    assert_eq!(c.rules[0].acl.deny.len(), 1);
    assert_eq!(c.rules[2].file, None);
    assert_eq!(c.global_acl.allow.len(), 1);
    assert_eq!(c.includes.len(), 1);
    assert_eq!(c.includes[0].line, 2);
    let files: Vec<&str> = c.includes[0].files.iter().map(|f| &**f).collect();
    assert_eq!(files, ["conf.d/a.conf", "conf.d/b.conf"]);
}

#[test]
fn include_errors_name_the_included_file_and_line() {
    let e = with_files(
        "include b.conf\n127.0.0.1 8001 127.0.0.1 81\n",
        &[("b.conf", "\nalow 10.*\n127.0.0.1 8001 127.0.0.1 82\n")],
    )
    .expect_err("errors");
    assert_eq!(
        e,
        [
            "b.conf:2: unknown keyword 'alow' (did you mean 'allow'?): 'alow 10.*'",
            "a.conf:2: duplicate listener 127.0.0.1 8001/tcp, first defined at b.conf:3: '127.0.0.1 8001 127.0.0.1 81'"
        ]
    );
    let e = with_files("include missing.conf\n", &[]).expect_err("missing");
    assert_eq!(
        e,
        ["a.conf:1: cannot read included file 'missing.conf': No such file or directory (os error 2): 'include missing.conf'"]
    );
}

#[test]
fn include_cycles_are_reported_with_the_chain() {
    let e =
        with_files("\n\ninclude b.conf\n", &[("b.conf", "include a.conf\n")]).expect_err("cycle");
    assert_eq!(
        e,
        ["b.conf:1: include cycle (circular include): a.conf -> b.conf -> a.conf: 'include a.conf'"]
    );
    let e = with_files("include a.conf\n", &[]).expect_err("self");
    assert_eq!(
        e,
        ["a.conf:1: include cycle (circular include): a.conf -> a.conf: 'include a.conf'"]
    );
    // Long names are cut one by one, so every file of the chain shows.
    let long = format!("{}.conf", "d/".repeat(100));
    let e = with_files(&format!("include {long}\n"), &[(&long, "include a.conf\n")])
        .expect_err("long cycle");
    assert!(e[0].contains("): a.conf -> d/d/"), "{e:?}");
    assert!(e[0].contains("... -> a.conf: 'include a.conf'"), "{e:?}");
}

#[test]
fn include_depth_is_limited() {
    // a.conf includes f0 includes f1 ...: a chain of ten files (the main
    // one and nine levels) is fine, an eleventh is not (as rinetd-uv).
    let files: Vec<(String, String)> = (0..12)
        .map(|i| (format!("f{i}.conf"), format!("include f{}.conf\n", i + 1)))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let e = with_files("include f0.conf\n", &refs).expect_err("too deep");
    assert_eq!(
        e,
        ["f8.conf:1: maximum include depth exceeded (10 files deep, the main file included): 'f9.conf' not read: 'include f9.conf'"]
    );
    let mut shallow = refs.clone();
    shallow[8].1 = "127.0.0.1 8000 127.0.0.1 80\n";
    let c = with_files("include f0.conf\n", &shallow).expect("ten levels");
    assert_eq!(c.rules[0].file.as_deref(), Some("f8.conf"));
}

#[test]
fn include_pattern_matching_nothing_is_a_warning() {
    let c = with_files("include conf.d/*.conf\n", &[]).expect("valid");
    assert_eq!(
        c.warnings[0].message,
        "include pattern 'conf.d/*.conf' matches no files"
    );
    assert_eq!(c.includes[0].files.len(), 0);
}

#[test]
fn include_total_size_is_capped() {
    struct Big;
    impl IncludeSource for Big {
        fn main_file(&self) -> IncludedFile {
            IncludedFile {
                name: "a.conf".into(),
                key: "a".into(),
            }
        }
        fn expand(&mut self, _: &IncludedFile, p: &str) -> Result<Vec<IncludedFile>, String> {
            Ok((0..3)
                .map(|i| IncludedFile {
                    name: format!("{p}{i}"),
                    key: format!("{p}{i}"),
                })
                .collect())
        }
        fn read(&mut self, _: &IncludedFile) -> Result<String, String> {
            // Eight MiB of comments: two fit, the third is over the total.
            Ok("#".repeat(8 * 1024 * 1024 - 100) + "\n")
        }
    }
    let e = parse_with_includes("include big\n", &mut Big).expect_err("too big");
    assert_eq!(
        e.to_string(),
        "config:1: included files exceed 16 MiB (16777216 bytes) in all, the most oi reads: 'big2' not read: 'include big'"
    );
}
