//! Access control with rinetd's evaluation order, allocation-free (it runs per connection).

use crate::{AclRules, Pattern, PatternKind};
use std::cell::OnceCell;
use std::fmt::Write;
use std::net::{IpAddr, Ipv6Addr};

/// The outcome of checking a client against the ACLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Forward the connection.
    Allowed,
    /// Allow patterns exist and none matched (logged as `not-allowed`).
    NotAllowed,
    /// A deny pattern matched (logged as `denied`).
    Denied,
}

/// Checks `client` against the global and the rule's ACLs, in rinetd's order:
/// global allow, global deny, rule allow, rule deny.
///
/// An IPv4-mapped IPv6 client (`::ffff:10.0.0.1`, as seen on a dual-stack
/// listener) is matched as IPv4; wildcard patterns also match its mapped text.
pub fn check(global: &AclRules, rule: &AclRules, client: IpAddr) -> Verdict {
    let client = Client::new(client);
    for acl in [global, rule] {
        if !acl.allow.is_empty() && !acl.allow.iter().any(|p| client.matches(p)) {
            return Verdict::NotAllowed;
        }
        if acl.deny.iter().any(|p| client.matches(p)) {
            return Verdict::Denied;
        }
    }
    Verdict::Allowed
}

/// True when `pattern` matches `client` (with the IPv4-mapped rule of [`check`]).
pub fn matches(pattern: &Pattern, client: IpAddr) -> bool {
    Client::new(client).matches(pattern)
}

/// Longest address text: `ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255` is 45 bytes.
const TEXT_MAX: usize = 48;

/// An address formatted into a stack buffer.
struct AddrText {
    /// The formatted bytes; only `len` of them are used.
    buf: [u8; TEXT_MAX],
    /// How many bytes of `buf` hold the text.
    len: usize,
}

impl AddrText {
    /// Formats `ip` as `std` displays it (dotted IPv4, RFC 5952 IPv6).
    fn new(ip: IpAddr) -> Self {
        let mut t = AddrText {
            buf: [0; TEXT_MAX],
            len: 0,
        };
        // Cannot fail: every address fits in TEXT_MAX bytes.
        let _ = write!(t, "{ip}");
        t
    }

    /// The text written so far.
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Write for AddrText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dest = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dest.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// A client address prepared for matching.
struct Client {
    /// The address as it arrived.
    original: IpAddr,
    /// IPv4 for an IPv4-mapped IPv6 address, otherwise `original`.
    canonical: IpAddr,
    /// Text of `canonical`, for wildcard patterns: formatted at the first
    /// one, since a rule without wildcards (or without ACLs: most rules)
    /// needs none, and formatting was about 1,000 instructions per
    /// connection (callgrind, `benches/rtt_instructions.sh`).
    text: OnceCell<AddrText>,
    /// Text of `original` when it differs (mapped clients), for patterns
    /// written as `::ffff:*`; formatted as `text` is.
    original_text: OnceCell<Option<AddrText>>,
}

impl Client {
    /// The address and its IPv4 form, if mapped; each text is formatted at
    /// most once per check, when a wildcard pattern first needs it.
    fn new(original: IpAddr) -> Self {
        let canonical = match original {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(original, IpAddr::V4),
            IpAddr::V4(_) => original,
        };
        Client {
            original,
            canonical,
            text: OnceCell::new(),
            original_text: OnceCell::new(),
        }
    }

    /// Whether one pattern matches this client.
    fn matches(&self, pattern: &Pattern) -> bool {
        match pattern.kind {
            PatternKind::Wildcard => {
                let p = pattern.text.as_bytes();
                let text = self.text.get_or_init(|| AddrText::new(self.canonical));
                let original_text = || {
                    self.original_text
                        .get_or_init(|| {
                            (self.canonical != self.original).then(|| AddrText::new(self.original))
                        })
                        .as_ref()
                };
                wildcard(p, text.as_bytes())
                    || original_text().is_some_and(|t| wildcard(p, t.as_bytes()))
            }
            PatternKind::Cidr { net, prefix } => match (net, self.canonical) {
                (IpAddr::V4(n), IpAddr::V4(c)) => prefix_eq(
                    u128::from(u32::from(n)) << 96,
                    u128::from(u32::from(c)) << 96,
                    prefix,
                ),
                (IpAddr::V6(n), _) => {
                    let c: Ipv6Addr = match self.original {
                        IpAddr::V6(c) => c,
                        IpAddr::V4(c) => c.to_ipv6_mapped(),
                    };
                    prefix_eq(u128::from(n), u128::from(c), prefix)
                }
                (IpAddr::V4(_), IpAddr::V6(_)) => false,
            },
        }
    }
}

/// True when the top `prefix` bits of `a` and `b` are equal (both left-aligned in 128 bits).
fn prefix_eq(a: u128, b: u128, prefix: u8) -> bool {
    match prefix {
        0 => true,
        p if p >= 128 => a == b,
        p => (a ^ b) >> (128 - u32::from(p)) == 0,
    }
}

/// rinetd's glob: `?` matches one character, `*` any run (including none).
/// ASCII case-insensitive, so `FE80::*` matches `fe80::1`.
pub fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it currently absorbs up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c.eq_ignore_ascii_case(&text[t]) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(text: &str) -> Pattern {
        let kind = match text.split_once('/') {
            Some((net, len)) => PatternKind::Cidr {
                net: net.parse().expect("test net"),
                prefix: len.parse().expect("test prefix"),
            },
            None => PatternKind::Wildcard,
        };
        Pattern {
            text: text.into(),
            kind,
        }
    }

    fn acl(allow: &[&str], deny: &[&str]) -> AclRules {
        AclRules {
            allow: allow.iter().map(|t| pat(t)).collect(),
            deny: deny.iter().map(|t| pat(t)).collect(),
            trust_proxy: Vec::new(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    fn m(p: &str, client: &str) -> bool {
        matches(&pat(p), ip(client))
    }

    #[test]
    fn glob() {
        assert!(wildcard(b"*", b""));
        assert!(wildcard(b"", b""));
        assert!(!wildcard(b"", b"a"));
        assert!(wildcard(b"a*b*c", b"aXXbYYc"));
        assert!(wildcard(b"a*b*c", b"abc"));
        assert!(!wildcard(b"a*b*c", b"acb"));
        assert!(wildcard(b"*.1", b"10.0.0.1"));
        assert!(!wildcard(b"*.1", b"10.0.0.10"));
        assert!(wildcard(b"1?.*", b"10.0.0.1"));
        assert!(!wildcard(b"1?.*", b"1.0.0.1"));
        assert!(wildcard(b"**", b"x"));
        assert!(wildcard(b"a*a*a", b"aaaaaaa"));
        assert!(!wildcard(b"a*a*b", b"aaaaaaa"));
    }

    #[test]
    fn wildcard_patterns() {
        assert!(m("206.125.69.*", "206.125.69.81"));
        assert!(!m("206.125.69.*", "206.125.70.81"));
        assert!(m("10.0.0.?", "10.0.0.7"));
        assert!(!m("10.0.0.?", "10.0.0.17"));
        assert!(m("127.0.0.1", "127.0.0.1"));
        assert!(!m("127.0.0.1", "127.0.0.10"));
        assert!(m("*", "::1"));
        assert!(m("fe80::*", "fe80::1"));
        assert!(m("FE80::*", "fe80::abcd"));
        assert!(m("::1", "::1"));
        assert!(!m("::1", "::2"));
    }

    #[test]
    fn ipv4_mapped_clients_match_as_ipv4() {
        assert!(m("127.*", "::ffff:127.0.0.1"));
        assert!(m("127.0.0.0/8", "::ffff:127.0.0.1"));
        assert!(!m("10.0.0.0/8", "::ffff:127.0.0.1"));
        // Patterns written for rinetd's view of mapped clients still match.
        assert!(m("::ffff:127.*", "::ffff:127.0.0.1"));
        assert!(m("::ffff:0:0/96", "::ffff:127.0.0.1"));
        assert!(m("::ffff:0:0/96", "127.0.0.1"));
        assert!(!m("::1", "127.0.0.1"));
    }

    #[test]
    fn cidr_patterns() {
        assert!(m("10.0.0.0/8", "10.255.1.2"));
        assert!(!m("10.0.0.0/8", "11.0.0.1"));
        assert!(m("0.0.0.0/0", "1.2.3.4"));
        assert!(!m("0.0.0.0/0", "::1"));
        assert!(m("10.1.2.3/32", "10.1.2.3"));
        assert!(!m("10.1.2.3/32", "10.1.2.4"));
        assert!(m("10.1.2.99/24", "10.1.2.3"), "host bits are ignored");
        assert!(m("192.168.0.0/23", "192.168.1.200"));
        assert!(!m("192.168.0.0/23", "192.168.2.1"));
        assert!(m("fe80::/10", "febf::1"));
        assert!(!m("fe80::/10", "fec0::1"));
        assert!(m("::/0", "2001:db8::1"));
        assert!(m("::1/128", "::1"));
        assert!(!m("::1/128", "::2"));
        assert!(!m("fe80::/10", "10.0.0.1"));
    }

    #[test]
    fn rinetd_order() {
        let none = AclRules::default();
        let c = ip("10.0.0.9");
        assert_eq!(check(&none, &none, c), Verdict::Allowed);
        // Global allow present, not matched.
        assert_eq!(check(&acl(&["127.*"], &[]), &none, c), Verdict::NotAllowed);
        // Global allow matched, global deny matched.
        assert_eq!(
            check(&acl(&["10.*"], &["10.0.0.9"]), &none, c),
            Verdict::Denied
        );
        // Global allow not matched wins over a deny match (allow is checked first).
        assert_eq!(
            check(&acl(&["127.*"], &["10.*"]), &none, c),
            Verdict::NotAllowed
        );
        // Global deny beats a rule allow.
        assert_eq!(
            check(&acl(&[], &["10.*"]), &acl(&["10.0.0.9"], &[]), c),
            Verdict::Denied
        );
        // Rule allow not matched.
        assert_eq!(
            check(&none, &acl(&["192.168.*"], &[]), c),
            Verdict::NotAllowed
        );
        // Rule allow matched, rule deny matched.
        assert_eq!(check(&none, &acl(&["10.*"], &["*.9"]), c), Verdict::Denied);
        // Rule deny only.
        assert_eq!(
            check(&none, &acl(&[], &["10.0.0.0/24"]), c),
            Verdict::Denied
        );
        assert_eq!(
            check(&none, &acl(&[], &["10.0.1.0/24"]), c),
            Verdict::Allowed
        );
        // Everything passes.
        assert_eq!(
            check(
                &acl(&["10.*", "127.*"], &["10.0.0.1"]),
                &acl(&["10.0.0.0/8"], &["10.0.0.8"]),
                c
            ),
            Verdict::Allowed
        );
        // Dual-stack listener: the mapped client passes an IPv4 allow.
        assert_eq!(
            check(&acl(&["127.*"], &[]), &none, ip("::ffff:127.0.0.1")),
            Verdict::Allowed
        );
    }

    #[test]
    fn longest_text_fits() {
        let t = AddrText::new(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
        assert_eq!(t.as_bytes(), b"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
        let t = AddrText::new(ip("255.255.255.255"));
        assert_eq!(t.as_bytes(), b"255.255.255.255");
    }
}
