//! Bandwidth limits on connections oi speaks TLS on, through the real
//! binary: the plaintext the TLS pump moves is charged to the same buckets
//! as the plain pump's, so a download from a TLS-terminating rule under
//! `rate=` and an upload under `rate-up=` each take no less than the bucket
//! allows and no more than 1.5 times the time at the rate (the bounds and
//! their reasons are `rate_limits.rs`'s), with every byte intact, and their
//! waits reach the rule's counters.

use crate::common::*;
use crate::rate_limits::{least, metric, most, sink_backend, source_backend};
use crate::tls::{ca, leaf, openssl_present, p, rustls_client};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// 1024-based, as the options read `M`.
const MIB: usize = 1 << 20;

/// oi ending TLS on a free port for `backend` with `options` beside the
/// certificate a test CA in `dir` signs for `edge.test`; returns oi, its
/// port, its metrics address and the CA's file.
fn start(
    dir: &Path,
    backend: SocketAddr,
    options: &str,
) -> (OiProcess, u16, SocketAddr, std::path::PathBuf) {
    let root = ca(dir, "ca");
    let edge = leaf(dir, &root, "edge.test", 30);
    let port = free_port();
    let metrics = local(free_port());
    let conf = dir.join("oi.conf");
    write_atomic(
        &conf,
        &format!(
            "metrics {metrics}\n\
             127.0.0.1 {port} 127.0.0.1 {} [tls-cert={},tls-key={},{options}]\n",
            backend.port(),
            p(&edge.cert),
            p(&edge.key),
        ),
    );
    (OiProcess::start(dir, &conf, &[]), port, metrics, root.cert)
}

#[test]
fn a_tls_download_under_rate_takes_the_time_the_bucket_allows() {
    if !openssl_present() {
        return;
    }
    let (len, rate) = (4 * MIB, 2 * MIB);
    let data = pattern(len, 11);
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = source_backend(data.clone());
    let (oi, port, metrics, ca_file) = start(dir.path(), backend, "rate=2M");
    let began = Instant::now();
    let mut tls = rustls_client(port, &ca_file, "edge.test");
    let mut all = Vec::new();
    if let Err(e) = tls.read_to_end(&mut all) {
        oi.fail(&format!("the TLS download ends cleanly: {e}"));
    }
    let took = began.elapsed();
    assert_eq!((all.len(), sha256(&all)), (len, sha256(&data)));
    assert!(
        took >= least(len, rate),
        "{len} bytes through TLS at {rate}/s took {took:?}"
    );
    assert!(
        took <= most(len, rate),
        "{len} bytes through TLS at {rate}/s took {took:?}, over {:?}: {}",
        most(len, rate),
        oi.stderr_tail()
    );
    assert!(metric(metrics, "oi_rate_delayed_bytes_total") > 0);
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_tls_upload_under_rate_up_takes_the_time_the_bucket_allows() {
    if !openssl_present() {
        return;
    }
    let (len, rate) = (4 * MIB, 2 * MIB);
    let data = pattern(len, 12);
    let dir = tempfile::tempdir().expect("tempdir");
    let (backend, got) = sink_backend();
    let (oi, port, metrics, ca_file) = start(dir.path(), backend, "rate-up=2M");
    let began = Instant::now();
    let mut tls = rustls_client(port, &ca_file, "edge.test");
    tls.write_all(&data).expect("upload");
    tls.conn.send_close_notify();
    tls.flush().expect("close_notify");
    let Ok(r) = got.recv_timeout(Duration::from_secs(30)) else {
        oi.fail("the backend got the upload within 30 s");
    };
    let took = r.at - began;
    assert_eq!((r.len, r.sha.as_str()), (len, sha256(&data).as_str()));
    assert!(
        took >= least(len, rate),
        "{len} bytes through TLS at {rate}/s took {took:?}"
    );
    assert!(
        took <= most(len, rate),
        "{len} bytes through TLS at {rate}/s took {took:?}, over {:?}: {}",
        most(len, rate),
        oi.stderr_tail()
    );
    assert!(metric(metrics, "oi_rate_wait_milliseconds_total") > 0);
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
}
