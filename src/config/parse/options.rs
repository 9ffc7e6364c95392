//! The bracketed options after a forwarding rule: `[timeout=N, src=ADDR, ...]`.

use super::address::parse_host;
use crate::config::{RuleOptions, SpliceMode};
use std::time::Duration;

/// Parses the text between `[` and `]`. Returns the options and every problem found.
pub(crate) fn parse_options(inner: &str) -> (RuleOptions, Vec<String>) {
    let mut opts = RuleOptions::default();
    let mut errors = Vec::new();
    for item in inner.split(',') {
        let item = item.trim_matches(|c: char| c.is_ascii_whitespace());
        if item.is_empty() {
            errors.push("empty option".to_string());
            continue;
        }
        let Some((name, value)) = item.split_once('=') else {
            errors.push(format!("malformed option '{item}' (expected name=value)"));
            continue;
        };
        let name = name.trim_matches(|c: char| c.is_ascii_whitespace());
        let value = value.trim_matches(|c: char| c.is_ascii_whitespace());
        if value.is_empty() {
            errors.push(format!("missing value for option '{name}'"));
            continue;
        }
        if let Err(e) = set_option(&mut opts, name, value) {
            errors.push(e);
        }
    }
    (opts, errors)
}

/// Stores one `name=value` in `opts`, refusing unknown names, bad values and repeats.
fn set_option(opts: &mut RuleOptions, name: &str, value: &str) -> Result<(), String> {
    let duplicate = || format!("duplicate option '{name}'");
    match name {
        "timeout" => {
            let secs = positive(value).ok_or_else(|| {
                format!("invalid timeout '{value}' (expected whole seconds, 1 or more)")
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
            let n = positive(value)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    format!("invalid maxassoc '{value}' (expected a whole number, 1 or more)")
                })?;
            if opts.max_assoc.is_some() {
                return Err(duplicate());
            }
            opts.max_assoc = Some(n);
        }
        _ => return Err(format!("unknown option '{name}'")),
    }
    Ok(())
}

/// A decimal integer of 1 or more, digits only (no sign, no spaces).
fn positive(value: &str) -> Option<u64> {
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse::<u64>().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Host;
    use std::net::{IpAddr, Ipv4Addr};

    fn errs(inner: &str) -> Vec<String> {
        parse_options(inner).1
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
            ["invalid timeout '5 src=1.2.3.4' (expected whole seconds, 1 or more)"]
        );
        assert_eq!(errs("src="), ["missing value for option 'src'"]);
        for bad in ["0", "-1", "abc", "1.5", "99999999999999999999999"] {
            assert_eq!(
                errs(&format!("timeout={bad}")),
                [format!(
                    "invalid timeout '{bad}' (expected whole seconds, 1 or more)"
                )]
            );
        }
        assert_eq!(
            errs("maxassoc=0"),
            ["invalid maxassoc '0' (expected a whole number, 1 or more)"]
        );
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
