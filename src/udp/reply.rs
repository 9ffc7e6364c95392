//! How an association's replies reach its client: from the listening
//! socket, to exactly the client's address, within the rule's reply rate.
//!
//! Its own module, below `assoc` and `udp_to_tcp`: the association makes
//! the reply half and its task (UDP→UDP in `assoc`, UDP→TCP in
//! `udp_to_tcp`) sends through it. In `assoc`, it made `udp_to_tcp` and
//! `assoc` depend on each other.

use super::activity::Activity;
use super::batch;
use crate::route::edge::Origin;
use crate::route::{client_ip, Route};
use crate::stats::rate::Limit;
use oi_runtime::reactor::Async;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Instant;

/// How replies reach the client: from the listening socket, to exactly this address.
pub(super) struct Reply {
    /// The listening socket, shared with the listener task.
    pub(super) listener: Arc<Async<UdpSocket>>,
    /// The one client this association serves.
    pub(super) client: SocketAddr,
    /// Counters shared with the association.
    pub(super) activity: Arc<Activity>,
    /// The bandwidth limit on replies (`rate`, `rate-down`, ...); a reply
    /// over it is dropped and counted.
    down: Option<Limit>,
}

/// Calls `f` with the datagrams of `run` (at most [`batch::RUN_MAX`]) that
/// `limit` lets through, in order: `run` itself when there is no limit, so
/// the common case builds no copy of the run (a 64-slot array initialised
/// per send; with the lone-datagram path in `batch::recv_runs`, 6,607 ->
/// 5,661 user-space instructions a 64 B UDP round trip, callgrind).
pub(super) fn with_kept<R>(
    limit: Option<&Limit>,
    run: &[&[u8]],
    activity: &Activity,
    f: impl FnOnce(&[&[u8]]) -> R,
) -> R {
    let run = &run[..run.len().min(batch::RUN_MAX)];
    if limit.is_none() {
        return f(run);
    }
    let mut kept: [&[u8]; batch::RUN_MAX] = [&[]; batch::RUN_MAX];
    let mut n = 0;
    for payload in run {
        if within(limit, payload, activity) {
            kept[n] = payload;
            n += 1;
        }
    }
    f(&kept[..n])
}

/// Whether a datagram of `payload` is within `limit` (taking its bytes from
/// every bucket); one that is not is counted as dropped. UDP is policed, not
/// queued: a queue would add latency and memory for what the sender's own
/// congestion control (if any) handles better.
fn within(limit: Option<&Limit>, payload: &[u8], activity: &Activity) -> bool {
    let Some(limit) = limit else {
        return true;
    };
    let n = u64::try_from(payload.len()).unwrap_or(u64::MAX);
    if limit.try_take(n, Instant::now()) {
        return true;
    }
    activity.conn.rule().count(|c| &c.rate_dropped_datagrams);
    false
}

impl Reply {
    /// The reply half of a new or resumed association (sending to `client`
    /// from `listener`), and the limit on the client's own datagrams: both
    /// from the rule's rates for this client.
    pub(super) fn with_limits(
        route: &Route,
        listener: &Arc<Async<UdpSocket>>,
        client: SocketAddr,
        origin: Origin,
        activity: &Arc<Activity>,
    ) -> (Option<Limit>, Reply) {
        let (up, down) = route
            .rates
            .limits(&activity.conn.rule().rates, Some(client_ip(origin.client)));
        let reply = Reply {
            listener: listener.clone(),
            client,
            activity: activity.clone(),
            down,
        };
        (up, reply)
    }

    /// Sends a run of replies from the backend to the client without waiting
    /// (one batched send); returns how many did not fit in the listening
    /// socket's buffer and were dropped.
    pub(super) fn send_run(&self, run: &[&[u8]]) -> usize {
        self.activity.touch();
        let sent = with_kept(self.down.as_ref(), run, &self.activity, |kept| {
            batch::send_run(self.listener.get_ref(), Some(self.client), None, kept)
        });
        if let Some(e) = sent.error {
            log::debug!("reply to {}: {e}", self.client);
        }
        self.activity.conn.add_to_client(sent.bytes);
        sent.blocked
    }

    /// Sends one reply datagram, waiting only if the listening socket's buffer is full.
    pub(super) async fn send(&self, payload: &[u8]) {
        self.activity.touch();
        if !within(self.down.as_ref(), payload, &self.activity) {
            return;
        }
        for _ in 0..2 {
            match self.listener.get_ref().send_to(payload, self.client) {
                Ok(_) => {
                    let n = payload.len() as u64;
                    self.activity.conn.add_to_client(n);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.listener.writable().await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    log::debug!("reply to {}: {e}", self.client);
                    return;
                }
            }
        }
    }
}
