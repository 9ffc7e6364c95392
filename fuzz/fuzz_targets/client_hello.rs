//! Arbitrary bytes through the ClientHello reader `[sni=...]` rules peek
//! with, and the name patterns they match.
//!
//! Besides "never panics", it checks what the peek loop relies on: a
//! verdict other than `NeedMore` never changes when more bytes arrive (so
//! oi may decide as soon as it has one), no whole-hello verdict comes from
//! fewer bytes than `parse_wanting` asked for (so oi may wait for them
//! before it looks again), and a found name is a lowercase host name of at
//! most 253 bytes.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use oi_wire::client_hello::{best_match, parse, parse_wanting, Hello, NamePattern};

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    for cut in [data.len() / 2, data.len().saturating_sub(1)] {
        let (early, want) = parse_wanting(&data[..cut]);
        if early != Hello::NeedMore {
            assert_eq!(early, whole, "verdict changed after byte {cut}");
        } else {
            assert!(want > cut, "asked for {want} bytes with {cut}");
            if data.len() < want {
                assert!(
                    matches!(whole, Hello::NeedMore | Hello::NotTls),
                    "{whole:?} from {} bytes, fewer than the {want} asked for",
                    data.len()
                );
            }
        }
    }
    if let Hello::Found(name) = &whole {
        assert!(!name.is_empty() && name.len() <= 253, "{name:?}");
        assert!(!name.bytes().any(|b| b.is_ascii_uppercase()), "{name:?}");
        // A name always matches itself, and its parent's wildcard when it has one.
        let exact = NamePattern::parse(name).expect("a found name is a pattern");
        assert!(exact.matches(name));
        if let Some((_, parent)) = name.split_once('.') {
            if let Ok(wild) = NamePattern::parse(&format!("*.{parent}")) {
                assert!(wild.matches(name));
                assert_eq!(best_match([&wild, &exact], name), Some(1));
            }
        }
    }
    // The input as a pattern: parses or not, and matches without panicking.
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(p) = NamePattern::parse(text) {
            let _ = p.matches(text);
            assert_eq!(NamePattern::parse(&p.to_string()), Ok(p));
        }
    }
});
