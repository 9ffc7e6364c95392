//! Batched UDP I/O: many datagrams per system call where the kernel offers it.
//!
//! - Receive: one `recvmmsg` reads up to [`SLOTS`] datagrams (from many
//!   clients on a listener, or a backend's replies on an association). With
//!   `UDP_GRO` on ([`enable_gro`]), one slot may hold several equal-sized
//!   datagrams the kernel coalesced; the `UDP_GRO` control message gives their
//!   size and they are split again here, so every datagram keeps its boundary.
//!   Datagrams reach the caller as *runs*: consecutive datagrams from one peer,
//!   at most [`RUN_MAX`], so a caller looks its association up once per run.
//!   A socket whose last receive found one datagram (a quiet flow: DNS, a
//!   game) asks for [`LONE_SLOTS`] next ([`Pace`]): fewer fresh headers.
//! - Send: a run for one destination goes out as one `sendmsg` with
//!   `UDP_SEGMENT` (GSO) when its datagrams are equal-sized (the last may be
//!   shorter), else as one `sendmmsg`; a single datagram is a plain `send`.
//!
//! Fallbacks: each batched call the kernel refuses as unsupported (`ENOSYS`,
//! `EOPNOTSUPP`, `ENOPROTOOPT`, and `EIO` for GSO on a device without checksum
//! offload) is switched off for the process and the same datagrams go the
//! one-at-a-time way. `OI_UDP_BATCH=off` in the environment switches all of it
//! off from the start (no GRO either): the comparison baseline, and the test of
//! the fallback path.
//!
//! Memory: the receive buffer is one per executor thread, [`SLOTS`] ×
//! [`DATAGRAM_BUFFER`] = 1 MiB, allocated when the thread first receives UDP
//! and touched only as far as datagrams fill it. Batches are handled without
//! waiting, so the buffer is never held across an `await` and no task owns one.

use crate::route::shared::DATAGRAM_BUFFER;
use nix::sys::socket::{
    self as nx, sockopt, ControlMessage, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrIn,
    SockaddrIn6, SockaddrLike, SockaddrStorage,
};
use std::cell::RefCell;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Datagrams (or GRO groups) one `recvmmsg` reads: 16 × 64 KiB per thread
/// keeps the buffer at 1 MiB while taking most of a burst in one call.
pub(crate) const SLOTS: usize = 16;

/// Slots asked for on a socket whose last receive filled at most one slot
/// (one datagram, or one sender's GRO group). nix builds its headers afresh on every `recvmmsg` (four
/// allocations, the control space zero-filled, all sized by the slots), and a
/// lone datagram needs one slot and one more to prove the socket empty:
/// callgrind, a 64 B UDP ping-pong through oi at one thread (two receives
/// and two sends a round trip), 8,069 user-space instructions a round trip
/// at 16 slots, 6,607 with this. A burst after a lone datagram pays one
/// `recvmmsg` more (the first takes two); a socket whose receives fill
/// several slots keeps asking for [`SLOTS`]. Always 2 instead ran more per
/// datagram under iperf3's bursts (2,805 against 2,668): every burst then
/// took several calls. Judged by slots, not datagrams: under valgrind
/// iperf3's datagrams arrive a few to a wake-up, coalesced by GRO into one
/// slot, and a count of datagrams kept asking for 16 there.
pub(crate) const LONE_SLOTS: usize = 2;

/// Most datagrams in one run, and so in one GSO send: the kernel's
/// `UDP_MAX_SEGMENTS` (64 since Linux 4.18).
pub(crate) const RUN_MAX: usize = 64;

/// The most payload bytes one GSO send may carry (IPv4's datagram limit; a
/// GSO send is one datagram until the kernel or the device splits it).
const GSO_MAX_BYTES: usize = super::MAX_PAYLOAD;

/// Control-message space per slot: the `UDP_GRO` segment size needs 24 bytes
/// (a 16-byte header and a 4-byte value, padded to 8); the rest leaves room
/// for one more small option, so the one oi needs is not cut off by an option
/// oi never sets (a cut one is detected and the slot dropped). Small because
/// nix zero-fills `SLOTS` of these with `calloc` on every `recvmmsg`, and
/// glibc's `calloc` skips its per-thread cache.
const CMSG_SPACE: usize = 48;

/// `recvmmsg` not refused yet.
static RECVMMSG: AtomicBool = AtomicBool::new(true);
/// `sendmmsg` not refused yet.
static SENDMMSG: AtomicBool = AtomicBool::new(true);
/// `UDP_SEGMENT` not refused yet.
static GSO: AtomicBool = AtomicBool::new(true);
/// Segments this large or larger are not sent with GSO: the kernel refused
/// one (a segment that does not fit the path's MTU is `EINVAL` under GSO,
/// where a plain send would be fragmented). Only ever lowered, so a flow of
/// such datagrams pays for the refused call once, not once per run.
static GSO_TOO_LARGE: AtomicUsize = AtomicUsize::new(usize::MAX);

thread_local! {
    /// This thread's receive buffer, [`SLOTS`] slots of [`DATAGRAM_BUFFER`].
    static SCRATCH: RefCell<Option<Box<[u8]>>> = const { RefCell::new(None) };
}

/// Whether batching is on: unless `OI_UDP_BATCH=off` (read once).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("OI_UDP_BATCH").is_none_or(|v| v != "off"))
}

/// Asks the kernel to coalesce equal-sized datagrams from one sender
/// (`UDP_GRO`, Linux 5.0). A kernel without it refuses and nothing changes:
/// every receive here reads the segment size, with or without it.
pub(crate) fn enable_gro(socket: &UdpSocket) {
    if enabled() {
        if let Err(e) = nx::setsockopt(socket, sockopt::UdpGroSegment, &true) {
            log::debug!("UDP_GRO not available: {e}");
        }
    }
}

/// Whether `e` says the kernel does not have the call or option at all.
fn unsupported(e: nix::Error) -> bool {
    matches!(
        e,
        nix::Error::ENOSYS | nix::Error::EOPNOTSUPP | nix::Error::ENOPROTOOPT
    )
}

/// How many slots a socket's next receive asks for, kept by the task that
/// reads it: [`LONE_SLOTS`] after a receive that filled at most one slot,
/// [`SLOTS`] otherwise.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pace {
    /// The last receive filled at most one slot.
    lone: bool,
}

/// What one [`recv_runs`] call read.
pub(crate) struct Received {
    /// Datagrams handed to the caller (GRO groups counted by their segments).
    pub(crate) datagrams: usize,
    /// The socket had fewer datagrams than the call could take: it is empty
    /// now, and asking again would only return `WouldBlock`.
    pub(crate) drained: bool,
    /// Slots the receive filled (a GRO group fills one): what [`Pace`] goes by.
    slots: usize,
}

/// One received slot: where its datagrams came from and how they are cut.
#[derive(Clone, Copy)]
struct Slot {
    /// Bytes in the slot.
    len: usize,
    /// The sender; `None` for an address family oi does not forward.
    peer: Option<SocketAddr>,
    /// The GRO segment size, when the slot holds several datagrams.
    segment: usize,
}

/// Reads what `socket` has (one batch) and calls `each(peer, run)` for every
/// run of consecutive datagrams from one peer, in arrival order. Never
/// waits; `WouldBlock` and other errors come back only when nothing was read.
pub(crate) fn recv_runs(
    socket: &UdpSocket,
    family: Family,
    pace: &mut Pace,
    mut each: impl FnMut(SocketAddr, &[&[u8]]),
) -> io::Result<Received> {
    let slots = if pace.lone { LONE_SLOTS } else { SLOTS };
    let got = SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let buf = scratch.get_or_insert_with(|| vec![0u8; SLOTS * DATAGRAM_BUFFER].into());
            let len = buf.len().min(slots * DATAGRAM_BUFFER);
            recv_into(socket, family, &mut buf[..len], &mut each)
        }
        // Only a caller that receives again from inside `each` gets here;
        // none does, but a fresh buffer is correct where a panic is not.
        Err(_) => recv_into(socket, family, &mut vec![0u8; DATAGRAM_BUFFER], &mut each),
    });
    if let Ok(r) = &got {
        pace.lone = r.slots <= 1;
    }
    got
}

/// The address family of a UDP socket, which is that of every sender it
/// receives from (an IPv6 socket sees IPv4 clients as mapped addresses).
/// `recvmmsg` is given address space of exactly that size: with room for any
/// family (128 bytes a slot), nix's per-call address array was 2 KiB, past
/// glibc's per-thread cache: sized to the family (with the smaller control
/// space), a lone datagram costs 2,743 user-space instructions, not 3,399
/// (`benches/rtt_instructions.sh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// `AF_INET`.
    V4,
    /// `AF_INET6`.
    V6,
}

impl Family {
    /// The family of a socket bound or connected to `addr`.
    pub(crate) fn of(addr: SocketAddr) -> Family {
        if addr.is_ipv6() {
            Family::V6
        } else {
            Family::V4
        }
    }

    /// The family of `socket`, from its local address (one `getsockname`:
    /// once per socket, not per receive); IPv4 if the kernel cannot say.
    pub(crate) fn of_socket(socket: &UdpSocket) -> Family {
        socket.local_addr().map_or(Family::V4, Family::of)
    }
}

/// [`recv_runs`] into `buf` (one slot per [`DATAGRAM_BUFFER`] bytes).
fn recv_into(
    socket: &UdpSocket,
    family: Family,
    buf: &mut [u8],
    each: &mut impl FnMut(SocketAddr, &[&[u8]]),
) -> io::Result<Received> {
    let mut slots = [Slot {
        len: 0,
        peer: None,
        segment: 0,
    }; SLOTS];
    let wanted = (buf.len() / DATAGRAM_BUFFER).clamp(1, SLOTS);
    let wanted = if enabled() && RECVMMSG.load(Ordering::Relaxed) {
        wanted
    } else {
        1
    };
    let got = if wanted > 1 {
        let slots = &mut slots[..wanted];
        let got = match family {
            Family::V4 => recv_many::<SockaddrIn>(socket, buf, slots),
            Family::V6 => recv_many::<SockaddrIn6>(socket, buf, slots),
        };
        match got {
            Err(e) if unsupported(e) => {
                log::debug!("recvmmsg not available ({e}): one datagram per call");
                RECVMMSG.store(false, Ordering::Relaxed);
                recv_one(socket, buf, &mut slots[0])?
            }
            got => got?,
        }
    } else {
        recv_one(socket, buf, &mut slots[0])?
    };
    let drained = got < wanted;
    // A lone datagram (one slot, not a GRO group) goes on as it is, without
    // the run array `cut_runs` fills (64 slices initialised per receive);
    // with `reply::with_kept`, 6,607 -> 5,661 instructions a UDP round trip
    // (callgrind, as at `LONE_SLOTS`).
    if let [Slot {
        len,
        peer: Some(peer),
        segment: 0,
    }] = slots[..got]
    {
        let bytes = &buf[..len.min(buf.len()).min(DATAGRAM_BUFFER)];
        each(peer, &[bytes]);
        return Ok(Received {
            datagrams: 1,
            drained,
            slots: 1,
        });
    }
    Ok(Received {
        datagrams: cut_runs(&slots[..got], buf, each),
        drained,
        slots: got,
    })
}

/// Hands the datagrams of `slots` (received into `buf`, one slot per
/// [`DATAGRAM_BUFFER`] bytes) to `each` as runs from one peer, GRO groups cut
/// at their segment size; how many datagrams it handed on.
#[inline(never)]
fn cut_runs(slots: &[Slot], buf: &[u8], each: &mut impl FnMut(SocketAddr, &[&[u8]])) -> usize {
    let mut run: [&[u8]; RUN_MAX] = [&[]; RUN_MAX];
    let mut n = 0;
    let mut from: Option<SocketAddr> = None;
    let mut datagrams = 0;
    for (slot, bytes) in slots.iter().zip(buf.chunks(DATAGRAM_BUFFER)) {
        let Some(peer) = slot.peer else { continue };
        let bytes = &bytes[..slot.len.min(bytes.len())];
        // A slot without a segment size holds one datagram, possibly empty.
        let size = if slot.segment == 0 {
            bytes.len().max(1)
        } else {
            slot.segment
        };
        let mut parts = bytes.chunks(size);
        let empty = bytes.is_empty().then_some(bytes);
        for part in empty.into_iter().chain(&mut parts) {
            if n == RUN_MAX || (n > 0 && from != Some(peer)) {
                if let Some(f) = from {
                    each(f, &run[..n]);
                }
                n = 0;
            }
            from = Some(peer);
            run[n] = part;
            n += 1;
            datagrams += 1;
        }
    }
    if let (Some(f), true) = (from, n > 0) {
        each(f, &run[..n]);
    }
    datagrams
}

/// One `recvmmsg` into `slots.len()` slots of `buf`, senders' addresses read
/// as `S` (the socket's family); how many it filled.
fn recv_many<S>(socket: &UdpSocket, buf: &mut [u8], slots: &mut [Slot]) -> nix::Result<usize>
where
    S: SockaddrLike + Copy + Into<SocketAddr>,
{
    // Fresh headers per call: nix does not reset the address and control
    // lengths the kernel shortened on the previous call. nix sizes the
    // control space by the template's capacity; its contents are unused.
    let mut headers =
        MultiHeaders::<S>::preallocate(slots.len(), Some(Vec::with_capacity(CMSG_SPACE)));
    // On the stack, not in a `Vec`: one allocation fewer per call.
    let mut chunks = buf.chunks_mut(DATAGRAM_BUFFER);
    let mut iovs: [[IoSliceMut<'_>; 1]; SLOTS] =
        std::array::from_fn(|_| [IoSliceMut::new(chunks.next().unwrap_or_default())]);
    let n = slots.len().min(SLOTS);
    let results = nx::recvmmsg(
        socket.as_raw_fd(),
        &mut headers,
        iovs[..n].iter_mut(),
        MsgFlags::MSG_DONTWAIT,
        None,
    )?;
    let mut got = 0;
    for (msg, slot) in results.zip(slots.iter_mut()) {
        *slot = describe(
            msg.bytes,
            msg.address.map(Into::into),
            msg.flags,
            msg.cmsgs().ok(),
        );
        got += 1;
    }
    Ok(got)
}

/// Space for control messages, aligned as the kernel's `cmsghdr` must be.
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_SPACE]);

/// One `recvmsg` into the first slot of `buf`, still reading the GRO size.
fn recv_one(socket: &UdpSocket, buf: &mut [u8], slot: &mut Slot) -> io::Result<usize> {
    let len = buf.len().min(DATAGRAM_BUFFER);
    let mut iov = [IoSliceMut::new(&mut buf[..len])];
    let mut cmsg = CmsgBuf([0; CMSG_SPACE]);
    let msg = nx::recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg.0[..]),
        MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    *slot = describe(
        msg.bytes,
        msg.address.as_ref().and_then(to_std),
        msg.flags,
        msg.cmsgs().ok(),
    );
    Ok(1)
}

/// What a received message holds. A truncated one (larger than its slot,
/// or whose segment size was cut off) is dropped: forwarding part of a
/// datagram, or several as one, would break the boundaries users rely on.
fn describe(
    bytes: usize,
    peer: Option<SocketAddr>,
    flags: MsgFlags,
    cmsgs: Option<nx::CmsgIterator<'_>>,
) -> Slot {
    let mut slot = Slot {
        len: bytes,
        peer,
        segment: 0,
    };
    let Some(cmsgs) = cmsgs else {
        log::debug!("UDP receive: control data cut off; datagram dropped");
        slot.peer = None;
        return slot;
    };
    for c in cmsgs {
        if let ControlMessageOwned::UdpGroSegments(size) = c {
            slot.segment = usize::try_from(size).unwrap_or(0);
        }
    }
    if flags.contains(MsgFlags::MSG_TRUNC) {
        log::debug!("UDP receive: datagram larger than its buffer dropped");
        slot.peer = None;
    }
    slot
}

/// A socket address as std spells it; `None` for families UDP here never sees.
fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

/// What one [`send_run`] did.
#[derive(Default)]
pub(crate) struct Sent {
    /// Datagrams the kernel took.
    pub(crate) datagrams: usize,
    /// Their payload bytes (without the header).
    pub(crate) bytes: u64,
    /// Datagrams not sent because the socket's buffer was full (the rest of
    /// the run from there on): the caller drops them, as UDP would.
    pub(crate) blocked: usize,
    /// The last error that cost a datagram, other than `WouldBlock`.
    pub(crate) error: Option<io::Error>,
}

/// Sends `payloads` in order on `socket`, to `to` (or to its connected peer),
/// each after `header` if there is one. Never waits. A datagram the kernel
/// refuses (a backend's ICMP error reported on this send, too large) is
/// skipped and the rest still go, as one send each would have done.
pub(crate) fn send_run(
    socket: &UdpSocket,
    to: Option<SocketAddr>,
    header: Option<&[u8]>,
    payloads: &[&[u8]],
) -> Sent {
    let mut sent = Sent::default();
    let mut rest = payloads;
    // Bounded: every turn sends or skips at least one datagram, or stops.
    for _ in 0..=payloads.len() {
        if rest.is_empty() {
            break;
        }
        let (result, tried) = send_some(socket, to, header, rest);
        match result {
            Ok(k) => {
                let k = k.clamp(1, tried);
                sent.datagrams += k;
                sent.bytes += rest[..k].iter().map(|p| p.len() as u64).sum::<u64>();
                rest = &rest[k..];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sent.blocked = rest.len();
                break;
            }
            Err(e) => {
                rest = &rest[1..];
                sent.error = Some(e);
            }
        }
    }
    sent
}

/// One system call's worth of [`send_run`]: how many of `payloads` went, and
/// how many the call tried (so a count it reports is never taken for more).
fn send_some(
    socket: &UdpSocket,
    to: Option<SocketAddr>,
    header: Option<&[u8]>,
    payloads: &[&[u8]],
) -> (io::Result<usize>, usize) {
    if payloads.len() > 1 && enabled() {
        let n = payloads.len().min(RUN_MAX);
        if header.is_none() && GSO.load(Ordering::Relaxed) {
            if let Some(k) = gso_prefix(&payloads[..n]) {
                match send_gso(socket, to, &payloads[..k]) {
                    Ok(_) => return (Ok(k), k),
                    Err(e) if e == nix::Error::EAGAIN => return (Err(e.into()), k),
                    Err(e) if unsupported(e) || e == nix::Error::EIO => {
                        log::debug!("UDP GSO not available ({e}): sendmmsg instead");
                        GSO.store(false, Ordering::Relaxed);
                    }
                    Err(e) if e == nix::Error::EINVAL || e == nix::Error::EMSGSIZE => {
                        let size = payloads[0].len();
                        log::debug!(
                            "UDP GSO refused {size}-byte segments ({e}): sendmmsg for them"
                        );
                        GSO_TOO_LARGE.fetch_min(size, Ordering::Relaxed);
                    }
                    // An error one datagram must take (an ICMP error reported
                    // on this send): the one-by-one accounting below sorts it out.
                    Err(_) => {}
                }
            }
        }
        if SENDMMSG.load(Ordering::Relaxed) {
            match send_many(socket, to, header, &payloads[..n]) {
                Err(e) if unsupported(e) => {
                    log::debug!("sendmmsg not available ({e}): one datagram per call");
                    SENDMMSG.store(false, Ordering::Relaxed);
                }
                result => return (result.map_err(io::Error::from), n),
            }
        }
    }
    (send_one(socket, to, header, payloads[0]).map(|_| 1), 1)
}

/// How many leading datagrams of `payloads` one GSO send can carry: equal
/// sizes (the last may be shorter but not empty), within [`GSO_MAX_BYTES`].
/// `None` when fewer than two qualify.
fn gso_prefix(payloads: &[&[u8]]) -> Option<usize> {
    let size = payloads.first()?.len();
    if size == 0 || size >= GSO_TOO_LARGE.load(Ordering::Relaxed) {
        return None;
    }
    let mut total = 0usize;
    let mut k = 0;
    for p in payloads {
        if p.is_empty() || p.len() > size || total + p.len() > GSO_MAX_BYTES {
            break;
        }
        total += p.len();
        k += 1;
        if p.len() < size {
            break;
        }
    }
    (k >= 2).then_some(k)
}

/// One `sendmsg` of `payloads` with `UDP_SEGMENT` set to the first one's size.
fn send_gso(socket: &UdpSocket, to: Option<SocketAddr>, payloads: &[&[u8]]) -> nix::Result<usize> {
    let size = u16::try_from(payloads[0].len()).map_err(|_| nix::Error::EMSGSIZE)?;
    // On the stack, not in a `Vec`: no allocation per send.
    let mut iov = [IoSlice::new(&[]); RUN_MAX];
    let n = payloads.len().min(RUN_MAX);
    for (slot, p) in iov.iter_mut().zip(&payloads[..n]) {
        *slot = IoSlice::new(p);
    }
    let to = to.map(SockaddrStorage::from);
    nx::sendmsg(
        socket.as_raw_fd(),
        &iov[..n],
        &[ControlMessage::UdpGsoSegments(&size)],
        MsgFlags::MSG_DONTWAIT,
        to.as_ref(),
    )
}

/// One `sendmmsg` of `payloads` (each after `header`); how many went.
fn send_many(
    socket: &UdpSocket,
    to: Option<SocketAddr>,
    header: Option<&[u8]>,
    payloads: &[&[u8]],
) -> nix::Result<usize> {
    let head = header.unwrap_or(&[]);
    let iovs: Vec<[IoSlice<'_>; 2]> = payloads
        .iter()
        .map(|p| [IoSlice::new(head), IoSlice::new(p)])
        .collect();
    let addrs: Vec<Option<SockaddrStorage>> = vec![to.map(SockaddrStorage::from); payloads.len()];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(payloads.len(), None);
    let no_control: [ControlMessage<'_>; 0] = [];
    let results = nx::sendmmsg(
        socket.as_raw_fd(),
        &mut headers,
        &iovs,
        &addrs,
        no_control,
        MsgFlags::MSG_DONTWAIT,
    )?;
    Ok(results.count())
}

/// One datagram, the way oi sent every datagram before batching.
fn send_one(
    socket: &UdpSocket,
    to: Option<SocketAddr>,
    header: Option<&[u8]>,
    payload: &[u8],
) -> io::Result<usize> {
    let sock = socket2::SockRef::from(socket);
    match (to, header) {
        (None, None) => socket.send(payload),
        (Some(to), None) => socket.send_to(payload, to),
        (to, Some(h)) => {
            let parts = [IoSlice::new(h), IoSlice::new(payload)];
            match to {
                None => sock.send_vectored(&parts),
                Some(to) => sock.send_to_vectored(&parts, &to.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests;
