//! The parser never panics: random bytes and random mutations of valid lines,
//! from a fixed seed so failures reproduce.

use oxidinetd::acl;
use oxidinetd::config::parse;
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
        let _ = parse(&text);
    }
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
            Err(errors) => assert!(!errors.errors.is_empty()),
        }
    }
    // The mutations are mild enough that some files stay valid.
    assert!(oks > 0);
}
