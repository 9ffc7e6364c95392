//! Accept while a thread is busy: with one thread running a bulk
//! flow flat out, every new connection is still accepted and served, on 2
//! threads (the busy one leaves the listening socket to the idle one) and
//! on 1 (the one thread takes them all between its pumps' budgets).

use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A backend that reads and drops everything; counts the bytes.
fn sink_backend() -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind sink");
    let addr = l.local_addr().expect("addr");
    let got = Arc::new(AtomicU64::new(0));
    let counted = got.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let counted = counted.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 256 * 1024];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    counted.fetch_add(n as u64, Ordering::Relaxed);
                }
            });
        }
    });
    (addr, got)
}

/// Connections each echo 64 bytes through oi on `threads` threads while a
/// bulk upload keeps one thread busy.
fn every_connection_is_served_while_a_bulk_flow_runs(threads: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let echo = echo_backend("127.0.0.1:0");
    let (sink, sunk) = sink_backend();
    let (bulk_port, echo_port) = (free_port(), free_port());
    write_atomic(
        &conf,
        &format!(
            "127.0.0.1 {bulk_port} 127.0.0.1 {}\n127.0.0.1 {echo_port} 127.0.0.1 {}\n",
            sink.port(),
            echo.port()
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &["--threads", threads]);
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let mut up = connect(local(bulk_port));
    let bulk = std::thread::spawn(move || {
        let chunk = vec![7u8; 256 * 1024];
        // At most 64 GiB: ends with the test either way.
        for _ in 0..256 * 1024 {
            if stopping.load(Ordering::Relaxed) || up.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    wait_until("the bulk flow runs", || {
        sunk.load(Ordering::Relaxed) > 64 * 1024 * 1024
    });
    let mut failed = Vec::new();
    for i in 0..200 {
        let served = (|| -> std::io::Result<()> {
            let mut s = connect(local(echo_port));
            s.set_read_timeout(Some(Duration::from_secs(20)))?;
            let msg = [i as u8; 64];
            s.write_all(&msg)?;
            let mut back = [0u8; 64];
            s.read_exact(&mut back)?;
            if back != msg {
                return Err(std::io::Error::other("wrong echo"));
            }
            Ok(())
        })();
        if let Err(e) = served {
            failed.push(format!("connection {i}: {e}"));
        }
    }
    let moving = sunk.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    bulk.join().expect("bulk writer");
    let (_, stderr) = oi.stop();
    assert!(failed.is_empty(), "{failed:?}\n{stderr}");
    assert!(moving > 64 * 1024 * 1024, "the bulk flow stalled\n{stderr}");
}

#[test]
fn on_two_threads_every_connection_is_served_while_one_thread_runs_a_bulk_flow() {
    every_connection_is_served_while_a_bulk_flow_runs("2");
}

#[test]
fn on_one_thread_every_connection_is_served_beside_a_bulk_flow() {
    every_connection_is_served_while_a_bulk_flow_runs("1");
}
