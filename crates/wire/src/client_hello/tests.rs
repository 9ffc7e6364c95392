use super::*;

/// `hello` re-cut into records of at most `size` payload bytes each.
fn in_records(hello: &[u8], size: usize) -> Vec<u8> {
    let message = &hello[5..];
    let mut out = Vec::new();
    for chunk in message.chunks(size) {
        out.extend_from_slice(&[HANDSHAKE, 3, 1]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[test]
fn the_name_is_found_in_one_record() {
    let hello = example(Some("Www.Example.COM"));
    assert_eq!(parse(&hello), Hello::Found("www.example.com".into()));
}

#[test]
fn every_prefix_of_a_hello_asks_for_more() {
    let hello = example(Some("a.example.com"));
    for cut in 0..hello.len() {
        assert_eq!(parse(&hello[..cut]), Hello::NeedMore, "cut at {cut}");
    }
}

#[test]
fn a_hello_split_over_records_is_joined() {
    let hello = example(Some("split.example.com"));
    // One byte per record (even the handshake header is cut), then three.
    for size in [1, 3, 40] {
        let split = in_records(&hello, size);
        assert_eq!(
            parse(&split),
            Hello::Found("split.example.com".into()),
            "records of {size}"
        );
        for cut in 0..split.len() {
            assert_eq!(parse(&split[..cut]), Hello::NeedMore, "{size}, cut {cut}");
        }
    }
}

#[test]
fn bytes_after_the_hello_do_not_matter() {
    let mut hello = example(Some("a.example.com"));
    hello.extend_from_slice(b"\x14\x03\x03\x00\x01\x01 and anything");
    assert_eq!(parse(&hello), Hello::Found("a.example.com".into()));
}

#[test]
fn a_hello_without_the_extension_has_no_name() {
    assert_eq!(parse(&example(None)), Hello::NoSni);
    // Without any extensions at all.
    let mut hello = example(None);
    let body_end = hello.len() - 11; // the extensions' length and the one extension
    hello.truncate(body_end);
    let body = (hello.len() - 9) as u16;
    hello[7..9].copy_from_slice(&body.to_be_bytes());
    let rec = (hello.len() - 5) as u16;
    hello[3..5].copy_from_slice(&rec.to_be_bytes());
    assert_eq!(parse(&hello), Hello::NoSni);
}

#[test]
fn a_name_that_is_no_host_name_is_no_name() {
    for bad in ["", "a..b", "-\u{1}x", "a b.com", "é.com", "."] {
        assert_eq!(parse(&example(Some(bad))), Hello::NoSni, "{bad:?}");
    }
    assert_eq!(
        parse(&example(Some("trailing.dot."))),
        Hello::Found("trailing.dot".into())
    );
}

#[test]
fn garbage_is_not_tls_at_once() {
    for junk in [
        &b"GET / HTTP/1.1\r\n"[..],
        b"\x16\x02",                 // not version 3.x
        b"\x16\x03\x01\x00\x00",     // empty record
        b"\x16\x03\x01\x40\x01",     // record over 2^14
        b"\x16\x03\x01\x00\x05\x02", // a ServerHello, seen in a partial record
        b"\x80\x2e\x01\x03\x01",     // SSLv2-compatible hello
    ] {
        assert_eq!(parse(junk), Hello::NotTls, "{junk:?}");
    }
}

#[test]
fn a_record_of_another_type_after_the_first_is_not_tls() {
    let split = in_records(&example(Some("a.example.com")), 10);
    let mut bad = split[..15].to_vec();
    bad.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
    assert_eq!(parse(&bad), Hello::NotTls);
}

#[test]
fn lengths_that_overrun_their_message_are_not_tls() {
    let hello = example(Some("a.example.com"));
    // Each length byte inside the body set to its largest: the vector
    // overruns the message, which must be refused, never read past.
    for at in 9..hello.len() {
        let mut bad = hello.clone();
        bad[at] = 0xff;
        let got = parse(&bad);
        assert!(
            matches!(got, Hello::NotTls | Hello::NoSni | Hello::Found(_)),
            "byte {at}: {got:?}"
        );
    }
}

#[test]
fn an_oversized_hello_asks_for_more_until_the_caller_gives_up() {
    // A handshake length of 2^24 - 1: the parser cannot know it is too big
    // before the caller's bound (`tcp::sni::MAX_HELLO`) is reached.
    let mut hello = vec![HANDSHAKE, 3, 1, 0x40, 0x00, CLIENT_HELLO, 0xff, 0xff, 0xff];
    hello.resize(5 + (1 << 14), 0);
    let mut more = hello.clone();
    more.extend_from_slice(&hello);
    more[5 + (1 << 14)..][..5].copy_from_slice(&[HANDSHAKE, 3, 1, 0x40, 0x00]);
    assert_eq!(parse(&more), Hello::NeedMore);
}

#[test]
fn patterns_match_exact_names_and_suffixes() {
    let exact = NamePattern::parse("API.example.com").unwrap();
    let wild = NamePattern::parse("*.example.com").unwrap();
    assert!(exact.matches("api.example.com"));
    assert!(!exact.matches("x.api.example.com"));
    assert!(wild.matches("a.example.com"));
    assert!(wild.matches("a.b.example.com"));
    assert!(!wild.matches("example.com"));
    assert!(!wild.matches("badexample.com"));
    assert_eq!(wild.to_string(), "*.example.com");
    for bad in ["", "*", "*.", "a.*.com", "x.com.", "a b", "**.x.com"] {
        assert!(NamePattern::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_most_specific_pattern_wins() {
    let ps: Vec<NamePattern> = ["*.example.com", "*.eu.example.com", "www.eu.example.com"]
        .iter()
        .map(|p| NamePattern::parse(p).unwrap())
        .collect();
    assert_eq!(best_match(&ps, "www.eu.example.com"), Some(2));
    assert_eq!(best_match(&ps, "a.eu.example.com"), Some(1));
    assert_eq!(best_match(&ps, "a.example.com"), Some(0));
    assert_eq!(best_match(&ps, "example.org"), None);
}

#[test]
fn a_real_clients_hello_is_read_whole_and_re_cut() {
    // Captured from `openssl s_client -servername real.example.com` (the fuzz seeds).
    let seeds = "fuzz/seeds/client_hello";
    for (file, want) in [
        ("openssl_s_client", Hello::Found("real.example.com".into())),
        (
            "openssl_one_byte_records",
            Hello::Found("real.example.com".into()),
        ),
        (
            "openssl_100_byte_records",
            Hello::Found("real.example.com".into()),
        ),
        ("truncated", Hello::NeedMore),
        ("http_request", Hello::NotTls),
    ] {
        let path = format!("{}/../../{seeds}/{file}", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(parse(&bytes), want, "{file}");
    }
}

/// How many looks a reader that peeks only once `parse_wanting`'s count has
/// arrived takes over `bytes`, first looking at `first` of them; and what
/// it decides.
fn looks(bytes: &[u8], first: usize) -> (usize, Hello) {
    let mut n = first.min(bytes.len());
    for look in 1..=1000 {
        let (hello, want) = parse_wanting(&bytes[..n]);
        if hello != Hello::NeedMore || n == bytes.len() {
            return (look, hello);
        }
        assert!(want > n, "asks for more than it has: {want} at {n}");
        n = want.min(bytes.len());
    }
    panic!("no verdict in 1000 looks");
}

#[test]
fn the_count_wanted_never_skips_a_verdict() {
    let hello = example(Some("want.example.com"));
    for size in [1, 2, 5, 40, 16 * 1024] {
        let split = in_records(&hello, size);
        for cut in 0..split.len() {
            let (verdict, want) = parse_wanting(&split[..cut]);
            assert_eq!(verdict, Hello::NeedMore, "records of {size}, cut at {cut}");
            assert!(
                want > cut && want <= split.len(),
                "records of {size}, cut at {cut}: {want}"
            );
        }
        let whole = looks(&split, 1).1;
        assert_eq!(
            whole,
            Hello::Found("want.example.com".into()),
            "records of {size}"
        );
    }
}

#[test]
fn a_16_kib_hello_takes_few_looks_however_it_is_cut() {
    // The name last, behind a padding extension, so the whole message is read.
    let small = example(Some("far.example.com"));
    for (size, most) in [(16 * 1024, 3), (1000, 4), (16, 10), (1, 48)] {
        let mut pad = 100;
        let hello = loop {
            let h = padded(&small, pad);
            if in_records(&padded(&small, pad + 64), size).len() > 16 * 1024 {
                break h;
            }
            pad += 64;
        };
        let split = in_records(&hello, size);
        let (count, verdict) = looks(&split, 1);
        assert_eq!(verdict, Hello::Found("far.example.com".into()));
        assert!(
            count <= most,
            "records of {size}: {count} looks over {} bytes",
            split.len()
        );
    }
}

/// `hello` (one record, from `example`) with a padding extension of `pad`
/// bytes of data in front of its others.
fn padded(hello: &[u8], pad: usize) -> Vec<u8> {
    // The extensions' length: after the record (5) and handshake (4)
    // headers, version and random (34), session id (1), suites (4) and
    // compression (2).
    let at = 5 + 4 + 34 + 1 + 4 + 2;
    let ext_len = usize::from(u16::from_be_bytes([hello[at], hello[at + 1]])) + 4 + pad;
    let mut out = hello[..at].to_vec();
    out.extend_from_slice(&(ext_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 21]);
    out.extend_from_slice(&(pad as u16).to_be_bytes());
    out.resize(out.len() + pad, 0);
    out.extend_from_slice(&hello[at + 2..]);
    let record = out.len() - 5;
    out[3..5].copy_from_slice(&(record as u16).to_be_bytes());
    let body = record - 4;
    out[6..9].copy_from_slice(&[(body >> 16) as u8, (body >> 8) as u8, body as u8]);
    out
}
