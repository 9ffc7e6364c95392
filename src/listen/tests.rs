use super::budget::udp_assoc_share;
use super::*;
use crate::logfile::LogHandle;
use crate::route::shared::Settings;
use oi_config::{AclRules, ResolvedConfig, ResolvedRule};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::num::NonZeroUsize;
use std::time::Duration;

/// An echo backend on loopback port 0, one thread per connection.
fn echo_backend() -> SocketAddr {
    let backend = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    let addr = backend.local_addr().expect("backend addr");
    std::thread::spawn(move || {
        for c in backend.incoming().flatten() {
            std::thread::spawn(move || {
                let (mut r, mut w) = (&c, &c);
                let _ = std::io::copy(&mut r, &mut w);
            });
        }
    });
    addr
}

/// A runtime of two executor threads, as on the 2-core machine.
fn two_threads() -> Arc<Runtime> {
    Arc::new(Runtime::start(NonZeroUsize::MIN.saturating_add(1)).expect("rt"))
}

#[test]
fn listeners_past_the_descriptor_budget_get_one_accept_loop_and_still_serve() {
    let backend_addr = echo_backend();
    let runtime = two_threads();
    let shared = Shared::new(Settings::default(), LogHandle::disabled());
    let mut listeners = Listeners {
        threads: runtime.threads().clone(),
        // Room for one listener's duplicate only.
        duplicate_budget: 1,
        shared,
        serving: HashMap::new(),
        udp_cap_logged: None,
        accept_failing: Arc::default(),
    };
    let mut sockets = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..3 {
        let bind_at: SocketAddr = "127.0.0.1:0".parse().expect("literal");
        let r = ResolvedRule::between(bind_at, Proto::Tcp, backend_addr, Proto::Tcp);
        let s = bind(&r).expect("bind listener");
        addrs.push(s.local_addr().expect("listener addr"));
        sockets.push((s, Route::new(r, Arc::new(AclRules::default()))));
    }
    listeners.start(sockets).expect("start");
    let mut loops: Vec<usize> = listeners.serving.values().map(|r| r.tasks.len()).collect();
    loops.sort();
    assert_eq!(loops, [1, 1, 2], "one listener duplicated, two not");
    let (stop, stopped) = async_channel::bounded::<()>(1);
    let main = {
        let runtime = runtime.clone();
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let _ = stopped.recv().await;
                listeners.close().await;
            })
        })
    };
    for addr in addrs {
        let mut c = std::net::TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        c.write_all(b"ping").expect("write");
        let mut b = [0u8; 4];
        c.read_exact(&mut b).expect("echo through every listener");
        assert_eq!(&b, b"ping");
    }
    stop.close();
    main.join().expect("main thread");
}

/// What the reload test asks of the serving thread.
enum Step {
    /// Apply this configuration, then give the kept route `maxconn=1`
    /// again (as the configuration will once it can say so), and report
    /// the rule's counts: (open, refused).
    Reload(ResolvedConfig, async_channel::Sender<(usize, u64)>),
}

#[test]
fn a_reload_that_keeps_a_rule_keeps_its_connection_count() {
    let backend_addr = echo_backend();
    let runtime = two_threads();
    let shared = Shared::new(Settings::default(), LogHandle::disabled());
    let mut listeners = Listeners {
        threads: runtime.threads().clone(),
        duplicate_budget: 64,
        shared: shared.clone(),
        serving: HashMap::new(),
        udp_cap_logged: None,
        accept_failing: Arc::default(),
    };
    let bind_at: SocketAddr = "127.0.0.1:0".parse().expect("literal");
    let mut r = ResolvedRule::between(bind_at, Proto::Tcp, backend_addr, Proto::Tcp);
    let s = bind(&r).expect("bind listener");
    let addr = s.local_addr().expect("listener addr");
    r.bind = BindAddr::Ip(addr);
    let limited = |r: &ResolvedRule| {
        Route::new(r.clone(), Arc::new(AclRules::default())).with_limits(Some(1), None)
    };
    listeners.start(vec![(s, limited(&r))]).expect("start");
    let (steps, next) = async_channel::bounded::<Step>(1);
    let main = {
        let runtime = runtime.clone();
        let r = r.clone();
        std::thread::spawn(move || {
            runtime.block_on(async move {
                while let Ok(Step::Reload(cfg, done)) = next.recv().await {
                    let errors = listeners.apply(&cfg, "test.conf").await;
                    assert_eq!(errors, Ok(Vec::new()));
                    let running = &listeners.serving[&(BindAddr::Ip(addr), Proto::Tcp)];
                    running.route.store(Arc::new(limited(&r)));
                    let counts = (running.limits.open(), running.limits.refused());
                    let _ = done.send(counts).await;
                }
                listeners.close().await;
            })
        })
    };
    let echo = |c: &mut std::net::TcpStream| -> bool {
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut b = [0u8; 4];
        c.write_all(b"ping").is_ok() && c.read_exact(&mut b).is_ok() && &b == b"ping"
    };
    let mut held = std::net::TcpStream::connect(addr).expect("connect");
    assert!(echo(&mut held), "first connection within maxconn=1");
    let mut over = std::net::TcpStream::connect(addr).expect("connect");
    assert!(!echo(&mut over), "second refused before the reload");

    let cfg = ResolvedConfig {
        config: Default::default(),
        rules: vec![r.clone()],
    };
    let (done, report) = async_channel::bounded(1);
    steps
        .send_blocking(Step::Reload(cfg, done))
        .expect("reload");
    let (open, refused) = report.recv_blocking().expect("reloaded");
    assert_eq!((open, refused), (1, 1), "the kept listener kept its counts");

    let mut after = std::net::TcpStream::connect(addr).expect("connect");
    assert!(
        !echo(&mut after),
        "the open connection still counts after the reload"
    );
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while shared.limited_connections_open() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut fresh = std::net::TcpStream::connect(addr).expect("connect");
    assert!(echo(&mut fresh), "released when the connection ended");
    drop(fresh);
    steps.close();
    main.join().expect("main thread");
    assert_eq!(shared.connections_refused_by_limits(), 2);
}

#[test]
fn udp_listeners_share_half_the_descriptor_limit() {
    // 1,024 descriptors, 3 held by listeners, one UDP listener: 509.
    assert_eq!(udp_assoc_share(1024, 3, 1), 509);
    assert_eq!(udp_assoc_share(1024, 3, 2), 254);
    // Nothing left still lets each listener serve one client.
    assert_eq!(udp_assoc_share(4, 10, 3), 1);
    assert_eq!(udp_assoc_share(u64::MAX, 0, 0), usize::MAX / 2);
}
