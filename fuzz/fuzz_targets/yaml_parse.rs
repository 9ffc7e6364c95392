//! Arbitrary bytes through the path `config::load` takes for a `.yaml` file
//! (lossy UTF-8, then `parse_yaml`), then, for what parses, `resolve` with
//! literal addresses only and the `--check` report.
//!
//! Checks: never panics, the error report stays small and shows no raw
//! control characters (as `config_parse`), every error has a line and a
//! column, and every rule has at least one backend whose endpoint is `connect`.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use oi_config::services::Services;
use oi_config::{self as config, Host, MAX_ERRORS};

/// Generous bound on one listed error's bytes (see config_parse.rs).
const MAX_ERROR_BYTES: usize = 2048;

/// A few services, so service-name ports resolve without /etc/services.
const SERVICES: &str = "http 80/tcp www\ndomain 53/tcp\ndomain 53/udp\n";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = match config::parse_yaml(&text) {
        Ok(parsed) => parsed,
        Err(errors) => {
            for e in &errors.errors {
                assert!(e.line >= 1 && e.column >= 1, "{e:?}");
            }
            check_report(&errors.to_string(), errors.errors.len());
            return;
        }
    };
    for rule in &parsed.rules {
        assert!(!rule.backends.is_empty(), "{rule:?}");
        assert!(rule.name.is_some());
    }
    let mut offline = parsed;
    let literal = |h: &Host| matches!(h, Host::Ip(_));
    offline.rules.retain(|r| {
        literal(&r.bind.host)
            && r.backends
                .iter()
                .all(|b| literal(&b.endpoint.host) && b.src.as_ref().is_none_or(literal))
            && r.options.src.as_ref().is_none_or(literal)
    });
    match config::resolve(offline, &Services::parse(SERVICES)) {
        Ok(resolved) => {
            let _ = oi_config::report::report("f.yaml", &resolved);
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
