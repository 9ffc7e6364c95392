//! Byte-for-byte checks against headers written by hand from haproxy's
//! proxy-protocol.txt (sections 2.1 and 2.2), not produced by the encoder.

use super::*;
use std::net::SocketAddr;

fn sa(s: &str) -> SocketAddr {
    s.parse().expect("literal socket address")
}

/// The version 2 signature followed by `rest`.
fn v2(rest: &[u8]) -> Vec<u8> {
    let mut b = vec![
        0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
    ];
    b.extend_from_slice(rest);
    b
}

/// 192.168.0.1:56324 -> 192.168.0.11:443 over TCP, version 2.
fn v2_tcp4() -> Vec<u8> {
    v2(&[
        0x21, 0x11, 0x00, 0x0C, // PROXY, AF_INET/STREAM, 12 bytes
        0xC0, 0xA8, 0x00, 0x01, // 192.168.0.1
        0xC0, 0xA8, 0x00, 0x0B, // 192.168.0.11
        0xDC, 0x04, // 56324
        0x01, 0xBB, // 443
    ])
}

/// [2001:db8::1]:1234 -> [2001:db8::2]:80 over TCP, version 2.
fn v2_tcp6() -> Vec<u8> {
    let mut rest = vec![0x21, 0x21, 0x00, 0x24];
    rest.extend_from_slice(&[0x20, 0x01, 0x0D, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    rest.extend_from_slice(&[0x20, 0x01, 0x0D, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    rest.extend_from_slice(&[0x04, 0xD2, 0x00, 0x50]);
    v2(&rest)
}

fn complete(buf: &[u8]) -> (Header, ProxyVersion, usize) {
    match parse(buf) {
        Parsed::Complete {
            header,
            version,
            length,
        } => (header, version, length),
        other => panic!("{buf:?}: expected a complete header, got {other:?}"),
    }
}

fn proxied(src: &str, dst: &str, transport: Transport) -> Header {
    Header::Proxied {
        source: sa(src),
        destination: sa(dst),
        transport,
    }
}

#[test]
fn v1_tcp4_encodes_as_the_specification_writes_it() {
    let h = encode(
        ProxyVersion::V1,
        Transport::Stream,
        sa("192.168.0.1:56324"),
        sa("192.168.0.11:443"),
    );
    assert_eq!(
        h.as_bytes(),
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
    );
}

#[test]
fn v1_tcp6_worst_case_is_104_bytes() {
    let all = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let h = encode(
        ProxyVersion::V1,
        Transport::Stream,
        sa(&format!("[{all}]:65535")),
        sa(&format!("[{all}]:65535")),
    );
    let want = format!("PROXY TCP6 {all} {all} 65535 65535\r\n");
    assert_eq!(h.as_bytes(), want.as_bytes());
    assert_eq!(h.as_bytes().len(), 104);
    assert_eq!(
        complete(want.as_bytes()),
        (
            proxied(
                &format!("[{all}]:65535"),
                &format!("[{all}]:65535"),
                Transport::Stream
            ),
            ProxyVersion::V1,
            104
        )
    );
}

#[test]
fn v1_decodes_tcp4_and_tcp6_and_stops_at_the_crlf() {
    let mut buf = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.0\r\n".to_vec();
    assert_eq!(
        complete(&buf),
        (
            proxied("192.168.0.1:56324", "192.168.0.11:443", Transport::Stream),
            ProxyVersion::V1,
            47
        )
    );
    buf = b"PROXY TCP6 2001:db8::1 ::ffff:10.0.0.1 1 65535\r\n".to_vec();
    assert_eq!(
        complete(&buf).0,
        proxied(
            "[2001:db8::1]:1",
            "[::ffff:10.0.0.1]:65535",
            Transport::Stream
        )
    );
}

#[test]
fn v1_unknown_is_local_even_with_the_longest_tail() {
    assert_eq!(encode_v1_unknown().as_bytes(), b"PROXY UNKNOWN\r\n");
    assert_eq!(
        complete(b"PROXY UNKNOWN\r\n"),
        (Header::Local, ProxyVersion::V1, 15)
    );
    let all = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let longest = format!("PROXY UNKNOWN {all} {all} 65535 65535\r\n");
    assert_eq!(longest.len(), V1_MAX);
    assert_eq!(
        complete(longest.as_bytes()),
        (Header::Local, ProxyVersion::V1, 107)
    );
}

#[test]
fn v1_longer_than_107_bytes_is_refused_at_107() {
    let mut line = b"PROXY UNKNOWN ".to_vec();
    line.resize(106, b'a');
    assert_eq!(parse(&line), Parsed::Incomplete, "106 bytes may still end");
    line.push(b'\r');
    assert_eq!(
        parse(&line),
        Parsed::Invalid(Invalid::V1TooLong),
        "a CRLF at 107..109 would make 108 bytes"
    );
    line.pop();
    line.push(b'a');
    assert_eq!(parse(&line), Parsed::Invalid(Invalid::V1TooLong));
    line.resize(4096, b'a');
    assert_eq!(parse(&line), Parsed::Invalid(Invalid::V1TooLong));
}

#[test]
fn v1_syntax_errors_are_refused_with_a_reason() {
    let bad: &[&[u8]] = &[
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
        b"PROXY TCP4 ::1 ::1 1 2\r\n",
        b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
        b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",
        b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rx",
        b"PROXY \xff",
        b"PROXY \r\n",
    ];
    for b in bad {
        match parse(b) {
            Parsed::Invalid(Invalid::V1Syntax(why)) => assert!(!why.is_empty()),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(b)),
        }
    }
}

#[test]
fn v2_tcp4_matches_the_specification_bytes_both_ways() {
    let h = encode(
        ProxyVersion::V2,
        Transport::Stream,
        sa("192.168.0.1:56324"),
        sa("192.168.0.11:443"),
    );
    assert_eq!(h.as_bytes(), &v2_tcp4()[..]);
    assert_eq!(
        complete(&v2_tcp4()),
        (
            proxied("192.168.0.1:56324", "192.168.0.11:443", Transport::Stream),
            ProxyVersion::V2,
            28
        )
    );
}

#[test]
fn v2_tcp6_matches_the_specification_bytes_both_ways() {
    let h = encode(
        ProxyVersion::V2,
        Transport::Stream,
        sa("[2001:db8::1]:1234"),
        sa("[2001:db8::2]:80"),
    );
    assert_eq!(h.as_bytes(), &v2_tcp6()[..]);
    assert_eq!(
        complete(&v2_tcp6()),
        (
            proxied("[2001:db8::1]:1234", "[2001:db8::2]:80", Transport::Stream),
            ProxyVersion::V2,
            52
        )
    );
}

#[test]
fn v2_udp_uses_the_dgram_protocol_nibble() {
    let h = encode(
        ProxyVersion::V2,
        Transport::Datagram,
        sa("192.168.0.1:56324"),
        sa("192.168.0.11:443"),
    );
    let mut want = v2_tcp4();
    want[13] = 0x12;
    assert_eq!(h.as_bytes(), &want[..]);
    assert_eq!(
        complete(&want).0,
        proxied("192.168.0.1:56324", "192.168.0.11:443", Transport::Datagram)
    );
    let h6 = encode(
        ProxyVersion::V2,
        Transport::Datagram,
        sa("[2001:db8::1]:1234"),
        sa("[2001:db8::2]:80"),
    );
    let mut want6 = v2_tcp6();
    want6[13] = 0x22;
    assert_eq!(h6.as_bytes(), &want6[..]);
    // Version 1 has no UDP: asked for it, the encoder says UNKNOWN.
    let h1 = encode(
        ProxyVersion::V1,
        Transport::Datagram,
        sa("1.2.3.4:1"),
        sa("5.6.7.8:2"),
    );
    assert_eq!(h1.as_bytes(), b"PROXY UNKNOWN\r\n");
}

#[test]
fn v2_local_ignores_whatever_addresses_follow() {
    let local = v2(&[0x20, 0x00, 0x00, 0x00]);
    assert_eq!(encode_v2_local().as_bytes(), &local[..]);
    assert_eq!(complete(&local), (Header::Local, ProxyVersion::V2, 16));
    // LOCAL with an AF_INET block (haproxy's health checks may send one).
    let mut with_addr = v2_tcp4();
    with_addr[12] = 0x20;
    assert_eq!(complete(&with_addr), (Header::Local, ProxyVersion::V2, 28));
}

#[test]
fn v2_unspec_and_unix_families_mean_use_the_real_addresses() {
    assert_eq!(
        complete(&v2(&[0x21, 0x00, 0x00, 0x00])),
        (Header::Local, ProxyVersion::V2, 16)
    );
    let mut unix = v2(&[0x21, 0x31, 0x00, 0xD8]);
    unix.resize(16 + 216, b'/');
    assert_eq!(complete(&unix), (Header::Local, ProxyVersion::V2, 232));
}

#[test]
fn v2_tlvs_are_skipped_and_the_data_after_them_kept() {
    let mut b = v2_tcp4();
    b[15] = 12 + 7; // addresses + one 7-byte TLV
    b.extend_from_slice(&[0x04, 0x00, 0x04, 0, 0, 0, 0]); // PP2_TYPE_NOOP, 4 bytes
    b.extend_from_slice(b"hello");
    let (h, _, length) = complete(&b);
    assert_eq!(length, 35);
    assert_eq!(&b[length..], b"hello");
    assert_eq!(
        h,
        proxied("192.168.0.1:56324", "192.168.0.11:443", Transport::Stream)
    );
}

#[test]
fn every_truncation_is_incomplete_and_never_invalid() {
    let all = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let long_v1 = format!("PROXY TCP6 {all} {all} 65535 65535\r\n");
    let mut big_v2 = v2(&[0x21, 0x11, 0x04, 0xD8]); // 1,240: the largest accepted
    big_v2.resize(V2_FIXED + 1240, 0);
    for header in [
        v2_tcp4(),
        v2_tcp6(),
        long_v1.into_bytes(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        big_v2,
    ] {
        for n in 0..header.len() {
            assert_eq!(parse(&header[..n]), Parsed::Incomplete, "{n} of {header:?}");
        }
        assert_eq!(complete(&header).2, header.len());
    }
    assert_eq!(HEADER_MAX, V2_FIXED + 1240);
}

#[test]
fn v2_longer_than_the_bound_is_refused_from_its_length_field() {
    // 1,241 bytes after the fixed part: one past 216 + 1,024.
    let b = v2(&[0x21, 0x11, 0x04, 0xD9]);
    assert_eq!(parse(&b), Parsed::Invalid(Invalid::V2TooLong(1241)));
    let b = v2(&[0x21, 0x11, 0xFF, 0xFF]);
    assert_eq!(parse(&b), Parsed::Invalid(Invalid::V2TooLong(65535)));
}

#[test]
fn bad_signatures_are_refused_from_the_first_wrong_byte() {
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\n"),
        Parsed::Invalid(Invalid::Signature)
    );
    assert_eq!(parse(b"PROXX"), Parsed::Invalid(Invalid::Signature));
    assert_eq!(parse(b"PROXY"), Parsed::Incomplete);
    assert_eq!(parse(b"\r\n\r\n\0\r\nQUIT"), Parsed::Incomplete);
    let mut b = v2_tcp4();
    b[7] = b'q';
    assert_eq!(parse(&b), Parsed::Invalid(Invalid::Signature));
    assert_eq!(parse(&b[..8]), Parsed::Invalid(Invalid::Signature));
    assert_eq!(
        parse(&[0x16, 0x03, 0x01]),
        Parsed::Invalid(Invalid::Signature)
    );
    assert_eq!(parse(b""), Parsed::Incomplete);
}

#[test]
fn bad_version_command_and_family_are_refused() {
    assert_eq!(
        parse(&v2(&[0x11])),
        Parsed::Invalid(Invalid::V2Version(0x11)),
        "refused as soon as the byte arrives"
    );
    assert_eq!(
        parse(&v2(&[0x22])),
        Parsed::Invalid(Invalid::V2Command(0x22))
    );
    for family in [0x01, 0x13, 0x23, 0x33, 0x41, 0x10, 0xFF] {
        let mut b = v2_tcp4();
        b[13] = family;
        assert_eq!(
            parse(&b),
            Parsed::Invalid(Invalid::V2Family(family)),
            "{family:#x}"
        );
    }
    // AF_INET6 announced with an AF_INET-sized block.
    let mut b = v2_tcp4();
    b[13] = 0x21;
    assert_eq!(
        parse(&b),
        Parsed::Invalid(Invalid::V2Short {
            family: 0x21,
            length: 12
        })
    );
    assert!(Invalid::V2Family(0x41).to_string().contains("0x41"));
}

#[test]
fn ipv4_mapped_addresses_are_written_as_ipv4() {
    // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
    let h = encode(
        ProxyVersion::V2,
        Transport::Stream,
        sa("[::ffff:192.168.0.1]:56324"),
        sa("[::ffff:192.168.0.11]:443"),
    );
    assert_eq!(h.as_bytes(), &v2_tcp4()[..]);
    let h = encode(
        ProxyVersion::V1,
        Transport::Stream,
        sa("[::ffff:192.168.0.1]:56324"),
        sa("192.168.0.11:443"),
    );
    assert_eq!(
        h.as_bytes(),
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
    );
    // Mixed families that cannot both be IPv4: the IPv4 one is mapped.
    let h = encode(
        ProxyVersion::V1,
        Transport::Stream,
        sa("10.0.0.1:1"),
        sa("[2001:db8::2]:2"),
    );
    assert_eq!(
        h.as_bytes(),
        b"PROXY TCP6 ::ffff:10.0.0.1 2001:db8::2 1 2\r\n"
    );
    assert_eq!(
        complete(h.as_bytes()).0,
        proxied("[::ffff:10.0.0.1]:1", "[2001:db8::2]:2", Transport::Stream)
    );
}

#[test]
fn encoded_headers_decode_to_what_was_encoded() {
    let pairs = [
        ("1.2.3.4:0", "5.6.7.8:65535"),
        ("[::1]:1", "[fe80::1]:2"),
        ("[2001:db8::1]:40000", "[2001:db8::1:2]:443"),
    ];
    for (s, d) in pairs {
        for version in [ProxyVersion::V1, ProxyVersion::V2] {
            let h = encode(version, Transport::Stream, sa(s), sa(d));
            let mut buf = h.as_bytes().to_vec();
            buf.extend_from_slice(b"data");
            assert_eq!(
                complete(&buf),
                (
                    proxied(s, d, Transport::Stream),
                    version,
                    h.as_bytes().len()
                )
            );
        }
    }
}
