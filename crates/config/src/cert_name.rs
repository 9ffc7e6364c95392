//! `tls-allow-subject` and `tls-allow-issuer` entries: `ATTR=PATTERN`, an
//! attribute of a certificate's distinguished name (`CN`, `OU`, ...) and a
//! pattern its value must match, with `*` and `?` as in allow/deny lines
//! (ASCII case ignored, as X.520 compares these attributes). The daemon
//! reads the certificate (`src/tls/subject.rs`); this is the syntax, checked
//! where the option is read, and the attributes' object identifiers.

use crate::bounded::Shown;

/// Longest entry, in bytes: a distinguished name's attribute is at most
/// 64 characters (RFC 5280's upper bounds), so a pattern past 256 bytes is
/// a mistake, and every entry a rule keeps stays small.
pub const MAX_ENTRY: usize = 256;

/// The attributes an entry may name, as RFC 4514 and OpenSSL spell them,
/// with their object identifiers (dotted).
pub const ATTRIBUTES: &[(&str, &str)] = &[
    ("CN", "2.5.4.3"),
    ("OU", "2.5.4.11"),
    ("O", "2.5.4.10"),
    ("L", "2.5.4.7"),
    ("ST", "2.5.4.8"),
    ("C", "2.5.4.6"),
    ("serialNumber", "2.5.4.5"),
    ("DC", "0.9.2342.19200300.100.1.25"),
    ("UID", "0.9.2342.19200300.100.1.1"),
    ("emailAddress", "1.2.840.113549.1.9.1"),
];

/// `entry` checked and with its attribute spelled as [`ATTRIBUTES`] does
/// (`cn=alice*` is `CN=alice*`); the error names the option (`name`).
pub fn parse(name: &str, entry: &str) -> Result<String, String> {
    if entry.len() > MAX_ENTRY || entry.chars().any(char::is_control) {
        return Err(format!(
            "{name} must be 1 to {MAX_ENTRY} bytes without control characters, not '{}'",
            Shown(entry)
        ));
    }
    let known = || {
        let names: Vec<&str> = ATTRIBUTES.iter().map(|(a, _)| *a).collect();
        names.join(", ")
    };
    let Some((attr, pattern)) = entry.split_once('=') else {
        return Err(format!(
            "{name} needs ATTRIBUTE=PATTERN such as CN=alice*, not '{}'",
            Shown(entry)
        ));
    };
    let Some((canonical, _)) = ATTRIBUTES
        .iter()
        .find(|(a, _)| a.eq_ignore_ascii_case(attr.trim()))
    else {
        return Err(format!(
            "{name}: unknown attribute '{}' (one of {})",
            Shown(attr),
            known()
        ));
    };
    if pattern.is_empty() {
        return Err(format!("{name}: {canonical}= needs a pattern (* for any)"));
    }
    // rinetd.conf ends an option at a comma and the options at `]`: kept
    // out of YAML too, so every entry converts both ways (`?` matches one).
    if pattern.contains([',', ']']) {
        return Err(format!(
            "{name} '{}': write ? for a comma or ] in the pattern",
            Shown(entry)
        ));
    }
    Ok(format!("{canonical}={pattern}"))
}

/// An entry [`parse`] accepted, as (object identifier, pattern).
pub fn split(entry: &str) -> Option<(&'static str, &str)> {
    let (attr, pattern) = entry.split_once('=')?;
    let (_, oid) = ATTRIBUTES.iter().find(|(a, _)| *a == attr)?;
    Some((oid, pattern))
}

/// Whether `value` matches `pattern` (`*` any run, `?` one byte, ASCII
/// case ignored): allow/deny's glob.
pub fn matches(pattern: &str, value: &str) -> bool {
    crate::acl::wildcard(pattern.as_bytes(), value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_a_known_attribute_and_a_pattern() {
        let ok = |e: &str| parse("tls-allow-subject", e);
        assert_eq!(ok("cn=alice*").as_deref(), Ok("CN=alice*"));
        assert_eq!(ok("OU=ops=a").as_deref(), Ok("OU=ops=a"));
        assert_eq!(ok("EMAILADDRESS=*@x").as_deref(), Ok("emailAddress=*@x"));
        for bad in [
            "alice",
            "XX=a",
            "CN=",
            "=a",
            "CN=a\nb",
            "O=a,b",
            &"x".repeat(257),
        ] {
            assert!(ok(bad).is_err(), "{bad:?}");
        }
        assert!(ok("XX=a").unwrap_err().contains("one of CN, OU"));
        assert_eq!(split("CN=al*"), Some(("2.5.4.3", "al*")));
    }

    #[test]
    fn patterns_glob_and_ignore_case() {
        assert!(matches("alice*", "Alice Smith"));
        assert!(matches("*.ops", "db.OPS"));
        assert!(matches("b?b", "bob"));
        assert!(!matches("alice", "alice2"));
        assert!(!matches("alice*", "mallory alice"));
    }
}
