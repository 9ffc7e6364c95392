//! The control socket's operator requests, beside `request.rs`'s queries:
//! change a backend's admin state or weight, close live connections, reload,
//! show the running configuration. One request line, words split by ASCII
//! whitespace, compared as bytes; every number checked against its range
//! before use. Fuzzed by `fuzz/fuzz_targets/control_request.rs`.
//!
//! ```text
//! backend drain|enable RULE BACKEND
//! backend disable RULE BACKEND [GRACE_MS]
//! backend weight RULE BACKEND N          (0 to 256)
//! close id N | close client ADDR[/BITS] | close rule RULE | close backend RULE BACKEND
//! reload
//! config
//! ```

use std::net::IpAddr;

/// The highest weight `backend weight` takes (haproxy's limit).
pub const MAX_WEIGHT: u16 = 256;

/// The longest grace `backend disable` takes: one year, in milliseconds,
/// as the command line's durations.
pub const MAX_GRACE_MS: u64 = 365 * 24 * 3600 * 1000;

/// What an operator asks of the running oi.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admin<'a> {
    /// Change one backend of one rule.
    Backend {
        /// The rule's name as `oi status` prints it.
        rule: &'a [u8],
        /// The backend's address or name as `oi status` prints it.
        backend: &'a [u8],
        /// What to change.
        change: Change,
    },
    /// Close live connections.
    Close(Which<'a>),
    /// Reload the configuration and answer with the outcome.
    Reload,
    /// The running configuration.
    Config,
}

impl Admin<'_> {
    /// Whether the request changes anything (a read-only socket refuses it).
    pub fn writes(&self) -> bool {
        !matches!(self, Admin::Config)
    }
}

/// A change of a backend's admin state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// No new connections; open ones finish.
    Drain,
    /// No new connections; open ones are closed after `grace_ms`.
    Disable {
        /// How long open connections may run on.
        grace_ms: u64,
    },
    /// Back to the file's state and weight.
    Enable,
    /// This weight instead of the file's, 0 to [`MAX_WEIGHT`].
    Weight(u16),
}

/// Which live connections `close` closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which<'a> {
    /// The one `oi connections` lists with this id.
    Id(u64),
    /// Every one from a client address in this network.
    Client {
        /// The network's address.
        ip: IpAddr,
        /// Its prefix length (32 or 128 for one address).
        bits: u8,
    },
    /// Every one of this rule.
    Rule(&'a [u8]),
    /// Every one of this rule going to this backend.
    Backend {
        /// The rule's name.
        rule: &'a [u8],
        /// The backend's address or name.
        backend: &'a [u8],
    },
}

/// ASCII whitespace-separated words of `line`.
fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
}

/// A whole decimal number of at most 20 digits, or `None`.
fn number(word: &[u8]) -> Option<u64> {
    if word.is_empty() || word.len() > 20 || !word.iter().all(u8::is_ascii_digit) {
        return None;
    }
    word.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// `ADDR` or `ADDR/BITS`, the prefix within the family's length.
fn network(word: &[u8]) -> Option<(IpAddr, u8)> {
    let text = std::str::from_utf8(word).ok()?;
    let (addr, bits) = match text.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (text, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    let most = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => most,
        Some(b) => u8::try_from(number(b.as_bytes())?).ok()?,
    };
    (bits <= most).then_some((ip, bits))
}

/// Reads an operator request line: `None` when its first word is none of
/// `backend`, `close`, `reload`, `config` (a query, or nothing); else the
/// request, or what is wrong with it (the text the client prints).
pub fn admin_request(line: &[u8]) -> Option<Result<Admin<'_>, &'static str>> {
    let mut w = words(line);
    let first = w.next()?;
    let parsed = match first {
        b"backend" => backend(&mut w),
        b"close" => close(&mut w),
        b"reload" => Ok(Admin::Reload),
        b"config" => Ok(Admin::Config),
        _ => return None,
    };
    Some(parsed.and_then(|a| match w.next() {
        None => Ok(a),
        Some(_) => Err("too many words in the request"),
    }))
}

/// The rest of a `backend` request.
fn backend<'a>(w: &mut impl Iterator<Item = &'a [u8]>) -> Result<Admin<'a>, &'static str> {
    const USAGE: &str = "expected `backend drain|disable|enable|weight RULE BACKEND [N]`";
    let verb = w.next().ok_or(USAGE)?;
    let rule = w.next().ok_or(USAGE)?;
    let backend = w.next().ok_or(USAGE)?;
    let change = match verb {
        b"drain" => Change::Drain,
        b"enable" => Change::Enable,
        b"disable" => {
            let grace_ms = match w.next() {
                None => 0,
                Some(g) => number(g)
                    .filter(|&g| g <= MAX_GRACE_MS)
                    .ok_or("the grace must be a number of milliseconds, at most 365 days")?,
            };
            Change::Disable { grace_ms }
        }
        b"weight" => {
            let n = w.next().ok_or("expected a weight, 0 to 256")?;
            let n = number(n)
                .and_then(|n| u16::try_from(n).ok())
                .filter(|&n| n <= MAX_WEIGHT)
                .ok_or("the weight must be a whole number from 0 to 256")?;
            Change::Weight(n)
        }
        _ => return Err(USAGE),
    };
    Ok(Admin::Backend {
        rule,
        backend,
        change,
    })
}

/// The rest of a `close` request.
fn close<'a>(w: &mut impl Iterator<Item = &'a [u8]>) -> Result<Admin<'a>, &'static str> {
    const USAGE: &str = "expected `close id N`, `close client ADDR[/BITS]`, `close rule RULE` or `close backend RULE BACKEND`";
    let which = match w.next().ok_or(USAGE)? {
        b"id" => Which::Id(
            w.next()
                .and_then(number)
                .ok_or("the id must be a whole number, as `oi connections` prints it")?,
        ),
        b"client" => {
            let (ip, bits) = w
                .next()
                .and_then(network)
                .ok_or("the client must be an IP address, or ADDR/BITS")?;
            Which::Client { ip, bits }
        }
        b"rule" => Which::Rule(w.next().ok_or(USAGE)?),
        b"backend" => Which::Backend {
            rule: w.next().ok_or(USAGE)?,
            backend: w.next().ok_or(USAGE)?,
        },
        _ => return Err(USAGE),
    };
    Ok(Admin::Close(which))
}

/// Whether `ip` is in the network `net`/`bits` (an IPv4-mapped IPv6
/// address counts as its IPv4 address, as the ACLs read it).
pub fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(bits.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(bits.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_requests_are_read_with_their_ranges() {
        assert_eq!(
            admin_request(b"backend drain 0.0.0.0:80/tcp 10.0.0.1:8080\n"),
            Some(Ok(Admin::Backend {
                rule: b"0.0.0.0:80/tcp",
                backend: b"10.0.0.1:8080",
                change: Change::Drain
            }))
        );
        assert_eq!(
            admin_request(b"backend disable r b 1500"),
            Some(Ok(Admin::Backend {
                rule: b"r",
                backend: b"b",
                change: Change::Disable { grace_ms: 1500 }
            }))
        );
        assert!(matches!(
            admin_request(b"backend disable r b"),
            Some(Ok(Admin::Backend {
                change: Change::Disable { grace_ms: 0 },
                ..
            }))
        ));
        assert!(matches!(
            admin_request(b"backend weight r b 256"),
            Some(Ok(Admin::Backend {
                change: Change::Weight(256),
                ..
            }))
        ));
        assert!(matches!(
            admin_request(b"backend weight r b 0"),
            Some(Ok(Admin::Backend {
                change: Change::Weight(0),
                ..
            }))
        ));
        for bad in [
            &b"backend weight r b 257"[..],
            b"backend weight r b -1",
            b"backend weight r b 99999999999999999999999",
            b"backend weight r b",
            b"backend disable r b 1e3",
            b"backend disable r b 31536000001",
            b"backend drain r",
            b"backend drain r b extra",
            b"backend stop r b",
            b"backend",
        ] {
            assert!(
                matches!(admin_request(bad), Some(Err(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn close_requests_name_what_they_close() {
        assert_eq!(
            admin_request(b"close id 42"),
            Some(Ok(Admin::Close(Which::Id(42))))
        );
        assert_eq!(
            admin_request(b"close client 10.1.2.3/24"),
            Some(Ok(Admin::Close(Which::Client {
                ip: "10.1.2.3".parse().unwrap(),
                bits: 24
            })))
        );
        assert_eq!(
            admin_request(b"close client ::1"),
            Some(Ok(Admin::Close(Which::Client {
                ip: "::1".parse().unwrap(),
                bits: 128
            })))
        );
        assert_eq!(
            admin_request(b"close rule a:1/tcp"),
            Some(Ok(Admin::Close(Which::Rule(b"a:1/tcp"))))
        );
        assert_eq!(
            admin_request(b"close backend a:1/tcp b:2"),
            Some(Ok(Admin::Close(Which::Backend {
                rule: b"a:1/tcp",
                backend: b"b:2"
            })))
        );
        for bad in [
            &b"close client 10.0.0.1/33"[..],
            b"close client ::1/129",
            b"close client name",
            b"close id x",
            b"close",
            b"close everything",
        ] {
            assert!(matches!(admin_request(bad), Some(Err(_))));
        }
    }

    #[test]
    fn other_lines_are_not_operator_requests() {
        assert_eq!(admin_request(b"status json"), None);
        assert_eq!(admin_request(b""), None);
        assert_eq!(admin_request(b"\xff"), None);
        assert_eq!(admin_request(b"reload\n"), Some(Ok(Admin::Reload)));
        assert_eq!(admin_request(b"config"), Some(Ok(Admin::Config)));
        assert!(matches!(admin_request(b"reload now"), Some(Err(_))));
        assert!(!Admin::Config.writes());
        assert!(Admin::Reload.writes());
    }

    #[test]
    fn networks_match_by_prefix() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(in_network(ip("10.1.2.3"), ip("10.1.2.0"), 24));
        assert!(!in_network(ip("10.1.3.3"), ip("10.1.2.0"), 24));
        assert!(in_network(ip("::ffff:10.1.2.3"), ip("10.1.2.3"), 32));
        assert!(in_network(ip("1.2.3.4"), ip("9.9.9.9"), 0));
        assert!(!in_network(ip("::1"), ip("127.0.0.1"), 0));
        assert!(in_network(ip("::1"), ip("::1"), 128));
    }
}
