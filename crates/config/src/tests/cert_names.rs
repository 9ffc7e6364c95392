//! `tls-allow-subject` and `tls-allow-issuer` through both parsers, from
//! the fuzz seeds (which the convert round trip reads too): every entry
//! kept in the order written, a bad one reported with what is wrong.
//! Here, above the parsers: `cert_name` is below them.

use crate::{parse, parse_yaml};

#[test]
fn both_formats_keep_every_entry_in_order() {
    let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds");
    let read = |f: &str| std::fs::read_to_string(format!("{seeds}/{f}")).expect("seed");
    let conf = parse(&read("config_parse/tls_allow")).expect("conf seed parses");
    let o = &conf.rules[0].options;
    let subjects = ["CN=alice*", "CN=Bob Smith", "OU=ops"];
    assert_eq!(
        o.tls_allow_subject.as_deref(),
        Some(&subjects.map(String::from).to_vec())
    );
    assert_eq!(
        o.tls_allow_issuer.as_deref(),
        Some(&vec!["CN=team-?-ca".to_string()])
    );
    let yaml = parse_yaml(&read("yaml_parse/tls_allow")).expect("YAML seed parses");
    let o = &yaml.rules[0].options;
    let subjects = ["CN=alice*", "OU=ops", "CN=Bob Smith"];
    assert_eq!(
        o.tls_allow_subject.as_deref(),
        Some(&subjects.map(String::from).to_vec())
    );
    assert_eq!(
        o.tls_allow_issuer.as_deref(),
        Some(&vec!["CN=team-ca".to_string()])
    );
    for bad in ["config_parse/tls_allow_bad"] {
        let e = parse(&read(bad)).expect_err("bad entries are refused");
        let text = e.to_string();
        for what in [
            "needs ATTRIBUTE=PATTERN",
            "unknown attribute 'XX'",
            "needs a pattern",
        ] {
            assert!(text.contains(what), "{what}: {text}");
        }
    }
    let e = parse_yaml(&read("yaml_parse/tls_allow_bad")).expect_err("refused");
    let text = e.to_string();
    for what in ["unknown attribute 'ZZ'", "write ? for a comma"] {
        assert!(text.contains(what), "{what}: {text}");
    }
}
