//! Arbitrary bytes as the request line a local client sends to the control
//! socket, through `oxidinetd::observe::request::control_request`. Besides
//! "never panics", it checks that anything it accepts starts with `status`
//! or `connections` as a word, and that JSON is only ever asked for by `json`.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use oxidinetd::observe::request::control_request;
use oxidinetd::observe::Query;

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
});
