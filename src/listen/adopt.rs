//! Taking up what the previous oi handed over (`oi upgrade`): each
//! connection or UDP flow goes to the listener here that serves its rule,
//! and a connection a server name routed to the rule that name chooses.

use super::*;

impl Listeners {
    /// Places each handed-over flow whose rule a listener here serves (same
    /// listening address and protocols): a stream or TCP→UDP connection
    /// on a thread, where it waits for `gate` before pumping; a UDP
    /// association in the stash its listener takes it from once the
    /// hand-over ends. Returns their ids. The others are closed here and
    /// logged: the previous oi keeps serving them.
    pub(super) fn adopt(
        &self,
        conns: Vec<crate::route::park::Offered>,
        gate: &Receiver<()>,
        go: &Arc<AtomicBool>,
    ) -> Vec<u64> {
        use crate::route::park::Flow;
        let mut ids = Vec::new();
        for c in conns {
            let (proto, backend_proto, what) = match c.flow {
                Flow::Stream { .. } => (Proto::Tcp, Proto::Tcp, "TCP"),
                Flow::TcpToUdp { .. } => (Proto::Tcp, Proto::Udp, "TCP->UDP"),
                Flow::Datagram { .. } => (Proto::Udp, Proto::Udp, "UDP"),
                Flow::UdpToTcp { .. } => (Proto::Udp, Proto::Tcp, "UDP->TCP"),
            };
            let found = self.serving.iter().find(|((bind, p), running)| {
                *p == proto
                    && bind.to_string() == c.rule
                    && running.route.load().backend_proto == backend_proto
            });
            let Some((_, running)) = found else {
                log::info!(
                    "upgrade: no {what} rule listens on {:?} here; the previous oi keeps its connection",
                    c.rule
                );
                continue;
            };
            ids.push(c.id);
            if proto == Proto::Udp {
                self.shared.parking.stash(c);
                continue;
            }
            let route = running.route.load_full();
            let shared = self.shared.clone();
            let at = self.threads.pick(0);
            // Counted like an accepted connection (drain, thread balance,
            // the connection limits: open already, so never refused).
            let placed = self.threads.place(at);
            let client = match &c.flow {
                Flow::Stream { client, .. } => {
                    let peer = socket2::SockRef::from(client).peer_addr().ok();
                    peer.and_then(|p| p.as_socket())
                        .map(crate::route::client_ip)
                }
                Flow::TcpToUdp { origin, .. } => Some(crate::route::client_ip(origin.client)),
                Flow::Datagram { .. } | Flow::UdpToTcp { .. } => None,
            };
            // A connection a server name routed goes back to that rule (its
            // backends, counts and log lines), chosen by the name it carries;
            // one no name routed, to the listener's default rule.
            let routed = match (&route.sni, &c.flow) {
                (Some(names), Flow::Stream { .. }) if route.routes_by_name() => names
                    .choose(c.server_name.as_deref())
                    .map(|(r, _)| r.clone()),
                _ => None,
            };
            let per_client_limit = routed.as_ref().unwrap_or(&route).maxconn_per_client;
            let per_client = client.filter(|_| per_client_limit.is_some());
            let routed_limits = routed.as_ref().map(|r| &r.limits);
            let held = self
                .shared
                .limits
                .hold(&running.limits, routed_limits, per_client);
            let route = routed.unwrap_or(route);
            // Counted on that rule's counters (`routed::count`), else the listener's.
            let stats = route.stats.get().unwrap_or(&running.stats).clone();
            let (gate, go) = (gate.clone(), go.clone());
            self.threads
                .executor(at)
                .spawn(async move {
                    let _placed = placed;
                    let _held = held;
                    let _ = gate.recv().await;
                    if !go.load(Ordering::Acquire) {
                        return;
                    }
                    match backend_proto {
                        Proto::Tcp => crate::tcp::adopted(c, route, shared, stats).await,
                        Proto::Udp => {
                            let handed = crate::udp::TcpToUdp::Handed(c);
                            crate::udp::tcp_to_udp(handed, route, shared, stats).await
                        }
                    }
                })
                .detach();
        }
        ids
    }
}
