//! What the views see of a rule's TLS: why a handshake failed, in the
//! counters' few reasons ([`TlsFailure`]), whether a completed one resumed
//! a session, and the certificates a rule presents with their expiry
//! ([`shown`]). Hooks only: the handshakes themselves are `io.rs`'s.

use crate::stats::{CertShown, TlsFailure, TlsShown};
use oi_config::RuleOptions;
use rustls::{AlertDescription as Alert, Connection};
use std::io;
use std::path::Path;
use std::time::SystemTime;

/// A handshake that failed: the reason in plain words for the log, and its
/// class for the counters.
#[derive(Debug)]
pub(crate) struct Failed {
    /// What the log says (`io::reason`'s words).
    pub(crate) why: String,
    /// Which counter it bumps.
    pub(crate) class: TlsFailure,
}

impl Failed {
    /// The failure `e` of a handshake (a timeout, or rustls's error).
    pub(crate) fn of(e: &io::Error) -> Failed {
        Failed {
            why: super::io::reason(e),
            class: class(e),
        }
    }
}

impl From<String> for Failed {
    /// A failure before any byte of the handshake (a config rustls
    /// refused, the cap of handshakes in progress).
    fn from(why: String) -> Failed {
        Failed {
            why,
            class: TlsFailure::Other,
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// Which of the counters' reasons `e` is: rustls's own verdict, or the
/// alert the peer sent with its own.
pub(crate) fn class(e: &io::Error) -> TlsFailure {
    if e.kind() == io::ErrorKind::TimedOut {
        return TlsFailure::Timeout;
    }
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return TlsFailure::Other;
    };
    match tls {
        rustls::Error::PeerIncompatible(_) => TlsFailure::Incompatible,
        rustls::Error::InvalidCertificate(_)
        | rustls::Error::NoCertificatesPresented
        | rustls::Error::InvalidCertRevocationList(_) => TlsFailure::BadCertificate,
        rustls::Error::AlertReceived(alert) => match alert {
            Alert::HandshakeFailure
            | Alert::ProtocolVersion
            | Alert::InsufficientSecurity
            | Alert::NoApplicationProtocol => TlsFailure::Incompatible,
            Alert::BadCertificate
            | Alert::UnsupportedCertificate
            | Alert::CertificateRevoked
            | Alert::CertificateExpired
            | Alert::CertificateUnknown
            | Alert::UnknownCA
            | Alert::CertificateRequired
            | Alert::AccessDenied => TlsFailure::BadCertificate,
            Alert::UnrecognisedName => TlsFailure::UnknownName,
            _ => TlsFailure::Other,
        },
        _ => TlsFailure::Other,
    }
}

/// Whether `conn`'s completed handshake resumed an earlier session, as
/// rustls reports it.
pub(crate) fn resumed(conn: &Connection) -> bool {
    conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

/// The subject of the certificate the peer presented and rustls verified
/// (a client's, with `tls-client-ca`), if it presented one.
pub(crate) fn client_subject(conn: &Connection) -> Option<String> {
    let leaf = conn.peer_certificates()?.first()?;
    super::subject::subject_of(leaf)
}

/// The TLS of a rule with settings `s` as the views show it; `None` when
/// it has none. Reads the certificate files again (a few KiB, at start and
/// each reload), so a renewed certificate's expiry shows once reloaded.
pub(crate) fn shown(s: &RuleOptions) -> Option<TlsShown> {
    let terminates = s.tls_cert.is_some();
    let originates = s.tls_connect == Some(true);
    if !terminates && !originates {
        return None;
    }
    let files = [(&s.tls_cert, "cert"), (&s.tls_client_cert, "client-cert")];
    let certificates = files
        .into_iter()
        .filter_map(|(file, role)| Some((file.as_deref()?, role)))
        .map(|(file, role)| certificate(file, role))
        .collect();
    Some(TlsShown {
        terminates,
        originates,
        certificates,
    })
}

/// The leaf of the PEM file `file` as shown: its subject and notAfter,
/// `None` where it cannot be read (the route's own load says why).
fn certificate(file: &Path, role: &'static str) -> CertShown {
    let leaf = super::files::certs(file, "certificate")
        .ok()
        .and_then(|chain| chain.into_iter().next());
    let not_after = leaf
        .as_ref()
        .and_then(|c| super::files::not_after(c))
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    CertShown {
        file: file.display().to_string(),
        role,
        subject: leaf.as_ref().and_then(|c| super::subject::subject_of(c)),
        not_after,
    }
}
