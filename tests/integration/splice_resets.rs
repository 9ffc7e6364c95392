//! Resets end spliced and copied connections at once, with bytes stuck in
//! flight, and every descriptor and pipe comes back.
//!
//! Alone in its own test binary (one test): it counts the process's open
//! descriptors, which other tests running in parallel would disturb.

use crate::common::*;
use oxidinetd::config::SpliceMode;
use std::net::TcpListener;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

fn resets_free_everything(mode: SpliceMode) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = l.local_addr().expect("addr");
    let (accepted, accepted_rx) = mpsc::channel();
    thread::spawn(move || {
        for c in l.incoming().flatten() {
            if accepted.send(c).is_err() {
                break;
            }
        }
    });
    let srv = splice_server(mode, backend);
    let shared = &srv.shared;
    // One connection first, so the reactor's own descriptors exist before counting.
    let warm = connect(srv.addr());
    let warm_back = accepted_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("backend accepted");
    drop((warm, warm_back));
    wait_until("the warm-up connection ended", || {
        srv.open_connections() == 0
    });
    let baseline = open_fds() - 2 * shared.pipes.pooled();
    let data = pattern(32 * 1024 * 1024, 47);
    // Each connection has bytes stuck in flight towards a peer that does not
    // read; then that peer resets (even i: the client, odd i: the backend). The
    // other direction is idle, so the pump is watching the resetting socket.
    // (A reset from the *sending* side while its bytes wait for a stuck reader
    // is only seen once the reader moves: the pump watches one socket per
    // direction.)
    let mut stuck = Vec::new();
    for i in 0..8 {
        let mut client = connect(srv.addr());
        let mut back = accepted_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("backend accepted");
        let in_use = shared.pipes.in_use();
        let stalled = || mode == SpliceMode::Off || shared.pipes.in_use() > in_use;
        if i % 2 == 0 {
            fill(&mut back, &data, stalled);
        } else {
            fill(&mut client, &data, stalled);
        }
        stuck.push((client, back));
    }
    let mut survivors = Vec::new();
    for (i, (client, back)) in stuck.into_iter().enumerate() {
        if i % 2 == 0 {
            reset(client);
            survivors.push(back);
        } else {
            reset(back);
            survivors.push(client);
        }
    }
    // No half-close timer (60 s) is involved: a reset ends both directions at once.
    wait_until("every connection ended", || srv.open_connections() == 0);
    assert_eq!(shared.pipes.in_use(), 0);
    drop(survivors);
    wait_until("descriptors are back to the baseline", || {
        open_fds() == baseline + 2 * shared.pipes.pooled()
    });
}

#[test]
fn resets_end_connections_and_free_pipes_and_descriptors() {
    // Changes or counts what the whole test process has (limits, descriptors).
    if run_in_own_process(
        module_path!(),
        "resets_end_connections_and_free_pipes_and_descriptors",
    ) {
        return;
    }
    resets_free_everything(SpliceMode::On);
    resets_free_everything(SpliceMode::Off);
}
