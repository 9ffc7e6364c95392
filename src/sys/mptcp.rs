//! Multipath TCP (`mptcp=`): stream sockets opened with IPPROTO_MPTCP, and
//! plain TCP ones where the kernel refuses MPTCP (built without it, or
//! `net.mptcp.enabled` is 0), said once per process. A peer that does not
//! speak MPTCP needs nothing here: the kernel falls back to TCP on the same
//! socket. Splice works on MPTCP sockets (Linux 6.x); where it would not,
//! `tcp::splice` copies instead on EINVAL and EOPNOTSUPP.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the kernel's refusal has been reported (once per process: every
/// socket of every `mptcp` rule would otherwise say it again).
static REFUSED_SAID: AtomicBool = AtomicBool::new(false);

/// A stream socket of `domain` and `kind`: MPTCP when `mptcp` and the kernel
/// allows it, else plain TCP.
pub(crate) fn stream(domain: Domain, kind: Type, mptcp: bool) -> io::Result<Socket> {
    if mptcp {
        match Socket::new(domain, kind, Some(Protocol::MPTCP)) {
            Ok(s) => return Ok(s),
            Err(e) if refused(&e) => {
                if !REFUSED_SAID.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "mptcp: the kernel refuses MPTCP sockets ({e}; see \
                         /proc/sys/net/mptcp/enabled); mptcp rules use plain TCP \
                         (said once)"
                    );
                }
            }
            Err(e) => return Err(e),
        }
    }
    Socket::new(domain, kind, None)
}

/// Whether `e` is the kernel saying it has no MPTCP (rather than, say,
/// being out of descriptors, which plain TCP would hit too).
fn refused(e: &io::Error) -> bool {
    use rustix::io::Errno;
    [Errno::PROTONOSUPPORT, Errno::NOPROTOOPT, Errno::INVAL]
        .iter()
        .any(|n| e.raw_os_error() == Some(n.raw_os_error()))
}

/// Whether `socket` is an MPTCP socket (its SO_PROTOCOL), so a sibling
/// listener is made like the first.
pub(crate) fn is_mptcp(socket: socket2::SockRef<'_>) -> bool {
    socket.protocol().ok().flatten() == Some(Protocol::MPTCP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_the_three_errors_the_kernel_gives_for_no_mptcp() {
        use rustix::io::Errno;
        for n in [Errno::PROTONOSUPPORT, Errno::NOPROTOOPT, Errno::INVAL] {
            assert!(refused(&io::Error::from_raw_os_error(n.raw_os_error())));
        }
        assert!(!refused(&io::Error::from_raw_os_error(
            Errno::MFILE.raw_os_error()
        )));
    }

    #[test]
    fn a_plain_socket_is_not_mptcp_and_an_mptcp_one_is_where_the_kernel_has_it() {
        let plain = stream(Domain::IPV4, Type::STREAM, false).expect("socket");
        assert!(!is_mptcp(socket2::SockRef::from(&plain)));
        let asked = stream(Domain::IPV4, Type::STREAM, true).expect("socket");
        let enabled =
            std::fs::read_to_string("/proc/sys/net/mptcp/enabled").is_ok_and(|v| v.trim() == "1");
        if enabled {
            assert!(is_mptcp(socket2::SockRef::from(&asked)));
        }
    }
}
