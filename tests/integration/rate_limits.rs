//! Bandwidth limits through the real binary: `rate` (copy and splice),
//! `rate-down`, `rule-rate` shared by connections, `client-rate` separating
//! client addresses, and UDP datagrams over a limit dropped and counted.
//!
//! Every transfer is timed both ways: a lower bound the token bucket
//! guarantees (bytes past the burst cannot arrive sooner than `rate`
//! allows), and an upper bound that fails a bucket serving much less than
//! its rate (over-throttling: turns lost, a connection left waiting). The
//! upper bound is 1.5 times the time the bytes take at the rate with no
//! burst at all (the transfers take 1–2 s, and took 92–97% of that on a
//! loaded 2-core machine): a turn woken late loses nothing while the bucket
//! is within its burst (`stats/rate.rs`), so load does not come near it,
//! and a bucket serving less than 60% of its rate fails it.
//! `rate_fairness.rs` checks how a shared bucket divides its rate.

use crate::common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// 1024-based, as the options read `M`.
const MIB: usize = 1 << 20;

/// The burst a bucket of `rate` bytes per second allows (docs: a tenth of a
/// second's worth, at least 64 KiB).
pub(super) fn burst(rate: usize) -> usize {
    (rate / 10).max(64 * 1024)
}

/// The least time `bytes` can take through one bucket of `rate`, less 3% for
/// the clocks of two processes (the bound itself is exact).
pub(super) fn least(bytes: usize, rate: usize) -> Duration {
    Duration::from_secs_f64((bytes - burst(rate)) as f64 / rate as f64 * 0.97)
}

/// The most `bytes` may take through one bucket of `rate`: 1.5 times what
/// they take at the rate, the burst not counted.
pub(super) fn most(bytes: usize, rate: usize) -> Duration {
    Duration::from_secs_f64(1.5 * bytes as f64 / rate as f64)
}

/// What a sink backend saw of one connection: the bytes' hash and count,
/// and when the last one arrived.
pub(super) struct Received {
    /// SHA-256 of everything read.
    pub(super) sha: String,
    /// How many bytes.
    pub(super) len: usize,
    /// When EOF was read.
    pub(super) at: Instant,
}

/// A backend that reads each connection to EOF and reports what it got.
pub(super) fn sink_backend() -> (SocketAddr, mpsc::Receiver<Received>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind sink");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut all = Vec::new();
                let _ = c.read_to_end(&mut all);
                let _ = tx.send(Received {
                    sha: sha256(&all),
                    len: all.len(),
                    at: Instant::now(),
                });
            });
        }
    });
    (addr, rx)
}

/// A backend that writes `data` to each connection, then closes it.
pub(super) fn source_backend(data: Vec<u8>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind source");
    let addr = l.local_addr().expect("addr");
    let data = std::sync::Arc::new(data);
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let data = data.clone();
            std::thread::spawn(move || {
                let _ = c.write_all(&data);
            });
        }
    });
    addr
}

/// Connects to `to` from the loopback address `from` (127.0.0.1, 127.0.0.2).
fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    s.bind(&SocketAddr::from((from, 0)).into())
        .expect("bind client address");
    s.connect_timeout(&to.into(), Duration::from_secs(5))
        .expect("connect");
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s
}

/// Writes `data` from `from` to `port`, then half-closes.
fn upload(from: [u8; 4], port: u16, data: &[u8]) {
    let mut s = connect_from(from, local(port));
    s.write_all(data).expect("upload");
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
}

/// Starts oi on a rinetd.conf of `rules` (each `{port}`-free: the caller
/// formats them), with a metrics listener; returns it, its metrics
/// address and the temporary directory it lives in.
fn start(rules: &str) -> (OiProcess, SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let metrics = local(free_port());
    write_atomic(&conf, &format!("metrics {metrics}\n{rules}"));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    (oi, metrics, dir)
}

/// The sum of a counter family's samples in `/metrics`.
pub(super) fn metric(addr: SocketAddr, family: &str) -> u64 {
    let mut m = TcpStream::connect(addr).expect("metrics listener");
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut page = String::new();
    let _ = m.read_to_string(&mut page);
    page.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Uploads `len` bytes through a rule limited to `rate` with `options`,
/// and checks every byte arrived, no sooner than the bucket allows.
fn limited_upload(options: &str, rate: usize, len: usize) {
    let (backend, got) = sink_backend();
    let port = free_port();
    let (oi, metrics, _dir) = start(&format!(
        "127.0.0.1 {port} 127.0.0.1 {} [{options}]\n",
        backend.port()
    ));
    let data = pattern(len, 7);
    let began = Instant::now();
    upload([127, 0, 0, 1], port, &data);
    let r = got
        .recv_timeout(Duration::from_secs(30))
        .expect("the backend got the upload");
    let took = r.at - began;
    assert_eq!((r.len, r.sha.as_str()), (len, sha256(&data).as_str()));
    assert!(
        took >= least(len, rate),
        "{len} bytes at {rate}/s took {took:?} ([{options}])"
    );
    assert!(
        took <= most(len, rate),
        "{len} bytes at {rate}/s took {took:?}, over {:?} ([{options}]): {}",
        most(len, rate),
        oi.stderr_tail()
    );
    assert!(metric(metrics, "oi_rate_delayed_bytes_total") > 0);
    assert!(metric(metrics, "oi_rate_wait_milliseconds_total") > 0);
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_connection_limit_holds_while_copying() {
    limited_upload("rate=4M, splice=off", 4 * MIB, 8 * MIB);
}

#[test]
fn a_connection_limit_holds_while_splicing() {
    limited_upload("rate-up=4M, splice=on", 4 * MIB, 8 * MIB);
}

#[test]
fn rate_down_limits_what_the_backend_sends() {
    let len = 6 * MIB;
    let rate = 4 * MIB;
    let data = pattern(len, 3);
    let backend = source_backend(data.clone());
    let port = free_port();
    let (oi, _metrics, _dir) = start(&format!(
        "127.0.0.1 {port} 127.0.0.1 {} [rate-down=4M]\n",
        backend.port()
    ));
    let began = Instant::now();
    let mut s = connect_from([127, 0, 0, 1], local(port));
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("download");
    let took = began.elapsed();
    assert_eq!((all.len(), sha256(&all)), (len, sha256(&data)));
    assert!(took >= least(len, rate), "{len} bytes took {took:?}");
    assert!(took <= most(len, rate), "{len} bytes took {took:?}");
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn connections_under_a_rule_limit_share_it() {
    let (backend, got) = sink_backend();
    let port = free_port();
    let (oi, _metrics, _dir) = start(&format!(
        "127.0.0.1 {port} 127.0.0.1 {} [rule-rate=2M]\n",
        backend.port()
    ));
    let each = 2 * MIB;
    let began = Instant::now();
    let uploads: Vec<_> = (0..2u64)
        .map(|seed| {
            std::thread::spawn(move || {
                let data = pattern(each, seed);
                upload([127, 0, 0, 1], port, &data);
                sha256(&data)
            })
        })
        .collect();
    let mut sent: Vec<String> = uploads
        .into_iter()
        .map(|u| u.join().expect("upload"))
        .collect();
    let mut seen = Vec::new();
    let mut first = None;
    let mut last = began;
    for _ in 0..2 {
        let r = got
            .recv_timeout(Duration::from_secs(30))
            .expect("upload arrived");
        assert_eq!(r.len, each);
        first.get_or_insert(r.at);
        last = last.max(r.at);
        seen.push(r.sha);
    }
    sent.sort();
    seen.sort();
    assert_eq!(sent, seen);
    // Together they moved 4 MiB through one 2 MiB/s bucket, taking turns:
    // neither finished while the other was far behind (the bucket's turns
    // are 32 KiB here, a round of two 31 ms).
    let took = last - began;
    assert!(took >= least(2 * each, 2 * MIB), "took {took:?}");
    assert!(took <= most(2 * each, 2 * MIB), "took {took:?}");
    let first = first.unwrap_or(last) - began;
    assert!(first * 10 >= took * 8, "one in {first:?}, both in {took:?}");
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_client_limit_slows_one_client_and_not_another() {
    let (backend, got) = sink_backend();
    let port = free_port();
    let rate = 512 * 1024;
    let (oi, metrics, _dir) = start(&format!(
        "127.0.0.1 {port} 127.0.0.1 {} [client-rate=512K]\n",
        backend.port()
    ));
    // 127.0.0.1 sends its burst and a second's worth more, over two
    // connections one after the other: its bucket is the client's.
    let began = Instant::now();
    let half = (burst(rate) + rate) / 2;
    for seed in 0..2 {
        let data = pattern(half, seed);
        upload([127, 0, 0, 1], port, &data);
        let r = got.recv_timeout(Duration::from_secs(30)).expect("upload");
        assert_eq!((r.len, r.sha), (half, sha256(&data)));
    }
    let took = began.elapsed();
    assert!(took >= least(2 * half, rate), "took {took:?}");
    assert!(took <= most(2 * half, rate), "took {took:?}");
    // A direction counts its delayed bytes just after writing them: the
    // backend can have them before the count (seen at load 12). Once the
    // connections have ended, every count is in.
    wait_until("127.0.0.1's connections have ended", || {
        metric(metrics, "oi_connections_active") == 0
    });
    let delayed = metric(metrics, "oi_rate_delayed_bytes_total");
    assert!(delayed > 0);
    // 127.0.0.2 has a bucket of its own, full: less than its burst goes
    // through without a wait, although 127.0.0.1's bucket is empty.
    let data = pattern(48 * 1024, 9);
    upload([127, 0, 0, 2], port, &data);
    let r = got.recv_timeout(Duration::from_secs(30)).expect("upload");
    assert_eq!((r.len, r.sha), (data.len(), sha256(&data)));
    assert_eq!(metric(metrics, "oi_rate_delayed_bytes_total"), delayed);
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn udp_datagrams_over_the_limit_are_dropped_and_counted() {
    let (backend, seen) = udp_echo_backend("127.0.0.1:0");
    let port = free_udp_port();
    let (oi, metrics, _dir) = start(&format!(
        "127.0.0.1 {port}/udp 127.0.0.1 {}/udp [rate-up=64K]\n",
        backend.port()
    ));
    let client = udp_client(local(port));
    let sent = 300;
    let payload = vec![7u8; 1000];
    for _ in 0..sent {
        client.send_to(&payload, local(port)).expect("send");
    }
    // The burst (64 KiB: 65 datagrams) passes; most of the rest cannot, as
    // 300 datagrams take far less than the 3.6 s 64 KiB/s would need.
    let dropped = || metric(metrics, "oi_rate_dropped_datagrams_total");
    wait_until("drops counted", || dropped() > 0);
    let mut arrived = 0;
    while seen.recv_timeout(Duration::from_millis(500)).is_ok() {
        arrived += 1;
    }
    let dropped = dropped();
    assert!(arrived >= 65, "{arrived} arrived");
    assert!(arrived + dropped as usize <= sent, "{arrived} + {dropped}");
    assert!(arrived < sent, "{arrived} of {sent}: nothing was limited");
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_reload_that_keeps_the_rule_keeps_its_bucket() {
    let (backend, got) = sink_backend();
    let port = free_port();
    // 16 KiB/s with a 64 KiB burst: an emptied bucket takes 4 s to fill,
    // far longer than a reload and a connect.
    let rule = format!(
        "127.0.0.1 {port} 127.0.0.1 {} [rule-rate=16K]\n",
        backend.port()
    );
    let (oi, metrics, dir) = start(&rule);
    let first = pattern(64 * 1024 + 32 * 1024, 1);
    upload([127, 0, 0, 1], port, &first);
    let r = got.recv_timeout(Duration::from_secs(30)).expect("upload");
    assert_eq!((r.len, r.sha), (first.len(), sha256(&first)));
    // The same rule, reloaded (with a new comment, so the file changed).
    let metrics_line = format!("metrics {metrics}\n");
    write_atomic(
        &dir.path().join("oi.conf"),
        &format!("{metrics_line}# reloaded\n{rule}"),
    );
    oi.reload();
    let delayed = metric(metrics, "oi_rate_delayed_bytes_total");
    // A new connection after the reload finds the bucket the first one
    // emptied, not a full one: 48 KiB, within a full burst, must wait.
    let data = pattern(48 * 1024, 2);
    upload([127, 0, 0, 1], port, &data);
    let r = got.recv_timeout(Duration::from_secs(30)).expect("upload");
    assert_eq!((r.len, r.sha), (data.len(), sha256(&data)));
    assert!(metric(metrics, "oi_rate_delayed_bytes_total") > delayed);
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_tcp_stream_to_a_udp_backend_waits_for_its_bucket() {
    let (backend, seen) = udp_echo_backend("127.0.0.1:0");
    let port = free_port();
    let rate = MIB;
    let (oi, metrics, _dir) = start(&format!(
        "127.0.0.1 {port} 127.0.0.1 {}/udp [rate-up=1M]\n",
        backend.port()
    ));
    let len = burst(rate) + 2 * rate;
    let mut s = connect_from([127, 0, 0, 1], local(port));
    let began = Instant::now();
    s.write_all(&pattern(len, 4)).expect("write");
    // Each read of the stream goes to the backend as one datagram.
    let mut arrived = 0;
    while arrived < len {
        let (_, n) = seen
            .recv_timeout(Duration::from_secs(30))
            .expect("datagrams keep coming");
        arrived += n;
    }
    let took = began.elapsed();
    assert_eq!(arrived, len);
    assert!(took >= least(len, rate), "took {took:?}");
    assert!(took <= most(len, rate), "took {took:?}");
    assert!(metric(metrics, "oi_rate_wait_milliseconds_total") > 0);
    drop(s);
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}
