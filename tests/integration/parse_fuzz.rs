//! The parser never panics: random bytes and random mutations of valid lines,
//! from a fixed seed so failures reproduce.

use oxidinetd::acl;
use oxidinetd::config::{parse, parse_yaml, ConfigErrors, MAX_ERRORS};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// xorshift64*: small, seeded, good enough to shake a parser.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const VALID: &[&str] = &[
    "0.0.0.0 80 10.0.0.1 8080",
    "[::1] 80/udp ::1 81/udp [timeout=5, maxassoc=3]",
    "127.0.0.1 http 127.0.0.1 81 [src=127.0.0.2, splice=off] # c",
    "localhost snmp-trap/udp db.example.com 162/udp",
    "allow 127.*",
    "deny 10.0.0.0/8",
    "allow fe80::/10",
    "logfile \"/var/log/x y.log\"",
    "pidlogfile /run/oi.pid",
    "logcommon",
    "# comment",
    "\t 1.2.3.4\t1\t5.6.7.8\t65535\r",
    "0.0.0.0 81 10.0.0.1 80 [keepalive=off, connect-timeout=5, dns-refresh=0, mode=0660]",
    "pidfile /run/oi.pid",
    "buffersize 65536",
    "dns-multi-ip-proto any",
    "listen-backlog 128",
    "statusformat json",
    "alow 10.*",
    "0.0.0.0 82 10.0.0.1 80 [timeout=5 src=127.0.0.1]",
];

/// Bytes that matter to the grammar, to make mutations interesting.
const SPICE: &[u8] = b" \t\r\n#[]=,/:.*?\"'0123456789abcxyz-_\xff\xc3";

fn mutate(rng: &mut Rng, line: &str) -> Vec<u8> {
    let mut bytes = line.as_bytes().to_vec();
    for _ in 0..=rng.below(4) {
        let pos = rng.below(bytes.len() + 1);
        match rng.below(4) {
            0 if pos < bytes.len() => {
                bytes.remove(pos);
            }
            1 if pos < bytes.len() => bytes[pos] = SPICE[rng.below(SPICE.len())],
            2 => bytes.insert(pos, SPICE[rng.below(SPICE.len())]),
            _ => {
                let other = VALID[rng.below(VALID.len())].as_bytes();
                let start = rng.below(other.len());
                let end = start + rng.below(other.len() - start + 1);
                bytes.splice(pos..pos, other[start..end].iter().copied());
            }
        }
    }
    bytes
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x5EED_0001);
    for _ in 0..2000 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len).map(|_| (rng.next() & 0xff) as u8).collect();
        let text = String::from_utf8_lossy(&bytes);
        if let Err(errors) = parse(&text) {
            assert_report_bounded(&errors);
        }
    }
}

/// Generous bound on one listed error's bytes: a constant message, two quoted
/// values and the line, each cut to MAX_SHOWN_CHARS characters of up to 4 bytes.
const MAX_ERROR_BYTES: usize = 2048;

/// An error report is small and shows no raw control characters,
/// whatever the input.
fn assert_report_bounded(errors: &ConfigErrors) {
    assert!(errors.errors.len() <= MAX_ERRORS);
    let report = errors.to_string();
    assert!(report.len() <= (MAX_ERRORS + 1) * MAX_ERROR_BYTES);
    for line in report.lines() {
        assert!(line.len() <= MAX_ERROR_BYTES, "{line:?}");
        assert!(!line.chars().any(char::is_control), "{line:?}");
    }
}

#[test]
fn hostile_files_give_bounded_reports() {
    let mut rng = Rng(0x5EED_0003);
    for _ in 0..50 {
        // Many long lines of grammar bytes and controls: each line is bad
        // several times over, and there are more bad lines than the cap.
        let mut file = Vec::new();
        for _ in 0..rng.below(300) {
            for _ in 0..rng.below(2000) {
                file.push(match rng.below(3) {
                    0 => SPICE[rng.below(SPICE.len())],
                    1 => (rng.next() & 0x1f) as u8,
                    _ => b',',
                });
            }
            file.push(b'\n');
        }
        if let Err(errors) = parse(&String::from_utf8_lossy(&file)) {
            assert_report_bounded(&errors);
        }
    }
}

/// The committed fuzz seeds (fuzz/seeds/config_parse) go through the parser
/// here too, so they keep meaning something without cargo-fuzz installed.
#[test]
fn fuzz_seeds_never_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/config_parse");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz seeds directory") {
        let bytes = std::fs::read(entry.expect("seed entry").path()).expect("read seed");
        if let Err(errors) = parse(&String::from_utf8_lossy(&bytes)) {
            assert_report_bounded(&errors);
        }
        seen += 1;
    }
    assert!(seen >= 10, "only {seen} seeds in {}", dir.display());
}

#[test]
fn mutated_lines_never_panic() {
    let mut rng = Rng(0x5EED_0002);
    let mut oks = 0;
    for _ in 0..4000 {
        let mut file = Vec::new();
        for _ in 0..=rng.below(5) {
            let line = VALID[rng.below(VALID.len())];
            file.extend(mutate(&mut rng, line));
            file.push(b'\n');
        }
        let text = String::from_utf8_lossy(&file);
        match parse(&text) {
            Ok(config) => {
                oks += 1;
                // Whatever parsed must also evaluate without panicking.
                let clients = [
                    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
                    IpAddr::V6(Ipv6Addr::LOCALHOST),
                    IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped()),
                ];
                for rule in &config.rules {
                    for c in clients {
                        let _ = acl::check(&config.global_acl, &rule.acl, c);
                    }
                }
            }
            Err(errors) => {
                assert!(!errors.errors.is_empty());
                assert_report_bounded(&errors);
            }
        }
    }
    // The mutations are mild enough that some files stay valid.
    assert!(oks > 0);
}

/// A YAML file using every key, to mutate.
const YAML: &str = "global:\n  log_file: /x\n  buffer_size: 4096\n  status: {enabled: true, format: text}\n  access: {allow: ['10.*'], deny: '10.0.0.0/8'}\nrules:\n  - name: a\n    bind: ['127.0.0.1:80', '[::1]:80/tcp']\n    connect:\n      - {dest: '127.0.0.2:81', weight: 2, name: x, src: 127.0.0.3, dns_refresh: 0}\n      - 127.0.0.4:81\n    load_balancing: {algorithm: iphash, health_threshold: 3, recovery_timeout: 5, affinity_ttl: 9, affinity_max_entries: 100}\n    timeout: 5\n    keepalive: false\n    connect_timeout: 2\n    mode: '0660'\n";

#[test]
fn the_yaml_sample_parses() {
    let c = parse_yaml(YAML).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.rules.len(), 2);
}

#[test]
fn mutated_yaml_never_panics() {
    let mut rng = Rng(0x5EED_0004);
    let mut oks = 0;
    for _ in 0..3000 {
        let bytes = mutate(&mut rng, YAML);
        match parse_yaml(&String::from_utf8_lossy(&bytes)) {
            Ok(c) => {
                oks += 1;
                for r in &c.rules {
                    assert!(!r.backends.is_empty(), "connect() reads the first: {r:?}");
                }
            }
            Err(errors) => {
                assert!(errors.errors.iter().all(|e| e.line >= 1 && e.column >= 1));
                assert_report_bounded(&errors);
            }
        }
    }
    assert!(oks > 0);
}

/// Bytes that matter to YAML's grammar.
const YAML_SPICE: &[u8] = b"{}[]-:&*!|>'\"\n ";

#[test]
fn hostile_yaml_gives_bounded_reports() {
    let mut rng = Rng(0x5EED_0005);
    for _ in 0..200 {
        let len = rng.below(3000);
        let bytes: Vec<u8> = (0..len)
            .map(|_| match rng.below(3) {
                0 => SPICE[rng.below(SPICE.len())],
                1 => YAML_SPICE[rng.below(YAML_SPICE.len())],
                _ => (rng.next() & 0xff) as u8,
            })
            .collect();
        if let Err(errors) = parse_yaml(&String::from_utf8_lossy(&bytes)) {
            assert_report_bounded(&errors);
        }
    }
    // Deep nesting, a thousand bad rules, a huge key: all bounded.
    let deep = format!("rules: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_report_bounded(&parse_yaml(&deep).expect_err("too deep"));
    let many = "rules:\n".to_string() + &"  - {name: a, bind: x, connect: y}\n".repeat(1000);
    let e = parse_yaml(&many).expect_err("bad rules");
    assert_eq!(e.errors.len(), MAX_ERRORS);
    assert_report_bounded(&e);
    let huge = format!("{}: 1\n", "k\u{1b}".repeat(100_000));
    assert_report_bounded(&parse_yaml(&huge).expect_err("unknown key"));
}

/// The committed YAML fuzz seeds (fuzz/seeds/yaml_parse) go through the parser here too.
#[test]
fn yaml_fuzz_seeds_never_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/yaml_parse");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz seeds directory") {
        let bytes = std::fs::read(entry.expect("seed entry").path()).expect("read seed");
        if let Err(errors) = parse_yaml(&String::from_utf8_lossy(&bytes)) {
            assert_report_bounded(&errors);
        }
        seen += 1;
    }
    assert!(seen >= 3, "only {seen} seeds in {}", dir.display());
}
