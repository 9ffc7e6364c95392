//! The splice(2) path forwards every byte, honours half-close with bytes still
//! in its pipe, frees everything on resets, and holds no pipe while idle. Each
//! behaviour is checked with splice on and off, so the copy path is held to the
//! same standard.

use crate::common::*;
use oxidinetd::config::SpliceMode;
use oxidinetd::LogHandle;
use oxidinetd::{Settings, Shared};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

fn concurrent_64_mib_round_trips(mode: SpliceMode) {
    let srv = splice_server(mode, echo_backend("127.0.0.1:0"));
    let addr = srv.addr();
    let clients: Vec<_> = (0..3u64)
        .map(|i| {
            thread::spawn(move || {
                let data = pattern(64 * 1024 * 1024 + i as usize * 4099, 300 + i);
                let want = sha256(&data);
                let back = echo_through(addr, data);
                assert_eq!(back.len(), 64 * 1024 * 1024 + i as usize * 4099);
                assert_eq!(sha256(&back), want, "connection {i}");
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
    let pipes = &srv.shared.pipes;
    match mode {
        SpliceMode::On => assert!(pipes.live() > 0, "splice on: pipes were used"),
        _ => assert_eq!(pipes.live(), 0, "splice off: no pipe is ever made"),
    }
    assert_eq!(pipes.unavailable(), 0);
    wait_until("finished connections hold no pipe", || pipes.in_use() == 0);
}

#[test]
fn splice_64_mib_each_way_on_three_connections_sha256() {
    concurrent_64_mib_round_trips(SpliceMode::On);
}

#[test]
fn copy_64_mib_each_way_on_three_connections_sha256() {
    concurrent_64_mib_round_trips(SpliceMode::Off);
}

/// With splice, "stalled" means a pipe holds bytes the reader has not taken:
/// pipes are only held while non-empty or while a splice in is under way.
fn pipe_stalled(shared: &Arc<Shared>, mode: SpliceMode) -> impl Fn() -> bool + '_ {
    move || mode == SpliceMode::Off || shared.pipes.in_use() >= 1
}

fn backend_eof_behind_a_full_pipe(mode: SpliceMode) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let srv = splice_server(mode, l.local_addr().expect("addr"));
    let shared = srv.shared.clone();
    let data = Arc::new(pattern(32 * 1024 * 1024, 41));
    let (filled, sent_rx) = mpsc::channel();
    let backend = thread::spawn({
        let data = data.clone();
        move || {
            let (mut c, _) = l.accept().expect("accept");
            // Reply until every buffer up to the unread client is full, then EOF.
            let sent = fill(&mut c, &data, pipe_stalled(&shared, mode));
            c.shutdown(Shutdown::Write).expect("half-close");
            filled.send(sent).expect("report");
            let mut upload = Vec::new();
            c.read_to_end(&mut upload).expect("upload");
            upload
        }
    });
    let mut s = connect(srv.addr());
    let sent = sent_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("backend filled the path");
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).expect("reply until EOF");
    assert_eq!(reply.len(), sent);
    assert_eq!(sha256(&reply), sha256(&data[..sent]));
    // The other direction is still open after the backend's half-close.
    s.write_all(b"still here").expect("upload");
    s.shutdown(Shutdown::Write).expect("close");
    assert_eq!(backend.join().expect("backend"), b"still here");
}

#[test]
fn splice_backend_eof_arrives_after_the_bytes_in_the_pipe() {
    backend_eof_behind_a_full_pipe(SpliceMode::On);
}

#[test]
fn copy_backend_eof_arrives_after_the_bytes_in_flight() {
    backend_eof_behind_a_full_pipe(SpliceMode::Off);
}

fn client_eof_behind_a_full_pipe(mode: SpliceMode) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let srv = splice_server(mode, l.local_addr().expect("addr"));
    let (go, go_rx) = mpsc::channel::<()>();
    let backend = thread::spawn(move || {
        let (mut c, _) = l.accept().expect("accept");
        // Read nothing until the client has filled the path and half-closed.
        go_rx.recv().expect("go");
        let mut upload = Vec::new();
        c.read_to_end(&mut upload).expect("upload until EOF");
        c.write_all(b"got it").expect("answer");
        upload
    });
    let data = pattern(32 * 1024 * 1024, 43);
    let mut s = connect(srv.addr());
    let sent = fill(&mut s, &data, pipe_stalled(&srv.shared, mode));
    s.shutdown(Shutdown::Write).expect("half-close");
    go.send(()).expect("go");
    let upload = backend.join().expect("backend");
    assert_eq!(upload.len(), sent);
    assert_eq!(sha256(&upload), sha256(&data[..sent]));
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("answer until EOF");
    assert_eq!(answer, b"got it");
}

#[test]
fn splice_client_eof_arrives_after_the_bytes_in_the_pipe() {
    client_eof_behind_a_full_pipe(SpliceMode::On);
}

#[test]
fn copy_client_eof_arrives_after_the_bytes_in_flight() {
    client_eof_behind_a_full_pipe(SpliceMode::Off);
}

#[test]
fn idle_spliced_connections_hold_no_pipe() {
    let srv = splice_server(SpliceMode::On, echo_backend("127.0.0.1:0"));
    let shared = &srv.shared;
    let mut conns: Vec<TcpStream> = (0..20).map(|_| connect(srv.addr())).collect();
    wait_until("every connection is pumping", || {
        srv.open_connections() == 20
    });
    // Never a byte: no pipe was ever made.
    assert_eq!(shared.pipes.live(), 0);
    // Bursts past the copied size (16 KiB) go through pipes.
    for (i, c) in conns.iter_mut().enumerate() {
        let msg = pattern(100_000, i as u64);
        c.write_all(&msg).expect("ping");
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).expect("pong");
        assert_eq!(back, msg);
    }
    assert!(shared.pipes.live() > 0, "the pings went through pipes");
    // Idle again, still open: every pipe is back in the pool.
    wait_until("idle connections hold no pipe", || {
        shared.pipes.in_use() == 0
    });
    assert_eq!(srv.open_connections(), 20);
}

#[test]
fn rule_option_overrides_the_global_splice_mode() {
    let backend = echo_backend("127.0.0.1:0");
    for (global, rule, splices) in [
        (SpliceMode::On, SpliceMode::Off, false),
        (SpliceMode::Off, SpliceMode::On, true),
        (SpliceMode::Off, SpliceMode::Auto, oxidinetd::AUTO_SPLICES),
    ] {
        let mut r = tcp_rule(backend);
        r.rule.options.splice = Some(rule);
        let settings = Settings {
            splice: global,
            ..Settings::default()
        };
        let srv = start(vec![r], settings, LogHandle::disabled());
        // Past the 16 KiB a splicing direction copies before it splices.
        let data = pattern(1024 * 1024, 5);
        assert_eq!(echo_through(srv.addr(), data.clone()), data);
        assert_eq!(
            srv.shared.pipes.live() > 0,
            splices,
            "--splice={global} with [splice={rule}]"
        );
    }
}

#[test]
fn pipes_that_cannot_be_sized_are_not_used_and_every_byte_is_copied() {
    // F_SETPIPE_SZ refuses usize::MAX, as the kernel refuses an unprivileged
    // user past fs.pipe-user-pages-soft: no small pipe may be used or pooled.
    let backend = echo_backend("127.0.0.1:0");
    let settings = Settings {
        splice: SpliceMode::On,
        ..Settings::default()
    };
    let pipes = oxidinetd::PipePool::new(usize::MAX, 4);
    let shared = Shared::with_pipe_pool(settings, LogHandle::disabled(), pipes);
    let mut r = tcp_rule(backend);
    let s = oxidinetd::bind(&r).expect("bind");
    let addr = s.local_addr().expect("addr");
    r.bind = oxidinetd::config::BindAddr::Ip(addr);
    let route = oxidinetd::Route::new(r, Arc::new(Default::default()));
    let srv = start_sockets(vec![(s, route)], vec![addr], shared);
    let data = pattern(16 * 1024 * 1024 + 12_345, 77);
    let want = sha256(&data);
    let back = echo_through(srv.addr(), data);
    assert_eq!(sha256(&back), want);
    let pipes = &srv.shared.pipes;
    assert!(pipes.unavailable() > 0, "splice was asked for a pipe");
    assert_eq!((pipes.live(), pipes.pooled()), (0, 0), "none made or kept");
}
