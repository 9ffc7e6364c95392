//! Listening sockets oi did not bind itself: passed by systemd at start-up
//! (socket activation, or the file descriptor store giving back what an
//! earlier oi stored), as `LISTEN_FDS` descriptors from 3 on, named by
//! `LISTEN_FDNAMES`.
//!
//! Each passed descriptor is matched to a rule by what it is and where it
//! listens: a TCP listener, a UDP socket or a unix stream listener, and its
//! local address exactly as the kernel reports it (`0.0.0.0:80` is not
//! `[::]:80`). The names are only for messages: a unit's `FileDescriptorName=`
//! is free text, and the address is what the rule says. A rule that finds no
//! descriptor binds as usual; a descriptor no rule takes is logged and
//! closed. Several TCP listeners on one address (an earlier oi's
//! `SO_REUSEPORT` group, stored whole so no queued connection is reset when
//! the old process closes its sockets) all serve the one rule.
//!
//! Binding the whole configuration is here too ([`bind_all_with`]): each
//! rule's passed socket if there is one, else one `bind.rs` binds.

use super::bind::{bind, bind_error, BoundSocket, TcpGroup, UnixSocket};
use super::ListenerKey;
use oi_config::{BindAddr, Proto, ResolvedConfig, UnixAddr};
use rustix::net::{sockopt, AddressFamily, SocketAddrUnix, SocketType};
use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

/// Most descriptors taken from `LISTEN_FDS`: far above any real unit, and
/// the variable comes from the environment, so its count is bounded before
/// anything is done per descriptor.
const MAX_PASSED: usize = 1 << 16;

/// One passed descriptor, identified.
pub(crate) struct Passed {
    /// Its number when passed (3, 4, ...), for messages.
    pub(crate) number: i32,
    /// Its name (`LISTEN_FDNAMES`, `FDNAME=`), for messages.
    pub(crate) name: String,
    /// Where it listens and what kind it is: what rules are matched by.
    pub(crate) key: ListenerKey,
    /// The socket itself.
    pub(crate) socket: OwnedFd,
    /// Handed over by a previous oi (`oi upgrade`) with the device and
    /// inode of the socket file it made: this process owns the file now.
    pub(crate) file: Option<(u64, u64)>,
}

/// The passed descriptors no rule has taken yet.
#[derive(Default)]
pub(crate) struct Inherited {
    /// Identified descriptors, in the order they were passed.
    passed: Vec<Passed>,
    /// One line per passed descriptor that is not a socket oi can serve,
    /// for the log once it is set up.
    rejected: Vec<String>,
}

impl Inherited {
    /// Takes the descriptors systemd passed (`LISTEN_FDS`, `LISTEN_PID`,
    /// `LISTEN_FDNAMES`) and clears those variables, so a process oi starts
    /// does not take them again. Call before any thread starts (it changes
    /// the environment). Nothing passed, or passed to another pid: empty.
    pub(crate) fn from_env() -> Inherited {
        let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
        let mut fds = listenfd::ListenFd::from_env();
        // listenfd clears LISTEN_FDS and LISTEN_PID; the names go too.
        std::env::remove_var("LISTEN_FDNAMES");
        let mut names = names.split(':');
        let mut out = Inherited::default();
        let count = fds.len();
        if count > MAX_PASSED {
            out.rejected.push(format!(
                "LISTEN_FDS passes {count} descriptors; only the first {MAX_PASSED} are looked at"
            ));
        }
        for idx in 0..count.min(MAX_PASSED) {
            let name = names.next().unwrap_or("").to_string();
            let number = i32::try_from(idx).map_or(i32::MAX, |i| i.saturating_add(3));
            match take_socket(&mut fds, idx) {
                Some(fd) => out.add(fd, number, name),
                None => out.rejected.push(format!(
                    "passed descriptor {number} ({}) is not a TCP, UDP or unix stream socket: ignored",
                    shown(&name)
                )),
            }
        }
        out
    }

    /// Identifies `fd` (number `number`, named `name`) and keeps it for
    /// [`Inherited::take`], or notes why it cannot serve a rule.
    pub(crate) fn add(&mut self, fd: OwnedFd, number: i32, name: String) {
        match identify(&fd) {
            Ok(key) => self.passed.push(Passed {
                number,
                name,
                key,
                socket: fd,
                file: None,
            }),
            Err(e) => self.rejected.push(format!(
                "passed descriptor {number} ({}): {e}; closed",
                shown(&name)
            )),
        }
    }

    /// A listening socket a previous oi handed over (`oi upgrade`), with
    /// its socket file's device and inode if it made one.
    pub(crate) fn add_handed(&mut self, fd: OwnedFd, number: i32, file: Option<(u64, u64)>) {
        self.add(fd, number, "handed over".into());
        if let Some(p) = self.passed.last_mut().filter(|p| p.number == number) {
            p.file = file;
        }
    }

    /// The socket(s) passed for the listener `key`, ready to serve, if any;
    /// each use is logged.
    pub(crate) fn take(&mut self, key: &ListenerKey) -> Option<BoundSocket> {
        let (mine, rest): (Vec<Passed>, Vec<Passed>) = std::mem::take(&mut self.passed)
            .into_iter()
            .partition(|p| &p.key == key);
        self.passed = rest;
        let first = mine.first()?;
        let numbers: Vec<String> = mine.iter().map(|p| p.number.to_string()).collect();
        log::info!(
            "{}: serving the passed descriptor(s) {} ({})",
            key.0.with_proto(key.1),
            numbers.join(", "),
            shown(&first.name)
        );
        let file = match (&key.0, first.file) {
            (BindAddr::Unix(oi_config::UnixAddr::Path(path)), Some(id)) => {
                match crate::sys::unix::SocketFile::adopt(path, id) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        log::warn!("{}: {e}; it stays when oi exits", path.display());
                        None
                    }
                }
            }
            _ => None,
        };
        let mut sockets = mine.into_iter().map(|p| p.socket);
        let first = sockets.next()?;
        Some(match (&key.0, key.1) {
            (BindAddr::Unix(addr), _) => BoundSocket::Unix(UnixSocket {
                bound: crate::sys::unix::UnixBound {
                    listener: UnixListener::from(first),
                    // systemd made the file and removes it, oi leaves it
                    // alone; one a previous oi made is this one's now.
                    file,
                },
                addr: addr.clone(),
            }),
            (BindAddr::Ip(_), Proto::Udp) => BoundSocket::Udp(UdpSocket::from(first)),
            (BindAddr::Ip(_), Proto::Tcp) => {
                let rest: Vec<TcpListener> = sockets.map(TcpListener::from).collect();
                if rest.is_empty() {
                    BoundSocket::Tcp(TcpListener::from(first))
                } else {
                    BoundSocket::TcpGroup(TcpGroup {
                        first: TcpListener::from(first),
                        rest,
                    })
                }
            }
        })
    }

    /// Logs every descriptor that was not a usable socket and every one no
    /// rule took, and closes the latter.
    pub(crate) fn report_unused(&mut self) {
        for line in self.rejected.drain(..) {
            log::warn!("{line}");
        }
        for p in self.passed.drain(..) {
            log::warn!(
                "passed descriptor {} ({}, {}) matches no rule: closed",
                p.number,
                shown(&p.name),
                p.key.0.with_proto(p.key.1)
            );
        }
    }
}

/// A name as messages show it: quoted, escaped, at most 64 characters.
fn shown(name: &str) -> String {
    let cut: String = name.chars().take(64).collect();
    if cut.is_empty() {
        "no name".to_string()
    } else {
        format!("name {:?}", cut)
    }
}

/// The descriptor at `idx` as an owned descriptor, when it is a socket of a
/// kind oi serves (listenfd checks the socket type and family).
fn take_socket(fds: &mut listenfd::ListenFd, idx: usize) -> Option<OwnedFd> {
    if let Ok(Some(l)) = fds.take_tcp_listener(idx) {
        return Some(l.into());
    }
    if let Ok(Some(s)) = fds.take_udp_socket(idx) {
        return Some(s.into());
    }
    if let Ok(Some(l)) = fds.take_unix_listener(idx) {
        return Some(l.into());
    }
    None
}

/// What listener `fd` is: its kind and local address, as a rule's key.
pub(crate) fn identify(fd: &OwnedFd) -> Result<ListenerKey, String> {
    let kind = sockopt::socket_type(fd).map_err(|e| format!("not a socket ({e})"))?;
    let local = rustix::net::getsockname(fd).map_err(|e| format!("no local address ({e})"))?;
    let family = local.address_family();
    if kind == SocketType::STREAM
        && !sockopt::socket_acceptconn(fd).map_err(|e| format!("cannot ask ({e})"))?
    {
        return Err("a stream socket that is not listening (Accept=yes is not supported)".into());
    }
    if family == AddressFamily::UNIX {
        if kind != SocketType::STREAM {
            return Err("a unix socket that is not a stream socket".into());
        }
        let addr = SocketAddrUnix::try_from(local).map_err(|e| e.to_string())?;
        return unix_addr(&addr).map(|u| (BindAddr::Unix(u), Proto::Tcp));
    }
    let addr = SocketAddr::try_from(local)
        .map_err(|_| format!("an address family oi does not serve ({family:?})"))?;
    match kind {
        SocketType::STREAM => Ok((BindAddr::Ip(addr), Proto::Tcp)),
        SocketType::DGRAM => Ok((BindAddr::Ip(addr), Proto::Udp)),
        other => Err(format!("a socket type oi does not serve ({other:?})")),
    }
}

/// A unix socket's address as a rule writes it.
fn unix_addr(addr: &SocketAddrUnix) -> Result<UnixAddr, String> {
    if let Some(path) = addr.path() {
        return Ok(UnixAddr::Path(PathBuf::from(OsStr::from_bytes(
            path.to_bytes(),
        ))));
    }
    if let Some(name) = addr.abstract_name() {
        return String::from_utf8(name.to_vec())
            .map(UnixAddr::Abstract)
            .map_err(|_| "an abstract unix name that is not UTF-8".to_string());
    }
    Err("an unnamed unix socket".into())
}

/// Binds every rule; on failure returns one message per rule that failed, naming its line.
///
/// Here, not in `bind.rs`: binding every rule takes each passed socket
/// first ([`bind_all_with`]), so it needs this module, which needs `bind`'s
/// socket types; with it in `bind.rs` the two modules depended on each other.
pub fn bind_all(cfg: &ResolvedConfig, file: &str) -> Result<Vec<BoundSocket>, Vec<String>> {
    bind_all_with(cfg, file, &mut Inherited::default())
}

/// [`bind_all`], taking each rule's socket from `inherited` when one was
/// passed for its address, and binding it otherwise.
pub(crate) fn bind_all_with(
    cfg: &ResolvedConfig,
    file: &str,
    inherited: &mut Inherited,
) -> Result<Vec<BoundSocket>, Vec<String>> {
    let mut bound = Vec::new();
    let mut errors = Vec::new();
    for r in &cfg.rules {
        if let Some(s) = inherited.take(&(r.bind.clone(), r.rule.bind.proto)) {
            bound.push(s);
            continue;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_sockets_are_matched_by_kind_and_address_and_the_rest_reported() {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
        let tcp_addr = tcp.local_addr().expect("addr");
        let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
        let udp_addr = udp.local_addr().expect("addr");
        let unused = TcpListener::bind("127.0.0.1:0").expect("tcp");
        // A connected stream is no listener.
        let peer = std::net::TcpStream::connect(tcp_addr).expect("connect");
        let mut inherited = Inherited::default();
        inherited.add(tcp.into(), 3, "web".into());
        inherited.add(udp.into(), 4, "dns".into());
        inherited.add(unused.into(), 5, String::new());
        inherited.add(peer.into(), 6, "conn".into());
        assert_eq!(inherited.rejected.len(), 1, "{:?}", inherited.rejected);
        assert!(inherited.rejected[0].contains("not listening"));

        let udp_key = (BindAddr::Ip(udp_addr), Proto::Udp);
        let tcp_key = (BindAddr::Ip(tcp_addr), Proto::Tcp);
        // Same address, other kind: no match.
        assert!(inherited
            .take(&(BindAddr::Ip(udp_addr), Proto::Tcp))
            .is_none());
        let Some(BoundSocket::Udp(s)) = inherited.take(&udp_key) else {
            panic!("the UDP socket")
        };
        assert_eq!(s.local_addr().expect("addr"), udp_addr);
        let Some(BoundSocket::Tcp(l)) = inherited.take(&tcp_key) else {
            panic!("the TCP listener")
        };
        assert_eq!(l.local_addr().expect("addr"), tcp_addr);
        assert!(inherited.take(&tcp_key).is_none(), "taken once");
        assert_eq!(inherited.passed.len(), 1, "the unused one is left");
        inherited.report_unused();
        assert!(inherited.passed.is_empty() && inherited.rejected.is_empty());
    }

    #[test]
    fn a_group_of_listeners_on_one_address_serves_one_rule() {
        let first = super::super::bind(&oi_config::ResolvedRule::between(
            "127.0.0.1:0".parse().expect("literal"),
            Proto::Tcp,
            "127.0.0.1:9".parse().expect("literal"),
            Proto::Tcp,
        ))
        .expect("bind");
        let BoundSocket::Tcp(first) = first else {
            panic!("tcp")
        };
        let addr = first.local_addr().expect("addr");
        let second = super::super::bind::sibling(&first, 16).expect("sibling");
        let mut inherited = Inherited::default();
        inherited.add(first.into(), 3, "a".into());
        inherited.add(second.into(), 4, "a".into());
        let Some(BoundSocket::TcpGroup(g)) = inherited.take(&(BindAddr::Ip(addr), Proto::Tcp))
        else {
            panic!("one group")
        };
        assert_eq!(g.rest.len(), 1);
    }
}
