//! Step 8 of the hand-over (`docs/handover.md`): after the new oi is ready,
//! the old one pauses its live TCP connections and sends them; the new one
//! adopts those whose rule it serves and says which; the old one drops
//! those and resumes the rest.
//!
//! One `connections` message carries up to [`PER_MESSAGE`] connections:
//! descriptor 0 is a memfd holding every connection's unsent bytes in
//! order (each one's client→backend bytes, then its backend→client ones),
//! then each connection's client and backend sockets.

use super::park::{HalfState, Offered, Parked, Parking, PARK_WITHIN};
use super::wire::{self, Kind, Received};
use serde_json::{json, Value};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Connections per message: two descriptors each, after the memfd.
pub(crate) const PER_MESSAGE: usize = (wire::FDS_PER_MESSAGE - 1) / 2;

/// Most unsent bytes one connection may carry: what one direction holds
/// at most is a pipe or a buffer (both far below this), so more is garbled.
const MOST_UNSENT: u64 = 64 * 1024 * 1024;

/// The old side: pauses every pump, sends what parked, and hands out the
/// verdicts (adopted, else resume). Never fails the upgrade: a connection
/// that is not confirmed runs on here. Returns how many were adopted.
pub(crate) fn send(conn: &OwnedFd, parking: &Parking) -> usize {
    let parked = parking.collect(PARK_WITHIN);
    let adopted = match offer(conn, &parked) {
        Ok(ids) => ids,
        Err(e) => {
            log::warn!("upgrade: connections not handed over ({e}); they stay here");
            Vec::new()
        }
    };
    let mut n = 0;
    for (i, p) in parked.iter().enumerate() {
        let yes = adopted.contains(&(i as u64));
        n += usize::from(yes);
        let _ = p.verdict.try_send(yes);
    }
    let kept = parked.len() - n;
    if kept > 0 {
        log::info!("upgrade: {kept} connection(s) the new oi did not take stay here");
    }
    n
}

/// Sends the parked connections and returns the ids the new oi confirmed.
fn offer(conn: &OwnedFd, parked: &[Parked]) -> Result<Vec<u64>, String> {
    for (c, chunk) in parked.chunks(PER_MESSAGE).enumerate() {
        let mut bytes = Vec::new();
        let mut entries = Vec::new();
        for (i, p) in chunk.iter().enumerate() {
            bytes.extend_from_slice(&p.up.unsent);
            bytes.extend_from_slice(&p.down.unsent);
            entries.push(json!({
                "id": (c * PER_MESSAGE + i) as u64,
                "rule": p.rule,
                "started": p.started,
                "up": half(&p.up),
                "down": half(&p.down),
            }));
        }
        let data = memfd(&bytes).map_err(|e| format!("cannot store the unsent bytes: {e}"))?;
        let mut fds: Vec<BorrowedFd<'_>> = vec![data.as_fd()];
        for p in chunk {
            fds.push(p.client.as_fd());
            fds.push(p.backend.as_fd());
        }
        let body = json!({ "connections": entries });
        wire::send(conn, Kind::Connections, &body, &fds).map_err(|e| e.to_string())?;
    }
    wire::send(conn, Kind::ConnectionsEnd, &json!({}), &[]).map_err(|e| e.to_string())?;
    match wire::recv(conn).map_err(|e| format!("no answer: {e}"))? {
        Received::Message(Ok((Kind::Adopted, body)), _) => Ok(body["ids"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()),
        Received::Message(Ok((other, _)), _) => Err(format!("answered {other:?}")),
        Received::Message(Err(e), _) => Err(e.to_string()),
        Received::Closed => Err("the new oi closed the hand-over".into()),
    }
}

/// A direction's JSON: its unsent byte count (the bytes are in the memfd).
fn half(h: &HalfState) -> Value {
    json!({ "unsent": h.unsent.len(), "done": h.done, "bytes": h.bytes })
}

/// A sealed-off copy of `bytes` the new oi reads back.
fn memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use rustix::fs::{memfd_create, MemfdFlags};
    let fd = memfd_create("oi-handover", MemfdFlags::CLOEXEC)?;
    let mut at = 0;
    while at < bytes.len() {
        at += rustix::io::pwrite(&fd, &bytes[at..], at as u64)?;
    }
    Ok(fd)
}

/// The new side: receives every offered connection (until `ConnectionsEnd`).
pub(crate) fn receive(conn: &OwnedFd) -> Result<Vec<Offered>, String> {
    let mut all = Vec::new();
    loop {
        let (body, fds) = match wire::recv(conn).map_err(|e| e.to_string())? {
            Received::Message(Ok((Kind::Connections, body)), fds) => (body, fds),
            Received::Message(Ok((Kind::ConnectionsEnd, _)), _) => return Ok(all),
            Received::Message(Ok((other, _)), _) => return Err(format!("unexpected {other:?}")),
            Received::Message(Err(e), _) => return Err(e.to_string()),
            Received::Closed => return Err("the previous oi closed the hand-over".into()),
        };
        all.extend(read_message(&body, fds)?);
    }
}

/// One `connections` message's connections.
fn read_message(body: &Value, fds: Vec<OwnedFd>) -> Result<Vec<Offered>, String> {
    let entries = body["connections"].as_array().cloned().unwrap_or_default();
    if fds.len() != 1 + 2 * entries.len() {
        return Err(format!(
            "{} connections described, {} descriptors received",
            entries.len(),
            fds.len()
        ));
    }
    let mut fds = fds.into_iter();
    let data = fds.next().ok_or("no memfd")?;
    let mut at = 0u64;
    let mut out = Vec::new();
    for e in entries {
        let (Some(client), Some(backend)) = (fds.next(), fds.next()) else {
            return Err("descriptors missing".into());
        };
        let up = read_half(&e["up"], &data, &mut at)?;
        let down = read_half(&e["down"], &data, &mut at)?;
        out.push(Offered {
            id: e["id"].as_u64().ok_or("a connection without an id")?,
            rule: e["rule"].as_str().unwrap_or_default().to_string(),
            client,
            backend,
            up,
            down,
            started: e["started"].as_u64().unwrap_or(0),
        });
    }
    Ok(out)
}

/// A direction's state; its unsent bytes are read from `data` at `at`.
fn read_half(v: &Value, data: &OwnedFd, at: &mut u64) -> Result<HalfState, String> {
    let n = v["unsent"].as_u64().unwrap_or(0);
    if n > MOST_UNSENT {
        return Err(format!("{n} unsent bytes in one direction"));
    }
    let len = usize::try_from(n).map_err(|e| e.to_string())?;
    let mut unsent = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let off = at.saturating_add(got as u64);
        match rustix::io::pread(data, &mut unsent[got..], off) {
            Ok(0) => return Err("the unsent bytes are cut short".into()),
            Ok(k) => got += k,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("cannot read the unsent bytes: {e}")),
        }
    }
    *at = at.saturating_add(n);
    Ok(HalfState {
        unsent,
        done: v["done"].as_bool().unwrap_or(false),
        bytes: v["bytes"].as_u64().unwrap_or(0),
    })
}

/// The new side: tells the old one which connections it serves now.
pub(crate) fn confirm(conn: &OwnedFd, ids: &[u64]) -> std::io::Result<()> {
    wire::send(conn, Kind::Adopted, &json!({ "ids": ids }), &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};

    fn half(unsent: &[u8], done: bool, bytes: u64) -> HalfState {
        HalfState {
            unsent: unsent.to_vec(),
            done,
            bytes,
        }
    }

    #[test]
    fn connections_travel_with_their_unsent_bytes_in_order_and_the_answer_comes_back() {
        let (old, new) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair");
        let sock = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .expect("bind")
                .into()
        };
        let (verdict, _answer) = crate::handover::park::verdict();
        let parked: Vec<Parked> = (0..3u8)
            .map(|i| Parked {
                client: sock(),
                backend: sock(),
                rule: format!("127.0.0.1:{i}"),
                up: half(&vec![i; usize::from(i) * 1000], false, u64::from(i)),
                down: half(b"down", i == 2, 7),
                started: 1_700_000_000,
                verdict: verdict.clone(),
            })
            .collect();
        let taker = std::thread::spawn(move || {
            let got = receive(&new).expect("receive");
            confirm(&new, &[1]).expect("confirm");
            got
        });
        assert_eq!(offer(&old, &parked), Ok(vec![1]));
        let got = taker.join().expect("taker");
        assert_eq!(got.len(), 3);
        for (i, g) in got.iter().enumerate() {
            let i8 = u8::try_from(i).expect("small");
            assert_eq!(g.id, i as u64);
            assert_eq!(g.rule, format!("127.0.0.1:{i}"));
            assert_eq!(g.up, half(&vec![i8; i * 1000], false, i as u64));
            assert_eq!(g.down, half(b"down", i == 2, 7));
            assert_eq!(g.started, 1_700_000_000);
        }
    }

    #[test]
    fn a_direction_claiming_more_than_the_bound_is_refused() {
        let data = memfd(b"").expect("memfd");
        let mut at = 0;
        let v = json!({ "unsent": MOST_UNSENT + 1, "done": false, "bytes": 0 });
        assert!(read_half(&v, &data, &mut at).is_err());
        let v = json!({ "unsent": 5, "done": false, "bytes": 0 });
        assert!(read_half(&v, &data, &mut at).is_err(), "cut short");
    }
}
