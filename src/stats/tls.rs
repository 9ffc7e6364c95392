//! A rule's TLS as the views show it: which ends oi speaks TLS on, the
//! certificates it presents (with their expiry), and the handshakes'
//! counts by side, kind and reason (rows of the counter list, so they
//! reach every output and cross `oi upgrade` as the others do).

use super::counters::CounterCells;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

/// Which end of a connection a handshake was with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsSide {
    /// The client's, which oi ends (`tls-cert`).
    Client,
    /// The backend's, which oi begins (`tls-connect`).
    Backend,
}

/// Why a handshake failed, as the counters split it: few enough that an
/// alert can name one, each a different thing to fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFailure {
    /// No protocol version, cipher suite, key exchange group or signature
    /// scheme in common (either end's verdict).
    Incompatible,
    /// A certificate refused: the peer's by oi (untrusted, expired, wrong
    /// name, none when one is required) or oi's by the peer (its alert).
    BadCertificate,
    /// Not done within the deadline.
    Timeout,
    /// A server name no certificate is for: a ClientHello no rule of a
    /// shared listener takes, or a backend's `unrecognized_name` alert.
    UnknownName,
    /// Anything else (not TLS, closed mid-way, the cap of handshakes).
    Other,
}

impl TlsFailure {
    /// The `reason` label `/metrics` gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsFailure::Incompatible => "incompatible",
            TlsFailure::BadCertificate => "bad_certificate",
            TlsFailure::Timeout => "timeout",
            TlsFailure::UnknownName => "unknown_name",
            TlsFailure::Other => "other",
        }
    }
}

/// A rule's TLS settings as shown: set by its listener each time the
/// route is built (start, reload), so a renewed certificate's expiry shows
/// after the reload that reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsShown {
    /// Whether oi ends the clients' TLS (`tls-cert`).
    pub terminates: bool,
    /// Whether oi begins TLS to the backend (`tls-connect`).
    pub originates: bool,
    /// Every certificate oi presents: `tls-cert`'s and `tls-client-cert`'s.
    pub certificates: Vec<CertShown>,
}

/// One certificate oi presents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertShown {
    /// The file, as the configuration names it.
    pub file: String,
    /// `cert` (presented to clients) or `client-cert` (to the backend).
    pub role: &'static str,
    /// Its leaf's subject (RFC 4514), if it could be read.
    pub subject: Option<String>,
    /// Its leaf's notAfter in seconds since 1970 (`None`: unreadable);
    /// what `oi_tls_certificate_expiry_seconds` reports.
    pub not_after: Option<u64>,
}

impl TlsShown {
    /// The earliest notAfter of its certificates, if any could be read.
    pub fn earliest_expiry(&self) -> Option<u64> {
        self.certificates.iter().filter_map(|c| c.not_after).min()
    }
}

/// The counter of a completed handshake.
pub(super) fn done(side: TlsSide, resumed: bool) -> impl Fn(&CounterCells) -> &AtomicU64 {
    move |c| match (side, resumed) {
        (TlsSide::Client, false) => &c.tls_client_full,
        (TlsSide::Client, true) => &c.tls_client_resumed,
        (TlsSide::Backend, false) => &c.tls_backend_full,
        (TlsSide::Backend, true) => &c.tls_backend_resumed,
    }
}

/// The counter of a failed handshake.
pub(super) fn failed(side: TlsSide, why: TlsFailure) -> impl Fn(&CounterCells) -> &AtomicU64 {
    move |c| match (side, why) {
        (TlsSide::Client, TlsFailure::Incompatible) => &c.tls_client_incompatible,
        (TlsSide::Client, TlsFailure::BadCertificate) => &c.tls_client_bad_certificate,
        (TlsSide::Client, TlsFailure::Timeout) => &c.tls_client_timeout,
        (TlsSide::Client, TlsFailure::UnknownName) => &c.tls_client_unknown_name,
        (TlsSide::Client, TlsFailure::Other) => &c.tls_client_other,
        (TlsSide::Backend, TlsFailure::Incompatible) => &c.tls_backend_incompatible,
        (TlsSide::Backend, TlsFailure::BadCertificate) => &c.tls_backend_bad_certificate,
        (TlsSide::Backend, TlsFailure::Timeout) => &c.tls_backend_timeout,
        (TlsSide::Backend, TlsFailure::UnknownName) => &c.tls_backend_unknown_name,
        (TlsSide::Backend, TlsFailure::Other) => &c.tls_backend_other,
    }
}

/// What a live connection is named by besides its addresses, in one box
/// that only connections with a name take (the live entry keeps one word
/// for it): the server name that routed it, and the subject of the
/// certificate its client presented (`tls-client-ca`), each set once.
#[derive(Clone, Debug, Default)]
pub(super) struct ConnNames {
    /// The TLS server name it was routed by (`[sni=...]` listeners).
    pub(super) server_name: OnceLock<Arc<str>>,
    /// Its client certificate's subject (RFC 4514, capped), once verified.
    pub(super) tls_subject: OnceLock<Arc<str>>,
}
