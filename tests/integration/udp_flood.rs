//! A flood of client source addresses cannot exhaust descriptors: the rule's
//! association cap evicts the oldest-idle association.
//!
//! Alone in its own test binary, because it counts this process's descriptors.

use crate::common::*;
use oxidinetd::config::Proto;
use oxidinetd::Settings;

#[test]
fn burst_of_1000_client_addresses_stays_within_the_association_cap() {
    // Changes or counts what the whole test process has (limits, descriptors).
    if run_in_own_process(
        module_path!(),
        "burst_of_1000_client_addresses_stays_within_the_association_cap",
    ) {
        return;
    }
    const CAP: usize = 100;
    const CLIENTS: usize = 1000;
    // Evicted associations close their socket on an executor thread a moment later.
    const SLACK: usize = 30;
    let (_dir, path, log) = tab_log();
    let (backend, _seen) = udp_echo_backend("127.0.0.1:0");
    let mut r = udp_rule(backend, Proto::Udp);
    r.rule.options.max_assoc = Some(CAP);
    let srv = start(vec![r], Settings::default(), log);
    let baseline = open_fds();

    let mut peak = 0;
    for i in 0..CLIENTS {
        // Each client is a fresh socket on its own loopback address (the kernel
        // may reuse a closed socket's port), closed once its echo is back, so only
        // the server's descriptors grow. Waiting for the echo keeps the burst
        // within the listener's receive buffer.
        let ip = std::net::Ipv4Addr::new(127, 0, (i / 250) as u8, (i % 250) as u8 + 1);
        let c = std::net::UdpSocket::bind((ip, 0)).expect("bind client");
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let msg = (i as u32).to_be_bytes();
        assert_eq!(udp_roundtrip(&c, srv.addr(), &msg), msg);
        drop(c);
        if i % 10 == 0 {
            peak = peak.max(open_fds());
        }
    }
    let text = wait_for_file(&path, |t| {
        t.matches("\topened").count() == CLIENTS
            && t.matches("done-local-closed").count() == CLIENTS - CAP
    });
    assert_eq!(
        text.matches("\topened").count(),
        CLIENTS,
        "every client got an association"
    );
    assert_eq!(
        text.matches("done-local-closed").count(),
        CLIENTS - CAP,
        "all but the newest {CAP} were evicted"
    );
    peak = peak.max(open_fds());
    assert!(
        peak <= baseline + CAP + SLACK,
        "descriptors grew from {baseline} to {peak} with a cap of {CAP}"
    );
}
