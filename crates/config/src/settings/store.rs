//! Reading a value into its slot, and writing it back: the value parsers
//! both formats share, the `[...]` text and the global lines `--check` prints.

use super::{RuleOptions, Setting, Slot, Syntax, Value, SETTINGS};
use crate::address::parse_host;
use crate::bounded::Shown;
use crate::values::{bounded, octal_mode, seconds};
use crate::{Config, Host, IpFilter, LogFormat, ProxyHeader, StatusFormat};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Most entries of an option that repeats (`tls-allow-subject`) on one
/// rule: each is checked against every client certificate, so the list
/// stays short enough to scan per handshake.
pub const MAX_LIST: usize = 64;

/// Parses `value` (written in `syntax`, named `name` in messages) into
/// `slot`, within `setting`'s range. Returns whether the slot already held
/// a value (the caller reports the repeat in its own way).
pub fn store(
    setting: &Setting,
    slot: Slot<'_>,
    syntax: Syntax,
    name: &str,
    value: &str,
) -> Result<bool, String> {
    let (min, max) = match setting.value {
        Value::Seconds(a, b) | Value::Millis(a, b) | Value::Number(a, b) | Value::Rate(a, b) => {
            (a, b)
        }
        _ => (0, u64::MAX),
    };
    Ok(match slot {
        Slot::Time(s) => {
            let t = match setting.value {
                Value::Millis(..) => {
                    bounded(name, value, min, max, " milliseconds").map(Duration::from_millis)?
                }
                _ => seconds(name, value, min, max)?,
            };
            s.replace(t).is_some()
        }
        Slot::Count(s) => {
            let n = bounded(name, value, min, max, "")?;
            s.replace(usize::try_from(n).unwrap_or(usize::MAX))
                .is_some()
        }
        Slot::Small(s) => {
            let n = bounded(name, value, min, max, "")?;
            s.replace(u32::try_from(n).unwrap_or(u32::MAX)).is_some()
        }
        Slot::Rate(s) => {
            let r = rate(name, value, min, max)?;
            let r = std::num::NonZeroU64::new(r).ok_or_else(|| format!("{name} must not be 0"))?;
            s.replace(r).is_some()
        }
        Slot::Switch(s) => s.replace(switch(syntax, name, value)?).is_some(),
        Slot::Flag(s) => {
            let was = *s;
            *s = switch(syntax, name, value)?;
            was
        }
        Slot::Host(s) => {
            let host = parse_host(value).map_err(|e| format!("invalid {name} address: {e}"))?;
            s.replace(host).is_some()
        }
        Slot::Splice(s) => s.replace(value.parse()?).is_some(),
        Slot::Mptcp(s) => s.replace(value.parse()?).is_some(),
        Slot::Proxy(s) => {
            let v = match value {
                "v1" => ProxyHeader::V1,
                "v2" => ProxyHeader::V2,
                _ if syntax == Syntax::Yaml => {
                    let hint = crate::hint::suggestion(value, &["v1", "v2"]);
                    return Err(format!(
                        "{name} must be v1 or v2, not '{}'{hint}",
                        Shown(value)
                    ));
                }
                _ => {
                    return Err(format!(
                        "invalid PROXY protocol version '{}' (expected v1 or v2)",
                        Shown(value)
                    ))
                }
            };
            s.replace(v).is_some()
        }
        Slot::IpFilter(s) => {
            let f = match value {
                "ipv4" => IpFilter::Ipv4,
                "ipv6" => IpFilter::Ipv6,
                "any" => IpFilter::Any,
                _ => return Err(word_error(setting, name, value)),
            };
            s.replace(f).is_some()
        }
        Slot::StatusFormat(s) => {
            let f = match value {
                "json" => StatusFormat::Json,
                "text" => StatusFormat::Text,
                _ => return Err(word_error(setting, name, value)),
            };
            s.replace(f).is_some()
        }
        Slot::LogFormat(s) => {
            let f = match value {
                "tab" => LogFormat::Tab,
                "common" => LogFormat::Common,
                "json" => LogFormat::Json,
                _ => return Err(word_error(setting, name, value)),
            };
            s.replace(f).is_some()
        }
        Slot::Mode(s) => s.replace(octal_mode(name, value)?).is_some(),
        Slot::Address(s) => {
            let addr: SocketAddr = value.parse().map_err(|_| {
                format!(
                    "{name} needs an address and port such as 127.0.0.1:9465 or [::1]:9465, not '{}'",
                    Shown(value)
                )
            })?;
            s.replace(addr).is_some()
        }
        Slot::Path(s) => {
            if value.is_empty() {
                return Err(format!("{name} must not be empty"));
            }
            s.replace(PathBuf::from(value)).is_some()
        }
        Slot::List(s) => {
            let entry = crate::cert_name::parse(name, value)?;
            let list = s.get_or_insert_with(Box::default);
            if list.len() >= MAX_LIST {
                return Err(format!("{name}: at most {MAX_LIST} entries on one rule"));
            }
            list.push(entry);
            // Repeating it is how a list is written: never a duplicate.
            false
        }
        Slot::File(s) => {
            if value.is_empty() {
                return Err(format!("{name} must not be empty"));
            }
            s.replace(Path::new(value).into()).is_some()
        }
        Slot::Text(s) => {
            if let Value::Text(max) = setting.value {
                let bytes = unescape(value).map_err(|e| format!("{name}: {e}"))?;
                if bytes.is_empty() || bytes.len() > max {
                    return Err(format!(
                        "{name} must be 1 to {max} bytes, not {} ('{}')",
                        bytes.len(),
                        Shown(value)
                    ));
                }
            } else if setting.value == Value::ServerName {
                let pattern = oi_wire::client_hello::NamePattern::parse(value)
                    .map_err(|e| format!("invalid {name} '{}': {e}", Shown(value)))?;
                return Ok(s.replace(pattern.to_string()).is_some());
            } else if value.is_empty() {
                return Err(format!("{name} must not be empty"));
            }
            s.replace(value.to_string()).is_some()
        }
    })
}

/// The bytes `text` stands for: `\r`, `\n`, `\t`, `\0`, `\\` and `\xHH`
/// are escapes (rinetd.conf splits options at commas and spaces, so
/// `\x2c` and `\x20` write those); every other character is itself, in
/// UTF-8. An unknown or cut escape is an error naming it.
pub fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let byte = match chars.next() {
            Some('r') => b'\r',
            Some('n') => b'\n',
            Some('t') => b'\t',
            Some('0') => 0,
            Some('\\') => b'\\',
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(b) if hex.len() == 2 && hex.bytes().all(|h| h.is_ascii_hexdigit()) => b,
                    _ => {
                        return Err(format!(
                            "bad escape '\\x{}' (expected two hex digits)",
                            Shown(&hex)
                        ))
                    }
                }
            }
            Some(other) => {
                return Err(format!(
                    "unknown escape '\\{}' (use \\r, \\n, \\t, \\0, \\\\ or \\xHH)",
                    Shown(&other.to_string())
                ))
            }
            None => return Err("a '\\' ends the text (write \\\\ for a backslash)".into()),
        };
        out.push(byte);
    }
    Ok(out)
}

/// The suffixes a rate may carry, largest first, and what each multiplies by.
const RATE_UNITS: [(char, u64); 3] = [('G', 1 << 30), ('M', 1 << 20), ('K', 1 << 10)];

/// A rate in bytes per second: digits with an optional `K`, `M` or `G`
/// (either case; 1024-based), within `min..=max`. No arithmetic here can
/// overflow: the multiplication is checked.
fn rate(name: &str, value: &str, min: u64, max: u64) -> Result<u64, String> {
    let bad = || {
        format!(
            "{name} needs bytes per second, a number with an optional K, M or G suffix (10M), not '{}'",
            Shown(value)
        )
    };
    let (digits, unit) = match value.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let up = c.to_ascii_uppercase();
            let unit = RATE_UNITS.iter().find(|(u, _)| *u == up).ok_or_else(bad)?;
            (&value[..i], unit.1)
        }
        _ => (value, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n = digits.parse::<u64>().ok().and_then(|n| n.checked_mul(unit));
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{name} must be from {} to {} bytes per second, not '{}'",
            rate_text(min),
            rate_text(max),
            Shown(value)
        )),
    }
}

/// A rate as an option writes it: with the largest suffix that divides it
/// exactly (`10M`, `1536K`, `1000`).
pub fn rate_text(n: u64) -> String {
    RATE_UNITS
        .iter()
        .find(|(_, m)| n != 0 && n.is_multiple_of(*m))
        .map_or_else(|| n.to_string(), |(u, m)| format!("{}{u}", n / m))
}

/// `NAME must be a, b or c, not 'VALUE'`.
fn word_error(setting: &Setting, name: &str, value: &str) -> String {
    format!(
        "{name} must be {}, not '{}'",
        setting.value_text(),
        Shown(value)
    )
}

/// A switch: `on`/`off` in rinetd.conf (as rinetd-uv); YAML also takes
/// `true`/`false` and `yes`/`no`, in any case.
fn switch(syntax: Syntax, name: &str, value: &str) -> Result<bool, String> {
    match syntax {
        Syntax::Conf => crate::values::on_off(name, value),
        Syntax::Yaml => match value.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" => Ok(true),
            "false" | "no" | "off" => Ok(false),
            _ => Err(format!(
                "{name} must be true or false, not '{}'",
                Shown(value)
            )),
        },
    }
}

/// The value in `slot` as its option writes it (`30`, `on`, `0660`, `v2`);
/// `None` when unset.
pub(super) fn shown(slot: Slot<'_>, value: Value) -> Option<String> {
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    match slot {
        Slot::Time(t) => t.map(|t| match value {
            Value::Millis(..) => t.as_millis().to_string(),
            _ => t.as_secs().to_string(),
        }),
        Slot::Count(n) => n.map(|n| n.to_string()),
        Slot::Small(n) => n.map(|n| n.to_string()),
        Slot::Rate(n) => n.map(|n| rate_text(n.get())),
        Slot::Switch(b) => b.map(on),
        Slot::Flag(b) => b.then(|| on(true)),
        Slot::Host(h) => h.as_ref().map(Host::to_string),
        Slot::Splice(s) => s.map(|s| s.to_string()),
        Slot::Mptcp(s) => s.map(|s| s.to_string()),
        Slot::Proxy(p) => p.map(|p| match p {
            ProxyHeader::V1 => "v1".to_string(),
            ProxyHeader::V2 => "v2".to_string(),
        }),
        Slot::IpFilter(f) => f.map(|f| f.to_string()),
        Slot::StatusFormat(f) => f.map(|f| f.to_string()),
        Slot::LogFormat(f) => f.map(|f| f.to_string()),
        Slot::Mode(m) => m.map(|m| format!("{m:04o}")),
        Slot::Address(a) => a.map(|a| a.to_string()),
        Slot::Path(p) => p.as_ref().map(|p| p.to_string_lossy().into_owned()),
        Slot::File(p) => p.as_ref().map(|p| p.to_string_lossy().into_owned()),
        Slot::Text(t) => t.clone(),
        Slot::List(l) => l.as_ref().map(|l| l.join(", ")),
    }
}

/// Every global setting `config` sets that `--check` reports, as
/// `(NAME VALUE, what oi does with it)` in table order: `buffersize 4096`,
/// `connect-timeout 7s`, `pool-trim-delay 500ms`, `status enabled on`.
pub fn globals_set(config: &Config) -> Vec<(String, &'static str)> {
    let mut copy = config.clone();
    SETTINGS
        .iter()
        .filter_map(|s| {
            let does = s.check?;
            let value = match (s.global?)(&mut copy) {
                Slot::Time(t) => t.map(|t| match s.value {
                    Value::Millis(..) => format!("{}ms", t.as_millis()),
                    _ => format!("{}s", t.as_secs()),
                }),
                Slot::Path(p) => p.as_ref().map(|p| Shown(&p.to_string_lossy()).to_string()),
                slot => shown(slot, s.value),
            }?;
            let name = s
                .conf
                .map_or_else(|| s.name().replace('.', " "), str::to_string);
            Some((format!("{name} {value}"), does))
        })
        .collect()
}

/// The options `o` sets, as `name=value` in table order (what `--check`
/// prints inside `[...]`); an option that repeats, once per entry.
pub fn written(o: &RuleOptions) -> Vec<String> {
    let mut copy = o.clone();
    SETTINGS
        .iter()
        .flat_map(|s| {
            let Some(at) = s.rule else {
                return Vec::new();
            };
            match at(&mut copy) {
                Slot::List(l) => l
                    .iter()
                    .flat_map(|l| l.iter())
                    .map(|e| format!("{}={e}", s.name()))
                    .collect(),
                slot => shown(slot, s.value)
                    .map(|v| format!("{}={v}", s.name()))
                    .into_iter()
                    .collect(),
            }
        })
        .collect()
}
