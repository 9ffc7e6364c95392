//! The model's tests: rates, sorting, filtering, parsing, the text table.

use super::*;

fn status(total: u64, from: u64, refused: u64) -> String {
    serde_json::json!({
        "oi": {"descriptors": 40, "descriptors_limit": 1024},
        "rules": [
            {"name": "0.0.0.0:80/tcp", "connections_active": 3, "connections_total": total,
             "oi": {"bytes_from_clients": from, "bytes_to_clients": 2 * from,
                    "acl_denied": refused, "limit_reached": 1, "connect_failed_timeout": 2},
             "backends": [
                {"name": "10.0.0.5:80", "healthy": true, "connections_active": 2,
                 "oi": {"bytes_from_clients": from, "bytes_to_clients": 0}},
                {"name": "10.0.0.6:80", "healthy": false, "connections_active": 1,
                 "oi": {"bytes_from_clients": 0, "bytes_to_clients": 0}}]},
            {"name": "0.0.0.0:53/udp", "connections_active": 9, "connections_total": 9,
             "oi": {}, "backends": []}
        ]
    })
    .to_string()
}

fn conns(age: f64, from: u64) -> String {
    serde_json::json!([
        {"rule": "0.0.0.0:80/tcp", "kind": "tcp", "client": "192.0.2.1:5000",
         "backend": "10.0.0.5:80", "age_seconds": age, "bytes_from_client": from,
         "bytes_to_client": 0},
        {"rule": "0.0.0.0:80/tcp", "kind": "tcp", "client": "192.0.2.2:5000",
         "backend": "10.0.0.5:80", "age_seconds": age, "bytes_from_client": 10,
         "bytes_to_client": 0}
    ])
    .to_string()
}

#[test]
fn rates_are_differences_over_the_gap() {
    let a = Sample::parse(&status(100, 1000, 0), &conns(5.0, 0), 10.0).unwrap();
    let b = Sample::parse(&status(120, 5000, 4), &conns(7.0, 4000), 12.0).unwrap();
    let v = view(Some(&a), &b, &ViewOptions::default());
    assert_eq!(v.elapsed, 2.0);
    assert_eq!(v.rules[0].new_per_s, 10.0);
    assert_eq!(v.rules[0].in_per_s, 2000.0);
    assert_eq!(v.rules[0].out_per_s, 4000.0);
    assert_eq!(v.rules[0].refused, 5);
    assert_eq!(v.rules[0].errors, 2);
    assert_eq!(v.active, 12);
    assert_eq!(v.descriptors, "40/1024");
    // Backends: health, load share, rate.
    assert!(v.backends[0].up && !v.backends[1].up);
    assert!((v.backends[0].load - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(v.backends[0].bytes_per_s, 2000.0);
    // The busy connection first, rated over the gap; the quiet one has
    // moved nothing since.
    assert_eq!(v.conns[0].client, "192.0.2.1:5000");
    assert_eq!(v.conns[0].in_per_s, 2000.0);
    assert_eq!(v.conns[1].in_per_s, 0.0);
}

#[test]
fn first_sample_and_restarts_give_zero_rates() {
    let a = Sample::parse(&status(100, 5000, 0), "[]", 1.0).unwrap();
    let v = view(None, &a, &ViewOptions::default());
    assert_eq!((v.new_per_s, v.in_per_s), (0.0, 0.0));
    // Counters lower than before: oi restarted; no negative or huge rate.
    let b = Sample::parse(&status(3, 10, 0), "[]", 2.0).unwrap();
    let v = view(Some(&a), &b, &ViewOptions::default());
    assert_eq!((v.new_per_s, v.in_per_s), (0.0, 0.0));
}

#[test]
fn sorting_and_filtering() {
    let a = Sample::parse(&status(100, 1000, 0), "[]", 0.0).unwrap();
    let mut opts = ViewOptions::default();
    assert_eq!(view(None, &a, &opts).rules[0].name, "0.0.0.0:80/tcp");
    opts.sort = SortBy::Config.next();
    assert_eq!(opts.sort, SortBy::Active);
    assert_eq!(view(None, &a, &opts).rules[0].name, "0.0.0.0:53/udp");
    // f: each rule in turn, then all.
    opts.next_filter(&a);
    assert_eq!(opts.filter.as_deref(), Some("0.0.0.0:80/tcp"));
    let v = view(None, &a, &opts);
    assert_eq!(v.rules.len(), 1);
    assert_eq!(v.active, 3);
    opts.next_filter(&a);
    assert_eq!(opts.filter.as_deref(), Some("0.0.0.0:53/udp"));
    assert!(view(None, &a, &opts).backends.is_empty());
    opts.next_filter(&a);
    assert_eq!(opts.filter, None);
    // Every order comes back round.
    let mut s = SortBy::Config;
    for _ in 0..5 {
        s = s.next();
    }
    assert_eq!(s, SortBy::Config);
}

#[test]
fn bad_answers_are_errors_and_missing_keys_zero() {
    assert!(Sample::parse("not json", "[]", 0.0).is_err());
    assert!(Sample::parse("{}", "oops", 0.0).is_err());
    let s = Sample::parse(r#"{"rules":[{"name":"r"}]}"#, "[]", 0.0).unwrap();
    assert_eq!(s.rules[0].active, 0);
    assert_eq!(s.descriptors, None);
    assert_eq!(view(None, &s, &ViewOptions::default()).descriptors, "-");
}

#[test]
fn text_table_lists_rules_backends_and_connections() {
    let a = Sample::parse(&status(100, 1000, 0), &conns(5.0, 0), 10.0).unwrap();
    let b = Sample::parse(&status(120, 5000, 4), &conns(7.0, 4000), 12.0).unwrap();
    let opts = ViewOptions::default();
    let t = text(&view(Some(&a), &b, &opts), &opts);
    assert!(t.contains("0.0.0.0:80/tcp"), "{t}");
    assert!(t.contains("10.0.0.6:80") && t.contains("DOWN"), "{t}");
    assert!(t.contains("192.0.2.1:5000"), "{t}");
    assert!(t.contains("2.0K/s"), "{t}");
}

#[test]
fn human_rates() {
    assert_eq!(human_rate(0.0), "0B/s");
    assert_eq!(human_rate(1536.0), "1.5K/s");
    assert_eq!(human_rate(3.0 * 1024.0 * 1024.0), "3.0M/s");
    assert_eq!(human_rate(-5.0), "0B/s");
}

#[test]
fn a_tls_rule_gets_a_row_with_both_sides_summed_and_others_none() {
    let st = serde_json::json!({
        "rules": [
            {"name": "0.0.0.0:443/tcp", "oi": {"tls": {
                "terminates": true, "originates": true, "expires_in_days": 9,
                "client": {"handshakes": 5, "resumed": 2, "failed": 1},
                "backend": {"handshakes": 4, "resumed": 0, "failed": 3}}}},
            {"name": "0.0.0.0:80/tcp", "oi": {}}
        ]
    })
    .to_string();
    let s = Sample::parse(&st, "[]", 0.0).unwrap();
    let v = view(None, &s, &ViewOptions::default());
    assert_eq!(v.tls.len(), 1, "only the TLS rule: {:?}", v.tls);
    let t = &v.tls[0];
    assert_eq!(
        (t.ends, t.handshakes, t.resumed, t.failed),
        ("both", 9, 2, 4)
    );
    assert_eq!(t.expires(), "9d");
    assert!(t.trouble(), "failures and a certificate under 14 days");
    let text = text(&v, &ViewOptions::default());
    assert!(
        text.contains("HANDSHAKES") && text.contains(" both "),
        "{text}"
    );
}
