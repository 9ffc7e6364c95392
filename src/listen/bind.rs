//! Turning rules into bound sockets, before anything serves them: start-up
//! fails cleanly on a port in use, and tests can bind port 0 and read the
//! address back.

use crate::config::{Proto, ResolvedConfig, ResolvedRule};
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};

/// A socket bound for one rule, not yet serving.
pub enum BoundSocket {
    /// A listening TCP socket.
    Tcp(TcpListener),
    /// A bound UDP socket.
    Udp(UdpSocket),
}

impl BoundSocket {
    /// The address the socket is bound to (with the real port when bound to 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            BoundSocket::Tcp(l) => l.local_addr(),
            BoundSocket::Udp(s) => s.local_addr(),
        }
    }
}

/// Binds one rule's listening socket (non-blocking, close-on-exec).
pub fn bind(rule: &ResolvedRule) -> io::Result<BoundSocket> {
    use socket2::{Domain, Socket, Type};
    let addr = rule.bind;
    let domain = Domain::for_address(addr);
    match rule.rule.bind.proto {
        Proto::Tcp => {
            let s = Socket::new(domain, Type::STREAM.cloexec(), None)?;
            // Restarting must not fail while old connections sit in TIME_WAIT.
            s.set_reuse_address(true)?;
            s.bind(&addr.into())?;
            // Pending connections the kernel queues before accept (`listen-backlog`).
            let backlog = i32::try_from(rule.listen_backlog()).unwrap_or(i32::MAX);
            s.listen(backlog)?;
            s.set_nonblocking(true)?;
            Ok(BoundSocket::Tcp(s.into()))
        }
        Proto::Udp => {
            let s = Socket::new(domain, Type::DGRAM.cloexec(), None)?;
            s.bind(&addr.into())?;
            s.set_nonblocking(true)?;
            Ok(BoundSocket::Udp(s.into()))
        }
    }
}

/// The message for a rule whose socket could not be bound, naming its line.
pub(crate) fn bind_error(file: &str, rule: &ResolvedRule, e: &io::Error) -> String {
    // A rule from an included file names that file.
    let file = rule.rule.file.as_deref().unwrap_or(file);
    format!(
        "{file}:{}: cannot bind {}/{}: {e}",
        rule.rule.line, rule.bind, rule.rule.bind.proto
    )
}

/// Binds every rule; on failure returns one message per rule that failed, naming its line.
pub fn bind_all(cfg: &ResolvedConfig, file: &str) -> Result<Vec<BoundSocket>, Vec<String>> {
    let mut bound = Vec::new();
    let mut errors = Vec::new();
    for r in &cfg.rules {
        match bind(r) {
            Ok(s) => bound.push(s),
            Err(e) => errors.push(bind_error(file, r, &e)),
        }
    }
    if errors.is_empty() {
        Ok(bound)
    } else {
        Err(errors)
    }
}
