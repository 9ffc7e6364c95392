//! A certificate's subject as an RFC 4514 string (`CN=alice,O=Example`),
//! for the logs and the views, and a client certificate's subject and
//! issuer checked against the rule's `tls-allow-subject` and
//! `tls-allow-issuer` ([`allowed`]): x509-parser reads the DER (rustls and
//! webpki verify a chain but do not expose its names).
//!
//! The check runs on a certificate rustls has already verified (its chain
//! to `tls-client-ca`, its dates, its signature). Attributes are matched
//! one by one (`CN=alice*` against each CN of the name), never as one
//! string, so a `,` or `+` inside a value cannot pass for another attribute.

use oi_config::{cert_name, Shown};
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

/// Longest subject kept, in bytes: a subject is the certificate holder's
/// text, and a log line or a label must not carry kilobytes of it. Real
/// subjects are under 200 bytes.
pub(crate) const MAX_SUBJECT: usize = 256;

/// The subject of the DER certificate `der` as RFC 4514 writes it (last
/// RDN first, `,` between RDNs, `+` inside one, specials escaped), cut to
/// [`MAX_SUBJECT`] at a character boundary; `None` when the
/// certificate cannot be read.
pub(crate) fn subject_of(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    Some(rfc4514(cert.subject()))
}

/// Where the chain `ders` (as the file gives it, leaf first) is out of
/// order: the first certificate whose issuer is not the subject of the one
/// after it, as "certificate N (subject ..., issuer ...) is followed by
/// ... (subject ...)". A client that gets a chain out of order may fail to
/// build a path to its roots; rustls sends the chain as given. A
/// certificate that does not parse is left to rustls's own error.
pub(crate) fn chain_out_of_order(ders: &[&[u8]]) -> Option<String> {
    let parsed: Vec<X509Certificate<'_>> = ders
        .iter()
        .map(|der| X509Certificate::from_der(der).ok().map(|(_, c)| c))
        .collect::<Option<_>>()?;
    parsed.windows(2).enumerate().find_map(|(i, pair)| {
        (pair[0].issuer().as_raw() != pair[1].subject().as_raw()).then(|| {
            format!(
                "certificate {} (subject '{}', issuer '{}') is followed by one it was not issued by \
                 (certificate {}, subject '{}')",
                i + 1,
                Shown(&rfc4514(pair[0].subject())),
                Shown(&rfc4514(pair[0].issuer())),
                i + 2,
                Shown(&rfc4514(pair[1].subject())),
            )
        })
    })
}

/// Whether the rule's lists admit the client certificate `der`: `Ok` when
/// every list given (`subjects`, `issuers`; empty: not given) has an entry
/// its name matches; else its subject and issuer (RFC 4514, cut, escaped)
/// for the refusal's diagnostic. A certificate that does not parse is
/// refused.
pub(crate) fn allowed(der: &[u8], subjects: &[String], issuers: &[String]) -> Result<(), String> {
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return Err("a certificate oi cannot read".into());
    };
    let admits = |list: &[String], name: &X509Name<'_>| {
        list.is_empty() || list.iter().any(|entry| entry_matches(entry, name))
    };
    if admits(subjects, cert.subject()) && admits(issuers, cert.issuer()) {
        return Ok(());
    }
    Err(format!(
        "subject '{}', issuer '{}'",
        Shown(&rfc4514(cert.subject())),
        Shown(&rfc4514(cert.issuer()))
    ))
}

/// Whether one `ATTR=PATTERN` entry matches an attribute of `name`.
fn entry_matches(entry: &str, name: &X509Name<'_>) -> bool {
    let Some((oid, pattern)) = cert_name::split(entry) else {
        return false;
    };
    name.iter_attributes()
        .filter(|a| a.attr_type().to_id_string() == oid)
        .filter_map(|a| a.as_str().ok())
        .any(|value| cert_name::matches(pattern, value))
}

/// `name` as RFC 4514 writes it (last RDN first, `,` between RDNs, `+`
/// inside one, specials escaped), cut to [`MAX_SUBJECT`].
fn rfc4514(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter_rdn().collect();
    for (i, rdn) in rdns.into_iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attr) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attr.attr_type().to_id_string();
            match (short_name(&oid), attr.as_str()) {
                (Some(name), Ok(text)) => {
                    out.push_str(name);
                    out.push('=');
                    escape_into(&mut out, text);
                }
                // RFC 4514 2.4: an unknown type or a value not a string is
                // the dotted OID and the value's BER in hex.
                _ => {
                    out.push_str(&oid);
                    out.push_str("=#");
                    let value = attr.attr_value();
                    let (tag, data) = (value.tag().0, value.data);
                    let header = u8::try_from(tag).unwrap_or(0x04);
                    out.push_str(&format!("{header:02x}"));
                    // The length as DER writes it (the text is cut anyway).
                    match u8::try_from(data.len()) {
                        Ok(n) if n < 0x80 => out.push_str(&format!("{n:02x}")),
                        Ok(n) => out.push_str(&format!("81{n:02x}")),
                        Err(_) => {
                            let n = u16::try_from(data.len()).unwrap_or(u16::MAX);
                            out.push_str(&format!("82{n:04x}"));
                        }
                    }
                    for b in data.iter().take(MAX_SUBJECT) {
                        out.push_str(&format!("{b:02x}"));
                    }
                }
            }
            if out.len() > MAX_SUBJECT {
                return cut(out);
            }
        }
    }
    cut(out)
}

/// The short names RFC 4514 3 lists, and the two more that certificates
/// use everywhere (OpenSSL prints the same).
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.6" => "C",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        "2.5.4.5" => "serialNumber",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// `value` with RFC 4514 2.4's escapes: `"+,;<>\` anywhere, `#` or a
/// space first, a space last, NUL as `\00`.
fn escape_into(out: &mut String, value: &str) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' | ' ' if i == 0 => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == last => out.push_str("\\ "),
            '\0' => out.push_str("\\00"),
            c => out.push(c),
        }
    }
}

/// `s` cut to [`MAX_SUBJECT`] at a character boundary.
fn cut(mut s: String) -> String {
    if s.len() > MAX_SUBJECT {
        let mut at = MAX_SUBJECT;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_are_escaped_as_rfc_4514_says() {
        let mut out = String::new();
        escape_into(&mut out, "#a,b+c\"d\\e ");
        assert_eq!(out, "\\#a\\,b\\+c\\\"d\\\\e\\ ");
        let mut out = String::new();
        escape_into(&mut out, " x");
        assert_eq!(out, "\\ x");
    }

    #[test]
    fn a_long_subject_is_cut_at_a_character_boundary() {
        let long = "é".repeat(200);
        let cut = cut(long);
        assert!(cut.len() <= MAX_SUBJECT && cut.len() >= MAX_SUBJECT - 1);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn what_is_not_a_certificate_has_no_subject() {
        assert_eq!(subject_of(b""), None);
        assert_eq!(subject_of(&[0x30, 0x03, 0x02, 0x01, 0x00]), None);
    }

    #[test]
    fn a_certificate_that_does_not_parse_is_refused_not_admitted() {
        let subjects = ["CN=*".to_string()];
        assert!(allowed(b"not DER", &subjects, &[]).is_err());
    }
}
