//! The reactor's tests: readiness and its edges, timers, wakes across
//! threads, and the refusal of a source polled off its reactor's thread.

use super::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};

/// A connected pair on loopback: (ours, registered on first poll; the peer, blocking).
fn pair() -> (Async<TcpStream>, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let peer = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (ours, _) = l.accept().expect("accept");
    (Async::new(ours).expect("non-blocking"), peer)
}

#[test]
fn eof_behind_the_last_bytes_of_a_short_read_is_still_reported() {
    // The peer's last bytes and its FIN arrive before we look: one edge
    // for both. A short read takes the bytes (and the FIN); the next
    // wait must not wait for an edge that will never come.
    let (ours, mut peer) = pair();
    peer.write_all(b"last").expect("write");
    peer.shutdown(Shutdown::Write).expect("shutdown");
    let reactor = Arc::new(Reactor::new().expect("epoll"));
    let read = async {
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        loop {
            // The first wait registers the socket: one edge for both.
            ours.readable().await.expect("readable");
            match ours.get_ref().read(&mut buf) {
                Ok(0) => return Some(got),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    };
    let limit = async {
        Timer::after(Duration::from_secs(10)).await;
        None
    };
    let got = block_on(reactor, futures_lite::FutureExt::or(read, limit));
    let got = got.expect("EOF was never reported after the short read");
    assert_eq!(got, b"last");
}

#[test]
fn a_timer_fires_and_a_wake_from_another_thread_interrupts_the_wait() {
    let reactor = Arc::new(Reactor::new().expect("epoll"));
    let (tx, rx) = async_channel::bounded::<()>(1);
    let start = Instant::now();
    block_on(reactor, async {
        Timer::after(Duration::from_millis(5)).await;
        assert!(start.elapsed() >= Duration::from_millis(5), "fired early");
        // Nothing here wakes this thread but the other thread's send.
        let sender = std::thread::spawn(move || tx.send_blocking(()));
        rx.recv().await.expect("sent");
        sender.join().expect("sender").expect("send");
    });
}

#[test]
fn an_edge_wakes_the_slots_task_only_while_it_waits_and_keeps_it() {
    let count = Arc::new(WakeCount::default());
    let woken = || count.0.load(Ordering::SeqCst);
    let mut r = Readiness {
        reader: Some(Waker::from(count.clone())),
        ..Readiness::default()
    };
    let mut queued = Vec::new();
    // Waiting (a poll returned Pending): the edge wakes it, in place.
    r.set_waits(0);
    r.edge(false, &mut queued);
    assert_eq!((woken(), queued.len()), (1, 0));
    assert!(
        r.reader.is_some(),
        "the slot keeps its task for its next wait"
    );
    // Not waiting (it has not found WouldBlock since): no wake.
    r.edge(false, &mut queued);
    assert_eq!(woken(), 1, "an edge woke a task that was not waiting");
    // Waiting again: woken again; the writer's edges never wake the reader.
    r.set_waits(0);
    r.edge(true, &mut queued);
    assert_eq!(woken(), 1);
    r.edge(false, &mut queued);
    assert_eq!(woken(), 2);
    // The edge count wraps at 128, below the waiting bit.
    assert_eq!(r.tick(0), 3);
    for _ in 0..128 {
        r.edge(false, &mut queued);
    }
    assert_eq!((r.tick(0), r.ticks[0] & WAITS, woken()), (3, 0, 2));
}

#[test]
fn one_edge_wakes_every_task_waiting_on_a_socket() {
    // A UDP listener's reply tasks all wait on it: each must hear the
    // edge, not only the one in the slot.
    let reactor = Arc::new(Reactor::new().expect("epoll"));
    let server = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = server.local_addr().expect("addr");
    let socket = Arc::new(Async::new_datagram(server).expect("non-blocking"));
    let ex = smol::Executor::new();
    let (started, wait_started) = async_channel::unbounded::<()>();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (socket, started) = (socket.clone(), started.clone());
            ex.spawn(async move {
                let mut ready = socket.readable();
                // Polled once (registered), then told it waits.
                let first = futures_lite::future::poll_once(&mut ready).await;
                assert!(first.is_none(), "readable before any datagram");
                started.send(()).await.expect("send");
                ready.await.expect("readable");
            })
        })
        .collect();
    let run = ex.run(async {
        for _ in 0..3 {
            wait_started.recv().await.expect("started");
        }
        let client = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        client.send_to(b"x", addr).expect("send");
        for w in waiters {
            w.await;
        }
        true
    });
    let limit = async {
        Timer::after(Duration::from_secs(10)).await;
        false
    };
    let all = block_on(reactor, futures_lite::FutureExt::or(run, limit));
    assert!(all, "a task waiting beside another never heard the edge");
}

#[test]
fn an_error_on_a_datagram_socket_is_reported_once_not_forever() {
    // A connected UDP socket to a closed port gets an ICMP error: one
    // receive reads it and the socket goes on. Were it sticky, every
    // wait after it would return at once and the reply task would spin.
    let reactor = Arc::new(Reactor::new().expect("epoll"));
    let closed = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr");
    drop(closed);
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.connect(port).expect("connect");
    let s = Async::new_datagram(s).expect("non-blocking");
    let outcome = block_on(reactor, async {
        s.get_ref().send(b"x").expect("send");
        s.readable().await.expect("readable");
        let err = s.get_ref().recv(&mut [0u8; 8]).expect_err("the ICMP error");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
        let again = s.get_ref().recv(&mut [0u8; 8]).expect_err("nothing more");
        assert_eq!(again.kind(), std::io::ErrorKind::WouldBlock);
        let quiet = async {
            Timer::after(Duration::from_millis(50)).await;
            "quiet"
        };
        let woke = async {
            let _ = s.readable().await;
            "woke"
        };
        futures_lite::FutureExt::or(woke, quiet).await
    });
    assert_eq!(
        outcome, "quiet",
        "the error stayed reported after it was read"
    );
}

#[test]
fn a_sockets_readiness_stays_small() {
    // Every idle connection holds two, each in an `Arc` (16 bytes more)
    // behind glibc's 8-byte header, rounded to 16: at 56 bytes the chunk
    // is 80, at 64 it was 96: 32 bytes per idle connection
    // (benches/idle_memory.sh: 1.59 -> 1.57 KiB).
    let size = std::mem::size_of::<Mutex<Readiness>>();
    assert!(
        size <= 56,
        "Mutex<Readiness> is {size} bytes, over its 56-byte budget"
    );
}

#[test]
fn a_socket_or_timer_polled_on_a_thread_without_a_reactor_is_refused_not_served() {
    // smol::block_on drives no reactor of ours, and no fallback thread
    // serves one: a debug build panics, a release build gets the error.
    let (ours, _peer) = pair();
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        smol::block_on(ours.readable())
    }));
    let (panicked, said) = match waited {
        Err(panicked) => (true, panic_text(&panicked)),
        Ok(Err(e)) => (false, e.to_string()),
        Ok(Ok(())) => panic!("readable through a reactor no thread drives"),
    };
    assert!(said.contains("drives no oi reactor"), "{said}");
    assert_eq!(
        panicked,
        cfg!(debug_assertions),
        "a debug build panics, a release build returns the error"
    );
    let timer = std::panic::catch_unwind(|| {
        futures_lite::future::block_on(futures_lite::future::poll_once(Timer::after(
            Duration::ZERO,
        )))
    });
    assert_eq!(
        timer.is_err(),
        cfg!(debug_assertions),
        "a debug build panics on a timer polled outside a runtime"
    );
    assert!(
        !std::fs::read_dir("/proc/self/task")
            .expect("threads")
            .flatten()
            .any(|t| std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim() == "oi-reactor")),
        "a fallback reactor thread was started"
    );
}

#[test]
fn a_socket_polled_on_another_threads_reactor_fails_a_debug_assertion() {
    // Registered on one thread's reactor, then polled on another's:
    // its edges would wake the first thread for the second's task.
    if !cfg!(debug_assertions) {
        return;
    }
    let (ours, _peer) = pair();
    let ours = Arc::new(ours);
    let first = Arc::new(Reactor::new().expect("epoll"));
    block_on(first, async {
        ours.register_now();
    });
    let moved = ours.clone();
    let polled = std::thread::spawn(move || {
        let other = Arc::new(Reactor::new().expect("epoll"));
        block_on(other, futures_lite::future::poll_once(moved.readable()))
    })
    .join();
    let said = panic_text(&polled.expect_err("polled on the wrong thread"));
    assert!(said.contains("other than its reactor's"), "{said}");
}

/// What a caught panic said.
fn panic_text(panicked: &Box<dyn std::any::Any + Send>) -> String {
    match panicked.downcast_ref::<String>() {
        Some(s) => s.clone(),
        None => panicked
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_default(),
    }
}
