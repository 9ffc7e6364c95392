//! Hosts and ports as written in forwarding rules.

use crate::{Host, Port, Proto, Shown};
use std::net::{IpAddr, Ipv6Addr};

/// Parses a host field: IPv4, IPv6 (bare or in brackets) or a host name.
///
/// Host names are only checked for syntax; they are resolved later.
pub fn parse_host(text: &str) -> Result<Host, String> {
    if let Some(inner) = text.strip_prefix('[') {
        return match inner.strip_suffix(']').map(str::parse::<Ipv6Addr>) {
            Some(Ok(ip)) => Ok(Host::Ip(IpAddr::V6(ip))),
            _ => Err(format!("invalid IPv6 address '{}'", Shown(text))),
        };
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    if text.contains(':') {
        return Err(format!("invalid IPv6 address '{}'", Shown(text)));
    }
    if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("invalid IPv4 address '{}'", Shown(text)));
    }
    if is_host_name(text) {
        Ok(Host::Name(text.into()))
    } else {
        Err(format!("invalid host name '{}'", Shown(text)))
    }
}

/// True for a syntactically valid DNS name: dot-separated labels of letters,
/// digits, `-` and `_`, none empty (one trailing dot allowed), none starting or
/// ending with `-`, at most 63 bytes each and 253 in all.
fn is_host_name(text: &str) -> bool {
    let name = text.strip_suffix('.').unwrap_or(text);
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// Parses a port field: a number or service name with an optional `/tcp` or `/udp`.
pub fn parse_port(text: &str) -> Result<(Port, Proto), String> {
    let (port, proto) = match text.split_once('/') {
        None => (text, Proto::Tcp),
        Some((port, "tcp")) => (port, Proto::Tcp),
        Some((port, "udp")) => (port, Proto::Udp),
        Some((_, other)) => {
            return Err(format!(
                "unknown protocol '{}' (expected tcp or udp)",
                Shown(other)
            ));
        }
    };
    if port.is_empty() {
        return Err(format!("missing port number in '{}'", Shown(text)));
    }
    if port.bytes().all(|b| b.is_ascii_digit()) {
        return match port.parse::<u16>() {
            Ok(n) if n > 0 => Ok((Port::Number(n), proto)),
            _ => Err(format!("port out of range (1-65535) '{}'", Shown(port))),
        };
    }
    if is_service_name(port) {
        Ok((Port::Service(port.to_string()), proto))
    } else {
        Err(format!("invalid port '{}'", Shown(port)))
    }
}

/// True for a plausible /etc/services name: starts with a letter, then
/// letters, digits, `-`, `_`, `.` or `+`.
fn is_service_name(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn hosts() {
        assert_eq!(
            parse_host("10.0.0.1"),
            Ok(Host::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))))
        );
        assert_eq!(
            parse_host("0.0.0.0"),
            Ok(Host::Ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
        );
        for v6 in ["::1", "::", "fe80::1", "[::1]", "[fe80::1]", "[::]"] {
            let bare = v6.trim_matches(['[', ']']);
            let want: Ipv6Addr = bare.parse().expect("test address");
            assert_eq!(parse_host(v6), Ok(Host::Ip(IpAddr::V6(want))), "{v6}");
        }
        for name in ["localhost", "a_b", "db-1.example.com", "example.com.", "x"] {
            assert_eq!(parse_host(name), Ok(Host::Name(name.into())), "{name}");
        }
    }

    #[test]
    fn bad_hosts() {
        let cases = [
            ("10.0.0.300", "invalid IPv4 address '10.0.0.300'"),
            ("127.1", "invalid IPv4 address '127.1'"),
            ("fe80::1%eth0", "invalid IPv6 address 'fe80::1%eth0'"),
            ("[::1", "invalid IPv6 address '[::1'"),
            ("[1.2.3.4]", "invalid IPv6 address '[1.2.3.4]'"),
            ("[nope]", "invalid IPv6 address '[nope]'"),
            ("foo..bar", "invalid host name 'foo..bar'"),
            ("-x", "invalid host name '-x'"),
            ("x-", "invalid host name 'x-'"),
            ("a/b", "invalid host name 'a/b'"),
            ("é.com", "invalid host name 'é.com'"),
        ];
        for (text, msg) in cases {
            assert_eq!(parse_host(text), Err(msg.to_string()), "{text}");
        }
        let long = "a".repeat(64);
        assert!(parse_host(&long).is_err());
    }

    #[test]
    fn ports() {
        assert_eq!(parse_port("80"), Ok((Port::Number(80), Proto::Tcp)));
        assert_eq!(parse_port("80/tcp"), Ok((Port::Number(80), Proto::Tcp)));
        assert_eq!(parse_port("53/udp"), Ok((Port::Number(53), Proto::Udp)));
        assert_eq!(parse_port("65535"), Ok((Port::Number(65535), Proto::Tcp)));
        assert_eq!(
            parse_port("http"),
            Ok((Port::Service("http".into()), Proto::Tcp))
        );
        assert_eq!(
            parse_port("snmp-trap/udp"),
            Ok((Port::Service("snmp-trap".into()), Proto::Udp))
        );
    }

    #[test]
    fn bad_ports() {
        let cases = [
            ("0", "port out of range (1-65535) '0'"),
            ("70000", "port out of range (1-65535) '70000'"),
            (
                "99999999999999999999",
                "port out of range (1-65535) '99999999999999999999'",
            ),
            ("80/UDP", "unknown protocol 'UDP' (expected tcp or udp)"),
            ("80/sctp", "unknown protocol 'sctp' (expected tcp or udp)"),
            ("80/", "unknown protocol '' (expected tcp or udp)"),
            ("/udp", "missing port number in '/udp'"),
            ("-80", "invalid port '-80'"),
            ("8a", "invalid port '8a'"),
        ];
        for (text, msg) in cases {
            assert_eq!(parse_port(text), Err(msg.to_string()), "{text}");
        }
    }
}
