//! Steps 11 to 13 of the hand-over (`docs/handover.md`): after the live
//! connections, the old oi asks the new one's service loop whether it
//! serves (`health`), and reports the upgrade done only on its answer
//! (`healthy`); it says so (`serving`), stops answering the control socket
//! and the metrics port, and when its last kept connection ends sends what
//! it counted meanwhile (`drained`), which the new one adds to its own.
//!
//! Until the answer the old oi accepts on every listener, so a new binary
//! that says ready and dies, or whose service loop never runs, costs no
//! refused connection: the old one keeps serving everything.

use super::conns;
use super::wire::{self, Kind, Received};
use serde_json::{json, Value};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long the new oi has to answer the health question: its service loop
/// answers as soon as it runs (a few milliseconds after it took the live
/// connections), unless a reload is in progress there.
pub(crate) const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the new oi waits for the question, and then for `serving`.
const QUESTION_WITHIN: Duration = super::TIMEOUT;

/// Most turns of the receive timeout ([`super::TIMEOUT`], a minute) the new
/// oi waits for the old one's last counts: a year, as long as an old oi
/// drains after a hand-over at most; its exit ends the wait before.
const MOST_DRAIN_WAITS: u64 = 365 * 24 * 60;

/// Most messages the new oi skips while it waits for the question: what
/// the old one sends after a `connections` message the new one could not
/// read (the rest of the connections, the counters, their end).
const MOST_SKIPPED: usize = 1 << 16;

/// Why the old oi got no right answer.
pub(super) enum Unanswered {
    /// The new oi closed the conversation (it exited, most likely).
    Closed,
    /// No answer within [`HEALTH_TIMEOUT`].
    Silent,
    /// Anything else, as text that reads after "the new binary".
    Wrong(String),
}

/// Old side: asks the health question of the new oi, which said it is
/// `pid`; returns how many listeners it serves. On success it is told
/// `serving` (a new oi that is gone by then fails the question too).
pub(super) fn ask(conn: &OwnedFd, pid: u32) -> Result<u64, Unanswered> {
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    set_socket_timeout(conn, Timeout::Recv, Some(HEALTH_TIMEOUT))
        .map_err(|e| Unanswered::Wrong(format!("failed: cannot set a timeout ({e})")))?;
    wire::send(conn, Kind::Health, &json!({}), &[]).map_err(|e| match e.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Unanswered::Closed,
        _ => Unanswered::Wrong(format!("could not be asked the health question: {e}")),
    })?;
    let listeners = match wire::recv(conn) {
        Ok(Received::Message(Ok((Kind::Healthy, body)), _)) => {
            let said = body["pid"].as_u64();
            if said != Some(u64::from(pid)) {
                return Err(Unanswered::Wrong(format!(
                    "answered the health question for pid {}, not {pid}",
                    said.map_or("none".into(), |p| p.to_string())
                )));
            }
            body["listeners"].as_u64().unwrap_or(0)
        }
        Ok(Received::Message(Ok((Kind::Failed, body)), _)) => {
            return Err(Unanswered::Wrong(format!(
                "gave up after ready: {}",
                oi_config::Shown(body["error"].as_str().unwrap_or("no reason given"))
            )))
        }
        Ok(Received::Message(Ok((other, _)), _)) => {
            return Err(Unanswered::Wrong(format!(
                "answered the health question with {other:?}"
            )))
        }
        Ok(Received::Message(Err(e), _)) => {
            return Err(Unanswered::Wrong(format!("cannot hand over: {e}")))
        }
        Ok(Received::Closed) => return Err(Unanswered::Closed),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
            return Err(Unanswered::Silent)
        }
        Err(e) => return Err(Unanswered::Wrong(format!("broke the hand-over: {e}"))),
    };
    wire::send(conn, Kind::Serving, &json!({}), &[]).map_err(|_| Unanswered::Closed)?;
    Ok(listeners)
}

/// Old side, once its last kept connection has ended: sends what it
/// counted since the hand-over (`Stats::drained_since`'s JSON). A new oi
/// that is gone by then loses them; that is logged.
pub(super) fn report(conn: &OwnedFd, drained: &Value) {
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    let text = drained.to_string();
    let sent = set_socket_timeout(conn, Timeout::Send, Some(Duration::from_secs(5)))
        .map_err(io::Error::from)
        .and_then(|()| conns::memfd(text.as_bytes()))
        .and_then(|data| {
            let body = json!({ "bytes": text.len() });
            wire::send(conn, Kind::Drained, &body, &[data.as_fd()])
        });
    match sent {
        Ok(()) => log::info!("upgrade: what this oi counted while draining went to the new oi"),
        Err(e) => log::warn!(
            "upgrade: what this oi counted while draining is lost: the new oi did not take it ({e})"
        ),
    }
}

/// New side: waits (blocking) for the health question.
pub(super) fn question(conn: &OwnedFd) -> Result<(), String> {
    let deadline = Instant::now() + QUESTION_WITHIN;
    for _ in 0..MOST_SKIPPED {
        match wire::recv(conn) {
            Ok(Received::Message(Ok((Kind::Health, _)), _)) => return Ok(()),
            // Left from a hand-over of connections this oi could not read:
            // their descriptors close here.
            Ok(Received::Message(_, _)) if Instant::now() < deadline => {}
            Ok(Received::Message(_, _)) => break,
            Ok(Received::Closed) => return Err("the previous oi closed the hand-over".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!(
        "no health question within {} s",
        QUESTION_WITHIN.as_secs()
    ))
}

/// New side: answers the question (this process serves `listeners`
/// listeners) and waits (blocking) for the old oi to say it is done.
pub(super) fn answer(conn: &OwnedFd, listeners: usize) -> Result<(), String> {
    let body = json!({ "pid": std::process::id(), "listeners": listeners });
    wire::send(conn, Kind::Healthy, &body, &[]).map_err(|e| e.to_string())?;
    match wire::recv(conn).map_err(|e| e.to_string())? {
        Received::Message(Ok((Kind::Serving, _)), _) => Ok(()),
        Received::Message(Ok((other, _)), _) => Err(format!("unexpected {other:?}")),
        Received::Message(Err(e), _) => Err(e.to_string()),
        Received::Closed => Err("the previous oi closed the hand-over".into()),
    }
}

/// New side: waits (blocking, as long as the old oi drains) for what the
/// old oi counted while draining; `None` if it exits without sending it.
pub(super) fn drained(conn: &OwnedFd) -> Option<Value> {
    // Each turn waits for the socket's receive timeout; the old oi drains
    // as long as its kept connections last, and its exit ends the loop.
    for _ in 0..MOST_DRAIN_WAITS {
        match wire::recv(conn) {
            Ok(Received::Message(Ok((Kind::Drained, body)), fds)) => {
                return conns::read_counters(&body, fds)
                    .map_err(|e| log::warn!("upgrade: the previous oi's last counts: {e}"))
                    .ok();
            }
            Ok(Received::Message(_, _)) => {
                log::warn!("upgrade: the previous oi sent something else than its last counts");
                return None;
            }
            Ok(Received::Closed) => return None,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::debug!("upgrade: waiting for the previous oi's last counts: {e}");
                return None;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};

    fn pair() -> (OwnedFd, OwnedFd) {
        socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair")
    }

    #[test]
    fn the_question_is_answered_confirmed_and_the_last_counts_arrive() {
        let (old, new) = pair();
        let answering = std::thread::spawn(move || {
            question(&new).expect("asked");
            answer(&new, 3).expect("confirmed");
            drained(&new)
        });
        // Left from connections the new side could not read: skipped there.
        wire::send(&old, Kind::ConnectionsEnd, &json!({}), &[]).expect("send");
        let asked = ask(&old, std::process::id());
        assert!(matches!(asked, Ok(3)), "three listeners serve");
        report(&old, &json!({ "accept_errors": 7 }));
        drop(old);
        let got = answering.join().expect("new side");
        assert_eq!(got, Some(json!({ "accept_errors": 7 })));
    }

    #[test]
    fn an_answer_for_another_pid_or_a_closed_conversation_is_no_answer() {
        let (old, new) = pair();
        let answering = std::thread::spawn(move || {
            question(&new).expect("asked");
            let body = json!({ "pid": 1, "listeners": 1 });
            wire::send(&new, Kind::Healthy, &body, &[]).expect("send");
        });
        let Err(Unanswered::Wrong(why)) = ask(&old, std::process::id()) else {
            panic!("another pid's answer was taken");
        };
        assert!(why.contains("for pid 1, not"), "{why}");
        answering.join().expect("new side");
        let (old, new) = pair();
        drop(new);
        assert!(matches!(
            ask(&old, std::process::id()),
            Err(Unanswered::Closed)
        ));
    }
}
