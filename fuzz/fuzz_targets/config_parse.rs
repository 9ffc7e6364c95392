//! Arbitrary bytes through the path `config::load` uses (lossy UTF-8, then
//! `parse`), then, for what parses, everything downstream that needs no
//! network: `resolve` with an in-memory services table, the `--check` report
//! and the ACL evaluation.
//!
//! Besides "never panics", it checks the properties the parser promises: the
//! error report stays small whatever the input, shows no raw control
//! characters, and a parsed rule printed canonically parses back the same.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use oi_config::services::Services;
use oi_config::{self as config, Host, MAX_ERRORS};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Generous bound on one listed error's bytes: a constant message, two quoted
/// values and the line, each at most MAX_SHOWN_CHARS characters of up to 4 bytes.
const MAX_ERROR_BYTES: usize = 2048;

/// A few services, so service-name ports resolve without /etc/services.
const SERVICES: &str = "http 80/tcp www\ndomain 53/tcp\ndomain 53/udp\nsnmp-trap 162/udp\n";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = match config::parse(&text) {
        Ok(parsed) => parsed,
        Err(errors) => {
            check_report(&errors.to_string(), errors.errors.len());
            return;
        }
    };
    for w in &parsed.warnings {
        let shown = oi_config::report::format_warning("f.conf", w);
        check_report(&shown, 1);
    }
    for rule in &parsed.rules {
        // The canonical form (what `--check` and error texts print) parses
        // back to the same rule.
        let canonical = rule.to_string();
        match config::parse(&canonical) {
            Ok(again) => {
                assert_eq!(again.rules.len(), 1, "{canonical}");
                assert_eq!(again.rules[0].bind.host, rule.bind.host, "{canonical}");
                assert_eq!(again.rules[0].bind.port, rule.bind.port, "{canonical}");
                assert_eq!(again.rules[0].bind.proto, rule.bind.proto, "{canonical}");
                assert_eq!(
                    again.rules[0].connect().host,
                    rule.connect().host,
                    "{canonical}"
                );
                assert_eq!(
                    again.rules[0].connect().port,
                    rule.connect().port,
                    "{canonical}"
                );
                assert_eq!(
                    again.rules[0].connect().proto,
                    rule.connect().proto,
                    "{canonical}"
                );
                assert_eq!(again.rules[0].options, rule.options, "{canonical}");
            }
            Err(e) => panic!("canonical form {canonical:?} does not parse: {e}"),
        }
        let clients = [
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped()),
        ];
        for c in clients {
            let _ = oi_config::acl::check(&parsed.global_acl, &rule.acl, c);
        }
    }
    // Host names would go to DNS: slow, and not what is being fuzzed. Keep
    // the rules with literal addresses only.
    let mut offline = parsed;
    let literal = |h: &Host| matches!(h, Host::Ip(_));
    offline.rules.retain(|r| {
        literal(&r.bind.host)
            && literal(&r.connect().host)
            && r.options.src.as_ref().is_none_or(literal)
    });
    match config::resolve(offline, &Services::parse(SERVICES)) {
        Ok(resolved) => {
            let _ = oi_config::report::report("f.conf", &resolved);
        }
        Err(errors) => check_report(&errors.to_string(), errors.errors.len()),
    }
});

/// An error report is small and shows no raw control characters.
fn check_report(report: &str, listed: usize) {
    assert!(listed <= MAX_ERRORS, "{listed} errors listed");
    assert!(
        report.len() <= (MAX_ERRORS + 1) * MAX_ERROR_BYTES,
        "{} bytes of errors",
        report.len()
    );
    for line in report.lines() {
        assert!(
            line.len() <= MAX_ERROR_BYTES,
            "{} bytes: {line:?}",
            line.len()
        );
        assert!(
            !line.chars().any(char::is_control),
            "control character shown: {line:?}"
        );
    }
}
