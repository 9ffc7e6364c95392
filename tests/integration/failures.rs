//! A peer that resets, refuses or never answers ends only its own connection,
//! promptly, and leaves no descriptor behind.
//!
//! One test function runs the scenarios in order: descriptor counts of the
//! process are only meaningful when nothing else runs in it.

use crate::common::*;
use oxidinetd::LogHandle;
use oxidinetd::Settings;
use socket2::{Domain, Socket, Type};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Waits (bounded) until the server has no open connection and the process is back to `fds`.
fn settles(srv: &TestServer, fds: usize) -> bool {
    let settled = holds_within(Duration::from_secs(5), || {
        srv.open_connections() == 0 && open_fds() <= fds
    });
    if !settled {
        eprintln!(
            "active {} fds {} (baseline {fds}): {:?}",
            srv.open_connections(),
            open_fds(),
            fd_targets()
        );
    }
    settled
}

/// Reads until EOF or error; returns how long it took.
fn time_to_end(s: &mut TcpStream) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return start.elapsed(),
            Ok(_) => {}
        }
    }
}

#[test]
fn failing_peers_end_promptly_and_leak_nothing() {
    // Changes or counts what the whole test process has (limits, descriptors).
    if run_in_own_process(
        module_path!(),
        "failing_peers_end_promptly_and_leak_nothing",
    ) {
        return;
    }
    let settings = Settings {
        connect_timeout: Duration::from_millis(300),
        ..Settings::default()
    };

    // A backend that resets every connection once it has read the request.
    let resetting = TcpListener::bind("127.0.0.1:0").expect("bind");
    let resetting_addr = resetting.local_addr().expect("addr");
    std::thread::spawn(move || {
        for c in resetting.incoming().flatten() {
            let mut c = c;
            let mut b = [0u8; 5];
            let _ = c.read_exact(&mut b);
            reset(c);
        }
    });
    // A backend that reads forever and reports when its client went away.
    let sink = TcpListener::bind("127.0.0.1:0").expect("bind");
    let sink_addr = sink.local_addr().expect("addr");
    let (gone_tx, gone_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for c in sink.incoming().flatten() {
            let tx = gone_tx.clone();
            std::thread::spawn(move || {
                let mut c = c;
                let _ = tx.send(time_to_end(&mut c));
            });
        }
    });
    // A closed port: bind, note the port, close.
    let closed_addr = local(free_port());
    // A backend whose accept queue is full: further SYNs are dropped, connect never completes.
    let silent = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    silent
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("addr").into())
        .expect("bind");
    silent.listen(0).expect("listen");
    let silent_addr = silent
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("inet");
    let mut fillers = Vec::new();
    for _ in 0..4 {
        // Fill the queue; later attempts may time out, which is the point.
        if let Ok(s) = TcpStream::connect_timeout(&silent_addr, Duration::from_millis(200)) {
            fillers.push(s);
        }
    }

    let srv = start(
        vec![
            tcp_rule(resetting_addr),
            tcp_rule(sink_addr),
            tcp_rule(closed_addr),
            tcp_rule(silent_addr),
            tcp_rule(echo_backend("127.0.0.1:0")),
        ],
        settings,
        LogHandle::disabled(),
    );
    // Warm up: the reactor, timers and threads allocate descriptors on first use.
    let mut warm = connect(srv.addrs[4]);
    warm.write_all(b"ping").expect("warm-up");
    let mut pong = [0u8; 4];
    warm.read_exact(&mut pong).expect("warm-up echo");
    drop(warm);
    assert!(settles(&srv, usize::MAX), "warm-up connection did not end");
    let baseline = open_fds();

    // Backend resets: the client sees the end at once.
    let mut c = connect(srv.addrs[0]);
    c.write_all(b"hello").expect("send");
    assert!(
        time_to_end(&mut c) < Duration::from_secs(2),
        "backend reset not passed on"
    );
    drop(c);
    assert!(
        settles(&srv, baseline),
        "descriptors leaked after backend reset"
    );

    // Client resets: the backend sees the end at once.
    let mut c = connect(srv.addrs[1]);
    c.write_all(b"some data").expect("send");
    c.flush().expect("flush");
    reset(c);
    let took = gone_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("backend saw the end");
    assert!(took < Duration::from_secs(2), "client reset not passed on");
    assert!(
        settles(&srv, baseline),
        "descriptors leaked after client reset"
    );

    // Backend port closed: the client is closed at once.
    let mut c = connect(srv.addrs[2]);
    assert!(
        time_to_end(&mut c) < Duration::from_secs(2),
        "refused backend not passed on"
    );
    drop(c);
    assert!(
        settles(&srv, baseline),
        "descriptors leaked after refused connect"
    );

    // Backend never answers: closed after the connect timeout (300 ms here).
    let mut c = connect(srv.addrs[3]);
    let took = time_to_end(&mut c);
    assert!(
        took >= Duration::from_millis(250),
        "closed before the timeout: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "connect timeout not applied: {took:?}"
    );
    drop(c);
    assert!(
        settles(&srv, baseline),
        "descriptors leaked after connect timeout"
    );
    drop(fillers);
}
