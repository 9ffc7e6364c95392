//! Port ranges: one line forwards a block of ports, allow/deny after it
//! apply to every port, and a reload to another range keeps the ports that
//! stay without a moment of refusal.

use crate::common::*;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn a_range_line_expands_in_order_and_its_acl_covers_every_port() {
    let cfg = oxidinetd::config::parse(
        "0.0.0.0 8000-8002 10.0.0.1 9000-9002\ndeny 10.0.0.9\n0.0.0.0 7000-7001/udp 10.0.0.1 53/udp\n",
    )
    .expect("valid");
    let pairs: Vec<String> = cfg.rules.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        pairs,
        [
            "0.0.0.0 8000/tcp 10.0.0.1 9000/tcp",
            "0.0.0.0 8001/tcp 10.0.0.1 9001/tcp",
            "0.0.0.0 8002/tcp 10.0.0.1 9002/tcp",
            "0.0.0.0 7000/udp 10.0.0.1 53/udp",
            "0.0.0.0 7001/udp 10.0.0.1 53/udp",
        ]
    );
    for r in &cfg.rules[..3] {
        assert_eq!(r.acl.deny.len(), 1, "the deny after the range covers {r}");
        assert_eq!(r.line, 1);
    }
    assert!(cfg.rules[3].acl.deny.is_empty());
}

#[test]
fn bad_ranges_are_errors_naming_the_line() {
    for (text, want) in [
        (
            "0.0.0.0 8010-8000 h 80\n",
            "port range '8010-8000' runs backwards",
        ),
        (
            "0.0.0.0 8000-8009 h 9000-9001\n",
            "differ in length (10 and 2 ports)",
        ),
        ("0.0.0.0 8000-x h 80\n", "invalid port range '8000-x'"),
        (
            "0.0.0.0 8000-8001 h http\n",
            "to one port number, not 'http'",
        ),
        (
            "0.0.0.0 8005 h 80\n0.0.0.0 8000-8009 h 80\n",
            "config:2: duplicate listener 0.0.0.0 8005/tcp, first defined at line 1",
        ),
    ] {
        let e = oxidinetd::config::parse(text).expect_err(text).to_string();
        assert!(e.contains(want), "{text:?}: {e}");
        assert_eq!(e.lines().count(), 1, "one error for the line: {e}");
    }
}

/// Lets this process (and the oi it starts) open enough descriptors for the ranges.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let want = limit.maximum.map_or(16_384, |m| m.min(16_384));
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(want),
            maximum: limit.maximum,
        },
    );
}

#[test]
fn a_thousand_port_range_serves_every_port_and_reloads_without_refusing_the_ports_that_stay() {
    // Changes or counts what the whole test process has (limits, descriptors).
    if run_in_own_process(
        module_path!(),
        "a_thousand_port_range_serves_every_port_and_reloads_without_refusing_the_ports_that_stay",
    ) {
        return;
    }
    raise_nofile();
    let base = free_port_run(1500);
    let backend = echo_backend("127.0.0.1:0").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let range = |first: u16| format!("127.0.0.1 {first}-{} 127.0.0.1 {backend}\n", first + 999);
    write_atomic(&conf, &range(base));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    for port in base..base + 1000 {
        assert!(ping(port).is_ok(), "port {port} of the range forwards");
    }
    // Reload to base+500..base+1499 while a client keeps using a port that stays.
    let stay = base + 750;
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let client = {
        let (stop, refused, served) = (stop.clone(), refused.clone(), served.clone());
        std::thread::spawn(move || {
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if ping(stay).is_ok() {
                    served.fetch_add(1, Ordering::Relaxed);
                } else {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    wait_until("the client is running", || {
        served.load(Ordering::Relaxed) > 10
    });
    write_atomic(&conf, &range(base + 500));
    oi.reload();
    let after = served.load(Ordering::Relaxed);
    wait_until("the client ran after the reload", || {
        served.load(Ordering::Relaxed) > after + 10
    });
    stop.store(true, Ordering::Relaxed);
    client.join().expect("client");
    assert_eq!(
        refused.load(Ordering::Relaxed),
        0,
        "a port that stays never refused"
    );
    assert!(
        TcpStream::connect(local(base)).is_err(),
        "a port that left refuses"
    );
    assert!(ping(base + 1499).is_ok(), "a new port forwards");
    let (status, _) = oi.stop();
    assert!(status.success());
}
