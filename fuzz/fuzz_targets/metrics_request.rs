//! Arbitrary bytes as the request head a scraper (or anyone who reaches the
//! metrics port) sends, through `oi_wire::request::metrics_request`.
//! Besides "never panics", it checks the decision depends on the request
//! line only: the same line with other headers after it decides the same.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use oi_wire::request::{metrics_request, MetricsRequest};

fuzz_target!(|data: &[u8]| {
    let decided = metrics_request(data);
    let line = data.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut with_headers = line.to_vec();
    with_headers.extend_from_slice(b"\nHost: x\r\n\r\n");
    assert_eq!(metrics_request(&with_headers), decided);
    if decided == MetricsRequest::Metrics {
        assert!(line.windows(8).any(|w| w == b"/metrics"));
    }
});
