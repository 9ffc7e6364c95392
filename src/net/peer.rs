//! Who is at the client end of a connection: an IP address and port, or a
//! unix socket client, which has no address (its socket is unnamed). Log
//! lines, the live list and the PROXY header all need to say which; this
//! module is the one place the unix client's text is spelled.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// What log lines and `oi connections` print for a unix socket client, as
/// rinetd-uv's log does: there is no address to print.
pub const UNIX_CLIENT: &str = "unix-client";

/// The client's full address: what the accept call returned (or a PROXY
/// header carried).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A TCP client (or UDP source).
    Ip(SocketAddr),
    /// A client of a unix socket listener: no address.
    Unix,
}

/// The client as the log file prints it and the ACLs match it: the IP alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// An IP client, IPv4-mapped IPv6 already shown as IPv4.
    Ip(IpAddr),
    /// A unix socket client.
    Unix,
}

impl Peer {
    /// The client as logs print it (the IP, unmapped; or the unix client).
    pub fn client(self) -> Client {
        match self {
            Peer::Ip(a) => Client::Ip(unmapped(a)),
            Peer::Unix => Client::Unix,
        }
    }
}

/// The client address as rinetd prints and matches it: IPv4-mapped IPv6 shown as IPv4.
pub(crate) fn unmapped(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

impl Client {
    /// The IP address, unless the client is a unix socket client.
    pub fn ip(self) -> Option<IpAddr> {
        match self {
            Client::Ip(ip) => Some(ip),
            Client::Unix => None,
        }
    }
}

impl From<SocketAddr> for Peer {
    fn from(a: SocketAddr) -> Self {
        Peer::Ip(a)
    }
}

impl From<IpAddr> for Client {
    fn from(ip: IpAddr) -> Self {
        Client::Ip(ip)
    }
}

impl fmt::Display for Peer {
    /// `1.2.3.4:5678`, `[::1]:5678`, or `unix-client`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Ip(a) => a.fmt(f),
            Peer::Unix => f.write_str(UNIX_CLIENT),
        }
    }
}

impl fmt::Display for Client {
    /// `1.2.3.4`, `::1`, or `unix-client`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Client::Ip(ip) => ip.fmt(f),
            Client::Unix => f.write_str(UNIX_CLIENT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_clients_print_as_rinetd_uv_does_and_ip_clients_unmapped() {
        assert_eq!(Peer::Unix.to_string(), "unix-client");
        assert_eq!(Peer::Unix.client().to_string(), "unix-client");
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:80".parse().expect("literal");
        assert_eq!(Peer::from(mapped).client().to_string(), "10.0.0.1");
        assert_eq!(Peer::from(mapped).to_string(), "[::ffff:10.0.0.1]:80");
    }
}
