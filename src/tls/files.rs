//! Reading the PEM files a rule names: certificate chains, private keys
//! and trust roots, each into what rustls takes, with a message that
//! names the file and never shows a key's bytes.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Largest PEM file read: a chain of a dozen certificates is under 30 KiB,
/// the system's whole bundle about 220 KiB; a bigger file is a mistake,
/// and reading it whole would put an unbounded file in memory.
const MAX_PEM_BYTES: u64 = 4 << 20;

/// Largest OCSP response read: one signed by the CA itself is under 2 KiB,
/// one with a delegated responder's certificate about 4 KiB.
const MAX_OCSP_BYTES: u64 = 64 << 10;

/// A certificate expiring within this long gives a `--check` warning.
pub(crate) const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// The bytes of `path`, at most [`MAX_PEM_BYTES`].
fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    read_at_most(path, what, MAX_PEM_BYTES, "not a PEM file")
}

/// The bytes of `path`, refused past `max` bytes as `not` says.
fn read_at_most(path: &Path, what: &str, max: u64, not: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| unreadable(what, &shown, &e))?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {what} {shown}: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("{what} {shown} is over {} KiB: {not}", max >> 10));
    }
    Ok(bytes)
}

/// Why `what` at `shown` could not be opened. Refused permission gets the
/// way out: start-up reads the files as root, but `--check` run by another
/// user and every reload after `--user` read them as that user, so a key
/// only root may read fails there first (Debian's convention is a 0640
/// root:ssl-cert key with the daemon's user in `ssl-cert`).
fn unreadable(what: &str, shown: &dyn std::fmt::Display, e: &std::io::Error) -> String {
    let mut why = format!("cannot read {what} {shown}: {e}");
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        why.push_str(
            " (read as the user oi runs as, which after --user is that user: make it \
             readable by that user, e.g. root:ssl-cert mode 0640 with the user in ssl-cert)",
        );
    }
    why
}

/// The certificates of the PEM file `path`, in file order (leaf first).
pub(crate) fn certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} {} is not PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} {} has no CERTIFICATE block",
            path.display()
        ));
    }
    Ok(certs)
}

/// The first private key of the PEM file `path` (PKCS#8, PKCS#1 or SEC1).
/// Its bytes never reach a message.
pub(crate) fn key(path: &Path, what: &str) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read(path, what)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        let why = match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no PRIVATE KEY block".to_string(),
            other => format!("not PEM ({other:?})"),
        };
        format!("{what} {}: {why}", path.display())
    })
}

/// A warning when others than the owner may read the key at `path`.
pub(crate) fn key_exposed(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o077 != 0).then(|| {
        format!(
            "private key {} may be read by others (mode {:04o}): chmod 600 it",
            path.display(),
            mode & 0o7777
        )
    })
}

/// A certificate and its key, checked to belong together.
pub(crate) fn certified(
    cert: &Path,
    key_path: &Path,
) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
    let chain = certs(cert, "certificate")?;
    let ders: Vec<&[u8]> = chain.iter().map(|c| c.as_ref()).collect();
    if let Some(why) = super::subject::chain_out_of_order(&ders) {
        return Err(format!(
            "certificate {}: {why}: write the chain leaf first, each certificate followed by its issuer",
            cert.display()
        ));
    }
    let key = key(key_path, "private key")?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = rustls::sign::CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
        format!(
            "private key {} does not fit certificate {}: {e}",
            key_path.display(),
            cert.display()
        )
    })?;
    Ok(Arc::new(certified))
}

/// The DER OCSP response of `tls-ocsp` at `path`, stapled as it is:
/// refused when it cannot be read, is empty or is over 64 KiB.
pub(crate) fn ocsp(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = read_at_most(
        path,
        "OCSP response",
        MAX_OCSP_BYTES,
        "not an OCSP response",
    )?;
    if bytes.is_empty() {
        return Err(format!("OCSP response {} is empty", path.display()));
    }
    Ok(bytes)
}

/// What is wrong with the OCSP response `der`, read without a full parser:
/// `OCSPResponse ::= SEQUENCE { responseStatus ENUMERATED, responseBytes
/// [0] EXPLICIT ... OPTIONAL }`, the whole file one SEQUENCE, its status 0
/// (successful) and its response bytes there. `None`: it has that shape.
pub(crate) fn ocsp_fault(der: &[u8]) -> Option<&'static str> {
    let Some((0x30, body, [])) = tlv(der) else {
        return Some("not a DER OCSP response (openssl ocsp -respout writes one)");
    };
    match tlv(body) {
        Some((0x0a, [0], rest)) if matches!(tlv(rest), Some((0xa0, _, _))) => None,
        Some((0x0a, [0], _)) => Some("a successful OCSP response without its response bytes"),
        Some((0x0a, _, _)) => Some("an OCSP response whose status is not successful"),
        _ => Some("not a DER OCSP response (openssl ocsp -respout writes one)"),
    }
}

/// Trust roots: the PEM file `path`, or the system's (`None`, or the word
/// `system`), read from /etc/ssl/certs without the network.
pub(crate) fn roots(path: Option<&Path>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match path.filter(|p| p.as_os_str() != "system") {
        Some(path) => {
            for cert in certs(path, "CA file")? {
                store
                    .add(cert)
                    .map_err(|e| format!("CA file {}: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("no system trust roots found (/etc/ssl/certs): \
                     install ca-certificates or set tls-ca=FILE"
                    .to_string());
            }
        }
    }
    Ok(store)
}

/// When the certificate `der` stops being valid (its notAfter), read from
/// its DER without a full X.509 parser; `None` when it cannot be read.
pub(crate) fn not_after(der: &[u8]) -> Option<SystemTime> {
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version
    // OPTIONAL, serialNumber, signature, issuer, validity SEQUENCE {
    // notBefore, notAfter }, ... } }
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    let (tag, _, after) = tlv(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..3 {
        rest = tlv(rest)?.2; // serial, signature algorithm, issuer
    }
    let (_, validity, _) = tlv(rest)?;
    let (_, _, after_before) = tlv(validity)?;
    let (tag, time, _) = tlv(after_before)?;
    asn1_time(tag, time)
}

/// One DER element of `bytes`: its tag, contents and what follows it.
fn tlv(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (digits, after) = rest.split_at_checked(n)?;
        rest = after;
        digits
            .iter()
            .fold(0usize, |acc, &d| (acc << 8) | usize::from(d))
    };
    let (contents, after) = rest.split_at_checked(len)?;
    Some((tag, contents, after))
}

/// A UTCTime (tag 0x17, `YYMMDDHHMMSSZ`) or GeneralizedTime (0x18,
/// `YYYYMMDDHHMMSSZ`) as a time.
fn asn1_time(tag: u8, text: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let num = |s: &str| s.parse::<u64>().ok();
    let (year, rest) = match tag {
        0x17 => {
            let yy = num(text.get(..2)?)?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, text.get(2..)?)
        }
        0x18 => (num(text.get(..4)?)?, text.get(4..)?),
        _ => return None,
    };
    if rest.len() != 10 || year < 1970 {
        return None;
    }
    let month = num(rest.get(..2)?)?;
    let day = num(rest.get(2..4)?)?;
    let secs = num(rest.get(4..6)?)? * 3600 + num(rest.get(6..8)?)? * 60 + num(rest.get(8..10)?)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days since 1970-01-01 (Howard Hinnant's days_from_civil).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(days * 86_400 + secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ocsp_responses_are_told_from_garbage_by_their_shape() {
        // SEQUENCE { ENUMERATED 0, [0] { SEQUENCE {} } }
        let good = [0x30, 0x07, 0x0a, 0x01, 0x00, 0xa0, 0x02, 0x30, 0x00];
        assert_eq!(ocsp_fault(&good), None);
        // tryLater (3), no response bytes.
        let later = [0x30, 0x03, 0x0a, 0x01, 0x03];
        assert!(ocsp_fault(&later).is_some_and(|w| w.contains("not successful")));
        assert!(ocsp_fault(b"-----BEGIN").is_some_and(|w| w.contains("not a DER")));
        let trailing = [0x30, 0x03, 0x0a, 0x01, 0x00, 0x00];
        assert!(ocsp_fault(&trailing).is_some());
        assert!(ocsp_fault(&[]).is_some());
    }

    #[test]
    fn asn1_times_read_as_calendar_dates() {
        let t = asn1_time(0x17, b"700102000000Z")
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
        assert_eq!(t, Some(Duration::from_secs(86_400)));
        let t = asn1_time(0x18, b"20380119031408Z")
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
        assert_eq!(t, Some(Duration::from_secs(2_147_483_648)));
        assert_eq!(asn1_time(0x17, b"701302000000Z"), None);
        assert_eq!(asn1_time(0x18, b"garbage"), None);
    }

    #[test]
    fn a_key_oi_may_not_read_says_which_user_reads_it_and_how_to_let_it() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let why = unreadable("tls-key", &"/etc/oi/app.key", &denied);
        assert!(
            why.starts_with("cannot read tls-key /etc/oi/app.key: "),
            "{why}"
        );
        assert!(why.contains("after --user is that user"), "{why}");
        assert!(why.contains("root:ssl-cert mode 0640"), "{why}");
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        let why = unreadable("tls-key", &"/etc/oi/app.key", &missing);
        assert!(
            !why.contains("ssl-cert"),
            "only a refused permission gets the hint: {why}"
        );
    }
}
