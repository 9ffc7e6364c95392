//! allow/deny patterns: rinetd wildcards or (oi extension) CIDR blocks.

use crate::{Pattern, PatternKind, Shown};
use std::net::IpAddr;

/// Parses the pattern of an `allow` or `deny` line.
///
/// One pair of enclosing brackets is removed (`[::1]` means `::1`; rinetd
/// accepts the brackets but then never matches).
pub fn parse_pattern(written: &str) -> Result<Pattern, String> {
    let text = written
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(written);
    if let Some((addr, len)) = text.split_once('/') {
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("invalid CIDR address '{}'", Shown(addr)))?;
        let max: u8 = if net.is_ipv4() { 32 } else { 128 };
        let prefix = len
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= max && len.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                format!(
                    "invalid prefix length '{}' (0-{max} for {addr})",
                    Shown(len)
                )
            })?;
        return Ok(Pattern {
            text: text.to_string(),
            kind: PatternKind::Cidr { net, prefix },
        });
    }
    let wildcard_char = |b: u8| b.is_ascii_hexdigit() || matches!(b, b'.' | b':' | b'*' | b'?');
    if text.is_empty() || !text.bytes().all(wildcard_char) {
        return Err(format!(
            "invalid pattern '{}' (expected an address with * and ? wildcards, or a CIDR block; host names are not allowed)",
            Shown(written)
        ));
    }
    Ok(Pattern {
        text: text.to_string(),
        kind: PatternKind::Wildcard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wildcard(text: &str) -> Pattern {
        Pattern {
            text: text.into(),
            kind: PatternKind::Wildcard,
        }
    }

    #[test]
    fn wildcards() {
        for p in [
            "127.*",
            "10.0.0.?",
            "*",
            "fe80::*",
            "FE80::1",
            "206.125.69.*",
            "::ffff:10.*",
        ] {
            assert_eq!(parse_pattern(p), Ok(wildcard(p)));
        }
        assert_eq!(parse_pattern("[::1]"), Ok(wildcard("::1")));
    }

    #[test]
    fn cidrs() {
        let p = parse_pattern("10.0.0.0/8").expect("valid");
        assert_eq!(
            p.kind,
            PatternKind::Cidr {
                net: "10.0.0.0".parse().expect("literal"),
                prefix: 8
            }
        );
        assert_eq!(p.text, "10.0.0.0/8");
        let p = parse_pattern("fe80::/10").expect("valid");
        assert_eq!(
            p.kind,
            PatternKind::Cidr {
                net: "fe80::".parse().expect("literal"),
                prefix: 10
            }
        );
        assert!(parse_pattern("0.0.0.0/0").is_ok());
        assert!(parse_pattern("::/128").is_ok());
        assert!(parse_pattern("[::1/128]").is_ok());
    }

    #[test]
    fn errors() {
        let bad = |t: &str| {
            format!("invalid pattern '{t}' (expected an address with * and ? wildcards, or a CIDR block; host names are not allowed)")
        };
        for t in ["localhost", "10.0.0.x", "", "[]", "1.2.3.4,5"] {
            assert_eq!(parse_pattern(t), Err(bad(t)), "{t}");
        }
        assert_eq!(
            parse_pattern("10.0.0.0/33"),
            Err("invalid prefix length '33' (0-32 for 10.0.0.0)".into())
        );
        assert_eq!(
            parse_pattern("::/129"),
            Err("invalid prefix length '129' (0-128 for ::)".into())
        );
        assert_eq!(
            parse_pattern("10.0.0.0/+8"),
            Err("invalid prefix length '+8' (0-32 for 10.0.0.0)".into())
        );
        assert_eq!(
            parse_pattern("10.*/8"),
            Err("invalid CIDR address '10.*'".into())
        );
    }
}
