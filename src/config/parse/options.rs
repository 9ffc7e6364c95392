//! The bracketed options after a forwarding rule: `[timeout=N, src=ADDR, ...]`.

use super::address::parse_host;
use crate::config::bounded::LineErrors;
use crate::config::{RuleOptions, Shown, SpliceMode, MAX_ASSOC_LIMIT, MAX_UDP_TIMEOUT_SECS};
use std::time::Duration;

/// Parses the text between `[` and `]`, adding every problem found to `errors`.
pub(crate) fn parse_options(inner: &str, errors: &mut LineErrors) -> RuleOptions {
    let mut opts = RuleOptions::default();
    for item in inner.split(',') {
        let item = item.trim_matches(|c: char| c.is_ascii_whitespace());
        if item.is_empty() {
            errors.push("empty option".to_string());
            continue;
        }
        let Some((name, value)) = item.split_once('=') else {
            errors.push(format!(
                "malformed option '{}' (expected name=value)",
                Shown(item)
            ));
            continue;
        };
        let name = name.trim_matches(|c: char| c.is_ascii_whitespace());
        let value = value.trim_matches(|c: char| c.is_ascii_whitespace());
        if value.is_empty() {
            errors.push(format!("missing value for option '{}'", Shown(name)));
            continue;
        }
        if let Err(e) = set_option(&mut opts, name, value) {
            errors.push(e);
        }
    }
    opts
}

/// Stores one `name=value` in `opts`, refusing unknown names, bad values and repeats.
fn set_option(opts: &mut RuleOptions, name: &str, value: &str) -> Result<(), String> {
    let duplicate = || format!("duplicate option '{name}'");
    match name {
        "timeout" => {
            // The cap keeps `now + timeout` far from overflowing `Instant`.
            let secs = in_range(value, MAX_UDP_TIMEOUT_SECS).ok_or_else(|| {
                format!(
                    "timeout must be between 1 and {MAX_UDP_TIMEOUT_SECS} seconds, not '{}'",
                    Shown(value)
                )
            })?;
            if opts.timeout.is_some() {
                return Err(duplicate());
            }
            opts.timeout = Some(Duration::from_secs(secs));
        }
        "src" => {
            let host = parse_host(value).map_err(|e| format!("invalid src address: {e}"))?;
            if opts.src.is_some() {
                return Err(duplicate());
            }
            opts.src = Some(host);
        }
        "splice" => {
            let mode: SpliceMode = value.parse()?;
            if opts.splice.is_some() {
                return Err(duplicate());
            }
            opts.splice = Some(mode);
        }
        "maxassoc" => {
            let limit = u64::try_from(MAX_ASSOC_LIMIT).unwrap_or(u64::MAX);
            let n = in_range(value, limit)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    format!(
                        "maxassoc must be between 1 and {MAX_ASSOC_LIMIT}, not '{}'",
                        Shown(value)
                    )
                })?;
            if opts.max_assoc.is_some() {
                return Err(duplicate());
            }
            opts.max_assoc = Some(n);
        }
        _ => return Err(format!("unknown option '{}'", Shown(name))),
    }
    Ok(())
}

/// A decimal integer from 1 to `max`, digits only (no sign, no spaces).
/// Too many digits for a `u64` is simply out of range, never an overflow.
fn in_range(value: &str, max: u64) -> Option<u64> {
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value
        .parse::<u64>()
        .ok()
        .filter(|&n| (1..=max).contains(&n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Host;
    use std::net::{IpAddr, Ipv4Addr};

    fn parse_options(inner: &str) -> (RuleOptions, Vec<String>) {
        let mut errors = LineErrors::default();
        let opts = super::parse_options(inner, &mut errors);
        assert_eq!(errors.more, 0, "tests stay under the per-line cap");
        (opts, errors.kept)
    }

    fn errs(inner: &str) -> Vec<String> {
        parse_options(inner).1
    }

    #[test]
    fn limits_are_accepted() {
        let (o, e) = parse_options("timeout=31536000, maxassoc=1000000");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(o.timeout, Some(Duration::from_secs(MAX_UDP_TIMEOUT_SECS)));
        assert_eq!(o.max_assoc, Some(MAX_ASSOC_LIMIT));
        let (o, e) = parse_options("timeout=1, maxassoc=1");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(o.timeout, Some(Duration::from_secs(1)));
        assert_eq!(o.max_assoc, Some(1));
    }

    #[test]
    fn the_longest_timeout_cannot_overflow_an_instant() {
        // What the UDP code does with it: a deadline from now.
        let now = std::time::Instant::now();
        assert!(now
            .checked_add(Duration::from_secs(MAX_UDP_TIMEOUT_SECS))
            .is_some());
    }

    #[test]
    fn all_options() {
        let (o, e) = parse_options(" timeout = 30 , src=10.0.0.1,splice=off, maxassoc=7 ");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(o.timeout, Some(Duration::from_secs(30)));
        assert_eq!(
            o.src,
            Some(Host::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))))
        );
        assert_eq!(o.splice, Some(SpliceMode::Off));
        assert_eq!(o.max_assoc, Some(7));
        let (o, _) = parse_options("src=[::1],splice=on");
        assert_eq!(o.src, Some(Host::Ip("::1".parse().expect("literal"))));
        assert_eq!(o.splice, Some(SpliceMode::On));
        let (o, _) = parse_options("src=localhost,splice=auto");
        assert_eq!(o.src, Some(Host::Name("localhost".into())));
        assert_eq!(o.splice, Some(SpliceMode::Auto));
    }

    #[test]
    fn errors() {
        assert_eq!(errs("timout=5"), ["unknown option 'timout'"]);
        assert_eq!(errs("TIMEOUT=5"), ["unknown option 'TIMEOUT'"]);
        assert_eq!(errs(""), ["empty option"]);
        assert_eq!(errs("timeout=5,"), ["empty option"]);
        assert_eq!(
            errs("timeout"),
            ["malformed option 'timeout' (expected name=value)"]
        );
        assert_eq!(
            errs("timeout=5 src=1.2.3.4"),
            ["timeout must be between 1 and 31536000 seconds, not '5 src=1.2.3.4'"]
        );
        assert_eq!(errs("src="), ["missing value for option 'src'"]);
        for bad in [
            "0",
            "-1",
            "+5",
            "abc",
            "1.5",
            "31536001",
            "18446744073709551615",
            "99999999999999999999999",
        ] {
            assert_eq!(
                errs(&format!("timeout={bad}")),
                [format!(
                    "timeout must be between 1 and 31536000 seconds, not '{bad}'"
                )]
            );
        }
        for bad in ["0", "1000001", "18446744073709551616", "-3", "x"] {
            assert_eq!(
                errs(&format!("maxassoc={bad}")),
                [format!(
                    "maxassoc must be between 1 and 1000000, not '{bad}'"
                )]
            );
        }
        assert_eq!(
            errs("splice=yes"),
            ["invalid splice mode 'yes' (expected on, off or auto)"]
        );
        assert_eq!(
            errs("src=foo..bar"),
            ["invalid src address: invalid host name 'foo..bar'"]
        );
        assert_eq!(errs("timeout=5,timeout=6"), ["duplicate option 'timeout'"]);
        assert_eq!(errs("src=::1, src=::2"), ["duplicate option 'src'"]);
        assert_eq!(errs("splice=on,splice=on"), ["duplicate option 'splice'"]);
        assert_eq!(
            errs("maxassoc=1,maxassoc=2"),
            ["duplicate option 'maxassoc'"]
        );
        assert_eq!(
            errs("timout=5, splice=maybe"),
            [
                "unknown option 'timout'",
                "invalid splice mode 'maybe' (expected on, off or auto)"
            ]
        );
    }
}
