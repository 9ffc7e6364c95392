//! The status page (`GET /` on the metrics listener) in a real browser:
//! Debian's chromium, headless, loads it from a running oi, runs its script
//! (which polls /status.json), and the test reads the rendered DOM: the rules
//! and backends of the running oi, with the backend's state. A screenshot is
//! kept as a test artifact in target/tmp/status-page.png. Without chromium
//! the test says so and passes, unless OI_REQUIRE_TOOLS is set (CI sets it,
//! and installs chromium).

use crate::common::*;
use std::io::{Read, Write};
use std::process::Command;

/// Debian's chromium with the flags a closed, sandboxed machine needs (no
/// background networking, no sync, a fresh profile).
pub(super) fn chromium(
    profile: &std::path::Path,
    args: &[&str],
    url: &str,
) -> std::process::Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            // Run the page's script (fetch, render) before dumping.
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium")
}

pub(super) fn chromium_present() -> bool {
    tool_present("chromium", "--version", "chromium")
}

/// A plain HTTP GET of `path`: the status line and the body.
fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut s = connect(addr);
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

#[test]
fn status_page_renders_the_running_rules_in_a_browser() {
    let backend = echo_backend("127.0.0.1:0");
    let (tcp_port, metrics_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    std::fs::write(
        &conf,
        format!("127.0.0.1 {tcp_port} 127.0.0.1 {}\n", backend.port()),
    )
    .expect("conf");
    let metrics = format!("127.0.0.1:{metrics_port}");
    let _oi = OiProcess::start(dir.path(), &conf, &["--metrics", &metrics]);
    // Some traffic so the numbers are not all zero.
    for _ in 0..3 {
        ping(tcp_port).expect("ping through oi");
    }

    // The HTTP side first: the page, the JSON it polls, 404 for the rest.
    let (status, page) = get(local(metrics_port), "/");
    assert!(status.contains("200"), "{status}");
    assert!(page.contains("<title>oi status</title>"));
    let (status, json) = get(local(metrics_port), "/status.json");
    assert!(status.contains("200"), "{status}");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("status.json is JSON");
    assert_eq!(doc["rules"][0]["name"], format!("127.0.0.1:{tcp_port}/tcp"));
    let (status, _) = get(local(metrics_port), "/nothing");
    assert!(status.contains("404"), "{status}");

    if !chromium_present() {
        return;
    }
    let profile = tempfile::tempdir().expect("profile dir");
    let url = format!("http://{metrics}/");
    let out = chromium(profile.path(), &["--dump-dom"], &url);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Rendered by the page's script from /status.json: the rule, its
    // backend, the backend's state and the connections counted.
    let rule = format!("<td class=\"name\">127.0.0.1:{tcp_port}/tcp</td>");
    let be = format!("<td class=\"name\">127.0.0.1:{}</td>", backend.port());
    assert!(dom.contains(&rule), "the rule is not on the page:\n{dom}");
    assert!(dom.contains(&be), "the backend is not on the page:\n{dom}");
    assert!(dom.contains("<td class=\"up\">up</td>"), "{dom}");
    assert!(
        dom.contains("<div id=\"error\"></div>"),
        "the page shows an error:\n{dom}"
    );
    assert!(
        dom.contains("total <b>3</b>"),
        "three connections counted:\n{dom}"
    );

    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(
        profile.path(),
        &[
            "--window-size=1200,600",
            &format!("--screenshot={}", shot.display()),
        ],
        &url,
    );
    assert!(
        out.status.success(),
        "chromium screenshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    eprintln!("screenshot: {}", shot.display());
}
