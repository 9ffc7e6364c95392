//! The value parsers both formats and the option table (`config/settings.rs`)
//! build on, below all three (so that none imports another for them):
//! switches, seconds, bounded numbers and octal modes, each with the message
//! that names the setting and its range.

use crate::Shown;
use std::time::Duration;

/// `on` or `off`, as rinetd-uv spells switches in rinetd.conf.
pub fn on_off(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{name} must be on or off, not '{}'", Shown(value))),
    }
}

/// A whole number of seconds from `min` to `max`.
pub fn seconds(name: &str, value: &str, min: u64, max: u64) -> Result<Duration, String> {
    bounded(name, value, min, max, " seconds").map(Duration::from_secs)
}

/// A decimal number from `min` to `max` (digits only: no sign, no spaces);
/// the message gives the range, then `unit`.
pub fn bounded(name: &str, value: &str, min: u64, max: u64, unit: &str) -> Result<u64, String> {
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
pub fn octal_mode(name: &str, value: &str) -> Result<u32, String> {
    let ok =
        !value.is_empty() && value.len() <= 5 && value.bytes().all(|b| (b'0'..=b'7').contains(&b));
    u32::from_str_radix(value, 8)
        .ok()
        .filter(|m| ok && *m <= crate::MAX_SOCKET_MODE)
        .ok_or_else(|| {
            format!(
                "{name} must be an octal file mode from 0 to 7777, not '{}'",
                Shown(value)
            )
        })
}
