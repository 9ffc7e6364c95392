//! The listener's side of a rule's TLS: its `ServerConfig`, with the
//! certificate (and stapled OCSP response) it presents and the session
//! state that lets clients resume, carried across reloads that keep the
//! certificate.

use super::{files, provider};
use oi_config::{RuleOptions, Shown};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache};
use rustls::ServerConfig;
use std::path::Path;
use std::sync::Arc;

/// TLS 1.2 sessions the listener of one rule remembers by session ID (for
/// clients that send no ticket); the least recently stored is forgotten
/// first. Each is its 32-byte ID (kept twice: the map and the order) and
/// rustls's encoded session (master secret, versions, server name, ALPN,
/// times: about 100 bytes, plus the client's certificate chain when it sent
/// one), about 250 bytes with the maps' own: at most about 64 KiB per rule
/// without client certificates.
pub(crate) const SESSION_CACHE: usize = 256;

/// A rule's ending of TLS: what rustls runs handshakes with, and what its
/// sessions were made under.
#[derive(Clone)]
pub(crate) struct ServerTls {
    /// The config each client's handshake starts from.
    pub(crate) config: Arc<ServerConfig>,
    /// The certificate chain and client-certificate roots (DER) sessions
    /// are made under; `None` with `tls-resumption=off`. A reload carries
    /// the tickets and session cache over only while this is the same, so
    /// no session made under a replaced certificate resumes.
    identity: Option<Arc<[Vec<u8>]>>,
    /// `config` with the session state of the rule before a reload, made
    /// once for all the routes that share this (a port range's ports):
    /// one config for the range after a reload, as before it.
    carried: Arc<std::sync::OnceLock<Arc<ServerConfig>>>,
}

impl ServerTls {
    /// Keeps `old`'s ticket keys and session cache (the rule's before a
    /// reload) when both resume sessions under the same certificate and
    /// client roots: clients resume across the reload. Otherwise this
    /// rule's fresh ones stand.
    pub(crate) fn keep_sessions_of(&mut self, old: &ServerTls) {
        let same = matches!((&self.identity, &old.identity), (Some(a), Some(b)) if a == b);
        if !same || Arc::ptr_eq(&self.config.ticketer, &old.config.ticketer) {
            return;
        }
        let carried = self.carried.get_or_init(|| {
            let mut config = (*self.config).clone();
            config.ticketer = old.config.ticketer.clone();
            config.session_storage = old.config.session_storage.clone();
            Arc::new(config)
        });
        self.config = carried.clone();
    }
}

/// TLS 1.2 and 1.3 with the rule's certificate (and OCSP response), client
/// certificates when `tls-client-ca` is set, and resumption unless
/// `tls-resumption=off`.
pub(crate) fn server_tls(s: &RuleOptions, cert: &Path, key: &Path) -> Result<ServerTls, String> {
    let mut certified = files::certified(cert, key)?;
    if let Some(path) = &s.tls_ocsp {
        let ocsp = files::ocsp(path)?;
        if let Some(k) = Arc::get_mut(&mut certified) {
            k.ocsp = Some(ocsp);
        }
    }
    let mut identity: Vec<Vec<u8>> = certified.cert.iter().map(|c| c.to_vec()).collect();
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &s.tls_client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = files::roots(Some(ca))?;
            // An empty element parts the chain from the roots.
            identity.push(Vec::new());
            identity.extend(roots.roots.iter().map(|r| r.subject.to_vec()));
            identity.extend(
                roots
                    .roots
                    .iter()
                    .map(|r| r.subject_public_key_info.to_vec()),
            );
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
    let resume = s.tls_resumption != Some(false);
    if resume {
        // Rotates its keys every 6 hours and takes the previous key's
        // tickets too: a ticket is good for up to 12 hours. The keys live
        // in this process's memory alone.
        config.ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| format!("cannot make TLS ticket keys: {e}"))?;
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    } else {
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    Ok(ServerTls {
        config: Arc::new(config),
        identity: resume.then(|| identity.into()),
        carried: Arc::default(),
    })
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
