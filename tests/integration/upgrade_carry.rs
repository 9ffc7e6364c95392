//! What a connection handed over by `oi upgrade` keeps besides its bytes:
//! its age (`oi connections` on the new oi goes on from the old one's), and
//! its own bandwidth bucket (`rate=`), so a hand-over is no fresh burst:
//! over a window with three upgrades in it, a rate-limited download stays
//! within its rate times the window plus one bucket.

use super::upgrade::{put_binary, Adopted};
use super::upgrade_live::echo;
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `rate=64K`: bytes per second, per direction.
const RATE: u64 = 64 * 1024;

/// Its bucket: a tenth of a second's worth, at least 64 KiB
/// (`stats::rate::MIN_BURST`): one second's worth at this rate.
const BUCKET: u64 = 64 * 1024;

/// Upgrades inside the measured window: without the carried bucket each
/// would add a bucket's worth (three in all, over the one allowed).
const UPGRADES: usize = 3;

/// How much of a connection's age a hand-over may not count, in seconds:
/// from the old oi's pause to the new one's taking it up (ms when idle);
/// without the carried age the new oi counts from 0, a second short at least.
const SLACK: f64 = 0.5;

/// oi started from a path of the test's own (so `oi upgrade` can start
/// it again), with `rules` and a control socket.
struct Chain {
    /// The test's directory.
    dir: tempfile::TempDir,
    /// The control socket, handed from each oi to the next.
    control: std::path::PathBuf,
    /// The first oi.
    first: OiProcess,
    /// The oi started by each upgrade so far (SIGTERM when dropped).
    upgraded: Vec<Adopted>,
}

impl Chain {
    fn start(rules: &str) -> Chain {
        let dir = tempfile::Builder::new()
            .prefix("oi-upgc")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let binary = dir.path().join("oi");
        put_binary(Path::new(env!("CARGO_BIN_EXE_oi")), &binary);
        let control = dir.path().join("control.sock");
        let conf = dir.path().join("oi.conf");
        let text = format!("controlsocket {}\n{rules}", control.display());
        std::fs::write(&conf, text).expect("conf");
        let first = OiProcess::start_program(&binary, dir.path(), &conf, &[]);
        Chain {
            dir,
            control,
            first,
            upgraded: Vec::new(),
        }
    }

    /// `oi connections --json` of the oi serving now.
    fn connections(&self) -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
            .args(["connections", "--json", "--socket"])
            .arg(&self.control)
            .output()
            .expect("oi connections");
        if !out.status.success() {
            self.first.fail(&format!("oi connections: {out:?}"));
        }
        serde_json::from_slice(&out.stdout).expect("connections JSON")
    }

    /// The one live connection's age in `oi connections`, in seconds.
    fn age(&self) -> f64 {
        let rows = self.connections();
        let [row] = rows.as_array().map(Vec::as_slice).unwrap_or(&[]) else {
            self.first.fail(&format!("one live connection, not {rows}"));
        };
        row["age_seconds"]
            .as_f64()
            .unwrap_or_else(|| self.first.fail(&format!("no age in {row}")))
    }

    /// `oi upgrade` of the oi serving now, with the same binary: returns
    /// once the old one has exited, which it does at once only when it
    /// handed its connection over.
    fn upgrade(&mut self) {
        put_binary(
            Path::new(env!("CARGO_BIN_EXE_oi")),
            &self.dir.path().join("oi"),
        );
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
            .args(["upgrade", "--socket"])
            .arg(&self.control)
            .output()
            .expect("oi upgrade");
        if !out.status.success() {
            self.first.fail(&format!("oi upgrade: {out:?}"));
        }
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let pid: i32 = said
            .split("oi pid ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| self.first.fail(&format!("oi upgrade said {said:?}")));
        // Polled, not `exited_within`: that one also waits (5 s) for the
        // stderr pipe to close, which the new oi holds open.
        let old = self
            .upgraded
            .last()
            .map_or(self.first.child.id() as i32, |a| a.0);
        wait_until("the old oi exits after the hand-over", || {
            Adopted::has_exited(old)
        });
        self.upgraded.push(Adopted(pid));
    }
}

#[test]
fn a_handed_over_connection_keeps_its_age_in_oi_connections() {
    let backend = echo_backend("127.0.0.1:0").port();
    let port = free_port();
    let mut chain = Chain::start(&format!("127.0.0.1 {port} 127.0.0.1 {backend}\n"));
    let mut client = connect(local(port));
    echo(&mut client, b"before").unwrap_or_else(|e| chain.first.fail(&format!("echo: {e}")));
    // Bounded: a second, by the old oi's own count.
    let mut before = 0.0;
    wait_until("the connection is a second old", || {
        before = chain.age();
        before >= 1.0
    });
    for round in 1..=2 {
        let asked = Instant::now();
        chain.upgrade();
        eprintln!(
            "upgrade {round}: {:.3} s to the old oi's exit",
            asked.elapsed().as_secs_f64()
        );
        let after = chain.age();
        // The age went on across the hand-over: at least what it was,
        // plus the time since it was read, less what the hand-over itself
        // may not count (its pause, at most `SLACK`).
        let least = before + asked.elapsed().as_secs_f64() - SLACK;
        assert!(
            after >= before && after >= least,
            "upgrade {round}: the new oi lists the connection {after} s old; it was {before} s \
             old before, so at least {least} s"
        );
        echo(&mut client, b"after").unwrap_or_else(|e| panic!("echo through the new oi: {e}"));
        before = after;
    }
}

#[test]
fn a_rate_limited_download_gets_no_fresh_bucket_from_a_hand_over() {
    // The backend sends without end (bounded: 64 MiB, far past the test).
    let listener = TcpListener::bind("127.0.0.1:0").expect("backend");
    let backend = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        let chunk = vec![7u8; 16 * 1024];
        for _ in 0..4096 {
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let port = free_port();
    let mut chain = Chain::start(&format!(
        "127.0.0.1 {port} 127.0.0.1 {backend} [rate=64K]\n"
    ));
    let mut client = connect(local(port));
    let closer = client.try_clone().expect("clone");
    let got = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (got, done) = (got.clone(), done.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while !done.load(Ordering::SeqCst) {
                match client.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.fetch_add(n as u64, Ordering::SeqCst),
                };
            }
        })
    };
    // The first bucket is spent and a second has gone at the rate: from
    // here the bucket is about empty, and every byte waits for its time.
    wait_until("the download has spent its first bucket", || {
        got.load(Ordering::SeqCst) >= BUCKET + RATE
    });
    let (t0, at_t0) = (Instant::now(), got.load(Ordering::SeqCst));
    for _ in 0..UPGRADES {
        chain.upgrade();
    }
    // At least 3 s, and 0.5 s past the last hand-over.
    let until = (t0 + Duration::from_secs(3)).max(Instant::now() + Duration::from_millis(500));
    wait_until("the window ends", || Instant::now() >= until);
    let (window, moved) = (t0.elapsed(), got.load(Ordering::SeqCst) - at_t0);
    done.store(true, Ordering::SeqCst);
    let allowed = (RATE as f64 * window.as_secs_f64()) as u64 + BUCKET;
    eprintln!(
        "{moved} bytes in {:.2} s across {UPGRADES} upgrades: {:.0} B/s, allowed {allowed}",
        window.as_secs_f64(),
        moved as f64 / window.as_secs_f64()
    );
    assert!(
        moved <= allowed,
        "{moved} bytes in {window:?} across {UPGRADES} upgrades, over {RATE} B/s and one \
         {BUCKET}-byte bucket ({allowed})"
    );
    // It moved all along: each new oi took the download on.
    assert!(
        moved >= RATE * window.as_secs() / 2,
        "{moved} bytes in {window:?}"
    );
    // Ends the reader's read at once.
    let _ = closer.shutdown(std::net::Shutdown::Both);
    reader.join().expect("reader");
    drop(chain);
}
