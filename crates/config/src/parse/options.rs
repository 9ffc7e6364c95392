//! The bracketed options after a forwarding rule: `[timeout=N, src=ADDR, ...]`.

use crate::bounded::LineErrors;
use crate::hint::suggestion;
use crate::settings::{self, Syntax};
use crate::{RuleOptions, Shown};
#[cfg(test)]
use crate::{SpliceMode, MAX_ASSOC_LIMIT, MAX_UDP_TIMEOUT_SECS};
#[cfg(test)]
use std::time::Duration;

/// Parses the text between `[` and `]`, adding every problem found to `errors`.
pub fn parse_options(inner: &str, errors: &mut LineErrors) -> RuleOptions {
    let mut opts = RuleOptions::default();
    for item in inner.split(',') {
        let item = item.trim_matches(|c: char| c.is_ascii_whitespace());
        if item.is_empty() {
            errors.push("empty option".to_string());
            continue;
        }
        // A switch written alone (`accept-proxy`, `transparent`) means `=on`.
        let switched;
        let item = if is_switch(item) {
            switched = format!("{item}=on");
            switched.as_str()
        } else {
            item
        };
        let Some((name, value)) = item.split_once('=') else {
            errors.push(format!(
                "malformed option '{}' (expected name=value)",
                Shown(item)
            ));
            continue;
        };
        let name = name.trim_matches(|c: char| c.is_ascii_whitespace());
        let value = value.trim_matches(|c: char| c.is_ascii_whitespace());
        // `timeout=5 src=1.2.3.4`: two options with the comma left out.
        if let Some((first, next)) = value.split_once(|c: char| c.is_ascii_whitespace()) {
            let next = next.trim_start_matches(|c: char| c.is_ascii_whitespace());
            if next.contains('=') {
                let next = next
                    .split(|c: char| c.is_ascii_whitespace())
                    .next()
                    .unwrap_or(next);
                errors.push(format!(
                    "missing comma between options '{}={}' and '{}'",
                    Shown(name),
                    Shown(first),
                    Shown(next)
                ));
                continue;
            }
        }
        if value.is_empty() {
            errors.push(format!("missing value for option '{}'", Shown(name)));
            continue;
        }
        if let Err(e) = set_option(&mut opts, name, value, errors.listing()) {
            errors.push(e);
        }
    }
    opts
}

/// Whether `item` is the name of an on/off rule option, which written
/// alone means on (`[accept-proxy]`, `[transparent]`; `[mptcp]`, whose
/// other values name one side).
fn is_switch(item: &str) -> bool {
    item == "mptcp"
        || settings::rule_option(item).is_some_and(|s| matches!(s.value, settings::Value::Switch))
}

/// Stores one `name=value` in `opts`, refusing unknown names, bad values
/// and repeats; the table ([`settings`]) says how each value is read. An
/// unknown name gets a "did you mean" hint only when `hint` (the error is
/// listed, not only counted).
fn set_option(opts: &mut RuleOptions, name: &str, value: &str, hint: bool) -> Result<(), String> {
    let Some(setting) = settings::rule_option(name) else {
        let hint = if hint {
            suggestion(name, &settings::rule_option_names())
        } else {
            String::new()
        };
        return Err(format!("unknown option '{}'{hint}", Shown(name)));
    };
    let Some(slot) = setting.rule else {
        return Err(format!("unknown option '{}'", Shown(name)));
    };
    // Parsed into a scratch copy first: a bad value is reported before a repeat.
    let mut parsed = RuleOptions::default();
    settings::store(setting, slot(&mut parsed), Syntax::Conf, name, value)?;
    if settings::store(setting, slot(opts), Syntax::Conf, name, value)? {
        return Err(format!("duplicate option '{name}'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Host;
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
    fn rinetd_uv_options() {
        let (o, e) = parse_options("keepalive=off, connect-timeout=5, dns-refresh=0, mode=0660");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(o.keepalive, Some(false));
        assert_eq!(o.connect_timeout, Some(Duration::from_secs(5)));
        assert_eq!(o.dns_refresh, Some(Duration::ZERO));
        assert_eq!(o.mode, Some(0o660));
        let (o, e) =
            parse_options("keepalive=on,connect-timeout=86400,dns-refresh=604800,mode=7777");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(o.keepalive, Some(true));
        assert_eq!(o.mode, Some(0o7777));
        assert_eq!(
            errs("keepalive=yes"),
            ["keepalive must be on or off, not 'yes'"]
        );
        assert_eq!(
            errs("connect-timeout=86401"),
            ["connect-timeout must be between 0 and 86400 seconds, not '86401'"]
        );
        assert_eq!(
            errs("dns-refresh=-1"),
            ["dns-refresh must be between 0 and 604800 seconds, not '-1'"]
        );
        for bad in ["0680", "17777", "rw", "", "0x1ff"] {
            let e = errs(&format!("mode={bad}"));
            if bad.is_empty() {
                assert_eq!(e, ["missing value for option 'mode'"]);
            } else {
                assert_eq!(
                    e,
                    [format!(
                        "mode must be an octal file mode from 0 to 7777, not '{bad}'"
                    )]
                );
            }
        }
        assert_eq!(
            errs("keepalive=on,keepalive=off"),
            ["duplicate option 'keepalive'"]
        );
        assert_eq!(
            errs("conect-timeout=5"),
            ["unknown option 'conect-timeout' (did you mean 'connect-timeout'?)"]
        );
        assert_eq!(
            errs("dns_refresh=5"),
            ["unknown option 'dns_refresh' (did you mean 'dns-refresh'?)"]
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            errs("timout=5"),
            ["unknown option 'timout' (did you mean 'timeout'?)"]
        );
        assert_eq!(errs("TIMEOUT=5"), ["unknown option 'TIMEOUT'"]);
        assert_eq!(errs("colour=red"), ["unknown option 'colour'"]);
        assert_eq!(errs(""), ["empty option"]);
        assert_eq!(errs("timeout=5,"), ["empty option"]);
        assert_eq!(
            errs("timeout"),
            ["malformed option 'timeout' (expected name=value)"]
        );
        assert_eq!(
            errs("timeout=5 src=1.2.3.4"),
            ["missing comma between options 'timeout=5' and 'src=1.2.3.4'"]
        );
        assert_eq!(
            errs("timeout=5  keepalive=off src=::1, splice=on"),
            ["missing comma between options 'timeout=5' and 'keepalive=off'"]
        );
        assert_eq!(
            errs("timeout=5 6"),
            ["timeout must be between 1 and 31536000 seconds, not '5 6'"]
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
                "unknown option 'timout' (did you mean 'timeout'?)",
                "invalid splice mode 'maybe' (expected on, off or auto)"
            ]
        );
    }
}
