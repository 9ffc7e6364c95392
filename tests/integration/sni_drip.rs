//! A ClientHello dripped a few bytes at a time costs a `[sni=]` listener
//! about what the same bytes cost a plain rule: the peek waits until the
//! parser's announced length is queued (counted without copying) before it
//! peeks and parses again, so its work is linear in the hello's length.
//! Measured through the binary as oi's CPU ticks (utime + stime of
//! /proc/PID/stat), not wall time: a benchmark-style assertion.
//! Release build, 16 KiB at 8 bytes a millisecond: the `sni=` listener
//! 0-1 ticks against the plain rule's 6-7; 12-14 before, when every new
//! segment woke a peek of the whole buffer (about two peeks a segment).
//! The debug binary the tests run forwards 10 times slower, so the plain
//! rule's cost is the larger there either way: the peeks themselves are
//! counted in `call_counts.rs`.

use crate::common::*;
use oxidinetd::client_hello;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// Bytes written per step of the drip.
const STEP: usize = 8;

/// Pause between two steps: the drip's pace (its shape, not a wait for oi).
const PACE: Duration = Duration::from_millis(1);

/// Clock ticks of slack over twice the plain cost: ticks are 10 ms
/// (CLK_TCK 100), each thread's time is rounded to them, and oi's own
/// timers and the harness's connects add a tick or two whatever the rule.
const FLOOR_TICKS: u64 = 5;

/// A ClientHello naming `name` of exactly `total` bytes (one record): the
/// minimal example with a `padding` extension (21) in front of the name, so
/// the parser walks past it to find the name.
pub(crate) fn hello_of(name: &str, total: usize) -> Vec<u8> {
    let small = client_hello::example(Some(name));
    // The padding extension's header is 4 bytes; the rest is its data.
    let pad = total - small.len() - 4;
    let mut ext = vec![0x00, 21];
    ext.extend_from_slice(&u16::try_from(pad).expect("pad").to_be_bytes());
    ext.resize(4 + pad, 0);
    // The extensions start after the record (5) and handshake (4) headers,
    // version and random (34), session id (1), suites (4), compression (2).
    let at = 5 + 4 + 34 + 1 + 4 + 2;
    let ext_len = u16::from_be_bytes([small[at], small[at + 1]]) as usize + ext.len();
    let mut out = small[..at].to_vec();
    out.extend_from_slice(&u16::try_from(ext_len).expect("len").to_be_bytes());
    out.extend_from_slice(&ext);
    out.extend_from_slice(&small[at + 2..]);
    let record = out.len() - 5;
    out[3..5].copy_from_slice(&u16::try_from(record).expect("record").to_be_bytes());
    let body = record - 4;
    out[6..9].copy_from_slice(&[0, (body >> 8) as u8, body as u8]);
    assert_eq!(
        client_hello::parse(&out),
        client_hello::Hello::Found(name.to_string())
    );
    out
}

/// CPU time (user + system) of process `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fields 14 and 15 of stat (utime, stime) are at 11 and 12 after the name.
    get(11) + get(12)
}

/// Writes `bytes` to `to` `STEP` at a time, `PACE` apart, reads the echo
/// back whole, and returns the ticks oi spent meanwhile.
pub(crate) fn drip(oi: &OiProcess, to: SocketAddr, bytes: &[u8]) -> u64 {
    let pid = oi.child.id();
    let before = cpu_ticks(pid);
    let mut s = connect(to);
    s.set_nodelay(true).expect("nodelay");
    for chunk in bytes.chunks(STEP) {
        if let Err(e) = s.write_all(chunk) {
            oi.fail(&format!("dripping to {to}: {e}"));
        }
        std::thread::sleep(PACE);
    }
    let mut back = vec![0u8; bytes.len()];
    if let Err(e) = s.read_exact(&mut back) {
        oi.fail(&format!("no echo of the dripped bytes from {to}: {e}"));
    }
    assert!(back == bytes, "the backend got every byte, in order");
    drop(s);
    cpu_ticks(pid) - before
}

#[test]
fn a_dripped_16_kib_client_hello_costs_at_most_twice_a_plain_rule() {
    let echo = echo_backend("127.0.0.1:0");
    let other = echo_backend("127.0.0.1:0");
    let dir = tempfile::tempdir().expect("tempdir");
    let (sni, plain) = (free_port(), free_port());
    let conf = dir.path().join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "127.0.0.1 {sni} {e} {ep} [sni=drip.example.com]\n\
             127.0.0.1 {sni} {o} {op}\n\
             127.0.0.1 {plain} {e} {ep}\n",
            e = echo.ip(),
            ep = echo.port(),
            o = other.ip(),
            op = other.port(),
        ),
    );
    // OI_BIN measures another build (a release one) the same way.
    let bin = std::env::var("OI_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_oi").to_string());
    let oi = OiProcess::start_program(std::path::Path::new(&bin), dir.path(), &conf, &[]);
    // 16 KiB, the most oi reads for a name: the whole of it is the hello.
    let hello = hello_of("drip.example.com", 16 * 1024);
    let plain_ticks = drip(&oi, local(plain), &hello);
    let sni_ticks = drip(&oi, local(sni), &hello);
    eprintln!(
        "dripped {}: sni= {sni_ticks} ticks, plain {plain_ticks} ticks",
        hello.len()
    );
    assert!(
        sni_ticks <= 2 * plain_ticks + FLOOR_TICKS,
        "a dripped ClientHello cost the sni= listener {sni_ticks} ticks, \
         the plain rule {plain_ticks} (allowed: twice plus {FLOOR_TICKS})"
    );
    oi.stop();
}
