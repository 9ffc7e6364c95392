//! A short read drains the socket; the next byte raises a new edge. The
//! pump relies on it to skip the read that would only say EAGAIN after each
//! message, and copies small bursts even when the connection splices (a
//! short splice proves nothing). These tests send bursts of every size
//! around the switch between the two, one at a time and back to back, in
//! both directions and across a half-close, and check every byte arrives in
//! order, with splice on and off.

use crate::common::*;
use oxidinetd::config::SpliceMode;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

/// Burst sizes around `SMALL_BURST` (16 KiB), the copy buffer (64 KiB) and
/// a pipe (256 KiB): small, exactly the copied read, just past it, bulk.
const SIZES: [usize; 12] = [
    1,
    64,
    1000,
    16 * 1024 - 1,
    16 * 1024,
    16 * 1024 + 1,
    3,
    70_000,
    64,
    300_000,
    5,
    2,
];

/// A stalled forwarder fails the test instead of hanging it.
const STALL: Duration = Duration::from_secs(30);

fn read_exactly(s: &mut TcpStream, n: usize, what: &str) -> Vec<u8> {
    let mut got = vec![0u8; n];
    if let Err(e) = s.read_exact(&mut got) {
        panic!("{what}: {n} bytes did not all arrive ({e}): a burst was left unread");
    }
    got
}

/// The backend side of [`bursts_each_way`]: reads each burst whole and
/// answers with the burst of the size after it (in reverse order), then
/// reads to the client's EOF and sends small bursts after it.
fn answer_bursts(mut c: TcpStream, tail: &[Vec<u8>]) -> Vec<u8> {
    c.set_read_timeout(Some(STALL)).expect("timeout");
    c.set_nodelay(true).expect("nodelay");
    for (i, &n) in SIZES.iter().enumerate() {
        let got = read_exactly(&mut c, n, "client to backend");
        assert_eq!(got, pattern(n, i as u64), "burst {i} of {n} bytes");
        let back = SIZES[SIZES.len() - 1 - i];
        c.write_all(&pattern(back, 100 + i as u64)).expect("answer");
    }
    // A bulk burst with many small writes queued right behind it: all of
    // it must arrive before anything more is sent (no later edge helps).
    let behind = bulk_then_small();
    let got = read_exactly(&mut c, behind.len(), "small writes behind a bulk burst");
    assert!(
        got == behind,
        "small writes behind a bulk burst arrived altered"
    );
    c.write_all(b"k").expect("ack");
    // The client half-closes after a last run of back-to-back small writes.
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).expect("read to the client's EOF");
    // After the client's EOF the other direction carries on.
    for t in tail {
        c.write_all(t).expect("tail");
    }
    c.shutdown(Shutdown::Write).expect("half-close");
    rest
}

/// 300 KB, then 300 writes of 10 to 14 bytes, sent back to back: the small
/// segments queue behind the bulk, which the direction splices, so they may
/// reach a splice together (each takes a pipe slot; a splice can come back
/// short with bytes still in the socket) or in bursts that send the
/// direction back to copying.
fn bulk_then_small_chunks() -> Vec<Vec<u8>> {
    let mut chunks = vec![pattern(300_000, 400)];
    chunks.extend((0..300u64).map(|i| pattern(10 + (i % 5) as usize, 500 + i)));
    chunks
}

/// [`bulk_then_small_chunks`] as one stream.
fn bulk_then_small() -> Vec<u8> {
    bulk_then_small_chunks().concat()
}

fn bursts_each_way(mode: SpliceMode) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let srv = splice_server(mode, l.local_addr().expect("addr"));
    let tail: Vec<Vec<u8>> = (0..5).map(|i| pattern(1 + i * 7, 200 + i as u64)).collect();
    let backend = thread::spawn({
        let tail = tail.clone();
        move || {
            let (c, _) = l.accept().expect("accept");
            answer_bursts(c, &tail)
        }
    });
    let mut s = connect(srv.addr());
    s.set_read_timeout(Some(STALL)).expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    for (i, &n) in SIZES.iter().enumerate() {
        s.write_all(&pattern(n, i as u64)).expect("burst");
        let back = SIZES[SIZES.len() - 1 - i];
        let got = read_exactly(&mut s, back, "backend to client");
        assert_eq!(
            got,
            pattern(back, 100 + i as u64),
            "answer {i} of {back} bytes"
        );
    }
    for chunk in bulk_then_small_chunks() {
        s.write_all(&chunk).expect("bulk, then small writes");
    }
    assert_eq!(read_exactly(&mut s, 1, "ack"), b"k");
    // Many small segments back to back, then the half-close.
    let mut sent = Vec::new();
    for i in 0..300u64 {
        let chunk = pattern(10 + (i % 5) as usize, 300 + i);
        s.write_all(&chunk).expect("small write");
        sent.extend_from_slice(&chunk);
    }
    s.shutdown(Shutdown::Write).expect("half-close");
    let mut after = Vec::new();
    s.read_to_end(&mut after)
        .expect("the backend's bursts after the client's EOF, then EOF");
    assert_eq!(after, tail.concat(), "bursts after the half-close");
    let rest = backend.join().expect("backend");
    assert_eq!(rest.len(), sent.len(), "back-to-back small writes");
    assert_eq!(sha256(&rest), sha256(&sent));
}

#[test]
fn splice_every_burst_arrives_whatever_its_size() {
    bursts_each_way(SpliceMode::On);
}

#[test]
fn copy_every_burst_arrives_whatever_its_size() {
    bursts_each_way(SpliceMode::Off);
}

#[test]
fn small_messages_are_copied_even_when_splicing_and_bulk_is_spliced() {
    let srv = splice_server(SpliceMode::On, echo_backend("127.0.0.1:0"));
    let mut s = connect(srv.addr());
    s.set_read_timeout(Some(STALL)).expect("timeout");
    for i in 0..50u64 {
        let msg = pattern(64, i);
        s.write_all(&msg).expect("ping");
        assert_eq!(read_exactly(&mut s, 64, "echo"), msg);
    }
    assert_eq!(
        srv.shared.pipes.live(),
        0,
        "64-byte messages took a pipe: each costs a failed splice more"
    );
    let bulk = pattern(4 * 1024 * 1024, 9);
    let back = echo_through(srv.addr(), bulk.clone());
    assert_eq!(sha256(&back), sha256(&bulk));
    assert!(srv.shared.pipes.live() > 0, "bulk went through pipes");
}
