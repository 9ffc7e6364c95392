//! TLS ended and begun by oi itself, as stunnel does, with rustls (ring as
//! the crypto provider; no OpenSSL).
//!
//! A stage on the connection's road: after the client is admitted and
//! routed (`route/`, `[sni=]` included: the peeked ClientHello has already
//! chosen the rule, so the rule's own certificate is the one presented),
//! `tcp::open` runs the client's handshake ([`handshake`]) before it dials
//! the backend, and the backend's after the connect; then
//! [`pump`] moves plaintext both ways instead of the plain pump.
//!
//! - `files.rs`: PEM certificates, keys and roots, checked as `--check` reports them;
//! - `io.rs`: rustls over oi's reactor sockets, and the handshakes;
//! - `pump.rs`: the two directions once both handshakes are done;
//! - `subject.rs`: a client certificate's names, for the logs and for
//!   `tls-allow-subject`/`tls-allow-issuer`.
//!
//! kTLS seam: once a handshake is done, rustls can give the traffic
//! secrets (`dangerous_extract_secrets`); a kernel with kTLS would take
//! them with setsockopt(TLS_TX/TLS_RX) and the plain pump (splice
//! included) would run on the socket. This kernel has no `tls` module, so
//! [`pump`] encrypts in user space; `pump::run` is where the choice goes.

pub(crate) mod files;
pub(crate) mod io;
pub(crate) mod pump;
pub(crate) mod seen;
pub(crate) mod subject;

use futures_lite::FutureExt;
use oi_config::{ConfigError, ConfigErrors, ResolvedConfig, ResolvedRule, RuleOptions, Shown};
use oi_runtime::reactor::{Async, Timer};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, Connection, ServerConfig};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long a client may take over its handshake unless
/// `tls-handshake-timeout` says otherwise.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most client handshakes in progress at once on one rule's listener: each
/// holds rustls's state (about 10 KiB) and a socket for up to the
/// handshake timeout, so a flood of clients that never finish holds at
/// most 1,024 of them; past that, new clients are closed at once.
pub(crate) const MAX_HANDSHAKES: usize = 1024;

/// A rule's TLS, built once per route from its settings.
pub(crate) struct RouteTls {
    /// Ending TLS from clients (`tls-cert`, `tls-key`, `tls-client-ca`).
    pub(crate) server: Option<Arc<ServerConfig>>,
    /// How long a client's handshake may take.
    pub(crate) handshake_timeout: Duration,
    /// Client handshakes in progress, held below [`MAX_HANDSHAKES`].
    pub(crate) handshakes: Arc<AtomicUsize>,
    /// `tls-allow-subject` and `tls-allow-issuer` entries (empty: not
    /// given), checked on each client certificate after its handshake.
    pub(crate) allow: (Vec<String>, Vec<String>),
    /// Beginning TLS to the backend (`tls-connect`), and the name each
    /// backend of the pool is verified for, in file order (one name, for
    /// all of them, with `tls-name`).
    pub(crate) client: Option<(Arc<ClientConfig>, Vec<ServerName<'static>>)>,
}

/// A handshake's place below [`MAX_HANDSHAKES`], given back when dropped.
pub(crate) struct HandshakeSlot(Arc<AtomicUsize>);

impl RouteTls {
    /// A place for one more client handshake, or `None` at the cap.
    pub(crate) fn handshake_slot(&self) -> Option<HandshakeSlot> {
        let taken = self
            .handshakes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_HANDSHAKES).then_some(n + 1)
            });
        taken.ok().map(|_| HandshakeSlot(self.handshakes.clone()))
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
    let Some(config) = &tls.server else {
        return Ok(None);
    };
    let Some(_slot) = tls.handshake_slot() else {
        return Err(format!("{MAX_HANDSHAKES} handshakes already in progress").into());
    };
    let conn = rustls::ServerConnection::new(config.clone())
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

/// The TLS of a rule with settings `s` whose backends are named `hosts`
/// (file order); `Ok(None)` when it has none. Reads every file it names.
pub(crate) fn for_rule(s: &RuleOptions, hosts: &[&str]) -> Result<Option<RouteTls>, String> {
    let server = match (&s.tls_cert, &s.tls_key) {
        (None, None) => None,
        (Some(_), None) => return Err("tls-cert needs tls-key".into()),
        (None, Some(_)) => return Err("tls-key needs tls-cert".into()),
        (Some(cert), Some(key)) => Some(server_config(s, cert, key)?),
    };
    if s.tls_client_ca.is_some() && server.is_none() {
        return Err("tls-client-ca needs tls-cert and tls-key".into());
    }
    let allow = (
        s.tls_allow_subject.as_deref().cloned().unwrap_or_default(),
        s.tls_allow_issuer.as_deref().cloned().unwrap_or_default(),
    );
    if (!allow.0.is_empty() || !allow.1.is_empty()) && s.tls_client_ca.is_none() {
        return Err(
            "tls-allow-subject and tls-allow-issuer need tls-client-ca (the CA \
             that signs the client certificates they are checked on)"
                .into(),
        );
    }
    if s.tls_alpn.is_some() && server.is_none() {
        return Err("tls-alpn needs tls-cert and tls-key".into());
    }
    let client = match s.tls_connect {
        Some(true) => Some(client_config(s, hosts)?),
        _ => None,
    };
    if server.is_none() && client.is_none() {
        return Ok(None);
    }
    Ok(Some(RouteTls {
        server,
        handshake_timeout: s.tls_handshake_timeout.unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT),
        handshakes: Arc::new(AtomicUsize::new(0)),
        allow,
        client,
    }))
}

/// The crypto provider every config uses: ring (see `Cargo.toml`).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The listener's side: TLS 1.2 and 1.3, the rule's certificate, and client
/// certificates when `tls-client-ca` is set.
fn server_config(
    s: &RuleOptions,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<ServerConfig>, String> {
    let certified = files::certified(cert, key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &s.tls_client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = files::roots(Some(ca))?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .map_err(|e| format!("tls-client-ca {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(One(certified)));
    if let Some(list) = &s.tls_alpn {
        config.alpn_protocols = alpn(list)?;
    }
    Ok(Arc::new(config))
}

/// `tls-alpn`'s protocol names, separated by colons (a comma ends the
/// option in rinetd.conf), each 1 to 255 bytes.
fn alpn(list: &str) -> Result<Vec<Vec<u8>>, String> {
    if list.contains(',') {
        return Err(format!(
            "tls-alpn '{}': separate protocols with ':' (h2:http/1.1)",
            Shown(list)
        ));
    }
    list.split(':')
        .map(|p| {
            let p = p.trim();
            if p.is_empty() || p.len() > 255 {
                return Err(format!(
                    "tls-alpn '{}': each protocol is 1 to 255 bytes",
                    Shown(list)
                ));
            }
            Ok(p.as_bytes().to_vec())
        })
        .collect()
}

/// The one certificate a rule presents: on a listener shared by server
/// name, the ClientHello has already chosen the rule (`route::ServerNames`),
/// so each rule's config resolves to its own certificate.
#[derive(Debug)]
struct One(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for One {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
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
    Ok((Arc::new(config), names))
}

/// Checks the TLS files of every rule of `cfg` as start-up and a reload
/// would read them: every bad rule at once, each at its file and line.
/// Returns the warnings (a key others may read, a certificate about to
/// expire, `tls-insecure`), each at its rule's line.
pub(crate) fn check(cfg: &ResolvedConfig, file: &str) -> Result<Vec<ConfigError>, ConfigErrors> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let rules = cfg
        .rules
        .iter()
        .flat_map(|r| std::iter::once(r).chain(r.sni.iter()));
    for rule in rules {
        let s = rule.settings();
        let hosts = backend_hosts(rule);
        match for_rule(&s, &hosts) {
            Ok(_) => warnings.extend(rule_warnings(&s).into_iter().map(|w| at(rule, w))),
            Err(e) => errors.push(at(rule, e)),
        }
        if errors.len() >= oi_config::MAX_ERRORS {
            break;
        }
    }
    if errors.is_empty() {
        return Ok(warnings);
    }
    Err(ConfigErrors {
        file: file.to_string(),
        errors,
        omitted: 0,
    })
}

/// The host name of each of `rule`'s backends as written, in file order:
/// what `tls-connect` verifies each for when `tls-name` is not given.
pub(crate) fn backend_hosts(rule: &ResolvedRule) -> Vec<&str> {
    rule.rule
        .backends
        .iter()
        .map(|b| &*b.endpoint.host_text)
        .collect()
}

/// What `--check` warns about in a rule's TLS that loads.
fn rule_warnings(s: &RuleOptions) -> Vec<String> {
    let mut out = Vec::new();
    if s.tls_insecure == Some(true) && s.tls_connect == Some(true) {
        out.push(
            "tls-insecure: the backend's certificate is not verified; anyone on \
             the path can pretend to be it"
                .to_string(),
        );
    }
    for key in [&s.tls_key, &s.tls_client_key].into_iter().flatten() {
        out.extend(files::key_exposed(key));
    }
    for cert in [&s.tls_cert, &s.tls_client_cert].into_iter().flatten() {
        let Ok(chain) = files::certs(cert, "certificate") else {
            continue;
        };
        let Some(ends) = chain.first().and_then(|c| files::not_after(c)) else {
            continue;
        };
        match ends.duration_since(SystemTime::now()) {
            Err(_) => out.push(format!("certificate {} has expired", cert.display())),
            Ok(left) if left < files::EXPIRY_WARNING => out.push(format!(
                "certificate {} expires in {} days",
                cert.display(),
                left.as_secs() / 86_400
            )),
            Ok(_) => {}
        }
    }
    out
}

/// `message` at `rule`'s file and line.
fn at(rule: &ResolvedRule, message: String) -> ConfigError {
    ConfigError {
        file: rule.rule.file.clone(),
        line: rule.rule.line,
        column: 0,
        message,
        text: String::new(),
        more: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_in_progress_stop_at_the_cap_and_free_their_place() {
        let tls = RouteTls {
            server: None,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            handshakes: Arc::new(AtomicUsize::new(0)),
            allow: (Vec::new(), Vec::new()),
            client: None,
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
