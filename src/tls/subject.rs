//! A client certificate's names: its subject as text for the logs
//! ([`subject_of`]), and the rule's `tls-allow-subject`/`tls-allow-issuer`
//! lists checked against its subject and issuer ([`allowed`]).
//!
//! The certificate has already been verified by rustls (its chain to
//! `tls-client-ca`, its dates, its signature); this only reads its names,
//! with x509-parser (rustls and webpki do not expose them). Attributes are
//! matched one by one (`CN=alice*` against each CN of the subject), never
//! as one string, so a `,` or `+` inside a value cannot pass for another
//! attribute.

use oi_config::cert_name;
use oi_config::Shown;
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

/// Longest subject [`subject_of`] gives, in bytes: a log field and a
/// diagnostic stay one short line whatever a client's certificate holds.
pub(crate) const MAX_SUBJECT: usize = 256;

/// The subject of the DER certificate `cert_der` in RFC 4514 form (the
/// last RDN first, `CN=alice,OU=ops,O=Example`, specials escaped), cut to
/// [`MAX_SUBJECT`] bytes; `None` when it does not parse.
pub(crate) fn subject_of(cert_der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(cert_der).ok()?;
    Some(rfc4514(cert.subject()))
}

/// Whether the rule's lists admit the client certificate `cert_der`: `Ok`
/// when every list given (`subjects`, `issuers`; empty: not given) has an
/// entry its name matches; else the subject, for the refusal's diagnostic.
pub(crate) fn allowed(
    cert_der: &[u8],
    subjects: &[String],
    issuers: &[String],
) -> Result<(), String> {
    let Ok((_, cert)) = X509Certificate::from_der(cert_der) else {
        return Err("(a certificate oi cannot read)".into());
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

/// `name` as RFC 4514 writes it, cut to [`MAX_SUBJECT`] bytes.
fn rfc4514(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attr) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attr.attr_type().to_id_string();
            match cert_name::ATTRIBUTES.iter().find(|(_, o)| *o == oid) {
                Some((short, _)) => out.push_str(short),
                None => out.push_str(&oid),
            }
            out.push('=');
            match attr.as_str() {
                Ok(value) => escape_into(value, &mut out),
                // Not a string type: its DER bytes in hex, as RFC 4514 says.
                Err(_) => {
                    out.push('#');
                    for b in attr.as_slice() {
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

/// `value` with RFC 4514's specials escaped, appended to `out`.
fn escape_into(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && matches!(c, '#' | ' '))
            || (i == last && c == ' ');
        if c.is_control() {
            // RFC 4514's hex pairs: a log line stays one line.
            let mut utf8 = [0; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                out.push_str(&format!("\\{b:02x}"));
            }
            continue;
        }
        if special {
            out.push('\\');
        }
        out.push(c);
    }
}

/// `s` cut to at most [`MAX_SUBJECT`] bytes, at a character's boundary.
fn cut(mut s: String) -> String {
    if s.len() > MAX_SUBJECT {
        let mut end = MAX_SUBJECT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_are_escaped_and_long_names_cut_on_a_character() {
        let mut out = String::new();
        escape_into("#a,b+c\n ", &mut out);
        assert_eq!(out, "\\#a\\,b\\+c\\0a\\ ");
        let long = "é".repeat(200);
        let cut = cut(long);
        assert!(cut.len() <= MAX_SUBJECT && cut.len() >= MAX_SUBJECT - 1);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_certificate_that_does_not_parse_is_refused_not_admitted() {
        assert_eq!(subject_of(b"not DER"), None);
        let none: [String; 0] = [];
        assert!(allowed(b"not DER", &none, &none).is_err());
    }
}
