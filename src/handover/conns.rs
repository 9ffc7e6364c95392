//! Step 8 of the hand-over (`docs/handover.md`): after the new oi is ready,
//! the old one pauses its live TCP connections and sends them; the new one
//! adopts those whose rule it serves and says which; the old one drops
//! those and resumes the rest.
//!
//! One `connections` message carries up to [`PER_MESSAGE`] connections:
//! descriptor 0 is a memfd holding every connection's unsent bytes in
//! order (each one's client→backend bytes, then its backend→client ones),
//! then each connection's client and backend sockets.

use super::wire::{self, Kind, Received};
use crate::route::park::{
    Flow, HalfState, Offered, Origin, Parked, Parking, MAX_SERVER_NAME, PARK_WITHIN,
};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Connections per message: two descriptors each, after the memfd.
pub(crate) const PER_MESSAGE: usize = (wire::FDS_PER_MESSAGE - 1) / 2;

/// Most unsent bytes one connection may carry: what one direction holds
/// at most is a pipe or a buffer (both far below this), so more is garbled.
const MOST_UNSENT: u64 = 64 * 1024 * 1024;

/// The old side: pauses every pump, sends what parked, and hands out the
/// verdicts (adopted, else resume). Never fails the upgrade: a connection
/// that is not confirmed runs on here. Returns how many were adopted.
pub(crate) fn send(conn: &OwnedFd, parking: &Parking, counters: &dyn Fn() -> Value) -> usize {
    let parked = parking.collect(PARK_WITHIN);
    // Read once every flow has paused: their bytes so far travel with them.
    let counted = counters();
    let adopted = match offer(conn, &parked, Some(&counted)) {
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
/// A stream's sockets are copied for its message only (see
/// [`crate::route::park::Handing`]); one that cannot be copied is not offered,
/// and so resumes here.
fn offer(conn: &OwnedFd, parked: &[Parked], counters: Option<&Value>) -> Result<Vec<u64>, String> {
    let mut uncopied = 0usize;
    for (c, chunk) in parked.chunks(PER_MESSAGE).enumerate() {
        let mut bytes = Vec::new();
        let mut entries = Vec::new();
        let mut flows = Vec::new();
        // Every pump of the message copies at once; then each is read.
        let asked: Vec<_> = chunk.iter().map(|p| p.flow.ask()).collect();
        for (i, (p, asked)) in chunk.iter().zip(asked).enumerate() {
            let Some(flow) = asked.copies() else {
                uncopied += 1;
                continue;
            };
            bytes.extend_from_slice(&p.up.unsent);
            bytes.extend_from_slice(&p.down.unsent);
            let mut entry = json!({
                "id": (c * PER_MESSAGE + i) as u64,
                "rule": p.rule,
                // Whole seconds since the epoch, as every version-4 oi
                // reads it; `age_ms` is what this one reads.
                "started": now_secs().saturating_sub(p.age.as_secs()),
                "age_ms": u64::try_from(p.age.as_millis()).unwrap_or(u64::MAX),
                "server_name": p.server_name,
                "up": half(&p.up),
                "down": half(&p.down),
            });
            describe(&flow, &mut entry);
            entries.push(entry);
            flows.push(flow);
        }
        let data = memfd(&bytes).map_err(|e| format!("cannot store the unsent bytes: {e}"))?;
        let mut fds: Vec<BorrowedFd<'_>> = vec![data.as_fd()];
        for flow in &flows {
            match &**flow {
                Flow::Stream { client, backend }
                | Flow::TcpToUdp {
                    client, backend, ..
                } => {
                    fds.push(client.as_fd());
                    fds.push(backend.as_fd());
                }
                Flow::Datagram { backend, .. } | Flow::UdpToTcp { backend, .. } => {
                    fds.push(backend.as_fd())
                }
            }
        }
        let body = json!({ "connections": entries });
        wire::send(conn, Kind::Connections, &body, &fds).map_err(|e| e.to_string())?;
        // The copies made for this message close here: sent, the new oi
        // has its own.
    }
    if uncopied > 0 {
        log::warn!(
            "upgrade: {uncopied} connection(s) could not be paused for the new oi (no \
             descriptor left to copy their sockets); they stay here"
        );
    }
    if let Some(c) = counters {
        let text = c.to_string();
        let data = memfd(text.as_bytes()).map_err(|e| format!("cannot store the counters: {e}"))?;
        let body = json!({ "bytes": text.len() });
        wire::send(conn, Kind::Counters, &body, &[data.as_fd()]).map_err(|e| e.to_string())?;
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

/// Adds what kind of flow it is to a connection's JSON (`kind`, and for
/// the UDP kinds the client, who it is and how long it has been idle).
fn describe(flow: &Flow, entry: &mut Value) {
    let (kind, client, origin, idle) = match flow {
        Flow::Stream { .. } => ("stream", None, None, None),
        Flow::TcpToUdp { origin, idle, .. } => ("tcp-udp", None, Some(origin), Some(idle)),
        Flow::Datagram {
            client,
            origin,
            idle,
            ..
        } => ("udp", Some(client), Some(origin), Some(idle)),
        Flow::UdpToTcp {
            client,
            origin,
            idle,
            ..
        } => ("udp-tcp", Some(client), Some(origin), Some(idle)),
    };
    entry["kind"] = json!(kind);
    if let Some(c) = client {
        entry["client"] = json!(c.to_string());
    }
    if let Some(o) = origin {
        entry["origin"] = json!(o.client.to_string());
        if let Some(l) = o.local {
            entry["local"] = json!(l.to_string());
        }
    }
    if let Some(i) = idle {
        entry["idle_ms"] = json!(u64::try_from(i.as_millis()).unwrap_or(u64::MAX));
    }
}

/// Descriptors an entry of `kind` brings: two, one for a UDP association.
fn fds_of(entry: &Value) -> usize {
    if entry["kind"] == "udp" || entry["kind"] == "udp-tcp" {
        1
    } else {
        2
    }
}

/// The flow an entry describes, with its descriptors taken from `fds`.
fn flow(e: &Value, fds: &mut impl Iterator<Item = OwnedFd>) -> Result<Flow, String> {
    let mut next = || fds.next().ok_or("descriptors missing");
    let addr = |key: &str| -> Result<SocketAddr, String> {
        let text = e[key].as_str().ok_or(format!("no {key}"))?;
        text.parse().map_err(|_| format!("bad {key} {text:?}"))
    };
    let origin = || -> Result<Origin, String> {
        Ok(Origin {
            client: addr("origin")?,
            local: e["local"].as_str().and_then(|l| l.parse().ok()),
        })
    };
    let idle = Duration::from_millis(e["idle_ms"].as_u64().unwrap_or(0));
    Ok(match e["kind"].as_str().unwrap_or("stream") {
        "stream" => Flow::Stream {
            client: next()?,
            backend: next()?,
        },
        "tcp-udp" => Flow::TcpToUdp {
            client: next()?,
            backend: next()?,
            origin: origin()?,
            idle,
        },
        "udp" => Flow::Datagram {
            client: addr("client")?,
            backend: next()?,
            origin: origin()?,
            idle,
        },
        "udp-tcp" => Flow::UdpToTcp {
            client: addr("client")?,
            backend: next()?,
            origin: origin()?,
            idle,
        },
        other => return Err(format!("a connection of unknown kind {other:?}")),
    })
}

/// A direction's JSON: its unsent byte count (the bytes are in the memfd).
fn half(h: &HalfState) -> Value {
    json!({
        "unsent": h.unsent.len(),
        "done": h.done,
        "bytes": h.bytes,
        "owed_ns": h.owed_ns,
    })
}

/// A sealed-off copy of `bytes` the new oi reads back.
pub(super) fn memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use rustix::fs::{memfd_create, MemfdFlags};
    let fd = memfd_create("oi-handover", MemfdFlags::CLOEXEC)?;
    let mut at = 0;
    while at < bytes.len() {
        at += rustix::io::pwrite(&fd, &bytes[at..], at as u64)?;
    }
    Ok(fd)
}

/// Most bytes of counters the new side reads: 32,768 rules (`MAX_RULES`)
/// of about 1.5 KiB each fit.
const MOST_COUNTERS: u64 = 64 * 1024 * 1024;

/// What the old oi handed over after ready.
pub(crate) struct Handed {
    /// The paused connections and flows.
    pub(crate) offered: Vec<Offered>,
    /// Its counters (`Stats::carried`'s JSON), if it sent them.
    pub(crate) counters: Option<Value>,
}

/// The new side: receives every offered connection and the counters
/// (until `ConnectionsEnd`).
pub(crate) fn receive(conn: &OwnedFd) -> Result<Handed, String> {
    let mut all = Vec::new();
    let mut counters = None;
    loop {
        let (body, fds) = match wire::recv(conn).map_err(|e| e.to_string())? {
            Received::Message(Ok((Kind::Connections, body)), fds) => (body, fds),
            Received::Message(Ok((Kind::Counters, body)), fds) => {
                counters = Some(read_counters(&body, fds)?);
                continue;
            }
            Received::Message(Ok((Kind::ConnectionsEnd, _)), _) => {
                return Ok(Handed {
                    offered: all,
                    counters,
                })
            }
            Received::Message(Ok((other, _)), _) => return Err(format!("unexpected {other:?}")),
            Received::Message(Err(e), _) => return Err(e.to_string()),
            Received::Closed => return Err("the previous oi closed the hand-over".into()),
        };
        all.extend(read_message(&body, fds)?);
    }
}

/// The counters a `counters` message's memfd holds.
pub(super) fn read_counters(body: &Value, fds: Vec<OwnedFd>) -> Result<Value, String> {
    let [data] = <[OwnedFd; 1]>::try_from(fds).map_err(|_| "counters without one memfd")?;
    let n = body["bytes"].as_u64().unwrap_or(0);
    if n > MOST_COUNTERS {
        return Err(format!("{n} bytes of counters"));
    }
    let mut at = 0;
    let half = read_half(&json!({ "unsent": n }), &data, &mut at)?;
    serde_json::from_slice(&half.unsent).map_err(|e| format!("the counters: {e}"))
}

/// One `connections` message's connections.
fn read_message(body: &Value, fds: Vec<OwnedFd>) -> Result<Vec<Offered>, String> {
    let entries = body["connections"].as_array().cloned().unwrap_or_default();
    if fds.len() != 1 + entries.iter().map(fds_of).sum::<usize>() {
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
        let flow = flow(&e, &mut fds)?;
        let up = read_half(&e["up"], &data, &mut at)?;
        let down = read_half(&e["down"], &data, &mut at)?;
        out.push(Offered {
            id: e["id"].as_u64().ok_or("a connection without an id")?,
            rule: e["rule"].as_str().unwrap_or_default().to_string(),
            flow,
            up,
            down,
            age: age(&e),
            // Absent (null) for connections no server name routed.
            server_name: e["server_name"]
                .as_str()
                .filter(|n| n.len() <= MAX_SERVER_NAME)
                .map(str::to_string),
        });
    }
    Ok(out)
}

/// Seconds since the epoch now: an entry's `started` is in them.
fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How long an entry's connection had been open: `age_ms`, or from an oi
/// that sends none, the time since `started` (whole seconds since the
/// epoch); none when neither is there.
fn age(e: &Value) -> Duration {
    match (e["age_ms"].as_u64(), e["started"].as_u64()) {
        (Some(ms), _) => Duration::from_millis(ms),
        (None, Some(started)) => Duration::from_secs(now_secs().saturating_sub(started)),
        (None, None) => Duration::ZERO,
    }
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
        // Absent from an oi that did not carry its buckets: they start full.
        owed_ns: v["owed_ns"].as_u64().unwrap_or(0),
    })
}

/// The new side: tells the old one which connections it serves now.
pub(crate) fn confirm(conn: &OwnedFd, ids: &[u64]) -> std::io::Result<()> {
    wire::send(conn, Kind::Adopted, &json!({ "ids": ids }), &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::park::Handing;
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};

    fn half(unsent: &[u8], done: bool, bytes: u64) -> HalfState {
        HalfState {
            unsent: unsent.to_vec(),
            done,
            bytes,
            owed_ns: bytes * 1_000_000,
        }
    }

    #[test]
    fn connections_and_udp_flows_travel_with_their_unsent_bytes_in_order_and_the_answer_comes_back()
    {
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
        let (verdict, _answer) = crate::route::park::verdict();
        let origin = Origin {
            client: "192.0.2.1:5000".parse().expect("addr"),
            local: Some("192.0.2.2:53".parse().expect("addr")),
        };
        let parked: Vec<Parked> = (0..4u8)
            .map(|i| Parked {
                server_name: None,
                flow: Handing::Copied(match i {
                    0 => Flow::Stream {
                        client: sock(),
                        backend: sock(),
                    },
                    1 => Flow::TcpToUdp {
                        client: sock(),
                        backend: sock(),
                        origin,
                        idle: Duration::from_millis(1500),
                    },
                    2 => Flow::Datagram {
                        client: "127.0.0.1:4000".parse().expect("addr"),
                        backend: sock(),
                        origin,
                        idle: Duration::from_millis(250),
                    },
                    _ => Flow::UdpToTcp {
                        client: "127.0.0.1:4001".parse().expect("addr"),
                        backend: sock(),
                        origin,
                        idle: Duration::from_millis(750),
                    },
                }),
                rule: format!("127.0.0.1:{i}"),
                up: half(&vec![i; usize::from(i) * 1000], false, u64::from(i)),
                down: half(b"down", i == 2, 7),
                age: Duration::from_millis(90_061_001 + u64::from(i)),
                verdict: verdict.clone(),
            })
            .collect();
        let taker = std::thread::spawn(move || {
            let got = receive(&new).expect("receive");
            confirm(&new, &[1]).expect("confirm");
            got
        });
        let counters = json!({ "rules": [{ "name": "r" }] });
        assert_eq!(offer(&old, &parked, Some(&counters)), Ok(vec![1]));
        let handed = taker.join().expect("taker");
        assert_eq!(handed.counters, Some(json!({ "rules": [{ "name": "r" }] })));
        let got = handed.offered;
        assert_eq!(got.len(), 4);
        for (i, g) in got.iter().enumerate() {
            let i8 = u8::try_from(i).expect("small");
            assert_eq!(g.id, i as u64);
            assert_eq!(g.rule, format!("127.0.0.1:{i}"));
            assert_eq!(g.up, half(&vec![i8; i * 1000], false, i as u64));
            assert_eq!(g.down, half(b"down", i == 2, 7));
            assert_eq!(g.age, Duration::from_millis(90_061_001 + i as u64));
        }
        assert!(matches!(got[0].flow, Flow::Stream { .. }));
        match &got[1].flow {
            Flow::TcpToUdp {
                origin: o, idle, ..
            } => {
                assert_eq!((*o, *idle), (origin, Duration::from_millis(1500)));
            }
            _ => panic!("entry 1 is TCP->UDP"),
        }
        match &got[2].flow {
            Flow::Datagram {
                client,
                origin: o,
                idle,
                ..
            } => {
                assert_eq!(client.to_string(), "127.0.0.1:4000");
                assert_eq!((*o, *idle), (origin, Duration::from_millis(250)));
            }
            _ => panic!("entry 2 is a UDP association"),
        }
        // A UDP->TCP association: one descriptor, its queued datagrams as
        // its unsent bytes (3,000 of them, checked above).
        match &got[3].flow {
            Flow::UdpToTcp {
                client,
                origin: o,
                idle,
                ..
            } => {
                assert_eq!(client.to_string(), "127.0.0.1:4001");
                assert_eq!((*o, *idle), (origin, Duration::from_millis(750)));
            }
            _ => panic!("entry 3 is a UDP->TCP association"),
        }
    }

    #[test]
    fn an_entry_from_an_oi_without_age_ms_ages_from_its_start_and_its_buckets_start_full() {
        let ten_s_ago = now_secs() - 10;
        let got = age(&json!({ "started": ten_s_ago }));
        // The clock may tick a second between the two readings.
        assert!(
            (Duration::from_secs(10)..=Duration::from_secs(11)).contains(&got),
            "{got:?}"
        );
        assert_eq!(age(&json!({})), Duration::ZERO);
        let data = memfd(b"").expect("memfd");
        let v = json!({ "unsent": 0, "done": false, "bytes": 5 });
        let h = read_half(&v, &data, &mut 0).expect("a direction");
        assert_eq!((h.bytes, h.owed_ns), (5, 0));
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
