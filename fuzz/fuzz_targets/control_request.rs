//! Arbitrary bytes as the request line a local client sends to the control
//! socket, through `oi_wire::request::control_request`. Besides
//! "never panics", it checks that anything it accepts starts with `status`
//! or `connections` as a word, and that JSON is only ever asked for by `json`;
//! and, through `upgrade_request`, that an upgrade is only read from a line
//! whose first word is `upgrade`, with a path that is part of the line;
//! and, through `admin_request`, that an operator request is only read
//! from a line whose first word names it, with every name taken from the
//! line and every number in its range.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use oi_wire::admin::{admin_request, Admin, Change, Which, MAX_GRACE_MS, MAX_WEIGHT};
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
    if let Some(parsed) = admin_request(data) {
        let first = data
            .split(|b| b.is_ascii_whitespace())
            .find(|w| !w.is_empty());
        let part_of_line = |p: &[u8]| !p.is_empty() && data.windows(p.len()).any(|w| w == p);
        match parsed {
            Err(why) => assert!(!why.is_empty()),
            Ok(Admin::Backend {
                rule,
                backend,
                change,
            }) => {
                assert_eq!(first, Some(&b"backend"[..]));
                assert!(part_of_line(rule) && part_of_line(backend));
                match change {
                    Change::Weight(w) => assert!(w <= MAX_WEIGHT),
                    Change::Disable { grace_ms } => assert!(grace_ms <= MAX_GRACE_MS),
                    Change::Drain | Change::Enable => {}
                }
            }
            Ok(Admin::Close(which)) => {
                assert_eq!(first, Some(&b"close"[..]));
                match which {
                    Which::Rule(r) => assert!(part_of_line(r)),
                    Which::Backend { rule, backend } => {
                        assert!(part_of_line(rule) && part_of_line(backend))
                    }
                    Which::Client { ip, bits } => {
                        assert!(bits <= if ip.is_ipv4() { 32 } else { 128 })
                    }
                    Which::Id(_) => {}
                }
            }
            Ok(Admin::Reload) => assert_eq!(first, Some(&b"reload"[..])),
            Ok(Admin::Config) => assert_eq!(first, Some(&b"config"[..])),
        }
    }
});
