//! TLS ended and begun by oi itself, as stunnel does, with rustls (ring as
//! the crypto provider; no OpenSSL).
//!
//! A stage on the connection's road: after the client is admitted and
//! routed (`route/`, `[sni=]` included: the peeked ClientHello has already
//! chosen the rule, so the rule's own certificate is the one presented),
//! `tcp::open` runs the client's handshake ([`accept`]) before it dials
//! the backend, and the backend's after the connect; then
//! [`pump`] moves plaintext both ways instead of the plain pump.
//!
//! - `files.rs`: PEM certificates, keys and roots, and OCSP responses;
//! - `server.rs`: the listener's config: certificate, stapled OCSP
//!   response, session tickets and cache (kept across a reload that keeps
//!   the certificate);
//! - `check.rs`: `--check`'s (and a reload's) reading of every rule's files;
//! - `io.rs`: rustls over oi's reactor sockets, and the handshakes;
//! - `pump.rs`: the two directions once both handshakes are done;
//! - `subject.rs`: a certificate's subject for the logs and views, and a
//!   client's checked against `tls-allow-subject`/`tls-allow-issuer`.
//!
//! A rule's files are read once ([`Files`]: a port range's ports share
//! them); each route counts its own handshakes in progress ([`RouteTls`]),
//! and a reload hands the count to the same rule's new route.
//!
//! kTLS seam: once a handshake is done, rustls can give the traffic
//! secrets (`dangerous_extract_secrets`); a kernel with kTLS would take
//! them with setsockopt(TLS_TX/TLS_RX) and the plain pump (splice
//! included) would run on the socket. This kernel has no `tls` module, so
//! [`pump`] encrypts in user space; `pump::run` is where the choice goes.

pub(crate) mod check;
pub(crate) mod files;
pub(crate) mod io;
pub(crate) mod pump;
pub(crate) mod seen;
pub(crate) mod server;
pub(crate) mod subject;

use futures_lite::FutureExt;
use oi_config::{ResolvedRule, RuleOptions, Shown};
use oi_runtime::reactor::{Async, Timer};
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, Connection};
use std::collections::HashMap;
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) use check::check;

/// How long a client may take over its handshake unless
/// `tls-handshake-timeout` says otherwise.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most client handshakes in progress at once on one rule's listener unless
/// `tls-max-handshakes` says otherwise: each holds a socket, its task and
/// rustls's state for up to the handshake timeout (11 KiB of oi's memory
/// for a client that says nothing, 15 KiB for one that sent half a
/// ClientHello, measured by `tests/integration/tls_stall.rs`), so a flood of
/// clients that never finish holds at most 1,024 of them, about 15 MiB;
/// past that, new clients are closed at once.
pub(crate) const MAX_HANDSHAKES: usize = 1024;

/// TLS sessions with the backend oi keeps to resume (`tls-connect`): the
/// rule has one server name (`tls-name`, else each backend's own, which
/// then share these), and rustls keeps up to 8 TLS 1.3 tickets per name,
/// so 8 is one name's worth (its TLS 1.2 session too).
const CLIENT_SESSIONS: usize = 8;

/// A rule's TLS, built once per route from its settings.
pub(crate) struct RouteTls {
    /// Ending TLS from clients (`tls-cert`, `tls-key`, `tls-client-ca`,
    /// `tls-ocsp`), with the session state clients resume from.
    pub(crate) server: Option<server::ServerTls>,
    /// How long a client's handshake may take.
    pub(crate) handshake_timeout: Duration,
    /// Most client handshakes in progress at once (`tls-max-handshakes`).
    pub(crate) max_handshakes: usize,
    /// Client handshakes in progress, held below `max_handshakes`; the
    /// rule's across a reload ([`RouteTls::keep_of`]).
    pub(crate) handshakes: Arc<AtomicUsize>,
    /// Beginning TLS to the backend (`tls-connect`), and the name verified.
    pub(crate) client: Option<(Arc<ClientConfig>, Vec<ServerName<'static>>)>,
    /// `tls-allow-subject` and `tls-allow-issuer` entries (empty: not
    /// given), checked on each client certificate after its handshake.
    pub(crate) allow: (Vec<String>, Vec<String>),
}

/// A handshake's place below the rule's cap, given back when dropped.
pub(crate) struct HandshakeSlot(Arc<AtomicUsize>);

impl RouteTls {
    /// A place for one more client handshake, or `None` at the cap.
    pub(crate) fn handshake_slot(&self) -> Option<HandshakeSlot> {
        let max = self.max_handshakes;
        let taken = self
            .handshakes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            });
        taken.ok().map(|_| HandshakeSlot(self.handshakes.clone()))
    }

    /// Takes over what the same rule had before a reload (`old`): its
    /// handshakes in progress, so the cap holds across the reload rather
    /// than counting afresh from 0, and its session tickets and cache when
    /// the certificate is the same ([`server::ServerTls::keep_sessions_of`]).
    pub(crate) fn keep_of(&mut self, old: &RouteTls) {
        self.handshakes = old.handshakes.clone();
        if let (Some(new), Some(was)) = (self.server.as_mut(), old.server.as_ref()) {
            new.keep_sessions_of(was);
        }
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Ends TLS from the client on `socket` when the rule does (`tls-cert`):
/// the handshake within the rule's deadline and below its cap on
/// handshakes in progress. `Ok(None)`: the rule does not end TLS.
pub(crate) async fn accept(
    tls: &RouteTls,
    socket: &Async<TcpStream>,
) -> Result<Option<Connection>, seen::Failed> {
    let Some(server) = &tls.server else {
        return Ok(None);
    };
    let Some(_slot) = tls.handshake_slot() else {
        return Err(format!(
            "{} handshakes already in progress (tls-max-handshakes)",
            tls.max_handshakes
        )
        .into());
    };
    let conn = rustls::ServerConnection::new(server.config.clone())
        .map(Connection::Server)
        .map_err(|e| e.to_string())?;
    handshake_within(conn, socket, tls.handshake_timeout)
        .await
        .map(Some)
}

/// Whether the rule's `tls-allow-subject`/`tls-allow-issuer` admit the
/// client of `conn` (its handshake done, its certificate verified): `Ok`
/// when the rule has no such list; else the certificate's subject and
/// issuer, escaped and cut, for the refusal's diagnostic.
pub(crate) fn admits_client(tls: &RouteTls, conn: &Connection) -> Result<(), String> {
    let (subjects, issuers) = &tls.allow;
    if subjects.is_empty() && issuers.is_empty() {
        return Ok(());
    }
    let Some(leaf) = conn.peer_certificates().and_then(|c| c.first()) else {
        return Err("no client certificate".into());
    };
    subject::allowed(leaf, subjects, issuers)
}

/// Begins TLS to the backend on `socket` when the rule does (`tls-connect`),
/// within `deadline` (the rule's connect timeout), verified for the name of
/// the pool's `backend`-th backend (file order). `Ok(None)`: it does not.
pub(crate) async fn connect(
    tls: &RouteTls,
    socket: &Async<TcpStream>,
    deadline: Duration,
    backend: usize,
) -> Result<Option<Connection>, seen::Failed> {
    let Some((config, names)) = &tls.client else {
        return Ok(None);
    };
    let Some(name) = names.get(backend).or(names.first()) else {
        return Err(String::from("no server name to verify the backend for").into());
    };
    let conn = rustls::ClientConnection::new(config.clone(), name.clone())
        .map(Connection::Client)
        .map_err(|e| e.to_string())?;
    handshake_within(conn, socket, deadline).await.map(Some)
}

/// Runs `conn`'s handshake on `socket`, ended at `deadline` with the reason
/// in plain words: one path for both ends, so a client and a backend
/// handshake time out and fail alike.
async fn handshake_within(
    mut conn: Connection,
    socket: &Async<TcpStream>,
    deadline: Duration,
) -> Result<Connection, seen::Failed> {
    let timeout = async {
        Timer::after(deadline).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no handshake within {} s", deadline.as_secs()),
        ))
    };
    io::handshake(&mut conn, socket)
        .or(timeout)
        .await
        .map_err(|e| seen::Failed::of(&e))?;
    Ok(conn)
}

/// What a rule's TLS files make, read once per rule: the ports of a
/// range, and the route a listener shared by server name builds twice for
/// the rule that binds it, share one (and so one session cache).
#[derive(Clone)]
pub(crate) struct Loaded {
    /// The listener's side, when the rule ends TLS.
    server: Option<server::ServerTls>,
    /// The backend's side, when it begins TLS, with each backend's name.
    client: Option<(Arc<ClientConfig>, Vec<ServerName<'static>>)>,
}

/// What makes two rules one for [`Loaded`]: the line that wrote it (a port
/// range is one line), the backends' names, and every TLS setting.
#[derive(Clone, PartialEq, Eq, Hash)]
struct RuleKey {
    /// The rule's file (`None`: the main file) and line.
    at: (Option<Arc<str>>, usize),
    /// Each backend's host as written (the default `tls-name`s).
    hosts: Vec<Arc<str>>,
    /// The paths of the rule's TLS files.
    paths: [Option<Box<Path>>; 7],
    /// `tls-alpn` and `tls-name`.
    texts: [Option<String>; 2],
    /// `tls-connect`, `tls-insecure` and `tls-resumption`.
    switches: [Option<bool>; 3],
}

impl RuleKey {
    /// The key of `rule`, whose settings are `s`.
    fn of(rule: &ResolvedRule, s: &RuleOptions) -> Self {
        RuleKey {
            at: (rule.rule.file.clone(), rule.rule.line),
            hosts: rule
                .rule
                .backends
                .iter()
                .map(|b| b.endpoint.host_text.clone())
                .collect(),
            paths: [
                s.tls_cert.clone(),
                s.tls_key.clone(),
                s.tls_client_ca.clone(),
                s.tls_ocsp.clone(),
                s.tls_ca.clone(),
                s.tls_client_cert.clone(),
                s.tls_client_key.clone(),
            ],
            texts: [s.tls_alpn.clone(), s.tls_name.clone()],
            switches: [s.tls_connect, s.tls_insecure, s.tls_resumption],
        }
    }
}

/// Each rule's [`Loaded`] (or why it could not be), so that building the
/// routes of a configuration, or checking it, reads each rule's files once.
#[derive(Default)]
pub(crate) struct Files {
    /// Each rule's configs, or why its files did not load.
    loaded: HashMap<RuleKey, Result<Option<Loaded>, String>>,
    /// Each rule's TLS as the views show it (its certificates' expiry).
    shown: HashMap<RuleKey, Option<Arc<crate::stats::TlsShown>>>,
}

impl Files {
    /// The TLS of `rule` with settings `s`: its files read the first time
    /// this rule is asked for, the same [`Loaded`] after.
    fn load(&mut self, rule: &ResolvedRule, s: &RuleOptions) -> Result<Option<Loaded>, String> {
        if !names_tls(s) {
            // Nothing kept for a rule without TLS: 32,768 such rules would
            // hold 10 MiB of keys for nothing.
            return Ok(None);
        }
        self.loaded
            .entry(RuleKey::of(rule, s))
            .or_insert_with(|| load(s, &backend_hosts(rule)))
            .clone()
    }

    /// The TLS of `rule` with settings `s` as the views show it
    /// ([`seen::shown`]), its certificates read once per rule too.
    pub(crate) fn shown(
        &mut self,
        rule: &ResolvedRule,
        s: &RuleOptions,
    ) -> Option<Arc<crate::stats::TlsShown>> {
        if !names_tls(s) {
            return None;
        }
        self.shown
            .entry(RuleKey::of(rule, s))
            .or_insert_with(|| seen::shown(s).map(Arc::new))
            .clone()
    }

    /// The route's TLS for `rule` with settings `s`; `Ok(None)` when it has
    /// none. Each route counts its own handshakes.
    pub(crate) fn for_rule(
        &mut self,
        rule: &ResolvedRule,
        s: &RuleOptions,
    ) -> Result<Option<RouteTls>, String> {
        let Some(loaded) = self.load(rule, s)? else {
            return Ok(None);
        };
        Ok(Some(RouteTls {
            server: loaded.server,
            handshake_timeout: s.tls_handshake_timeout.unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT),
            max_handshakes: s
                .tls_max_handshakes
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(MAX_HANDSHAKES)
                .max(1),
            handshakes: Arc::new(AtomicUsize::new(0)),
            client: loaded.client,
            allow: (
                s.tls_allow_subject.as_deref().cloned().unwrap_or_default(),
                s.tls_allow_issuer.as_deref().cloned().unwrap_or_default(),
            ),
        }))
    }
}

/// Whether the settings `s` ask for TLS at either end (or name a file that
/// needs it, which [`load`] refuses).
pub(crate) fn names_tls(s: &RuleOptions) -> bool {
    s.tls_cert.is_some()
        || s.tls_key.is_some()
        || s.tls_client_ca.is_some()
        || s.tls_alpn.is_some()
        || s.tls_ocsp.is_some()
        || s.tls_allow_subject.is_some()
        || s.tls_allow_issuer.is_some()
        || s.tls_connect == Some(true)
}

/// The host name of each of `rule`'s backends as written, in file order:
/// what `tls-connect` verifies each for when `tls-name` is not given.
fn backend_hosts(rule: &ResolvedRule) -> Vec<&str> {
    rule.rule
        .backends
        .iter()
        .map(|b| &*b.endpoint.host_text)
        .collect()
}

/// Reads every file the TLS settings `s` of a rule whose backends are
/// named `hosts` (file order) name; `Ok(None)` when the rule has no TLS.
fn load(s: &RuleOptions, hosts: &[&str]) -> Result<Option<Loaded>, String> {
    let server = match (&s.tls_cert, &s.tls_key) {
        (None, None) => None,
        (Some(_), None) => return Err("tls-cert needs tls-key".into()),
        (None, Some(_)) => return Err("tls-key needs tls-cert".into()),
        (Some(cert), Some(key)) => Some(server::server_tls(s, cert, key)?),
    };
    let needs_cert = [
        (s.tls_client_ca.is_some(), "tls-client-ca"),
        (s.tls_alpn.is_some(), "tls-alpn"),
        (s.tls_ocsp.is_some(), "tls-ocsp"),
    ];
    for (set, name) in needs_cert {
        if set && server.is_none() {
            return Err(format!("{name} needs tls-cert and tls-key"));
        }
    }
    if (s.tls_allow_subject.is_some() || s.tls_allow_issuer.is_some()) && s.tls_client_ca.is_none()
    {
        return Err(
            "tls-allow-subject and tls-allow-issuer need tls-client-ca (the CA \
             that signs the client certificates they are checked on)"
                .into(),
        );
    }
    let client = match s.tls_connect {
        Some(true) => Some(client_config(s, hosts)?),
        _ => None,
    };
    if server.is_none() && client.is_none() {
        return Ok(None);
    }
    Ok(Some(Loaded { server, client }))
}

/// The crypto provider every config uses: ring (see `Cargo.toml`).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The backend's side: verified against `tls-ca` (else the system's roots)
/// for `tls-name` (else each backend for its own host name in `hosts`: a
/// pool's backends need not share a certificate), or not at all with
/// `tls-insecure`.
fn client_config(
    s: &RuleOptions,
    hosts: &[&str],
) -> Result<(Arc<ClientConfig>, Vec<ServerName<'static>>), String> {
    let texts = match s.tls_name.as_deref() {
        Some(name) => vec![name],
        None => hosts.to_vec(),
    };
    let names = texts
        .into_iter()
        .map(|text| {
            ServerName::try_from(text.to_string())
                .map_err(|e| format!("tls-name '{}': {e}", Shown(text)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if s.tls_insecure == Some(true) {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(io::AnyCertificate(provider())))
    } else {
        builder.with_root_certificates(files::roots(s.tls_ca.as_deref())?)
    };
    let config = match (&s.tls_client_cert, &s.tls_client_key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = files::certs(cert, "client certificate")?;
            let key_der = files::key(key, "client private key")?;
            files::certified(cert, key)?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| format!("tls-client-cert {}: {e}", cert.display()))?
        }
        _ => return Err("tls-client-cert and tls-client-key go together".into()),
    };
    let mut config = config;
    config.resumption = if s.tls_resumption == Some(false) {
        Resumption::disabled()
    } else {
        Resumption::in_memory_sessions(CLIENT_SESSIONS)
    };
    Ok((Arc::new(config), names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_in_progress_stop_at_the_cap_and_free_their_place() {
        let tls = RouteTls {
            server: None,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_handshakes: MAX_HANDSHAKES,
            handshakes: Arc::new(AtomicUsize::new(0)),
            client: None,
            allow: (Vec::new(), Vec::new()),
        };
        let held: Vec<HandshakeSlot> = (0..MAX_HANDSHAKES)
            .map_while(|_| tls.handshake_slot())
            .collect();
        assert_eq!(held.len(), MAX_HANDSHAKES);
        assert!(
            tls.handshake_slot().is_none(),
            "one past the cap is refused"
        );
        drop(held);
        assert!(
            tls.handshake_slot().is_some(),
            "finished handshakes free their place"
        );
        assert_eq!(tls.handshakes.load(Ordering::Acquire), 0);
    }
}
