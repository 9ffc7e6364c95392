//! Arbitrary bytes as the request line a local client sends to the control
//! socket, through `oi_wire::request::control_request`. Besides
//! "never panics", it checks that anything it accepts starts with `status`
//! or `connections` as a word, and that JSON is only ever asked for by `json`;
//! and, through `upgrade_request`, that an upgrade is only read from a line
//! whose first word is `upgrade`, with a path that is part of the line.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use oi_wire::request::Query;
use oi_wire::request::{control_request, upgrade_request};

fuzz_target!(|data: &[u8]| {
    if let Some((query, json)) = control_request(data) {
        let mut words = data
            .split(|b| b.is_ascii_whitespace())
            .filter(|w| !w.is_empty());
        let first = words.next();
        match query {
            Query::Status => assert_eq!(first, Some(&b"status"[..])),
            Query::Connections => assert_eq!(first, Some(&b"connections"[..])),
        }
        assert_eq!(json, words.next() == Some(&b"json"[..]));
    }
    if let Some(path) = upgrade_request(data) {
        let first = data
            .split(|b| b.is_ascii_whitespace())
            .find(|w| !w.is_empty());
        assert_eq!(first, Some(&b"upgrade"[..]));
        if let Some(p) = path {
            assert!(!p.is_empty());
            assert!(data.windows(p.len()).any(|w| w == p));
        }
    }
});
