//! The hand-over messages and how they travel (see `docs/handover.md`).
//!
//! Every message is one `SOCK_SEQPACKET` record, so a record and the
//! descriptors sent with it arrive together and nothing is split or merged:
//! `OIHO` (4 bytes), the hand-over version (u16, big-endian), the kind (one
//! byte), then a JSON object. Encoding and decoding are pure; `send` and
//! `recv` are the two system calls.

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The first bytes of every message.
pub(crate) const MAGIC: &[u8; 4] = b"OIHO";

/// The hand-over version this oi speaks. Raised whenever a message's
/// meaning changes; two oi with different versions do not hand over.
/// Version 5 adds the health question and the drained counters.
pub(crate) const VERSION: u16 = 5;

/// Magic, version and kind.
const HEADER: usize = 7;

/// Largest message either side accepts: the JSON of up to
/// [`FDS_PER_MESSAGE`] sockets, with room to spare.
pub(crate) const MAX_MESSAGE: usize = 64 * 1024;

/// Most descriptors one message carries (the kernel's `SCM_MAX_FD`).
pub(crate) const FDS_PER_MESSAGE: usize = 253;

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// New → old, first: the new process's pid and oi version.
    Hello = 1,
    /// Old → new: sockets, one descriptor per entry of `sockets`.
    Sockets = 2,
    /// Old → new: every socket has been sent.
    End = 3,
    /// New → old: serving; the old one may stop accepting and exit.
    Ready = 4,
    /// New → old: the new process gives up (`error` says why) and exits.
    Failed = 5,
    /// Old → new, after ready: paused connections and UDP flows (version 2;
    /// version 3 adds TCP→UDP streams and UDP associations, version 4
    /// UDP→TCP associations).
    Connections = 6,
    /// Old → new: every paused connection has been sent.
    ConnectionsEnd = 7,
    /// New → old: the connections it serves now (`ids`); the old one
    /// drops those and resumes the rest.
    Adopted = 8,
    /// Old → new, between `connections` and `connections-end`: a memfd
    /// holding its counters as JSON (`bytes` long; version 3).
    Counters = 9,
    /// Old → new, after `adopted`: is the new process's service loop
    /// serving? (version 5). Until the answer the old one accepts on.
    Health = 10,
    /// New → old: the answer, from the new process's service loop: its
    /// `pid` and how many `listeners` serve.
    Healthy = 11,
    /// Old → new: the answer was right; the old one has stopped answering
    /// the control socket and the metrics port, and only drains now.
    Serving = 12,
    /// Old → new, when the old one's last kept connection has ended: a
    /// memfd holding what it counted since `counters` (`bytes` long), to
    /// be added to the new one's.
    Drained = 13,
}

impl Kind {
    /// The kind a byte names.
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Sockets,
            3 => Kind::End,
            4 => Kind::Ready,
            5 => Kind::Failed,
            6 => Kind::Connections,
            7 => Kind::ConnectionsEnd,
            8 => Kind::Adopted,
            9 => Kind::Counters,
            10 => Kind::Health,
            11 => Kind::Healthy,
            12 => Kind::Serving,
            13 => Kind::Drained,
            _ => return None,
        })
    }
}

/// Why a record is not a message this oi can read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// Not a hand-over message at all (no magic, too short, bad JSON).
    Garbled(String),
    /// A hand-over message of another version.
    Version(u16),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Garbled(why) => write!(f, "not a hand-over message ({why})"),
            Unreadable::Version(v) => write!(
                f,
                "it speaks hand-over version {v}, this oi speaks version {VERSION}"
            ),
        }
    }
}

/// One message's bytes.
pub(crate) fn encode(kind: Kind, body: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.push(kind as u8);
    out.extend_from_slice(body.to_string().as_bytes());
    out
}

/// Reads one message's bytes: its kind and JSON object.
pub(crate) fn decode(bytes: &[u8]) -> Result<(Kind, serde_json::Value), Unreadable> {
    if bytes.len() < HEADER || &bytes[..4] != MAGIC {
        return Err(Unreadable::Garbled("no OIHO header".into()));
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(Unreadable::Version(version));
    }
    let kind = Kind::from_byte(bytes[6])
        .ok_or_else(|| Unreadable::Garbled(format!("unknown kind {}", bytes[6])))?;
    let body: serde_json::Value = serde_json::from_slice(&bytes[HEADER..])
        .map_err(|e| Unreadable::Garbled(format!("bad JSON: {e}")))?;
    if !body.is_object() {
        return Err(Unreadable::Garbled("the body is not a JSON object".into()));
    }
    Ok((kind, body))
}

/// Sends one message with `fds` (at most [`FDS_PER_MESSAGE`]).
pub(crate) fn send(
    socket: impl AsFd,
    kind: Kind,
    body: &serde_json::Value,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let bytes = encode(kind, body);
    if bytes.len() > MAX_MESSAGE || fds.len() > FDS_PER_MESSAGE {
        return Err(io::Error::other("hand-over message too large"));
    }
    let mut space =
        vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other(
            "descriptors do not fit the control buffer",
        ));
    }
    let sent = rustix::net::sendmsg(
        socket,
        &[IoSlice::new(&bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent != bytes.len() {
        return Err(io::Error::other("hand-over message cut short"));
    }
    Ok(())
}

/// What [`recv`] got: a message (or why it could not be read) and its
/// descriptors (close-on-exec), or the end of the conversation.
pub(crate) enum Received {
    /// A record.
    Message(Result<(Kind, serde_json::Value), Unreadable>, Vec<OwnedFd>),
    /// The other side closed the connection.
    Closed,
}

/// Receives one record (waits as the socket's receive timeout allows).
pub(crate) fn recv(socket: impl AsFd) -> io::Result<Received> {
    let mut space =
        vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut buf = vec![0u8; MAX_MESSAGE];
    let got = rustix::net::recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(passed) = m {
            fds.extend(passed);
        }
    }
    if got.bytes == 0 && fds.is_empty() {
        return Ok(Received::Closed);
    }
    if got.flags.contains(rustix::net::ReturnFlags::TRUNC) {
        let e = Unreadable::Garbled(format!("longer than {MAX_MESSAGE} bytes"));
        return Ok(Received::Message(Err(e), fds));
    }
    Ok(Received::Message(decode(&buf[..got.bytes]), fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_other_versions_are_named() {
        let body = serde_json::json!({"pid": 42});
        let bytes = encode(Kind::Ready, &body);
        assert_eq!(&bytes[..4], b"OIHO");
        assert_eq!(decode(&bytes), Ok((Kind::Ready, body)));
        let mut other = bytes.clone();
        other[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(decode(&other), Err(Unreadable::Version(7)));
        assert!(matches!(
            decode(b"GET / HTTP/1.1"),
            Err(Unreadable::Garbled(_))
        ));
        let mut bad_kind = bytes;
        bad_kind[6] = 99;
        assert!(matches!(decode(&bad_kind), Err(Unreadable::Garbled(_))));
    }
}
