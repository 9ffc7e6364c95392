//! The one-value global lines rinetd-uv added: `buffersize 65536`,
//! `connect-timeout 10`, `dns-multi-ip-proto any`, ...

use crate::config::{
    Globals, IpFilter, Shown, StatusFormat, MAX_ASSOC_LIMIT, MAX_CONNECT_TIMEOUT_SECS,
    MAX_DNS_REFRESH_SECS,
};
use std::time::Duration;

/// The global keywords this module parses (each takes one value).
pub(crate) const GLOBAL_KEYWORDS: [&str; 17] = [
    "maxconn",
    "metrics",
    "buffersize",
    "connect-timeout",
    "dns-refresh",
    "dns-multi-ip-expand",
    "dns-multi-ip-proto",
    "listen-backlog",
    "max-udp-connections",
    "pool-min-free",
    "pool-max-free",
    "pool-trim-delay",
    "statusinterval",
    "statusformat",
    "statsloginterval",
    "user",
    "group",
];

/// Smallest and largest `buffersize` (as rinetd-uv).
pub(crate) const BUFFER_SIZE_RANGE: (u64, u64) = (1024, 1024 * 1024);

/// Stores `word value` in `globals`. Returns whether the keyword was set
/// before (the caller warns), or the message for a bad value.
pub(crate) fn set_global(globals: &mut Globals, word: &str, value: &str) -> Result<bool, String> {
    let secs = |min, max| seconds(word, value, min, max);
    let repeated = match word {
        "buffersize" => {
            let (min, max) = BUFFER_SIZE_RANGE;
            let n = bounded(word, value, min, max, "")?;
            globals.buffer_size.replace(n as usize).is_some()
        }
        "connect-timeout" => globals
            .connect_timeout
            .replace(secs(0, MAX_CONNECT_TIMEOUT_SECS)?)
            .is_some(),
        "dns-refresh" => globals
            .dns_refresh
            .replace(secs(0, MAX_DNS_REFRESH_SECS)?)
            .is_some(),
        "dns-multi-ip-expand" => globals
            .dns_multi_ip_expand
            .replace(on_off(word, value)?)
            .is_some(),
        "dns-multi-ip-proto" => {
            let filter = match value {
                "ipv4" => IpFilter::Ipv4,
                "ipv6" => IpFilter::Ipv6,
                "any" => IpFilter::Any,
                _ => {
                    return Err(format!(
                        "{word} must be ipv4, ipv6 or any, not '{}'",
                        Shown(value)
                    ))
                }
            };
            globals.dns_multi_ip_proto.replace(filter).is_some()
        }
        "listen-backlog" => {
            let n = bounded(word, value, 1, 65_535, "")?;
            globals.listen_backlog.replace(n as u32).is_some()
        }
        "max-udp-connections" => {
            let n = bounded(word, value, 1, MAX_ASSOC_LIMIT as u64, "")?;
            globals.max_udp_connections.replace(n as usize).is_some()
        }
        "pool-min-free" => {
            let n = bounded(word, value, 0, 10_000, "")?;
            globals.pool_min_free.replace(n as u32).is_some()
        }
        "pool-max-free" => {
            let n = bounded(word, value, 1, 100_000, "")?;
            globals.pool_max_free.replace(n as u32).is_some()
        }
        "pool-trim-delay" => {
            let n = bounded(word, value, 100, 300_000, " milliseconds")?;
            globals
                .pool_trim_delay
                .replace(Duration::from_millis(n))
                .is_some()
        }
        "statusinterval" => globals.status_interval.replace(secs(1, 86_400)?).is_some(),
        "statusformat" => {
            let format = match value {
                "json" => StatusFormat::Json,
                "text" => StatusFormat::Text,
                _ => {
                    return Err(format!(
                        "{word} must be json or text, not '{}'",
                        Shown(value)
                    ))
                }
            };
            globals.status_format.replace(format).is_some()
        }
        "statsloginterval" => globals
            .stats_log_interval
            .replace(secs(0, 86_400)?)
            .is_some(),
        "maxconn" => {
            let max = u64::try_from(crate::config::MAX_ASSOC_LIMIT).unwrap_or(u64::MAX);
            let n = bounded(word, value, 1, max, "")?;
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            globals.max_connections.replace(n).is_some()
        }
        "metrics" => {
            let addr: std::net::SocketAddr = value.parse().map_err(|_| {
                format!(
                    "metrics needs an address and port such as 127.0.0.1:9465 or [::1]:9465, not '{}'",
                    Shown(value)
                )
            })?;
            globals.metrics.replace(addr).is_some()
        }
        "user" => globals.user.replace(value.to_string()).is_some(),
        "group" => globals.group.replace(value.to_string()).is_some(),
        _ => return Err(format!("unknown keyword '{}'", Shown(word))),
    };
    Ok(repeated)
}

/// `on` or `off`, as rinetd-uv spells switches in rinetd.conf.
pub(crate) fn on_off(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{name} must be on or off, not '{}'", Shown(value))),
    }
}

/// A whole number of seconds from `min` to `max`.
pub(crate) fn seconds(name: &str, value: &str, min: u64, max: u64) -> Result<Duration, String> {
    bounded(name, value, min, max, " seconds").map(Duration::from_secs)
}

/// A decimal number from `min` to `max` (digits only: no sign, no spaces);
/// the message gives the range, then `unit`.
pub(crate) fn bounded(
    name: &str,
    value: &str,
    min: u64,
    max: u64,
    unit: &str,
) -> Result<u64, String> {
    let ok = value.bytes().all(|b| b.is_ascii_digit());
    value
        .parse::<u64>()
        .ok()
        .filter(|n| ok && (min..=max).contains(n))
        .ok_or_else(|| {
            format!(
                "{name} must be between {min} and {max}{unit}, not '{}'",
                Shown(value)
            )
        })
}

/// An octal file mode from 0 to 7777 (`0660`, `660`): what `mode=` takes.
pub(crate) fn octal_mode(name: &str, value: &str) -> Result<u32, String> {
    let ok =
        !value.is_empty() && value.len() <= 5 && value.bytes().all(|b| (b'0'..=b'7').contains(&b));
    u32::from_str_radix(value, 8)
        .ok()
        .filter(|m| ok && *m <= crate::config::MAX_SOCKET_MODE)
        .ok_or_else(|| {
            format!(
                "{name} must be an octal file mode from 0 to 7777, not '{}'",
                Shown(value)
            )
        })
}
