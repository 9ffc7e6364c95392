//! Arbitrary bytes through the PROXY protocol decoder (`oi_wire::proxy`),
//! as the accept path feeds it: whatever prefix of the stream has arrived.
//!
//! Besides "never panics", it checks what the accept path relies on: a
//! complete header's length lies within the input and within `HEADER_MAX`;
//! a buffer of `HEADER_MAX` bytes is always decided (so the reader's buffer
//! is big enough); one byte fewer than a complete header is incomplete (so
//! consuming on "incomplete" never eats the client's data); and a decoded
//! address header, encoded again, decodes to the same addresses.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use oi_wire::proxy::{self, Header, Parsed, HEADER_MAX};

fuzz_target!(|data: &[u8]| {
    let parsed = proxy::parse(data);
    match parsed {
        Parsed::Incomplete => assert!(data.len() < HEADER_MAX, "{} bytes undecided", data.len()),
        Parsed::Invalid(why) => {
            assert!(!why.to_string().is_empty());
        }
        Parsed::Complete {
            header,
            version,
            length,
        } => {
            assert!(length <= data.len() && length <= HEADER_MAX, "{length}");
            assert!(length > 0);
            assert_eq!(proxy::parse(&data[..length]), parsed, "the header alone");
            assert_eq!(
                proxy::parse(&data[..length - 1]),
                Parsed::Incomplete,
                "one byte short"
            );
            if let Header::Proxied {
                source,
                destination,
                transport,
            } = header
            {
                let again = proxy::encode(version, transport, source, destination);
                match proxy::parse(again.as_bytes()) {
                    Parsed::Complete { header: h2, .. } => {
                        let (
                            Header::Proxied {
                                source: s2,
                                destination: d2,
                                ..
                            },
                            false,
                        ) = (h2, again.as_bytes().starts_with(b"PROXY UNKNOWN"))
                        else {
                            // v1 cannot carry UDP: UNKNOWN is the right answer.
                            return;
                        };
                        let unmapped = |a: std::net::SocketAddr| match a.ip() {
                            std::net::IpAddr::V6(v6) => {
                                v6.to_ipv4_mapped().map_or(a.ip(), std::net::IpAddr::V4)
                            }
                            ip => ip,
                        };
                        assert_eq!(unmapped(s2), unmapped(source));
                        assert_eq!(unmapped(d2), unmapped(destination));
                        assert_eq!((s2.port(), d2.port()), (source.port(), destination.port()));
                    }
                    other => panic!("re-encoded {again:?} parses as {other:?}"),
                }
            }
        }
    }
});
